#pragma once
// torch.special's functions as UOp expressions: digamma, trigamma and polygamma, zeta, erfinv, erfcx, log_ndtr
// and ndtri, and the modified Bessel functions i0, i0e, i1, i1e (the rest of the Bessel family: bessel.h). They are
// built from the ALU ops every renderer already has (exp, log, sin, tan, pow, erf), so no renderer prelude changes and
// every device computes them. Each follows the algorithm of torch's CPU kernel (the Cephes series and expansions;
// erfinv's rational start and two Newton steps), with its branches as selects, so values agree to rounding. Loops with
// a data-dependent trip count are unrolled to their bound (digamma's shift to x >= 10 takes at most 10 steps once x >
// 0) and early exits become masks.

#include <cmath>
#include <span>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/erfcx_table.h"

namespace tiny::aten_ops::special {

inline UOpPtr k(const UOpPtr& x, double v) { return like(x, v); }
inline UOpPtr un(Ops op, const UOpPtr& x) { return alu(op, x); }
inline UOpPtr either(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::OR, a, b); }
inline UOpPtr neg(const UOpPtr& x) { return un(Ops::NEG, x); }
inline UOpPtr is_nan(const UOpPtr& x) { return alu(Ops::CMPNE, x, x); }

// c[0] x^n + c[1] x^(n-1) + ... + c[n] (Horner; coefficients from the highest power).
inline UOpPtr polynomial(const UOpPtr& x, std::span<const double> c) {
  UOpPtr r = k(x, c[0]);
  for (size_t i = 1; i < c.size(); i++)
    r = add(mul(r, x), k(x, c[i]));
  return r;
}

// The Chebyshev series sum' c[i] T_i(x/2), coefficients from the highest order (Clenshaw's recurrence).
inline UOpPtr chebyshev(const UOpPtr& x, std::span<const double> c) {
  UOpPtr b0 = k(x, c[0]), b1 = k(x, 0), b2 = b1;
  for (size_t i = 1; i < c.size(); i++) {
    b2 = b1;
    b1 = b0;
    b0 = add(sub(mul(x, b1), b2), k(x, c[i]));
  }
  return mul(k(x, 0.5), sub(b0, b2));
}

// x - round(x): a number in [-0.5, 0.5] with the same tan(pi .) and sin(pi .)^2 as x, exact in floating
// point, so the reflection terms stay accurate next to the poles.
inline UOpPtr near_fraction(const UOpPtr& x) { return sub(x, un(Ops::RINT, x)); }

// digamma: the reflection psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0, the recurrence
// psi(x) = psi(x + 1) - 1 / x up to x >= 10, then the asymptotic series. psi(+-0) = -+inf, NaN at the
// negative integers.
inline UOpPtr digamma(const UOpPtr& x0) {
  static constexpr double kAsymptotic[] = {
      8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3, -4.16666666666666666667E-3,
      3.96825396825396825397E-3, -8.33333333333333333333E-3, 8.33333333333333333333E-2};
  constexpr double kPsi10 = 2.25175258906672110764; // psi(10)
  UOpPtr negative = lt(x0, k(x0, 0));
  UOpPtr x = where(negative, sub(k(x0, 1), x0), x0);
  UOpPtr acc = k(x0, 0);
  for (int i = 0; i < 10; i++) { // x > 0 here (or NaN), so 10 steps reach 10
    UOpPtr below = lt(x, k(x0, 10));
    acc = where(below, sub(acc, un(Ops::RECIP, x)), acc);
    x = where(below, add(x, k(x0, 1)), x);
  }
  UOpPtr z = un(Ops::RECIP, mul(x, x));
  UOpPtr tail = where(lt(x, k(x0, 1e17)), mul(z, polynomial(z, kAsymptotic)), k(x0, 0));
  UOpPtr v = sub(sub(add(acc, un(Ops::LOG, x)), div(k(x0, 0.5), x)), tail);
  v = where(eq(x, k(x0, 10)), add(acc, k(x0, kPsi10)), v);
  UOpPtr reflection = div(k(x0, M_PI), un(Ops::TAN, mul(k(x0, M_PI), near_fraction(x0))));
  v = where(negative, sub(v, reflection), v);
  v = where(both(negative, eq(x0, un(Ops::TRUNC, x0))), k(x0, NAN), v);
  UOpPtr zero = eq(x0, k(x0, 0)); // -0 has a negative reciprocal
  return where(zero, where(lt(un(Ops::RECIP, x0), k(x0, 0)), k(x0, INFINITY), k(x0, -INFINITY)), v);
}

// trigamma, as torch's CPU kernel computes it: below 0.5 the reflection pi^2 / sin(pi x)^2 - psi'(1 - x)
// (with sin of the unreduced pi x, as the CPU), six recurrence steps, then the asymptotic series.
inline UOpPtr trigamma(const UOpPtr& x0) {
  UOpPtr reflect = lt(x0, k(x0, 0.5));
  UOpPtr s = un(Ops::SIN, mul(k(x0, M_PI), x0));
  UOpPtr acc = where(reflect, neg(div(k(x0, M_PI * M_PI), mul(s, s))), k(x0, 0));
  UOpPtr x = where(reflect, sub(k(x0, 1), x0), x0);
  for (int i = 0; i < 6; i++) {
    acc = add(acc, un(Ops::RECIP, mul(x, x)));
    x = add(x, k(x0, 1));
  }
  UOpPtr ixx = un(Ops::RECIP, mul(x, x));
  UOpPtr series = mul(ixx, sub(k(x0, 1.0 / 6), mul(ixx, sub(k(x0, 1.0 / 30), mul(ixx, k(x0, 1.0 / 42))))));
  acc = add(acc, div(add(add(k(x0, 1), un(Ops::RECIP, mul(k(x0, 2), x))), series), x));
  return where(reflect, neg(acc), acc);
}

// The Hurwitz zeta function zeta(x, q) = sum over k >= 0 of (q + k)^-x, by Cephes' algorithm as torch's CPU
// runs it: a direct sum of at least 9 terms and on until q + k > 9 (`steps` terms at most: 9 for q > 0), then the
// Euler-Maclaurin tail, each stopping once a term no longer changes the sum (here: a mask that freezes the sum).
// Long direct sums (a very negative q) realize their state every 16 terms.
inline UOpPtr hurwitz_zeta_sum(const UOpPtr& x, const UOpPtr& q, int64_t steps) {
  static constexpr double kEulerMaclaurin[] = {12.0,
                                               -720.0,
                                               30240.0,
                                               -1209600.0,
                                               47900160.0,
                                               -1.8924375803183791606e9,
                                               7.47242496e10,
                                               -2.950130727918164224e12,
                                               1.1646782814350067249e14,
                                               -4.5979787224074726105e15,
                                               1.8152105401943546773e17,
                                               -7.1661652561756670113e18};
  constexpr double kEpsilon = 1.11022302462515654042E-16;
  UOpPtr ms = neg(x);
  UOpPtr sum = alu(Ops::POW, q, ms), a = q, b = k(q, 0);
  UOpPtr done = lt(k(q, 1), k(q, 0)); // false
  for (int64_t i = 0; i < steps; i++) {
    UOpPtr live = un(Ops::NOT, done);
    if (i >= 9) live = both(live, alu(Ops::CMPLE, a, k(q, 9))); // the loop goes on while i < 9 or a <= 9
    a = where(live, add(a, k(q, 1)), a);
    b = where(live, alu(Ops::POW, a, ms), b);
    sum = where(live, add(sum, b), sum);
    UOpPtr eps = mul(k(q, kEpsilon), sum);
    done = either(done, both(live, both(lt(neg(eps), b), lt(b, eps))));
    if (i % 16 == 15 && i + 1 < steps) {
      a = contiguous(a);
      b = contiguous(b);
      sum = contiguous(sum);
      done = contiguous(done);
    }
  }
  UOpPtr w = a;
  UOpPtr tail = sub(add(sum, div(mul(b, w), sub(x, k(q, 1)))), mul(k(q, 0.5), b));
  sum = where(done, sum, tail);
  UOpPtr fa = k(q, 1);
  double kk = 0;
  for (double coefficient : kEulerMaclaurin) {
    UOpPtr live = un(Ops::NOT, done);
    fa = mul(fa, add(x, k(q, kk)));
    b = div(b, w);
    UOpPtr t = div(mul(fa, b), k(q, coefficient));
    sum = where(live, add(sum, t), sum);
    done = either(done, both(live, lt(un(Ops::ABS, div(t, sum)), k(q, kEpsilon))));
    kk += 1;
    fa = mul(fa, add(x, k(q, kk)));
    b = div(b, w);
    kk += 1;
  }
  return sum;
}

// zeta(s, q) for q > 0 and an integer s >= 2 (polygamma's).
inline UOpPtr hurwitz_zeta_positive(double s, const UOpPtr& q) { return hurwitz_zeta_sum(k(q, s), q, 9); }

// How many direct terms zeta(x, q) sums at most for each element (0 where a special case answers): 9, or up to
// q + k > 9 for a q <= 0 (torch's loop bound).
inline UOpPtr zeta_terms(const UOpPtr& x, const UOpPtr& q) {
  UOpPtr floor_q = un(Ops::FLOOR, q);
  UOpPtr special =
      either(either(eq(x, k(x, 1)), lt(x, k(x, 1))),
             both(alu(Ops::CMPLE, q, k(q, 0)), either(eq(q, floor_q), alu(Ops::CMPNE, x, un(Ops::FLOOR, x)))));
  UOpPtr nine = fixed(DType::Int64, 9, q->shape);
  UOpPtr past = add(cast(where(alu(Ops::CMPLE, q, k(q, 0)), un(Ops::FLOOR, sub(k(q, 9), q)), k(q, 0)), DType::Int64),
                    fixed(DType::Int64, 1, q->shape));
  UOpPtr terms = where(lt(nine, past), past, nine);
  return where(special, fixed(DType::Int64, 0, q->shape), terms);
}

// torch.special.zeta(x, q) in double (torch's accumulation type), with Cephes' special cases: inf at x = 1 and at
// the poles q = 0, -1, ...; NaN for x < 1, and for a non-integer x at q <= 0.
inline UOpPtr zeta(const UOpPtr& x0, const UOpPtr& q0, int64_t steps) {
  UOpPtr x = cast(x0, DType::Float64), q = cast(q0, DType::Float64);
  UOpPtr value = hurwitz_zeta_sum(x, q, steps), inf = k(x, INFINITY), nan = k(x, NAN);
  UOpPtr q_low = alu(Ops::CMPLE, q, k(q, 0));
  value = where(both(q_low, alu(Ops::CMPNE, x, un(Ops::FLOOR, x))), nan, value);
  value = where(both(q_low, eq(q, un(Ops::FLOOR, q))), inf, value);
  value = where(lt(x, k(x, 1)), nan, value);
  return cast(where(eq(x, k(x, 1)), inf, value), x0->dtype);
}

// The coefficients (lowest power first) of P_n with d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x)):
// P_0(c) = c, P_{n+1}(c) = -(1 + c^2) P_n'(c).
inline std::vector<double> cot_derivative(int64_t n) {
  std::vector<double> p = {0, 1};
  for (int64_t i = 0; i < n; i++) {
    std::vector<double> d(p.size() + 1, 0.0);
    for (size_t j = 1; j < p.size(); j++) {
      double dp = static_cast<double>(j) * p[j]; // coefficient of c^(j-1) in P'
      d[j - 1] -= dp;
      d[j + 1] -= dp;
    }
    p = d;
  }
  return p;
}

// polygamma(n, x) for n >= 2: (-1)^(n+1) n! zeta(n + 1, x), computed in float64 as torch's CPU does for
// float32. Below 0 by the reflection psi_n(x) = (-1)^n psi_n(1 - x) - pi^(n+1) P_n(cot(pi x)) (the direct
// sum would need a term per unit below 9); at the non-positive integers (-1)^(n+1) inf, as the CPU.
inline UOpPtr polygamma_high(int64_t n, const UOpPtr& x_in) {
  UOpPtr x = cast(x_in, DType::Float64);
  double sign = n % 2 ? 1.0 : -1.0, factorial = std::exp(std::lgamma(static_cast<double>(n) + 1));
  auto positive = [&](const UOpPtr& q) {
    return mul(k(q, sign * factorial), hurwitz_zeta_positive(static_cast<double>(n + 1), q));
  };
  UOpPtr negative = lt(x, k(x, 0));
  UOpPtr direct = positive(where(negative, sub(k(x, 1), x), x)); // psi_n(x), or psi_n(1 - x) below 0
  std::vector<double> p = cot_derivative(n);
  std::vector<double> high_first(p.rbegin(), p.rend());
  UOpPtr c = un(Ops::RECIP, un(Ops::TAN, mul(k(x, M_PI), near_fraction(x))));
  UOpPtr reflected = sub(mul(k(x, n % 2 ? -1.0 : 1.0), direct),
                         mul(k(x, std::pow(M_PI, static_cast<double>(n + 1))), polynomial(c, high_first)));
  UOpPtr v = where(negative, reflected, direct);
  v = where(both(lt(x, k(x, 0.5)), eq(x, un(Ops::FLOOR, x))), k(x, sign * INFINITY), v);
  return cast(v, x_in->dtype);
}

// erfinv: torch's rational approximation (central |y| <= 0.7, else in sqrt(-log((1 - |y|) / 2))), then
// two Newton steps on erf; NaN beyond [-1, 1], +-inf at +-1.
inline UOpPtr erfinv(const UOpPtr& y) {
  static constexpr double a[] = {-0.140543331, 0.914624893, -1.645349621, 0.886226899};
  static constexpr double b[] = {0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0};
  static constexpr double c[] = {1.641345311, 3.429567803, -1.624906493, -1.970840454};
  static constexpr double d[] = {1.637067800, 3.543889200, 1.0};
  UOpPtr ya = un(Ops::ABS, y);
  UOpPtr z = mul(y, y);
  UOpPtr central = div(mul(y, polynomial(z, a)), polynomial(z, b));
  UOpPtr t = un(Ops::SQRT, neg(un(Ops::LOG, div(sub(k(y, 1), ya), k(y, 2)))));
  UOpPtr num = polynomial(t, c);
  UOpPtr signed_num = where(lt(y, k(y, 0)), neg(un(Ops::ABS, num)), un(Ops::ABS, num));
  UOpPtr x = where(le(ya, k(y, 0.7)), central, div(signed_num, polynomial(t, d)));
  UOpPtr two_over_sqrt_pi = k(y, 2.0 / std::sqrt(M_PI));
  for (int i = 0; i < 2; i++)
    x = sub(x, div(sub(un(Ops::ERF, x), y), mul(two_over_sqrt_pi, exp(neg(mul(x, x))))));
  x = where(eq(ya, k(y, 1)), where(lt(y, k(y, 0)), k(y, -INFINITY), k(y, INFINITY)), x);
  return where(lt(k(y, 1), ya), k(y, NAN), x);
}

// ---- the normal distribution: erfcx, log_ndtr, ndtri ----

// The fit of erfcx on the subinterval of y = y100 / 100 (0 <= y100 <= 100; others take row 0, their value
// unused): its coefficients gathered from `table` (kErfcxChebyshev, flattened, on the device) and evaluated in
// double, as the CPU's double literals make it do for float too.
inline UOpPtr erfcx_fit(const UOpPtr& y100, const UOpPtr& table) {
  UOpPtr inside = both(le(k(y100, 0), y100), le(y100, k(y100, 100)));
  UOpPtr row = cast(un(Ops::TRUNC, where(inside, y100, k(y100, 0))), DType::Int64);
  UOpPtr centre = add(mul(k(y100, 2), cast(row, y100->dtype)), k(y100, 1)); // 2 i + 1, exact
  UOpPtr t = cast(sub(mul(k(y100, 2), y100), centre), DType::Float64);
  UOpPtr first = mul(row, like(row, kErfcxTerms));
  UOpPtr v = gather(table, add(first, like(row, kErfcxTerms - 1)));
  for (int j = kErfcxTerms - 2; j >= 0; j--)
    v = add(gather(table, add(first, like(row, j))), mul(v, t));
  return cast(v, y100->dtype);
}

// erfcx(x) = exp(x^2) erfc(x) by torch's CPU algorithm (S. G. Johnson's): for 0 <= x <= 50 the fit in
// y = 4 / (4 + x), beyond a 5-term continued fraction, and past 5e7 its first term (the others would overflow);
// below 0 erfcx(x) = 2 exp(x^2) - erfcx(-x), whose second term is dropped below -6.1, and inf below -26.7.
inline UOpPtr erfcx(const UOpPtr& x, const UOpPtr& table) {
  constexpr double kInvSqrtPi = 0.56418958354775628694807945156;
  UOpPtr xx = mul(x, x);
  UOpPtr fit = erfcx_fit(div(k(x, 400), add(k(x, 4), un(Ops::ABS, x))), table);
  UOpPtr fraction = div(mul(k(x, kInvSqrtPi), add(mul(xx, add(xx, k(x, 4.5))), k(x, 2))),
                        mul(x, add(mul(xx, add(xx, k(x, 5))), k(x, 3.75))));
  UOpPtr positive = where(lt(k(x, 5e7), x), div(k(x, kInvSqrtPi), x), where(lt(k(x, 50), x), fraction, fit));
  UOpPtr twice = mul(k(x, 2), exp(xx));
  UOpPtr negative = where(lt(x, k(x, -26.7)), k(x, INFINITY), where(lt(x, k(x, -6.1)), twice, sub(twice, fit)));
  return where(is_nan(x), x, where(le(k(x, 0), x), positive, negative));
}

// log of the standard normal CDF: log(erfcx(-t) / 2) - t^2 below -1 (t = x / sqrt(2)), where 1 - erfc(t) / 2
// would lose every digit, else log1p(-erfc(t) / 2).
inline UOpPtr log_ndtr(const UOpPtr& x, const UOpPtr& table) {
  UOpPtr t = mul(x, k(x, M_SQRT1_2));
  UOpPtr low = sub(un(Ops::LOG, div(erfcx(neg(t), table), k(x, 2))), mul(t, t));
  UOpPtr high = un(Ops::LOG1P, div(neg(un(Ops::ERFC, t)), k(x, 2)));
  return where(lt(x, k(x, -1)), low, high);
}

inline constexpr double kNdtriP0[] = {-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
                                      1.39312609387279679503E1, -1.23916583867381258016E0};
inline constexpr double kNdtriQ0[] = {1.00000000000000000000E0,  1.95448858338141759834E0,  4.67627912898881538453E0,
                                      8.63602421390890590575E1,  -2.25462687854119370527E2, 2.00260212380060660359E2,
                                      -8.20372256168333339912E1, 1.59056225126211695515E1,  -1.18331621121330003142E0};
inline constexpr double kNdtriP1[] = {
    4.05544892305962419923E0,   3.15251094599893866154E1,   5.71628192246421288162E1,
    4.40805073893200834700E1,   1.46849561928858024014E1,   2.18663306850790267539E0,
    -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4};
inline constexpr double kNdtriQ1[] = {
    1.00000000000000000000E0,   1.57799883256466749731E1,   4.53907635128879210584E1,
    4.13172038254672030440E1,   1.50425385692907503408E1,   2.50464946208309415979E0,
    -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4};
inline constexpr double kNdtriP2[] = {3.23774891776946035970E0,  6.91522889068984211695E0,  3.93881025292474443415E0,
                                      1.33303460815807542389E0,  2.01485389549179081538E-1, 1.23716634817820021358E-2,
                                      3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9};
inline constexpr double kNdtriQ2[] = {1.00000000000000000000E0,  6.02427039364742014255E0,  3.67983563856160859403E0,
                                      1.37702099489081330271E0,  2.16236993594496635890E-1, 1.34204006088543189037E-2,
                                      3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9};

// The inverse of the standard normal CDF, Cephes' ndtri: a rational fit in (y - 1/2)^2 for |y - 1/2| < 1/2 -
// exp(-2), else in z = 1 / sqrt(-2 log y) (of 1 - y above 1/2, negated back), with one fit for z > 1/8 and one
// below; -inf at 0, inf at 1, NaN outside [0, 1].
inline UOpPtr ndtri(const UOpPtr& y0) {
  constexpr double kExpMinus2 = 0.13533528323661269189, kSqrt2Pi = 2.50662827463100050242;
  UOpPtr upper = lt(sub(k(y0, 1), k(y0, kExpMinus2)), y0);
  UOpPtr y = where(upper, sub(k(y0, 1), y0), y0);
  UOpPtr c = sub(y, k(y0, 0.5)), cc = mul(c, c);
  UOpPtr central =
      mul(add(c, mul(c, div(mul(cc, polynomial(cc, kNdtriP0)), polynomial(cc, kNdtriQ0)))), k(y0, kSqrt2Pi));
  UOpPtr x = un(Ops::SQRT, mul(k(y0, -2), un(Ops::LOG, y)));
  UOpPtr x0 = sub(x, div(un(Ops::LOG, x), x));
  UOpPtr z = un(Ops::RECIP, x);
  UOpPtr near = div(mul(z, polynomial(z, kNdtriP1)), polynomial(z, kNdtriQ1));
  UOpPtr far = div(mul(z, polynomial(z, kNdtriP2)), polynomial(z, kNdtriQ2));
  UOpPtr tail = sub(x0, where(lt(x, k(y0, 8)), near, far));
  UOpPtr v = where(lt(k(y0, kExpMinus2), y), central, where(upper, tail, neg(tail)));
  v = where(either(lt(y0, k(y0, 0)), lt(k(y0, 1), y0)), k(y0, NAN), v);
  v = where(eq(y0, k(y0, 1)), k(y0, INFINITY), v);
  return where(eq(y0, k(y0, 0)), k(y0, -INFINITY), v);
}

// ---- modified Bessel functions of the first kind (Cephes' Chebyshev expansions on [0, 8] and (8, inf)) ----

inline constexpr double kI0eSmall[] = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,  -2.67079385394061173391E-7,  1.11738753912010371815E-6,
    -4.41673835845875056359E-6,  1.64484480707288970893E-5,  -5.75419501008210370398E-5,  1.88502885095841655729E-4,
    -5.76375574538582365885E-4,  1.63947561694133579842E-3,  -4.32430999505057594430E-3,  1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,  -9.49010970480476444210E-2,  1.71620901522208775349E-1,
    -3.04682672343198398683E-1,  6.76795274409476084995E-1};
inline constexpr double kI0eLarge[] = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,  3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15,  3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11,  4.94060238822496958910E-10,  3.39623202570838634515E-9,   2.26666899049817806459E-8,
    2.04891858946906374183E-7,   2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
    8.04490411014108831608E-1};
inline constexpr double kI1eSmall[] = {
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16, -1.10559694773538630805E-15,
    7.60068429473540693410E-15, -5.04218550472791168711E-14, 3.22379336594557470981E-13, -1.98397439776494371520E-12,
    1.17361862988909016308E-11, -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
    9.38153738649577178388E-9,  -4.44505912879632808065E-8,  2.00329475355213526229E-7,  -8.56872026469545474066E-7,
    3.47025130813767847674E-6,  -1.32731636560394358279E-5,  4.78156510755005422638E-5,  -1.61760815825896745588E-4,
    5.12285956168575772895E-4,  -1.51357245063125314899E-3,  4.15642294431288815669E-3,  -1.05640848946261981558E-2,
    2.47264490306265168283E-2,  -5.29459812080949914269E-2,  1.02643658689847095384E-1,  -1.76416518357834055153E-1,
    2.52587186443633654823E-1};
inline constexpr double kI1eLarge[] = {
    7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17, -3.20952592199342395980E-17,
    2.96262899764595013876E-16,  3.30820231092092828324E-16,  -1.88035477551078244854E-15, -3.81440307243700780478E-15,
    1.04202769841288027642E-14,  4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11,  3.25260358301548823856E-11,
    -1.89749581235054123450E-11, -5.58974346219658380687E-10, -3.83538038596423702205E-9,  -2.63146884688951950684E-8,
    -2.51223623787020892529E-7,  -3.88256480887769039346E-6,  -1.10588938762623716291E-4,  -9.76109749136146840777E-3,
    7.78576235018280120474E-1};

// torch's float kernels of i1 and i1e drop the leading (negligible in float) terms of the series.
inline std::span<const double> i1e_small(DType dt) {
  std::span<const double> all(kI1eSmall);
  return dt == DType::Float64 ? all : all.subspan(12);
}
inline std::span<const double> i1e_large(DType dt) {
  std::span<const double> all(kI1eLarge);
  return dt == DType::Float64 ? all : all.subspan(18);
}

// i0 (scaled = false) and i0e, in the CPU kernels' order of operations (so i0(+-inf) is inf / inf = NaN).
inline UOpPtr bessel_i0(const UOpPtr& x0, bool scaled) {
  UOpPtr x = un(Ops::ABS, x0);
  UOpPtr small = chebyshev(sub(div(x, k(x, 2)), k(x, 2)), kI0eSmall);
  UOpPtr large = chebyshev(sub(div(k(x, 32), x), k(x, 2)), kI0eLarge);
  if (!scaled) {
    small = mul(exp(x), small);
    large = mul(exp(x), large);
  }
  return where(le(x, k(x, 8)), small, div(large, un(Ops::SQRT, x)));
}

// i1 (scaled = false) and i1e: odd functions.
inline UOpPtr bessel_i1(const UOpPtr& x0, bool scaled) {
  UOpPtr x = un(Ops::ABS, x0);
  UOpPtr small = chebyshev(sub(div(x, k(x, 2)), k(x, 2)), i1e_small(x->dtype));
  UOpPtr large = chebyshev(sub(div(k(x, 32), x), k(x, 2)), i1e_large(x->dtype));
  small = scaled ? mul(small, x) : mul(mul(exp(x), x), small);
  if (!scaled) large = mul(exp(x), large);
  UOpPtr v = where(le(x, k(x, 8)), small, div(large, un(Ops::SQRT, x)));
  return where(lt(x0, k(x0, 0)), neg(v), v);
}

} // namespace tiny::aten_ops::special
