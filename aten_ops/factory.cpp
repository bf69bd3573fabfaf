// Factories and fills: empty, empty_strided, fill_, zero_, the range factories (arange, linspace, logspace,
// eye), and tril_indices/triu_indices.
// zeros/ones/full/*_like/scalar_tensor are CompositeExplicitAutograd in torch and reach these kernels.

#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/RangeFactories.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/linspace_native.h>
#include <c10/core/TensorOptions.h>
#include <torch/library.h>

#include <algorithm>
#include <complex>
#include <type_traits>

#include "aten_ops/builders.h"
#include "aten_ops/complex_math.h"
#include "csrc/kernel_library.h"
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

// torch's immutable zero tensor (autograd formulas return it for gradients known to be zero: sgn's of a
// real input): no storage (a null data pointer) and the ZeroTensor key, whose kernels and fallback
// materialize it as zeros before any tiny kernel sees it, as the CPU's and CUDA's _efficientzerotensor.
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  (void)layout;
  (void)pin_memory;
  at::Device d = c10::device_or_default(device);
  at::native::ZeroTensorAllocator allocator(d);
  auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype), std::nullopt);
}

// The elements of `self` once each (a complex tensor's as (real, imaginary) pairs): fill is idempotent, so
// torch lets it write through an expanded (overlapping) view; a stride-0 dimension is written at a single
// index.
runtime::StridedView fill_target(const at::Tensor& self) {
  runtime::StridedView view = element_view(self);
  for (size_t d = 0; d < view.sizes.size(); ++d)
    if (view.strides[d] == 0) view.sizes[d] = std::min<int64_t>(view.sizes[d], 1);
  return view;
}

void fill_with(const at::Tensor& self, UOpPtr value) {
  if (self.numel() == 0) return;
  if (self.is_conj()) value = conjugated(value);
  if (self.is_neg()) value = alu(Ops::NEG, value); // the storage of a negative view holds -value
  runtime::StridedView target = fill_target(self);
  lazy_buffer(self).write(target, value);
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  runtime::StridedView target = fill_target(self);
  if (self.is_complex()) {
    Shape parts(target.sizes.begin(), target.sizes.end() - 1);
    fill_with(self, scalar_value(value, self.scalar_type(), parts));
    return self;
  }
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
  UOpPtr v = self.is_complex() ? read_complex(value) : read(value);
  if (v->dtype != target.dtype) v = cast(v, target.dtype);
  if (self.is_complex()) {
    Shape pair(target.sizes.size() - 1, 1);
    pair.push_back(2);
    v = reshape(v, pair);
  }
  if (self.is_complex())
    v = expand(v, target.sizes);
  else if (!target.sizes.empty())
    v = view(v, ShapeTracker::from_shape({}).reshape(Shape(target.sizes.size(), 1)).expand(target.sizes));
  fill_with(self, v);
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// The range factories compute on tiny from an iota. torch's own arange_out and linspace_out check the
// arguments, compute the element count (with torch's rounding), resize out= (with torch's warning) and
// call the per-device kernel stubs; tiny's stubs below build the values. The arithmetic is the CPU
// kernels': arange is start + step * i in the accumulate type (double for float32), linspace steps
// from both ends (start + step * i for the first half, end - step * (steps - 1 - i) after it) in the
// result dtype (double for integer results).

// torch's at::acc_type<scalar_t, /*is_cuda=*/false>
DType cpu_acc_type(DType dt) {
  switch (dt) {
  case DType::Float16:
  case DType::BFloat16:
    return DType::Float32;
  case DType::Float32:
  case DType::Float64:
    return DType::Float64;
  default:
    return DType::Int64;
  }
}

void arange_kernel(at::TensorIterator& iter, const at::Scalar& start, const at::Scalar& size, const at::Scalar& step) {
  const at::Tensor& out = iter.tensor(0);
  int64_t n = size.to<int64_t>();
  DType dt = to_tiny_dtype(out.scalar_type()), acc = cpu_acc_type(dt);
  UOpPtr idx = iota(n, acc);
  // start and step are runtime scalars: another range of the same length compiles nothing
  UOpPtr v = alu(Ops::ADD, scalar_constant(start, acc, {n}), alu(Ops::MUL, scalar_constant(step, acc, {n}), idx));
  write(out, cast(v, dt));
}

// linspace's values (steps >= 2): start + step * i for the first half, end - step * (steps - 1 - i) for
// the second, in step_t; start and end converted to the result dtype first, then to step_t (torch's order).
UOpPtr evenly_spaced(const at::Scalar& start, const at::Scalar& end, int64_t steps, DType dt, DType step_t) {
  Shape shape{steps};
  UOpPtr lo = cast(scalar_constant(start, dt, shape), step_t), hi = cast(scalar_constant(end, dt, shape), step_t);
  UOpPtr step = alu(Ops::FDIV, alu(Ops::SUB, hi, lo), scalar_constant(at::Scalar(steps - 1), step_t, shape));
  UOpPtr i = iota(steps, DType::Int64);
  UOpPtr from_end = alu(Ops::SUB, scalar_constant(at::Scalar(steps - 1), DType::Int64, shape), i);
  UOpPtr first_half = alu(Ops::CMPLT, i, scalar_constant(at::Scalar(steps / 2), DType::Int64, shape));
  return where(first_half, alu(Ops::ADD, lo, alu(Ops::MUL, step, cast(i, step_t))),
               alu(Ops::SUB, hi, alu(Ops::MUL, step, cast(from_end, step_t))));
}

// linspace of a complex dtype: in the result's complex type, the step each part's difference over steps - 1
// (c10 divides a complex value by an integer part by part), the second half from the end.
void complex_linspace(const at::Scalar& start, const at::Scalar& end, int64_t steps, const at::Tensor& out) {
  namespace cm = complex_math;
  at::ScalarType st = out.scalar_type();
  DType dt = element_dtype(st);
  Shape shape{steps};
  cm::Cx lo = cm::parts_of(scalar_value(start, st, shape)), hi = cm::parts_of(scalar_value(end, st, shape));
  UOpPtr intervals = scalar_constant(at::Scalar(steps - 1), dt, shape);
  cm::Cx step = {alu(Ops::FDIV, alu(Ops::SUB, hi.re, lo.re), intervals),
                 alu(Ops::FDIV, alu(Ops::SUB, hi.im, lo.im), intervals)};
  UOpPtr i = iota(steps, DType::Int64);
  UOpPtr from_end = alu(Ops::SUB, scalar_constant(at::Scalar(steps - 1), DType::Int64, shape), i);
  UOpPtr first_half = alu(Ops::CMPLT, i, scalar_constant(at::Scalar(steps / 2), DType::Int64, shape));
  cm::Cx up = cm::add(lo, cm::scale(step, cast(i, dt))), down = cm::sub(hi, cm::scale(step, cast(from_end, dt)));
  write_complex(out, join_complex(where(first_half, up.re, down.re), where(first_half, up.im, down.im)));
}

void linspace_kernel(at::TensorIterator& iter, const at::Scalar& start, const at::Scalar& end, int64_t steps) {
  const at::Tensor& out = iter.tensor(0);
  if (out.is_complex()) return complex_linspace(start, end, steps, out);
  DType dt = to_tiny_dtype(out.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(dt != DType::Bool, "\"linspace_cpu\" not implemented for 'Bool'");
  write(out, cast(evenly_spaced(start, end, steps, dt, is_float(dt) ? dt : DType::Float64), dt));
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  return at::native::arange_out(start, end, step, out);
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  if (out.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  return at::native::linspace_out(start, end, steps, out);
}

// torch's logspace of a complex dtype: base ** (start + step * i) in the result's complex type (complex<float>
// for complex64), step = (end - start) / (steps - 1) by c10's division, from the end for the second half
// as linspace; the power is glibc's cpow, exp(w log base). One step is std::pow(double base, complex<double>
// start), as the CPU fills it.
void complex_logspace(const at::Scalar& start, const at::Scalar& end, int64_t steps, double base,
                      const at::Tensor& out) {
  namespace cm = complex_math;
  at::ScalarType st = out.scalar_type();
  if (steps == 1) {
    std::complex<double> v = std::pow(base, static_cast<std::complex<double>>(start.toComplexDouble()));
    write_complex(out, scalar_value(at::Scalar(c10::complex<double>(v)), st, {1}));
    return;
  }
  // at base 0 cpow multiplies infinities by C's rules for complex products: the CPU fallback computes it
  if (base == 0) to_tiny_dtype(st); // NotNativeDtype
  DType dt = element_dtype(st);
  Shape shape{steps};
  cm::Cx lo = cm::parts_of(scalar_value(start, st, shape)), hi = cm::parts_of(scalar_value(end, st, shape));
  UOpPtr zero = cm::like(lo.re, 0.0);
  cm::Cx step = cm::div(cm::sub(hi, lo), {scalar_constant(at::Scalar(steps - 1), dt, shape), zero});
  UOpPtr i = iota(steps, DType::Int64);
  UOpPtr from_end = alu(Ops::SUB, scalar_constant(at::Scalar(steps - 1), DType::Int64, shape), i);
  UOpPtr first_half = alu(Ops::CMPLT, i, scalar_constant(at::Scalar(steps / 2), DType::Int64, shape));
  cm::Cx up = cm::add(lo, cm::mul(step, {cast(i, dt), zero}));
  cm::Cx down = cm::sub(hi, cm::mul(step, {cast(from_end, dt), zero}));
  cm::Cx exponent = {where(first_half, up.re, down.re), where(first_half, up.im, down.im)};
  cm::Cx b = {scalar_constant(at::Scalar(base), dt, shape), zero};
  write_complex(out, cm::pairs_of(cm::exp(cm::mul(exponent, cm::log(b)))));
}

// torch's logspace_out (a CPU function, not a stub): base ** (start + step * i) in double, from the end
// for the second half as linspace, start and end converted to the result dtype first; one step fills
// base ** start. Integer results truncate; bool takes only zero or one step.
at::Tensor& logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  if (steps == 0) return out;
  if (out.is_complex()) {
    complex_logspace(start, end, steps, base, out);
    return out;
  }
  DType dt = to_tiny_dtype(out.scalar_type()), f64 = DType::Float64;
  Shape shape{steps};
  UOpPtr b = scalar_constant(at::Scalar(base), f64, shape);
  if (steps == 1) {
    write(out, cast(alu(Ops::POW, b, scalar_constant(at::Scalar(start.to<double>()), f64, shape)), dt));
    return out;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(dt != DType::Bool, "\"logspace_cpu\" not implemented for 'Bool'");
  write(out, cast(alu(Ops::POW, b, evenly_spaced(start, end, steps, dt, f64)), dt));
  return out;
}

// torch's eye_out_cpu: its checks and resize, then ones where the row index equals the column index.
at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  if (out.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  if (out.numel() == 0) return out;
  UOpPtr row = expand(reshape(iota(n, DType::Int64), {n, 1}), {n, m});
  UOpPtr col = expand(reshape(iota(m, DType::Int64), {1, m}), {n, m});
  UOpPtr diagonal = alu(Ops::CMPEQ, row, col);
  if (out.is_complex()) {
    DType dt = element_dtype(out.scalar_type());
    write_complex(out, join_complex(cast(diagonal, dt), expand(reshape(const_float(dt, 0), {1, 1}), {n, m})));
  } else {
    write(out, cast(diagonal, to_tiny_dtype(out.scalar_type())));
  }
  return out;
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

// tril_indices and triu_indices: the coordinates (a 2 x N tensor, rows then columns) of a row x col matrix's
// lower (j <= i + offset) or upper (j >= i + offset) triangle in row-major order, each computed from its position
// k alone. Rows before i hold before(i) elements, a closed form in int64; an element's row is the last i with
// before(i) <= k, found by a binary search unrolled over the bits of `row`, and its column follows from k -
// before(i). Exact for every size, no sync, one kernel.
//
// with_lengths(x) is the sum of clamp(u, 0, col) over u <= x: the elements of the rows whose lower triangle
// ends at column u - 1.
int64_t with_lengths(int64_t x, int64_t col) {
  if (x <= 0) return 0;
  if (x <= col) return x * (x + 1) / 2;
  return col * (col + 1) / 2 + (x - col) * col;
}

UOpPtr with_lengths(const UOpPtr& x, int64_t col) {
  auto c = [&](int64_t v) { return expand(reshape(const_int(DType::Int64, v), {1}), x->shape); };
  UOpPtr below = alu(Ops::IDIV, mul(x, add(x, c(1))), c(2));
  UOpPtr past = add(c(col * (col + 1) / 2), mul(sub(x, c(col)), c(col)));
  return where(le(x, c(0)), c(0), where(le(x, c(col)), below, past));
}

// The elements in rows [0, i) of the triangle (i of any shape; an int64 value or UOp).
template <bool lower, class I> I before_row(const I& i, int64_t col, int64_t offset) {
  if constexpr (std::is_same_v<I, int64_t>) {
    if (lower) return with_lengths(offset + i, col) - with_lengths(offset, col);
    return i * col - with_lengths(offset + i - 1, col) + with_lengths(offset - 1, col);
  } else {
    auto c = [&](int64_t v) { return expand(reshape(const_int(DType::Int64, v), {1}), i->shape); };
    if (lower) return sub(with_lengths(add(c(offset), i), col), c(with_lengths(offset, col)));
    return add(sub(mul(i, c(col)), with_lengths(add(c(offset - 1), i), col)), c(with_lengths(offset - 1, col)));
  }
}

template <bool lower>
at::Tensor triangle_indices(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
                            std::optional<at::Layout> layout, std::optional<at::Device> device,
                            std::optional<bool> pin_memory) {
  const char* name = lower ? "tril_indices" : "triu_indices";
  TORCH_CHECK(row >= 0, "row must be non-negative, got", row);
  TORCH_CHECK(col >= 0, "col must be non-negative, got", col);
  TORCH_CHECK(c10::layout_or_default(layout) == at::kStrided, "only support layout=torch.strided, got",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  at::ScalarType st = dtype.value_or(at::kLong);
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kLong || st == at::kInt, "\"", name, "\" not implemented for '",
                              c10::toString(st), "'");
  // an offset past either end means the same triangle as the end (and keeps the closed forms small)
  offset = std::clamp<int64_t>(offset, -row, col);
  const int64_t n = before_row<lower>(row, col, offset);
  at::Tensor out = empty_tiny({2, n}, st, c10::device_or_default(device));
  if (n == 0) return out;
  Shape flat{n};
  auto c = [&](int64_t v) { return expand(reshape(const_int(DType::Int64, v), {1}), flat); };
  UOpPtr k = iota(n, DType::Int64), i = c(0);
  int64_t step = 1;
  while (step * 2 < row)
    step *= 2;
  for (; step > 0; step /= 2) { // i: the last row whose elements start at or before k
    UOpPtr next = add(i, c(step));
    i = where(both(lt(next, c(row)), le(before_row<lower>(next, col, offset), k)), next, i);
  }
  UOpPtr j = sub(k, before_row<lower>(i, col, offset));
  if (!lower) { // an upper row starts at column max(i + offset, 0)
    UOpPtr first = add(i, c(offset));
    j = add(j, where(lt(first, c(0)), c(0), first));
  }
  Shape two{2, n};
  UOpPtr is_row = expand(reshape(eq(iota(2, DType::Int64), fixed(DType::Int64, 0, {2})), {2, 1}), two);
  UOpPtr coords = where(is_row, expand(reshape(i, {1, n}), two), expand(reshape(j, {1, n}), two));
  write(out, cast(coords, to_tiny_dtype(st)));
  return out;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("empty.memory_format", empty_memory_format, UnsignedPolicy::Native);
  m.impl("empty_strided", empty_strided, UnsignedPolicy::Native);
  m.impl("fill_.Scalar", fill_scalar, UnsignedPolicy::Native);
  m.impl("fill_.Tensor", fill_tensor, UnsignedPolicy::Native);
  m.impl("zero_", zero_, UnsignedPolicy::Native);
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
  m.impl("logspace.out", logspace_out);
  m.impl("eye.out", eye_out);
  m.impl("eye.m_out", eye_m_out);
  m.impl("_efficientzerotensor", efficient_zero_tensor, UnsignedPolicy::Native);
  m.impl("tril_indices", triangle_indices<true>);
  m.impl("triu_indices", triangle_indices<false>);
}

} // namespace tiny::aten_ops

// The kernels at::native::arange_out and linspace_out call for a tiny tensor.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(arange_stub, &tiny::aten_ops::arange_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(linspace_stub, &tiny::aten_ops::linspace_kernel)
} // namespace at::native
