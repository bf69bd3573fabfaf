#pragma once
// Complex arithmetic on (real, imaginary) pairs of real UOps. The compiler has no complex type: a complex
// tensor's storage holds its parts interleaved (csrc/tensor_bridge.h: read_complex, write_complex), and
// every complex op is a small function of real UOps here, so its kernels stay real and fuse as any.
// Formulas follow c10::complex and the C library functions torch's CPU kernels call, edge cases included
// where they cost a select (division by zero, zero in sqrt and sgn, overflow in abs).

#include <cmath>

#include "compiler/uop.h"
#include "csrc/tensor_bridge.h"

namespace tiny::complex_math {

struct Cx {
  UOpPtr re, im;
};

// The parts of pairs (the pair's axis last: csrc/tensor_bridge.h), and the pairs of parts.
inline Cx parts_of(const UOpPtr& pairs) { return {real_part(pairs), imag_part(pairs)}; }
inline UOpPtr pairs_of(const Cx& z) { return join_complex(z.re, z.im); }

// A constant of x's dtype and shape.
inline UOpPtr like(const UOpPtr& x, double v) {
  return expand(reshape(const_like(x, v), Shape(x->shape.size(), 1)), x->shape);
}
inline UOpPtr is_nan(const UOpPtr& x) { return alu(Ops::CMPNE, x, x); }
inline UOpPtr either(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::OR, a, b); }
inline UOpPtr both(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::AND, a, b); }

// sqrt(a^2 + b^2) without overflow: m * sqrt(1 + (n / m)^2) for m = max(|a|, |b|), n = min; an infinity
// wins over a NaN, as in C's hypot.
inline UOpPtr hypot(const UOpPtr& a_in, const UOpPtr& b_in) {
  UOpPtr a = alu(Ops::ABS, a_in), b = alu(Ops::ABS, b_in);
  UOpPtr m = alu(Ops::MAX, a, b), n = alu(Ops::MIN, a, b), r = alu(Ops::FDIV, n, m);
  UOpPtr v = alu(Ops::MUL, m, alu(Ops::SQRT, alu(Ops::ADD, like(a, 1.0), alu(Ops::MUL, r, r))));
  UOpPtr inf = like(a, INFINITY);
  v = where(alu(Ops::CMPEQ, m, like(a, 0.0)), like(a, 0.0), v);
  v = where(either(is_nan(a), is_nan(b)), like(a, NAN), v);
  return where(either(alu(Ops::CMPEQ, a, inf), alu(Ops::CMPEQ, b, inf)), inf, v);
}

inline Cx add(const Cx& a, const Cx& b) { return {alu(Ops::ADD, a.re, b.re), alu(Ops::ADD, a.im, b.im)}; }
inline Cx sub(const Cx& a, const Cx& b) { return {alu(Ops::SUB, a.re, b.re), alu(Ops::SUB, a.im, b.im)}; }
inline Cx neg(const Cx& a) { return {alu(Ops::NEG, a.re), alu(Ops::NEG, a.im)}; }
inline Cx conj(const Cx& a) { return {a.re, alu(Ops::NEG, a.im)}; }
inline Cx mul(const Cx& a, const Cx& b) {
  return {alu(Ops::SUB, alu(Ops::MUL, a.re, b.re), alu(Ops::MUL, a.im, b.im)),
          alu(Ops::ADD, alu(Ops::MUL, a.re, b.im), alu(Ops::MUL, a.im, b.re))};
}
// A complex times a real: each part scaled (no cross terms, so an infinity makes no NaN).
inline Cx scale(const Cx& a, const UOpPtr& s) { return {alu(Ops::MUL, a.re, s), alu(Ops::MUL, a.im, s)}; }

// Smith's division, as c10::complex divides: scaled by the larger of |c| and |d|; 0 / 0 gives the CPU's
// NaN or infinity part by part.
inline Cx div(const Cx& x, const Cx& y) {
  const UOpPtr &a = x.re, &b = x.im, &c = y.re, &d = y.im;
  UOpPtr abs_c = alu(Ops::ABS, c), abs_d = alu(Ops::ABS, d), one = like(c, 1.0), zero = like(c, 0.0);
  // |c| >= |d|: rat = d / c, scl = 1 / (c + d * rat)
  UOpPtr rat1 = alu(Ops::FDIV, d, c), scl1 = alu(Ops::FDIV, one, alu(Ops::ADD, c, alu(Ops::MUL, d, rat1)));
  UOpPtr re1 = alu(Ops::MUL, alu(Ops::ADD, a, alu(Ops::MUL, b, rat1)), scl1);
  UOpPtr im1 = alu(Ops::MUL, alu(Ops::SUB, b, alu(Ops::MUL, a, rat1)), scl1);
  // otherwise: rat = c / d, scl = 1 / (d + c * rat)
  UOpPtr rat2 = alu(Ops::FDIV, c, d), scl2 = alu(Ops::FDIV, one, alu(Ops::ADD, d, alu(Ops::MUL, c, rat2)));
  UOpPtr re2 = alu(Ops::MUL, alu(Ops::ADD, alu(Ops::MUL, a, rat2), b), scl2);
  UOpPtr im2 = alu(Ops::MUL, alu(Ops::SUB, alu(Ops::MUL, b, rat2), a), scl2);
  UOpPtr first = alu(Ops::NOT, alu(Ops::CMPLT, abs_c, abs_d));
  UOpPtr by_zero = both(alu(Ops::CMPEQ, abs_c, zero), alu(Ops::CMPEQ, abs_d, zero));
  UOpPtr re = where(first, re1, re2), im = where(first, im1, im2);
  return {where(by_zero, alu(Ops::FDIV, a, abs_c), re), where(by_zero, alu(Ops::FDIV, b, abs_d), im)};
}

inline UOpPtr abs(const Cx& z) { return hypot(z.re, z.im); }
inline UOpPtr angle(const Cx& z) { return alu(Ops::ATAN2, z.im, z.re); }

inline Cx exp(const Cx& z) {
  UOpPtr m = alu(Ops::EXP, z.re);
  // exp(x + 0i) stays real for every x, infinities included (avoids inf * 0)
  UOpPtr real_only = alu(Ops::CMPEQ, z.im, like(z.im, 0.0));
  return {where(real_only, m, alu(Ops::MUL, m, alu(Ops::COS, z.im))),
          where(real_only, z.im, alu(Ops::MUL, m, alu(Ops::SIN, z.im)))};
}
inline Cx log(const Cx& z) { return {alu(Ops::LOG, abs(z)), angle(z)}; }

// The principal square root: t = sqrt((|z| + |re|) / 2); for re >= 0 (t, im / 2t), else
// (|im| / 2t, t with im's sign); sqrt(0 + bi) for b = 0 keeps b, and an infinite im gives (inf, im), NaN
// re too (C99's csqrt).
inline Cx sqrt(const Cx& z) {
  UOpPtr zero = like(z.re, 0.0), half = like(z.re, 0.5);
  UOpPtr t = alu(Ops::SQRT, alu(Ops::MUL, alu(Ops::ADD, abs(z), alu(Ops::ABS, z.re)), half));
  UOpPtr q = alu(Ops::FDIV, z.im, alu(Ops::ADD, t, t));
  UOpPtr im_negative = either(alu(Ops::CMPLT, z.im, zero),
                              both(alu(Ops::CMPEQ, z.im, zero), alu(Ops::CMPLT, alu(Ops::FDIV, like(z.re, 1.0), z.im),
                                                                    zero))); // -0.0
  UOpPtr signed_t = where(im_negative, alu(Ops::NEG, t), t);
  UOpPtr positive = alu(Ops::NOT, alu(Ops::CMPLT, z.re, zero));
  UOpPtr re = where(positive, t, alu(Ops::ABS, q)), im = where(positive, q, signed_t);
  UOpPtr at_zero = alu(Ops::CMPEQ, t, zero);
  UOpPtr im_infinite = alu(Ops::CMPEQ, alu(Ops::ABS, z.im), like(z.im, INFINITY));
  return {where(im_infinite, like(z.re, INFINITY), where(at_zero, zero, re)),
          where(im_infinite, z.im, where(at_zero, z.im, im))};
}

inline Cx reciprocal(const Cx& z) { return div({like(z.re, 1.0), like(z.re, 0.0)}, z); }

// z / |z|, 0 at 0 (torch's sgn).
inline Cx sgn(const Cx& z) {
  UOpPtr r = abs(z), zero = like(z.re, 0.0);
  UOpPtr at_zero = alu(Ops::CMPEQ, r, zero);
  return {where(at_zero, zero, alu(Ops::FDIV, z.re, r)), where(at_zero, zero, alu(Ops::FDIV, z.im, r))};
}

// z^w = exp(w log z); 0^w is 0 for w with a positive real part, 1 for w = 0 (as std::pow).
inline Cx pow(const Cx& z, const Cx& w) {
  Cx r = exp(mul(w, log(z)));
  UOpPtr zero = like(z.re, 0.0), one = like(z.re, 1.0);
  UOpPtr z_zero = both(alu(Ops::CMPEQ, z.re, zero), alu(Ops::CMPEQ, z.im, zero));
  UOpPtr w_zero = both(alu(Ops::CMPEQ, w.re, zero), alu(Ops::CMPEQ, w.im, zero));
  UOpPtr to_zero = both(z_zero, alu(Ops::CMPLT, zero, w.re));
  r = {where(to_zero, zero, r.re), where(to_zero, zero, r.im)};
  return {where(w_zero, one, r.re), where(w_zero, zero, r.im)};
}

inline UOpPtr eq(const Cx& a, const Cx& b) { return both(alu(Ops::CMPEQ, a.re, b.re), alu(Ops::CMPEQ, a.im, b.im)); }
inline UOpPtr isnan(const Cx& z) { return either(is_nan(z.re), is_nan(z.im)); }
// z != 0: either part nonzero (a NaN part counts), as torch's truth of a complex value.
inline UOpPtr nonzero(const Cx& z) {
  return either(alu(Ops::CMPNE, z.re, like(z.re, 0.0)), alu(Ops::CMPNE, z.im, like(z.im, 0.0)));
}

// sin(a + bi) = sin a cosh b + i cos a sinh b; cos(a + bi) = cos a cosh b - i sin a sinh b.
inline Cx sin(const Cx& z) {
  return {alu(Ops::MUL, alu(Ops::SIN, z.re), alu(Ops::COSH, z.im)),
          alu(Ops::MUL, alu(Ops::COS, z.re), alu(Ops::SINH, z.im))};
}
inline Cx cos(const Cx& z) {
  return {alu(Ops::MUL, alu(Ops::COS, z.re), alu(Ops::COSH, z.im)),
          alu(Ops::NEG, alu(Ops::MUL, alu(Ops::SIN, z.re), alu(Ops::SINH, z.im)))};
}

// Multiplication by i and by -i: the identities that give tan, atan, asinh from tanh, atanh, asin.
inline Cx times_i(const Cx& z) { return {alu(Ops::NEG, z.im), z.re}; }
inline Cx times_minus_i(const Cx& z) { return {z.im, alu(Ops::NEG, z.re)}; }

// sinh(a + bi) = sinh a cos b + i cosh a sin b; cosh(a + bi) = cosh a cos b + i sinh a sin b. A real
// argument keeps its zero imaginary part even where the other factor is infinite (C's csinh, ccosh).
inline Cx sinh(const Cx& z) {
  UOpPtr real_only = alu(Ops::CMPEQ, z.im, like(z.im, 0.0));
  return {where(real_only, alu(Ops::SINH, z.re), alu(Ops::MUL, alu(Ops::SINH, z.re), alu(Ops::COS, z.im))),
          where(real_only, z.im, alu(Ops::MUL, alu(Ops::COSH, z.re), alu(Ops::SIN, z.im)))};
}
inline Cx cosh(const Cx& z) {
  UOpPtr real_only = alu(Ops::CMPEQ, z.im, like(z.im, 0.0));
  UOpPtr signed_zero = where(alu(Ops::CMPLT, z.re, like(z.re, 0.0)), alu(Ops::NEG, z.im), z.im);
  return {where(real_only, alu(Ops::COSH, z.re), alu(Ops::MUL, alu(Ops::COSH, z.re), alu(Ops::COS, z.im))),
          where(real_only, signed_zero, alu(Ops::MUL, alu(Ops::SINH, z.re), alu(Ops::SIN, z.im)))};
}

// tanh(a + bi) = (sinh a cosh a + i sin b cos b) / (sinh^2 a + cos^2 b), as glibc's ctanh; past |a| = 20
// tanh a rounds to +-1 in float64 and the squares would overflow, so the imaginary part is
// 4 sin b cos b exp(-2|a|).
inline Cx tanh(const Cx& z) {
  UOpPtr sa = alu(Ops::SINH, z.re), ca = alu(Ops::COSH, z.re), sb = alu(Ops::SIN, z.im), cb = alu(Ops::COS, z.im);
  UOpPtr den = alu(Ops::ADD, alu(Ops::MUL, sa, sa), alu(Ops::MUL, cb, cb));
  UOpPtr big = alu(Ops::CMPLT, like(z.re, 20.0), alu(Ops::ABS, z.re));
  UOpPtr one = where(alu(Ops::CMPLT, z.re, like(z.re, 0.0)), like(z.re, -1.0), like(z.re, 1.0));
  UOpPtr tail = alu(Ops::MUL, alu(Ops::MUL, like(z.re, 4.0), alu(Ops::MUL, sb, cb)),
                    alu(Ops::EXP, alu(Ops::MUL, like(z.re, -2.0), alu(Ops::ABS, z.re))));
  return {where(big, one, alu(Ops::FDIV, alu(Ops::MUL, sa, ca), den)),
          where(big, tail, alu(Ops::FDIV, alu(Ops::MUL, sb, cb), den))};
}
// tan z = -i tanh(iz)
inline Cx tan(const Cx& z) { return times_minus_i(tanh(times_i(z))); }

// atanh(a + bi) = log1p(4a / ((1 - a)^2 + b^2)) / 4 + i atan2(2b, (1 - a)(1 + a) - b^2) / 2: accurate near
// 0, and the signed zero of b picks the side of the cuts (-inf, -1] and [1, inf) as C's catanh does.
inline Cx atanh(const Cx& z) {
  UOpPtr one = like(z.re, 1.0), om = alu(Ops::SUB, one, z.re), op = alu(Ops::ADD, one, z.re);
  UOpPtr b2 = alu(Ops::MUL, z.im, z.im);
  UOpPtr r = alu(Ops::FDIV, alu(Ops::MUL, like(z.re, 4.0), z.re), alu(Ops::ADD, alu(Ops::MUL, om, om), b2));
  return {alu(Ops::MUL, like(z.re, 0.25), alu(Ops::LOG1P, r)),
          alu(Ops::MUL, like(z.re, 0.5),
              alu(Ops::ATAN2, alu(Ops::ADD, z.im, z.im), alu(Ops::SUB, alu(Ops::MUL, om, op), b2)))};
}
// atan z = -i atanh(iz)
inline Cx atan(const Cx& z) { return times_minus_i(atanh(times_i(z))); }

// Kahan's formulas ("Branch cuts for complex elementary functions"), from the principal square roots of
// 1 -+ z and z -+ 1: exact on the cuts' sides that the signed zero of the imaginary part names.
inline Cx asin(const Cx& z) {
  UOpPtr one = like(z.re, 1.0);
  Cx s1 = sqrt({alu(Ops::SUB, one, z.re), alu(Ops::NEG, z.im)}), s2 = sqrt({alu(Ops::ADD, one, z.re), z.im});
  return {alu(Ops::ATAN2, z.re, mul(s1, s2).re), alu(Ops::ASINH, mul(conj(s1), s2).im)};
}
inline Cx acos(const Cx& z) {
  UOpPtr one = like(z.re, 1.0);
  Cx s1 = sqrt({alu(Ops::SUB, one, z.re), alu(Ops::NEG, z.im)}), s2 = sqrt({alu(Ops::ADD, one, z.re), z.im});
  UOpPtr re = alu(Ops::ATAN2, s1.re, s2.re);
  return {alu(Ops::ADD, re, re), alu(Ops::ASINH, mul(conj(s2), s1).im)};
}
// asinh z = -i asin(iz)
inline Cx asinh(const Cx& z) { return times_minus_i(asin(times_i(z))); }
inline Cx acosh(const Cx& z) {
  UOpPtr one = like(z.re, 1.0);
  Cx s1 = sqrt({alu(Ops::SUB, z.re, one), z.im}), s2 = sqrt({alu(Ops::ADD, z.re, one), z.im});
  UOpPtr im = alu(Ops::ATAN2, s1.im, s2.re);
  return {alu(Ops::ASINH, mul(conj(s1), s2).re), alu(Ops::ADD, im, im)};
}

// c10::complex's log1p: for |z| < 0.5, log1p of x (2 + x) + y^2 keeps the digits log(1 + z) would lose.
inline Cx log1p(const Cx& z) {
  UOpPtr one = like(z.re, 1.0), xp1 = alu(Ops::ADD, z.re, one);
  UOpPtr theta = alu(Ops::ATAN2, z.im, xp1);
  UOpPtr r = alu(Ops::ADD, alu(Ops::MUL, z.re, alu(Ops::ADD, like(z.re, 2.0), z.re)), alu(Ops::MUL, z.im, z.im));
  UOpPtr near = alu(Ops::MUL, like(z.re, 0.5), alu(Ops::LOG1P, r));
  near = where(alu(Ops::CMPEQ, r, like(r, 0.0)), z.re, near);
  UOpPtr small = alu(Ops::CMPLT, abs(z), like(z.re, 0.5));
  return {where(small, near, alu(Ops::LOG, hypot(xp1, z.im))), theta};
}
// c10::complex's expm1: expm1(x) cos y - 2 sin^2(y / 2) + i exp(x) sin y.
inline Cx expm1(const Cx& z) {
  UOpPtr h = alu(Ops::SIN, alu(Ops::MUL, z.im, like(z.im, 0.5)));
  return {alu(Ops::SUB, alu(Ops::MUL, alu(Ops::EXPM1, z.re), alu(Ops::COS, z.im)),
              alu(Ops::MUL, like(h, 2.0), alu(Ops::MUL, h, h))),
          alu(Ops::MUL, alu(Ops::EXP, z.re), alu(Ops::SIN, z.im))};
}
// log(z) / log(base), part by part (c10::complex's log2 and log10).
inline Cx log_base(const Cx& z, double base) {
  Cx l = log(z);
  UOpPtr d = like(z.re, std::log(base));
  return {alu(Ops::FDIV, l.re, d), alu(Ops::FDIV, l.im, d)};
}
// torch's sigmoid of a complex value: 1 / (1 + exp(-z)).
inline Cx sigmoid(const Cx& z) { return reciprocal(add({like(z.re, 1.0), like(z.re, 0.0)}, exp(neg(z)))); }

// torch's logaddexp of complex values (its helper for logcumsumexp): min and max by real part (a NaN in either
// part of b, then of a, taken as both), log1p(exp(min - max)) + max; NaN for a NaN, min where both real parts
// are -inf, log(exp(min) + exp(max)) where both are +inf.
inline Cx log_add_exp(const Cx& a, const Cx& b) {
  auto pick = [](const UOpPtr& c, const Cx& x, const Cx& y) { return Cx{where(c, x.re, y.re), where(c, x.im, y.im)}; };
  UOpPtr nan_b = isnan(b), nan_a = isnan(a), a_first = alu(Ops::CMPLT, a.re, b.re);
  Cx lo = pick(nan_b, b, pick(nan_a, a, pick(a_first, a, b)));
  Cx hi = pick(nan_b, b, pick(nan_a, a, pick(a_first, b, a)));
  // C's cexp: e^(-inf + iy) is 0 for every y, an infinite or NaN one too
  auto cexp = [&](const Cx& z) {
    Cx e = exp(z);
    UOpPtr vanishes = alu(Ops::CMPEQ, z.re, like(z.re, -INFINITY)), zero = like(z.re, 0.0);
    return pick(vanishes, Cx{zero, zero}, e);
  };
  Cx v = add(log1p(cexp(sub(lo, hi))), hi);
  UOpPtr inf = like(lo.re, INFINITY);
  UOpPtr same_infinity = both(alu(Ops::CMPEQ, alu(Ops::ABS, lo.re), inf), alu(Ops::CMPEQ, lo.re, hi.re));
  Cx at_infinity = pick(alu(Ops::CMPLT, lo.re, like(lo.re, 0.0)), lo, log(add(exp(lo), exp(hi))));
  v = pick(same_infinity, at_infinity, v);
  UOpPtr nan = like(lo.re, NAN);
  return pick(isnan(lo), Cx{nan, nan}, v);
}

} // namespace tiny::complex_math
