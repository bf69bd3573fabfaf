// The matmul family: mm, bmm, addmm, addmv, dot, baddbmm, addbmm, addr (and what matmul, linear,
// einsum and mv decompose into). Each is one UOp graph: a broadcast multiply reduced over the
// shared dim, with torch's optional beta * self + alpha * (...) epilogue fused in the same kernel.

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/addmm_meta_dispatch.h>
#include <ATen/ops/addmv_meta_dispatch.h>
#include <ATen/ops/baddbmm_meta_dispatch.h>
#include <ATen/ops/bmm_meta_dispatch.h>
#include <ATen/ops/mm_meta_dispatch.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <array>
#include <optional>

#include "aten_ops/complex_math.h"
#include "aten_ops/window_read.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny {
namespace {

// sum over k of a[..., m, k] * b[..., k, n] for a: (B, M, K), b: (B, K, N); reduce_batch also sums
// over B (addbmm). Result (B, M, N), or (M, N) when the batch is reduced.
UOpPtr batched_product(const UOpPtr& a, const UOpPtr& b, bool reduce_batch) {
  int64_t B = a->shape[0], M = a->shape[1], K = a->shape[2], N = b->shape[2];
  Shape full{B, M, N, K};
  // each operand as one view node (building the movements on the tracker, not node by node)
  UOpPtr x = view(a, ShapeTracker::from_shape(a->shape).reshape({B, M, 1, K}).expand(full));
  UOpPtr y = view(b, ShapeTracker::from_shape(b->shape).permute({0, 2, 1}).reshape({B, 1, N, K}).expand(full));
  UOpPtr p = alu(Ops::MUL, x, y);
  if (reduce_batch) return reshape(reduce(p, Ops::ADD, {0, 3}), {M, N});
  return reshape(reduce(p, Ops::ADD, {3}), {B, M, N});
}

UOpPtr read_as(const at::Tensor& t, DType dt) { return cast(read(t), dt); }

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected ", what,
              " to have the same dtype, but got: ", a.scalar_type(), " != ", b.scalar_type());
}

void check_not_bool(const at::Tensor& t, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() != at::kBool, "\"", op, "\" not implemented for 'Bool'");
}

bool is_zero(const at::Scalar& s) { return s.isFloatingPoint() ? s.toDouble() == 0.0 : s.toLong() == 0; }

// beta * self + alpha * product, as torch: beta == 0 ignores self (its NaNs too).
UOpPtr with_epilogue(const UOpPtr& product, const std::optional<at::Tensor>& self, const at::Scalar& beta,
                     const at::Scalar& alpha, DType dt) {
  UOpPtr r = product;
  if (!(alpha.isIntegral(true) && alpha.toLong() == 1) && !(alpha.isFloatingPoint() && alpha.toDouble() == 1.0))
    r = alu(Ops::MUL, r, scalar_constant(alpha, dt, r->shape));
  if (!self || is_zero(beta)) return r;
  UOpPtr s = read_as(*self, dt);
  Shape padded(r->shape.size() - s->shape.size(), 1);
  padded.insert(padded.end(), s->shape.begin(), s->shape.end());
  s = expand(reshape(s, padded), r->shape);
  if (!(beta.isFloatingPoint() ? beta.toDouble() == 1.0 : beta.toLong() == 1))
    s = alu(Ops::MUL, s, scalar_constant(beta, dt, r->shape));
  return alu(Ops::ADD, s, r);
}

void check_out_dtype(const at::Tensor& out, at::ScalarType dtype) {
  TORCH_CHECK(out.scalar_type() == dtype, "Expected out tensor to have dtype ", dtype, ", but got ", out.scalar_type(),
              " instead");
}

// Writes the result into out= (resized like torch) or a new tensor.
at::Tensor& store(at::Tensor& out, const UOpPtr& value, at::ScalarType dtype) {
  check_out_dtype(out, dtype);
  at::assert_no_internal_overlap(out);
  at::native::resize_output(out, c10::IntArrayRef(value->shape));
  write(out, cast(value, to_tiny_dtype(dtype)));
  return out;
}

at::Tensor fresh(const at::Tensor& like, const Shape& shape) {
  return empty_tiny(c10::IntArrayRef(shape), like.scalar_type(), like.device());
}

void check_2d(const at::Tensor& t, const char* name) { TORCH_CHECK(t.dim() == 2, name, " must be a matrix"); }

UOpPtr mm_value(const at::Tensor& a, const at::Tensor& b, DType dt) {
  check_same_device({a, b});
  check_2d(a, "self");
  check_2d(b, "mat2");
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1), " and ",
              b.size(0), "x", b.size(1), ")");
  check_same_dtype(a, b, "mat1 and mat2");
  int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (M * K * N == 0) {
    UOpPtr x = reshape(read_as(a, dt), {1, M, K}), y = reshape(read_as(b, dt), {1, K, N});
    return reshape(batched_product(x, y, false), {M, N});
  }
  // batched_product's graph (a batch of 1), each operand read as the one view of its storage it is
  // (aten_ops/window_read.h): a[m, k] and b[k, n] at [0, m, n, k]
  Shape full{1, M, N, K};
  UOpPtr x = cast(aten_ops::read_window(a, full, {0, a.stride(0), 0, a.stride(1)}), dt);
  UOpPtr y = cast(aten_ops::read_window(b, full, {0, 0, b.stride(1), b.stride(0)}), dt);
  return reshape(reduce(alu(Ops::MUL, x, y), Ops::ADD, {3}), {M, N});
}

// `bmm`: torch.bmm, whose CPU kernel returns an empty or zero-filled result (batch2's dtype) before any dtype check;
// baddbmm and addbmm keep the check (addbmm raises there; baddbmm's result would take batch2's dtype, not self's).
UOpPtr bmm_value(const at::Tensor& a, const at::Tensor& b, DType dt, bool reduce_batch, bool bmm = false) {
  check_same_device({a, b});
  TORCH_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2), "Expected size for first two dimensions of batch2 ",
              "tensor to be: [", a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "].");
  // torch's CPU kernel dispatches on batch1's dtype first, unless the result is empty or zero-filled
  // (a contraction over 0 elements)
  const bool products = a.size(0) * a.size(1) * b.size(2) * a.size(2) > 0;
  if (products) check_not_bool(a, "bmm");
  if (products || !bmm) check_same_dtype(a, b, "batch1 and batch2");
  return batched_product(read_as(a, dt), read_as(b, dt), reduce_batch);
}

DType compute_of(const at::Tensor& t) { return opmath(to_tiny_dtype(t.scalar_type())); }

// ---- kernels ----

// What torch's CPU kernel checks after its meta function (shapes, out='s dtype): an empty result returns
// first; a contraction over no elements is self * beta (a float beta on integers a cast error there, as
// the kernel's mul_ raises); otherwise it dispatches on the dtype.
void check_mm_dispatch(const at::Tensor& a, const Shape& result, const at::Scalar& beta = 0) {
  if (prod(result) == 0) return;
  if (a.size(1) > 0) return check_not_bool(a, "addmm_impl_cpu_");
  TORCH_CHECK(is_zero(beta) || !beta.isFloatingPoint() || !at::isIntegralType(a.scalar_type(), /*includeBool=*/true),
              "result type Float can't be cast to the desired output type ", a.scalar_type());
}

// A complex product as four real ones over the parts: re = ar br - ai bi, im = ar bi + ai br. The parts are
// views (at::real, at::imag; a conjugate operand's imaginary part is a negative view), and the products
// record lazily, so they fuse as real products do. complex32 has no CPU kernel: the fallback says so.
at::Tensor mm_of(const at::Tensor& a, const at::Tensor& b) { return at::mm(a, b); }
at::Tensor bmm_of(const at::Tensor& a, const at::Tensor& b) { return at::bmm(a, b); }

template <class Product>
at::Tensor complex_product(const at::Tensor& a, const at::Tensor& b, const char* names, Product product) {
  check_same_device({a, b});
  check_same_dtype(a, b, names);
  if (a.scalar_type() == at::kComplexHalf) to_tiny_dtype(a.scalar_type()); // NotNativeDtype: the CPU's error
  at::Tensor ar = at::real(a), ai = at::imag(a), br = at::real(b), bi = at::imag(b);
  return at::complex(product(ar, br).sub_(product(ai, bi)), product(ar, bi).add_(product(ai, br)));
}

// beta * self + alpha * product for complex values, as torch: beta == 0 ignores self (its NaNs too).
at::Tensor complex_epilogue(const at::Tensor& self, at::Tensor product, const at::Scalar& beta,
                            const at::Scalar& alpha) {
  if (alpha.toComplexDouble() != c10::complex<double>(1.0)) product = product.mul(alpha);
  if (beta.toComplexDouble() == c10::complex<double>(0.0)) return product;
  TORCH_CHECK(at::is_expandable_to(self.sizes(), product.sizes()), "The expanded size of the tensor (",
              product.sizes().back(), ") must match the existing size (", self.sizes().back(), ")");
  return product.add(self, beta);
}

// A complex result r written to out=, whose dtype must be `dtype` (resized as torch's out= ops do).
at::Tensor& complex_out(at::Tensor& out, const at::Tensor& r, at::ScalarType dtype) {
  check_out_dtype(out, dtype);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

bool any_complex(std::initializer_list<at::Tensor> tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.is_complex(); });
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_complex() || b.is_complex()) return complex_product(a, b, "mat1 and mat2", mm_of);
  UOpPtr v = mm_value(a, b, compute_of(a));
  check_mm_dispatch(a, v->shape);
  at::Tensor out = fresh(a, v->shape);
  // a fresh result needs none of store's out= checks
  write(out, cast(v, to_tiny_dtype(a.scalar_type())));
  return out;
}

// torch's structured out= kernels (mm, bmm, addmm, baddbmm, addmv) run their meta function first, its shape and dtype
// checks and out= resized to the result, and then the CPU kernel, whose dtype dispatch raises for bool products: out=
// is resized even where the call raises (fuzzer seed 14494: torch.mm of bools into a (2, 1) out= leaves it (4, 3)).
// An input that is out= itself is read as it was before that resize (mm(t, u, out=t): as tiny read it before the
// meta function ran, and the bool error the CPU raises; fuzzer seed 15245).
at::Tensor unresized(const at::Tensor& input, const at::Tensor& out) {
  return input.is_same(out) ? input.alias() : input;
}

at::Tensor& mm_out(const at::Tensor& a_arg, const at::Tensor& b_arg, at::Tensor& out) {
  const at::Tensor a = unresized(a_arg, out), b = unresized(b_arg, out);
  at::meta::mm_outf(a_arg, b_arg, out);
  if (a.is_complex() || b.is_complex()) {
    at::Tensor product = complex_product(a, b, "mat1 and mat2", mm_of);
    check_out_dtype(out, a.scalar_type());
    at::native::resize_output(out, product.sizes());
    return out.copy_(product);
  }
  UOpPtr v = mm_value(a, b, compute_of(a));
  check_out_dtype(out, a.scalar_type());
  check_mm_dispatch(a, v->shape);
  return store(out, v, a.scalar_type());
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_complex() || b.is_complex()) return complex_product(a, b, "batch1 and batch2", bmm_of);
  UOpPtr v = bmm_value(a, b, compute_of(a), false, /*bmm=*/true);
  at::Tensor out = fresh(b, v->shape); // batch2's dtype, as torch's meta function gives it
  return store(out, v, b.scalar_type());
}

at::Tensor& bmm_out(const at::Tensor& a_arg, const at::Tensor& b_arg, at::Tensor& out) {
  const at::Tensor a = unresized(a_arg, out), b = unresized(b_arg, out);
  at::meta::bmm_outf(a_arg, b_arg, out); // (see mm_out)
  if (a.is_complex() || b.is_complex()) {
    at::Tensor product = complex_product(a, b, "batch1 and batch2", bmm_of);
    check_out_dtype(out, a.scalar_type());
    at::native::resize_output(out, product.sizes());
    return out.copy_(product);
  }
  return store(out, bmm_value(a, b, compute_of(a), false), a.scalar_type());
}

UOpPtr addmm_value(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  check_same_device({self, m1, m2});
  check_same_dtype(self, m1, "self and mat1");
  DType dt = compute_of(m1);
  UOpPtr p = mm_value(m1, m2, dt);
  TORCH_CHECK(at::is_expandable_to(self.sizes(), c10::IntArrayRef(p->shape)), "The expanded size of the tensor (",
              p->shape.back(), ") must match the existing size (", self.sizes().back(), ")");
  return with_epilogue(p, self, beta, alpha, dt);
}

at::Tensor complex_addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                         const at::Scalar& alpha) {
  check_same_device({self, m1, m2});
  check_same_dtype(self, m1, "self and mat1");
  return complex_epilogue(self, complex_product(m1, m2, "mat1 and mat2", mm_of), beta, alpha);
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  if (any_complex({self, m1, m2})) return complex_addmm(self, m1, m2, beta, alpha);
  UOpPtr v = addmm_value(self, m1, m2, beta, alpha);
  check_mm_dispatch(m1, v->shape, beta);
  at::Tensor out = fresh(m1, v->shape);
  return store(out, v, m1.scalar_type());
}

at::Tensor& addmm_out(const at::Tensor& self_arg, const at::Tensor& m1_arg, const at::Tensor& m2_arg,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  const at::Tensor self = unresized(self_arg, out), m1 = unresized(m1_arg, out), m2 = unresized(m2_arg, out);
  at::meta::addmm_outf(self_arg, m1_arg, m2_arg, beta, alpha, out); // (see mm_out)
  if (any_complex({self, m1, m2, out}))
    return complex_out(out, complex_addmm(self, m1, m2, beta, alpha), m1.scalar_type());
  UOpPtr v = addmm_value(self, m1, m2, beta, alpha);
  check_out_dtype(out, m1.scalar_type());
  check_mm_dispatch(m1, v->shape, beta);
  return store(out, v, m1.scalar_type());
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  if (any_complex({self, m1, m2})) {
    at::Tensor r = complex_addmm(self, m1, m2, beta, alpha);
    TORCH_CHECK(self.sizes() == r.sizes(), "The input tensor must be a matrix of the result's size");
    return self.copy_(r);
  }
  UOpPtr v = addmm_value(self, m1, m2, beta, alpha);
  TORCH_CHECK(self.sizes() == c10::IntArrayRef(v->shape), "The input tensor must be a matrix of the result's size");
  check_mm_dispatch(m1, v->shape, beta);
  return store(self, v, self.scalar_type());
}

void check_addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec) {
  check_same_device({self, mat, vec});
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got ", self.dim(), ", ", mat.dim(),
              ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0), "size mismatch, got input (", self.size(0), "), mat (", mat.size(0), "x",
              mat.size(1), "), vec (", vec.size(0), ")");
  check_same_dtype(mat, vec, "mat and vec");
}

// A complex addmv: the product a complex mm of the matrix and the vector as a column.
at::Tensor complex_addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                         const at::Scalar& alpha) {
  check_addmv(self, mat, vec);
  return complex_epilogue(self, complex_product(mat, vec.unsqueeze(1), "mat and vec", mm_of).squeeze(1), beta, alpha);
}

UOpPtr addmv_value(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  check_addmv(self, mat, vec);
  // torch's CPU kernel returns an empty result, and a contraction over no elements, before its dispatch
  if (mat.numel() > 0) check_not_bool(mat, "addmv_impl_cpu");
  DType dt = compute_of(mat);
  UOpPtr m = read_as(mat, dt), v = read_as(vec, dt);
  UOpPtr p = reduce(alu(Ops::MUL, m, expand(reshape(v, {1, vec.size(0)}), m->shape)), Ops::ADD, {1});
  return with_epilogue(reshape(p, {mat.size(0)}), self, beta, alpha, dt);
}

at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  if (any_complex({self, mat, vec})) return complex_addmv(self, mat, vec, beta, alpha);
  UOpPtr v = addmv_value(self, mat, vec, beta, alpha);
  at::Tensor out = fresh(mat, v->shape);
  return store(out, v, mat.scalar_type());
}

at::Tensor& addmv_out(const at::Tensor& self_arg, const at::Tensor& mat_arg, const at::Tensor& vec_arg,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  const at::Tensor self = unresized(self_arg, out), mat = unresized(mat_arg, out), vec = unresized(vec_arg, out);
  at::meta::addmv_outf(self_arg, mat_arg, vec_arg, beta, alpha, out); // (see mm_out)
  if (any_complex({self, mat, vec, out}))
    return complex_out(out, complex_addmv(self, mat, vec, beta, alpha), mat.scalar_type());
  return store(out, addmv_value(self, mat, vec, beta, alpha), mat.scalar_type());
}

at::Tensor& addmv_(at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  if (any_complex({self, mat, vec})) return self.copy_(complex_addmv(self, mat, vec, beta, alpha));
  return store(self, addmv_value(self, mat, vec, beta, alpha), self.scalar_type());
}

// dot, and vdot, which conjugates its first operand (the same for real values).
template <bool Conjugate> at::Tensor dot(const at::Tensor& a, const at::Tensor& b) {
  check_same_device({a, b});
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(), "] and src [",
              b.numel(), "] to have the same number of elements, but got ", a.numel(), " and ", b.numel(),
              " elements respectively");
  check_not_bool(a, "dot");
  if (a.is_complex()) {
    // complex32 has no CPU kernel: the fallback gives its error
    if (a.scalar_type() == at::kComplexHalf) to_tiny_dtype(a.scalar_type());
    return (Conjugate ? a.conj() : a).mul(b).sum();
  }
  DType dt = compute_of(a);
  UOpPtr v = reshape(reduce(alu(Ops::MUL, read_as(a, dt), read_as(b, dt)), Ops::ADD, {0}), {});
  at::Tensor out = fresh(a, {});
  return store(out, v, a.scalar_type());
}

UOpPtr baddbmm_value(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                     const at::Scalar& alpha, bool reduce_batch) {
  check_same_device({self, b1, b2});
  check_same_dtype(self, b1, "self and batch1");
  DType dt = compute_of(b1);
  UOpPtr p = bmm_value(b1, b2, dt, reduce_batch);
  TORCH_CHECK(at::is_expandable_to(self.sizes(), c10::IntArrayRef(p->shape)), "self of shape ", self.sizes(),
              " cannot be broadcast to the result's shape ", c10::IntArrayRef(p->shape));
  return with_epilogue(p, self, beta, alpha, dt);
}

// A complex baddbmm (addbmm: the products summed over the batch) from complex_product's bmm.
at::Tensor complex_baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                           const at::Scalar& alpha, bool reduce_batch) {
  check_same_device({self, b1, b2});
  check_same_dtype(self, b1, "self and batch1");
  at::Tensor p = complex_product(b1, b2, "batch1 and batch2", bmm_of);
  if (reduce_batch) p = p.sum(0);
  TORCH_CHECK(at::is_expandable_to(self.sizes(), p.sizes()), "self of shape ", self.sizes(),
              " cannot be broadcast to the result's shape ", p.sizes());
  return complex_epilogue(self, p, beta, alpha);
}

template <bool ReduceBatch>
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  if (any_complex({self, b1, b2})) return complex_baddbmm(self, b1, b2, beta, alpha, ReduceBatch);
  UOpPtr v = baddbmm_value(self, b1, b2, beta, alpha, ReduceBatch);
  at::Tensor out = fresh(b1, v->shape);
  return store(out, v, b1.scalar_type());
}

template <bool ReduceBatch>
at::Tensor& baddbmm_out(const at::Tensor& self_arg, const at::Tensor& b1_arg, const at::Tensor& b2_arg,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  const at::Tensor self = unresized(self_arg, out), b1 = unresized(b1_arg, out), b2 = unresized(b2_arg, out);
  if constexpr (!ReduceBatch) at::meta::baddbmm_outf(self_arg, b1_arg, b2_arg, beta, alpha, out); // (see mm_out)
  if (any_complex({self, b1, b2, out}))
    return complex_out(out, complex_baddbmm(self, b1, b2, beta, alpha, ReduceBatch), b1.scalar_type());
  return store(out, baddbmm_value(self, b1, b2, beta, alpha, ReduceBatch), b1.scalar_type());
}

template <bool ReduceBatch>
at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                     const at::Scalar& alpha) {
  if (any_complex({self, b1, b2})) {
    at::Tensor r = complex_baddbmm(self, b1, b2, beta, alpha, ReduceBatch);
    TORCH_CHECK(self.sizes() == r.sizes(), "self must have the result's shape ", r.sizes(), ", got ", self.sizes());
    return self.copy_(r);
  }
  UOpPtr v = baddbmm_value(self, b1, b2, beta, alpha, ReduceBatch);
  TORCH_CHECK(self.sizes() == c10::IntArrayRef(v->shape), "self must have the result's shape ",
              c10::IntArrayRef(v->shape), ", got ", self.sizes());
  return store(self, v, self.scalar_type());
}

// ---- addr: beta * self + alpha * outer(vec1, vec2), in one kernel computed at opmath precision ----

void check_addr_scalar(at::ScalarType dtype, const at::Scalar& scalar, const char* name) {
  TORCH_CHECK(!scalar.isBoolean() || dtype == at::kBool, "Boolean ", name, " only supported for Boolean results.");
  TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype) || scalar.isIntegral(true),
              "For integral input tensors, argument ", name, " must not be a floating point number.");
}

// addr of complex values as (n, m, 2) pairs: alpha * vec1 * vec2, plus beta * self unless beta is 0 (as the
// CPU's kernel: self's NaNs are ignored then). The operands are converted to dtype first.
UOpPtr complex_addr_value(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                          const at::Scalar& beta, const at::Scalar& alpha, at::ScalarType dtype) {
  namespace cm = complex_math;
  int64_t n = vec1.size(0), m = vec2.size(0);
  Shape pairs{n, m, 2};
  DType dt = element_dtype(dtype);
  auto values = [&](const at::Tensor& t, const Shape& as) {
    return cm::parts_of(expand(reshape(cast(read_complex(t), dt), as), pairs));
  };
  cm::Cx a = values(vec1, {n, 1, 2}), b = values(vec2, {1, m, 2});
  cm::Cx r = cm::mul(cm::mul(cm::parts_of(scalar_value(alpha, dtype, {n, m})), a), b);
  if (beta.toComplexDouble() != c10::complex<double>(0.0))
    r = cm::add(cm::mul(cm::parts_of(scalar_value(beta, dtype, {n, m})), values(self, pairs)), r);
  return cm::pairs_of(r);
}

// The value of addr in dtype (torch's promotion of the three tensors), self expanded to (n, m) unless
// inplace (self then must be (n, m) itself).
UOpPtr addr_value(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                  const at::Scalar& alpha, at::ScalarType dtype, bool inplace) {
  check_same_device({self, vec1, vec2});
  TORCH_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  TORCH_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  check_addr_scalar(dtype, beta, "beta");
  check_addr_scalar(dtype, alpha, "alpha");
  int64_t n = vec1.size(0), m = vec2.size(0);
  TORCH_CHECK(!inplace || self.sizes().equals({n, m}), "output with shape ", self.sizes(),
              " doesn't match the broadcast shape [", n, ", ", m, "]");
  at::Tensor s = inplace ? self : self.expand({n, m}); // torch's error for a self that does not expand
  Shape full{n, m};
  if (at::isComplexType(dtype)) return complex_addr_value(s, vec1, vec2, beta, alpha, dtype);
  DType dt = to_tiny_dtype(dtype), ct = dtype == at::kBool ? dt : opmath(dt);
  UOpPtr a = expand(reshape(read_as(vec1, ct), {n, 1}), full), b = expand(reshape(read_as(vec2, ct), {1, m}), full);
  if (dtype != at::kBool) return with_epilogue(alu(Ops::MUL, a, b), s, beta, alpha, ct);
  // bool: (beta and self) or (alpha and vec1 and vec2)
  UOpPtr r = is_zero(alpha) ? scalar_constant(false, dt, full) : alu(Ops::AND, a, b);
  return is_zero(beta) ? r : alu(Ops::OR, r, read_as(s, dt));
}

at::ScalarType addr_dtype(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2) {
  return at::native::result_type({self, vec1, vec2});
}

at::Tensor& addr_into(at::Tensor& out, const UOpPtr& value, at::ScalarType dtype) {
  TORCH_CHECK(at::canCast(dtype, out.scalar_type()), "result type ", dtype,
              " can't be cast to the desired output type ", out.scalar_type());
  if (at::isComplexType(dtype)) { // pairs, into a complex out (canCast refuses a real one)
    at::native::resize_output(out, c10::IntArrayRef(value->shape).slice(0, 2));
    write_complex(out, cast(value, element_dtype(out.scalar_type())));
    return out;
  }
  at::native::resize_output(out, c10::IntArrayRef(value->shape));
  write(out, cast(value, to_tiny_dtype(out.scalar_type())));
  return out;
}

at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                const at::Scalar& alpha) {
  at::ScalarType dtype = addr_dtype(self, vec1, vec2);
  UOpPtr v = addr_value(self, vec1, vec2, beta, alpha, dtype, false);
  at::Tensor out = empty_tiny(c10::IntArrayRef(v->shape).slice(0, 2), dtype, vec1.device());
  return addr_into(out, v, dtype);
}

at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                     const at::Scalar& alpha, at::Tensor& out) {
  at::ScalarType dtype = addr_dtype(self, vec1, vec2);
  return addr_into(out, addr_value(self, vec1, vec2, beta, alpha, dtype, false), dtype);
}

at::Tensor& addr_(at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                  const at::Scalar& alpha) {
  at::ScalarType dtype = addr_dtype(self, vec1, vec2);
  return addr_into(self, addr_value(self, vec1, vec2, beta, alpha, dtype, true), dtype);
}

// Whether torch's CPU would run scaled_dot_product_attention on these inputs by its fused flash kernel (its
// select_sdp_backend_cpp, through the gates sdp_utils_cpp.h exports): no dropout, 4-D inputs (3-D ones given a batch
// dim), batch and heads that match (or group), one head size, nonzero sequences, each innermost dim at stride 1, a
// float dtype, and a mask that needs no gradient.
bool cpu_runs_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                              bool enable_gqa) {
  if (mask && mask->defined() && mask->requires_grad()) return false;
  if (!at::globalContext().userEnabledFlashSDP()) return false;
  const sdp::sdp_params params = sdp::normalize_unbatched_input({q, k, v, mask, dropout_p, is_causal, enable_gqa});
  if (params.query.dim() != 4 || params.key.dim() != 4 || params.value.dim() != 4) return false;
  if (q.size(-1) != k.size(-1) || q.size(-1) != v.size(-1)) return false;
  const std::array<at::ScalarType, 4> dtypes{at::kFloat, at::kDouble, at::kBFloat16, at::kHalf};
  return sdp::check_nested_tensor(params, false) && sdp::check_for_dropout(params, false) &&
         sdp::check_tensor_shapes(params, false) && sdp::check_batch_size_and_num_heads_dense<true>(params, false) &&
         sdp::check_attn_mask_shape(params, false) && sdp::check_nonzero_sequence_lengths_dense(params, false) &&
         sdp::check_last_dim_stride_equals_1_dense<false>(params, false) &&
         sdp::check_tensor_dtype(params, dtypes, false);
}

// scaled_dot_product_attention: torch's composite form (which takes its math path on tiny), its result laid out as
// torch's CPU lays out its flash kernel's, where that kernel would run: like the query (empty_like), not contiguous.
// A query transposed from (batch, sequence, heads, features), the usual layout, gives a result whose transpose back
// is contiguous and views as (batch, sequence, width) without a copy, as on the CPU. The layout copy is part of the
// value (lazy: the product by v stores into it) and of its gradient.
at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                                        std::optional<double> scale, bool enable_gqa) {
  at::Tensor out = at::native::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  if (!cpu_runs_flash_attention(q, k, v, mask, dropout_p, is_causal, enable_gqa)) return out;
  // (unbatched inputs run with a batch dim of 1: the result is a view of the batched one, as the composite's is)
  const bool unbatched = q.dim() == 3;
  const at::Tensor batched = unbatched ? out.unsqueeze(0) : out;
  at::Tensor laid = at::empty_like(unbatched ? q.unsqueeze(0) : q, out.options());
  if (laid.sizes() != batched.sizes() || laid.strides() == batched.strides()) return out;
  laid.copy_(batched);
  return unbatched ? laid.squeeze(0) : laid;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, library) {
  library.impl("scaled_dot_product_attention", TORCH_FN(scaled_dot_product_attention));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("addr", TORCH_FN(addr));
  m.impl("addr.out", TORCH_FN(addr_out));
  m.impl("addr_", TORCH_FN(addr_));
  m.impl("mm", TORCH_FN(mm));
  m.impl("mm.out", TORCH_FN(mm_out));
  m.impl("bmm", TORCH_FN(bmm));
  m.impl("bmm.out", TORCH_FN(bmm_out));
  m.impl("addmm", TORCH_FN(addmm));
  m.impl("addmm.out", TORCH_FN(addmm_out));
  m.impl("addmm_", TORCH_FN(addmm_));
  m.impl("addmv", TORCH_FN(addmv));
  m.impl("addmv.out", TORCH_FN(addmv_out));
  m.impl("addmv_", TORCH_FN(addmv_));
  m.impl("dot", TORCH_FN(dot<false>));
  m.impl("vdot", TORCH_FN(dot<true>));
  m.impl("baddbmm", TORCH_FN(baddbmm<false>));
  m.impl("baddbmm.out", TORCH_FN(baddbmm_out<false>));
  m.impl("baddbmm_", TORCH_FN(baddbmm_<false>));
  m.impl("addbmm", TORCH_FN(baddbmm<true>));
  m.impl("addbmm.out", TORCH_FN(baddbmm_out<true>));
  m.impl("addbmm_", TORCH_FN(baddbmm_<true>));
}

} // namespace tiny
