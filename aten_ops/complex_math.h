#pragma once
// Complex arithmetic on (real, imaginary) pairs of real UOps. The compiler has no complex type: a complex
// tensor's storage holds its parts interleaved (csrc/tensor_bridge.h: read_complex, write_complex), and
// every complex op is a small function of real UOps here, so its kernels stay real and fuse as any.
// Formulas follow c10::complex and the C library functions torch's CPU kernels call, edge cases included
// where they cost a select (division by zero, zero in sqrt and sgn, overflow in abs).

#include <cmath>

#include "compiler/uop.h"

namespace tiny::complex_math {

struct Cx {
  UOpPtr re, im;
};

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

// sin(a + bi) = sin a cosh b + i cos a sinh b; cos(a + bi) = cos a cosh b - i sin a sinh b.
inline Cx sin(const Cx& z) {
  return {alu(Ops::MUL, alu(Ops::SIN, z.re), alu(Ops::COSH, z.im)),
          alu(Ops::MUL, alu(Ops::COS, z.re), alu(Ops::SINH, z.im))};
}
inline Cx cos(const Cx& z) {
  return {alu(Ops::MUL, alu(Ops::COS, z.re), alu(Ops::COSH, z.im)),
          alu(Ops::NEG, alu(Ops::MUL, alu(Ops::SIN, z.re), alu(Ops::SINH, z.im)))};
}

} // namespace tiny::complex_math
