// Orthogonal factorizations: geqrf, linalg_qr (reduced, complete, r), linalg_householder_product (orgqr),
// ormqr; the symmetric eigenproblem _linalg_eigh (linalg.eigh, linalg.eigvalsh); the singular value
// decomposition _linalg_svd (linalg.svd, svdvals, torch.svd); what torch's CPU builds on those two, the polar
// decomposition linalg_polar and the square root linalg_matrix_sqrth; linalg_lstsq; linalg_matrix_exp and
// linalg_cross. float32 and float64, batched over every dim before the last two, as torch's CPU kernels; the
// QR family, eigh, svd and what is built on them (polar, matrix_sqrth, lstsq), and matrix_exp, also complex64 and
// complex128.
//
// Each factorization is a sequence of steps, and each step is a few UOp kernels over the whole batch
// (masks from the row and column coordinates, reductions, gathers). The step's index is a runtime scalar
// (DEFINE_VAR), so every step runs the same compiled kernels, and the working matrix is realized
// (CONTIGUOUS) after each step, so the graph grows by a constant per step instead of inlining the whole
// history into the next step's kernels.
//
// QR: Householder reflections in LAPACK's form (geqrf): step j reflects column j onto beta e_j with
// beta = -sign(a_jj) |a_j| and stores the reflector v (v_j = 1) below the diagonal and tau beside. Same
// convention as LAPACK, so R's diagonal signs and Q are the CPU's. Q applies the reflectors to the
// identity, backwards (orgqr); ormqr applies them to another matrix in the order its side and transpose ask.
//
// eigh: cyclic Jacobi with the round-robin ordering: in round r of a sweep the indices pair up as
// (i, (2r - i) mod (N - 1)) with N - 1 paired with r, so N/2 disjoint rotations run in one elementwise
// kernel over the batch (N: n rounded up to even; the padding index is a zero row and column, which
// never rotates). Sweeps repeat until the off-diagonal part is below eps relative to the matrix (one
// small read per sweep), or stops shrinking (the rounding floor), at most kMaxSweeps.
//
// svd: one-sided Jacobi (Hestenes) on the columns of A (of A^T when A is wide), with the same ordering:
// each rotation makes two columns orthogonal; at convergence the column norms are the singular values,
// V is the product of the rotations, and U comes from a QR of the rotated columns (sign-corrected): it is
// orthonormal even where singular values are zero, and completes itself to m columns for full_matrices.

#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_linalg_eigh.h>
#include <ATen/ops/_linalg_eigh_meta_dispatch.h>
#include <ATen/ops/_linalg_svd.h>
#include <ATen/ops/_linalg_svd_meta_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/geqrf.h>
#include <ATen/ops/linalg_cross_meta_dispatch.h>
#include <ATen/ops/linalg_householder_product.h>
#include <ATen/ops/linalg_lstsq.h>
#include <ATen/ops/linalg_polar_meta_dispatch.h>
#include <ATen/ops/linalg_qr_meta_dispatch.h>
#include <ATen/ops/ormqr.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/complex_math.h"
#include "aten_ops/lapack_layout.h"
#include "csrc/fallback.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

// ---- building blocks over (batch, rows, cols) values ----

UOpPtr index_const(int64_t v, const Shape& shape) { return broadcast(const_int(kIndex, v), shape); }
// The step index as a kernel argument: every step runs the same kernels.
UOpPtr step_index(int64_t v, const Shape& shape) { return broadcast(var_int(kIndex, v), shape); }
UOpPtr sqrt(const UOpPtr& a) { return alu(Ops::SQRT, a); }
UOpPtr zeros(const UOpPtr& x) { return like(x, 0); }
// x where mask holds, else 0.
UOpPtr masked(const UOpPtr& mask, const UOpPtr& x) { return where(mask, x, zeros(x)); }

// An out= tensor of the wrong size is resized into LAPACK's layout, as the CPU kernels do; one of the
// right size keeps its strides.
void resize_column_major(at::Tensor& out, at::IntArrayRef sizes) {
  if (out.sizes().equals(sizes)) return;
  at::native::resize_output(out, sizes);
  out.as_strided_(sizes, column_major_strides(sizes));
}

// The batch of matrices of a tensor (..., m, n) as one (b, m, n) value.
UOpPtr batched(const at::Tensor& t) { return reshape(read(t), {batch_count(t), t.size(-2), t.size(-1)}); }

// The (b, m, n) value `v` written into `out` (..., m', n'), whose batch dims hold b elements.
void store(const at::Tensor& out, const UOpPtr& v) {
  if (out.numel() == 0) return;
  write(out, reshape(v, to_shape(out.sizes())));
}

// The first `cols` columns of the m x m identity, for each of b matrices: (b, m, cols).
UOpPtr identity(DType dt, int64_t b, int64_t m, int64_t cols) {
  Shape s{b, m, cols};
  return cast(eq(coordinate(s, 1), coordinate(s, 2)), dt);
}

UOpPtr transposed(const UOpPtr& x) { return permute(x, {0, 2, 1}); }

// ---- Householder QR ----

struct Reflectors {
  UOpPtr a;   // (b, m, n): R on and above the diagonal, the reflectors' tails below (geqrf's first output)
  UOpPtr tau; // (b, k)
};

// LAPACK's geqrf on a batch (b, m, n).
Reflectors householder_qr(const UOpPtr& input) {
  int64_t b = input->shape[0], m = input->shape[1], n = input->shape[2], k = std::min(m, n);
  DType dt = input->dtype;
  Shape s{b, m, n}, col{b, m, 1}, one{b, 1, 1}, taus{b, k};
  UOpPtr a = contiguous(input), tau = fixed(dt, 0, taus);
  UOpPtr rows = coordinate(s, 1), cols = coordinate(s, 2), r = coordinate(col, 1), t = coordinate(taus, 1);
  for (int64_t j = 0; j < k; j++) {
    UOpPtr at_j = eq(cols, step_index(j, s));
    UOpPtr diag = eq(r, step_index(j, col)), below = alu(Ops::CMPLT, step_index(j, col), r);
    UOpPtr x = sum_keep(masked(at_j, a), {2}); // column j
    UOpPtr alpha = sum_keep(masked(diag, x), {1});
    UOpPtr sigma = sum_keep(masked(below, mul(x, x)), {1});
    // beta = -sign(alpha) |x[j:]|, sign(+-0) = +; an x with nothing below the diagonal is left as it is
    UOpPtr norm = sqrt(add(mul(alpha, alpha), sigma));
    UOpPtr beta = where(lt(alpha, fixed(dt, 0, one)), norm, alu(Ops::NEG, norm));
    UOpPtr none = eq(sigma, fixed(dt, 0, one));
    UOpPtr tau_j = where(none, fixed(dt, 0, one), div(sub(beta, alpha), beta));
    UOpPtr scale = where(none, fixed(dt, 0, one), div(fixed(dt, 1, one), sub(alpha, beta)));
    beta = where(none, alpha, beta);
    UOpPtr tail = mul(x, broadcast(scale, col));
    UOpPtr v = where(diag, fixed(dt, 1, col), masked(below, tail));
    // the columns after j: A - tau v (v^T A)
    UOpPtr vs = broadcast(v, s);
    UOpPtr w = broadcast(sum_keep(mul(vs, a), {1}), s);
    UOpPtr updated = sub(a, mul(broadcast(tau_j, s), mul(vs, w)));
    UOpPtr after = alu(Ops::CMPLT, step_index(j, s), cols);
    UOpPtr column = where(eq(rows, step_index(j, s)), broadcast(beta, s), broadcast(tail, s));
    UOpPtr below_s = alu(Ops::CMPLT, step_index(j, s), rows);
    a = contiguous(
        where(after, updated, where(both(at_j, alu(Ops::OR, below_s, eq(rows, step_index(j, s)))), column, a)));
    tau = contiguous(where(eq(t, step_index(j, taus)), broadcast(reshape(tau_j, {b, 1}), taus), tau));
  }
  return {a, tau};
}

// Applies the reflectors H_j = I - tau_j v_j v_j^T (v_j from column j of `a`, (b, m, *); tau (b, k)) to `c`
// (b, m, p) from the left: H_0 H_1 ... H_{k-1} c when `backward` (Q c), else H_{k-1} ... H_0 c (Q^T c).
UOpPtr apply_reflectors(const UOpPtr& a, const UOpPtr& tau, UOpPtr c, bool backward) {
  int64_t b = a->shape[0], m = a->shape[1], k = tau->shape[1], p = c->shape[2];
  DType dt = a->dtype;
  Shape s{b, m, a->shape[2]}, col{b, m, 1}, cs{b, m, p}, taus{b, k};
  UOpPtr cols = coordinate(s, 2), r = coordinate(col, 1), t = coordinate(taus, 1);
  c = contiguous(c);
  for (int64_t step = 0; step < k; step++) {
    int64_t j = backward ? k - 1 - step : step;
    UOpPtr x = sum_keep(masked(eq(cols, step_index(j, s)), a), {2});
    UOpPtr diag = eq(r, step_index(j, col)), below = alu(Ops::CMPLT, step_index(j, col), r);
    UOpPtr v = broadcast(where(diag, fixed(dt, 1, col), masked(below, x)), cs);
    UOpPtr tau_j = reshape(sum_keep(masked(eq(t, step_index(j, taus)), tau), {1}), {b, 1, 1});
    UOpPtr w = broadcast(sum_keep(mul(v, c), {1}), cs);
    c = contiguous(sub(c, mul(broadcast(tau_j, cs), mul(v, w))));
  }
  return c;
}

// ---- complex values ----
//
// A complex batch is a pair of real (b, rows, cols) values (aten_ops/complex_math.h), and the working matrices
// of the complex factorizations are pairs of real storages: the steps' kernels stay real.

namespace cm = complex_math;
using aten_ops::sum_keep; // beside the overload for complex values
using cm::Cx;

Cx select(const UOpPtr& mask, const Cx& a, const Cx& b) { return {where(mask, a.re, b.re), where(mask, a.im, b.im)}; }
Cx realized(const Cx& z) { return {contiguous(z.re), contiguous(z.im)}; }
Cx broadcast(const Cx& z, const Shape& shape) { return {broadcast(z.re, shape), broadcast(z.im, shape)}; }
Cx masked(const UOpPtr& mask, const Cx& z) { return {masked(mask, z.re), masked(mask, z.im)}; }
Cx sum_keep(const Cx& z, const std::vector<int64_t>& axes) { return {sum_keep(z.re, axes), sum_keep(z.im, axes)}; }
Cx reshape(const Cx& z, const Shape& shape) { return {reshape(z.re, shape), reshape(z.im, shape)}; }
Cx shrink(const Cx& z, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  return {shrink(z.re, ranges), shrink(z.im, ranges)};
}
Cx real_value(const UOpPtr& re) { return {re, zeros(re)}; }
UOpPtr squared_abs(const Cx& z) { return add(mul(z.re, z.re), mul(z.im, z.im)); }
// The conjugate transpose of a (b, rows, cols) batch.
Cx adjoint(const Cx& z) { return {transposed(z.re), alu(Ops::NEG, transposed(z.im))}; }
// z / |z| (r = |z|), 1 where z is 0.
Cx unit(const Cx& z, const UOpPtr& r) {
  UOpPtr zero = eq(r, zeros(r)), safe = where(zero, like(r, 1), r);
  return {where(zero, like(r, 1), div(z.re, safe)), where(zero, zeros(r), div(z.im, safe))};
}

// The batch of matrices of a complex tensor (..., m, n) as (b, m, n) parts.
Cx batched_complex(const at::Tensor& t) {
  return cm::parts_of(reshape(read_complex(t), {batch_count(t), t.size(-2), t.size(-1), 2}));
}
// A complex tensor of `st` holding z.
at::Tensor complex_tensor(const Cx& z, at::ScalarType st, c10::Device device) {
  at::Tensor t = empty_tiny(z.re->shape, st, device);
  write_complex(t, cm::pairs_of(z));
  return t;
}
Cx parts(const at::Tensor& t) { return cm::parts_of(read_complex(t)); }
// The (b, m, n) complex value z written into the complex tensor `out` (..., m', n').
void store(const at::Tensor& out, const Cx& z) {
  if (out.numel() == 0) return;
  Shape s = to_shape(out.sizes());
  write_complex(out, cm::pairs_of(reshape(z, s)));
}
// The first `cols` columns of the identity, complex.
Cx complex_identity(DType dt, int64_t b, int64_t m, int64_t cols) { return real_value(identity(dt, b, m, cols)); }

// The QR family's kernels are one template over the kind of values: UOpPtr (real) or Cx (complex). The real
// adjoint is the transpose.
UOpPtr adjoint(const UOpPtr& x) { return transposed(x); }
template <class V> V batch_of(const at::Tensor& t) {
  if constexpr (std::is_same_v<V, Cx>)
    return batched_complex(t);
  else
    return batched(t);
}
// t's values (tau: one batch dim fewer than its matrices) as `shape`.
template <class V> V values_of(const at::Tensor& t, Shape shape) {
  if constexpr (std::is_same_v<V, Cx>) {
    shape.push_back(2);
    return cm::parts_of(reshape(read_complex(t), shape));
  } else {
    return reshape(read(t), shape);
  }
}
template <class V> V real_as(const UOpPtr& x) {
  if constexpr (std::is_same_v<V, Cx>)
    return real_value(x);
  else
    return x;
}
// f(UOpPtr{}) or f(Cx{}) as t is real or complex.
template <class F> void on_kind(const at::Tensor& t, F&& f) {
  if (t.is_complex())
    f(Cx{});
  else
    f(UOpPtr{});
}
// The real dtype of a tensor's values (a complex dtype's parts).
DType real_dtype(const at::Tensor& t) { return to_tiny_dtype(c10::toRealValueType(t.scalar_type())); }

// ---- complex Householder QR ----

struct ComplexReflectors {
  Cx a;   // (b, m, n): R on and above the diagonal, the reflectors' tails below
  Cx tau; // (b, k)
};

// LAPACK's zgeqrf on a complex batch (b, m, n): H_j = I - tau_j v_j v_j^H with H_j^H x = beta e_j for a real
// beta = -sign(re alpha) |x[j:]| (zlarfg: tau = (beta - alpha) / beta, v = x / (alpha - beta), v_j = 1), so R's
// diagonal is real; a column with nothing below the diagonal and a real alpha is left as it is (tau = 0).
ComplexReflectors householder_qr(const Cx& input) {
  int64_t b = input.re->shape[0], m = input.re->shape[1], n = input.re->shape[2], k = std::min(m, n);
  DType dt = input.re->dtype;
  Shape s{b, m, n}, col{b, m, 1}, one{b, 1, 1}, taus{b, k};
  Cx a = realized(input), tau{fixed(dt, 0, taus), fixed(dt, 0, taus)};
  UOpPtr rows = coordinate(s, 1), cols = coordinate(s, 2), r = coordinate(col, 1), t = coordinate(taus, 1);
  UOpPtr zero = fixed(dt, 0, one);
  for (int64_t j = 0; j < k; j++) {
    UOpPtr at_j = eq(cols, step_index(j, s));
    UOpPtr diag = eq(r, step_index(j, col)), below = alu(Ops::CMPLT, step_index(j, col), r);
    Cx x = sum_keep(masked(at_j, a), {2}); // column j
    Cx alpha = sum_keep(masked(diag, x), {1});
    UOpPtr sigma = sum_keep(masked(below, squared_abs(x)), {1});
    UOpPtr norm = sqrt(add(squared_abs(alpha), sigma));
    UOpPtr beta = where(lt(alpha.re, zero), norm, alu(Ops::NEG, norm));
    UOpPtr none = both(eq(sigma, zero), eq(alpha.im, zero));
    Cx tau_j = masked(alu(Ops::NOT, none), Cx{div(sub(beta, alpha.re), beta), div(alu(Ops::NEG, alpha.im), beta)});
    Cx scale = masked(alu(Ops::NOT, none), cm::reciprocal({sub(alpha.re, beta), alpha.im}));
    beta = where(none, alpha.re, beta);
    Cx tail = cm::mul(x, broadcast(scale, col));
    Cx v = select(diag, real_value(fixed(dt, 1, col)), masked(below, tail));
    // the columns after j: A - conj(tau) v (v^H A)
    Cx vs = broadcast(v, s);
    Cx w = broadcast(sum_keep(cm::mul(cm::conj(vs), a), {1}), s);
    Cx updated = cm::sub(a, cm::mul(broadcast(cm::conj(tau_j), s), cm::mul(vs, w)));
    UOpPtr after = alu(Ops::CMPLT, step_index(j, s), cols), here = eq(rows, step_index(j, s));
    Cx column = select(here, real_value(broadcast(beta, s)), broadcast(tail, s));
    UOpPtr lower = both(at_j, alu(Ops::OR, alu(Ops::CMPLT, step_index(j, s), rows), here));
    a = realized(select(after, updated, select(lower, column, a)));
    tau = realized(select(eq(t, step_index(j, taus)), broadcast(reshape(tau_j, {b, 1}), taus), tau));
  }
  return {a, tau};
}

// Q c (backward: H_0 H_1 ... H_{k-1} c) or Q^H c (H_{k-1}^H ... H_0^H c) for the complex reflectors of
// householder_qr (a (b, m, *), tau (b, k)) and c (b, m, p).
Cx apply_reflectors(const Cx& a, const Cx& tau, Cx c, bool backward) {
  int64_t b = a.re->shape[0], m = a.re->shape[1], k = tau.re->shape[1], p = c.re->shape[2];
  DType dt = a.re->dtype;
  Shape s{b, m, a.re->shape[2]}, col{b, m, 1}, cs{b, m, p}, taus{b, k};
  UOpPtr cols = coordinate(s, 2), r = coordinate(col, 1), t = coordinate(taus, 1);
  c = realized(c);
  for (int64_t step = 0; step < k; step++) {
    int64_t j = backward ? k - 1 - step : step;
    Cx x = sum_keep(masked(eq(cols, step_index(j, s)), a), {2});
    UOpPtr diag = eq(r, step_index(j, col)), below = alu(Ops::CMPLT, step_index(j, col), r);
    Cx v = broadcast(select(diag, real_value(fixed(dt, 1, col)), masked(below, x)), cs);
    Cx tau_j = reshape(sum_keep(masked(eq(t, step_index(j, taus)), tau), {1}), {b, 1, 1});
    if (!backward) tau_j = cm::conj(tau_j);
    Cx w = broadcast(sum_keep(cm::mul(cm::conj(v), c), {1}), cs);
    c = realized(cm::sub(c, cm::mul(broadcast(tau_j, cs), cm::mul(v, w))));
  }
  return c;
}

// float32 and float64, and complex64 and complex128 where the kernel has a complex path (`complex_native`);
// other complex inputs go to the CPU fallback (NotNativeDtype).
void check_lapack_dtype(const at::Tensor& t, const char* cpu_name, bool complex_native = false) {
  at::ScalarType st = t.scalar_type();
  bool native_complex = complex_native && (st == at::kComplexFloat || st == at::kComplexDouble);
  if (t.is_complex() && !native_complex) to_tiny_dtype(st); // NotNativeDtype
  if (native_complex) return;
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kFloat || st == at::kDouble, "\"", cpu_name, "\" not implemented for '",
                              c10::toString(st), "'");
}

std::tuple<at::Tensor&, at::Tensor&> geqrf_out(const at::Tensor& self, at::Tensor& a, at::Tensor& tau) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  check_same_device({self, a, tau});
  TORCH_CHECK(a.scalar_type() == self.scalar_type(), "torch.geqrf: Expected a to have dtype ", self.scalar_type(),
              " but got ", a.scalar_type());
  TORCH_CHECK(tau.scalar_type() == self.scalar_type(), "torch.geqrf: Expected tau to have dtype ", self.scalar_type(),
              " but got ", tau.scalar_type());
  check_lapack_dtype(self, "geqrf_cpu", /*complex_native=*/true);
  int64_t m = self.size(-2), n = self.size(-1);
  std::vector<int64_t> tau_sizes(self.sizes().begin(), self.sizes().end() - 2);
  tau_sizes.push_back(std::min(m, n));
  resize_column_major(a, self.sizes());
  at::native::resize_output(tau, tau_sizes);
  if (self.numel() == 0) return {a, tau};
  on_kind(self, [&]<class V>(V) {
    auto f = householder_qr(batch_of<V>(self));
    store(a, f.a);
    store(tau, reshape(f.tau, {batch_count(self), 1, std::min(m, n)}));
  });
  return {a, tau};
}

std::tuple<at::Tensor, at::Tensor> geqrf(const at::Tensor& self) {
  at::Tensor a = empty_tiny({0}, self.scalar_type(), self.device());
  at::Tensor tau = empty_tiny({0}, self.scalar_type(), self.device());
  geqrf_out(self, a, tau);
  return {a, tau};
}

std::tuple<at::Tensor&, at::Tensor&> linalg_qr_out(const at::Tensor& A, c10::string_view mode, at::Tensor& Q,
                                                   at::Tensor& R) {
  at::meta::linalg_qr_outf(A, mode, Q, R);
  check_lapack_dtype(A, "geqrf_cpu", /*complex_native=*/true);
  DType dt = real_dtype(A);
  int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), b = batch_count(A);
  on_kind(A, [&]<class V>(V) {
    if (A.numel() == 0) {
      // the Q of an empty batch of m x 0 matrices is still the identity
      if (Q.numel() > 0) store(Q, real_as<V>(identity(dt, b, Q.size(-2), Q.size(-1))));
      if (R.numel() > 0) store(R, real_as<V>(fixed(dt, 0, {b, R.size(-2), R.size(-1)})));
      return;
    }
    auto f = householder_qr(batch_of<V>(A));
    int64_t r_rows = R.size(-2);
    Shape rs{b, r_rows, n};
    UOpPtr upper = alu(Ops::CMPLE, coordinate(rs, 1), coordinate(rs, 2));
    V a = r_rows <= m ? shrink(f.a, {{0, b}, {0, r_rows}, {0, n}}) : f.a;
    store(R, masked(upper, a));
    if (mode != "r") {
      int64_t q_cols = mode == "complete" ? m : k;
      store(Q, apply_reflectors(f.a, f.tau, real_as<V>(identity(dt, b, m, q_cols)), true));
    }
  });
  return {Q, R};
}

std::tuple<at::Tensor, at::Tensor> linalg_qr(const at::Tensor& A, c10::string_view mode) {
  at::Tensor Q = empty_tiny({0}, A.scalar_type(), A.device());
  at::Tensor R = empty_tiny({0}, A.scalar_type(), A.device());
  linalg_qr_out(A, mode, Q, R);
  return {Q, R};
}

// torch's checks of the reflectors' batch (householder_product, ormqr).
void check_tau(const char* name, const at::Tensor& input, const at::Tensor& tau) {
  TORCH_CHECK(input.dim() - tau.dim() == 1, name,
              ": Expected tau to have one dimension less than input, but got tau.ndim equal to ", tau.dim(),
              " and input.ndim is equal to ", input.dim());
  auto batch = input.sizes().slice(0, input.dim() - 2), tau_batch = tau.sizes().slice(0, tau.dim() - 1);
  TORCH_CHECK(batch.equals(tau_batch), name,
              ": Expected batch dimensions of tau to be equal to input.shape[:-2], but got ", tau_batch);
}

at::Tensor& householder_product_out(const at::Tensor& input, const at::Tensor& tau, at::Tensor& out) {
  const char* name = "torch.linalg.householder_product";
  TORCH_CHECK(input.dim() >= 2, name, ": input must have at least 2 dimensions.");
  TORCH_CHECK(input.size(-2) >= input.size(-1), name,
              ": input.shape[-2] must be greater than or equal to input.shape[-1]");
  TORCH_CHECK(input.size(-1) >= tau.size(-1), name, ": input.shape[-1] must be greater than or equal to tau.shape[-1]");
  check_tau(name, input, tau);
  TORCH_CHECK(tau.scalar_type() == input.scalar_type(), name, ": tau dtype ", tau.scalar_type(),
              " does not match input dtype ", input.scalar_type());
  check_same_device({input, tau, out});
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), name, ": Expected out tensor to have dtype ",
              input.scalar_type(), ", but got ", out.scalar_type(), " instead");
  check_lapack_dtype(input, "orgqr_cpu", /*complex_native=*/true);
  resize_column_major(out, input.sizes());
  if (out.numel() == 0) return out;
  int64_t b = batch_count(input), m = input.size(-2), n = input.size(-1);
  on_kind(input, [&]<class V>(V) {
    V taus = values_of<V>(tau, {b, tau.size(-1)});
    store(out, apply_reflectors(batch_of<V>(input), taus, real_as<V>(identity(real_dtype(input), b, m, n)), true));
  });
  return out;
}

at::Tensor householder_product(const at::Tensor& input, const at::Tensor& tau) {
  at::Tensor out = empty_tiny({0}, input.scalar_type(), input.device());
  return householder_product_out(input, tau, out);
}

at::Tensor& ormqr_out(const at::Tensor& input, const at::Tensor& tau, const at::Tensor& other, bool left,
                      bool transpose, at::Tensor& out) {
  const char* name = "torch.ormqr";
  TORCH_CHECK(input.dim() >= 2, name, ": input must have at least 2 dimensions.");
  TORCH_CHECK(other.dim() >= 2, name, ": other must have at least 2 dimensions.");
  int64_t side = left ? -2 : -1;
  TORCH_CHECK(other.size(side) == input.size(-2), name, ": other.shape[", side, "] must be equal to input.shape[-2]");
  TORCH_CHECK(tau.size(-1) <= input.size(-1), name, ": tau.shape[-1] must be less than or equal to input.shape[-1]");
  check_tau(name, input, tau);
  TORCH_CHECK(input.dim() == other.dim(), name,
              ": Expected other to have the same number of dimensions as input, but got other.ndim equal to ",
              other.dim(), " and input.ndim is equal to ", input.dim());
  auto batch = input.sizes().slice(0, input.dim() - 2), other_batch = other.sizes().slice(0, other.dim() - 2);
  TORCH_CHECK(batch.equals(other_batch), name,
              ": Expected batch dimensions of other to be equal to input.shape[:-2], but got ", other_batch);
  TORCH_CHECK(input.scalar_type() == tau.scalar_type(), name,
              ": Expected input and tau to have the same dtype, but input has dtype", input.scalar_type(),
              " and tau has dtype ", tau.scalar_type());
  TORCH_CHECK(input.scalar_type() == other.scalar_type(), name,
              ": Expected input and other to have the same dtype, but input has dtype", input.scalar_type(),
              " and other has dtype ", other.scalar_type());
  check_same_device({input, tau, other, out});
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), name, ": Expected out tensor to have dtype ",
              input.scalar_type(), ", but got ", out.scalar_type(), " instead");
  check_lapack_dtype(input, "ormqr_cpu", /*complex_native=*/true);
  resize_column_major(out, other.sizes());
  if (out.numel() == 0) return out;
  int64_t b = batch_count(input);
  // Q c applies H_{k-1} first; c Q = (Q^H c^H)^H; `transpose` names Q^H (Q^T when real)
  on_kind(input, [&]<class V>(V) {
    V a = batch_of<V>(input), taus = values_of<V>(tau, {b, tau.size(-1)}), c = batch_of<V>(other);
    store(out,
          left ? apply_reflectors(a, taus, c, !transpose) : adjoint(apply_reflectors(a, taus, adjoint(c), transpose)));
  });
  return out;
}

at::Tensor ormqr(const at::Tensor& input, const at::Tensor& tau, const at::Tensor& other, bool left, bool transpose) {
  at::Tensor out = empty_tiny({0}, input.scalar_type(), input.device());
  return ormqr_out(input, tau, other, left, transpose, out);
}

// ---- Jacobi rotations ----

// Sweeps stop when the off-diagonal part is below eps relative to the whole, or stops shrinking (rounding
// keeps it at a floor near eps); quadratic convergence reaches either in well under this many.
constexpr int kMaxSweeps = 40;

double epsilon(DType dt) {
  return dt == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// The partner of index i in round r of the round-robin over N (even) indices: N - 1 pairs with r, the
// others with (2r - i) mod (N - 1).
UOpPtr partner(const UOpPtr& i, const UOpPtr& r, int64_t n) {
  const Shape& s = i->shape;
  UOpPtr last = index_const(n - 1, s);
  UOpPtr mirrored = alu(Ops::MOD, add(sub(add(r, r), i), last), last);
  return where(eq(i, last), r, where(eq(i, r), last, mirrored));
}

// One small read: the largest ratio over the batch (a (b, 1, 1) value) to the host.
double max_ratio(const UOpPtr& off, const UOpPtr& total, c10::Device device) {
  DType dt = off->dtype;
  UOpPtr ratio = div(off, where(eq(total, zeros(total)), like(total, 1), total));
  // NaN compares false everywhere: the NaN of a NaN input must stop the sweeps, not run them to the limit
  UOpPtr nan = alu(Ops::CMPNE, ratio, ratio);
  ratio = where(nan, like(ratio, std::numeric_limits<double>::infinity()), ratio);
  int64_t b = off->shape[0];
  at::Tensor t = empty_tiny({}, to_scalar_type(dt), device);
  write(t, reshape(reduce(reshape(ratio, {b}), Ops::MAX, {0}), {}));
  return t.item<double>();
}

// The batch's sweeps: `sweep` runs one and returns (off, total) as (b, 1, 1) values. False when a matrix
// holds a non-finite value (its ratio is NaN): LAPACK's drivers fail to converge on those.
template <class Sweep> bool sweep_until_converged(DType dt, int64_t b, c10::Device device, Sweep sweep) {
  if (b == 0) return true;
  double eps = epsilon(dt), previous = std::numeric_limits<double>::infinity();
  for (int it = 0; it < kMaxSweeps; it++) {
    auto [off, total] = sweep();
    double ratio = max_ratio(off, total, device);
    if (std::isinf(ratio)) return false;
    if (!(ratio > eps * eps) || ratio >= previous) return true;
    previous = ratio;
  }
  return true;
}

// The largest magnitude of each matrix of a (b, r, c) batch, (b, 1, 1); 1 for a zero matrix. The sweeps run
// on the matrix divided by it, so that squares and sums of squares neither overflow nor underflow.
UOpPtr magnitude(const UOpPtr& x) {
  UOpPtr m = reduce(alu(Ops::ABS, x), Ops::MAX, {1, 2});
  return where(eq(m, zeros(m)), like(m, 1), m);
}

struct Rotation {
  UOpPtr c, e; // (b, N): the rotation of the pair of index i: index i' = c_i x_i + e_i x_partner(i)
};

// The rotation of each pair (p < q) that zeroes the off-diagonal g of [[app, g], [g, aqq]] (Golub & Van Loan's
// symmetric Schur decomposition of a 2x2); app, aqq, g are given per index i of the pair. g and t are realized:
// a kernel that recomputed g from a fused sum could round it otherwise than the kernel testing it for zero (a
// dot of orthogonal columns, rounding noise, was 0 in one and 1e-9 in the other: a 45 degree rotation that
// undid the sweep), and c and e come from one t.
Rotation pair_rotation(const UOpPtr& i, const UOpPtr& partner_i, const UOpPtr& app, const UOpPtr& aqq,
                       const UOpPtr& off) {
  UOpPtr g = contiguous(off);
  UOpPtr zero = zeros(g), one = like(g, 1);
  UOpPtr none = eq(g, zero);
  UOpPtr safe_g = where(none, one, g);
  UOpPtr theta = div(sub(aqq, app), mul(like(g, 2), safe_g));
  UOpPtr mag = add(alu(Ops::ABS, theta), sqrt(add(one, mul(theta, theta))));
  UOpPtr t = div(where(lt(theta, zero), like(g, -1), one), mag);
  // |theta| so large that its square overflows: the rotation is the identity to working precision
  t = where(alu(Ops::CMPNE, mag, like(mag, std::numeric_limits<double>::infinity())), t, zero);
  t = contiguous(where(none, zero, t));
  UOpPtr c = div(one, sqrt(add(one, mul(t, t))));
  UOpPtr s = mul(t, c);
  UOpPtr is_p = lt(i, partner_i);
  return {contiguous(c), contiguous(where(is_p, alu(Ops::NEG, s), s))};
}

// Gathers x (b, rows, cols; realized) at (row, col) index values of any shape (b, ...).
UOpPtr element(const UOpPtr& x, const UOpPtr& batch, const UOpPtr& row, const UOpPtr& col) {
  int64_t rows = x->shape[1], cols = x->shape[2];
  const Shape& s = row->shape;
  UOpPtr flat = add(add(mul(batch, index_const(rows * cols, s)), mul(row, index_const(cols, s))), col);
  return gather(reshape(x, {x->shape[0] * rows * cols}), flat);
}
UOpPtr entry(const UOpPtr& v, const UOpPtr& batch, const UOpPtr& i) { // v (b, N) at index values i
  return gather(reshape(v, {v->shape[0] * v->shape[1]}), add(mul(batch, index_const(v->shape[1], i->shape)), i));
}

// Symmetric eigendecomposition of a (b, n, n) batch (the triangle UPLO names): eigenvalues (b, n) ascending,
// eigenvectors (b, n, n) as columns (null unless compute_v).
std::pair<at::Tensor, at::Tensor> jacobi_eigh(const at::Tensor& A, bool lower, bool compute_v) {
  int64_t n = A.size(-1), b = batch_count(A), N = n + n % 2;
  DType dt = to_tiny_dtype(A.scalar_type());
  Shape s{b, n, n}, S{b, N, N}, v{b, N};
  UOpPtr x = batched(A);
  // the named triangle, mirrored
  UOpPtr keep =
      lower ? alu(Ops::CMPLE, coordinate(s, 2), coordinate(s, 1)) : alu(Ops::CMPLE, coordinate(s, 1), coordinate(s, 2));
  UOpPtr tri = masked(keep, x);
  UOpPtr sym = add(tri, masked(alu(Ops::CMPNE, coordinate(s, 1), coordinate(s, 2)), transposed(tri)));
  UOpPtr scale = magnitude(sym);
  sym = div(sym, broadcast(scale, s));
  // the working matrices live in storages: each sweep's read realizes them, and the next sweep reads buffers
  at::Tensor a_t = empty_tiny(S, A.scalar_type(), A.device()), v_t = empty_tiny(S, A.scalar_type(), A.device());
  write(a_t, pad(sym, {{0, 0}, {0, N - n}, {0, N - n}}));
  write(v_t, identity(dt, b, N, N));
  UOpPtr bi = coordinate(v, 0), i = coordinate(v, 1);
  UOpPtr B = coordinate(S, 0), I = coordinate(S, 1), J = coordinate(S, 2);
  UOpPtr offdiag = alu(Ops::CMPNE, I, J);
  c10::Device device = A.device();
  bool finite = sweep_until_converged(dt, b, device, [&] {
    UOpPtr a = read(a_t), vecs = read(v_t);
    for (int64_t round = 0; round < N - 1; round++) {
      UOpPtr pi = partner(i, step_index(round, v), N);
      UOpPtr p = alu(Ops::MIN, i, pi), q = alu(Ops::MAX, i, pi);
      Rotation rot = pair_rotation(i, pi, element(a, bi, p, p), element(a, bi, q, q), element(a, bi, p, q));
      UOpPtr pI = partner(I, step_index(round, S), N), pJ = partner(J, step_index(round, S), N);
      UOpPtr cI = entry(rot.c, B, I), eI = entry(rot.e, B, I), cJ = entry(rot.c, B, J), eJ = entry(rot.e, B, J);
      // J^T A J, rows then columns; the pair's off-diagonal entries are zero by construction
      UOpPtr rotated = add(add(mul(mul(cI, cJ), element(a, B, I, J)), mul(mul(eI, cJ), element(a, B, pI, J))),
                           add(mul(mul(cI, eJ), element(a, B, I, pJ)), mul(mul(eI, eJ), element(a, B, pI, pJ))));
      a = contiguous(where(both(eq(J, pI), offdiag), zeros(rotated), rotated));
      if (compute_v) vecs = contiguous(add(mul(cJ, element(vecs, B, I, J)), mul(eJ, element(vecs, B, I, pJ))));
    }
    write(a_t, a);
    if (compute_v) write(v_t, vecs);
    UOpPtr off = sum_keep(masked(offdiag, mul(a, a)), {1, 2});
    return std::pair{off, sum_keep(mul(a, a), {1, 2})};
  });
  UOpPtr a = read(a_t), vecs = read(v_t);
  TORCH_CHECK_LINALG(finite, "linalg.eigh: The algorithm failed to converge because the input matrix contained "
                             "non-finite values.");
  UOpPtr diagonal = reshape(mul(sum_keep(masked(eq(I, J), a), {2}), broadcast(scale, {b, N, 1})), {b, N});
  at::Tensor values = empty_tiny({b, n}, A.scalar_type(), device);
  write(values, shrink(diagonal, {{0, b}, {0, n}}));
  auto [sorted, order] = at::sort(values, /*stable=*/true, -1, /*descending=*/false);
  at::Tensor vectors;
  if (compute_v) {
    at::Tensor all = empty_tiny({b, n, n}, A.scalar_type(), device);
    write(all, shrink(vecs, {{0, b}, {0, n}, {0, n}}));
    vectors = all.gather(-1, order.unsqueeze(-2).expand({b, n, n}));
  }
  return {sorted, vectors};
}

// The rotation of each pair for a complex off-diagonal gamma = a_pq (given per index i of the pair): the real
// rotation of |gamma| (pair_rotation, (c, -s) at p and (c, s) at q) with the phase of gamma, so that the
// unitary [[c, s e^{i phi}], [-s e^{-i phi}, c]] zeroes gamma: e_p = -s conj(gamma / |gamma|),
// e_q = s gamma / |gamma|.
Cx with_phase(const UOpPtr& i, const UOpPtr& partner_i, const UOpPtr& e, const Cx& gamma, const UOpPtr& g) {
  Cx phase = unit(gamma, g);
  UOpPtr im = mul(e, phase.im);
  return realized(Cx{mul(e, phase.re), where(lt(i, partner_i), alu(Ops::NEG, im), im)});
}

// Hermitian eigendecomposition of a complex (b, n, n) batch by the same Jacobi sweeps as jacobi_eigh, with
// complex rotations: eigenvalues (b, n) real and ascending, eigenvectors (b, n, n) complex (null unless
// compute_v).
std::pair<at::Tensor, at::Tensor> jacobi_eigh_complex(const at::Tensor& A, bool lower, bool compute_v) {
  int64_t n = A.size(-1), b = batch_count(A), N = n + n % 2;
  at::ScalarType real = c10::toRealValueType(A.scalar_type());
  DType dt = to_tiny_dtype(real);
  Shape s{b, n, n}, S{b, N, N}, v{b, N};
  Cx x = batched_complex(A);
  UOpPtr rows = coordinate(s, 1), cols = coordinate(s, 2), off_s = alu(Ops::CMPNE, rows, cols);
  // the named triangle and its conjugate mirror; the diagonal's imaginary parts count as zero, as in LAPACK
  Cx tri = masked(lower ? alu(Ops::CMPLE, cols, rows) : alu(Ops::CMPLE, rows, cols), x);
  Cx herm{add(tri.re, masked(off_s, transposed(tri.re))), masked(off_s, sub(tri.im, transposed(tri.im)))};
  UOpPtr scale = magnitude(alu(Ops::MAX, alu(Ops::ABS, herm.re), alu(Ops::ABS, herm.im)));
  std::vector<std::pair<int64_t, int64_t>> padding{{0, 0}, {0, N - n}, {0, N - n}};
  c10::Device device = A.device();
  // the working matrices live in storages: each sweep's read realizes them, and the next sweep reads buffers
  at::Tensor a_re = empty_tiny(S, real, device), a_im = empty_tiny(S, real, device);
  at::Tensor v_re = empty_tiny(S, real, device), v_im = empty_tiny(S, real, device);
  write(a_re, pad(div(herm.re, broadcast(scale, s)), padding));
  write(a_im, pad(div(herm.im, broadcast(scale, s)), padding));
  write(v_re, identity(dt, b, N, N));
  write(v_im, fixed(dt, 0, S));
  UOpPtr bi = coordinate(v, 0), i = coordinate(v, 1);
  UOpPtr B = coordinate(S, 0), I = coordinate(S, 1), J = coordinate(S, 2);
  UOpPtr offdiag = alu(Ops::CMPNE, I, J);
  bool finite = sweep_until_converged(dt, b, device, [&] {
    Cx a{read(a_re), read(a_im)}, vecs{read(v_re), read(v_im)};
    for (int64_t round = 0; round < N - 1; round++) {
      UOpPtr pi = partner(i, step_index(round, v), N);
      UOpPtr p = alu(Ops::MIN, i, pi), q = alu(Ops::MAX, i, pi);
      Cx gamma{element(a.re, bi, p, q), element(a.im, bi, p, q)};
      UOpPtr g = cm::abs(gamma);
      Rotation rot = pair_rotation(i, pi, element(a.re, bi, p, p), element(a.re, bi, q, q), g);
      Cx e = with_phase(i, pi, rot.e, gamma, g);
      UOpPtr pI = partner(I, step_index(round, S), N), pJ = partner(J, step_index(round, S), N);
      UOpPtr cI = entry(rot.c, B, I), cJ = entry(rot.c, B, J);
      Cx eI{entry(e.re, B, I), entry(e.im, B, I)}, eJ{entry(e.re, B, J), entry(e.im, B, J)};
      auto entries = [&](const UOpPtr& r, const UOpPtr& c) {
        return Cx{element(a.re, B, r, c), element(a.im, B, r, c)};
      };
      // J^H A J, rows then columns; the pair's off-diagonal entries are zero by construction, the diagonal real
      Cx rotated = cm::add(
          cm::add(cm::scale(a, mul(cI, cJ)), cm::scale(cm::mul(cm::conj(eI), entries(pI, J)), cJ)),
          cm::add(cm::scale(cm::mul(eJ, entries(I, pJ)), cI), cm::mul(cm::mul(cm::conj(eI), eJ), entries(pI, pJ))));
      UOpPtr zeroed = both(eq(J, pI), offdiag);
      a = realized(Cx{where(zeroed, zeros(rotated.re), rotated.re),
                      where(alu(Ops::OR, zeroed, eq(I, J)), zeros(rotated.im), rotated.im)});
      if (compute_v) {
        Cx other{element(vecs.re, B, I, pJ), element(vecs.im, B, I, pJ)};
        vecs = realized(cm::add(cm::scale(vecs, cJ), cm::mul(eJ, other)));
      }
    }
    write(a_re, a.re);
    write(a_im, a.im);
    if (compute_v) {
      write(v_re, vecs.re);
      write(v_im, vecs.im);
    }
    UOpPtr sq = squared_abs(a);
    return std::pair{sum_keep(masked(offdiag, sq), {1, 2}), sum_keep(sq, {1, 2})};
  });
  UOpPtr a = read(a_re);
  TORCH_CHECK_LINALG(finite, "linalg.eigh: The algorithm failed to converge because the input matrix contained "
                             "non-finite values.");
  UOpPtr diagonal = reshape(mul(sum_keep(masked(eq(I, J), a), {2}), broadcast(scale, {b, N, 1})), {b, N});
  at::Tensor values = empty_tiny({b, n}, real, device);
  write(values, shrink(diagonal, {{0, b}, {0, n}}));
  auto [sorted, order] = at::sort(values, /*stable=*/true, -1, /*descending=*/false);
  at::Tensor vectors;
  if (compute_v) {
    Cx all = shrink(Cx{read(v_re), read(v_im)}, {{0, b}, {0, n}, {0, n}});
    vectors = complex_tensor(all, A.scalar_type(), device).gather(-1, order.unsqueeze(-2).expand({b, n, n}));
  }
  return {sorted, vectors};
}

std::tuple<at::Tensor&, at::Tensor&> linalg_eigh_out(const at::Tensor& A, c10::string_view uplo, bool compute_v,
                                                     at::Tensor& values, at::Tensor& vectors) {
  at::meta::_linalg_eigh_outf(A, uplo, compute_v, values, vectors);
  check_lapack_dtype(A, "linalg_eigh_cpu", /*complex_native=*/true);
  if (A.numel() == 0) return {values, vectors};
  bool lower = uplo == "L" || uplo == "l";
  auto [w, V] = A.is_complex() ? jacobi_eigh_complex(A, lower, compute_v) : jacobi_eigh(A, lower, compute_v);
  int64_t b = batch_count(A), n = A.size(-1);
  store(values, reshape(read(w), {b, 1, n}));
  if (compute_v && A.is_complex()) store(vectors, parts(V));
  if (compute_v && !A.is_complex()) store(vectors, read(V));
  return {values, vectors};
}

std::tuple<at::Tensor, at::Tensor> linalg_eigh(const at::Tensor& A, c10::string_view uplo, bool compute_v) {
  // a complex A's eigenvalues are real
  at::ScalarType real = c10::toRealValueType(A.scalar_type());
  at::Tensor values = empty_tiny({0}, real, A.device()), vectors = empty_tiny({0}, A.scalar_type(), A.device());
  linalg_eigh_out(A, uplo, compute_v, values, vectors);
  return {values, vectors};
}

// ---- SVD ----

struct Svd {
  at::Tensor U, S, V; // (b, m, ucols), (b, k), (b, n, k); U and V undefined unless asked
};

// The SVD of a tall (b, m, n) batch (m >= n) by one-sided Jacobi.
Svd jacobi_svd_tall(const UOpPtr& x, bool full, bool compute_uv, c10::Device device) {
  int64_t b = x->shape[0], m = x->shape[1], n = x->shape[2], N = n + n % 2;
  DType dt = x->dtype;
  at::ScalarType st = to_scalar_type(dt);
  Shape s{b, m, N}, S{b, N, N}, v{b, N}, gram{b, N, N};
  // the working matrices live in storages: each sweep's read realizes them, and the next sweep reads buffers
  at::Tensor a_t = empty_tiny(s, st, device), v_t = empty_tiny(S, st, device);
  UOpPtr scale = magnitude(x);
  write(a_t, pad(div(x, broadcast(scale, x->shape)), {{0, 0}, {0, 0}, {0, N - n}}));
  write(v_t, identity(dt, b, N, N));
  UOpPtr bi = coordinate(v, 0), i = coordinate(v, 1);
  UOpPtr B = coordinate(s, 0), R = coordinate(s, 1), C = coordinate(s, 2);
  UOpPtr VB = coordinate(S, 0), VI = coordinate(S, 1), VJ = coordinate(S, 2);
  bool finite = sweep_until_converged(dt, b, device, [&] {
    UOpPtr a = read(a_t), vecs = read(v_t);
    for (int64_t round = 0; round < N - 1; round++) {
      UOpPtr pC = partner(C, step_index(round, s), N);
      UOpPtr col = a, other = element(a, B, R, pC);
      // per column i: |a_i|^2 and a_i . a_partner(i), reduced over the rows
      UOpPtr norms = contiguous(reshape(sum_keep(mul(col, col), {1}), v));
      UOpPtr dots = contiguous(reshape(sum_keep(mul(col, other), {1}), v));
      UOpPtr pi = partner(i, step_index(round, v), N);
      UOpPtr own = norms, theirs = entry(norms, bi, pi);
      UOpPtr is_p = lt(i, pi);
      // both indices of a pair take the dot computed at p (at q it is the same sum only up to rounding)
      UOpPtr gamma = entry(dots, bi, alu(Ops::MIN, i, pi));
      Rotation rot = pair_rotation(i, pi, where(is_p, own, theirs), where(is_p, theirs, own), gamma);
      UOpPtr cC = entry(rot.c, B, C), eC = entry(rot.e, B, C);
      a = contiguous(add(mul(cC, a), mul(eC, other)));
      if (compute_uv) {
        UOpPtr pJ = partner(VJ, step_index(round, S), N);
        UOpPtr cJ = entry(rot.c, VB, VJ), eJ = entry(rot.e, VB, VJ);
        vecs = contiguous(add(mul(cJ, vecs), mul(eJ, element(vecs, VB, VI, pJ))));
      }
    }
    write(a_t, a);
    if (compute_uv) write(v_t, vecs);
    // the Gram matrix's off-diagonal part against its diagonal
    UOpPtr g = sum_keep(mul(broadcast(reshape(transposed(a), {b, N, 1, m}), {b, N, N, m}),
                            broadcast(reshape(transposed(a), {b, 1, N, m}), {b, N, N, m})),
                        {3});
    g = reshape(g, gram);
    UOpPtr off = masked(alu(Ops::CMPNE, coordinate(gram, 1), coordinate(gram, 2)), mul(g, g));
    return std::pair{sum_keep(off, {1, 2}),
                     sum_keep(masked(eq(coordinate(gram, 1), coordinate(gram, 2)), mul(g, g)), {1, 2})};
  });
  UOpPtr cols = shrink(read(a_t), {{0, b}, {0, m}, {0, n}});
  at::Tensor sigma = empty_tiny({b, n}, st, device);
  TORCH_CHECK_LINALG(finite, "linalg.svd: The algorithm failed to converge because the input matrix contained "
                             "non-finite values.");
  write(sigma, reshape(mul(sqrt(sum_keep(mul(cols, cols), {1})), broadcast(scale, {b, 1, n})), {b, n}));
  auto [sorted, order] = at::sort(sigma, /*stable=*/true, -1, /*descending=*/true);
  Svd out{at::Tensor(), sorted, at::Tensor()};
  if (!compute_uv) return out;
  at::Tensor rotated = empty_tiny({b, m, n}, st, device), V = empty_tiny({b, n, n}, st, device);
  write(rotated, cols);
  write(V, shrink(read(v_t), {{0, b}, {0, n}, {0, n}}));
  out.V = V.gather(-1, order.unsqueeze(-2).expand({b, n, n}));
  at::Tensor ordered = rotated.gather(-1, order.unsqueeze(-2).expand({b, m, n}));
  // U from the QR of the ordered columns: Q's columns are theirs up to the sign of R's diagonal
  Reflectors f = householder_qr(read(ordered));
  int64_t ucols = full ? m : n;
  UOpPtr q = apply_reflectors(f.a, f.tau, identity(dt, b, m, ucols), true);
  Shape us{b, m, ucols}, rd{b, n, n};
  UOpPtr rdiag = sum_keep(masked(eq(coordinate(rd, 1), coordinate(rd, 2)), shrink(f.a, {{0, b}, {0, n}, {0, n}})), {1});
  UOpPtr sign = where(lt(rdiag, zeros(rdiag)), like(rdiag, -1), like(rdiag, 1)); // (b, 1, n)
  if (ucols > n) sign = pad(sign, {{0, 0}, {0, 0}, {0, ucols - n}});
  sign = where(alu(Ops::CMPLT, coordinate(us, 2), index_const(n, us)), broadcast(sign, us), like(q, 1));
  out.U = empty_tiny({b, m, ucols}, st, device);
  write(out.U, mul(q, sign));
  return out;
}

// The SVD of a complex tall (b, m, n) batch (m >= n) by one-sided Jacobi as jacobi_svd_tall, with complex
// rotations: for columns p, q the real rotation of |a_p^H a_q| with its phase (with_phase) makes them
// orthogonal. U and V are complex, S real.
Svd jacobi_svd_tall(const Cx& x, bool full, bool compute_uv, c10::Device device, at::ScalarType complex_type) {
  int64_t b = x.re->shape[0], m = x.re->shape[1], n = x.re->shape[2], N = n + n % 2;
  DType dt = x.re->dtype;
  at::ScalarType st = to_scalar_type(dt);
  Shape s{b, m, N}, S{b, N, N}, v{b, N}, gram{b, N, N}, pairs{b, N, N, m};
  // the working matrices live in storages: each sweep's read realizes them, and the next sweep reads buffers
  at::Tensor a_re = empty_tiny(s, st, device), a_im = empty_tiny(s, st, device);
  at::Tensor v_re = empty_tiny(S, st, device), v_im = empty_tiny(S, st, device);
  UOpPtr scale = magnitude(alu(Ops::MAX, alu(Ops::ABS, x.re), alu(Ops::ABS, x.im)));
  std::vector<std::pair<int64_t, int64_t>> padding{{0, 0}, {0, 0}, {0, N - n}};
  write(a_re, pad(div(x.re, broadcast(scale, x.re->shape)), padding));
  write(a_im, pad(div(x.im, broadcast(scale, x.im->shape)), padding));
  write(v_re, identity(dt, b, N, N));
  write(v_im, fixed(dt, 0, S));
  UOpPtr bi = coordinate(v, 0), i = coordinate(v, 1);
  UOpPtr B = coordinate(s, 0), R = coordinate(s, 1), C = coordinate(s, 2);
  UOpPtr VB = coordinate(S, 0), VI = coordinate(S, 1), VJ = coordinate(S, 2);
  bool finite = sweep_until_converged(dt, b, device, [&] {
    Cx a{read(a_re), read(a_im)}, vecs{read(v_re), read(v_im)};
    for (int64_t round = 0; round < N - 1; round++) {
      UOpPtr pC = partner(C, step_index(round, s), N);
      Cx other{element(a.re, B, R, pC), element(a.im, B, R, pC)};
      // per column i: |a_i|^2 and a_i^H a_partner(i), reduced over the rows
      UOpPtr norms = contiguous(reshape(sum_keep(squared_abs(a), {1}), v));
      Cx dots = realized(reshape(sum_keep(cm::mul(cm::conj(a), other), {1}), v));
      UOpPtr pi = partner(i, step_index(round, v), N);
      UOpPtr own = norms, theirs = entry(norms, bi, pi);
      UOpPtr is_p = lt(i, pi);
      // both indices of a pair take gamma = a_p^H a_q from p: the dot computed at q is conj(gamma) only up to
      // rounding, and where gamma is rounding noise (columns orthogonal already) its phase would be another,
      // and the rotation not unitary
      UOpPtr p = alu(Ops::MIN, i, pi);
      Cx gamma{entry(dots.re, bi, p), entry(dots.im, bi, p)};
      UOpPtr g = cm::abs(gamma);
      Rotation rot = pair_rotation(i, pi, where(is_p, own, theirs), where(is_p, theirs, own), g);
      Cx e = with_phase(i, pi, rot.e, gamma, g);
      UOpPtr cC = entry(rot.c, B, C);
      Cx eC{entry(e.re, B, C), entry(e.im, B, C)};
      a = realized(cm::add(cm::scale(a, cC), cm::mul(eC, other)));
      if (compute_uv) {
        UOpPtr pJ = partner(VJ, step_index(round, S), N);
        UOpPtr cJ = entry(rot.c, VB, VJ);
        Cx eJ{entry(e.re, VB, VJ), entry(e.im, VB, VJ)};
        Cx others{element(vecs.re, VB, VI, pJ), element(vecs.im, VB, VI, pJ)};
        vecs = realized(cm::add(cm::scale(vecs, cJ), cm::mul(eJ, others)));
      }
    }
    write(a_re, a.re);
    write(a_im, a.im);
    if (compute_uv) {
      write(v_re, vecs.re);
      write(v_im, vecs.im);
    }
    // the Gram matrix A^H A's off-diagonal part against its diagonal
    Cx columns{transposed(a.re), transposed(a.im)}; // (b, N, m)
    Cx left = broadcast(reshape(columns, {b, N, 1, m}), pairs),
       right = broadcast(reshape(columns, {b, 1, N, m}), pairs);
    UOpPtr g = squared_abs(reshape(sum_keep(cm::mul(cm::conj(left), right), {3}), gram));
    UOpPtr diagonal = eq(coordinate(gram, 1), coordinate(gram, 2));
    return std::pair{sum_keep(masked(alu(Ops::NOT, diagonal), g), {1, 2}), sum_keep(masked(diagonal, g), {1, 2})};
  });
  Cx cols = shrink(Cx{read(a_re), read(a_im)}, {{0, b}, {0, m}, {0, n}});
  at::Tensor sigma = empty_tiny({b, n}, st, device);
  TORCH_CHECK_LINALG(finite, "linalg.svd: The algorithm failed to converge because the input matrix contained "
                             "non-finite values.");
  write(sigma, reshape(mul(sqrt(sum_keep(squared_abs(cols), {1})), broadcast(scale, {b, 1, n})), {b, n}));
  auto [sorted, order] = at::sort(sigma, /*stable=*/true, -1, /*descending=*/true);
  Svd out{at::Tensor(), sorted, at::Tensor()};
  if (!compute_uv) return out;
  Cx V = shrink(Cx{read(v_re), read(v_im)}, {{0, b}, {0, n}, {0, n}});
  out.V = complex_tensor(V, complex_type, device).gather(-1, order.unsqueeze(-2).expand({b, n, n}));
  at::Tensor ordered = complex_tensor(cols, complex_type, device).gather(-1, order.unsqueeze(-2).expand({b, m, n}));
  // U from the QR of the ordered columns: R's diagonal is real, so Q's columns are theirs up to its signs
  ComplexReflectors f = householder_qr(parts(ordered));
  int64_t ucols = full ? m : n;
  Cx q = apply_reflectors(f.a, f.tau, complex_identity(dt, b, m, ucols), true);
  Shape us{b, m, ucols}, rd{b, n, n};
  UOpPtr rdiag =
      sum_keep(masked(eq(coordinate(rd, 1), coordinate(rd, 2)), shrink(f.a.re, {{0, b}, {0, n}, {0, n}})), {1});
  UOpPtr sign = where(lt(rdiag, zeros(rdiag)), like(rdiag, -1), like(rdiag, 1)); // (b, 1, n)
  if (ucols > n) sign = pad(sign, {{0, 0}, {0, 0}, {0, ucols - n}});
  sign = where(alu(Ops::CMPLT, coordinate(us, 2), index_const(n, us)), broadcast(sign, us), like(q.re, 1));
  out.U = complex_tensor(cm::scale(q, sign), complex_type, device);
  return out;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_svd_out(const at::Tensor& A, bool full_matrices,
                                                                 bool compute_uv,
                                                                 std::optional<c10::string_view> driver, at::Tensor& U,
                                                                 at::Tensor& S, at::Tensor& Vh) {
  at::meta::_linalg_svd_outf(A, full_matrices, compute_uv, driver, U, S, Vh);
  TORCH_CHECK(!driver.has_value(),
              "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend.");
  check_lapack_dtype(A, "linalg_svd_cpu", /*complex_native=*/true);
  int64_t m = A.size(-2), n = A.size(-1), b = batch_count(A), k = std::min(m, n);
  DType dt = to_tiny_dtype(c10::toRealValueType(A.scalar_type()));
  if (A.numel() == 0) {
    // full_matrices of m x 0 or 0 x n matrices: the identity
    for (at::Tensor* out : {&U, &Vh}) {
      if (!compute_uv || out->numel() == 0) continue;
      UOpPtr eye = identity(dt, b, out->size(-2), out->size(-1));
      if (A.is_complex())
        store(*out, real_value(eye));
      else
        store(*out, eye);
    }
    return {U, S, Vh};
  }
  bool wide = m < n;
  if (A.is_complex()) {
    // A^H = U' S V'^H: U = V', Vh = U'^H
    Cx x = batched_complex(A);
    Svd r = jacobi_svd_tall(wide ? adjoint(x) : x, full_matrices, compute_uv, A.device(), A.scalar_type());
    store(S, reshape(read(r.S), {b, 1, k}));
    if (compute_uv) {
      store(U, parts(wide ? r.V : r.U));
      store(Vh, adjoint(parts(wide ? r.U : r.V)));
    }
    return {U, S, Vh};
  }
  UOpPtr x = batched(A);
  Svd r = jacobi_svd_tall(wide ? transposed(x) : x, full_matrices, compute_uv, A.device());
  store(S, reshape(read(r.S), {b, 1, k}));
  if (compute_uv) {
    // A^T = U' S V'^T: U = V', Vh = U'^T
    store(U, wide ? read(r.V) : read(r.U));
    store(Vh, wide ? transposed(read(r.U)) : transposed(read(r.V)));
  }
  return {U, S, Vh};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_svd(const at::Tensor& A, bool full_matrices, bool compute_uv,
                                                          std::optional<c10::string_view> driver) {
  // a complex A's singular values are real
  at::Tensor U = empty_tiny({0}, A.scalar_type(), A.device()), Vh = empty_tiny({0}, A.scalar_type(), A.device());
  at::Tensor S = empty_tiny({0}, c10::toRealValueType(A.scalar_type()), A.device());
  linalg_svd_out(A, full_matrices, compute_uv, driver, U, S, Vh);
  return {U, S, Vh};
}

// ---- polar and matrix_sqrth ----
//
// torch's CPU kernels compose both from a decomposition, and so do these, with the same formulas, so that
// the values agree to rounding (measured: the CPU's results equal these formulas bit for bit on its own
// decompositions, symmetrization included). polar: A = W S Vh gives U = W Vh and H = Vh^H (S Vh), then
// (H + H^H) / 2. matrix_sqrth: A = V diag(w) V^H (the lower triangle, as eigh's default) gives
// V diag(sqrt(max(w, 0))) V^H, symmetrized the same way. Their gradients are torch's formulas. Complex inputs
// take the same formulas with the complex SVD and eigh.

at::Tensor symmetrized(const at::Tensor& x) { return x.add(x.mH()).mul(0.5).contiguous(); }

std::tuple<at::Tensor&, at::Tensor&> linalg_polar_out(const at::Tensor& A, at::Tensor& U, at::Tensor& H) {
  at::meta::linalg_polar_outf(A, U, H);
  check_lapack_dtype(A, "linalg_svd_cpu", /*complex_native=*/true);
  if (A.numel() == 0) return {U, H};
  auto [W, S, Vh] = at::_linalg_svd(A, /*full_matrices=*/false, /*compute_uv=*/true);
  U.copy_(W.matmul(Vh));
  H.copy_(symmetrized(Vh.mH().matmul(S.unsqueeze(-1).mul(Vh))));
  return {U, H};
}

std::tuple<at::Tensor, at::Tensor> linalg_polar(const at::Tensor& A) {
  at::Tensor U = empty_tiny({0}, A.scalar_type(), A.device()), H = empty_tiny({0}, A.scalar_type(), A.device());
  linalg_polar_out(A, U, H);
  return {U, H};
}

at::Tensor linalg_matrix_sqrth(const at::Tensor& A) {
  at::native::squareCheckInputs(A, "linalg.matrix_sqrth");
  at::native::checkFloatingOrComplex(A, "linalg.matrix_sqrth", /*allow_low_precision_dtypes=*/false);
  if (A.is_complex()) check_lapack_dtype(A, "linalg_eigh_cpu", /*complex_native=*/true);
  if (A.numel() == 0) return empty_tiny(A.sizes(), A.scalar_type(), A.device());
  auto [w, V] = at::_linalg_eigh(A, "L", /*compute_v=*/true);
  return symmetrized(V.mul(w.clamp_min(0).sqrt().unsqueeze(-2)).matmul(V.mH()));
}

// ---- least squares ----
//
// Every driver solves through the SVD, x = V S^+ U^H b with the singular values at or below rcond * s_max
// dropped: the minimum-norm least-squares solution, which is LAPACK's for each driver on inputs of full rank
// and gelsy's, gelsd's and gelss's on inputs of lower rank too (gels assumes full rank). The outputs each
// driver fills are torch's: rank for gelsy, gelsd and gelss; singular values for gelsd and gelss; residuals
// (the squared norms of b - A x) for tall inputs, except with gelsy, and with gelsd and gelss only when every
// matrix has full rank. Complex inputs take the complex SVD; their residuals and singular values are real.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&>
linalg_lstsq_out(const at::Tensor& input, const at::Tensor& other, std::optional<double> rcond,
                 std::optional<c10::string_view> driver_opt, at::Tensor& solution, at::Tensor& residuals,
                 at::Tensor& rank, at::Tensor& singular_values) {
  const char* name = "torch.linalg.lstsq";
  TORCH_CHECK(input.dim() >= 2, name, ": input must have at least 2 dimensions.");
  TORCH_CHECK(other.dim() >= 1, name, ": other must have at least 1 dimension.");
  TORCH_CHECK(input.scalar_type() == other.scalar_type(), name,
              ": Expected input and other to have the same dtype, but got input's dtype ", input.scalar_type(),
              " and other's dtype ", other.scalar_type());
  check_same_device({input, other, solution, residuals, rank, singular_values});
  TORCH_CHECK(input.dim() >= other.dim() && input.dim() - other.dim() <= 1, name,
              ": input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) <= 1");
  bool vector_case = other.dim() == input.dim() - 1;
  int64_t m = input.size(-2), n = input.size(-1);
  TORCH_CHECK(other.size(vector_case ? -1 : -2) == m, name, ": input.size(-2) should match other.size(",
              vector_case ? -1 : -2, ")");
  std::string driver(driver_opt.value_or("gelsy"));
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss", name,
              ": parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  at::ScalarType st = input.scalar_type(), real = c10::toRealValueType(st);
  bool complex = input.is_complex();
  if (complex && st != at::kComplexFloat && st != at::kComplexDouble) to_tiny_dtype(st); // NotNativeDtype
  TORCH_CHECK(real == at::kFloat || real == at::kDouble,
              "This function doesn't handle types other than float and double");
  // a complex input's residuals and singular values are real; out= tensors of other dtypes take the CPU's own
  // checks and casts (NotNativeDtype)
  if (complex && (solution.scalar_type() != st || residuals.scalar_type() != real ||
                  singular_values.scalar_type() != real || rank.scalar_type() != at::kLong))
    to_tiny_dtype(st);
  if (!complex)
    for (const at::Tensor* out : {&solution, &residuals, &singular_values})
      TORCH_CHECK(out->scalar_type() == st, name, ": Expected out tensor to have dtype ", st, ", but got ",
                  out->scalar_type(), " instead");
  TORCH_CHECK(rank.scalar_type() == at::kLong, name, ": Expected out tensor to have dtype Long, but got ",
              rank.scalar_type(), " instead");
  at::Tensor b = vector_case ? other.unsqueeze(-1) : other;
  std::vector<int64_t> batch = at::infer_size(input.sizes().slice(0, input.dim() - 2), b.sizes().slice(0, b.dim() - 2));
  int64_t k = b.size(-1);
  auto sized = [&](std::initializer_list<int64_t> tail) {
    std::vector<int64_t> s = batch;
    s.insert(s.end(), tail);
    return s;
  };
  at::Tensor A = input.expand(sized({m, n})), B = b.expand(sized({m, k}));
  auto [U, S, Vh] = at::_linalg_svd(A, /*full_matrices=*/false, /*compute_uv=*/true);
  double cut = rcond.has_value() && *rcond > 0 ? *rcond : epsilon(to_tiny_dtype(real)) * std::max(m, n);
  at::Tensor largest = std::min(m, n) > 0 ? S.narrow(-1, 0, 1) : S;
  at::Tensor kept = S.gt(largest.mul(cut));
  at::Tensor inverse = at::where(kept, S.reciprocal(), at::zeros_like(S));
  at::Tensor x = Vh.mH().matmul(inverse.unsqueeze(-1).mul(U.mH().matmul(B)));
  at::Tensor r = kept.sum(-1);
  bool has_rank = driver != "gels", has_sv = driver == "gelsd" || driver == "gelss";
  bool has_residuals = m > n && driver != "gelsy";
  if (has_residuals && has_sv) has_residuals = r.eq(n).all().item<bool>();
  std::vector<int64_t> solution_sizes = vector_case ? sized({n}) : sized({n, k});
  if (solution.sizes().equals(solution_sizes)) {
    solution.copy_(vector_case ? x.squeeze(-1) : x);
  } else {
    // the CPU's solution is the first n rows of LAPACK's column-major (max(m, n), k) right-hand side
    std::vector<int64_t> full = sized({std::max(m, n), k});
    at::Tensor rhs = empty_tiny(full, column_major_strides(full), input.scalar_type(), input.device());
    at::Tensor rows = rhs.narrow(-2, 0, n);
    rows.copy_(x);
    at::native::resize_output(solution, {0});
    solution.set_(rhs.storage(), 0, solution_sizes, vector_case ? rows.squeeze(-1).strides() : rows.strides());
  }
  if (has_residuals) {
    // (..., k) also for a vector b, as the CPU
    at::native::resize_output(residuals, sized({k}));
    at::Tensor misfit = A.matmul(x).sub(B);
    residuals.copy_((complex ? misfit.abs() : misfit).square().sum(-2));
  } else {
    at::native::resize_output(residuals, {0});
  }
  at::native::resize_output(rank, has_rank ? at::IntArrayRef(batch) : at::IntArrayRef{0});
  if (has_rank) rank.copy_(r);
  at::native::resize_output(singular_values, has_sv ? sized({std::min(m, n)}) : std::vector<int64_t>{0});
  if (has_sv) singular_values.copy_(S);
  return {solution, residuals, rank, singular_values};
}

// ---- matrix_exp ----
//
// Scaling and squaring: A / 2^s has 1-norm at most 1 (s from the largest norm of the batch: one small read),
// its exponential is the Taylor polynomial of degree 18 (Horner's rule; the remainder is below 1/19! < 1e-17),
// squared s times. Each Horner step is a matmul and an add with 1/k as a runtime scalar: the same kernels for
// every k. float16 and bfloat16 compute in float32; complex64 and complex128 take the same steps on complex
// values (complex matmul, scaling by real powers of two), and the 1-norm is of the elements' moduli.
at::Tensor linalg_matrix_exp(const at::Tensor& A) {
  TORCH_CHECK(A.dim() >= 2, "linalg.matrix_exp: The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(A.size(-1) == A.size(-2), "linalg.matrix_exp: A must be batches of square matrices, but they are ",
              A.size(-2), " by ", A.size(-1), " matrices");
  TORCH_CHECK(at::isFloatingType(A.scalar_type()) || A.is_complex(),
              "linalg.matrix_exp: Expected a floating point or complex tensor as input. Got ", A.scalar_type());
  if (A.scalar_type() == at::kComplexHalf) to_tiny_dtype(A.scalar_type()); // NotNativeDtype: the CPU computes it
  int64_t n = A.size(-1);
  // torch's CPU kernel: the elementwise exponential of 1 x 1 matrices
  if (n == 1) return A.exp();
  if (A.numel() == 0) return at::empty(A.sizes(), A.options());
  bool half = A.scalar_type() == at::kHalf || A.scalar_type() == at::kBFloat16;
  at::Tensor x = half ? A.to(at::kFloat) : A.contiguous();
  double norm = x.abs().sum(-2).amax().item<double>();
  int squarings = std::isfinite(norm) && norm > 1 ? static_cast<int>(std::ceil(std::log2(norm))) : 0;
  if (squarings > 0) x = x.mul(std::ldexp(1.0, -squarings));
  at::Tensor eye = at::eye(n, x.options()).expand(x.sizes());
  at::Tensor e = eye;
  for (int k = 18; k >= 1; k--)
    e = x.matmul(e).mul(1.0 / k).add(eye);
  for (int i = 0; i < squarings; i++)
    e = e.matmul(e);
  return half ? e.to(A.scalar_type()) : e.contiguous();
}

// ---- linalg_cross ----

// x along `dim` (size 3) rotated by k: element i is x[(i + k) % 3].
UOpPtr rotated(const UOpPtr& x, int64_t dim, int64_t k) {
  std::vector<std::pair<int64_t, int64_t>> tail, head;
  std::vector<std::pair<int64_t, int64_t>> tail_pad(x->shape.size(), {0, 0}), head_pad(x->shape.size(), {0, 0});
  for (size_t d = 0; d < x->shape.size(); d++) {
    bool along = static_cast<int64_t>(d) == dim;
    tail.push_back(along ? std::pair<int64_t, int64_t>{k, 3} : std::pair<int64_t, int64_t>{0, x->shape[d]});
    head.push_back(along ? std::pair<int64_t, int64_t>{0, k} : std::pair<int64_t, int64_t>{0, x->shape[d]});
  }
  tail_pad[dim] = {0, k};
  head_pad[dim] = {3 - k, 0};
  UOpPtr a = pad(shrink(x, tail), tail_pad), b = pad(shrink(x, head), head_pad);
  return x->dtype == DType::Bool ? alu(Ops::OR, a, b) : add(a, b);
}

at::Tensor& linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim, at::Tensor& out) {
  at::meta::linalg_cross_outf(self, other, dim, out);
  // the meta function promotes; the CPU kernel then wants one dtype
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "expected scalar type ", self.scalar_type(), " but found ",
              other.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"cross\" not implemented for 'Bool'");
  if (out.numel() == 0) return out;
  Shape shape = to_shape(out.sizes());
  int64_t d = at::maybe_wrap_dim(dim, out.dim());
  if (out.is_complex()) { // the same products of complex parts
    namespace cx = complex_math;
    DType dt = element_dtype(out.scalar_type());
    Shape pairs = shape;
    pairs.push_back(2);
    auto parts = [&](const at::Tensor& t) { return cx::parts_of(cast(expand(read_complex(t), pairs), dt)); };
    auto turned = [&](const cx::Cx& z, int64_t k) { return cx::Cx{rotated(z.re, d, k), rotated(z.im, d, k)}; };
    cx::Cx a = parts(self), b = parts(other);
    write_complex(out, cx::pairs_of(cx::sub(cx::mul(turned(a, 1), turned(b, 2)), cx::mul(turned(a, 2), turned(b, 1)))));
    return out;
  }
  DType dt = to_tiny_dtype(out.scalar_type());
  UOpPtr a = cast(expand(read(self), shape), dt), b = cast(expand(read(other), shape), dt);
  write(out, sub(mul(rotated(a, d, 1), rotated(b, d, 2)), mul(rotated(a, d, 2), rotated(b, d, 1))));
  return out;
}

at::Tensor linalg_cross(const at::Tensor& self, const at::Tensor& other, int64_t dim) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return linalg_cross_out(self, other, dim, out);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("geqrf", TORCH_FN(geqrf));
  m.impl("geqrf.a", TORCH_FN(geqrf_out));
  m.impl("linalg_qr", TORCH_FN(linalg_qr));
  m.impl("linalg_qr.out", TORCH_FN(linalg_qr_out));
  m.impl("linalg_householder_product", TORCH_FN(householder_product));
  m.impl("linalg_householder_product.out", TORCH_FN(householder_product_out));
  m.impl("ormqr", TORCH_FN(ormqr));
  m.impl("ormqr.out", TORCH_FN(ormqr_out));
  m.impl("_linalg_eigh", TORCH_FN(linalg_eigh));
  m.impl("_linalg_eigh.eigenvalues", TORCH_FN(linalg_eigh_out));
  m.impl("_linalg_svd", TORCH_FN(linalg_svd));
  m.impl("_linalg_svd.U", TORCH_FN(linalg_svd_out));
  m.impl("linalg_polar", TORCH_FN(linalg_polar));
  m.impl("linalg_polar.out", TORCH_FN(linalg_polar_out));
  m.impl("linalg_matrix_sqrth", TORCH_FN(linalg_matrix_sqrth));
  m.impl("linalg_lstsq.out", TORCH_FN(linalg_lstsq_out));
  m.impl("linalg_matrix_exp", TORCH_FN(linalg_matrix_exp));
  m.impl("linalg_cross", TORCH_FN(linalg_cross));
  m.impl("linalg_cross.out", TORCH_FN(linalg_cross_out));
}

} // namespace tiny::aten_ops
