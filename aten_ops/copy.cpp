// Copies: tiny <-> CPU, tiny <-> tiny (with dtype conversion and broadcasting), and item().
//
// Tensor.copy_ is CompositeExplicitAutograd, and for a PrivateUse1 tensor it calls _copy_from before any
// of its checks (ATen's is_supported_device leaves PrivateUse1 out), so _copy_from makes CPU copy_'s
// checks itself, in its order: memory overlap, then broadcasting.

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

UOpPtr broadcast_to(const UOpPtr& x, const Shape& shape) {
  if (x->shape == shape) return x;
  Shape padded(shape.size() - x->shape.size(), 1);
  padded.insert(padded.end(), x->shape.begin(), x->shape.end());
  return expand(reshape(x, padded), shape);
}

// `src` read as `dtype`, broadcast to `shape` (a lazy value; nothing runs).
UOpPtr converted(const at::Tensor& src, DType dtype, const Shape& shape) {
  UOpPtr v = read(src);
  if (v->dtype != dtype) v = cast(v, dtype);
  return broadcast_to(v, shape);
}

// `src` converted to the dtype of `dst` and broadcast to its shape: complex destinations take pairs (a
// real source gets imaginary part 0), a real destination takes a complex source's real part with the
// CPU's warning.
void write_converted(const at::Tensor& dst, const at::Tensor& src) {
  Shape shape = to_shape(dst.sizes());
  if (dst.is_complex()) {
    UOpPtr pairs = read_complex(src);
    DType dt = element_dtype(dst.scalar_type());
    if (pairs->dtype != dt) pairs = cast(pairs, dt);
    shape.push_back(2);
    write_complex(dst, broadcast_to(pairs, shape));
  } else if (src.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
    UOpPtr re = real_part(read_complex(src));
    DType dt = to_tiny_dtype(dst.scalar_type());
    write(dst, broadcast_to(re->dtype == dt ? re : cast(re, dt), shape));
  } else {
    write(dst, converted(src, to_tiny_dtype(dst.scalar_type()), shape));
  }
}

bool same_data(const at::Tensor& a, const at::Tensor& b) {
  return a.is_alias_of(b) && a.storage_offset() == b.storage_offset() && a.strides().equals(b.strides()) &&
         a.sizes().equals(b.sizes()) && a.scalar_type() == b.scalar_type() && a.is_neg() == b.is_neg() &&
         a.is_conj() == b.is_conj();
}

// tiny -> CPU. A dtype change happens on tiny (as Tensor.to(dtype) on tiny does it), so that
// x.to("cpu", dtype) and x.to(dtype).cpu() agree; broadcasting into a larger destination happens on the
// CPU side, after the transfer of src's own elements. Conjugate and negative bits are resolved on tiny;
// a destination with either bit gets them from the CPU's own copy_.
void copy_to_host(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor staged = src;
  if (src.scalar_type() != dst.scalar_type() || src.is_neg() || src.is_conj()) {
    staged = empty_tiny(src.sizes(), dst.scalar_type(), src.device());
    write_converted(staged, src);
  }
  if (dst.is_contiguous() && dst.sizes().equals(staged.sizes()) && !dst.is_neg() && !dst.is_conj()) {
    lazy_buffer(staged).read_host(element_view(staged), dst.mutable_data_ptr());
    return;
  }
  at::Tensor host = at::empty(staged.sizes(), staged.options().device(at::kCPU));
  lazy_buffer(staged).read_host(element_view(staged), host.mutable_data_ptr());
  dst.copy_(host);
}

// CPU -> tiny: the CPU source is made dense, in dst's dtype and shape, by torch's own conversion.
void copy_from_host(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor host = src.resolve_conj().resolve_neg().to(dst.scalar_type()).expand(dst.sizes());
  if (dst.is_neg()) host = host.neg();                  // the storage of a negative view holds -value
  if (dst.is_conj()) host = host.conj().resolve_conj(); // that of a conjugate view the conjugate
  host = host.contiguous();
  lazy_buffer(dst).write_host(element_view(dst), host.const_data_ptr());
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  const at::Tensor& src = self;
  TORCH_CHECK(src.defined() && dst.defined(), "copy_: undefined tensor");
  if (same_data(src, dst)) return dst;
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, src);
  auto shape = at::infer_size(dst.sizes(), src.sizes());
  TORCH_CHECK(dst.sizes().equals(shape), "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
              c10::IntArrayRef(shape));
  if (dst.numel() == 0) return dst;

  bool src_tiny = src.device().is_privateuseone(), dst_tiny = dst.device().is_privateuseone();
  if (src_tiny && dst_tiny && src.device() == dst.device()) {
    write_converted(dst, src);
  } else if (src_tiny && dst_tiny) { // between two tiny devices: through the host for now
    at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU));
    copy_to_host(src, host);
    copy_from_host(host, dst);
  } else if (dst_tiny) {
    TORCH_CHECK(src.device().is_cpu(), "tiny copies to and from the CPU only, got a source on ", src.device());
    copy_from_host(src, dst);
  } else {
    TORCH_CHECK(dst.device().is_cpu(), "tiny copies to and from the CPU only, got a destination on ", dst.device());
    copy_to_host(src, dst);
  }
  return dst;
}

// The CPU fallback writes results back through this. An out= tensor it resizes takes the strides of the
// CPU kernel's result when those are dense, as a CPU out= tensor would (LU factors are column-major).
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) {
    dst.resize_(self.sizes());
    if (self.is_non_overlapping_and_dense() && !dst.strides().equals(self.strides()))
      dst.as_strided_(self.sizes(), self.strides());
  }
  return copy_from(self, dst, false);
}

// item(), bool(), int(), float(): a sync, then torch's CPU kernel reads the element.
at::Scalar local_scalar_dense(const at::Tensor& self) {
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  copy_to_host(self, host);
  return at::_local_scalar_dense(host);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_copy_from", copy_from, UnsignedPolicy::Native);
  m.impl("_copy_from_and_resize", copy_from_and_resize, UnsignedPolicy::Native);
  m.impl("_local_scalar_dense", local_scalar_dense, UnsignedPolicy::Native);
}

// A negative view (Tensor._neg_view) and a conjugate view (Tensor.conj) reach _copy_from as they are:
// read(), read_complex() and the host copies resolve the bits. Without these, torch's negation and
// conjugation fallbacks resolve them with clone(), which copies through _copy_from again, without end.
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace tiny::aten_ops
