// The general (non-symmetric) eigenproblem: linalg_eig (linalg.eig) and _linalg_eigvals / linalg_eigvals.out
// (linalg.eigvals) for float32, float64, complex64 and complex128 inputs, batched over every dim before the
// last two. Results are complex, as torch's.
//
// torch's CPU kernel is LAPACK's geev, and the order of its eigenvalues comes from its algorithm, so this
// follows the same sequence of steps: balancing (gebal: permutations isolating eigenvalues, then scaling by
// powers of two), Hessenberg reduction by Householder reflectors (gehd2), the accumulated transformation
// (orghr), the QR iteration on the Hessenberg matrix (real: dlahqr's double shifts, Francis steps chasing a
// 3x3 bulge, 2x2 blocks standardized as dlanv2 does; complex: zlahqr's single shifts with a real subdiagonal),
// with their deflation tests and Wilkinson and exceptional shifts, the eigenvectors of the (quasi-)triangular
// Schur form by back substitution (trevc), back-transformed by the Schur vectors and the balancing (gebak),
// and geev's normalization: unit 2-norm, the largest component made real (for a real matrix's complex pair
// by dlartg's rotation, for a complex matrix positive).
//
// The batch runs in lockstep: every matrix holds its own state (the active window [L, I] of dlahqr, the
// iterations since its last deflation) as values on the device, and each round either deflates or runs one
// QR step, as that matrix's state says; a matrix that has finished takes no part. A round is a few kernels
// per bulge position, the position a runtime scalar (the same kernels every time); the host reads one flag
// every few rounds to know whether every matrix has finished. Balancing's permutations depend only on which
// entries are zero: that pattern is read to the host, which finds the permutation as gebal does.
//
// Not imitated: dhseqr's switch to the multishift algorithm (dlaqr0) above 75 rows, so the order of a large
// matrix's eigenvalues may differ from the CPU's (each is still an eigenvalue, with its eigenvector); trevc's
// overflow guard is a rescaling of the column by a power of two, not its exact scale factors. Measured against
// MKL: the order and the complex inputs' eigenvectors are the CPU's, a real eigenvalue's eigenvector the CPU's or
// negated (its sign follows the QR iteration's rounding: for random symmetric 6 x 6 matrices 12% of them negated
// in float32, 2% in float64, where OpenBLAS's LAPACK negates 39% and 1%); a real
// matrix's complex-pair eigenvector is the CPU's negated for 4% of them in float64, 22% in float32 (the
// orientation of a 2x2 Schur block, and with it that sign, follows rounding; MKL and OpenBLAS's LAPACK differ
// on 22% in float64). dlartg's older convention (r > 0 unless |f| > |g| and f < 0) is the one MKL agrees with.

#include <ATen/core/Tensor.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/complex_math.h"
#include "aten_ops/lapack_layout.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

namespace cm = complex_math;
using cm::Cx;

// ---- building blocks over (b, n, n) values and (b, 1, 1) per-matrix values ----

UOpPtr index(int64_t v, const Shape& shape) { return broadcast(const_int(kIndex, v), shape); }
UOpPtr step(int64_t v, const Shape& shape) { return broadcast(var_int(kIndex, v), shape); }
UOpPtr iadd(const UOpPtr& a, int64_t v) { return add(a, index(v, a->shape)); }
UOpPtr absolute(const UOpPtr& x) { return alu(Ops::ABS, x); }
UOpPtr maximum(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::MAX, a, b); }
UOpPtr minimum(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::MIN, a, b); }
UOpPtr zeros(const UOpPtr& x) { return like(x, 0); }
UOpPtr masked(const UOpPtr& mask, const UOpPtr& x) { return where(mask, x, zeros(x)); }
UOpPtr negate(const UOpPtr& x) { return alu(Ops::NEG, x); }
UOpPtr lnot(const UOpPtr& x) { return alu(Ops::NOT, x); }
UOpPtr either(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::OR, a, b); }
UOpPtr ne(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::CMPNE, a, b); }
UOpPtr root(const UOpPtr& x) { return alu(Ops::SQRT, x); }
// sqrt(a^2 + b^2) without overflow (dlapy2)
UOpPtr pythag(const UOpPtr& a, const UOpPtr& b) { return cm::hypot(a, b); }
// Fortran's SIGN(a, b): |a| with the sign of b
UOpPtr with_sign(const UOpPtr& a, const UOpPtr& b) { return where(lt(b, zeros(b)), negate(absolute(a)), absolute(a)); }
Cx realized_cx(const Cx& z) { return {contiguous(z.re), contiguous(z.im)}; }

// The machine constants of LAPACK's dlamch for the working dtype.
struct Machine {
  double ulp, safmin;
  explicit Machine(DType dt)
      : ulp(dt == DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon()),
        safmin(dt == DType::Float64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min()) {}
};

// The working state of a batch: H (b, n, n) and Z (b, n, n) in storages of their own, and per-matrix
// integers (b, 1, 1).
struct Batch {
  int64_t b, n;
  DType dt;
  c10::Device device;
  Shape grid() const { return {b, n, n}; }
  Shape per() const { return {b, 1, 1}; }
  Shape row() const { return {b, 1, n}; } // a value per index k along the last axis
};

// x (b, n, n; realized) at rows r and columns c (index values of one shape (b, ...)), 0 where either is out
// of range.
UOpPtr at(const UOpPtr& x, const UOpPtr& r, const UOpPtr& c) {
  int64_t b = x->shape[0], n = x->shape[1];
  const Shape& s = r->shape;
  UOpPtr valid = both(both(le(index(0, s), r), lt(r, index(n, s))), both(le(index(0, s), c), lt(c, index(n, s))));
  UOpPtr flat = add(add(mul(coordinate(s, 0), index(n * n, s)), mul(r, index(n, s))), c);
  UOpPtr g = gather(reshape(x, {b * n * n}), where(valid, flat, index(0, s)));
  return masked(valid, g);
}
// 2^k for integers k (kIndex, within the dtype's normal exponents), exact: the bits of the power.
UOpPtr power_of_two(const UOpPtr& k, DType dt) {
  bool dbl = dt == DType::Float64;
  int64_t bias = dbl ? 1023 : 127, shift = dbl ? 52 : 23;
  UOpPtr e = add(alu(Ops::MIN, alu(Ops::MAX, k, like(k, 1 - bias)), like(k, bias)), like(k, bias));
  UOpPtr bits = mul(e, like(e, static_cast<double>(int64_t{1} << shift)));
  return dbl ? bitcast(bits, DType::Float64) : bitcast(cast(bits, DType::Int32), DType::Float32);
}

// gebal's second phase on rows and columns ilo..ihi: each row and column pair in turn is scaled by a power of
// two f (row by 1/f, column by f) when that brings their 2-norms c and r closer (c + r below 0.95 of before),
// passes repeating until none changes. f is the first power of two at which gebal's doubling (or halving)
// loop stops, found from the exponents and checked exactly. Returns the balanced H and the scales (b, n, 1).
// A complex matrix (Hi: its imaginary parts, updated in place) is balanced by the moduli of its entries.
std::pair<UOpPtr, UOpPtr> balance_scaling(UOpPtr H, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt,
                                          UOpPtr* Hi = nullptr) {
  Machine mc(bt.dt);
  Shape s = bt.grid(), p = bt.per(), col{bt.b, bt.n, 1};
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2);
  UOpPtr inside_r = both(le(broadcast(ilo, s), R), le(R, broadcast(ihi, s)));
  UOpPtr inside_c = both(le(broadcast(ilo, s), C), le(C, broadcast(ihi, s)));
  double sfmin1 = mc.safmin / mc.ulp, sfmax1 = 1 / sfmin1, sfmin2 = sfmin1 * 2, sfmax2 = 1 / sfmin2;
  at::Tensor h_t = empty_tiny(s, to_scalar_type(bt.dt), bt.device),
             d_t = empty_tiny(col, to_scalar_type(bt.dt), bt.device);
  at::Tensor hi_t = empty_tiny(s, to_scalar_type(bt.dt), bt.device);
  write(h_t, H);
  if (Hi) write(hi_t, *Hi);
  write(d_t, fixed(bt.dt, 1, col));
  UOpPtr two = fixed(bt.dt, 2, p), one = fixed(bt.dt, 1, p);
  auto log2 = [](const UOpPtr& x) { return alu(Ops::LOG2, x); };
  for (int pass = 0; pass < 100; pass++) {
    UOpPtr h = read(h_t), d = read(d_t), changed = broadcast(const_int(DType::Bool, 0), p);
    UOpPtr hi = Hi ? read(hi_t) : nullptr;
    for (int64_t i = 0; i < bt.n; i++) {
      UOpPtr Ip = step(i, p), Is = broadcast(Ip, s);
      UOpPtr act = both(le(ilo, Ip), le(Ip, ihi));
      UOpPtr sq = Hi ? add(mul(h, h), mul(hi, hi)) : mul(h, h), mag = Hi ? pythag(h, hi) : absolute(h);
      UOpPtr in_col = eq(C, Is), in_row = eq(R, Is);
      UOpPtr c = root(sum_keep(masked(both(in_col, inside_r), sq), {1, 2}));
      UOpPtr r = root(sum_keep(masked(both(in_row, inside_c), sq), {1, 2}));
      UOpPtr ca = reduce(masked(both(in_col, le(R, broadcast(ihi, s))), mag), Ops::MAX, {1, 2});
      UOpPtr ra = reduce(masked(both(in_row, le(broadcast(ilo, s), C)), mag), Ops::MAX, {1, 2});
      UOpPtr zero = zeros(c);
      UOpPtr usable = both(act, both(ne(c, zero), ne(r, zero)));
      UOpPtr sc = where(usable, c, one), sr = where(usable, r, one);
      UOpPtr sca = where(usable, maximum(ca, sc), one), sra = where(usable, maximum(ra, sr), one);
      UOpPtr diff = sub(log2(sr), log2(sc));
      // up: the least k >= 0 with c 2^(2k+1) >= r
      UOpPtr ku = cast(alu(Ops::CEIL, mul(sub(diff, one), like(diff, 0.5))), kIndex);
      ku = alu(Ops::MAX, ku, index(0, p));
      auto up_done = [&](const UOpPtr& k) { return le(sr, mul(sc, power_of_two(iadd(add(k, k), 1), bt.dt))); };
      ku = where(up_done(ku), ku, iadd(ku, 1));
      ku = where(both(lt(index(0, p), ku), up_done(iadd(ku, -1))), iadd(ku, -1), ku);
      // down: the least k >= 0 with c < r 2^(2k+1)
      UOpPtr kd = iadd(cast(alu(Ops::FLOOR, mul(sub(negate(diff), one), like(diff, 0.5))), kIndex), 1);
      kd = alu(Ops::MAX, kd, index(0, p));
      auto down_done = [&](const UOpPtr& k) { return lt(sc, mul(sr, power_of_two(iadd(add(k, k), 1), bt.dt))); };
      kd = where(down_done(kd), kd, iadd(kd, 1));
      kd = where(both(lt(index(0, p), kd), down_done(iadd(kd, -1))), iadd(kd, -1), kd);
      // gebal's loops also stop before a value leaves [sfmin2, sfmax2]
      UOpPtr up_room = cast(alu(Ops::FLOOR, minimum(sub(like(sc, std::log2(sfmax2)), log2(maximum(sc, sca))),
                                                    sub(log2(minimum(sr, sra)), like(sc, std::log2(sfmin2) + 1)))),
                            kIndex);
      UOpPtr down_room = cast(alu(Ops::FLOOR, minimum(sub(like(sc, std::log2(sfmax2)), log2(maximum(sr, sra))),
                                                      sub(log2(minimum(sc, sca)), like(sc, std::log2(sfmin2) + 1)))),
                              kIndex);
      ku = alu(Ops::MIN, ku, alu(Ops::MAX, up_room, index(0, p)));
      kd = alu(Ops::MIN, kd, alu(Ops::MAX, down_room, index(0, p)));
      UOpPtr k = where(lt(index(0, p), ku), ku, negate(kd));
      UOpPtr f = power_of_two(k, bt.dt);
      UOpPtr c2 = mul(sc, f), r2 = div(sr, f);
      UOpPtr di = reshape(sum_keep(masked(eq(coordinate(col, 1), broadcast(Ip, col)), d), {1, 2}), p);
      UOpPtr worth = lt(add(c2, r2), mul(like(c2, 0.95), add(sc, sr)));
      UOpPtr tiny_f = both(both(lt(f, one), lt(di, one)), le(mul(f, di), like(f, sfmin1)));
      UOpPtr huge_f = both(both(lt(one, f), lt(one, di)), le(div(like(f, sfmax1), f), di));
      UOpPtr apply = both(both(usable, worth), lnot(either(tiny_f, huge_f)));
      changed = either(changed, apply);
      UOpPtr F = broadcast(where(apply, f, one), s);
      // row i (columns from ilo) by 1/f, column i (rows to ihi) by f
      auto rescale = [&](const UOpPtr& x) {
        UOpPtr scaled = where(both(eq(R, Is), le(broadcast(ilo, s), C)), div(x, F), x);
        return contiguous(where(both(eq(C, Is), le(R, broadcast(ihi, s))), mul(scaled, F), scaled));
      };
      h = rescale(h);
      if (Hi) hi = rescale(hi);
      d = contiguous(
          where(eq(coordinate(col, 1), broadcast(Ip, col)), mul(d, broadcast(where(apply, f, one), col)), d));
    }
    write(h_t, h);
    if (Hi) write(hi_t, hi);
    write(d_t, d);
    at::Tensor any = empty_tiny({}, at::kLong, bt.device);
    write(any, reshape(reduce(reshape(cast(changed, kIndex), {bt.b}), Ops::MAX, {0}), {}));
    if (any.item<int64_t>() == 0) break;
  }
  if (Hi) *Hi = read(hi_t);
  return {read(h_t), read(d_t)};
}

// ---- Householder reflector (dlarfg) ----

struct Reflector {
  UOpPtr beta, tau, v2, v3; // H (alpha, x2, x3) = (beta, 0, 0), H = I - tau (1, v2, v3) (1, v2, v3)^T
};
Reflector reflector(const UOpPtr& alpha, const UOpPtr& x2, const UOpPtr& x3) {
  UOpPtr xnorm = pythag(x2, x3);
  UOpPtr none = eq(xnorm, zeros(xnorm));
  UOpPtr beta = negate(with_sign(pythag(alpha, xnorm), alpha));
  UOpPtr safe = where(none, like(beta, 1), beta);
  UOpPtr tau = masked(lnot(none), div(sub(safe, alpha), safe));
  UOpPtr scal = div(like(alpha, 1), where(none, like(alpha, 1), sub(alpha, safe)));
  return {where(none, alpha, beta), tau, where(none, x2, mul(x2, scal)), where(none, x3, mul(x3, scal))};
}

// ---- Hessenberg reduction (gehd2) and its transformation (orghr) ----

// Reduces H (realized) to upper Hessenberg form between rows and columns ilo..ihi (per matrix), accumulating
// the reflectors into Z.
std::pair<UOpPtr, UOpPtr> hessenberg(UOpPtr H, UOpPtr Z, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt,
                                     bool vectors) {
  Shape s = bt.grid(), p = bt.per();
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2);
  for (int64_t j = 0; j + 2 < bt.n; j++) {
    UOpPtr J = step(j, p);
    // the reflector of column j, rows j+1..ihi; nothing outside [ilo, ihi - 1)
    UOpPtr act = both(le(ilo, J), lt(J, iadd(ihi, -1)));
    UOpPtr below = both(lt(iadd(broadcast(J, s), 1), R), le(R, broadcast(ihi, s)));
    UOpPtr col = masked(eq(C, broadcast(J, s)), H);
    UOpPtr alpha = at(H, iadd(J, 1), J);
    UOpPtr x2 = root(sum_keep(masked(below, mul(col, col)), {1, 2}));
    Reflector f = reflector(alpha, x2, zeros(x2));
    UOpPtr tau = masked(act, f.tau);
    // v: 1 at j+1, x / (alpha - beta) below (the scale is v2 / x2)
    UOpPtr scal = div(f.v2, where(eq(x2, zeros(x2)), like(x2, 1), x2));
    UOpPtr vcol = reshape(sum_keep(col, {2}), {bt.b, bt.n, 1});
    UOpPtr v = where(eq(coordinate({bt.b, bt.n, 1}, 1), broadcast(iadd(J, 1), {bt.b, bt.n, 1})), like(vcol, 1),
                     masked(both(lt(iadd(broadcast(J, {bt.b, bt.n, 1}), 1), coordinate({bt.b, bt.n, 1}, 1)),
                                 le(coordinate({bt.b, bt.n, 1}, 1), broadcast(ihi, {bt.b, bt.n, 1}))),
                            mul(vcol, broadcast(scal, {bt.b, bt.n, 1}))));
    v = contiguous(v);
    UOpPtr vr = broadcast(v, s), vc = broadcast(permute(v, {0, 2, 1}), s), tb = broadcast(tau, s);
    // from the right: H - tau (H v) v^T, then from the left: H - tau v (v^T H), on the columns after j
    UOpPtr hv = broadcast(sum_keep(mul(H, vc), {2}), s);
    UOpPtr H1 = contiguous(sub(H, mul(tb, mul(hv, vc))));
    UOpPtr vh = broadcast(sum_keep(mul(vr, H1), {1}), s);
    UOpPtr after = lt(broadcast(J, s), C);
    UOpPtr left = where(after, sub(H1, mul(tb, mul(vr, vh))), H1);
    UOpPtr here = both(eq(C, broadcast(J, s)), broadcast(act, s));
    UOpPtr column = where(eq(R, iadd(broadcast(J, s), 1)), broadcast(f.beta, s), zeros(H));
    H = contiguous(where(both(here, lt(broadcast(J, s), R)), column, left));
    if (vectors) {
      UOpPtr zv = broadcast(sum_keep(mul(Z, vc), {2}), s);
      Z = contiguous(sub(Z, mul(tb, mul(zv, vc))));
    }
  }
  return {H, Z};
}

// ---- the double-shift QR iteration (dlahqr) ----

struct Schur {
  UOpPtr H, Z, wr, wi; // wr, wi (b, 1, n)
  at::Tensor failed;   // a bool (b, 1, 1): the iteration did not converge
};

// dlanv2: the Schur factorization of a real 2x2 [[a, b], [c, d]] in standard form.
struct Standard2x2 {
  UOpPtr a, b, c, d, rt1r, rt1i, rt2r, rt2i, cs, sn;
};
Standard2x2 standardize(UOpPtr a, UOpPtr b, UOpPtr c, UOpPtr d, double eps) {
  UOpPtr zero = zeros(a), one = like(a, 1), half = like(a, 0.5);
  UOpPtr sign_one_b = with_sign(one, b), sign_one_c = with_sign(one, c);
  // c == 0: nothing; b == 0: swap; a == d with b and c of opposite signs: nothing
  UOpPtr c0 = eq(c, zero), b0 = both(lnot(c0), eq(b, zero));
  UOpPtr same = both(both(lnot(c0), lnot(b0)), both(eq(sub(a, d), zero), ne(sign_one_b, sign_one_c)));
  UOpPtr general = lnot(either(either(c0, b0), same));
  UOpPtr temp = sub(a, d), p = mul(half, temp);
  UOpPtr bcmax = maximum(absolute(b), absolute(c));
  UOpPtr bcmis = mul(mul(minimum(absolute(b), absolute(c)), sign_one_b), sign_one_c);
  UOpPtr scale = maximum(absolute(p), bcmax);
  UOpPtr safe_scale = where(eq(scale, zero), one, scale);
  UOpPtr z = add(mul(div(p, safe_scale), p), mul(div(bcmax, safe_scale), bcmis));
  UOpPtr real = both(general, le(like(z, 4 * eps), z));
  // real eigenvalues
  UOpPtr zr = add(p, with_sign(mul(root(scale), root(absolute(z))), p));
  UOpPtr safe_zr = where(eq(zr, zero), one, zr);
  UOpPtr ra = add(d, zr), rd = sub(d, mul(div(bcmax, safe_zr), bcmis));
  UOpPtr rtau = pythag(c, zr), safe_rtau = where(eq(rtau, zero), one, rtau);
  UOpPtr rcs = div(zr, safe_rtau), rsn = div(c, safe_rtau), rb = sub(b, c);
  // complex or nearly equal eigenvalues: make the diagonal equal
  UOpPtr sigma = add(b, c);
  UOpPtr ctau = pythag(sigma, temp), safe_ctau = where(eq(ctau, zero), one, ctau);
  UOpPtr ccs = root(mul(half, add(one, div(absolute(sigma), safe_ctau))));
  UOpPtr csn = mul(negate(div(p, mul(safe_ctau, ccs))), with_sign(one, sigma));
  UOpPtr aa = add(mul(a, ccs), mul(b, csn)), bb = add(mul(negate(a), csn), mul(b, ccs));
  UOpPtr cc = add(mul(c, ccs), mul(d, csn)), dd = add(mul(negate(c), csn), mul(d, ccs));
  UOpPtr na = add(mul(aa, ccs), mul(cc, csn)), nb = add(mul(bb, ccs), mul(dd, csn));
  UOpPtr nc = add(mul(negate(aa), csn), mul(cc, ccs)), nd = add(mul(negate(bb), csn), mul(dd, ccs));
  UOpPtr t2 = mul(half, add(na, nd));
  // then: c != 0 and b != 0 of the same sign: real, reduce to triangular; c != 0, b == 0: swap
  UOpPtr cnz = ne(nc, zero), bnz = ne(nb, zero);
  UOpPtr tri = both(both(cnz, bnz), eq(with_sign(one, nb), with_sign(one, nc)));
  UOpPtr swap = both(cnz, lnot(bnz));
  UOpPtr sab = root(absolute(nb)), sac = root(absolute(nc));
  UOpPtr pp = with_sign(mul(sab, sac), nc);
  UOpPtr bpc = absolute(add(nb, nc));
  UOpPtr ttau = div(one, root(where(eq(bpc, zero), one, bpc)));
  UOpPtr cs1 = mul(sab, ttau), sn1 = mul(sac, ttau);
  UOpPtr tcs = sub(mul(ccs, cs1), mul(csn, sn1)), tsn = add(mul(ccs, sn1), mul(csn, cs1));
  UOpPtr xa = where(tri, add(t2, pp), t2), xd = where(tri, sub(t2, pp), t2);
  UOpPtr xb = where(tri, sub(nb, nc), where(swap, negate(nc), nb));
  UOpPtr xc = where(either(tri, swap), zero, nc);
  UOpPtr xcs = where(tri, tcs, where(swap, negate(csn), ccs)), xsn = where(tri, tsn, where(swap, ccs, csn));
  // assemble the cases
  UOpPtr A = where(c0, a, where(b0, d, where(same, a, where(real, ra, xa))));
  UOpPtr B = where(c0, b, where(b0, negate(c), where(same, b, where(real, rb, xb))));
  UOpPtr Cc = where(c0, c, where(b0, zero, where(same, c, where(real, zero, xc))));
  UOpPtr D = where(c0, d, where(b0, a, where(same, d, where(real, rd, xd))));
  UOpPtr cs = where(either(c0, same), one, where(b0, zero, where(real, rcs, xcs)));
  UOpPtr sn = where(either(c0, same), zero, where(b0, one, where(real, rsn, xsn)));
  UOpPtr im = masked(ne(Cc, zero), mul(root(absolute(B)), root(absolute(Cc))));
  return {A, B, Cc, D, A, im, D, negate(im), cs, sn};
}

// One round of dlahqr for every matrix: a deflation, or a Francis double-shift step.
struct QrState {
  UOpPtr H, Z, I, L, kdefl, wr, wi, failed;
};

QrState qr_round(QrState st, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt, bool vectors, int64_t itmax) {
  Machine mc(bt.dt);
  int64_t n = bt.n;
  Shape s = bt.grid(), p = bt.per(), rw = bt.row();
  UOpPtr H = st.H, I = st.I, L = st.L;
  UOpPtr ulp = fixed(bt.dt, mc.ulp, p);
  UOpPtr smlnum = fixed(bt.dt, mc.safmin * (static_cast<double>(n) / mc.ulp), p);
  UOpPtr active = both(le(ilo, I), lnot(st.failed));
  // a small subdiagonal element: the largest k in (L, I]
  {
    UOpPtr k = coordinate(rw, 2);
    UOpPtr km1 = iadd(k, -1);
    UOpPtr hk = absolute(at(H, k, km1));
    UOpPtr tst = add(absolute(at(H, km1, km1)), absolute(at(H, k, k)));
    UOpPtr extra = add(masked(le(broadcast(ilo, rw), iadd(k, -2)), absolute(at(H, km1, iadd(k, -2)))),
                       masked(le(iadd(k, 1), broadcast(ihi, rw)), absolute(at(H, iadd(k, 1), k))));
    tst = where(eq(tst, zeros(tst)), add(tst, extra), tst);
    UOpPtr hk1 = absolute(at(H, km1, k));
    UOpPtr ab = maximum(hk, hk1), ba = minimum(hk, hk1);
    UOpPtr hkk = absolute(at(H, k, k)), hdiff = absolute(sub(at(H, km1, km1), at(H, k, k)));
    UOpPtr aa = maximum(hkk, hdiff), bb = minimum(hkk, hdiff);
    UOpPtr ss = add(aa, ab), safe_ss = where(eq(ss, zeros(ss)), like(ss, 1), ss);
    UOpPtr u = broadcast(ulp, rw), sm = broadcast(smlnum, rw);
    UOpPtr fine = le(mul(ba, div(ab, safe_ss)), maximum(sm, mul(u, mul(bb, div(aa, safe_ss)))));
    UOpPtr small = either(le(hk, sm), both(le(hk, mul(u, tst)), fine));
    UOpPtr valid = both(lt(broadcast(L, rw), k), le(k, broadcast(I, rw)));
    UOpPtr found = reduce(where(both(valid, small), k, broadcast(L, rw)), Ops::MAX, {2});
    L = contiguous(where(active, found, L));
  }
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2);
  UOpPtr Ls = broadcast(L, s), Is = broadcast(I, s);
  // H(L, L-1) = 0
  H = where(both(broadcast(both(active, lt(ilo, L)), s), both(eq(R, Ls), eq(C, iadd(Ls, -1)))), zeros(H), H);
  H = contiguous(H);
  UOpPtr deflate = both(active, le(iadd(I, -1), L));
  UOpPtr one = both(deflate, eq(L, I)), two = both(deflate, eq(L, iadd(I, -1)));
  UOpPtr francis = both(active, lnot(deflate));
  UOpPtr kdefl = where(francis, iadd(st.kdefl, 1), where(deflate, index(0, p), st.kdefl));
  UOpPtr failed = either(st.failed, both(francis, lt(index(itmax, p), kdefl)));
  francis = both(francis, lnot(failed));
  UOpPtr Z = st.Z;
  // ---- deflation of one eigenvalue or a 2x2 block ----
  UOpPtr wr = st.wr, wi = st.wi;
  {
    UOpPtr Im1 = iadd(I, -1);
    Standard2x2 f = standardize(at(H, Im1, Im1), at(H, Im1, I), at(H, I, Im1), at(H, I, I), mc.ulp);
    UOpPtr k = coordinate(rw, 2);
    UOpPtr at_i = eq(k, broadcast(I, rw)), at_im1 = eq(k, broadcast(Im1, rw));
    UOpPtr o = broadcast(one, rw), t = broadcast(two, rw);
    wr = contiguous(
        where(both(o, at_i), broadcast(at(H, I, I), rw),
              where(both(t, at_i), broadcast(f.rt2r, rw), where(both(t, at_im1), broadcast(f.rt1r, rw), wr))));
    wi = contiguous(
        where(both(o, at_i), zeros(wi),
              where(both(t, at_i), broadcast(f.rt2i, rw), where(both(t, at_im1), broadcast(f.rt1i, rw), wi))));
    // the 2x2 block in standard form, its rotation applied to the rows I-1, I right of it and the columns
    // I-1, I above it
    UOpPtr ts = broadcast(two, s), cs = broadcast(f.cs, s), sn = broadcast(f.sn, s);
    UOpPtr Im1s = broadcast(Im1, s);
    UOpPtr in_rows = either(eq(R, Im1s), eq(R, Is)), in_cols = either(eq(C, Im1s), eq(C, Is));
    UOpPtr upper = at(H, Im1s, C), lower = at(H, Is, C); // rows I-1 and I at column C
    UOpPtr left = at(H, R, Im1s), right = at(H, R, Is);  // columns I-1 and I at row R
    UOpPtr rows_rot = where(eq(R, Im1s), add(mul(cs, upper), mul(sn, lower)), sub(mul(cs, lower), mul(sn, upper)));
    UOpPtr cols_rot = where(eq(C, Im1s), add(mul(cs, left), mul(sn, right)), sub(mul(cs, right), mul(sn, left)));
    UOpPtr block = where(eq(R, Im1s), where(eq(C, Im1s), broadcast(f.a, s), broadcast(f.b, s)),
                         where(eq(C, Im1s), broadcast(f.c, s), broadcast(f.d, s)));
    UOpPtr nh = where(both(in_rows, in_cols), block,
                      where(both(in_rows, lt(Is, C)), rows_rot, where(both(in_cols, lt(R, Im1s)), cols_rot, H)));
    H = contiguous(where(ts, nh, H));
    if (vectors) {
      UOpPtr zl = at(Z, R, Im1s), zr = at(Z, R, Is);
      UOpPtr zrot = where(eq(C, Im1s), add(mul(cs, zl), mul(sn, zr)), sub(mul(cs, zr), mul(sn, zl)));
      Z = contiguous(where(both(ts, in_cols), zrot, Z));
    }
  }
  // ---- shifts and the start of the Francis step ----
  UOpPtr M, v1, v2, v3;
  {
    UOpPtr Im1 = iadd(I, -1), Im2 = iadd(I, -2);
    UOpPtr ex_bottom = eq(alu(Ops::MOD, kdefl, index(20, p)), index(0, p));
    UOpPtr ex_top = both(lnot(ex_bottom), eq(alu(Ops::MOD, kdefl, index(10, p)), index(0, p)));
    UOpPtr sb = add(absolute(at(H, I, Im1)), absolute(at(H, Im1, Im2)));
    UOpPtr st_ = add(absolute(at(H, iadd(L, 1), L)), absolute(at(H, iadd(L, 2), iadd(L, 1))));
    UOpPtr es = where(ex_bottom, sb, st_);
    UOpPtr eh11 = add(mul(like(es, 0.75), es), where(ex_bottom, at(H, I, I), at(H, L, L)));
    UOpPtr exc = either(ex_bottom, ex_top);
    UOpPtr h11 = where(exc, eh11, at(H, Im1, Im1)), h21 = where(exc, es, at(H, I, Im1));
    UOpPtr h12 = where(exc, mul(like(es, -0.4375), es), at(H, Im1, I)), h22 = where(exc, eh11, at(H, I, I));
    UOpPtr sc = add(add(absolute(h11), absolute(h12)), add(absolute(h21), absolute(h22)));
    UOpPtr szero = eq(sc, zeros(sc)), safe_sc = where(szero, like(sc, 1), sc);
    h11 = div(h11, safe_sc);
    h21 = div(h21, safe_sc);
    h12 = div(h12, safe_sc);
    h22 = div(h22, safe_sc);
    UOpPtr half = like(h11, 0.5);
    UOpPtr tr = mul(add(h11, h22), half);
    UOpPtr det = sub(mul(sub(h11, tr), sub(h22, tr)), mul(h12, h21));
    UOpPtr rtdisc = root(absolute(det));
    UOpPtr cplx = le(zeros(det), det);
    UOpPtr r1 = add(tr, rtdisc), r2 = sub(tr, rtdisc);
    UOpPtr first = le(absolute(sub(r1, h22)), absolute(sub(r2, h22)));
    UOpPtr real_shift = mul(where(first, r1, r2), sc);
    UOpPtr rt1r = masked(lnot(szero), where(cplx, mul(tr, sc), real_shift));
    UOpPtr rt2r = rt1r;
    UOpPtr rt1i = masked(both(lnot(szero), cplx), mul(rtdisc, sc));
    UOpPtr rt2i = negate(rt1i);
    // two consecutive small subdiagonal elements: the largest m in [L, I-2] where the step may start
    UOpPtr m = coordinate(rw, 2);
    UOpPtr mp1 = iadd(m, 1), mp2 = iadd(m, 2), mm1 = iadd(m, -1);
    UOpPtr hmm = at(H, m, m);
    UOpPtr h21s = at(H, mp1, m);
    UOpPtr b1r = broadcast(rt1r, rw), b2r = broadcast(rt2r, rw), b1i = broadcast(rt1i, rw), b2i = broadcast(rt2i, rw);
    UOpPtr s1 = add(add(absolute(sub(hmm, b2r)), absolute(b2i)), absolute(h21s));
    UOpPtr safe_s1 = where(eq(s1, zeros(s1)), like(s1, 1), s1);
    h21s = div(h21s, safe_s1);
    UOpPtr a1 = sub(add(mul(h21s, at(H, m, mp1)), mul(sub(hmm, b1r), div(sub(hmm, b2r), safe_s1))),
                    mul(b1i, div(b2i, safe_s1)));
    UOpPtr a2 = mul(h21s, sub(sub(add(hmm, at(H, mp1, mp1)), b1r), b2r));
    UOpPtr a3 = mul(h21s, at(H, mp2, mp1));
    UOpPtr s2 = add(add(absolute(a1), absolute(a2)), absolute(a3));
    UOpPtr safe_s2 = where(eq(s2, zeros(s2)), like(s2, 1), s2);
    a1 = div(a1, safe_s2);
    a2 = div(a2, safe_s2);
    a3 = div(a3, safe_s2);
    UOpPtr h00 = mul(absolute(at(H, m, mm1)), add(absolute(a2), absolute(a3)));
    UOpPtr h01 = mul(absolute(a1), add(add(absolute(at(H, mm1, mm1)), absolute(hmm)), absolute(at(H, mp1, mp1))));
    UOpPtr stop = either(eq(m, broadcast(L, rw)), le(h00, mul(broadcast(ulp, rw), h01)));
    UOpPtr valid = both(le(broadcast(L, rw), m), le(m, broadcast(Im2, rw)));
    M = contiguous(reduce(where(both(valid, stop), m, broadcast(L, rw)), Ops::MAX, {2}));
    UOpPtr atm = eq(m, broadcast(M, rw));
    v1 = contiguous(sum_keep(masked(atm, a1), {2}));
    v2 = contiguous(sum_keep(masked(atm, a2), {2}));
    v3 = contiguous(sum_keep(masked(atm, a3), {2}));
  }
  // ---- the bulge chase: K = M, M+1, ..., I-1 ----
  for (int64_t j = 0; j + 1 < n; j++) {
    UOpPtr K = add(M, step(j, p));
    UOpPtr act = both(francis, le(K, iadd(I, -1)));
    UOpPtr nr3 = le(K, iadd(I, -2));
    UOpPtr first = eq(K, M);
    UOpPtr Km1 = iadd(K, -1);
    UOpPtr x1 = where(first, v1, at(H, K, Km1));
    UOpPtr x2 = where(first, v2, at(H, iadd(K, 1), Km1));
    UOpPtr x3 = masked(nr3, where(first, v3, at(H, iadd(K, 2), Km1)));
    Reflector f = reflector(x1, x2, x3);
    UOpPtr t1 = masked(act, f.tau), w2 = f.v2, w3 = masked(nr3, f.v3);
    UOpPtr t2 = mul(t1, w2), t3 = mul(t1, w3);
    UOpPtr Ks = broadcast(K, s), acts = broadcast(act, s);
    // column K-1 below the bulge
    UOpPtr col = both(both(acts, lnot(broadcast(first, s))), eq(C, iadd(Ks, -1)));
    UOpPtr scaled = both(both(acts, broadcast(both(first, lt(L, M)), s)), eq(C, iadd(Ks, -1)));
    UOpPtr newcol = where(eq(R, Ks), broadcast(f.beta, s), zeros(H));
    UOpPtr hb = where(both(col, both(le(Ks, R), le(R, iadd(Ks, 2)))), newcol, H);
    hb = where(both(scaled, eq(R, Ks)), mul(H, broadcast(sub(like(t1, 1), t1), s)), hb);
    // rows K..K+2, columns K..n-1 (column K-1, just set, is not among them: one kernel with it)
    UOpPtr T1 = broadcast(t1, s), T2 = broadcast(t2, s), T3 = broadcast(t3, s);
    UOpPtr W2 = broadcast(w2, s), W3 = broadcast(w3, s);
    UOpPtr sum_r = add(add(at(H, Ks, C), mul(W2, at(H, iadd(Ks, 1), C))), mul(W3, at(H, iadd(Ks, 2), C)));
    UOpPtr tr = where(eq(R, Ks), T1, where(eq(R, iadd(Ks, 1)), T2, where(eq(R, iadd(Ks, 2)), T3, zeros(T1))));
    UOpPtr rows = both(acts, both(le(Ks, C), both(le(Ks, R), le(R, iadd(Ks, 2)))));
    UOpPtr h1 = contiguous(where(rows, sub(hb, mul(sum_r, tr)), hb));
    // columns K..K+2, rows 0..min(K+3, I)
    UOpPtr sum_c = add(add(at(h1, R, Ks), mul(W2, at(h1, R, iadd(Ks, 1)))), mul(W3, at(h1, R, iadd(Ks, 2))));
    UOpPtr tc = where(eq(C, Ks), T1, where(eq(C, iadd(Ks, 1)), T2, where(eq(C, iadd(Ks, 2)), T3, zeros(T1))));
    UOpPtr cols = both(acts, both(le(R, minimum(iadd(Ks, 3), Is)), both(le(Ks, C), le(C, iadd(Ks, 2)))));
    H = contiguous(where(cols, sub(h1, mul(sum_c, tc)), h1));
    if (vectors) {
      UOpPtr sum_z = add(add(at(Z, R, Ks), mul(W2, at(Z, R, iadd(Ks, 1)))), mul(W3, at(Z, R, iadd(Ks, 2))));
      UOpPtr zc = both(acts, both(le(Ks, C), le(C, iadd(Ks, 2))));
      Z = contiguous(where(zc, sub(Z, mul(sum_z, tc)), Z));
    }
  }
  UOpPtr nI = contiguous(where(deflate, iadd(L, -1), I));
  UOpPtr nL = contiguous(where(deflate, ilo, L));
  return {H, Z, nI, nL, contiguous(kdefl), wr, wi, contiguous(failed)};
}

// The loop control both QR iterations (dlahqr's and zlahqr's) keep per matrix on the device: the active window's
// bottom I and top L, the iterations since the last deflation, and a failure flag. The host reads one flag every
// `group` rounds; the loop ends when every matrix has deflated down to ilo or failed, itmax steps per
// deflation at most.
struct QrLoop {
  at::Tensor i, l, k, failed;
  int64_t itmax, limit, group = 4;
  QrLoop(const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt)
      : i(empty_tiny(bt.per(), at::kLong, bt.device)), l(empty_tiny(bt.per(), at::kLong, bt.device)),
        k(empty_tiny(bt.per(), at::kLong, bt.device)), failed(empty_tiny(bt.per(), at::kBool, bt.device)),
        itmax(30 * std::max<int64_t>(10, bt.n)), limit((itmax + 2) * bt.n) {
    write(i, ihi);
    write(l, ilo);
    write(k, index(0, bt.per()));
    write(failed, broadcast(const_int(DType::Bool, 0), bt.per()));
  }
  // Stores a group's end state; whether some matrix is still running.
  bool store(const UOpPtr& I, const UOpPtr& L, const UOpPtr& kdefl, const UOpPtr& f, const UOpPtr& ilo,
             const Batch& bt) {
    write(i, I);
    write(l, L);
    write(k, kdefl);
    write(failed, f);
    at::Tensor running = empty_tiny({}, at::kLong, bt.device);
    UOpPtr busy = both(le(ilo, I), lnot(f));
    write(running, reshape(reduce(reshape(cast(busy, kIndex), {bt.b}), Ops::MAX, {0}), {}));
    return running.item<int64_t>() != 0;
  }
};

// The rounds until every matrix has deflated all its eigenvalues, in groups between host reads.
Schur schur(UOpPtr H, UOpPtr Z, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt, bool vectors) {
  Shape rw = bt.row();
  auto tensor = [&](at::ScalarType st, const Shape& shape) { return empty_tiny(shape, st, bt.device); };
  at::ScalarType ft = to_scalar_type(bt.dt);
  at::Tensor h_t = tensor(ft, bt.grid()), z_t = tensor(ft, bt.grid()), wr_t = tensor(ft, rw), wi_t = tensor(ft, rw);
  write(h_t, H);
  write(z_t, Z);
  // eigenvalues isolated by balancing are the diagonal outside [ilo, ihi]
  UOpPtr diag = reshape(sum_keep(masked(eq(coordinate(bt.grid(), 1), coordinate(bt.grid(), 2)), H), {1}), rw);
  write(wr_t, diag);
  write(wi_t, fixed(bt.dt, 0, rw));
  // every round finishes a deflation or takes a Francis step
  QrLoop loop(ilo, ihi, bt);
  for (int64_t round = 0; round < loop.limit; round += loop.group) {
    QrState st{read(h_t),    read(z_t),  read(loop.i), read(loop.l),
               read(loop.k), read(wr_t), read(wi_t),   read(loop.failed)};
    for (int64_t g = 0; g < loop.group; g++)
      st = qr_round(st, ilo, ihi, bt, vectors, loop.itmax);
    write(h_t, st.H);
    if (vectors) write(z_t, st.Z);
    write(wr_t, st.wr);
    write(wi_t, st.wi);
    if (!loop.store(st.I, st.L, st.kdefl, st.failed, ilo, bt)) break;
  }
  return {read(h_t), read(z_t), read(wr_t), read(wi_t), loop.failed};
}

// ---- eigenvectors of the quasi-triangular T (trevc), back-transformed ----

// Solves the complex 2x2 system A x = rhs by Gaussian elimination with complete pivoting, a pivot below smin
// replaced by smin (dlaln2's perturbation of a singular system).
struct Solved2x2 {
  Cx x1, x2;
  UOpPtr pivot; // the smaller pivot's modulus (|re| + |im|)
};
Solved2x2 solve2x2(const Cx& a11, const Cx& a12, const Cx& a21, const Cx& a22, const Cx& b1, const Cx& b2,
                   const UOpPtr& smin) {
  auto cabs1 = [](const Cx& z) { return add(absolute(z.re), absolute(z.im)); };
  auto sel = [](const UOpPtr& m, const Cx& a, const Cx& b) { return Cx{where(m, a.re, b.re), where(m, a.im, b.im)}; };
  UOpPtr m11 = cabs1(a11), m12 = cabs1(a12), m21 = cabs1(a21), m22 = cabs1(a22);
  UOpPtr top = maximum(maximum(m11, m12), maximum(m21, m22));
  // the pivot's row (second: r2) and column (second: c2)
  UOpPtr p11 = eq(m11, top), p21 = both(lnot(p11), eq(m21, top)), p12 = both(lnot(either(p11, p21)), eq(m12, top));
  UOpPtr r2 = lnot(either(p11, p12)), c2 = lnot(either(p11, p21));
  // rows and columns swapped so that the pivot is at (1, 1)
  Cx e11 = sel(r2, sel(c2, a22, a21), sel(c2, a12, a11));
  Cx e12 = sel(r2, sel(c2, a21, a22), sel(c2, a11, a12));
  Cx e21 = sel(r2, sel(c2, a12, a11), sel(c2, a22, a21));
  Cx e22 = sel(r2, sel(c2, a11, a12), sel(c2, a21, a22));
  Cx f1 = sel(r2, b2, b1), f2 = sel(r2, b1, b2);
  UOpPtr tiny11 = lt(cabs1(e11), smin);
  e11 = sel(tiny11, Cx{smin, zeros(smin)}, e11);
  Cx l21 = cm::div(e21, e11);
  Cx u22 = cm::sub(e22, cm::mul(l21, e12));
  u22 = sel(lt(cabs1(u22), smin), Cx{smin, zeros(smin)}, u22);
  Cx y2 = cm::sub(f2, cm::mul(l21, f1));
  Cx xs2 = cm::div(y2, u22);
  Cx xs1 = cm::div(cm::sub(f1, cm::mul(e12, xs2)), e11);
  return {sel(c2, xs2, xs1), sel(c2, xs1, xs2), minimum(cabs1(e11), cabs1(u22))};
}

// The eigenvectors (columns, complex) of the matrices whose Schur form is T and Schur vectors Z, eigenvalue k
// being wr[k] + i wi[k].
// A complex T (Ti and Zi given: the complex Schur form, upper triangular) has no 2x2 blocks.
Cx eigenvectors(const UOpPtr& T, const UOpPtr& Z, const UOpPtr& wr, const UOpPtr& wi, const Batch& bt,
                const UOpPtr& Ti = nullptr, const UOpPtr& Zi = nullptr) {
  bool complex = Ti != nullptr;
  Machine mc(bt.dt);
  int64_t n = bt.n;
  Shape s = bt.grid(), rw = bt.row();
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2);
  UOpPtr zero = fixed(bt.dt, 0, s), one = fixed(bt.dt, 1, s);
  // per column: its eigenvalue and its block's first row p (q = p + 1 for a pair)
  UOpPtr lr = broadcast(wr, s), li = broadcast(wi, s);
  UOpPtr pair = ne(li, zero), second = lt(li, zero);
  UOpPtr P = complex ? C : where(second, iadd(C, -1), C), Q = iadd(P, 1);
  UOpPtr tpq = at(T, P, Q), tqp = at(T, Q, P);
  UOpPtr big = le(absolute(tqp), absolute(tpq));
  UOpPtr aw = absolute(li), sgn = where(second, like(li, -1), one);
  UOpPtr safe_tpq = where(eq(tpq, zero), one, tpq), safe_tqp = where(eq(tqp, zero), one, tqp);
  UOpPtr xp = where(big, one, div(negate(aw), safe_tqp));
  UOpPtr xq = where(big, div(li, safe_tpq), sgn);
  // real: 1 at the column, -T above; a pair: (xp, i xq) at (p, q), -T x above
  UOpPtr re_real = where(eq(R, C), one, where(lt(R, C), negate(at(T, R, C)), zero));
  UOpPtr re_pair = where(eq(R, P), xp, where(lt(R, P), negate(mul(xp, at(T, R, P))), zero));
  UOpPtr im_pair = where(eq(R, Q), xq, where(lt(R, P), negate(mul(xq, at(T, R, Q))), zero));
  Cx x{contiguous(where(pair, re_pair, re_real)), contiguous(masked(pair, im_pair))};
  if (complex) x = {contiguous(re_real), contiguous(where(lt(R, C), negate(at(Ti, R, C)), zero))};
  UOpPtr smin = maximum(mul(like(lr, mc.ulp), add(absolute(lr), absolute(li))),
                        like(lr, mc.safmin * (static_cast<double>(n) / mc.ulp)));
  auto cabs1 = [](const Cx& z) { return add(absolute(z.re), absolute(z.im)); };
  UOpPtr tmax = broadcast(reduce(complex ? maximum(absolute(T), absolute(Ti)) : absolute(T), Ops::MAX, {1, 2}), s);
  double largest = bt.dt == DType::Float64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
  UOpPtr cap = div(like(tmax, std::sqrt(largest) / static_cast<double>(n)), maximum(tmax, like(tmax, 1)));
  // back substitution, row j = n-1 down to 0 for every column at once
  for (int64_t jj = n - 1; jj >= 0; jj--) {
    UOpPtr J = step(jj, s);
    UOpPtr act = lt(J, P);
    UOpPtr skip = complex ? broadcast(const_int(DType::Bool, 0), s) : ne(at(T, iadd(J, 1), J), zero);
    UOpPtr two = complex ? broadcast(const_int(DType::Bool, 0), s) : ne(at(T, J, iadd(J, -1)), zero);
    auto tc = [&](const UOpPtr& r, const UOpPtr& c) { return Cx{at(T, r, c), complex ? at(Ti, r, c) : zero}; };
    act = both(act, lnot(skip));
    UOpPtr J1 = where(two, iadd(J, -1), J);
    // the block's rows of this column
    Cx b1{at(x.re, J1, C), at(x.im, J1, C)}, b2{at(x.re, J, C), at(x.im, J, C)};
    Cx lam{lr, li};
    Cx d1 = cm::sub(tc(J1, J1), lam), d2 = cm::sub(tc(J, J), lam);
    // one row: x = b / (T_jj - lambda), the divisor at least smin
    UOpPtr tiny_d = lt(add(absolute(d2.re), absolute(d2.im)), smin);
    Cx dd{where(tiny_d, smin, d2.re), where(tiny_d, zero, d2.im)};
    Solved2x2 blk = solve2x2(d1, Cx{at(T, J1, J), zero}, Cx{at(T, J, J1), zero}, d2, b1, b2, smin);
    // against overflow (a nearly singular system): the column scaled by a power of two first, so that the
    // solution stays below `cap` (LAPACK's trevc scales the same way; the normalization undoes it)
    UOpPtr bmag = maximum(cabs1(b2), masked(two, cabs1(b1)));
    UOpPtr dmag = where(two, blk.pivot, add(absolute(dd.re), absolute(dd.im)));
    UOpPtr over = lt(mul(cap, dmag), bmag);
    UOpPtr e = cast(alu(Ops::CEIL, alu(Ops::LOG2, div(bmag, mul(cap, where(over, dmag, one))))), kIndex);
    UOpPtr f = where(over, power_of_two(negate(alu(Ops::MAX, e, index(1, e->shape))), bt.dt), one);
    Cx xs = cm::scale(x, f);
    Cx single = cm::div(cm::scale(b2, f), dd);
    // (the pivots do not depend on the right-hand side: the solve with the scaled one shares them)
    Solved2x2 sol =
        solve2x2(d1, Cx{at(T, J1, J), zero}, Cx{at(T, J, J1), zero}, d2, cm::scale(b1, f), cm::scale(b2, f), smin);
    Cx xj1{where(two, sol.x1.re, zero), where(two, sol.x1.im, zero)};
    Cx xj2{where(two, sol.x2.re, single.re), where(two, sol.x2.im, single.im)};
    // the rows above: rhs - T[:, J1] x1 - T[:, J] x2
    Cx upd = complex ? cm::sub(xs, cm::mul(xj2, tc(R, J)))
                     : cm::sub(cm::sub(xs, cm::scale(xj1, masked(two, at(T, R, J1)))), cm::scale(xj2, at(T, R, J)));
    auto choose = [&](const UOpPtr& cur, const UOpPtr& scaled, const UOpPtr& v1, const UOpPtr& v2, const UOpPtr& up) {
      UOpPtr nv = where(eq(R, J), v2, where(both(two, eq(R, J1)), v1, where(lt(R, J1), up, scaled)));
      return contiguous(where(act, nv, cur));
    };
    x = Cx{choose(x.re, xs.re, xj1.re, xj2.re, upd.re), choose(x.im, xs.im, xj1.im, xj2.im, upd.im)};
  }
  // back-transform: Z x
  auto product = [&](const UOpPtr& a, const UOpPtr& b) {
    Shape big{bt.b, n, n, n};
    UOpPtr pa = expand(reshape(a, {bt.b, n, n, 1}), big), pb = expand(reshape(b, {bt.b, 1, n, n}), big);
    return reshape(reduce(mul(pa, pb), Ops::ADD, {2}), s);
  };
  if (complex)
    return {contiguous(sub(product(Z, x.re), product(Zi, x.im))), contiguous(add(product(Z, x.im), product(Zi, x.re)))};
  return {contiguous(product(Z, x.re)), contiguous(product(Z, x.im))};
}

// geev's normalization of each column v (b, n, n): unit 2-norm; for a complex eigenvalue's vector, the
// component of largest modulus (the first of them) rotated onto the real axis by dlartg's rotation.
Cx normalized(const Cx& v, const UOpPtr& wi, const Batch& bt) {
  Shape s = bt.grid(), rw = bt.row();
  UOpPtr R = coordinate(s, 1);
  // first by a power of two near the largest element (exact), so that the squares neither overflow nor vanish
  UOpPtr big = reduce(maximum(absolute(v.re), absolute(v.im)), Ops::MAX, {1});
  UOpPtr e = cast(alu(Ops::FLOOR, alu(Ops::LOG2, where(eq(big, zeros(big)), like(big, 1), big))), kIndex);
  Cx w = realized_cx(cm::scale(v, broadcast(power_of_two(negate(e), bt.dt), s)));
  UOpPtr nre = root(sum_keep(mul(w.re, w.re), {1})), nim = root(sum_keep(mul(w.im, w.im), {1}));
  UOpPtr norm = pythag(nre, nim);
  UOpPtr scl = div(like(norm, 1), norm);
  Cx u = realized_cx(cm::scale(w, broadcast(scl, s)));
  UOpPtr mod = add(mul(u.re, u.re), mul(u.im, u.im));
  UOpPtr top = broadcast(reduce(mod, Ops::MAX, {1}), s);
  UOpPtr k = broadcast(reduce(where(eq(mod, top), R, index(bt.n, s)), Ops::MIN, {1}), s);
  UOpPtr f = broadcast(sum_keep(masked(eq(R, k), u.re), {1}), s),
         g = broadcast(sum_keep(masked(eq(R, k), u.im), {1}), s);
  // dlartg(f, g): cs = f / d, sn = g / d, all three negated when |f| > |g| and f < 0; (0, 1) when f == 0
  UOpPtr d = pythag(f, g);
  UOpPtr g0 = eq(g, zeros(g)), f0 = both(lnot(g0), eq(f, zeros(f)));
  UOpPtr safe_d = where(eq(d, zeros(d)), like(d, 1), d);
  UOpPtr flip = both(lt(absolute(g), absolute(f)), lt(f, zeros(f)));
  UOpPtr cs0 = div(f, safe_d), sn0 = div(g, safe_d);
  UOpPtr cs = where(g0, like(f, 1), where(f0, zeros(f), where(flip, negate(cs0), cs0)));
  UOpPtr sn = where(g0, zeros(f), where(f0, like(g, 1), where(flip, negate(sn0), sn0)));
  UOpPtr pair = ne(broadcast(wi, s), zeros(u.re));
  UOpPtr re = add(mul(cs, u.re), mul(sn, u.im)), im = sub(mul(cs, u.im), mul(sn, u.re));
  im = where(eq(R, k), zeros(im), im);
  return {where(pair, re, u.re), where(pair, im, u.im)};
}

// ---- complex matrices: zgehd2, zlahqr (single shifts) ----

Cx atc(const Cx& x, const UOpPtr& r, const UOpPtr& c) { return {at(x.re, r, c), at(x.im, r, c)}; }
Cx csel(const UOpPtr& m, const Cx& a, const Cx& b) { return {where(m, a.re, b.re), where(m, a.im, b.im)}; }
Cx cmasked(const UOpPtr& m, const Cx& a) { return {masked(m, a.re), masked(m, a.im)}; }
Cx cbroadcast(const Cx& z, const Shape& shape) { return {broadcast(z.re, shape), broadcast(z.im, shape)}; }
Cx csum_keep(const Cx& z, const std::vector<int64_t>& axes) { return {sum_keep(z.re, axes), sum_keep(z.im, axes)}; }
UOpPtr cabs1(const Cx& z) { return add(absolute(z.re), absolute(z.im)); }
Cx creal(const UOpPtr& re) { return {re, zeros(re)}; }

// zlarfg on (alpha, x) with x of norm xnorm: H^H (alpha, x) = (beta, 0) with beta real, H = I - tau v v^H,
// v = (1, x scal).
struct ComplexReflector {
  UOpPtr beta;
  Cx tau, scal;
};
ComplexReflector complex_reflector(const Cx& alpha, const UOpPtr& xnorm) {
  UOpPtr none = both(eq(xnorm, zeros(xnorm)), eq(alpha.im, zeros(xnorm)));
  UOpPtr norm = pythag(pythag(alpha.re, alpha.im), xnorm);
  UOpPtr beta = negate(with_sign(norm, alpha.re));
  UOpPtr safe = where(none, like(beta, 1), beta);
  Cx tau = cmasked(lnot(none), Cx{div(sub(safe, alpha.re), safe), div(negate(alpha.im), safe)});
  Cx denom = csel(none, creal(like(beta, 1)), Cx{sub(alpha.re, safe), alpha.im});
  Cx scal = csel(none, creal(like(beta, 1)), cm::div(creal(like(beta, 1)), denom));
  return {where(none, alpha.re, beta), tau, scal};
}

std::pair<Cx, Cx> complex_hessenberg(Cx H, Cx Z, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt, bool vectors) {
  Shape s = bt.grid(), p = bt.per(), cs{bt.b, bt.n, 1};
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2), RC = coordinate(cs, 1);
  for (int64_t j = 0; j + 2 < bt.n; j++) {
    UOpPtr J = step(j, p), Js = broadcast(J, s), Jc = broadcast(J, cs);
    UOpPtr act = both(le(ilo, J), lt(J, iadd(ihi, -1)));
    UOpPtr below_c = both(lt(iadd(Jc, 1), RC), le(RC, broadcast(ihi, cs)));
    Cx col{reshape(sum_keep(masked(eq(C, Js), H.re), {2}), cs), reshape(sum_keep(masked(eq(C, Js), H.im), {2}), cs)};
    Cx alpha = atc(H, iadd(J, 1), J);
    UOpPtr xnorm = root(sum_keep(masked(below_c, add(mul(col.re, col.re), mul(col.im, col.im))), {1, 2}));
    ComplexReflector f = complex_reflector(alpha, xnorm);
    Cx tau = cmasked(act, f.tau);
    Cx v = csel(eq(RC, iadd(Jc, 1)), creal(like(col.re, 1)), cmasked(below_c, cm::mul(col, cbroadcast(f.scal, cs))));
    v = realized_cx(v);
    Cx vr = cbroadcast(v, s), vc{broadcast(permute(v.re, {0, 2, 1}), s), broadcast(permute(v.im, {0, 2, 1}), s)};
    Cx tb = cbroadcast(tau, s);
    // from the right: H - tau (H v) v^H; from the left: H - conj(tau) v (v^H H), on the columns after j
    Cx hv = cbroadcast(csum_keep(cm::mul(H, vc), {2}), s);
    Cx H1 = realized_cx(cm::sub(H, cm::mul(tb, cm::mul(hv, cm::conj(vc)))));
    Cx vh = cbroadcast(csum_keep(cm::mul(cm::conj(vr), H1), {1}), s);
    Cx left = csel(lt(Js, C), cm::sub(H1, cm::mul(cm::conj(tb), cm::mul(vr, vh))), H1);
    UOpPtr here = both(both(eq(C, Js), broadcast(act, s)), lt(Js, R));
    Cx column = csel(eq(R, iadd(Js, 1)), creal(broadcast(f.beta, s)), creal(zeros(H.re)));
    H = realized_cx(csel(here, column, left));
    if (vectors) {
      Cx zv = cbroadcast(csum_keep(cm::mul(Z, vc), {2}), s);
      Z = realized_cx(cm::sub(Z, cm::mul(tb, cm::mul(zv, cm::conj(vc)))));
    }
  }
  return {H, Z};
}

// zlahqr's first step: each subdiagonal entry made real by scaling its row and column by a unit factor.
std::pair<Cx, Cx> real_subdiagonal(Cx H, Cx Z, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt, bool vectors) {
  Shape s = bt.grid(), p = bt.per();
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2);
  for (int64_t i = 1; i < bt.n; i++) {
    UOpPtr Ip = step(i, p), Is = broadcast(Ip, s);
    Cx h = atc(H, Ip, iadd(Ip, -1));
    UOpPtr act = both(both(lt(ilo, Ip), le(Ip, ihi)), ne(h.im, zeros(h.im)));
    UOpPtr c1 = cabs1(h), safe1 = where(eq(c1, zeros(c1)), like(c1, 1), c1);
    Cx sc = cm::conj(Cx{div(h.re, safe1), div(h.im, safe1)});
    UOpPtr m = pythag(sc.re, sc.im);
    sc = {div(sc.re, m), div(sc.im, m)};
    UOpPtr habs = pythag(h.re, h.im);
    Cx S = cbroadcast(sc, s);
    UOpPtr acts = broadcast(act, s);
    Cx scaled = csel(both(eq(R, Is), le(Is, C)), cm::mul(H, S), H);
    scaled =
        csel(both(eq(C, Is), le(R, minimum(iadd(Is, 1), index(bt.n - 1, s)))), cm::mul(scaled, cm::conj(S)), scaled);
    scaled = csel(both(eq(R, Is), eq(C, iadd(Is, -1))), creal(broadcast(habs, s)), scaled);
    H = realized_cx(csel(acts, scaled, H));
    if (vectors) Z = realized_cx(csel(both(acts, eq(C, Is)), cm::mul(Z, cm::conj(S)), Z));
  }
  return {H, Z};
}

struct ComplexQrState {
  Cx H, Z;
  UOpPtr I, L, kdefl;
  Cx w;
  UOpPtr failed;
};

ComplexQrState complex_qr_round(ComplexQrState st, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt, bool vectors,
                                int64_t itmax) {
  Machine mc(bt.dt);
  int64_t n = bt.n;
  Shape s = bt.grid(), p = bt.per(), rw = bt.row();
  Cx H = st.H, Z = st.Z;
  UOpPtr I = st.I, L = st.L;
  UOpPtr ulp = fixed(bt.dt, mc.ulp, p);
  UOpPtr smlnum = fixed(bt.dt, mc.safmin * (static_cast<double>(n) / mc.ulp), p);
  UOpPtr active = both(le(ilo, I), lnot(st.failed));
  {
    UOpPtr k = coordinate(rw, 2), km1 = iadd(k, -1);
    Cx h = atc(H, k, km1);
    UOpPtr tst = add(cabs1(atc(H, km1, km1)), cabs1(atc(H, k, k)));
    UOpPtr extra = add(masked(le(broadcast(ilo, rw), iadd(k, -2)), absolute(at(H.re, km1, iadd(k, -2)))),
                       masked(le(iadd(k, 1), broadcast(ihi, rw)), absolute(at(H.re, iadd(k, 1), k))));
    tst = where(eq(tst, zeros(tst)), add(tst, extra), tst);
    UOpPtr hk = cabs1(h), hk1 = cabs1(atc(H, km1, k));
    UOpPtr ab = maximum(hk, hk1), ba = minimum(hk, hk1);
    UOpPtr hkk = cabs1(atc(H, k, k)), hdiff = cabs1(cm::sub(atc(H, km1, km1), atc(H, k, k)));
    UOpPtr aa = maximum(hkk, hdiff), bb = minimum(hkk, hdiff);
    UOpPtr ss = add(aa, ab), safe_ss = where(eq(ss, zeros(ss)), like(ss, 1), ss);
    UOpPtr u = broadcast(ulp, rw), sm = broadcast(smlnum, rw);
    UOpPtr fine = le(mul(ba, div(ab, safe_ss)), maximum(sm, mul(u, mul(bb, div(aa, safe_ss)))));
    UOpPtr small = either(le(hk, sm), both(le(absolute(h.re), mul(u, tst)), fine));
    UOpPtr valid = both(lt(broadcast(L, rw), k), le(k, broadcast(I, rw)));
    L = contiguous(where(active, reduce(where(both(valid, small), k, broadcast(L, rw)), Ops::MAX, {2}), L));
  }
  UOpPtr R = coordinate(s, 1), C = coordinate(s, 2);
  UOpPtr Ls = broadcast(L, s), Is = broadcast(I, s);
  UOpPtr cut = both(broadcast(both(active, lt(ilo, L)), s), both(eq(R, Ls), eq(C, iadd(Ls, -1))));
  H = realized_cx(csel(cut, creal(zeros(H.re)), H));
  UOpPtr deflate = both(active, le(I, L));
  UOpPtr francis = both(active, lnot(deflate));
  UOpPtr kdefl = where(francis, iadd(st.kdefl, 1), where(deflate, index(0, p), st.kdefl));
  UOpPtr failed = either(st.failed, both(francis, lt(index(itmax, p), kdefl)));
  francis = both(francis, lnot(failed));
  UOpPtr k = coordinate(rw, 2);
  Cx w = realized_cx(csel(both(broadcast(deflate, rw), eq(k, broadcast(I, rw))), cbroadcast(atc(H, I, I), rw), st.w));
  // the shift
  UOpPtr Im1 = iadd(I, -1);
  Cx t;
  {
    UOpPtr ex_bottom = eq(alu(Ops::MOD, kdefl, index(20, p)), index(0, p));
    UOpPtr ex_top = both(lnot(ex_bottom), eq(alu(Ops::MOD, kdefl, index(10, p)), index(0, p)));
    UOpPtr sb = mul(like(ulp, 0.75), absolute(at(H.re, I, Im1)));
    UOpPtr stp = mul(like(ulp, 0.75), absolute(at(H.re, iadd(L, 1), L)));
    Cx tb = cm::add(creal(sb), atc(H, I, I)), tt = cm::add(creal(stp), atc(H, L, L));
    // Wilkinson's
    Cx hii = atc(H, I, I);
    Cx u = cm::mul(cm::sqrt(atc(H, Im1, I)), cm::sqrt(atc(H, I, Im1)));
    UOpPtr su = cabs1(u);
    Cx x = cm::scale(cm::sub(atc(H, Im1, Im1), hii), like(su, 0.5));
    UOpPtr sx = cabs1(x);
    UOpPtr sm = maximum(su, sx), safe_sm = where(eq(sm, zeros(sm)), like(sm, 1), sm);
    Cx xs{div(x.re, safe_sm), div(x.im, safe_sm)}, us{div(u.re, safe_sm), div(u.im, safe_sm)};
    Cx y = cm::scale(cm::sqrt(cm::add(cm::mul(xs, xs), cm::mul(us, us))), safe_sm);
    UOpPtr safe_sx = where(eq(sx, zeros(sx)), like(sx, 1), sx);
    UOpPtr flip =
        both(lt(zeros(sx), sx), lt(add(mul(div(x.re, safe_sx), y.re), mul(div(x.im, safe_sx), y.im)), zeros(sx)));
    y = csel(flip, cm::neg(y), y);
    Cx wil = csel(eq(su, zeros(su)), hii, cm::sub(hii, cm::mul(u, cm::div(u, cm::add(x, y)))));
    t = csel(ex_bottom, tb, csel(ex_top, tt, wil));
  }
  // where the step starts: the largest m in [L+1, I-1] with two small consecutive subdiagonals, else L
  UOpPtr M;
  Cx v1;
  UOpPtr v2;
  {
    UOpPtr m = coordinate(rw, 2);
    Cx h11 = atc(H, m, m), h22 = atc(H, iadd(m, 1), iadd(m, 1));
    Cx h11s = cm::sub(h11, cbroadcast(t, rw));
    UOpPtr h21 = at(H.re, iadd(m, 1), m);
    UOpPtr sv = add(cabs1(h11s), absolute(h21)), safe_sv = where(eq(sv, zeros(sv)), like(sv, 1), sv);
    h11s = {div(h11s.re, safe_sv), div(h11s.im, safe_sv)};
    h21 = div(h21, safe_sv);
    UOpPtr h10 = at(H.re, m, iadd(m, -1));
    UOpPtr stop =
        le(mul(absolute(h10), absolute(h21)), mul(broadcast(ulp, rw), mul(cabs1(h11s), add(cabs1(h11), cabs1(h22)))));
    UOpPtr valid = both(lt(broadcast(L, rw), m), le(m, broadcast(Im1, rw)));
    M = contiguous(reduce(where(both(valid, stop), m, broadcast(L, rw)), Ops::MAX, {2}));
    UOpPtr atm = eq(m, broadcast(M, rw));
    v1 = realized_cx(csum_keep(cmasked(atm, h11s), {2}));
    v2 = contiguous(sum_keep(masked(atm, h21), {2}));
  }
  for (int64_t j = 0; j + 1 < n; j++) {
    UOpPtr K = add(M, step(j, p));
    UOpPtr act = both(francis, le(K, Im1));
    UOpPtr first = eq(K, M), Km1 = iadd(K, -1);
    Cx x1 = csel(first, v1, atc(H, K, Km1));
    Cx x2 = csel(first, creal(v2), atc(H, iadd(K, 1), Km1));
    ComplexReflector f = complex_reflector(x1, pythag(x2.re, x2.im));
    Cx t1 = realized_cx(cmasked(act, f.tau));
    Cx w2 = realized_cx(cm::mul(x2, f.scal));
    UOpPtr t2 = contiguous(cm::mul(t1, w2).re);
    UOpPtr Ks = broadcast(K, s), acts = broadcast(act, s), firsts = broadcast(first, s);
    // column K-1 below the bulge
    UOpPtr col = both(both(acts, lnot(firsts)), eq(C, iadd(Ks, -1)));
    Cx hb = csel(both(col, eq(R, Ks)), creal(broadcast(f.beta, s)), H);
    hb = realized_cx(csel(both(col, eq(R, iadd(Ks, 1))), creal(zeros(H.re)), hb));
    Cx T1 = cbroadcast(t1, s), W2 = cbroadcast(w2, s);
    UOpPtr T2 = broadcast(t2, s);
    // rows K, K+1 (columns from K): sum = conj(t1) h_K + t2 h_K+1; h_K -= sum, h_K+1 -= sum v2
    Cx sum_r = cm::add(cm::mul(cm::conj(T1), atc(hb, Ks, C)), cm::scale(atc(hb, iadd(Ks, 1), C), T2));
    UOpPtr rows = both(acts, le(Ks, C));
    Cx h1 = csel(both(rows, eq(R, Ks)), cm::sub(hb, sum_r),
                 csel(both(rows, eq(R, iadd(Ks, 1))), cm::sub(hb, cm::mul(sum_r, W2)), hb));
    h1 = realized_cx(h1);
    // columns K, K+1 (rows to min(K+2, I)): sum = t1 h_K + t2 h_K+1; h_K -= sum, h_K+1 -= sum conj(v2)
    auto right = [&](const Cx& x, const UOpPtr& rows_ok) {
      Cx sum_c = cm::add(cm::mul(T1, atc(x, R, Ks)), cm::scale(atc(x, R, iadd(Ks, 1)), T2));
      UOpPtr cols = both(acts, rows_ok);
      return realized_cx(csel(both(cols, eq(C, Ks)), cm::sub(x, sum_c),
                              csel(both(cols, eq(C, iadd(Ks, 1))), cm::sub(x, cm::mul(sum_c, cm::conj(W2))), x)));
    };
    H = right(h1, le(R, minimum(iadd(Ks, 2), Is)));
    if (vectors) Z = right(Z, broadcast(const_int(DType::Bool, 1), s));
    // a step started below L: the unit factor that keeps the subdiagonal real
    UOpPtr extra = both(act, both(first, lt(L, M)));
    Cx one_minus = cm::sub(creal(like(t1.re, 1)), t1);
    UOpPtr om = pythag(one_minus.re, one_minus.im), safe_om = where(eq(om, zeros(om)), like(om, 1), om);
    Cx temp = cbroadcast(Cx{div(one_minus.re, safe_om), div(one_minus.im, safe_om)}, s);
    UOpPtr extras = broadcast(extra, s), Ms = broadcast(M, s);
    auto in_set = [&](const UOpPtr& x) { return both(both(le(Ms, x), le(x, Is)), ne(x, iadd(Ms, 1))); };
    Cx scaled = csel(both(in_set(R), lt(R, C)), cm::mul(H, temp), H);
    scaled = csel(both(in_set(C), lt(R, C)), cm::mul(scaled, cm::conj(temp)), scaled);
    scaled = csel(both(eq(R, iadd(Ms, 1)), eq(C, Ms)), cm::mul(scaled, cm::conj(temp)), scaled);
    scaled =
        csel(both(both(eq(R, iadd(Ms, 2)), eq(C, iadd(Ms, 1))), le(iadd(Ms, 2), Is)), cm::mul(scaled, temp), scaled);
    H = realized_cx(csel(extras, scaled, H));
    if (vectors) Z = realized_cx(csel(both(extras, in_set(C)), cm::mul(Z, cm::conj(temp)), Z));
  }
  // H(I, I-1) made real
  {
    Cx h = atc(H, I, Im1);
    UOpPtr fix = both(francis, ne(h.im, zeros(h.im)));
    UOpPtr habs = pythag(h.re, h.im), safe = where(eq(habs, zeros(habs)), like(habs, 1), habs);
    Cx temp = cbroadcast(Cx{div(h.re, safe), div(h.im, safe)}, s);
    UOpPtr fixs = broadcast(fix, s);
    Cx scaled = csel(both(eq(R, Is), lt(Is, C)), cm::mul(H, cm::conj(temp)), H);
    scaled = csel(both(eq(C, Is), lt(R, Is)), cm::mul(scaled, temp), scaled);
    scaled = csel(both(eq(R, Is), eq(C, iadd(Is, -1))), creal(broadcast(habs, s)), scaled);
    H = realized_cx(csel(fixs, scaled, H));
    if (vectors) Z = realized_cx(csel(both(fixs, eq(C, Is)), cm::mul(Z, temp), Z));
  }
  UOpPtr nI = contiguous(where(deflate, iadd(L, -1), I));
  UOpPtr nL = contiguous(where(deflate, ilo, L));
  return {H, Z, nI, nL, contiguous(kdefl), w, contiguous(failed)};
}

struct ComplexSchur {
  Cx H, Z, w;
  at::Tensor failed;
};

ComplexSchur complex_schur(Cx H, Cx Z, const UOpPtr& ilo, const UOpPtr& ihi, const Batch& bt, bool vectors) {
  Shape rw = bt.row();
  std::tie(H, Z) = real_subdiagonal(H, Z, ilo, ihi, bt, vectors);
  auto tensor = [&](at::ScalarType st, const Shape& shape) { return empty_tiny(shape, st, bt.device); };
  at::ScalarType ft = to_scalar_type(bt.dt);
  std::vector<at::Tensor> ts;
  for (int i = 0; i < 4; i++)
    ts.push_back(tensor(ft, bt.grid()));
  at::Tensor wr_t = tensor(ft, rw), wi_t = tensor(ft, rw);
  write(ts[0], H.re);
  write(ts[1], H.im);
  write(ts[2], Z.re);
  write(ts[3], Z.im);
  UOpPtr diag = eq(coordinate(bt.grid(), 1), coordinate(bt.grid(), 2));
  write(wr_t, reshape(sum_keep(masked(diag, H.re), {1}), rw));
  write(wi_t, reshape(sum_keep(masked(diag, H.im), {1}), rw));
  QrLoop loop(ilo, ihi, bt);
  for (int64_t round = 0; round < loop.limit; round += loop.group) {
    ComplexQrState st{{read(ts[0]), read(ts[1])}, {read(ts[2]), read(ts[3])}, read(loop.i), read(loop.l), read(loop.k),
                      {read(wr_t), read(wi_t)},   read(loop.failed)};
    for (int64_t g = 0; g < loop.group; g++)
      st = complex_qr_round(st, ilo, ihi, bt, vectors, loop.itmax);
    write(ts[0], st.H.re);
    write(ts[1], st.H.im);
    if (vectors) {
      write(ts[2], st.Z.re);
      write(ts[3], st.Z.im);
    }
    write(wr_t, st.w.re);
    write(wi_t, st.w.im);
    if (!loop.store(st.I, st.L, st.kdefl, st.failed, ilo, bt)) break;
  }
  return {{read(ts[0]), read(ts[1])}, {read(ts[2]), read(ts[3])}, {read(wr_t), read(wi_t)}, loop.failed};
}

// zgeev's normalization: unit 2-norm, then the component of largest modulus (the first of them) made real and
// positive.
Cx complex_normalized(const Cx& v, const Batch& bt) {
  Shape s = bt.grid();
  UOpPtr R = coordinate(s, 1);
  UOpPtr big = reduce(maximum(absolute(v.re), absolute(v.im)), Ops::MAX, {1});
  UOpPtr e = cast(alu(Ops::FLOOR, alu(Ops::LOG2, where(eq(big, zeros(big)), like(big, 1), big))), kIndex);
  Cx w = realized_cx(cm::scale(v, broadcast(power_of_two(negate(e), bt.dt), s)));
  UOpPtr norm = root(sum_keep(add(mul(w.re, w.re), mul(w.im, w.im)), {1}));
  Cx u = realized_cx(cm::scale(w, broadcast(div(like(norm, 1), norm), s)));
  UOpPtr mod = add(mul(u.re, u.re), mul(u.im, u.im));
  UOpPtr top = broadcast(reduce(mod, Ops::MAX, {1}), s);
  UOpPtr k = broadcast(reduce(where(eq(mod, top), R, index(bt.n, s)), Ops::MIN, {1}), s);
  Cx uk = cbroadcast(csum_keep(cmasked(eq(R, k), u), {1}), s);
  UOpPtr r = root(broadcast(sum_keep(masked(eq(R, k), mod), {1}), s));
  UOpPtr safe = where(eq(r, zeros(r)), like(r, 1), r);
  Cx tmp = cm::conj(Cx{div(uk.re, safe), div(uk.im, safe)});
  Cx out = cm::mul(u, tmp);
  return {out.re, where(eq(R, k), zeros(out.im), out.im)};
}

// ---- balancing (gebal) ----

// The permutation of gebal's first phase for each matrix, from its pattern of nonzeros (b, n, n; read to the
// host): rows with no nonzero off the diagonal (within the leading l x l) go to the bottom, then columns with
// none (within the trailing rows and columns from k) to the top. Returns, per matrix, perm (the balanced matrix
// is A[perm][:, perm]) and ilo, ihi.
struct Permutation {
  std::vector<int64_t> perm, ilo, ihi;
};
Permutation isolate(const at::Tensor& nonzero, int64_t b, int64_t n) {
  at::Tensor nz = nonzero.reshape({b, n, n}).contiguous();
  const bool* data = nz.data_ptr<bool>();
  Permutation out{std::vector<int64_t>(b * n), std::vector<int64_t>(b), std::vector<int64_t>(b)};
  for (int64_t m = 0; m < b; m++) {
    std::vector<char> a(data + m * n * n, data + (m + 1) * n * n);
    std::vector<int64_t> perm(n);
    for (int64_t i = 0; i < n; i++)
      perm[i] = i;
    auto swap = [&](int64_t i, int64_t j) {
      if (i == j) return;
      for (int64_t r = 0; r < n; r++)
        std::swap(a[r * n + i], a[r * n + j]);
      for (int64_t c = 0; c < n; c++)
        std::swap(a[i * n + c], a[j * n + c]);
      std::swap(perm[i], perm[j]);
    };
    int64_t k = 0, l = n - 1;
    bool searching = n > 0;
    // rows isolating an eigenvalue, pushed down
    while (searching) {
      int64_t found = -1;
      for (int64_t j = l; j >= 0 && found < 0; j--) {
        bool isolated = true;
        for (int64_t i = 0; i <= l && isolated; i++)
          isolated = i == j || !a[j * n + i];
        if (isolated) found = j;
      }
      if (found < 0) break;
      swap(found, l);
      if (l == 0) {
        searching = false;
        break;
      }
      l--;
    }
    // columns isolating an eigenvalue, pushed left
    while (searching) {
      int64_t found = -1;
      for (int64_t j = k; j <= l && found < 0; j++) {
        bool isolated = true;
        for (int64_t i = k; i <= l && isolated; i++)
          isolated = i == j || !a[i * n + j];
        if (isolated) found = j;
      }
      if (found < 0) break;
      swap(found, k);
      k++;
    }
    std::copy(perm.begin(), perm.end(), out.perm.begin() + m * n);
    out.ilo[m] = k;
    out.ihi[m] = std::max<int64_t>(l, 0);
  }
  return out;
}

at::Tensor host_indices(const std::vector<int64_t>& v, at::IntArrayRef shape, c10::Device device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).reshape(shape).to(device);
}

struct Decomposition {
  Cx values;  // (b, 1, n)
  Cx vectors; // (b, n, n), when asked
};

Decomposition general_eig(const at::Tensor& A, bool vectors, const char* name) {
  int64_t b = batch_count(A), n = A.size(-1);
  bool complex = A.is_complex();
  DType dt = element_dtype(A.scalar_type());
  c10::Device device = A.device();
  Batch bt{b, n, dt, device};
  Shape s = bt.grid();
  // gebal's permutations: where the zeros are, read to the host
  at::Tensor pattern = A.reshape({b, n, n}).ne(0).cpu();
  Permutation iso = isolate(pattern, b, n);
  UOpPtr perm = read(host_indices(iso.perm, {b, 1, n}, device));
  UOpPtr ilo = read(host_indices(iso.ilo, {b, 1, 1}, device)), ihi = read(host_indices(iso.ihi, {b, 1, 1}, device));
  UOpPtr pr = broadcast(reshape(perm, {b, n, 1}), s), pc = broadcast(perm, s);
  UOpPtr eye = cast(eq(coordinate(s, 1), coordinate(s, 2)), dt);
  // undo the permutation: row perm[r] of the result is row r
  UOpPtr inverse = contiguous(
      reshape(reduce(where(eq(broadcast(reshape(perm, {b, 1, n}), s), coordinate(s, 1)), coordinate(s, 2), index(0, s)),
                     Ops::ADD, {2}),
              {b, n, 1}));
  UOpPtr ir = broadcast(inverse, s), C = coordinate(s, 2);
  if (complex) {
    Cx x = realized_cx(cm::parts_of(reshape(read_complex(A), {b, n, n, 2})));
    Cx H = realized_cx(atc(x, pr, pc));
    auto [Hre, scale] = balance_scaling(H.re, ilo, ihi, bt, &H.im);
    H.re = Hre;
    auto [Hh, Zq] = complex_hessenberg(H, Cx{eye, zeros(eye)}, ilo, ihi, bt, vectors);
    ComplexSchur sf = complex_schur(Hh, Zq, ilo, ihi, bt, vectors);
    TORCH_CHECK_LINALG(!at::any(sf.failed).item<bool>(), name,
                       ": The algorithm failed to converge because the input matrix is ill-conditioned or has too "
                       "many repeated eigenvalues (error code: 1).");
    Decomposition out{sf.w, {}};
    if (!vectors) return out;
    Cx w = eigenvectors(sf.H.re, sf.Z.re, sf.w.re, sf.w.im, bt, sf.H.im, sf.Z.im);
    w = cm::scale(w, broadcast(scale, s));
    out.vectors = complex_normalized(realized_cx(atc(w, ir, C)), bt);
    return out;
  }
  UOpPtr x = contiguous(reshape(read(A), s));
  UOpPtr H = contiguous(at(x, pr, pc));
  auto [Hb, scale] = balance_scaling(H, ilo, ihi, bt);
  auto [Hh, Zq] = hessenberg(Hb, eye, ilo, ihi, bt, vectors);
  Schur sf = schur(Hh, Zq, ilo, ihi, bt, vectors);
  TORCH_CHECK_LINALG(!at::any(sf.failed).item<bool>(), name,
                     ": The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
                     "repeated eigenvalues (error code: 1).");
  Decomposition out{{sf.wr, sf.wi}, {}};
  if (!vectors) return out;
  Cx w = eigenvectors(sf.H, sf.Z, sf.wr, sf.wi, bt);
  // undo the scaling (row i times scale i) and the permutation
  w = cm::scale(w, broadcast(scale, s));
  out.vectors = normalized(realized_cx(atc(w, ir, C)), sf.wi, bt);
  return out;
}

// ---- the ATen ops ----

void check_eig_input(const at::Tensor& A, const char* name) {
  at::native::squareCheckInputs(A, name);
  at::ScalarType st = A.scalar_type();
  if (st == at::kComplexFloat || st == at::kComplexDouble) return;
  if (A.is_complex()) to_tiny_dtype(st); // NotNativeDtype: the CPU fallback computes it
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kFloat || st == at::kDouble, "\"linalg_eig_out_cpu\" not implemented for '",
                              c10::toString(st), "'");
}

void check_finite(const at::Tensor& A, const char* name) {
  TORCH_CHECK(A.isfinite().all().item<bool>(), name, ": input tensor should not contain infs or NaNs.");
}

std::vector<int64_t> values_shape(const at::Tensor& A) {
  std::vector<int64_t> shape(A.sizes().begin(), A.sizes().end() - 1);
  return shape;
}

// the complex (b, 1, n) / (b, n, n) value into `out` of the CPU's layout, or its own when already the size
void store(at::Tensor& out, const Cx& z, at::IntArrayRef sizes, bool matrix, at::ScalarType complex) {
  at::Tensor result = matrix ? empty_tiny(sizes, column_major_strides(sizes), complex, out.device())
                             : empty_tiny(sizes, complex, out.device());
  if (result.numel() > 0) {
    Shape shape = to_shape(sizes);
    shape.push_back(2);
    write_complex(result, reshape(cm::pairs_of(z), shape));
  }
  if (out.sizes().equals(sizes) && out.scalar_type() == complex) {
    out.copy_(result);
    return;
  }
  if (!out.sizes().equals(sizes)) {
    at::native::resize_output(out, sizes);
    if (matrix) out.as_strided_(sizes, column_major_strides(sizes));
  }
  out.copy_(result);
}

std::tuple<at::Tensor&, at::Tensor&> linalg_eig_out(const at::Tensor& A, at::Tensor& values, at::Tensor& vectors) {
  check_finite(A, "torch.linalg.eig");
  at::native::squareCheckInputs(A, "linalg.eig");
  check_same_device({A, values, vectors});
  at::ScalarType complex = c10::toComplexType(A.scalar_type());
  at::native::checkLinalgCompatibleDtype("torch.linalg.eig", values.scalar_type(), complex, "eigenvalues");
  at::native::checkLinalgCompatibleDtype("torch.linalg.eig", vectors.scalar_type(), complex, "eigenvectors");
  check_eig_input(A, "linalg.eig");
  if (A.numel() == 0) {
    store(values, Cx{}, values_shape(A), false, complex);
    store(vectors, Cx{}, A.sizes(), true, complex);
    return {values, vectors};
  }
  Decomposition d = general_eig(A, true, "torch.linalg.eig");
  store(values, d.values, values_shape(A), false, complex);
  store(vectors, d.vectors, A.sizes(), true, complex);
  return {values, vectors};
}

std::tuple<at::Tensor, at::Tensor> linalg_eig(const at::Tensor& A) {
  at::ScalarType complex = c10::toComplexType(A.scalar_type());
  at::Tensor values = empty_tiny({0}, complex, A.device()), vectors = empty_tiny({0}, complex, A.device());
  linalg_eig_out(A, values, vectors);
  return {values, vectors};
}

at::Tensor& linalg_eigvals_out(const at::Tensor& A, at::Tensor& values) {
  at::native::squareCheckInputs(A, "linalg.eigvals");
  check_same_device({A, values});
  at::ScalarType complex = c10::toComplexType(A.scalar_type());
  at::native::checkLinalgCompatibleDtype("torch.linalg.eigvals", values.scalar_type(), complex, "eigenvalues");
  check_eig_input(A, "linalg.eigvals");
  // the CPU's LAPACK fails on these (torch checks them in linalg.eig only)
  check_finite(A, "torch.linalg.eigvals");
  if (A.numel() == 0) {
    store(values, Cx{}, values_shape(A), false, complex);
    return values;
  }
  Decomposition d = general_eig(A, false, "torch.linalg.eigvals");
  store(values, d.values, values_shape(A), false, complex);
  return values;
}

at::Tensor linalg_eigvals(const at::Tensor& A) {
  at::ScalarType complex = c10::toComplexType(A.scalar_type());
  at::Tensor values = empty_tiny({0}, complex, A.device());
  return linalg_eigvals_out(A, values);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("linalg_eig", TORCH_FN(linalg_eig));
  m.impl("linalg_eig.out", TORCH_FN(linalg_eig_out));
  m.impl("_linalg_eigvals", TORCH_FN(linalg_eigvals));
  m.impl("linalg_eigvals.out", TORCH_FN(linalg_eigvals_out));
}

} // namespace tiny::aten_ops
