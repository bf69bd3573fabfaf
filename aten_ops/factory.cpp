// Factories and fills: empty, empty_strided, fill_, zero_, and the range factories (arange, linspace, eye).
// zeros/ones/full/*_like/scalar_tensor are CompositeExplicitAutograd in torch and reach these kernels.

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linspace.h>
#include <c10/core/TensorOptions.h>
#include <torch/library.h>

#include <algorithm>

#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == at::kStrided, "tiny supports only strided tensors, got layout ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  return empty_tiny(size, c10::dtype_or_default(dtype), c10::device_or_default(device), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == at::kStrided, "tiny supports only strided tensors, got layout ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  return empty_tiny(size, stride, c10::dtype_or_default(dtype), c10::device_or_default(device));
}

// The elements of `self` once each: fill is idempotent, so torch lets it write through an expanded
// (overlapping) view; a stride-0 dimension is written at a single index.
runtime::StridedView fill_target(const at::Tensor& self) {
  runtime::StridedView view = strided_view(self);
  for (size_t d = 0; d < view.sizes.size(); ++d)
    if (view.strides[d] == 0) view.sizes[d] = std::min<int64_t>(view.sizes[d], 1);
  return view;
}

void fill_with(const at::Tensor& self, UOpPtr value) {
  if (self.numel() == 0) return;
  if (self.is_neg()) value = alu(Ops::NEG, value); // the storage of a negative view holds -value
  runtime::StridedView target = fill_target(self);
  lazy_buffer(self).write(target, value);
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  runtime::StridedView target = fill_target(self);
  UOpPtr c = scalar_constant(value, target.dtype, target.sizes); // converts (and checks) even when empty
  fill_with(self, c);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (value.device() != self.device()) return fill_scalar(self, value.item());
  // A tiny value stays lazy: the fill reads it without a sync.
  runtime::StridedView target = fill_target(self);
  UOpPtr v = read(value);
  if (v->dtype != target.dtype) v = cast(v, target.dtype);
  if (!target.sizes.empty())
    v = view(v, ShapeTracker::from_shape({}).reshape(Shape(target.sizes.size(), 1)).expand(target.sizes));
  fill_with(self, v);
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// Ranges are built once, at construction, and small; their element counts and rounding are torch's own
// rules. So they are computed by torch on the CPU, into a CPU tensor shaped like `out` (so out= warnings
// and resizing are torch's), and copied to tiny once. A tiny kernel for them can come when it matters.
at::Tensor& from_cpu(at::Tensor& out, const at::Tensor& cpu) {
  if (!out.sizes().equals(cpu.sizes())) out.resize_(cpu.sizes());
  out.copy_(cpu);
  return out;
}

at::Tensor cpu_like(const at::Tensor& out) { return at::empty(out.sizes(), out.options().device(at::kCPU)); }

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  at::Tensor cpu = cpu_like(out);
  at::arange_out(cpu, start, end, step);
  return from_cpu(out, cpu);
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  at::Tensor cpu = cpu_like(out);
  at::linspace_out(cpu, start, end, steps);
  return from_cpu(out, cpu);
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) {
  at::Tensor cpu = cpu_like(out);
  at::eye_out(cpu, n);
  return from_cpu(out, cpu);
}

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  at::Tensor cpu = cpu_like(out);
  at::eye_out(cpu, n, m);
  return from_cpu(out, cpu);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
  m.impl("eye.out", eye_out);
  m.impl("eye.m_out", eye_m_out);
}

} // namespace tiny::aten_ops
