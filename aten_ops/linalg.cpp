// Linear algebra, part 1: the LU, Cholesky and triangular family. LU with partial pivoting
// (linalg_lu_factor_ex, linalg_lu, lu_unpack, linalg_lu_solve), the Cholesky factorisation
// (linalg_cholesky_ex, cholesky_solve, cholesky_inverse), triangular solves (triangular_solve,
// linalg_solve_triangular), and what torch builds on an LU: _linalg_solve_ex (linalg.solve, solve_ex),
// linalg_inv_ex (inv), _linalg_det (det) and _linalg_slogdet (slogdet, logdet); the LDL^T factorisation of
// symmetric and Hermitian matrices (linalg_ldl_factor_ex, linalg_ldl_solve). float32 and float64, as torch's CPU
// kernels, and complex64 and complex128 (the algorithms compute on Vals, below); batched over any leading dims. Their
// gradients are torch's formulas, made of these ops and ordinary ones.
//
// A factorisation or a substitution of n x n matrices is n steps, each a few kernels over the whole batch:
// masks from the coordinates, a reduction, and gathers at the step's row and column. The step index is a
// runtime scalar (DEFINE_VAR), so the steps have the same graph: the kernels compile once for a shape.
// Steps are realized kStepsPerGraph at a time (realize_all on their values, without waiting for the queue), so the
// graph stays a few steps long whatever n is and each group replays one cached schedule.
//
// LU picks its pivot on the device as LAPACK's getf2 does (the first row at or below the diagonal of the
// largest |a[i, k]|), swaps and eliminates in one kernel, and records torch's 1-based int32 pivots and the
// info of a zero pivot; no value goes to the host. The Cholesky factorisation is LAPACK's unblocked
// left-looking order (column k from A's column k and the columns of L before it), so a matrix that is not
// positive-definite leaves what LAPACK leaves: the columns before the failing one done, its diagonal element
// the value that was not positive, the rest of A as it was.
//
// The checks are torch's: a structured op's meta function (shapes, dtypes, out= resizing and strides), the
// helpers of ATen/native/LinearAlgebraUtils.h, the CPU's own refusal of other dtypes (check_cpu_accepts),
// and _linalg_check_errors for check_errors (LinAlgError; it reads info to the host, as torch does).

#include <ATen/core/Tensor.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_cholesky_solve_helper_native.h>
#include <ATen/ops/_cholesky_solve_helper_ops.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/_linalg_det_meta_dispatch.h>
#include <ATen/ops/_linalg_det_ops.h>
#include <ATen/ops/_linalg_slogdet_meta_dispatch.h>
#include <ATen/ops/_linalg_slogdet_ops.h>
#include <ATen/ops/_linalg_solve_ex_meta_dispatch.h>
#include <ATen/ops/_linalg_solve_ex_ops.h>
#include <ATen/ops/cholesky_inverse_native.h>
#include <ATen/ops/cholesky_inverse_ops.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/linalg_cholesky_ex_meta_dispatch.h>
#include <ATen/ops/linalg_cholesky_ex_ops.h>
#include <ATen/ops/linalg_inv_ex_meta_dispatch.h>
#include <ATen/ops/linalg_inv_ex_ops.h>
#include <ATen/ops/linalg_ldl_factor_ex_meta_dispatch.h>
#include <ATen/ops/linalg_ldl_factor_ex_ops.h>
#include <ATen/ops/linalg_ldl_solve_meta_dispatch.h>
#include <ATen/ops/linalg_ldl_solve_ops.h>
#include <ATen/ops/linalg_lu_factor_ex_meta_dispatch.h>
#include <ATen/ops/linalg_lu_factor_ex_ops.h>
#include <ATen/ops/linalg_lu_meta_dispatch.h>
#include <ATen/ops/linalg_lu_ops.h>
#include <ATen/ops/linalg_lu_solve_meta_dispatch.h>
#include <ATen/ops/linalg_lu_solve_ops.h>
#include <ATen/ops/linalg_solve_triangular_native.h>
#include <ATen/ops/linalg_solve_triangular_ops.h>
#include <ATen/ops/lu_unpack_meta_dispatch.h>
#include <ATen/ops/triangular_solve_meta_dispatch.h>
#include <ATen/ops/triangular_solve_ops.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/complex_math.h"
#include "aten_ops/read_on_host.h"
#include "csrc/fallback.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"

namespace tiny::aten_ops {

namespace {

using runtime::Device;

// ---- UOp pieces ----

UOpPtr index_const(int64_t v, const Shape& shape) { return fixed(kIndex, v, shape); }
UOpPtr broadcast(const UOpPtr& scalar, const Shape& shape) {
  return expand(reshape(scalar, Shape(shape.size(), 1)), shape);
}
UOpPtr coordinate(const Shape& shape, size_t d) {
  Shape s(shape.size(), 1);
  s[d] = shape[d];
  return expand(reshape(iota(shape[d], kIndex), s), shape);
}
UOpPtr eq(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::CMPEQ, a, b); }
UOpPtr both(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::AND, a, b); }
UOpPtr transposed(const UOpPtr& m) { return permute(m, {0, 2, 1}); }

// m[b, i, j] of a realized batch of matrices m (B, rows, cols), at index values of one shape.
UOpPtr element(const UOpPtr& m, const UOpPtr& b, const UOpPtr& i, const UOpPtr& j) {
  int64_t rows = m->shape[1], cols = m->shape[2];
  const Shape& s = b->shape;
  UOpPtr at = add(add(mul(b, index_const(rows * cols, s)), mul(i, index_const(cols, s))), j);
  return gather(reshape(m, {prod(m->shape)}), at);
}

// ---- values: real, or complex as their parts ----
//
// The factorisations and substitutions compute on Vals: a real UOp, or a complex value's (real, imaginary)
// parts with complex_math's arithmetic, so one algorithm serves both (a real Val builds the graph a UOp
// would).
namespace cm = complex_math;

struct Val {
  UOpPtr re, im; // im: a complex value's
  bool complex() const { return im != nullptr; }
};

cm::Cx cx(const Val& v) { return {v.re, v.im}; }
Val val(const cm::Cx& z) { return {z.re, z.im}; }
Val operator+(const Val& a, const Val& b) {
  return a.complex() ? val(cm::add(cx(a), cx(b))) : Val{add(a.re, b.re), nullptr};
}
Val operator-(const Val& a, const Val& b) {
  return a.complex() ? val(cm::sub(cx(a), cx(b))) : Val{sub(a.re, b.re), nullptr};
}
Val operator*(const Val& a, const Val& b) {
  return a.complex() ? val(cm::mul(cx(a), cx(b))) : Val{mul(a.re, b.re), nullptr};
}
Val operator/(const Val& a, const Val& b) {
  return a.complex() ? val(cm::div(cx(a), cx(b))) : Val{div(a.re, b.re), nullptr};
}
Val conj_val(const Val& v) { return v.complex() ? Val{v.re, alu(Ops::NEG, v.im)} : v; }
// f applied to each part (a view, a gather)
template <class F> Val each(const Val& v, const F& f) { return {f(v.re), v.complex() ? f(v.im) : nullptr}; }
Val where_val(const UOpPtr& c, const Val& a, const Val& b) {
  return {where(c, a.re, b.re), a.complex() ? where(c, a.im, b.im) : nullptr};
}
Val like_val(const Val& v, double x) { return {like(v.re, x), v.complex() ? like(v.im, 0) : nullptr}; }
UOpPtr is_zero(const Val& v) {
  UOpPtr z = eq(v.re, like(v.re, 0));
  return v.complex() ? both(z, eq(v.im, like(v.im, 0))) : z;
}
// The magnitude LAPACK's pivoting compares: |x|, and |re| + |im| for complex values (i?amax's cabs1).
UOpPtr pivot_magnitude(const Val& v) {
  UOpPtr m = alu(Ops::ABS, v.re);
  return v.complex() ? add(m, alu(Ops::ABS, v.im)) : m;
}
size_t part_count(const Val& v) { return v.complex() ? 2 : 1; }
// The conjugate transpose of matrices (B, rows, cols): the transpose of real ones.
Val adjoint(const Val& v) { return conj_val(each(v, transposed)); }
// v's parts in dtype dt: complex (a real v with zero imaginary parts) or real.
Val cast_val(const Val& v, DType dt, bool complex) {
  UOpPtr re = cast(v.re, dt);
  if (!complex) return {re, nullptr};
  return {re, v.complex() ? cast(v.im, dt) : like(re, 0)};
}
// A state vector for run_step_loop / realize_now: v's parts, then `rest`.
std::vector<UOpPtr> with_parts(const Val& v, std::vector<UOpPtr> rest) {
  std::vector<UOpPtr> out{v.re};
  if (v.complex()) out.push_back(v.im);
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}
Val first_val(const std::vector<UOpPtr>& st, bool complex) { return {st[0], complex ? st[1] : nullptr}; }
Val element(const Val& m, const UOpPtr& b, const UOpPtr& i, const UOpPtr& j) {
  return each(m, [&](const UOpPtr& part) { return element(part, b, i, j); });
}

// ---- the factorisations and substitutions, on (B, rows, cols) values ----

struct LUFactors {
  Val lu;        // (B, m, n): L below the diagonal (its unit diagonal implied), U on and above it
  UOpPtr pivots; // (B, k) int32, 1-based: row i was swapped with row pivots[i] - 1 at step i
  UOpPtr info;   // (B) int32: 0, or the 1-based step of the first zero pivot
};

LUFactors lu_factor(const Val& a, Device& dev) {
  int64_t B = a.re->shape[0], m = a.re->shape[1], n = a.re->shape[2], K = std::min(m, n);
  UOpPtr pivots = fixed(DType::Int32, 0, {B, K}), info = fixed(DType::Int32, 0, {B});
  if (B * m * n == 0) return {a, pivots, info};
  size_t np = part_count(a);
  std::vector<UOpPtr> state = realize_now(with_parts(a, {pivots, info}), dev);
  Shape s{B, m, n}, column{B, m, 1}, one{B, 1, 1}, ps{B, K};
  auto one_step = [&](const std::vector<UOpPtr>& st, const UOpPtr& step) -> std::vector<UOpPtr> {
    Val lu = first_val(st, a.complex());
    const UOpPtr &piv = st[np], &inf = st[np + 1];
    // the pivot row: the first at or below k of the largest |a[i, k]| (LAPACK's i?amax)
    UOpPtr cb = coordinate(column, 0), ci = coordinate(column, 1), ck = broadcast(step, column);
    UOpPtr magnitude = pivot_magnitude(element(lu, cb, ci, ck));
    UOpPtr candidate = alu(Ops::NOT, lt(ci, ck));
    UOpPtr largest = expand(reduce(where(candidate, magnitude, like(magnitude, -1)), Ops::MAX, {1}), column);
    UOpPtr p = reduce(where(both(candidate, eq(magnitude, largest)), ci, index_const(m, column)), Ops::MIN, {1});
    p = where(eq(p, index_const(m, one)), broadcast(step, one), p); // a NaN column: no row equals its max
    // swap rows k and p, then eliminate below the pivot (a zero pivot leaves its zero column as it is)
    UOpPtr b = coordinate(s, 0), i = coordinate(s, 1), j = coordinate(s, 2), k3 = broadcast(step, s);
    UOpPtr p3 = expand(p, s);
    UOpPtr source = where(eq(i, k3), p3, where(eq(i, p3), k3, i));
    Val pivot = element(lu, b, p3, k3), x = element(lu, b, source, j), xk = element(lu, b, source, k3);
    Val l = where_val(is_zero(pivot), xk, xk / pivot);
    UOpPtr below = lt(k3, i);
    Val updated =
        where_val(both(below, eq(j, k3)), l, where_val(both(below, lt(k3, j)), x - l * element(lu, b, p3, j), x));
    UOpPtr pc = coordinate(ps, 1);
    UOpPtr new_piv = where(eq(pc, broadcast(step, ps)),
                           cast(add(expand(reshape(p, {B, 1}), ps), index_const(1, ps)), DType::Int32), piv);
    Val pv = each(element(lu, coordinate(one, 0), p, broadcast(step, one)),
                  [&](const UOpPtr& part) { return reshape(part, {B}); });
    UOpPtr zero_pivot = both(eq(inf, fixed(DType::Int32, 0, {B})), is_zero(pv));
    UOpPtr new_info = where(zero_pivot, cast(add(broadcast(step, {B}), index_const(1, {B})), DType::Int32), inf);
    return with_parts(updated, {new_piv, new_info});
  };
  state = run_step_loop(state, K, false, one_step, dev);
  return {first_val(state, a.complex()), state[np], state[np + 1]};
}

// The row each of m rows holds after the interchanges of pivots (B, k; 1-based) are applied to them in
// order (forward), or in reverse order (which undoes them): (B, m) int64, rows[b, r] = the row it came from.
UOpPtr permutation(const UOpPtr& pivots, int64_t m, bool forward, Device& dev) {
  int64_t B = pivots->shape[0], K = pivots->shape[1];
  Shape s{B, m};
  if (B * m == 0) return coordinate(s, 1);
  std::vector<UOpPtr> state = realize_now({coordinate(s, 1), pivots}, dev);
  UOpPtr piv = reshape(state[1], {B * K});
  auto one_step = [&](const std::vector<UOpPtr>& st, const UOpPtr& step) -> std::vector<UOpPtr> {
    UOpPtr k = broadcast(step, s), b = coordinate(s, 0), r = coordinate(s, 1);
    UOpPtr p = sub(cast(gather(piv, add(mul(b, index_const(K, s)), k)), kIndex), index_const(1, s));
    UOpPtr source = where(eq(r, k), p, where(eq(r, p), k, r));
    return {gather(reshape(st[0], {B * m}), add(mul(b, index_const(m, s)), source))};
  };
  return run_step_loop({state[0]}, K, !forward, one_step, dev)[0];
}

// x (B, n, r) with its rows taken from rows (B, n): out[b, i] = x[b, rows[b, i]].
Val take_rows(const Val& x, const UOpPtr& rows, Device& dev) {
  const Shape& s = x.re->shape;
  if (prod(s) == 0) return x;
  Val xr = first_val(realize_now(with_parts(x, {}), dev), x.complex());
  UOpPtr r = expand(reshape(rows, {s[0], s[1], 1}), s);
  return element(xr, coordinate(s, 0), r, coordinate(s, 2));
}

// Solves t x = rhs, t (B, n, n) triangular: only its lower (or upper) triangle is read, and with unit
// not its diagonal (taken as ones). rhs (B, n, r). Forward (or back) substitution, a row of x a step,
// in the order of LAPACK's trsm.
Val solve_triangular(const Val& t, const Val& rhs, bool upper, bool unit, Device& dev) {
  int64_t B = rhs.re->shape[0], n = rhs.re->shape[1], r = rhs.re->shape[2];
  if (B * n * r == 0) return rhs;
  std::vector<UOpPtr> given = realize_now(with_parts(t, with_parts(rhs, {})), dev);
  Val tr = first_val(given, t.complex());
  std::vector<UOpPtr> state(given.begin() + static_cast<std::ptrdiff_t>(part_count(t)), given.end());
  Shape s{B, n, r};
  UOpPtr b = coordinate(s, 0), i = coordinate(s, 1), j = coordinate(s, 2);
  auto one_step = [&](const std::vector<UOpPtr>& st, const UOpPtr& step) -> std::vector<UOpPtr> {
    Val x = first_val(st, rhs.complex());
    UOpPtr k = broadcast(step, s);
    Val xk = element(x, b, k, j);
    if (!unit) xk = xk / element(tr, b, k, k);
    UOpPtr later = upper ? lt(i, k) : lt(k, i);
    return with_parts(where_val(eq(i, k), xk, where_val(later, x - element(tr, b, i, k) * xk, x)), {});
  };
  return first_val(run_step_loop(state, n, upper, one_step, dev), rhs.complex());
}

// The lower Cholesky factor of a (B, n, n), L L^H = a, reading its lower triangle (above it: a's values, to
// be masked; of a complex diagonal only the real part, as LAPACK's potrf), and info (B) int32: 0, or the
// order of the first leading minor that is not positive-definite.
std::pair<Val, UOpPtr> cholesky(const Val& a, Device& dev) {
  int64_t B = a.re->shape[0], n = a.re->shape[1];
  UOpPtr info = fixed(DType::Int32, 0, {B});
  if (B * n == 0) return {a, info};
  size_t np = part_count(a);
  std::vector<UOpPtr> state = realize_now(with_parts(a, {info}), dev);
  Shape s{B, n, n}, one{B, 1, 1};
  UOpPtr b = coordinate(s, 0), i = coordinate(s, 1), j = coordinate(s, 2);
  Shape column{B, n, 1}, row{B, 1, n};
  auto sum_last = [](const Val& v) { return each(v, [](const UOpPtr& part) { return reduce(part, Ops::ADD, {2}); }); };
  auto one_step = [&](const std::vector<UOpPtr>& st, const UOpPtr& step) -> std::vector<UOpPtr> {
    Val m = first_val(st, a.complex());
    const UOpPtr& inf = st[np];
    UOpPtr k3 = broadcast(step, s);
    // column k: c[i] = a[i, k] - sum over p < k of L[i, p] conj(L[k, p])
    Val lk = element(m, b, k3, j); // L[k, p], p along the last axis
    Val c = element(m, coordinate(column, 0), coordinate(column, 1), broadcast(step, column)) -
            sum_last(where_val(lt(j, k3), m * conj_val(lk), like_val(m, 0)));
    // its diagonal element, re(a[k, k]) - sum over p < k of |L[k, p]|^2
    UOpPtr rp = coordinate(row, 2), rk = broadcast(step, row);
    Val lkr = element(m, coordinate(row, 0), rk, rp);
    UOpPtr squares = mul(lkr.re, lkr.re);
    if (lkr.complex()) squares = add(squares, mul(lkr.im, lkr.im));
    UOpPtr kk = broadcast(step, one);
    UOpPtr ajj = sub(element(m.re, coordinate(one, 0), kk, kk),
                     reduce(where(lt(rp, rk), squares, like(squares, 0)), Ops::ADD, {2}));
    UOpPtr live = eq(reshape(inf, {B, 1, 1}), fixed(DType::Int32, 0, one));
    UOpPtr positive = lt(like(ajj, 0), ajj); // false for NaN, as LAPACK's check
    UOpPtr fails = both(live, alu(Ops::NOT, positive));
    UOpPtr d = expand(alu(Ops::SQRT, ajj), s), on_column = eq(j, k3);
    Val real_d = {d, a.complex() ? like(d, 0) : nullptr};
    Val below = each(c, [&](const UOpPtr& part) { return div(expand(part, s), d); });
    Val done = where_val(eq(i, k3), real_d, where_val(lt(k3, i), below, m));
    // a failing step stores the value that was not positive on the diagonal and stops there
    Val failed = {expand(ajj, s), a.complex() ? like(d, 0) : nullptr};
    Val updated = where_val(both(on_column, expand(both(live, positive), s)), done,
                            where_val(both(both(on_column, eq(i, k3)), expand(fails, s)), failed, m));
    UOpPtr new_info =
        where(reshape(fails, {B}), cast(add(broadcast(step, {B}), index_const(1, {B})), DType::Int32), inf);
    return with_parts(updated, {new_info});
  };
  state = run_step_loop(state, n, false, one_step, dev);
  return {first_val(state, a.complex()), state[np]};
}

// ---- LDL^T with Bunch-Kaufman pivoting ----
//
// LAPACK's sytf2 on the lower triangle (sytrf's blocked form above 64 columns picks the same pivots).
// Measured: a transcription of sytf2 gives MKL's factors, pivots and info, 2 x 2 pivots included, on 300
// random symmetric and positive-definite matrices; this kernel gives MKL's pivots at n = 40, 70 and 100 too.
// Step k (a runtime scalar) picks the pivot of column k, swaps it into place within the trailing block (the
// columns of L before k keep their rows: sytrf's pivot format), and eliminates with a 1 x 1 or a 2 x 2 pivot.
// A step that the previous step's 2 x 2 pivot covered finds its pivot entry set and leaves everything as it
// is. The working matrix is kept symmetric (each element computed from its lower-triangle position), so a row
// of the trailing block reads as its column.

// (1 + sqrt(17)) / 8: the growth bound of Bunch and Kaufman, sytf2's alpha.
constexpr double kBunchKaufmanAlpha = 0.64038820320220756872767623199676;

struct LDLFactors {
  Val ld;        // (B, n, n): L below the diagonal, D's blocks on it and the subdiagonal, zeros above
  UOpPtr pivots; // (B, n) int32, sytrf's: k + 1 for a 1 x 1 pivot, -(p + 1) twice for a 2 x 2 one
  UOpPtr info;   // (B) int32: 0, or the 1-based step of the first zero column
};

UOpPtr either(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::OR, a, b); }
UOpPtr negation(const UOpPtr& a) { return alu(Ops::NOT, a); }
// The magnitude sytf2 compares: |x|, and |re| + |im| (cabs1) for a complex symmetric matrix.
UOpPtr magnitude_of(const Val& a) { return pivot_magnitude(a); }

// (A complex `lower`: the complex symmetric factorisation, zsytf2, with cabs1 magnitudes; no conjugates. With
// `hermitian`, zhetf2: the working matrix is Hermitian with a real diagonal (LAPACK reads only the diagonal's real
// part and keeps it real), so cabs1 of a diagonal element is hetf2's |re|, the symmetric interchange of the full
// matrix is hetf2's (conjugates included), and the updates are A - x d^-1 x^H and the 2 x 2 block's hetf2 form.)
LDLFactors ldl_factor(const Val& lower, bool hermitian, Device& dev) {
  int64_t B = lower.re->shape[0], n = lower.re->shape[1];
  Shape s{B, n, n}, one{B, 1, 1}, column{B, n, 1}, row{B, 1, n}, ps{B, n};
  UOpPtr b = coordinate(s, 0), i = coordinate(s, 1), j = coordinate(s, 2);
  UOpPtr pivots = fixed(DType::Int32, 0, ps), info = fixed(DType::Int32, 0, {B});
  if (B * n == 0) return {lower, pivots, info};
  size_t np = part_count(lower);
  hermitian = hermitian && lower.complex();
  UOpPtr on_diagonal = eq(i, j), above = lt(i, j);
  // a value of the lower triangle where it lies, its conjugate above it, a Hermitian diagonal's real part
  auto placed = [&](const Val& v) {
    if (!hermitian) return v;
    return where_val(on_diagonal, Val{v.re, like(v.im, 0)}, where_val(above, conj_val(v), v));
  };
  std::vector<UOpPtr> state =
      realize_now(with_parts(placed(where_val(le(j, i), lower, each(lower, transposed))), {pivots, info}), dev);
  auto one_step = [&](const std::vector<UOpPtr>& st, const UOpPtr& step) -> std::vector<UOpPtr> {
    Val a = first_val(st, lower.complex());
    const UOpPtr &piv = st[np], &inf = st[np + 1];
    UOpPtr b1 = coordinate(one, 0), k1 = broadcast(step, one), zero1 = index_const(0, one);
    UOpPtr live = eq(element(reshape(piv, {B, 1, n}), b1, zero1, k1), fixed(DType::Int32, 0, one));
    UOpPtr absakk = magnitude_of(element(a, b1, k1, k1));
    // column k below the diagonal: its largest magnitude, at the first row that holds it (idamax)
    UOpPtr cb = coordinate(column, 0), ci = coordinate(column, 1), ck = broadcast(step, column);
    UOpPtr below = lt(ck, ci);
    UOpPtr cmag = where(below, magnitude_of(element(a, cb, ci, ck)), fixed(a.re->dtype, 0, column));
    UOpPtr colmax = reduce(cmag, Ops::MAX, {1});
    UOpPtr imax =
        reduce(where(both(below, eq(cmag, expand(colmax, column))), ci, index_const(n, column)), Ops::MIN, {1});
    imax = where(eq(imax, index_const(n, one)), k1, imax); // the last column, or a NaN in it
    // row imax of the trailing block without its diagonal element
    UOpPtr rb = coordinate(row, 0), rj = coordinate(row, 2), ri = expand(imax, row);
    UOpPtr in_row = both(le(broadcast(step, row), rj), alu(Ops::CMPNE, rj, ri));
    UOpPtr rowmax =
        reduce(where(in_row, magnitude_of(element(a, rb, ri, rj)), fixed(a.re->dtype, 0, row)), Ops::MAX, {2});
    UOpPtr alpha = like(absakk, kBunchKaufmanAlpha), zero = like(absakk, 0);
    UOpPtr zero_column = either(eq(alu(Ops::MAX, absakk, colmax), zero), alu(Ops::CMPNE, absakk, absakk));
    UOpPtr alpha_colmax = mul(alpha, colmax);
    UOpPtr keep =
        either(zero_column, either(le(alpha_colmax, absakk), le(mul(alpha_colmax, div(colmax, rowmax)), absakk)));
    UOpPtr swap_one = le(mul(alpha, rowmax), magnitude_of(element(a, b1, imax, imax)));
    UOpPtr two = both(live, both(negation(keep), negation(swap_one)));
    UOpPtr kp = where(keep, k1, imax);
    UOpPtr next = alu(Ops::MIN, add(k1, index_const(1, one)), index_const(n - 1, one)); // k + 1, kept in range
    UOpPtr kk = where(two, next, k1);
    // the symmetric interchange of kk and kp, then the elimination, each element from its lower position
    UOpPtr k3 = broadcast(step, s), kp3 = expand(kp, s), kk3 = expand(kk, s), next3 = expand(next, s);
    auto swapped = [&](const UOpPtr& x) { return where(eq(x, kk3), kp3, where(eq(x, kp3), kk3, x)); };
    auto a1 = [&](const UOpPtr& x, const UOpPtr& y) { return element(a, b, swapped(x), swapped(y)); };
    UOpPtr r = alu(Ops::MAX, i, j), c = alu(Ops::MIN, i, j);
    Val akk = a1(k3, k3);
    // 1 x 1: the trailing block minus d11 x x^T (syr's order; her's x x^H), column k scaled by d11
    auto conj_if = [&](const Val& v) { return hermitian ? conj_val(v) : v; };
    Val d11 = like_val(akk, 1) / akk, minus_d11 = each(d11, [](const UOpPtr&part) { return alu(Ops::NEG, part); });
    Val single = where_val(lt(k3, c), a1(r, c) + a1(r, k3) * (minus_d11 * conj_if(a1(c, k3))),
                           where_val(lt(k3, r), d11 * a1(r, k3), akk));
    // 2 x 2: sytf2's update through the inverse of the block [[a_kk, d21], [d21, a_k+1,k+1]]; hetf2's scales
    // the block by |d21| (real d, e11, e22, t) and its off-diagonal to a unit d21 / |d21|
    std::function<Val(const UOpPtr&)> wk, wkp1;
    Val d21 = a1(next3, k3);
    if (hermitian) {
      UOpPtr d = cm::abs(cx(d21)), e11 = div(a1(next3, next3).re, d), e22 = div(akk.re, d);
      UOpPtr t = div(like(d, 1), sub(mul(e11, e22), like(d, 1)));
      Val unit = each(d21, [&](const UOpPtr&part) { return div(part, d); }), scale = {div(t, d), like(d, 0)};
      Val v11 = {e11, like(d, 0)}, v22 = {e22, like(d, 0)};
      wk = [=, &a1](const UOpPtr& x) { return scale * (v11 * a1(x, k3) - unit * a1(x, next3)); };
      wkp1 = [=, &a1](const UOpPtr& x) { return scale * (v22 * a1(x, next3) - conj_val(unit) * a1(x, k3)); };
    } else {
      Val e11 = a1(next3, next3) / d21, e22 = akk / d21;
      Val t = like_val(akk, 1) / (e11 * e22 - like_val(akk, 1)), scale = t / d21;
      wk = [=, &a1](const UOpPtr& x) { return scale * (e11 * a1(x, k3) - a1(x, next3)); };
      wkp1 = [=, &a1](const UOpPtr& x) { return scale * (e22 * a1(x, next3) - a1(x, k3)); };
    }
    UOpPtr after = lt(next3, c), r_after = lt(next3, r);
    Val pair = where_val(
        after, a1(r, c) - (a1(r, k3) * conj_if(wk(c)) + a1(r, next3) * conj_if(wkp1(c))),
        where_val(both(eq(c, k3), r_after), wk(r), where_val(both(eq(c, next3), r_after), wkp1(r), a1(r, c))));
    UOpPtr eliminate = expand(both(live, negation(zero_column)), s);
    Val updated = where_val(both(eliminate, le(k3, c)), placed(where_val(expand(two, s), pair, single)), a);
    UOpPtr pp = coordinate(ps, 1), pk = broadcast(step, ps);
    UOpPtr kp1 = cast(add(reshape(kp, {B, 1}), index_const(1, {B, 1})), DType::Int32);
    UOpPtr entry = where(reshape(two, {B, 1}), alu(Ops::NEG, kp1), kp1);
    UOpPtr mine = both(expand(reshape(live, {B, 1}), ps),
                       either(eq(pp, pk), both(expand(reshape(two, {B, 1}), ps), eq(pp, add(pk, index_const(1, ps))))));
    UOpPtr new_piv = where(mine, expand(entry, ps), piv);
    UOpPtr first_zero = both(both(reshape(live, {B}), reshape(zero_column, {B})), eq(inf, fixed(DType::Int32, 0, {B})));
    UOpPtr new_info = where(first_zero, cast(add(broadcast(step, {B}), index_const(1, {B})), DType::Int32), inf);
    return with_parts(updated, {new_piv, new_info});
  };
  state = run_step_loop(state, n, false, one_step, dev);
  Val ld = first_val(state, lower.complex());
  return {where_val(le(j, i), ld, like_val(ld, 0)), state[np], state[np + 1]};
}

// Solves A x = rhs from A's factors (ld (B, n, n), pivots (B, n)), rhs (B, n, r): LAPACK's sytrs, L D y = rhs
// forward, then L^T x = y backward, each a block of D a step; a (B) flag carries the second row of a 2 x 2
// block past its step.
// (Complex factors: the complex symmetric solve, zsytrs, L^T not conjugated; with `hermitian`, zhetrs: L^H, a 1 x 1
// block's real part, a 2 x 2 block's off-diagonal conjugated in its upper position.)
Val ldl_solve(const Val& ld_in, const UOpPtr& pivots_in, const Val& rhs, bool hermitian, Device& dev) {
  int64_t B = rhs.re->shape[0], n = rhs.re->shape[1], r = rhs.re->shape[2];
  if (B * n * r == 0) return rhs;
  size_t np = part_count(rhs);
  std::vector<UOpPtr> given = realize_now(with_parts(ld_in, {pivots_in}), dev);
  Val ld = first_val(given, ld_in.complex());
  UOpPtr piv = reshape(given[part_count(ld_in)], {B, 1, n});
  Shape s{B, n, r}, one{B, 1, 1}, line{B, 1, r};
  UOpPtr b = coordinate(s, 0), i = coordinate(s, 1), j = coordinate(s, 2);
  UOpPtr b1 = coordinate(one, 0), zero1 = index_const(0, one);
  UOpPtr lb = coordinate(line, 0), lj = coordinate(line, 2);
  auto solve_step = [&](const std::vector<UOpPtr>& st, const UOpPtr& step, bool forward) -> std::vector<UOpPtr> {
    Val x = first_val(st, rhs.complex());
    const UOpPtr& skip = st[np];
    UOpPtr k1 = broadcast(step, one);
    UOpPtr live = eq(reshape(skip, {B, 1, 1}), fixed(DType::Int32, 0, one));
    UOpPtr p = cast(element(piv, b1, zero1, k1), kIndex);
    UOpPtr two = both(live, lt(p, index_const(0, one)));
    UOpPtr kp = sub(where(two, alu(Ops::NEG, p), p), index_const(1, one));
    // the block's other row: k + 1 going forward, k - 1 going back (kept in range)
    UOpPtr other = forward ? alu(Ops::MIN, add(k1, index_const(1, one)), index_const(n - 1, one))
                           : alu(Ops::MAX, sub(k1, index_const(1, one)), zero1);
    UOpPtr k3 = broadcast(step, s), kp3 = expand(kp, s), o3 = expand(other, s), two3 = expand(two, s);
    UOpPtr new_skip = cast(reshape(two, {B}), DType::Int32);
    Val updated;
    if (forward) {
      // interchange row kp with row k (1 x 1) or k + 1 (2 x 2), then eliminate below the block
      UOpPtr sw = where(two3, o3, k3);
      auto x1 = [&](const UOpPtr& row) {
        return element(x, b, where(eq(row, sw), kp3, where(eq(row, kp3), sw, row)), j);
      };
      Val xk = x1(k3), xo = x1(o3), dkk = element(ld, b, k3, k3);
      Val scaled = xk / dkk;
      if (hermitian) {
        UOpPtr inv = div(like(dkk.re, 1), dkk.re);
        scaled = each(xk, [&](const UOpPtr& part) { return mul(part, inv); });
      }
      Val single = where_val(eq(i, k3), scaled, where_val(lt(k3, i), x1(i) - element(ld, b, i, k3) * xk, x1(i)));
      Val akm1k = element(ld, b, o3, k3), upper_akm1k = hermitian ? conj_val(akm1k) : akm1k;
      Val akm1 = dkk / upper_akm1k, ak = element(ld, b, o3, o3) / akm1k;
      Val denom = akm1 * ak - like_val(ak, 1);
      Val bkm1 = xk / upper_akm1k, bk = xo / akm1k;
      Val rest = x1(i) - element(ld, b, i, k3) * xk - element(ld, b, i, o3) * xo;
      Val pair = where_val(eq(i, k3), (ak * bkm1 - bk) / denom,
                           where_val(eq(i, o3), (akm1 * bk - bkm1) / denom, where_val(lt(o3, i), rest, x1(i))));
      updated = where_val(two3, pair, single);
    } else {
      // row k (and k - 1 of a 2 x 2 block) less L^T's terms below the block, then the interchange of k and kp
      auto reduced = [&](const UOpPtr& col) {
        Val l = element(ld, b, i, expand(col, s));
        Val terms = where_val(lt(k3, i), (hermitian ? conj_val(l) : l) * x, like_val(x, 0));
        return element(x, lb, expand(col, line), lj) -
               each(terms, [](const UOpPtr& part) { return reduce(part, Ops::ADD, {1}); });
      };
      auto spread = [&](const Val& v) { return each(v, [&](const UOpPtr& part) { return expand(part, s); }); };
      Val yk = spread(reduced(k1)), yo = spread(reduced(other));
      UOpPtr src = where(eq(i, k3), kp3, where(eq(i, kp3), k3, i));
      updated = where_val(eq(src, k3), yk, where_val(both(two3, eq(src, o3)), yo, element(x, b, src, j)));
    }
    Val kept = where_val(expand(live, s), updated, x);
    UOpPtr skip_next = where(reshape(live, {B}), new_skip, fixed(DType::Int32, 0, {B}));
    return with_parts(kept, {skip_next});
  };
  UOpPtr none = fixed(DType::Int32, 0, {B});
  std::vector<UOpPtr> state = realize_now(with_parts(rhs, {none}), dev);
  state = run_step_loop(
      state, n, false, [&](const auto& st, const UOpPtr& k) { return solve_step(st, k, true); }, dev);
  state[np] = none;
  state = run_step_loop(
      state, n, true, [&](const auto& st, const UOpPtr& k) { return solve_step(st, k, false); }, dev);
  return first_val(state, rhs.complex());
}

// m (B, rows, cols) with the elements above diagonal d (lower) or below it (upper) set to zero.
UOpPtr triangle(const UOpPtr& m, bool upper, int64_t d = 0) {
  const Shape& s = m->shape;
  UOpPtr i = coordinate(s, 1), j = coordinate(s, 2);
  UOpPtr keep = upper ? le(add(i, index_const(d, s)), j) : le(j, add(i, index_const(d, s)));
  return where(keep, m, like(m, 0));
}

UOpPtr identity(DType dt, int64_t B, int64_t n) {
  Shape s{B, n, n};
  return where(eq(coordinate(s, 1), coordinate(s, 2)), fixed(dt, 1, s), fixed(dt, 0, s));
}

// Solves a x = rhs, or a^T x = rhs (transpose), with conj(a) for a complex a (conjugate), given a's LU
// factors (lu (B, n, n), pivots (B, n)), rhs (B, n, r).
Val lu_solve(const Val& lu_in, const UOpPtr& pivots, const Val& rhs, bool transpose, bool conjugate, Device& dev) {
  Val lu = conjugate ? conj_val(lu_in) : lu_in; // conj(a) = P conj(L) conj(U)
  int64_t n = lu.re->shape[1];
  if (prod(rhs.re->shape) == 0) return rhs;
  if (!transpose) { // P^T a = L U
    Val x = take_rows(rhs, permutation(pivots, n, true, dev), dev);
    x = solve_triangular(lu, x, false, true, dev);
    return solve_triangular(lu, x, true, false, dev);
  }
  Val lut = each(lu, transposed); // a^T = U^T L^T P^T
  Val x = solve_triangular(lut, rhs, false, false, dev);
  x = solve_triangular(lut, x, true, true, dev);
  return take_rows(x, permutation(pivots, n, false, dev), dev);
}

// ---- torch tensors <-> batches of matrices ----

Device& device_for(const at::Tensor& t) { return runtime::device(t.device().index()); }

// t's value for a computation that runs now (realize_now): a pending graph that writes a storage in place
// (ASSIGN, SCATTER) realizes only at a sync, so such an input is realized by one first.
// (A complex t: its (real, imaginary) pairs.)
UOpPtr settled_read(const at::Tensor& t) {
  auto value = [&] { return t.is_complex() ? read_complex(t) : read(t); };
  {
    std::lock_guard lock(runtime::graph_mutex());
    if (runtime::evaluable_alone(value())) return value();
  }
  runtime::synchronize();
  return value();
}

// t's matrices (its last two dims) broadcast to the batch dims `batch`, as (B, rows, cols): a real value, or
// a complex t's parts.
Val matrix_values(const at::Tensor& t, c10::IntArrayRef batch) {
  Shape full(batch.begin(), batch.end());
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  Shape padded(full.size(), 1);
  std::copy(t.sizes().begin(), t.sizes().end(), padded.end() - t.dim());
  auto batched = [&](const UOpPtr& x) {
    return reshape(expand(reshape(x, padded), full),
                   {prod(Shape(batch.begin(), batch.end())), full.end()[-2], full.end()[-1]});
  };
  UOpPtr v = settled_read(t);
  if (!t.is_complex()) return {batched(v), nullptr};
  return {batched(real_part(v)), batched(imag_part(v))};
}
Val matrix_values(const at::Tensor& t) { return matrix_values(t, t.sizes().slice(0, t.dim() - 2)); }

// pivots (..., k) broadcast to `batch`, as (B, k).
UOpPtr pivot_rows(const at::Tensor& pivots, c10::IntArrayRef batch) {
  Shape full(batch.begin(), batch.end());
  full.push_back(pivots.size(-1));
  Shape padded(full.size(), 1);
  std::copy(pivots.sizes().begin(), pivots.sizes().end(), padded.end() - pivots.dim());
  return reshape(expand(reshape(settled_read(pivots), padded), full),
                 {prod(Shape(batch.begin(), batch.end())), full.back()});
}

c10::IntArrayRef batch_of(const at::Tensor& t, int64_t matrix_dims = 2) {
  return t.sizes().slice(0, t.dim() - matrix_dims);
}

void store(const at::Tensor& out, const UOpPtr& value) {
  if (out.numel() == 0) return;
  write(out, reshape(cast(value, to_tiny_dtype(out.scalar_type())), to_shape(out.sizes())));
}
// A real Val into a real out; a complex out takes a complex Val's parts (a real one's with zero imaginary parts).
void store(const at::Tensor& out, const Val& value) {
  if (!out.is_complex()) return store(out, value.re);
  if (out.numel() == 0) return;
  DType dt = element_dtype(out.scalar_type());
  Shape shape = to_shape(out.sizes());
  shape.push_back(2);
  UOpPtr im = value.complex() ? value.im : like(value.re, 0);
  write_complex(out, reshape(join_complex(cast(value.re, dt), cast(im, dt)), shape));
}

at::Tensor empty_like_dtype(const at::Tensor& t, at::ScalarType dt) { return empty_tiny({0}, dt, t.device()); }

// torch's CPU kernels take float32 and float64, and complex, which these kernels do not: the CPU fallback
// computes it (NotNativeDtype). Another dtype gets the CPU's own error.
template <class Op, class... Args> void check_float(const at::Tensor& t, const Args&... args) {
  if (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble) return;
  if (t.is_complex()) to_tiny_dtype(t.scalar_type()); // NotNativeDtype
  check_cpu_accepts<Op>(args...);
  TORCH_CHECK_NOT_IMPLEMENTED(false, Op::name, " on tiny supports float32 and float64, not ", t.scalar_type());
}
// The same for the kernels that compute complex64 and complex128 too (on Vals).
template <class Op, class... Args> void check_float_or_complex(const at::Tensor& t, const Args&... args) {
  if (t.scalar_type() == at::kComplexFloat || t.scalar_type() == at::kComplexDouble) return;
  check_float<Op>(t, args...);
}
// The pivots of an LU factorisation lie in [1, m]: torch's CPU checks a user's before it uses them (an
// index out of range would read zeros here). One small reduction read to the host.
void check_pivots(const at::Tensor& pivots, int64_t m, bool for_solve) {
  if (pivots.numel() == 0) return;
  UOpPtr p = reshape(cast(read(pivots), kIndex), {pivots.numel()});
  UOpPtr bad_low = reduce(cast(lt(p, index_const(1, p->shape)), kIndex), Ops::MAX, {0});
  UOpPtr bad_high = reduce(cast(lt(index_const(m, p->shape), p), kIndex), Ops::MAX, {0});
  UOpPtr both_flags = add(mul(bad_low, index_const(2, {1})), bad_high);
  int64_t flags = 0;
  {
    std::lock_guard lock(runtime::graph_mutex());
    if (runtime::evaluable_alone(both_flags)) {
      runtime::evaluate_to_host(both_flags, &flags, device_for(pivots));
    } else {
      at::Tensor t = empty_tiny({1}, at::kLong, pivots.device());
      write(t, both_flags);
      flags = t.cpu().item<int64_t>();
    }
  }
  if (for_solve) {
    TORCH_CHECK(!(flags & 2),
                "Pivots given to lu_solve must all be greater or equal to 1. Did you properly pass the result of "
                "lu_factor?");
    TORCH_CHECK(!(flags & 1),
                "Pivots given to lu_solve must all be smaller or equal to LU.size(-2). Did you properly pass the "
                "result of lu_factor?");
  } else {
    TORCH_CHECK(flags == 0, "pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive.",
                "Did you properly pass the result of lu_factor?");
  }
}

// torch's structured out= wrapper, run on meta stand-ins: the meta function checks the arguments and gives
// each out= tensor its sizes (and torch's strides when it had to resize it), which the real out= tensors then
// take. (at::meta's own wrapper, given a tiny out= tensor of another layout, would copy a meta proxy into it.)
at::Tensor meta_like(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}
class MetaOuts {
public:
  MetaOuts(std::initializer_list<at::Tensor*> outs) : outs_(outs) {
    for (at::Tensor* o : outs_)
      metas_.push_back(meta_like(*o));
  }
  at::Tensor& operator[](size_t i) { return metas_[i]; }
  void apply() {
    for (size_t i = 0; i < outs_.size(); i++) {
      at::Tensor &out = *outs_[i], &meta = metas_[i];
      if (out.sizes().equals(meta.sizes()) && out.strides().equals(meta.strides())) continue;
      out.resize_(meta.sizes());
      out.as_strided_(meta.sizes(), meta.strides());
    }
  }

private:
  std::vector<at::Tensor*> outs_;
  std::vector<at::Tensor> metas_;
};

// ---- LU ----

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_factor_ex_out(const at::Tensor& A, bool pivot,
                                                                          bool check_errors, at::Tensor& LU,
                                                                          at::Tensor& pivots, at::Tensor& info) {
  MetaOuts meta{&LU, &pivots, &info};
  at::meta::linalg_lu_factor_ex_outf(meta_like(A), pivot, check_errors, meta[0], meta[1], meta[2]);
  meta.apply();
  if (A.numel() == 0) {
    store(info, fixed(DType::Int32, 0, to_shape(info.sizes())));
    return {LU, pivots, info};
  }
  TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  check_float_or_complex<at::_ops::linalg_lu_factor_ex>(A, A, pivot, check_errors);
  LUFactors f = lu_factor(matrix_values(A), device_for(A));
  store(LU, f.lu);
  store(pivots, f.pivots);
  store(info, f.info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2);
  return {LU, pivots, info};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_lu_factor_ex(const at::Tensor& A, bool pivot, bool check_errors) {
  at::Tensor LU = empty_like_dtype(A, A.scalar_type()), pivots = empty_like_dtype(A, at::kInt),
             info = empty_like_dtype(A, at::kInt);
  linalg_lu_factor_ex_out(A, pivot, check_errors, LU, pivots, info);
  return {LU, pivots, info};
}

// P, L, U of lu (B, m, n) and its pivots: L (m, k) unit lower, U (k, n) upper, P[i, j] = (rows[j] == i).
// A complex lu: L's unit diagonal is 1 + 0i, P is real.
void unpack(const Val& lu, const UOpPtr& pivots, const at::Tensor& P, const at::Tensor& L, const at::Tensor& U,
            bool unpack_data, bool unpack_pivots, Device& dev) {
  int64_t B = lu.re->shape[0], m = lu.re->shape[1], n = lu.re->shape[2], k = std::min(m, n);
  if (unpack_data) {
    Val below = each(lu, [&](const UOpPtr& part) { return shrink(part, {{0, B}, {0, m}, {0, k}}); });
    Shape ls = below.re->shape;
    store(L, where_val(eq(coordinate(ls, 1), coordinate(ls, 2)), like_val(below, 1),
                       each(below, [](const UOpPtr& part) { return triangle(part, false, -1); })));
    store(U, each(lu, [&](const UOpPtr& part) { return triangle(shrink(part, {{0, B}, {0, k}, {0, n}}), true); }));
  }
  if (unpack_pivots && P.numel() > 0) {
    Shape s{B, m, m};
    UOpPtr rows = expand(reshape(permutation(pivots, m, true, dev), {B, 1, m}), s);
    store(P, Val{cast(eq(rows, coordinate(s, 1)), lu.re->dtype), nullptr}); // real, also for a complex P
  }
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_out(const at::Tensor& A, bool pivot, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  MetaOuts meta{&P, &L, &U};
  at::meta::linalg_lu_outf(meta_like(A), pivot, meta[0], meta[1], meta[2]);
  meta.apply();
  if (A.numel() > 0) {
    TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
    check_float_or_complex<at::_ops::linalg_lu>(A, A, pivot);
  }
  Device& dev = device_for(A);
  LUFactors f = lu_factor(matrix_values(A), dev);
  unpack(f.lu, f.pivots, P, L, U, true, pivot, dev);
  return {P, L, U};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_lu(const at::Tensor& A, bool pivot) {
  at::Tensor P = empty_like_dtype(A, A.scalar_type()), L = empty_like_dtype(A, A.scalar_type()),
             U = empty_like_dtype(A, A.scalar_type());
  linalg_lu_out(A, pivot, P, L, U);
  return {P, L, U};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lu_unpack_out(const at::Tensor& LU, const at::Tensor& pivots,
                                                                bool unpack_data, bool unpack_pivots, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  check_same_device({LU, pivots});
  MetaOuts meta{&P, &L, &U};
  at::meta::lu_unpack_outf(meta_like(LU), meta_like(pivots), unpack_data, unpack_pivots, meta[0], meta[1], meta[2]);
  meta.apply();
  if (unpack_pivots) check_pivots(pivots, LU.size(-2), false);
  c10::IntArrayRef batch = batch_of(LU);
  unpack(matrix_values(LU), pivot_rows(pivots, batch), P, L, U, unpack_data, unpack_pivots, device_for(LU));
  return {P, L, U};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lu_unpack(const at::Tensor& LU, const at::Tensor& pivots,
                                                         bool unpack_data, bool unpack_pivots) {
  at::Tensor P = empty_like_dtype(LU, LU.scalar_type()), L = empty_like_dtype(LU, LU.scalar_type()),
             U = empty_like_dtype(LU, LU.scalar_type());
  lu_unpack_out(LU, pivots, unpack_data, unpack_pivots, P, L, U);
  return {P, L, U};
}

// result = the solution of A X = B (left) or X A = B, or with A^T, given A's LU and pivots; batch dims
// broadcast to result's.
void solve_with_lu(const at::Tensor& result, const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B,
                   bool left, bool adjoint) {
  if (result.numel() == 0) return;
  c10::IntArrayRef batch = batch_of(result);
  Val rhs = matrix_values(B, batch);
  // X A = B  <=>  A^T X^T = B^T, and X A^H = B  <=>  conj(A) X^T = B^T
  if (!left) rhs = each(rhs, transposed);
  bool transpose = left ? adjoint : !adjoint;
  Val x = lu_solve(matrix_values(LU, batch), pivot_rows(pivots, batch), rhs, transpose, adjoint, device_for(LU));
  store(result, left ? x : each(x, transposed));
}

at::Tensor& linalg_lu_solve_out(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                                bool adjoint, at::Tensor& result) {
  check_same_device({LU, pivots, B});
  MetaOuts meta{&result};
  at::meta::linalg_lu_solve_outf(meta_like(LU), meta_like(pivots), meta_like(B), left, adjoint, meta[0]);
  meta.apply();
  if (result.numel() == 0) return result;
  check_float_or_complex<at::_ops::linalg_lu_solve>(LU, LU, pivots, B, left, adjoint);
  check_pivots(pivots, LU.size(-2), true);
  solve_with_lu(result, LU, pivots, B, left, adjoint);
  return result;
}

at::Tensor linalg_lu_solve(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                           bool adjoint) {
  at::Tensor result = empty_like_dtype(LU, LU.scalar_type());
  linalg_lu_solve_out(LU, pivots, B, left, adjoint, result);
  return result;
}

// ---- solve, inv, det, slogdet: through an LU ----

// det and slogdet factor A^T when A is real and contiguous, as torch's do (their backward reads that LU).
bool factors_transpose(const at::Tensor& A) { return A.is_contiguous() && !A.is_complex(); }

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&>
linalg_solve_ex_out(const at::Tensor& A, const at::Tensor& B, bool left, bool check_errors, at::Tensor& result,
                    at::Tensor& LU, at::Tensor& pivots, at::Tensor& info) {
  check_same_device({A, B});
  MetaOuts meta{&result, &LU, &pivots, &info};
  at::meta::_linalg_solve_ex_outf(meta_like(A), meta_like(B), left, check_errors, meta[0], meta[1], meta[2], meta[3]);
  meta.apply();
  check_float_or_complex<at::_ops::_linalg_solve_ex>(A, A, B, left, check_errors);
  LUFactors f = lu_factor(matrix_values(A), device_for(A));
  store(LU, f.lu);
  store(pivots, f.pivots);
  store(info, f.info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
  bool vector_case = at::native::linalg_solve_is_vector_rhs(LU, B);
  solve_with_lu(vector_case ? result.unsqueeze(-1) : result, LU, pivots, vector_case ? B.unsqueeze(-1) : B, left,
                false);
  return {result, LU, pivots, info};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_solve_ex(const at::Tensor& A, const at::Tensor& B,
                                                                           bool left, bool check_errors) {
  at::Tensor result = empty_like_dtype(A, A.scalar_type()), LU = empty_like_dtype(A, A.scalar_type()),
             pivots = empty_like_dtype(A, at::kInt), info = empty_like_dtype(A, at::kInt);
  linalg_solve_ex_out(A, B, left, check_errors, result, LU, pivots, info);
  return {result, LU, pivots, info};
}

std::tuple<at::Tensor&, at::Tensor&> linalg_inv_ex_out(const at::Tensor& A, bool check_errors, at::Tensor& inverse,
                                                       at::Tensor& info) {
  MetaOuts meta{&inverse, &info};
  at::meta::linalg_inv_ex_outf(meta_like(A), check_errors, meta[0], meta[1]);
  meta.apply();
  check_float_or_complex<at::_ops::linalg_inv_ex>(A, A, check_errors);
  Device& dev = device_for(A);
  LUFactors f = lu_factor(matrix_values(A), dev);
  store(info, f.info);
  int64_t n = A.size(-1);
  UOpPtr eye = identity(f.lu.re->dtype, f.lu.re->shape[0], n);
  store(inverse, lu_solve(f.lu, f.pivots, {eye, f.lu.complex() ? like(eye, 0) : nullptr}, false, false, dev));
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  return {inverse, info};
}

std::tuple<at::Tensor, at::Tensor> linalg_inv_ex(const at::Tensor& A, bool check_errors) {
  at::Tensor inverse = empty_like_dtype(A, A.scalar_type()), info = empty_like_dtype(A, at::kInt);
  linalg_inv_ex_out(A, check_errors, inverse, info);
  return {inverse, info};
}

// The diagonal of lu (B, n) and the sign of the permutation of its pivots (B, 1): -1 for an odd number of
// interchanges.
std::pair<Val, UOpPtr> diagonal_and_sign(const LUFactors& f) {
  const UOpPtr& lu = f.lu.re;
  int64_t B = lu->shape[0], n = lu->shape[1];
  Shape d{B, n};
  // a 0 x 0 matrix: one 1 on the diagonal keeps det 1 and logabsdet 0
  Val diag = n == 0 ? like_val(each(f.lu,
                                    [&](const UOpPtr& part) {
                                      return fixed(part->dtype, 0, {B, 1});
                                    }),
                               1)
                    : element(f.lu, coordinate(d, 0), coordinate(d, 1), coordinate(d, 1));
  Shape ps = f.pivots->shape;
  UOpPtr swapped = cast(alu(Ops::CMPNE, cast(f.pivots, kIndex), add(coordinate(ps, 1), index_const(1, ps))), kIndex);
  UOpPtr odd = alu(Ops::MOD, sum_keep(swapped, {1}), index_const(2, {B, 1}));
  UOpPtr sign = sub(fixed(lu->dtype, 1, {B, 1}), mul(fixed(lu->dtype, 2, {B, 1}), cast(odd, lu->dtype)));
  return {diag, sign};
}

UOpPtr product_keep(const UOpPtr& x) { // over axis 1; 1 for none
  return x->shape[1] == 0 ? fixed(x->dtype, 1, {x->shape[0], 1}) : reduce(x, Ops::MUL, {1});
}
// The same for Vals: complex values multiplied in order, column after column.
Val product_keep(const Val& x) {
  if (!x.complex()) return {product_keep(x.re), nullptr};
  int64_t B = x.re->shape[0], n = x.re->shape[1];
  if (n == 0) return {fixed(x.re->dtype, 1, {B, 1}), fixed(x.re->dtype, 0, {B, 1})};
  auto column = [&](int64_t c) {
    return each(x, [&](const UOpPtr& part) { return shrink(part, {{0, B}, {c, c + 1}}); });
  };
  Val p = column(0);
  for (int64_t c = 1; c < n; c++)
    p = p * column(c);
  return p;
}
// A Val times a real value (the permutation's sign): each part scaled.
Val scaled(const UOpPtr& s, const Val& v) {
  return each(v, [&](const UOpPtr& part) { return mul(s, part); });
}

// The LU factors det and slogdet compute (of A or A^T, as torch does: the backward reads them), stored
// into their LU and pivots outputs.
LUFactors det_factors(const at::Tensor& A, at::Tensor& LU, at::Tensor& pivots) {
  LUFactors f = lu_factor(matrix_values(factors_transpose(A) ? A.mT() : A), device_for(A));
  store(LU, f.lu);
  store(pivots, f.pivots);
  return f;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_det_out(const at::Tensor& A, at::Tensor& result,
                                                                 at::Tensor& LU, at::Tensor& pivots) {
  MetaOuts meta{&result, &LU, &pivots};
  at::meta::_linalg_det_outf(meta_like(A), meta[0], meta[1], meta[2]);
  meta.apply();
  check_float_or_complex<at::_ops::_linalg_det>(A, A);
  LUFactors f = det_factors(A, LU, pivots);
  if (f.lu.re->shape[0] > 0) {
    auto [diag, sign] = diagonal_and_sign(f);
    store(result, scaled(sign, product_keep(diag)));
  }
  return {result, LU, pivots};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_det(const at::Tensor& A) {
  at::Tensor result = empty_like_dtype(A, A.scalar_type()), LU = empty_like_dtype(A, A.scalar_type()),
             pivots = empty_like_dtype(A, at::kInt);
  linalg_det_out(A, result, LU, pivots);
  return {result, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&>
linalg_slogdet_out(const at::Tensor& A, at::Tensor& sign, at::Tensor& logabsdet, at::Tensor& LU, at::Tensor& pivots) {
  MetaOuts meta{&sign, &logabsdet, &LU, &pivots};
  at::meta::_linalg_slogdet_outf(meta_like(A), meta[0], meta[1], meta[2], meta[3]);
  meta.apply();
  check_float_or_complex<at::_ops::_linalg_slogdet>(A, A);
  LUFactors f = det_factors(A, LU, pivots);
  if (f.lu.re->shape[0] > 0) {
    auto [diag, perm_sign] = diagonal_and_sign(f);
    if (diag.complex()) {
      // sign: the product of the diagonal's z / |z| (torch's sgn, 0 at 0); logabsdet: the sum of log |z|, real
      store(sign, scaled(perm_sign, product_keep(val(cm::sgn(cx(diag))))));
      store(logabsdet, sum_keep(alu(Ops::LOG, cm::abs(cx(diag))), {1}));
    } else {
      UOpPtr zero = like(diag.re, 0);
      // torch's sgn: 0 for 0 and NaN
      UOpPtr sgn = where(lt(zero, diag.re), like(diag.re, 1), where(lt(diag.re, zero), like(diag.re, -1), zero));
      store(sign, mul(perm_sign, product_keep(sgn)));
      store(logabsdet, sum_keep(alu(Ops::LOG, alu(Ops::ABS, diag.re)), {1}));
    }
  }
  return {sign, logabsdet, LU, pivots};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_slogdet(const at::Tensor& A) {
  // the logabsdet of a complex A is real
  at::Tensor sign = empty_like_dtype(A, A.scalar_type()),
             logabsdet = empty_like_dtype(A, c10::toRealValueType(A.scalar_type())),
             LU = empty_like_dtype(A, A.scalar_type()), pivots = empty_like_dtype(A, at::kInt);
  linalg_slogdet_out(A, sign, logabsdet, LU, pivots);
  return {sign, logabsdet, LU, pivots};
}

// ---- triangular solves ----

std::tuple<at::Tensor&, at::Tensor&> triangular_solve_out(const at::Tensor& self, const at::Tensor& A, bool upper,
                                                          bool transpose, bool unitriangular, at::Tensor& X,
                                                          at::Tensor& M) {
  check_same_device({self, A});
  MetaOuts meta{&X, &M};
  at::meta::triangular_solve_outf(meta_like(self), meta_like(A), upper, transpose, unitriangular, meta[0], meta[1]);
  meta.apply();
  check_float_or_complex<at::_ops::triangular_solve>(A, self, A, upper, transpose, unitriangular);
  c10::IntArrayRef batch = batch_of(X);
  Val a = matrix_values(A, batch);
  store(M, a);
  if (X.numel() == 0) return {X, M};
  // transpose= is A^T, for complex A too
  Val b = cast_val(matrix_values(self, batch), a.re->dtype, a.complex());
  store(X, solve_triangular(transpose ? each(a, transposed) : a, b, upper != transpose, unitriangular, device_for(A)));
  return {X, M};
}

std::tuple<at::Tensor, at::Tensor> triangular_solve(const at::Tensor& self, const at::Tensor& A, bool upper,
                                                    bool transpose, bool unitriangular) {
  at::Tensor X = empty_like_dtype(self, self.scalar_type()), M = empty_like_dtype(A, A.scalar_type());
  triangular_solve_out(self, A, upper, transpose, unitriangular, X, M);
  return {X, M};
}

at::Tensor& linalg_solve_triangular_out(const at::Tensor& A, const at::Tensor& B, bool upper, bool left,
                                        bool unitriangular, at::Tensor& out) {
  check_same_device({A, B});
  at::native::checkInputsSolver(A, B, left, "linalg.solve_triangular");
  auto [B_, A_] = at::native::_linalg_broadcast_batch_dims(B, A, nullptr);
  // complex calls run natively when A, B and out share one dtype; the CPU fallback casts (or refuses) the others
  bool any_complex = A.is_complex() || B.is_complex() || out.is_complex();
  if (any_complex && (B.scalar_type() != A.scalar_type() || out.scalar_type() != A.scalar_type()))
    to_tiny_dtype(A.is_complex() ? A.scalar_type() : B.is_complex() ? B.scalar_type() : out.scalar_type());
  if (A_.is_conj() && A_.mT().is_contiguous()) {
    // the CPU solves with the storage of a conjugate transpose as it is: its result is row-major then
    at::native::resize_output(out, B_.sizes());
  } else if (at::native::resize_output_check(out, B_.sizes())) {
    // torch's result is F-contiguous when it is (re)allocated
    out.resize_(B_.mT().sizes());
    out.transpose_(-2, -1);
  }
  check_float_or_complex<at::_ops::linalg_solve_triangular>(A, A, B, upper, left, unitriangular);
  if (out.numel() == 0) return out;
  c10::IntArrayRef batch = batch_of(out);
  DType dt = value_dtype(A.scalar_type());
  Val a = matrix_values(A_, batch), b = cast_val(matrix_values(B_, batch), dt, A.is_complex());
  Device& dev = device_for(A);
  // X A = B  <=>  A^T X^T = B^T (a transpose, for complex A too)
  Val x =
      left ? solve_triangular(a, b, upper, unitriangular, dev)
           : each(solve_triangular(each(a, transposed), each(b, transposed), !upper, unitriangular, dev), transposed);
  store(out, x);
  return out;
}

at::Tensor linalg_solve_triangular(const at::Tensor& A, const at::Tensor& B, bool upper, bool left,
                                   bool unitriangular) {
  at::Tensor out = empty_like_dtype(A, A.scalar_type());
  linalg_solve_triangular_out(A, B, upper, left, unitriangular, out);
  return out;
}

// ---- LDL ----

// hermitian= changes nothing for real matrices (sytrf and hetrf agree there); complex matrices factor as complex
// symmetric ones (sytrf, hermitian=False) or Hermitian ones (hetrf).
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_ldl_factor_ex_out(const at::Tensor& A, bool hermitian,
                                                                           bool check_errors, at::Tensor& LD,
                                                                           at::Tensor& pivots, at::Tensor& info) {
  MetaOuts meta{&LD, &pivots, &info};
  at::meta::linalg_ldl_factor_ex_outf(meta_like(A), hermitian, check_errors, meta[0], meta[1], meta[2]);
  meta.apply();
  check_float_or_complex<at::_ops::linalg_ldl_factor_ex>(A, A, hermitian, check_errors);
  LDLFactors f = ldl_factor(matrix_values(A), hermitian, device_for(A));
  store(LD, f.ld);
  store(pivots, f.pivots);
  store(info, f.info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.ldl_factor_ex", A.dim() == 2);
  return {LD, pivots, info};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_ldl_factor_ex(const at::Tensor& A, bool hermitian,
                                                                    bool check_errors) {
  at::Tensor LD = empty_like_dtype(A, A.scalar_type()), pivots = empty_like_dtype(A, at::kInt),
             info = empty_like_dtype(A, at::kInt);
  linalg_ldl_factor_ex_out(A, hermitian, check_errors, LD, pivots, info);
  return {LD, pivots, info};
}

at::Tensor& linalg_ldl_solve_out(const at::Tensor& LD, const at::Tensor& pivots, const at::Tensor& B, bool hermitian,
                                 at::Tensor& result) {
  check_same_device({LD, pivots, B});
  MetaOuts meta{&result};
  at::meta::linalg_ldl_solve_outf(meta_like(LD), meta_like(pivots), meta_like(B), hermitian, meta[0]);
  // complex factors solve natively when LD, B and result share their dtype
  if ((LD.is_complex() || B.is_complex()) &&
      (B.scalar_type() != LD.scalar_type() || result.scalar_type() != LD.scalar_type()))
    to_tiny_dtype(LD.is_complex() ? LD.scalar_type() : B.scalar_type()); // NotNativeDtype
  meta.apply();
  if (result.numel() == 0) return result;
  check_float_or_complex<at::_ops::linalg_ldl_solve>(LD, LD, pivots, B, hermitian);
  c10::IntArrayRef batch = batch_of(result);
  store(result, ldl_solve(matrix_values(LD, batch), pivot_rows(pivots, batch), matrix_values(B, batch), hermitian,
                          device_for(LD)));
  return result;
}

at::Tensor linalg_ldl_solve(const at::Tensor& LD, const at::Tensor& pivots, const at::Tensor& B, bool hermitian) {
  at::Tensor result = empty_like_dtype(LD, LD.scalar_type());
  linalg_ldl_solve_out(LD, pivots, B, hermitian, result);
  return result;
}

// ---- Cholesky ----

std::tuple<at::Tensor&, at::Tensor&> linalg_cholesky_ex_out(const at::Tensor& A, bool upper, bool check_errors,
                                                            at::Tensor& L, at::Tensor& info) {
  MetaOuts meta{&L, &info};
  at::meta::linalg_cholesky_ex_outf(meta_like(A), upper, check_errors, meta[0], meta[1]);
  meta.apply();
  if (L.numel() == 0) {
    store(info, fixed(DType::Int32, 0, to_shape(info.sizes())));
    return {L, info};
  }
  check_float_or_complex<at::_ops::linalg_cholesky_ex>(A, A, upper, check_errors);
  Val a = matrix_values(A);
  // upper: U^H U = A, U = L^H for the lower factor L of A^H (A's upper triangle)
  auto [l, inf] = cholesky(upper ? adjoint(a) : a, device_for(A));
  l = each(l, [](const UOpPtr& part) { return triangle(part, false); });
  store(L, upper ? adjoint(l) : l);
  store(info, inf);
  if (check_errors) at::_linalg_check_errors(info, "linalg.cholesky_ex", A.dim() == 2);
  return {L, info};
}

std::tuple<at::Tensor, at::Tensor> linalg_cholesky_ex(const at::Tensor& A, bool upper, bool check_errors) {
  at::Tensor L = empty_like_dtype(A, A.scalar_type()), info = empty_like_dtype(A, at::kInt);
  linalg_cholesky_ex_out(A, upper, check_errors, L, info);
  return {L, info};
}

// x of L L^H x = b (or U^H U x = b), the factor's batch broadcast to b's
Val cholesky_solve(const Val& factor, const Val& b, bool upper, Device& dev) {
  Val lower = upper ? adjoint(factor) : factor;
  Val y = solve_triangular(lower, b, false, false, dev);
  return solve_triangular(adjoint(lower), y, true, false, dev);
}

// cholesky_solve (CompositeExplicitAutograd) broadcasts and checks, then calls this helper; its result is
// F-contiguous as the CPU's.
at::Tensor cholesky_solve_helper(const at::Tensor& self, const at::Tensor& A, bool upper) {
  check_same_device({self, A});
  check_float_or_complex<at::_ops::_cholesky_solve_helper>(self, self, A, upper);
  auto strides = at::native::batched_matrix_contiguous_strides(self.sizes(), /*f_contig=*/true);
  at::Tensor result = empty_tiny(self.sizes(), strides, self.scalar_type(), self.device());
  if (result.numel() == 0) return result;
  store(result, cholesky_solve(matrix_values(A), matrix_values(self), upper, device_for(self)));
  return result;
}

at::Tensor& cholesky_inverse_out(const at::Tensor& input, bool upper, at::Tensor& result) {
  at::native::squareCheckInputs(input, "cholesky_inverse");
  at::native::checkSameDevice("cholesky_inverse", result, input);
  at::native::checkLinalgCompatibleDtype("cholesky_inverse", result, input);
  check_float_or_complex<at::_ops::cholesky_inverse>(input, input, upper);
  if (result.numel() == 0) { // a new result is F-contiguous, as the CPU's
    result.resize_(input.mT().sizes());
    result.transpose_(-2, -1);
  } else {
    at::native::resize_output(result, input.sizes());
  }
  if (input.numel() == 0) return result;
  Val given = matrix_values(input);
  Val factor = first_val(realize_now(with_parts(given, {}), device_for(input)), given.complex());
  int64_t B = factor.re->shape[0], n = factor.re->shape[1];
  // LAPACK's potri refuses a factor with a zero on its diagonal: info is the first one (1-based)
  Shape d{B, n};
  UOpPtr zero = is_zero(element(factor, coordinate(d, 0), coordinate(d, 1), coordinate(d, 1)));
  UOpPtr first = reduce(where(zero, coordinate(d, 1), index_const(n, d)), Ops::MIN, {1});
  UOpPtr info_value =
      cast(where(eq(first, index_const(n, {B, 1})), index_const(0, {B, 1}), add(first, index_const(1, {B, 1}))),
           DType::Int32);
  at::Tensor info = empty_tiny(batch_of(input), at::kInt, input.device());
  store(info, info_value);
  at::_linalg_check_errors(info, "cholesky_inverse", result.dim() == 2);
  Device& dev = device_for(input);
  UOpPtr eye = identity(factor.re->dtype, B, n);
  store(result, cholesky_solve(factor, {eye, factor.complex() ? like(eye, 0) : nullptr}, upper, dev));
  return result;
}

at::Tensor cholesky_inverse(const at::Tensor& input, bool upper) {
  at::Tensor result = empty_like_dtype(input, input.scalar_type());
  cholesky_inverse_out(input, upper, result);
  return result;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("linalg_lu_factor_ex", TORCH_FN(linalg_lu_factor_ex));
  m.impl("linalg_lu_factor_ex.out", TORCH_FN(linalg_lu_factor_ex_out));
  m.impl("linalg_lu", TORCH_FN(linalg_lu));
  m.impl("linalg_lu.out", TORCH_FN(linalg_lu_out));
  m.impl("lu_unpack", TORCH_FN(lu_unpack));
  m.impl("lu_unpack.out", TORCH_FN(lu_unpack_out));
  m.impl("linalg_lu_solve", TORCH_FN(linalg_lu_solve));
  m.impl("linalg_lu_solve.out", TORCH_FN(linalg_lu_solve_out));
  m.impl("_linalg_solve_ex", TORCH_FN(linalg_solve_ex));
  m.impl("_linalg_solve_ex.result", TORCH_FN(linalg_solve_ex_out));
  m.impl("linalg_inv_ex", TORCH_FN(linalg_inv_ex));
  m.impl("linalg_inv_ex.inverse", TORCH_FN(linalg_inv_ex_out));
  m.impl("_linalg_det", TORCH_FN(linalg_det));
  m.impl("_linalg_det.result", TORCH_FN(linalg_det_out));
  m.impl("_linalg_slogdet", TORCH_FN(linalg_slogdet));
  m.impl("_linalg_slogdet.sign", TORCH_FN(linalg_slogdet_out));
  m.impl("triangular_solve", TORCH_FN(triangular_solve));
  m.impl("triangular_solve.X", TORCH_FN(triangular_solve_out));
  m.impl("linalg_solve_triangular", TORCH_FN(linalg_solve_triangular));
  m.impl("linalg_solve_triangular.out", TORCH_FN(linalg_solve_triangular_out));
  m.impl("linalg_cholesky_ex", TORCH_FN(linalg_cholesky_ex));
  m.impl("linalg_cholesky_ex.L", TORCH_FN(linalg_cholesky_ex_out));
  m.impl("_cholesky_solve_helper", TORCH_FN(cholesky_solve_helper));
  m.impl("cholesky_inverse", TORCH_FN(cholesky_inverse));
  m.impl("cholesky_inverse.out", TORCH_FN(cholesky_inverse_out));
  m.impl("linalg_ldl_factor_ex", TORCH_FN(linalg_ldl_factor_ex));
  m.impl("linalg_ldl_factor_ex.out", TORCH_FN(linalg_ldl_factor_ex_out));
  m.impl("linalg_ldl_solve", TORCH_FN(linalg_ldl_solve));
  m.impl("linalg_ldl_solve.out", TORCH_FN(linalg_ldl_solve_out));
}

} // namespace tiny::aten_ops
