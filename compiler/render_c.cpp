#include "compiler/render_c.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "compiler/winograd.h"

namespace tiny {

namespace {

// Helpers every kernel may use. float16/bfloat16 live in registers as float and are rounded back
// after each op, as torch's CPU kernels do.
constexpr const char* kPrelude = R"C(#include <math.h>
#include <stdint.h>
#include <string.h>
static inline float tiny_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
  float f;
  if (e == 0) { f = (float)m * 5.9604644775390625e-08f; return sign ? -f : f; }
  x = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112) << 23) | (m << 13));
  memcpy(&f, &x, 4);
  return f;
}
static inline uint16_t tiny_f2h(float f) {
  uint32_t x, sign, ax;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000; ax = x & 0x7fffffffu;
  // NaN keeps its payload (a copy of float16 bits is exact); a payload below half's bits becomes quiet
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (((ax >> 13) & 0x3ffu) ? ((ax >> 13) & 0x3ffu) : 0x200u));
  if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00);
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (ax < 0x38800000u) { float af; memcpy(&af, &ax, 4); return (uint16_t)(sign | (uint32_t)nearbyintf(af * 16777216.0f)); }
  ax += 0xc8000fffu + ((ax >> 13) & 1);
  return (uint16_t)(sign | (ax >> 13));
}
static inline float tiny_bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t tiny_f2bf(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) & 0x7fu ? u >> 16 : (u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static inline float tiny_rh(float f) { return tiny_h2f(tiny_f2h(f)); }
static inline float tiny_rbf(float f) { return tiny_bf2f(tiny_f2bf(f)); }
static inline int64_t tiny_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  int64_t r = 1;
  while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
  return r;
}
/* 2^n for an integer n in [-126, 127] */
static inline __attribute__((always_inline)) float tiny_pow2f(int32_t n) {
  uint32_t u = (uint32_t)(n + 127) << 23;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* The first step of exp(y) for |y| < 2^21: y = n ln2 + r, |r| <= ln2/2 (two-part ln2). n rounds y / ln2 to the
   nearest integer by adding 1.5 * 2^23 (its bits then hold n), with no float-to-int conversion (undefined in C for
   NaN, whose n here is any integer and r NaN). Returns r and sets *n. */
static inline __attribute__((always_inline)) float tiny_exp_reduce(float y, int32_t* n) {
  float t = y * 1.44269504088896341f + 12582912.0f, k = t - 12582912.0f;
  memcpy(n, &t, 4);
  *n -= 0x4b400000;
  float r = y - k * 0.693359375f;
  return r + k * 2.12194440e-4f;
}
/* exp for float, without a libm call so that loops over it vectorize: tiny_exp_reduce, a degree-6 polynomial
   (max error ~1 ulp, as torch's vectorized exp), scaled by 2^n in two halves so that results down to the
   denormals round once. */
static inline __attribute__((always_inline)) float tiny_expf(float x) {
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  int32_t n;
  float r = tiny_exp_reduce(xc, &n);
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  return p * tiny_pow2f(n >> 1) * tiny_pow2f(n - (n >> 1));
}
/* e^y - 1 in parts for y in [-30, 89], as tiny_expm1f and tiny_tanhf combine them: e^y = 2^n (1 + q), q = e^r - 1
   after tiny_exp_reduce, r + r^2 P(r) with P a least-squares fit for relative error (~0.12 ulp). Returns q and
   sets *n. */
static inline __attribute__((always_inline)) float tiny_expm1_parts(float y, int32_t* n) {
  float r = tiny_exp_reduce(y, n);
  float p = 1.3899713521823287e-3f;
  p = p * r + 8.365967310965061e-3f;
  p = p * r + 4.166683927178383e-2f;
  p = p * r + 1.6666549444198608e-1f;
  p = p * r + 0.5f;
  return r + r * r * p;
}
/* expm1 for float, vectorizable (libm's expm1f is a call per element, 11 ns): 2^n q + 2^n - 1 as
   2 (s q + (s - 1/2)) with s = 2^(n - 1), so that n = 128 (x up to 88.72) does not overflow s, one rounding;
   inputs below 2^-24 are their own expm1 (signed zeros, denormals). Max error 1.54 ulp over every float. */
static inline __attribute__((always_inline)) float tiny_expm1f(float x) {
  float xc = x < -30.0f ? -30.0f : x > 89.0f ? 89.0f : x;
  int32_t n;
  float q = tiny_expm1_parts(xc, &n), s = tiny_pow2f(n - 1);
  float y = 2.0f * (s * q + (s - 0.5f));
  return __builtin_fabsf(x) < 0x1p-24f ? x : y;
}
/* tanh for float, vectorizable as tiny_expf: with e^y = e (1 + q) = E for y = -2|x| (tiny_expm1_parts), tanh |x| =
   (1 - E) / (1 + E): below 0.75 as ((1 - e) - e q) / ((1 + e) + e q), each part one rounding; above as
   1 - 2E / (1 + E), one rounding of a small difference from 1 (the quotient of two sums that each round to 1 near
   saturation gave tanh(-9) = -1, whose conversion to an integer differs from torch's -0.99999994: 42% of the floats
   in [0.75, 12) were not correctly rounded, 6.5% now); the sign of x copied on (signed zeros). Max error 1.97 ulp
   over every float (torch's vectorized tanhf, Sleef's, 1). The two forms' operands are chosen before one
   division (the same values: a vector of them ran both divisions, the divider bound; 4M floats, one Sapphire
   Rapids thread: 2.26 -> 1.95 ms). */
static inline __attribute__((always_inline)) float tiny_tanhf(float x) {
  float a = __builtin_fabsf(x), y = -2.0f * a;
  y = y < -30.0f ? -30.0f : y;
  int32_t n;
  float q = tiny_expm1_parts(y, &n), e = tiny_pow2f(n), big_e = e * q + e;
  const _Bool small = a < 0.75f;
  float d = (small ? -e * q + (1.0f - e) : 2.0f * big_e) / (small ? e * q + (1.0f + e) : 1.0f + big_e);
  return __builtin_copysignf(small ? d : 1.0f - d, x);
}
/* erf for float, vectorizable: x P(x^2) below 0.921875, else Q(|x| - 2.2) with its sign, |x| clamped to 3.92 (where
   Q is 1, as erf rounds to from 3.92): P and Q least-squares fits of erf(x) / x and erf(x), their coefficients
   rounded to float one by one, each refitting the rest. No exp and no division (1 - e^(-x^2) Q(1 / (1 + |x| / 2))
   before: gelu of 4M floats, one Sapphire Rapids thread, 2.5 -> 1.45 ms, eager's oneDNN 1.43). Max error 2.63 ulp
   over every float (P's; Q's 1.53; glibc's erff, a call per element, ~1). Inlined always: a kernel's several calls
   otherwise stay calls, and its loop scalar. */
static inline __attribute__((always_inline)) float tiny_erff(float x) {
  float a = __builtin_fabsf(x), s = x * x;
  float p = -6.024533650e-04f;
  p = p * s + 5.000880454e-03f;
  p = p * s + -2.677294612e-02f;
  p = p * s + 1.128203869e-01f;
  p = p * s + -3.761252463e-01f;
  p = p * s + 1.128379107e+00f;
  float u = (a > 3.92f ? 3.92f : a) - 2.2f; /* NaN stays NaN */
  float q = 1.250622290e-06f;
  q = q * u + -4.536062534e-06f;
  q = q * u + -1.081154460e-05f;
  q = q * u + 7.487703988e-05f;
  q = q * u + -6.988027599e-05f;
  q = q * u + -3.439907159e-04f;
  q = q * u + 1.182209118e-03f;
  q = q * u + -1.114237588e-03f;
  q = q * u + -2.606497146e-03f;
  q = q * u + 1.149204187e-02f;
  q = q * u + -2.185039409e-02f;
  q = q * u + 2.581361309e-02f;
  q = q * u + -1.962905936e-02f;
  q = q * u + 8.922223002e-03f;
  q = q * u + 9.981371760e-01f;
  return a < 0.921875f ? x * p : __builtin_copysignf(q, x);
}
/* log for float, vectorizable: the exponent and a mantissa in [sqrt(1/2), sqrt(2)) from the bits
   (denormals scaled first), a degree-9 polynomial (max error ~0.8 ulp); 0, inf, negatives and NaN as
   libm gives them. */
static inline __attribute__((always_inline)) float tiny_logf(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  int32_t sub = u < 0x00800000u;
  float xs = sub ? x * 8388608.0f : x;
  memcpy(&u, &xs, 4);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 126 - (sub ? 23 : 0);
  uint32_t mu = (u & 0x007fffffu) | 0x3f000000u;
  float m;
  memcpy(&m, &mu, 4);
  int32_t lo = m < 0.707106781186547524f;
  e -= lo;
  m = lo ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float y = 7.0376836292E-2f;
  y = y * m - 1.1514610310E-1f;
  y = y * m + 1.1676998740E-1f;
  y = y * m - 1.2420140846E-1f;
  y = y * m + 1.4249322787E-1f;
  y = y * m - 1.6668057665E-1f;
  y = y * m + 2.0000714765E-1f;
  y = y * m - 2.4999993993E-1f;
  y = y * m + 3.3333331174E-1f;
  y = y * m * z;
  float fe = (float)e;
  y = y + -2.12194440e-4f * fe;
  y = y + -0.5f * z;
  float r = m + y + 0.693359375f * fe;
  r = x == 0.0f ? -INFINITY : r;
  r = x == INFINITY ? INFINITY : r;
  return x < 0.0f || x != x ? NAN : r;
}
/* log1p for float, vectorizable: log(u) for u = 1 + x, plus the rounding of u, (x - (u - 1)) / u (exact
   when u is, so 0 at x = -1); signed zeros, +inf and NaN are their own log1p. Max error 1.44 ulp over every float
   (libm's log1pf, a call per element, 10 ns). */
static inline __attribute__((always_inline)) float tiny_log1pf(float x) {
  float u = 1.0f + x, d = x - (u - 1.0f);
  float r = tiny_logf(u) + (d == 0.0f ? 0.0f : d / u);
  return x == 0.0f || !(x < INFINITY) ? x : r;
}
/* x = k pi/2 + r for a float x below 2^27, as a double r (|r| <= pi/4 and a little) and k mod 4 in *q, for sin,
   cos and tan: k rounds x 2/pi and r = x - k pi/2 with pi/2 in two doubles through fused multiply-adds (one
   rounding). */
static inline __attribute__((always_inline)) double tiny_trig_reduce_near(float x, int32_t* q) {
  double xd = x, t = xd * 0.6366197723675814 + 6755399441055744.0, k = t - 6755399441055744.0;
  int64_t kt;
  memcpy(&kt, &t, 8);
  *q = (int32_t)kt;
  return __builtin_fma(-k, 6.123233995736766e-17, __builtin_fma(-k, 1.5707963267948966, xd));
}
/* The same for every float: above 2^27, x = m 2^s (m 24 bits, s in [4, 104]) and x 2/pi mod 4 in 2.62 fixed point
   is m times the 96 bits of 2/pi from bit s - 1 on (three of the four words below, shifted), mod 2^64
   (Payne-Hanek). Both are computed and one selected, without a table (a gather a lane: sin 1.78 -> 1.43 ns an
   element, one thread), so that a loop over them vectorizes; inf and NaN give NaN. */
static inline __attribute__((always_inline)) double tiny_trig_reduce(float x, int32_t* q) {
  int32_t qn;
  double r = tiny_trig_reduce_near(x, &qn);
  uint32_t u;
  memcpy(&u, &x, 4);
  int32_t s = (int32_t)((u >> 23) & 0xffu) - 150;
  s = s < 4 ? 4 : s > 104 ? 104 : s;
  int32_t b = s - 2, o = b & 63;
  uint64_t w0 = b < 64 ? 0xa2f9836e4e441529ull : 0xfc2757d1f534ddc0ull;
  uint64_t w1 = b < 64 ? 0xfc2757d1f534ddc0ull : 0xdb6295993c439041ull;
  uint64_t w2 = b < 64 ? 0xdb6295993c439041ull : 0xfe5163abdebbc561ull;
  uint64_t hi = w0 << o | (w1 >> 1) >> (63 - o), lo = (w1 << o | (w2 >> 1) >> (63 - o)) >> 32;
  uint64_t m = (u & 0x007fffffu) | 0x00800000u, f = m * hi + ((m * lo) >> 32), kb = (f + (1ull << 61)) >> 62;
  double rb = (double)(int64_t)(f - (kb << 62)) * 3.4061215800865545e-19;
  int32_t big = __builtin_fabsf(x) >= 134217728.0f;
  *q = big ? ((u >> 31) ? -(int32_t)kb : (int32_t)kb) : qn;
  return big ? (x - x) + ((u >> 31) ? -rb : rb) : r;
}
/* sin r = r (1 + z S(z)) and cos r = 1 (1 + z C(z)) for |r| <= pi/4 in double, z = r^2, S and C least-squares
   fits for relative error (2^-37 and 2^-43; C's constant term -1/2): one evaluation whose coefficients are
   selected, not both (sin 1.43 -> 1.35 ns an element, one thread). r (1 + ...) keeps the sign of a zero. */
static inline __attribute__((always_inline)) double tiny_sincos_poly(double r, int32_t cosine) {
  double z = r * r, p = cosine ? -2.7206139024221805e-07 : 0.0;
  p = p * z + (cosine ? 2.479946690803268e-05 : 2.7181060459669416e-06);
  p = p * z + (cosine ? -0.0013888883536740061 : -0.00019839312004495162);
  p = p * z + (cosine ? 0.041666666620107186 : 0.008333329310657025);
  p = p * z + (cosine ? -0.5 : -0.16666666640950611);
  return (cosine ? 1.0 : r) * (1.0 + z * p);
}
/* The fast forms of sin, cos and tan, for the strips of an elementwise loop (see trig_strips in render_c.cpp): each
   sets *big where its argument needs the general form, and the strip then runs again with it. sin and cos, below
   2^18: x = k pi/2 + rh + rl in float, pi/2 in three floats (x - k c1 is exact, k c2 is added as a two-sum of its
   two-product's high part, and its low part, the rounding and k c3 go to rl), then Cephes' float polynomials with rl
   added to the first order: max 1.15 ulp over every float below 2^18 (Sleef's, torch's, 1), without the double
   reduction and the Payne-Hanek that every argument paid (4M floats, one Sapphire Rapids thread in a C harness: 5.3
   -> 1.7 ms). tan, below 2^18 too: the same reduction, then tan r = r + r z P(z) for z = r^2 (P a least-squares fit
   for relative error, 1.3e-9) with rl added to the first order, as an exact sum yh + yl, whose negated reciprocal
   (odd k) is one division and one Newton correction for yl: max 1.24 ulp over every float below 2^18 (a quotient of the float sin and
   cos polynomials was 2.8 ulp; the double reduction, polynomials and division of every argument, 0.50 ulp, took 3.85
   ms for 4M floats, one Sapphire Rapids thread in a C harness, this 2.07). */
static inline __attribute__((always_inline)) float tiny_trig_reduce_f(float x, float* rl, int32_t* q) {
#pragma clang fp contract(off) /* the two-sum needs ph rounded: k c2 must not fuse into r1 - ph */
  float t = x * 0.63661977236758134f + 12582912.0f, k = t - 12582912.0f;
  memcpy(q, &t, 4);
  float r1 = __builtin_fmaf(-k, 1.5707963705062866f, x);
  float ph = k * -4.371138828673793e-08f, pl = __builtin_fmaf(k, -4.371138828673793e-08f, -ph);
  float rh = r1 - ph, bb = rh - r1, e = (r1 - (rh - bb)) + (-ph - bb);
  *rl = __builtin_fmaf(-k, -1.7151245100058819e-15f, e - pl);
  return rh;
}
static inline __attribute__((always_inline)) float tiny_sincos_polyf(float rh, float rl, int32_t cosine) {
  float s = rh * rh, p = cosine ? 2.443315711809948E-5f : -1.9515295891E-4f;
  p = p * s + (cosine ? -1.388731625493765E-3f : 8.3321608736E-3f);
  p = p * s + (cosine ? 4.166664568298827E-2f : -1.6666654611E-1f);
  return cosine ? 1.0f + (s * (p * s - 0.5f) - rh * rl) : rh + (rl + rh * s * p);
}
static inline __attribute__((always_inline)) float tiny_sinf_fast(int32_t* big, float x) {
  *big |= __builtin_fabsf(x) >= 262144.0f;
  float rl;
  int32_t q;
  float rh = tiny_trig_reduce_f(x, &rl, &q), v = tiny_sincos_polyf(rh, rl, q & 1);
  v = (q & 2) ? -v : v;
  return __builtin_fabsf(x) < 0x1p-12f ? x : v; /* sin x rounds to x there: signed zeros kept */
}
static inline __attribute__((always_inline)) float tiny_cosf_fast(int32_t* big, float x) {
  *big |= __builtin_fabsf(x) >= 262144.0f;
  float rl;
  int32_t q;
  float rh = tiny_trig_reduce_f(x, &rl, &q), v = tiny_sincos_polyf(rh, rl, (q & 1) == 0);
  return ((q + 1) & 2) ? -v : v;
}
static inline __attribute__((always_inline)) float tiny_tanf_fast(int32_t* big, float x) {
  *big |= __builtin_fabsf(x) >= 262144.0f;
  float rl;
  int32_t q;
  float rh = tiny_trig_reduce_f(x, &rl, &q), z = rh * rh, p = 4.390044433686676e-3f;
  p = p * z + 6.233860229526433e-5f;
  p = p * z + 1.0856681928946664e-2f;
  p = p * z + 2.1274370595166018e-2f;
  p = p * z + 5.406138322420094e-2f;
  p = p * z + 1.3332650824494424e-1f;
  p = p * z + 3.333335010558874e-1f;
  /* tan(rh + rl) = yh + yl exactly as a sum (|c| < |rh|); -1 / (yh + yl) = -(d + d e), e the residual of d */
  float c = rh * z * p + (rl + rl * z), yh = rh + c, yl = c - (yh - rh);
  float d = 1.0f / yh, e = __builtin_fmaf(-yh, d, 1.0f) - yl * d;
  float v = (q & 1) ? -__builtin_fmaf(d, e, d) : yh;
  return __builtin_fabsf(x) < 0x1p-12f ? x : v; /* tan x rounds to x there: signed zeros kept */
}
/* sin, cos and tan for float, vectorizable (libm's are a call per element, 3.6 ns an element): sin (k pi/2 + r)
   is sin r, cos r, -sin r or -cos r by k mod 4. sin and cos below 2^18 are their fast forms' (above), so that a value
   rounds the same in every kernel that computes it (a strip's fast loop, a strip with a huge argument, a kernel
   without strips), and so is tan below 2^18; above, one rounding of a double: 0.50 ulp. */
static inline __attribute__((always_inline)) float tiny_sinf(float x) {
  int32_t q, near = 0;
  double r = tiny_trig_reduce(x, &q), v = tiny_sincos_poly(r, q & 1);
  float f = tiny_sinf_fast(&near, x);
  return __builtin_fabsf(x) < 262144.0f ? f : (float)((q & 2) ? -v : v);
}
static inline __attribute__((always_inline)) float tiny_cosf(float x) {
  int32_t q, near = 0;
  double r = tiny_trig_reduce(x, &q), v = tiny_sincos_poly(r, (q & 1) == 0);
  float f = tiny_cosf_fast(&near, x);
  return __builtin_fabsf(x) < 262144.0f ? f : (float)(((q + 1) & 2) ? -v : v);
}
static inline __attribute__((always_inline)) float tiny_tanf(float x) {
  int32_t q, near = 0;
  double r = tiny_trig_reduce(x, &q), s = tiny_sincos_poly(r, 0), c = tiny_sincos_poly(r, 1);
  float f = tiny_tanf_fast(&near, x);
  return __builtin_fabsf(x) < 262144.0f ? f : (float)(((q & 1) ? -c : s) / ((q & 1) ? s : c)); /* one division */
}
/* pow for float, vectorizable (libm's powf is a call per element, 4.5 ns an element; this 1.3, one thread): 2^(y
   log2 |x|) in double, log2 |x| = e + log(m) / ln2 with log(m) = 2 atanh(s), s = (m - 1) / (m + 1) for m in
   [sqrt(1/2), sqrt(2)) (a fit in s^2, 2^-45), 2^w = 2^n 2^g for |g| <= 1/2 (a fit, 2^-40), one rounding: 0.50 ulp
   in 168M pairs. C99's special operands (pow(x, 0) = pow(1, y) = 1, pow(-1, +-inf) = 1, zeros and infinities,
   odd integer exponents of negative bases, NaN for a non-integer power of a finite negative base) are selected
   after. */
static inline __attribute__((always_inline)) float tiny_powf(float x, float y) {
  float ax = __builtin_fabsf(x), ay = __builtin_fabsf(y);
  uint32_t u;
  memcpy(&u, &ax, 4);
  int32_t sub = u < 0x00800000u;
  float xs = sub ? ax * 8388608.0f : ax;
  memcpy(&u, &xs, 4);
  int32_t e = (int32_t)(u >> 23) - 127 - (sub ? 23 : 0);
  uint32_t mu = (u & 0x007fffffu) | 0x3f800000u;
  float mf;
  memcpy(&mf, &mu, 4);
  int32_t half = mf > 1.41421356f;
  double m = half ? 0.5 * (double)mf : (double)mf, f = m - 1.0, s = f / (2.0 + f), z = s * s;
  double p = 0.1958371462837684;
  p = p * z + 0.22176236987419318;
  p = p * z + 0.2857210745935316;
  p = p * z + 0.3999999564487609;
  p = p * z + 0.6666666667569794;
  double lg = (double)(e + half) + (2.0 * s + s * z * p) * 1.4426950408889634;
  lg = ax == 0.0f ? -INFINITY : ax == INFINITY ? INFINITY : lg;
  double w = (double)y * lg;
  w = w < -160.0 ? -160.0 : w > 160.0 ? 160.0 : w;
  double t = w + 6755399441055744.0, n = t - 6755399441055744.0, g = w - n;
  int64_t nb;
  memcpy(&nb, &t, 8);
  double q = 1.3180393423073352e-06;
  q = q * g + 1.530913983452837e-05;
  q = q * g + 0.00015403818523032677;
  q = q * g + 0.0013333454969205172;
  q = q * g + 0.00961812862607047;
  q = q * g + 0.05550410935059453;
  q = q * g + 0.24022650698068254;
  q = q * g + 0.6931471805483067;
  uint64_t bits = (uint64_t)(nb + 1023) << 52;
  double scale;
  memcpy(&scale, &bits, 8);
  float r = (float)((1.0 + g * q) * scale);
  int32_t yi = (int32_t)(ay < 16777216.0f ? y : 0.0f); /* floats from 2^24 on are even integers */
  int32_t integer = ay >= 16777216.0f || (float)yi == y, odd = (float)yi == y && (yi & 1);
  r = __builtin_signbit(x) && odd ? -r : r;
  r = (x < 0.0f && x > -INFINITY && !integer) || x != x ? NAN : r;
  return (ax == 1.0f && ay == INFINITY) || x == 1.0f || y == 0.0f ? 1.0f : r;
}
#define TINY_IDIV(a, b) ((b) == 0 ? 0 : (b) == -1 ? -(a) : (a) / (b))
#define TINY_IMOD(a, b) ((b) == 0 || (b) == -1 ? 0 : (a) % (b))
int tiny_errors; /* set when a kernel divided an integer by zero: the sync raises ZeroDivisionError */
#define TINY_ZERO_DIVISION (__atomic_store_n(&tiny_errors, 1, __ATOMIC_RELAXED), 0)
#define TINY_IDIV_CHECKED(a, b) ((b) == 0 ? TINY_ZERO_DIVISION : TINY_IDIV(a, b))
#define TINY_IMOD_CHECKED(a, b) ((b) == 0 ? TINY_ZERO_DIVISION : TINY_IMOD(a, b))
/* NaN-propagating max and min; `|`, not `||`: with both NaN tests evaluated a scalar max compiles to
   selects, not branches that mispredict on data (a 2x2 max pool of random values ran 2x slower). Of equal
   operands, the first, as std::max and std::min (the CPU's clamp and relu keep a -0.0 input's sign) */
#define TINY_FMAX(a, b) (((a) != (a)) | ((b) != (b)) ? (a) + (b) : (a) < (b) ? (b) : (a))
#define TINY_FMIN(a, b) (((a) != (a)) | ((b) != (b)) ? (a) + (b) : (b) < (a) ? (b) : (a))
)C";

const char* reg_type(DType dt) {
  switch (dt) {
  case DType::Float16:
  case DType::BFloat16:
  case DType::Float32:
    return "float";
  case DType::Float64:
    return "double";
  default:
    return info(dt).c_name.data();
  }
}

bool is_half(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16; }
bool is_f64(DType dt) { return dt == DType::Float64; }
int bits(DType dt) { return static_cast<int>(itemsize(dt) * 8); }

std::string literal(const UOpPtr& c) {
  DType dt = c->dtype;
  char buf[64];
  if (is_float(dt)) {
    double v = c->const_f();
    if (std::isnan(v)) return is_f64(dt) ? "(double)NAN" : "NAN";
    if (std::isinf(v)) return std::string(v < 0 ? "-" : "") + (is_f64(dt) ? "(double)INFINITY" : "INFINITY");
    if (is_f64(dt))
      std::snprintf(buf, sizeof buf, "%.17e", v);
    else
      std::snprintf(buf, sizeof buf, "%.9ef", v);
    return buf;
  }
  int64_t v = c->const_i();
  if (dt == DType::Bool) return v ? "1" : "0";
  if (dt == DType::UInt64) { // its bit pattern: above INT64_MAX the int64_t is negative
    std::snprintf(buf, sizeof buf, "((uint64_t)%lluULL)", static_cast<unsigned long long>(v));
    return buf;
  }
  if (v == INT64_MIN) return "INT64_MIN";
  std::snprintf(buf, sizeof buf, "((%s)%lldLL)", reg_type(dt), static_cast<long long>(v));
  return buf;
}

const char* fsuffix(DType dt) { return is_f64(dt) ? "" : "f"; }

// Vector lanes: one ext_vector_type per register type (bool lanes are bytes).
// (element type, vector type name): the register types, and float16's storage type, whose vectors convert
// to float in one instruction where the CPU has one (F16C: vcvtph2ps).
constexpr std::pair<const char*, const char*> kVectorTypes[] = {
    {"float", "tv_float"},     {"double", "tv_double"},   {"int8_t", "tv_int8_t"},   {"int16_t", "tv_int16_t"},
    {"int32_t", "tv_int32_t"}, {"int64_t", "tv_int64_t"}, {"uint8_t", "tv_uint8_t"}, {"__fp16", "tv_half"}};

// The vector types of the unsigned dtypes torch supports for few ops: declared only by a kernel that uses them,
// so that every other kernel's source (and its compiled program in the disk cache) stays as it was.
constexpr std::pair<const char*, const char*> kUnsignedVectorTypes[] = {
    {"uint16_t", "tv_uint16_t"}, {"uint32_t", "tv_uint32_t"}, {"uint64_t", "tv_uint64_t"}};

// Vector helpers of kernels with lanes (after their vector types): tiny_f2bf and tiny_rbf on every lane
// at once (bfloat16's bits in the low half of each int32).
constexpr const char* kVectorPrelude = R"C(static inline tv_int32_t tiny_f2bf_v(tv_float f) {
  tv_int32_t u = (tv_int32_t)f, hi = (u >> 16) & 0xffff;
  tv_int32_t nan = (hi & 0x7f) != 0 ? hi : hi | 0x40;
  return (u & 0x7fffffff) > 0x7f800000 ? nan : ((u + 0x7fff + (hi & 1)) >> 16) & 0xffff;
}
static inline tv_float tiny_rbf_v(tv_float f) { return (tv_float)(tiny_f2bf_v(f) * 65536); }
)C";
constexpr const char* kVectorHelpers[] = {"tiny_f2bf_v", "tiny_rbf_v"};

// Sixteen rows of up to 8 contiguous floats from 8 float32 vectors (a block of 8 x 16, transposed in
// registers, tiny_rows): row l holds lane l of r0, r1, ... and is stored at o + s * l, its first n floats
// (tiny_store_rows; tiny_store_rows_bf16 the same of bfloat16 bits, 2 bytes an element). A kernel
// whose lanes stride through its output (a convolution's NCHW result, lanes along the channels) and whose
// register block holds consecutive positions stores 16 rows instead of 16 * n scalars (the demo's conv2d
// kernel: 12.4 -> 11.1 ms, one thread, AVX-512; with AVX2, as two ymm registers a vector, on a Zen 3 its 28 x 28
// forward and input-gradient kernels 26.6 -> 23.7 and 31.1 -> 28.9 ms, the first layer's 4.03 -> 2.57).
constexpr const char* kStoreRows = R"C(typedef float tv_float8 __attribute__((ext_vector_type(8)));
typedef int16_t tv_int16_8 __attribute__((ext_vector_type(8)));
/* c[q] holds two rows, lanes 0-7 and 8-15: rows (0, 4), (8, 12), (1, 5), (9, 13), (2, 6), (10, 14), (3, 7), (11, 15) */
static const int tiny_rows_at[8][2] = {{0, 4}, {8, 12}, {1, 5}, {9, 13}, {2, 6}, {10, 14}, {3, 7}, {11, 15}};
static inline __attribute__((always_inline)) void tiny_rows(tv_float* c, tv_float r0, tv_float r1, tv_float r2,
    tv_float r3, tv_float r4, tv_float r5, tv_float r6, tv_float r7) {
  /* pairs of rows interleaved by lanes, then by pairs of lanes, then by quads */
  tv_float a0 = __builtin_shufflevector(r0, r1, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  tv_float a1 = __builtin_shufflevector(r0, r1, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  tv_float a2 = __builtin_shufflevector(r2, r3, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  tv_float a3 = __builtin_shufflevector(r2, r3, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  tv_float a4 = __builtin_shufflevector(r4, r5, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  tv_float a5 = __builtin_shufflevector(r4, r5, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  tv_float a6 = __builtin_shufflevector(r6, r7, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  tv_float a7 = __builtin_shufflevector(r6, r7, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
  tv_float b0 = __builtin_shufflevector(a0, a2, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
  tv_float b1 = __builtin_shufflevector(a0, a2, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  tv_float b2 = __builtin_shufflevector(a1, a3, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
  tv_float b3 = __builtin_shufflevector(a1, a3, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  tv_float b4 = __builtin_shufflevector(a4, a6, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
  tv_float b5 = __builtin_shufflevector(a4, a6, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  tv_float b6 = __builtin_shufflevector(a5, a7, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
  tv_float b7 = __builtin_shufflevector(a5, a7, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  c[0] = __builtin_shufflevector(b0, b4, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  c[1] = __builtin_shufflevector(b0, b4, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  c[2] = __builtin_shufflevector(b2, b6, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  c[3] = __builtin_shufflevector(b2, b6, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  c[4] = __builtin_shufflevector(b1, b5, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  c[5] = __builtin_shufflevector(b1, b5, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  c[6] = __builtin_shufflevector(b3, b7, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  c[7] = __builtin_shufflevector(b3, b7, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}
/* rows stored where bit l of m is set: 0xffff, or the lanes of a short lane loop (see lower_transposed_copy) */
static inline __attribute__((always_inline)) void tiny_store_rows(float* o, int64_t s, int n, unsigned m,
    tv_float r0, tv_float r1, tv_float r2, tv_float r3, tv_float r4, tv_float r5, tv_float r6, tv_float r7) {
  tv_float c[8];
  tiny_rows(c, r0, r1, r2, r3, r4, r5, r6, r7);
  for (int q = 0; q < 8; q++) {
    tv_float8 lo = __builtin_shufflevector(c[q], c[q], 0, 1, 2, 3, 4, 5, 6, 7);
    tv_float8 hi = __builtin_shufflevector(c[q], c[q], 8, 9, 10, 11, 12, 13, 14, 15);
    if (m >> tiny_rows_at[q][0] & 1) memcpy(o + s * tiny_rows_at[q][0], &lo, (size_t)n * sizeof(float));
    if (m >> tiny_rows_at[q][1] & 1) memcpy(o + s * tiny_rows_at[q][1], &hi, (size_t)n * sizeof(float));
  }
}
/* bfloat16 bits in the low halves of int32 lanes (tiny_f2bf_v's), transposed as 32-bit lanes, stored as rows
   of 2-byte elements */
static inline __attribute__((always_inline)) void tiny_store_rows_bf16(uint16_t* o, int64_t s, int n, unsigned m,
    tv_int32_t r0, tv_int32_t r1, tv_int32_t r2, tv_int32_t r3, tv_int32_t r4, tv_int32_t r5, tv_int32_t r6,
    tv_int32_t r7) {
  tv_float c[8];
  tiny_rows(c, (tv_float)r0, (tv_float)r1, (tv_float)r2, (tv_float)r3, (tv_float)r4, (tv_float)r5, (tv_float)r6,
      (tv_float)r7);
  for (int q = 0; q < 8; q++) {
    tv_int32_t bits = (tv_int32_t)c[q];
    tv_int16_8 lo = __builtin_convertvector(__builtin_shufflevector(bits, bits, 0, 1, 2, 3, 4, 5, 6, 7), tv_int16_8);
    tv_int16_8 hi = __builtin_convertvector(__builtin_shufflevector(bits, bits, 8, 9, 10, 11, 12, 13, 14, 15), tv_int16_8);
    if (m >> tiny_rows_at[q][0] & 1) memcpy(o + s * tiny_rows_at[q][0], &lo, (size_t)n * sizeof(uint16_t));
    if (m >> tiny_rows_at[q][1] & 1) memcpy(o + s * tiny_rows_at[q][1], &hi, (size_t)n * sizeof(uint16_t));
  }
}
)C";
constexpr const char* kStoreRowsNames[] = {"tv_float8", "tv_int16_8",      "tiny_rows_at",
                                           "tiny_rows", "tiny_store_rows", "tiny_store_rows_bf16"};

std::string lane_elem(DType dt) { return dt == DType::Bool ? "uint8_t" : reg_type(dt); }
std::string vec_type(DType dt) { return "tv_" + lane_elem(dt); }

// Ops computed on whole vectors (the others lane by lane): C's arithmetic on these types means the
// same on vectors.
bool native_lanes(DType dt) {
  return dt == DType::Float32 || dt == DType::Float64 || dt == DType::Int32 || dt == DType::Int64;
}

// Whether dt's register holds its bits as they are in memory (not a bool, not a half type's float).
bool plain_bits(DType dt) { return dt != DType::Bool && !is_half(dt); }

// Whether a buffer of dt holds its register type (loads and stores of whole vectors).
bool plain_storage(DType dt) { return dt != DType::Bool && reg_type(dt) == std::string(info(dt).c_name); }

// Rounds a float register value to the precision of a half dtype.
std::string round_to(DType dt, const std::string& e) {
  if (dt == DType::Float16) return "tiny_rh(" + e + ")";
  if (dt == DType::BFloat16) return "tiny_rbf(" + e + ")";
  return e;
}

std::string to_storage(DType dt, const std::string& e) {
  if (dt == DType::Float16) return "tiny_f2h(" + e + ")";
  if (dt == DType::BFloat16) return "tiny_f2bf(" + e + ")";
  return e;
}

std::string from_storage(DType dt, const std::string& e) {
  if (dt == DType::Bool) return "(" + e + " != 0)"; // a byte other than 0 or 1 (a view(bool)) reads as true
  if (dt == DType::Float16) return "tiny_h2f(" + e + ")";
  if (dt == DType::BFloat16) return "tiny_bf2f(" + e + ")";
  return e;
}

std::string reduce_identity(Ops op, DType dt) {
  bool fl = is_float(dt);
  std::string t = std::string("(") + reg_type(dt) + ")";
  switch (op) {
  case Ops::ADD:
  case Ops::XOR:
    return t + "0";
  case Ops::MUL:
    return t + "1";
  case Ops::MAX:
    if (dt == DType::Bool) return "0";
    if (fl) return t + "-INFINITY";
    return info(dt).is_signed ? t + "(-" + std::to_string((uint64_t{1} << (bits(dt) - 1)) - 1) + "LL - 1)" : t + "0";
  case Ops::MIN:
    if (dt == DType::Bool) return "1";
    if (fl) return t + "INFINITY";
    return info(dt).is_signed ? t + std::to_string((uint64_t{1} << (bits(dt) - 1)) - 1) + "LL"
                              : t + std::to_string(UINT64_MAX >> (64 - bits(dt))) + "ULL";
  default:
    throw std::logic_error("render_c: bad reduce op");
  }
}

// Whether n is a float32 exp, log, tanh, erf, expm1, log1p, sin, cos, tan or pow: a polynomial of the prelude.
bool prelude_polynomial(const UOpPtr& n) {
  static constexpr std::array polynomial{Ops::EXP,   Ops::LOG, Ops::TANH, Ops::ERF, Ops::EXPM1,
                                         Ops::LOG1P, Ops::SIN, Ops::COS,  Ops::TAN, Ops::POW};
  return is_float(n->dtype) && n->dtype != DType::Float64 && std::ranges::find(polynomial, n->op) != polynomial.end();
}

std::string render_cast(DType from, DType to, const std::string& a) {
  if (to == DType::Bool) return "(" + a + " != 0)";
  if (is_float(to)) {
    if (is_half(to)) return round_to(to, "(float)" + a);
    return std::string("(") + reg_type(to) + ")" + a;
  }
  if (is_float(from) && (to == DType::UInt32 || to == DType::UInt64))
    return float_to_unsigned(a, from, to, reg_type(to), "int32_t", "int64_t");
  if (is_float(from)) return float_to_int(a, is_f64(from), itemsize(to) == 8, reg_type(to), "int32_t", "int64_t");
  return std::string("(") + reg_type(to) + ")" + a;
}

std::string render_unary(Ops op, DType dt, const std::string& a) {
  const char* f = fsuffix(dt);
  auto math = [&](const char* fn) { return std::string(fn) + f + "(" + a + ")"; };
  switch (op) {
  case Ops::NEG:
    return dt == DType::Bool ? "!" + a : "-" + a;
  case Ops::NOT:
    return "!" + a;
  case Ops::BITNOT:
    return dt == DType::Bool ? "!" + a : "~" + a;
  case Ops::ABS:
    if (is_unsigned(dt)) return a;
    return is_float(dt) ? math("fabs") : "(" + a + " < 0 ? -" + a + " : " + a + ")";
  case Ops::SQRT:
    return math("sqrt");
  case Ops::EXP:
    return is_f64(dt) ? math("exp") : "tiny_expf(" + a + ")";
  case Ops::EXP2:
    return math("exp2");
  case Ops::LOG:
    return is_f64(dt) ? math("log") : "tiny_logf(" + a + ")";
  case Ops::LOG2:
    return math("log2");
  case Ops::SIN:
    return is_f64(dt) ? math("sin") : "tiny_sinf(" + a + ")";
  case Ops::COS:
    return is_f64(dt) ? math("cos") : "tiny_cosf(" + a + ")";
  case Ops::TAN:
    return is_f64(dt) ? math("tan") : "tiny_tanf(" + a + ")";
  case Ops::TANH:
    return is_f64(dt) ? math("tanh") : "tiny_tanhf(" + a + ")";
  case Ops::ERF:
    return is_f64(dt) ? math("erf") : "tiny_erff(" + a + ")";
  case Ops::FLOOR:
    return math("floor");
  case Ops::CEIL:
    return math("ceil");
  case Ops::RINT:
    return math("nearbyint");
  case Ops::TRUNC:
    return math("trunc");
  case Ops::LOG1P:
    return is_f64(dt) ? math("log1p") : "tiny_log1pf(" + a + ")";
  case Ops::EXPM1:
    return is_f64(dt) ? math("expm1") : "tiny_expm1f(" + a + ")";
  case Ops::ASIN:
    return math("asin");
  case Ops::ACOS:
    return math("acos");
  case Ops::ATAN:
    return math("atan");
  case Ops::SINH:
    return math("sinh");
  case Ops::COSH:
    return math("cosh");
  case Ops::ASINH:
    return math("asinh");
  case Ops::ACOSH:
    return math("acosh");
  case Ops::ATANH:
    return math("atanh");
  case Ops::ERFC:
    return math("erfc");
  case Ops::LGAMMA:
    return math("lgamma");
  case Ops::RECIP:
    return std::string(is_f64(dt) ? "1.0" : "1.0f") + " / " + a;
  default:
    throw std::logic_error(std::string("render_c: no unary ") + op_name(op));
  }
}

std::string render_binary(Ops op, DType dt, DType in, const std::string& a, const std::string& b) {
  bool fl = is_float(in);
  switch (op) {
  case Ops::ADD:
    return a + " + " + b;
  case Ops::SUB:
    return a + " - " + b;
  case Ops::MUL:
    // uint16 operands promote to int, whose product can pass INT_MAX: multiply as unsigned
    return in == DType::UInt16 ? "(uint32_t)" + a + " * " + b : a + " * " + b;
  case Ops::FDIV:
    return a + " / " + b;
  case Ops::IDIV:
    return is_unsigned(in) ? unsigned_division(Ops::IDIV, a, b, "0") : "TINY_IDIV(" + a + ", " + b + ")";
  case Ops::MOD:
    if (is_unsigned(in)) return unsigned_division(Ops::MOD, a, b, "0");
    return fl ? std::string("fmod") + fsuffix(in) + "(" + a + ", " + b + ")" : "TINY_IMOD(" + a + ", " + b + ")";
  case Ops::POW:
    if (!fl) return "tiny_ipow(" + a + ", " + b + ")";
    return is_f64(in) ? "pow(" + a + ", " + b + ")" : "tiny_powf(" + a + ", " + b + ")";
  case Ops::ATAN2:
    return std::string("atan2") + fsuffix(in) + "(" + a + ", " + b + ")";
  case Ops::MAX:
    return fl ? "TINY_FMAX(" + a + ", " + b + ")" : "(" + a + " > " + b + " ? " + a + " : " + b + ")";
  case Ops::MIN:
    return fl ? "TINY_FMIN(" + a + ", " + b + ")" : "(" + a + " < " + b + " ? " + a + " : " + b + ")";
  case Ops::CMPLT:
    return a + " < " + b;
  case Ops::CMPLE:
    return a + " <= " + b;
  case Ops::CMPEQ:
    return a + " == " + b;
  case Ops::CMPNE:
    return a + " != " + b;
  case Ops::AND:
    return a + " & " + b;
  case Ops::OR:
    return a + " | " + b;
  case Ops::XOR:
    return a + " ^ " + b;
  case Ops::SHL: {
    // torch: shifting by a negative amount or by the width or more gives 0
    std::string w = std::to_string(bits(dt));
    return "(" + b + " < 0 || " + b + " >= " + w + " ? 0 : (" + reg_type(dt) + ")((uint64_t)" + a + " << " + b + "))";
  }
  case Ops::SHR: {
    std::string w = std::to_string(bits(dt));
    return "(" + b + " < 0 || " + b + " >= " + w + " ? (" + a + " < 0 ? -1 : 0) : " + a + " >> " + b + ")";
  }
  default:
    throw std::logic_error(std::string("render_c: no binary ") + op_name(op));
  }
}

// Each node is emitted in the innermost open loop among the loops it depends on, so work that does
// not vary in a loop is computed before that loop starts; a REDUCE opens a loop of its own.
class CRenderer {
public:
  explicit CRenderer(const Kernel& k) : k_(k) {}

  std::string render(const std::string& fn) {
    for (const UOpPtr& n : toposort(k_.ast)) {
      compute_deps(n);
      if (n->op == Ops::REDUCE) reduces_.push_back(n);
    }
    if (hold_reduces_in_their_stores_loops()) {
      deps_.clear();
      for (const UOpPtr& n : toposort(k_.ast))
        compute_deps(n);
    }
    scopes_.resize(k_.loops.size() + 1);
    for (size_t d = 0; d <= k_.loops.size(); d++) {
      scopes_[d].range = d == 0 ? -1 : static_cast<int64_t>(d - 1);
      scopes_[d].depth = static_cast<int>(d) + 1;
      open_.push_back(d);
    }
    // A store in a reduction's loop (a row kernel's scratch, see lower.cpp) is emitted with that loop's
    // body; the others where their own loops are.
    for (const UOpPtr& st : k_.ast->src)
      if (in_reduce_loop(st)) reduce_stores_.push_back(st);
    for (const UOpPtr& st : k_.ast->src)
      if (!in_reduce_loop(st)) emit(st);
    if (stored_in_reduce_loops_.size() != reduce_stores_.size())
      throw std::logic_error("render_c: a store in a reduce loop that no reduction runs");

    std::ostringstream os;
    os << kPrelude;
    if (k_.lane_range >= 0)
      for (auto [t, name] : kVectorTypes)
        os << "typedef " << t << " " << name << " __attribute__((ext_vector_type(" << k_.lanes << ")));\n";
    if (k_.lane_range >= 0 && uses_unsigned_vectors())
      for (auto [t, name] : kUnsignedVectorTypes)
        os << "typedef " << t << " " << name << " __attribute__((ext_vector_type(" << k_.lanes << ")));\n";
    if (k_.lane_range >= 0) os << kVectorPrelude;
    if (store_rows_) os << kStoreRows;
    if (pair_dots_) os << "#if defined(__AVX512BF16__)\n#include <immintrin.h>\n#endif\n";
    if (avx512_masked_loads_)
      os << "#if defined(__AVX512BW__) && defined(__AVX512VL__)\n#include <immintrin.h>\n#endif\n";
    if (!tile_config_.empty())
      os << "#if !defined(__AMXBF16__) && !defined(__AMX_BF16__)\n#error \"tiny: this kernel computes in AMX tiles "
            "and the C compiler does not target AMX-BF16 (TINY_AMX=0 lowers without tiles)\"\n#endif\n"
            "#include <immintrin.h>\n";
    // bool buffers are bytes: a byte other than 0 or 1 (written through another view) is no _Bool
    auto buffer_type = [&](size_t i) {
      DType dt = k_.buffers[i]->dtype;
      return std::string(static_cast<int64_t>(i) < k_.launch.outputs ? "" : "const ") +
             (dt == DType::Bool ? "uint8_t" : info(dt).c_name.data()) + "*";
    };
    // A layout copy's loops run in tiny_copy, whose buffers are restrict parameters: clang keeps restrict
    // on parameters only, and without it a transposing copy stays a loop of 2-byte moves (linear's 1024²
    // bfloat16 panel: 0.55 ms; 0.14 as 32-bit gathers of the pairs).
    const bool copy = !k_.ast->src.empty() && copy_stores_ == k_.ast->src.size();
    const std::string signature = "const int64_t* ivars, const double* fvars, int64_t begin, int64_t end)";
    if (copy) {
      os << "\nstatic inline __attribute__((always_inline)) void tiny_copy(";
      for (size_t i = 0; i < k_.buffers.size(); i++)
        os << buffer_type(i) << " restrict b" << i << ", ";
      os << signature << " {\n  (void)ivars; (void)fvars;\n";
    } else {
      os << "\nvoid " << fn << "(void* const* bufs, " << signature << " {\n  (void)ivars; (void)fvars;\n";
      for (size_t i = 0; i < k_.buffers.size(); i++)
        os << "  " << buffer_type(i) << " restrict b" << i << " = (" << buffer_type(i) << ")bufs[" << i << "];\n";
    }
    // Each scalar argument read once, before the loops: read where it is used, a read under a condition (a
    // masked fill's value in softmax's all -inf rows) is one clang cannot hoist, and the loop stays scalar,
    // branching on the condition each element (sdpa's softmax over rows of 65, one thread: 491 -> 424 us).
    for (auto [f, i] : args_)
      os << "  const " << (f ? "double " : "int64_t ") << arg_name(f, i) << " = " << (f ? "fvars[" : "ivars[") << i
         << "];\n";
    if (k_.lane_range >= 0) {
      os << "  const tv_int64_t tiny_lane = (tv_int64_t){";
      for (int64_t l = 0; l < k_.lanes; l++)
        os << (l ? ", " : "") << l;
      os << "};\n  (void)tiny_lane;\n";
    }
    // a thread's tiles keep their configuration between calls only if nothing else ran on it: loaded each call
    if (!tile_config_.empty())
      os << "  static const unsigned char tiny_tiles[64] __attribute__((aligned(64))) = {" << tile_config_
         << "};\n  _tile_loadconfig(tiny_tiles);\n";
    os << scopes_[0].code.str();
    const std::optional<Unswitched> unswitched = unswitched_loop();
    for (size_t d = 0; d < k_.loops.size(); d++) {
      const bool inner = d + 1 == k_.loops.size();
      const std::string ind = indent(static_cast<int>(d) + 1);
      auto loop = [&](const std::string& body) {
        const char* pragma = inner ? inner_loop_pragma() : nullptr;
        // one loop that computes a polynomial of the prelude: in strips (strip_prefetches, trig_strips)
        const bool strip_loop =
            inner && !unswitched && k_.loops.size() == 1 && (pragma == kInterleaved16 || pragma == kInterleaved8);
        const std::vector<std::string> ahead = strip_loop ? strip_prefetches() : std::vector<std::string>{};
        const std::optional<TrigStrip> fast = strip_loop ? trig_strips(body) : std::nullopt;
        const bool strips = !ahead.empty() || fast;
        if (strips) {
          os << ind << "for (int64_t r0_strip = begin; r0_strip < end; r0_strip += " << kStrip << ") {\n";
          for (const std::string& address : ahead)
            os << ind << "  __builtin_prefetch((const void*)(" << address << "), 0, 3);\n";
          os << ind << "  const int64_t r0_stop = r0_strip + " << kStrip << " < end ? r0_strip + " << kStrip
             << " : end;\n";
        }
        if (fast) {
          os << ind << "  int32_t tiny_big = 0;\n" << ind << "  __typeof__(*b0) tiny_strip[" << kStrip << "];\n";
          if (pragma) os << ind << pragma;
          os << ind << "for (int64_t r0 = r0_strip; r0 < r0_stop; r0++) {\n" << fast->body << ind << "}\n";
          os << ind << "if (!tiny_big) {\n"
             << ind << "  memcpy(b0 + r0_strip + (" << fast->base
             << "), tiny_strip, (size_t)(r0_stop - r0_strip) * sizeof *b0);\n"
             << ind << "} else {\n";
        }
        if (pragma) os << ind << pragma;
        // Written in place (a kernel whose output is one of its inputs, read only at the elements it writes; see
        // schedule()): clang's vectorized loop checks at run time that the output overlaps no input (restrict on
        // a local is not kept) and, overlapping, ran its scalar loop. Adam's exp_avg_sq, 2.36M floats, one
        // Sapphire Rapids thread: 1.52 ms into a new buffer, 1.75 in place scalar, 0.70 in place in vectors.
        if (inner && in_place()) os << ind << "#pragma clang loop vectorize(assume_safety)\n";
        os << ind << "for (int64_t r" << d << " = "
           << (strips   ? "r0_strip"
               : d == 0 ? "begin"
                        : "0")
           << "; r" << d << " < "
           << (strips   ? "r0_stop"
               : d == 0 ? "end"
                        : std::to_string(k_.loops[d]))
           << "; r" << d << "++) {\n"
           << body;
        if (fast) os << ind << "}\n";   // the general loop's; the next closes the branch
        if (strips) os << ind << "}\n"; // the strip's loop closes with the kernel's loops
      };
      if (!inner || !unswitched) {
        loop(scopes_[d + 1].code.str());
        continue;
      }
      os << ind << "if (" << unswitched->condition << ") {\n";
      loop(unswitched->valid);
      os << ind << "}\n" << ind << "} else {\n";
      loop(unswitched->invalid);
      os << ind << "}\n" << ind << "}\n";
    }
    for (size_t d = k_.loops.size() - (unswitched ? 1 : 0); d-- > 0;)
      os << indent(static_cast<int>(d) + 1) << "}\n";
    if (!tile_config_.empty()) os << "  _tile_release();\n";
    os << "}\n";
    if (copy) {
      os << "\nvoid " << fn << "(void* const* bufs, " << signature << " {\n  tiny_copy(";
      for (size_t i = 0; i < k_.buffers.size(); i++)
        os << "(" << buffer_type(i) << ")bufs[" << i << "], ";
      os << "ivars, fvars, begin, end);\n}\n";
    }
    return os.str();
  }

private:
  // An elementwise kernel's innermost loop whose masked loads share one validity that does not vary in it (a
  // padded channels-last copy: each position of the padded output reads every channel, or none) runs as two
  // loops, one reading unmasked where the validity holds and one with zeros where it does not, chosen once
  // before them. clang at -O2 tests the validity for every element and does not split the loop itself. The
  // demo's (128, 64, 14, 14) -> (128, 16, 16, 64) copy on a Zen 3, one thread: 2.66 -> 1.85 ms (1.40 as a
  // hand-written 8 x 8 transpose in registers).
  struct Unswitched {
    std::string condition, valid, invalid; // the validity, the loop's body where it holds and where it does not
  };
  std::optional<Unswitched> unswitched_loop() const {
    const size_t inner = k_.loops.size();
    if (inner == 0 || k_.lane_range >= 0 || k_.tiles || !reduces_.empty() || masked_loads_.empty()) return std::nullopt;
    const UOp* condition = masked_loads_.front().valid;
    std::string valid = scopes_[inner].code.str(), invalid = valid;
    for (const MaskedLoad& m : masked_loads_) {
      auto at = where_.find(m.load), from = where_.find(m.valid);
      if (m.valid != condition || at == where_.end() || at->second != inner || from == where_.end() ||
          from->second >= inner)
        return std::nullopt;
      const std::string masked = names_.at(m.valid) + " ? " + m.read + " : 0";
      const size_t i = valid.find(masked);
      if (i == std::string::npos || valid.find(masked, i + 1) != std::string::npos) return std::nullopt;
      valid.replace(i, masked.size(), m.read);
      invalid.replace(invalid.find(masked), masked.size(), "0");
    }
    return Unswitched{names_.at(condition), valid, invalid};
  }

  // A kernel of one loop whose body computes a polynomial of the prelude (the inner loop pragma that interleaves four
  // vectors, see inner_loop_pragma) runs it in strips of kStrip elements, each strip first prefetching what its
  // contiguous loads read kStripAhead elements on: such a body is some 70 vector operations for 16 elements, and the
  // core's window holds the loads of few iterations ahead, so each line of the inputs arrived from memory late
  // (bench/elementwise.py's chain of 10 ops with two exps, two divisions and a sqrt, 16M float32 on two Sapphire
  // Rapids threads: 0.76-0.77 of a preallocated copy's bandwidth -> 0.85-0.90; 512 elements ahead 0.84-0.88, the
  // strips without prefetches 0.76-0.84). The prefetches' addresses, one a cache line of each such load's strip
  // (none where the loop has no contiguous load).
  static constexpr int64_t kStrip = 64, kStripAhead = 256;
  std::vector<std::string> strip_prefetches() const {
    std::vector<std::string> out;
    const UOp* loop = range_node(k_, 0);
    std::set<std::pair<int64_t, int64_t>> seen; // (buffer, base) prefetched
    for (const UOpPtr& n : toposort(k_.ast)) {
      if (n->op != Ops::LOAD || n->src[0]->op != Ops::PARAM || !loop) continue;
      auto split = lane_split(graph_rewrite(n->src[1], symbolic), loop);
      if (!split || split->second != 1 || !split->first->is_const()) continue;
      const int64_t buffer = std::get<int64_t>(n->src[0]->arg), base = split->first->const_i();
      if (!seen.insert({buffer, base}).second) continue;
      const auto size = static_cast<int64_t>(itemsize(n->dtype));
      // as an integer: the address past the strip may lie past the buffer (a prefetch does not fault)
      for (int64_t line = 0; line < kStrip * size; line += 64)
        out.push_back("(uintptr_t)(b" + std::to_string(buffer) + " + r0_strip) + " +
                      std::to_string((base + kStripAhead) * size + line));
    }
    return out;
  }

  // A strip's loop that computes a float32 sin, cos or tan runs first with their fast forms (tiny_sinf_fast ...),
  // which flag an argument they do not cover (|x| from 2^18, 2^27 for tan), storing into a strip of its own
  // (tiny_strip) that is copied to the output where no argument was flagged; otherwise the strip runs again with the
  // general forms. A branch a strip, as Sleef's vector functions branch a vector, where the general form's Payne-Hanek
  // reduction had run for every element. 4M floats, two Sapphire Rapids threads: sin 2.75 -> 0.97 ms (eager 0.91),
  // cos 2.83 -> 1.13 (1.10), tan 3.27 -> 1.88 (1.00); randn (Box-Muller's cos) 4.6 -> 3.0-3.4 (10.1). The strip of its
  // own keeps the inputs of a kernel that writes what it reads (in_place) for the second run. The fast loop's body and
  // the store's offset; nullopt where the body computes none of them, or where its store is not one unconditional
  // contiguous store at a constant offset.
  struct TrigStrip {
    std::string body;
    int64_t base;
  };
  std::optional<TrigStrip> trig_strips(const std::string& body) const {
    // (a kernel of several outputs: the second run would store the others again, over inputs written in place)
    if (k_.launch.outputs > 1) return std::nullopt;
    const std::optional<int64_t> base = strip_store_base();
    if (!base) return std::nullopt;
    std::string fast = body;
    bool any = false;
    for (const char* f : {"tiny_sinf(", "tiny_cosf(", "tiny_tanf("}) {
      const std::string call = f, to = call.substr(0, call.size() - 1) + "_fast(&tiny_big, ";
      for (size_t i = fast.find(call); i != std::string::npos; i = fast.find(call, i + to.size())) {
        fast.replace(i, call.size(), to);
        any = true;
      }
    }
    const size_t store = fast.find("b0[");
    if (!any || store == std::string::npos || fast.find("b0[", store + 1) != std::string::npos) return std::nullopt;
    fast.replace(store, 3, "tiny_strip[-(" + std::to_string(*base) + ") - r0_strip + ");
    return TrigStrip{fast, *base};
  }
  // The offset of a one-loop kernel's store when it is its only store, unconditional, at offset + loop, and nothing
  // loads from its buffer's slot; nullopt otherwise.
  std::optional<int64_t> strip_store_base() const {
    const UOp* loop = range_node(k_, 0);
    std::optional<int64_t> base;
    for (const UOpPtr& n : toposort(k_.ast)) {
      if ((n->op != Ops::STORE && n->op != Ops::LOAD) || n->src[0]->op != Ops::PARAM ||
          std::get<int64_t>(n->src[0]->arg) != 0)
        continue;
      if (n->op == Ops::LOAD || n->src.size() > 3 || base || !loop) return std::nullopt;
      auto split = lane_split(graph_rewrite(n->src[1], symbolic), loop);
      if (!split || split->second != 1 || !split->first->is_const()) return std::nullopt;
      base = split->first->const_i();
    }
    return base;
  }

  // Whether the kernel writes a buffer it also reads (schedule()'s in-place writes: only where it writes).
  bool in_place() const {
    const auto inputs = k_.buffers.begin() + k_.launch.outputs;
    return std::any_of(k_.buffers.begin(), inputs,
                       [&](const BufferRef& b) { return std::find(inputs, k_.buffers.end(), b) != k_.buffers.end(); });
  }

  // The pragmas of a loop whose body computes a polynomial of the prelude (see inner_loop_pragma).
  static constexpr const char* kInterleaved16 = "#pragma clang loop vectorize_width(16) interleave_count(4)\n";
  static constexpr const char* kInterleaved8 = "#pragma clang loop vectorize_width(8) interleave_count(4)\n";
  // How clang vectorizes an elementwise kernel's innermost loop, where its cost model or its loop unroller
  // chooses badly (nullptr: as it picks).
  const char* inner_loop_pragma() const {
    if (k_.loops.empty()) return nullptr;
    auto inner = inner_accesses();
    if (!inner) return nullptr;
    const auto& [loads, stores] = *inner;
    const int64_t n = k_.loops.back();
    const bool wide = wide_vectors();
    auto loads_step = [&](int64_t most, bool float32_only) {
      return std::ranges::all_of(loads, [&](const auto& l) {
        return l.first == 0 || (l.first > 0 && l.first <= most && (!float32_only || l.second == DType::Float32));
      });
    };
    const bool contiguous_stores = std::ranges::all_of(stores, [](int64_t s) { return s == 1; });
    // Every access contiguous along it or the same for all of it: a full vector register of floats at a time.
    // For a long body clang's cost model picks half of it (bench/elementwise.py's chain of 10 ops with exp,
    // divisions and a sqrt, one thread, 16M elements): with AVX-512 ymm registers, 16 lanes ran it in 27.6 ms
    // instead of 35.1; with AVX2 (a Zen 3) xmm registers, 8 lanes 12.5 ms instead of 24.7 (4M elements). With
    // AVX2 only where every read is float32: a loop over bytes may do better with the lanes clang picks.
    //
    // A body with a polynomial function of the prelude (exp, tanh, ...) is a chain of some 25 dependent vector
    // operations: one vector at a time, the core waits on it, and clang's cost model interleaves no second (its
    // registers). Four at a time overlap, where the loop is long enough that its rest, up to 63 scalar
    // iterations, does not count. 1M float32, one Zen 4 thread: exp 0.33 -> 0.29 ms, sigmoid 0.38 -> 0.34, gelu
    // with tanh 0.75 -> 0.63, the chain 1.65 -> 1.20; sqrt and division alone (memory-bound) unchanged.
    if (contiguous_stores && n >= 16 && loads_step(1, !wide)) {
      if (n >= 256 && calls_prelude_polynomial()) return wide ? kInterleaved16 : kInterleaved8;
      // Under 64 iterations, not unrolled: clang's unroller peels a first iteration whose masks differ (a padded
      // window's `1 <= 2 * col`) and the 15 or 31 left then run in its scalar rest (a max pool's positions of
      // rows of 16 outputs, ResNet-18's and ShuffleNet's stem pools: no vector instruction in the kernel).
      if (n < 64)
        return wide ? "#pragma clang loop vectorize_width(16) unroll(disable)\n"
                    : "#pragma clang loop vectorize_width(8) unroll(disable)\n";
      return wide ? "#pragma clang loop vectorize_width(16)\n" : "#pragma clang loop vectorize_width(8)\n";
    }
    // Fewer than 16 iterations whose float32 reads step by 1 or 2, some by 2 (a 2-wide max pool's window pairs,
    // elementwise over its outputs): clang vectorizes it only when told, as 4 lanes and a scalar rest. The demo's 2x2
    // max pool of 128 x 32 x 28 x 28 (rows of 14 outputs), one thread: on a Sapphire Rapids 2.28 ms scalar, 0.78 as
    // one masked step of 8 lanes, 0.82 as 4 lanes, 1.00 as 8 lanes and a scalar rest; on a Zen 4 (the pool with its
    // batch norm before it; its argmax kernel) 2.2-3.2 ms (2.0-2.2) scalar, 2.3-3.2 (2.2-3.6) masked in 8 lanes, whose
    // pairs are read by gathers, 0.80 (1.15) in 8 lanes, 0.61 (0.85) in 4, the pairs split by shuffles; with AVX2 (a
    // Zen 3) 2.89 ms scalar, 1.54 as 4 lanes, 1.93 as 8, 3.96-4.51 masked (AVX2's masked stores).
    const bool pairs = std::ranges::any_of(loads, [](const auto& l) { return l.first == 2; });
    if (k_.loops.size() >= 2 && n < 16 && contiguous_stores && pairs && loads_step(2, true))
      return "#pragma clang loop vectorize_width(4)\n";
    // A loop split in phases (see phase_split in compiler/lower.cpp): each iteration stores c interleaved
    // outputs at c steps along it, every read contiguous or the same. clang unrolls such a short loop in full
    // and, without AVX-512's masks, branches on each select of a float (a non-overlapping max pool's gradient,
    // where(index == place, grad, 0), mispredicted on data). The demo's 2x2 pool gradient of 128 x 32 x 28 x 28
    // on a Zen 3 (AVX2), one thread: 10.5 ms as one loop of 28 with index / 2 and % 2, 10.5 split in phases,
    // 3.15 split and vectorized as 4 lanes, 5.0 as 8.
    if (!wide && stores.size() >= 2 && n >= 8 && loads_step(1, false) &&
        std::ranges::all_of(stores, [&](int64_t s) { return s == static_cast<int64_t>(stores.size()); }))
      return "#pragma clang loop vectorize_width(4)\n";
    return nullptr;
  }

  // Whether the kernel computes a float32 exp, log, tanh, erf, expm1, log1p, sin, cos, tan or pow: a polynomial of
  // the prelude.
  bool calls_prelude_polynomial() const { return std::ranges::any_of(toposort(k_.ast), prelude_polynomial); }
  // The loads of an elementwise kernel's innermost loop as (step along it, dtype), and its stores' steps, when
  // every load and store indexes base + step * loop; nullopt otherwise.
  std::optional<std::pair<std::vector<std::pair<int64_t, DType>>, std::vector<int64_t>>> inner_accesses() const {
    if (k_.lane_range >= 0 || k_.tiles || k_.loops.empty()) return std::nullopt;
    const UOp* inner = nullptr;
    std::vector<UOpPtr> nodes = toposort(k_.ast);
    for (const UOpPtr& n : nodes) {
      if (n->op == Ops::REDUCE || n->op == Ops::STAGE) return std::nullopt;
      if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) == static_cast<int64_t>(k_.loops.size()) - 1)
        inner = n.get();
    }
    if (!inner) return std::nullopt;
    std::vector<std::pair<int64_t, DType>> loads;
    std::vector<int64_t> stores;
    for (const UOpPtr& n : nodes)
      if (n->op == Ops::LOAD || n->op == Ops::STORE) {
        auto split = lane_split(graph_rewrite(n->src[1], symbolic), inner);
        if (!split) return std::nullopt;
        if (n->op == Ops::LOAD)
          loads.emplace_back(split->second, n->dtype);
        else
          stores.push_back(split->second);
      }
    return std::pair{loads, stores};
  }

  struct Scope {
    int64_t range = -1; // the loop it is the body of (-1: the function body)
    std::vector<int64_t> reduce_ranges;
    int depth = 1;
    std::ostringstream code;
  };

  const Kernel& k_;
  std::unordered_map<const UOp*, std::string> names_;
  std::unordered_map<const UOp*, std::string> bits_;          // a bfloat16 vector load's bits (emit_vector_load)
  std::unordered_map<const UOp*, size_t> where_;              // the scope each named value is declared in
  std::unordered_map<const UOp*, std::vector<int64_t>> deps_; // loop ids each node varies with
  std::deque<Scope> scopes_;
  std::vector<UOpPtr> reduces_;                                     // every REDUCE, sources first
  std::vector<UOpPtr> reduce_stores_;                               // stores inside a reduction's loop
  std::unordered_map<const UOp*, std::vector<int64_t>> held_loops_; // see hold_reduces_in_their_stores_loops
  std::unordered_set<const UOp*> stored_in_reduce_loops_;           // those emitted
  std::vector<size_t> open_; // scopes enclosing the code being emitted, outermost first
  int next_ = 0;
  bool pair_dots_ = false;                    // some reduction steps by bfloat16 pair dot products (see pair_dot)
  bool avx512_masked_loads_ = false;          // some vector loads are AVX-512 masked loads (emit_vector_load)
  size_t copy_stores_ = 0;                    // stores of a value as it was loaded (bits copied)
  bool store_rows_ = false;                   // some stores go through tiny_store_rows (see emit_store_rows)
  std::set<std::pair<bool, int64_t>> args_;   // the scalar arguments read: (a float's, its index)
  std::unordered_set<const UOp*> prefetched_; // loads prefetch_epilogue_loads looked at
  // the scalar loads emit_scalar_prefetch_ahead prefetched: by buffer and index node, the constants added
  std::map<std::pair<const UOp*, const UOp*>, std::vector<int64_t>> prefetched_lines_;
  std::unordered_set<const UOp*> stored_as_rows_; // the stores emitted by emit_store_rows
  std::string tile_config_; // the AMX tile configuration of the kernel's tile blocks (see emit_tiles)
  const UOp* lane_node_ = nullptr;
  std::unordered_map<int64_t, const UOp*> reduce_loops_; // RANGE by id (emit_prefetch_ahead)
  std::vector<UOpPtr> keep_;
  struct MaskedLoad {
    const UOp* load;
    const UOp* valid;
    std::string read; // the load's expression without its mask
  };
  std::vector<MaskedLoad> masked_loads_; // scalar loads with a validity (see unswitched_loop)

  static std::string indent(int depth) { return std::string(2 * depth, ' '); }
  const std::string& ref(const UOpPtr& n) { return names_.at(n.get()); }

  bool uses_unsigned_vectors() const {
    for (const UOpPtr& n : toposort(k_.ast))
      if (n->dtype == DType::UInt16 || n->dtype == DType::UInt32 || n->dtype == DType::UInt64) return true;
    return false;
  }

  const std::vector<int64_t>& deps(const UOpPtr& n) {
    if (!deps_.count(n.get())) {
      for (const UOpPtr& s : n->src)
        deps(s);
      compute_deps(n);
    }
    return deps_.at(n.get());
  }

  // Whether a node varies with a reduction's loop (a RANGE that is neither a kernel loop nor the lanes).
  bool in_reduce_loop(const UOpPtr& n) {
    for (int64_t r : deps(n))
      if (r >= static_cast<int64_t>(k_.loops.size()) && r != k_.lane_range) return true;
    return false;
  }

  // A reduction whose loop body holds a store (a row kernel's scratch) runs in the kernel loops that the store's index
  // varies with, even where the reduction's value does not: a row sum of a broadcast input is one sum, but each row
  // stores its own scratch (softmax of an expanded row; hoisted, the store's row variable was undeclared). Whether
  // some reduction gained loops (held_loops_; its deps, and those of what reads it, are then computed again).
  bool hold_reduces_in_their_stores_loops() {
    bool held = false;
    for (const UOpPtr& st : k_.ast->src) {
      if (!in_reduce_loop(st)) continue;
      const std::vector<int64_t>& d = deps(st);
      for (const UOpPtr& m : reduces_) {
        bool runs_it = false;
        for (size_t i = 1; i < m->src.size(); i++)
          runs_it = runs_it || std::find(d.begin(), d.end(), std::get<int64_t>(m->src[i]->arg)) != d.end();
        if (!runs_it) continue;
        const std::vector<int64_t>& md = deps(m);
        for (int64_t r : d)
          if (r < static_cast<int64_t>(k_.loops.size()) && std::find(md.begin(), md.end(), r) == md.end()) {
            held_loops_[m.get()].push_back(r);
            held = true;
          }
      }
    }
    return held;
  }

  // Whether every loop n varies with is open.
  bool loops_open(const UOpPtr& n) {
    for (int64_t r : deps(n)) {
      if (r < static_cast<int64_t>(k_.loops.size()) || r == k_.lane_range) continue;
      bool open = false;
      for (size_t i : open_)
        open = open || std::find(scopes_[i].reduce_ranges.begin(), scopes_[i].reduce_ranges.end(), r) !=
                           scopes_[i].reduce_ranges.end();
      if (!open) return false;
    }
    return true;
  }

  static std::string arg_name(bool f, int64_t i) { return (f ? "tiny_f" : "tiny_i") + std::to_string(i); }

  // Whether n is a vector: it depends on the lane variable.
  bool vec(const UOpPtr& n) {
    const auto& d = deps(n);
    return k_.lane_range >= 0 && std::find(d.begin(), d.end(), k_.lane_range) != d.end();
  }

  // Lane l of n (n itself when it is the same for every lane).
  std::string lane(const UOpPtr& n, int64_t l) { return vec(n) ? ref(n) + "[" + std::to_string(l) + "]" : ref(n); }

  // A vector built lane by lane from the scalar expression each lane's values give.
  std::string per_lane(DType dt, const std::function<std::string(int64_t)>& expr) {
    std::string e = "(" + vec_type(dt) + "){";
    for (int64_t l = 0; l < k_.lanes; l++)
      e += (l ? ", " : "") + std::string("(") + lane_elem(dt) + ")(" + expr(l) + ")";
    return e + "}";
  }

  // n as a vector: a scalar is broadcast to every lane.
  std::string splat(const UOpPtr& n) {
    return vec(n) ? ref(n) : "((" + vec_type(n->dtype) + ")((" + lane_elem(n->dtype) + ")(" + ref(n) + ")))";
  }

  // An operand of a whole-vector op: a scalar is converted to the lanes' type (then broadcast).
  std::string operand(const UOpPtr& n) { return vec(n) ? ref(n) : "(" + lane_elem(n->dtype) + ")(" + ref(n) + ")"; }

  void compute_deps(const UOpPtr& n) {
    std::vector<int64_t> d;
    if (n->op == Ops::RANGE) d.push_back(std::get<int64_t>(n->arg));
    for (const UOpPtr& s : n->src)
      for (int64_t r : deps_.at(s.get()))
        if (std::find(d.begin(), d.end(), r) == d.end()) d.push_back(r);
    if (n->op == Ops::REDUCE) {
      for (size_t i = 1; i < n->src.size(); i++)
        std::erase(d, std::get<int64_t>(n->src[i]->arg));
      if (auto it = held_loops_.find(n.get()); it != held_loops_.end())
        for (int64_t r : it->second)
          if (std::find(d.begin(), d.end(), r) == d.end()) d.push_back(r);
    }
    // A load of the buffer the kernel stores into (a scatter that accumulates) sees the stores of
    // earlier iterations: it stays in the innermost loop even when its index is loop-invariant.
    if (n->op == Ops::LOAD && n->src[0]->op == Ops::PARAM && std::get<int64_t>(n->src[0]->arg) == 0)
      for (size_t r = 0; r < k_.loops.size(); r++)
        if (static_cast<int64_t>(r) != k_.lane_range && std::find(d.begin(), d.end(), r) == d.end())
          d.push_back(static_cast<int64_t>(r));
    deps_[n.get()] = std::move(d);
  }

  bool scope_has(const Scope& sc, const std::vector<int64_t>& deps) const {
    for (int64_t r : deps)
      if (r == sc.range || std::find(sc.reduce_ranges.begin(), sc.reduce_ranges.end(), r) != sc.reduce_ranges.end())
        return true;
    return false;
  }

  // The innermost open scope that n must live in (its position in open_).
  size_t home(const UOpPtr& n) {
    const auto& d = deps(n);
    for (size_t i = open_.size(); i-- > 1;)
      if (scope_has(scopes_[open_[i]], d)) return i;
    return 0;
  }

  // A node is emitted once per scope that can see it: one computed in a loop body that has closed
  // (another reduction over the same loop variables) is computed again.
  bool visible(const UOpPtr& n) {
    auto it = names_.find(n.get());
    if (it == names_.end()) return false;
    auto w = where_.find(n.get());
    if (w == where_.end() || std::find(open_.begin(), open_.end(), w->second) != open_.end()) return true;
    names_.erase(it);
    where_.erase(w);
    return false;
  }

  void emit(const UOpPtr& n) {
    if (visible(n)) return;
    switch (n->op) {
    case Ops::CONST:
      names_[n.get()] = literal(n);
      return;
    case Ops::RANGE:
      names_[n.get()] =
          std::get<int64_t>(n->arg) == k_.lane_range ? "tiny_lane" : "r" + std::to_string(std::get<int64_t>(n->arg));
      return;
    case Ops::PARAM:
      names_[n.get()] = "b" + std::to_string(std::get<int64_t>(n->arg));
      return;
    case Ops::ARG: {
      const bool f = is_float(n->dtype);
      const int64_t i = std::get<int64_t>(n->arg);
      args_.insert({f, i});
      names_[n.get()] = std::string("((") + reg_type(n->dtype) + ")" + arg_name(f, i) + ")";
      return;
    }
    case Ops::REDUCE:
      return emit_reduce(n);
    default:
      break;
    }
    if (n->op == Ops::LOAD && vec(n)) return emit_vector_load(n);
    if (n->op == Ops::STORE && (vec(n->src[1]) || vec(n->src[2]) || (n->src.size() > 3 && vec(n->src[3]))))
      return emit_vector_store(n);
    // A float16/bfloat16 value stored as it was loaded (a layout copy: an AMX panel of a bfloat16 matmul, a
    // convolution's padded channels-last input; a masked read's zero is +0's bits) copies its bits, plain
    // moves that clang vectorizes in tiny_copy (see render), not a widening to float and a rounding back.
    if (const UOpPtr& v = n->src.size() > 2 ? n->src[2] : n;
        n->op == Ops::STORE && v->op == Ops::LOAD && is_half(v->dtype)) {
      for (const UOpPtr& s : n->src)
        if (s != v) emit(s);
      for (const UOpPtr& s : v->src)
        emit(s);
      Scope& sc = scopes_[open_[home(n)]];
      std::string ind = indent(sc.depth), bits = ref(v->src[0]) + "[" + ref(v->src[1]) + "]";
      if (v->src.size() > 2) bits = ref(v->src[2]) + " ? " + bits + " : 0";
      if (n->src.size() > 3) sc.code << ind << "if (" << ref(n->src[3]) << ")\n";
      sc.code << ind << (n->src.size() > 3 ? "  " : "") << ref(n->src[0]) << "[" << ref(n->src[1]) << "] = " << bits
              << ";\n";
      copy_stores_++;
      return;
    }
    for (const UOpPtr& s : n->src)
      emit(s);
    Scope& sc = scopes_[open_[home(n)]];
    std::string ind = indent(sc.depth);
    if (vec(n)) return emit_vector(n, sc);
    if (n->op == Ops::STORE) {
      if (n->src.size() > 3)
        sc.code << ind << "if (" << ref(n->src[3]) << ")\n" << ind << "  ";
      else
        sc.code << ind;
      sc.code << ref(n->src[0]) << "[" << ref(n->src[1]) << "] = " << to_storage(n->src[2]->dtype, ref(n->src[2]))
              << ";\n";
      return;
    }
    std::string v = "v" + std::to_string(next_++);
    names_[n.get()] = v;
    where_[n.get()] = open_[home(n)];
    std::string e;
    if (n->op == Ops::LOAD) {
      emit_scalar_prefetch_ahead(n, sc);
      e = from_storage(n->dtype, ref(n->src[0]) + "[" + ref(n->src[1]) + "]");
      if (n->src.size() > 2) {
        masked_loads_.push_back({n.get(), n->src[2].get(), e});
        e = ref(n->src[2]) + " ? " + e + " : 0";
      }
    } else if (n->op == Ops::BITCAST && n->dtype == DType::Bool) {
      e = ref(n->src[0]) + " != 0"; // a byte other than 0 or 1 is no _Bool: torch reads it as true
    } else if (n->op == Ops::BITCAST) {
      DType from = n->src[0]->dtype;
      sc.code << ind << reg_type(n->dtype) << " " << v << ";\n"
              << ind << "{ " << info(from).c_name << " s = " << to_storage(from, ref(n->src[0])) << "; "
              << info(n->dtype).c_name << " d; memcpy(&d, &s, sizeof d); " << v << " = " << from_storage(n->dtype, "d")
              << "; }\n";
      return;
    } else {
      std::vector<std::string> a;
      for (const UOpPtr& x : n->src)
        a.push_back(ref(x));
      e = scalar_expr(n, a);
    }
    // Narrow ints are promoted by C; store them back in their own width so they wrap as torch's do.
    sc.code << ind << "const " << reg_type(n->dtype) << " " << v << " = (" << reg_type(n->dtype) << ")(" << e << ");\n";
  }

  // The C expression of an elementwise node over its operands' expressions.
  static std::string scalar_expr(const UOpPtr& n, const std::vector<std::string>& a) {
    std::string e;
    if (n->op == Ops::WHERE) {
      // where(c, x, 0) of floats as x's bits masked by c: clang turns a scalar float select into a branch,
      // mispredicted on data (a max pool's gradient keeps each window's gradient at its argmax: the demo's
      // 14 x 14 one, rows of 7 windows fully unrolled, 4.76 -> 0.76 ms one thread on a Zen 3).
      const std::string_view reg = reg_type(n->dtype);
      for (size_t keep : {size_t{1}, size_t{2}}) {
        const UOpPtr& other = n->src[3 - keep];
        if ((reg != "float" && reg != "double") || other->op != Ops::CONST || other->const_f() != 0.0 ||
            std::signbit(other->const_f()))
          continue;
        const std::string word = reg == "float" ? "uint32_t" : "uint64_t";
        return "({ " + std::string(reg) + " x_ = " + a[keep] + "; " + word +
               " u_; memcpy(&u_, &x_, sizeof u_); u_ &= -(" + word + ")(" + (keep == 1 ? "" : "!") + a[0] +
               "); memcpy(&x_, &u_, sizeof u_); x_; })";
      }
      return a[0] + " ? " + a[1] + " : " + a[2];
    }
    if (n->op == Ops::CAST) return render_cast(n->src[0]->dtype, n->dtype, a[0]);
    if (is_unary(n->op))
      e = render_unary(n->op, n->src[0]->dtype, a[0]);
    else if (is_checked_division(n) && is_unsigned(n->dtype))
      e = unsigned_division(n->op, a[0], a[1], "TINY_ZERO_DIVISION");
    else if (is_checked_division(n))
      e = std::string(n->op == Ops::IDIV ? "TINY_IDIV_CHECKED(" : "TINY_IMOD_CHECKED(") + a[0] + ", " + a[1] + ")";
    else if (is_binary(n->op))
      e = render_binary(n->op, n->dtype, n->src[0]->dtype, a[0], a[1]);
    else
      throw std::logic_error(std::string("render_c: cannot render ") + op_name(n->op));
    return is_half(n->dtype) ? round_to(n->dtype, e) : e;
  }

  // An elementwise node over lanes: one vector op where C means the same on vectors, else lane by lane.
  void emit_vector(const UOpPtr& n, Scope& sc) {
    std::string v = "v" + std::to_string(next_++);
    std::string e;
    DType dt = n->dtype;
    bool same = native_lanes(dt);
    for (const UOpPtr& x : n->src)
      same = same && x->dtype == dt;
    if (same && (n->op == Ops::ADD || n->op == Ops::SUB || n->op == Ops::MUL || (n->op == Ops::FDIV && is_float(dt))))
      e = render_binary(n->op, dt, dt, operand(n->src[0]), operand(n->src[1]));
    else if (same && n->op == Ops::NEG)
      e = "-" + ref(n->src[0]);
    else if (same && (n->op == Ops::MAX || n->op == Ops::MIN))
      e = vector_minmax(n->op, dt, splat(n->src[0]), splat(n->src[1]));
    else if (is_comparison(n->op) && native_lanes(n->src[0]->dtype) && n->src[0]->dtype == n->src[1]->dtype)
      // a vector comparison's lanes are 0 or -1 (false for NaN, as the scalar one): bool lanes are 0 or 1.
      // Built lane by lane, the ReLU mask of a convolution's input gradient was ~12% of its kernel's time.
      e = "__builtin_convertvector(" +
          render_binary(n->op, dt, n->src[0]->dtype, operand(n->src[0]), operand(n->src[1])) + ", tv_uint8_t) & 1";
    else if (n->op == Ops::WHERE && native_lanes(dt) && vec(n->src[0]) && n->src[1]->dtype == dt &&
             n->src[2]->dtype == dt)
      e = "__builtin_convertvector(" + ref(n->src[0]) + ", " + (bits(dt) == 64 ? "tv_int64_t" : "tv_int32_t") +
          ") != 0 ? " + splat(n->src[1]) + " : " + splat(n->src[2]);
    else if (n->op == Ops::CAST && is_float(dt) && native_lanes(dt) && native_lanes(n->src[0]->dtype))
      e = "__builtin_convertvector(" + ref(n->src[0]) + ", " + vec_type(dt) + ")";
    else if (n->op == Ops::CAST && dt == DType::Float32 && is_half(n->src[0]->dtype))
      e = splat(n->src[0]); // a half's register is float already
    else if (n->op == Ops::CAST && dt == DType::BFloat16 && n->src[0]->dtype == DType::Float32)
      e = "tiny_rbf_v(" + splat(n->src[0]) + ")";
    else if (n->op == Ops::CAST && dt == DType::Float64 && is_half(n->src[0]->dtype))
      e = "__builtin_convertvector(" + splat(n->src[0]) + ", tv_double)";
    else if (n->op == Ops::BITCAST && plain_bits(dt) && plain_bits(n->src[0]->dtype))
      e = "(" + vec_type(dt) + ")" + splat(n->src[0]); // vectors of one size: a C cast reinterprets the bits
    else if (n->op == Ops::BITCAST)
      throw std::logic_error("render_c: no BITCAST over lanes");
    else if (dt == DType::Float32 && prelude_polynomial(n) &&
             std::ranges::all_of(n->src, [](const UOpPtr& x) { return x->dtype == DType::Float32; }))
      e = lanes_loop(n);
    else
      e = per_lane(dt, [&](int64_t l) {
        std::vector<std::string> a;
        for (const UOpPtr& x : n->src)
          a.push_back(lane(x, l));
        return scalar_expr(n, a);
      });
    names_[n.get()] = v;
    where_[n.get()] = open_[home(n)];
    sc.code << indent(sc.depth) << "const " << vec_type(dt) << " " << v << " = " << e << ";\n";
  }

  // A prelude polynomial over float32 lanes (a GELU's erf and exp in a matmul's epilogue: its gradient's kernel) as a
  // loop over the lanes that clang vectorizes: a call per lane stays 16 scalar copies of the function. The MLP's
  // hidden gradient of a ViT block, 2080 x 128 @ 128 x 512 with GELU's derivative, one thread: 6.5 ms -> 3.9.
  std::string lanes_loop(const UOpPtr& n) {
    const std::string lanes = std::to_string(k_.lanes);
    std::string decl = "float o_[" + lanes + "]", copy;
    std::vector<std::string> a;
    for (size_t i = 0; i < n->src.size(); i++) {
      const UOpPtr& x = n->src[i];
      if (!vec(x)) {
        a.push_back("(float)(" + ref(x) + ")");
        continue;
      }
      std::string arr = "a" + std::to_string(i) + "_";
      decl += ", " + arr + "[" + lanes + "]";
      copy += " memcpy(" + arr + ", &" + ref(x) + ", sizeof " + arr + ");";
      a.push_back(arr + "[l_]");
    }
    return "({ " + decl + ";" + copy + " _Pragma(\"clang loop vectorize_width(" + lanes +
           ")\") for (int l_ = 0; l_ < " + lanes + "; l_++) o_[l_] = " + scalar_expr(n, a) +
           "; tv_float r_; memcpy(&r_, o_, sizeof r_); r_; })";
  }

  // The index of lane l of a LOAD/STORE address: base + stride * l when the index has that form (else *stride is
  // kNoStride: a stride of -1 is lanes walking memory backwards).
  static constexpr int64_t kNoStride = std::numeric_limits<int64_t>::min();
  std::function<std::string(int64_t)> lane_index(const UOpPtr& idx, const UOp* lane_node, int64_t* stride) {
    auto split = lane_split(idx, lane_node);
    *stride = split ? split->second : kNoStride;
    if (split) {
      UOpPtr base = split->first;
      keep_.push_back(base); // names_ is keyed by address: the node must outlive the rendering
      emit(base);
      std::string b = ref(base);
      int64_t st = split->second;
      return [b, st](int64_t l) { return st * l == 0 ? b : b + " + " + std::to_string(st * l); };
    }
    emit(idx);
    return [this, idx](int64_t l) { return lane(idx, l); };
  }

  void emit_vector_load(const UOpPtr& n) {
    const UOpPtr &buf = n->src[0], *valid = n->src.size() > 2 ? &n->src[2] : nullptr;
    emit(buf);
    int64_t stride;
    auto at = lane_index(n->src[1], lane_node(), &stride);
    if (valid) emit(*valid);
    Scope& sc = scopes_[open_[home(n)]];
    if (stride == 1 && k_.prefetch_next) emit_prefetch_next(n, ref(buf) + " + " + at(0), sc);
    if (stride == 1) emit_prefetch_ahead(n, ref(buf) + " + " + at(0), sc);
    // bfloat16 lanes are loaded as their bits (int32 lanes, bits_), then widened to float: a value stored unchanged
    // (a layout copy) stores those bits, not the float rounded back (the same bits; ~8 instructions a vector)
    const bool bf16 = n->dtype == DType::BFloat16;
    std::string v = "v" + std::to_string(next_++), t = vec_type(n->dtype), loaded = bf16 ? "tv_int32_t" : t, e;
    if (stride == 1 && (plain_storage(n->dtype) || is_half(n->dtype)) && (!valid || !vec(*valid))) {
      // float16/bfloat16: the lanes' bits as one vector, widened in registers
      std::string bits = n->dtype == DType::Float16 ? "tv_half" : bf16 ? "tv_int16_t" : t;
      std::string value = n->dtype == DType::Float16 ? "__builtin_convertvector(t_, tv_float)"
                          : bf16                     ? "__builtin_convertvector(t_, tv_int32_t)"
                                                     : "t_";
      e = "({ " + bits + " t_; memcpy(&t_, " + ref(buf) + " + " + at(0) + ", sizeof t_); " + value + "; })";
      if (valid) e = ref(*valid) + " ? " + e + " : (" + loaded + "){}";
    } else {
      e = per_lane(bf16 ? DType::Int32 : n->dtype, [&](int64_t l) {
        std::string x = bf16 ? ref(buf) + "[" + at(l) + "]" : from_storage(n->dtype, ref(buf) + "[" + at(l) + "]");
        return valid ? lane(*valid, l) + " ? " + x + " : 0" : x;
      });
      // Contiguous lanes valid lane by lane (a row of a padded copy, see lower_transposed_copy): one masked
      // load on AVX-512, which reads no masked-off lane's memory (it may lie outside the buffer).
      if (stride == 1 && valid && k_.lanes == 16 && (n->dtype == DType::Float32 || bf16)) {
        std::string mask = "_mm_test_epi8_mask((__m128i)" + ref(*valid) + ", (__m128i)" + ref(*valid) + ")",
                    at0 = ref(buf) + " + " + at(0);
        std::string masked = bf16 ? "__builtin_convertvector((tv_int16_t)_mm256_maskz_loadu_epi16(" + mask + ", " +
                                        at0 + "), tv_int32_t)"
                                  : "(tv_float)_mm512_maskz_loadu_ps(" + mask + ", " + at0 + ")";
        e = avx512_or(masked, e);
      }
      // Lanes walking memory backwards (a flipped kernel's taps, the panel of a convolution's input gradient): the
      // 16 elements ending at lane 0's, one vector load (masked on AVX-512 where the lanes are valid lane by lane,
      // the mask reversed too), its lanes reversed.
      if (stride == -1 && k_.lanes == 16 && (n->dtype == DType::Float32 || bf16)) {
        std::string rev = "15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0", last = ref(buf) + " + " + at(15);
        auto reversed = [&](const std::string& v, const std::string& t) {
          std::string r = "__builtin_shufflevector((" + t + ")(" + v + "), (" + t + ")(" + v + "), " + rev + ")";
          return bf16 ? "__builtin_convertvector(" + r + ", tv_int32_t)" : r;
        };
        const std::string t16 = bf16 ? "tv_int16_t" : "tv_float";
        if (!valid || !vec(*valid)) {
          e = "({ " + t16 + " t_; memcpy(&t_, " + last + ", sizeof t_); " + reversed("t_", t16) + "; })";
          if (valid) e = ref(*valid) + " ? " + e + " : (" + loaded + "){}";
        } else {
          std::string valid_rev = "__builtin_shufflevector(" + ref(*valid) + ", " + ref(*valid) + ", " + rev + ")",
                      mask = "_mm_test_epi8_mask((__m128i)" + valid_rev + ", (__m128i)" + valid_rev + ")";
          std::string masked = reversed(bf16 ? "_mm256_maskz_loadu_epi16(" + mask + ", " + last + ")"
                                             : "_mm512_maskz_loadu_ps(" + mask + ", " + last + ")",
                                        t16);
          e = avx512_or(masked, e);
        }
      }
      // bfloat16 lanes 2 elements apart (the pairs of a bfloat16 matmul panel of w.t(), see lower_transposed_copy):
      // one AVX-512 load of the even 2-byte elements, zero-extended in 32-bit lanes as they come
      if (stride == 2 && bf16 && k_.lanes == 16 && (!valid || !vec(*valid))) {
        std::string masked = "(tv_int32_t)_mm512_maskz_loadu_epi16(0x55555555u, " + ref(buf) + " + " + at(0) + ")";
        if (valid) masked = ref(*valid) + " ? " + masked + " : (tv_int32_t){}";
        e = avx512_or(masked, e);
      }
    }
    if (bf16) {
      // the bits are float32's upper half: the sign extension of int16 shifts out
      std::string bits = "v" + std::to_string(next_++);
      sc.code << indent(sc.depth) << "const tv_int32_t " << bits << " = " << e << ";\n";
      bits_[n.get()] = bits;
      e = "(tv_float)(" + bits + " * 65536)";
    }
    names_[n.get()] = v;
    where_[n.get()] = open_[home(n)];
    sc.code << indent(sc.depth) << "const " << t << " " << v << " = " << e << ";\n";
  }

  // `masked` (an AVX-512 masked load's expression) where the C compiler targets AVX512BW and VL, else `fallback`.
  std::string avx512_or(const std::string& masked, const std::string& fallback) {
    avx512_masked_loads_ = true;
    return "\n#if defined(__AVX512BW__) && defined(__AVX512VL__)\n    " + masked + "\n#else\n    " + fallback +
           "\n#endif\n    ";
  }

  // A prefetch of what the load at `address` will read in the next iteration of the outermost loop, where its
  // index moves by a constant there (Kernel::prefetch_next); into L2 (one outer iteration ahead may be far).
  void emit_prefetch_next(const UOpPtr& load, const std::string& address, Scope& sc) {
    const UOp* outer = range_node(k_, 0);
    auto next = outer ? lane_split(load->src[1], outer) : std::nullopt;
    if (!next || next->second == 0) return;
    // as an integer: the address one iteration on may lie past the buffer (a prefetch does not fault)
    sc.code << indent(sc.depth) << "__builtin_prefetch((const void*)((uintptr_t)(" << address << ") + "
            << next->second * static_cast<int64_t>(itemsize(load->dtype)) << "), 0, 2);\n";
  }

  // A prefetch, kPrefetchAhead iterations on, of a vector load in a reduction's innermost loop whose address moves
  // 2 KiB or more an iteration (the rows of a matmul's right operand read in place, x @ w with few rows of x):
  // the hardware prefetchers follow strides within a page, and Intel's stride prefetcher up to 2 KiB, so each such
  // load waited on L3 or memory. (32, 1024) x (1024, 1024), one Sapphire Rapids thread (C harness): 822 -> 621 us;
  // 4, 16 and 32 iterations ahead 705, 711 and 762.
  // Loops of fewer steps (the demo's sums of 16 chunks' partial results, whose rows an outer loop walks in
  // order, which the hardware follows) ran 10-30% slower with it.
  static constexpr int64_t kPrefetchAhead = 8, kPrefetchStrideBytes = 2048, kPrefetchMinSteps = 64;
  bool emit_prefetch_ahead(const UOpPtr& load, const std::string& address, Scope& sc) {
    if (k_.prefetch_next || sc.reduce_ranges.empty()) return false;
    const int64_t id = sc.reduce_ranges.back();
    auto [it, added] = reduce_loops_.try_emplace(id, nullptr);
    if (added) it->second = range_node(k_, id);
    const UOp* loop = it->second;
    auto step = loop ? lane_split(load->src[1], loop) : std::nullopt;
    if (!step || loop->src[0]->const_i() < kPrefetchMinSteps) return false;
    const int64_t bytes = step->second * static_cast<int64_t>(itemsize(load->dtype));
    if (bytes < kPrefetchStrideBytes && bytes > -kPrefetchStrideBytes) return false;
    sc.code << indent(sc.depth) << "__builtin_prefetch((const void*)((uintptr_t)(" << address << ") + "
            << kPrefetchAhead * bytes << "), 0, 3);\n";
    return true;
  }

  // The same for the scalar loads that a register block broadcasts, once for loads within a cache line's length of
  // each other: the left operand of a.t() @ b read in place, a block of rows' elements side by side (a[k, m..m + 8])
  // and 2 KiB or more apart on each step of k (a ViT's MLP weight gradient, 2080 x 512 x 128 in 8 parts of k, one
  // thread, C harness: 2.92 -> 2.74 ms, 2.79 -> 2.59, 2.75 -> 2.44; two threads 1.47 -> 1.39, 1.48 -> 1.41).
  void emit_scalar_prefetch_ahead(const UOpPtr& load, Scope& sc) {
    if (k_.lane_range < 0 || load->src.size() > 2) return;
    // the index as a node plus a constant: the loads of a line share the node, within a line's length
    const UOpPtr& idx = load->src[1];
    const UOp* base = idx.get();
    int64_t offset = 0;
    if (idx->op == Ops::ADD)
      for (size_t i = 0; i < 2; i++)
        if (idx->src[i]->is_const()) base = idx->src[1 - i].get(), offset = idx->src[i]->const_i();
    const auto line = static_cast<int64_t>(64 / itemsize(load->dtype));
    auto& offsets = prefetched_lines_[{load->src[0].get(), base}];
    for (int64_t o : offsets)
      if (std::llabs(o - offset) < line) return;
    if (emit_prefetch_ahead(load, ref(load->src[0]) + " + " + ref(idx), sc)) offsets.push_back(offset);
  }

  // The loads of a register block's epilogue (what its outputs compute from beside the sums, read after the reduce
  // loop: a GELU's input in the matmul of its gradient), prefetched before that loop, so that they arrive while it
  // runs: each waited on memory otherwise, its input written long before (the ViT's fc2 input gradient with GELU's
  // derivative, 2080 x 128 x 512, one Sapphire Rapids thread, C harness with its inputs evicted: 3.6-3.8 -> 3.0 ms;
  // in the training step, 3.9-6.3 -> 3.1-3.2 ms a call; no other model of bench/training_step.py changed measurably).
  // The first and last lane's address of each (two lines where a vector is not aligned); loads of other lane strides
  // are left alone.
  static constexpr int64_t kEpiloguePrefetchMinSteps = 32, kEpiloguePrefetchMost = 32;
  void prefetch_epilogue_loads(size_t at, Scope& target) {
    int64_t issued = 0;
    for (const UOpPtr& m : toposort(k_.ast)) {
      if (issued >= kEpiloguePrefetchMost) return;
      if (m->op != Ops::LOAD || names_.count(m.get()) || !prefetched_.insert(m.get()).second || in_reduce_loop(m) ||
          home(m) != at)
        continue;
      auto split = lane_split(m->src[1], lane_node());
      if (!split || (split->second != 0 && split->second != 1)) continue;
      emit(m->src[0]);
      keep_.push_back(split->first);
      emit(split->first);
      const std::string base = ref(m->src[0]) + " + " + ref(split->first);
      for (int64_t l : split->second == 1 ? std::vector<int64_t>{0, k_.lanes - 1} : std::vector<int64_t>{0}) {
        target.code << indent(target.depth) << "__builtin_prefetch(" << base << (l ? " + " + std::to_string(l) : "")
                    << ", 0, 3);\n";
        issued++;
      }
    }
  }

  // The bits of a bfloat16 vector: a load's own (bits_), else its float value rounded (tiny_f2bf_v).
  std::string bf16_bits(const UOpPtr& v) {
    auto it = bits_.find(v.get());
    return it != bits_.end() ? it->second : "tiny_f2bf_v(" + ref(v) + ")";
  }

  void emit_vector_store(const UOpPtr& n) {
    if (stored_as_rows_.count(n.get())) return; // emitted with its block (emit_store_rows)
    const UOpPtr &buf = n->src[0], &value = n->src[2], *valid = n->src.size() > 3 ? &n->src[3] : nullptr;
    DType dt = value->dtype;
    // bfloat16 lanes convert as one vector, then their bits are stored (a convolution's output, strided by
    // its channels, converted lane by lane took ~8 instructions an element); a float32 vector rounded to
    // bfloat16 and stored rounds once: the same bits (a NaN's too).
    const bool bf16_lanes = dt == DType::BFloat16 && vec(value);
    const UOpPtr& rounded = rounded_from(value);
    emit(buf);
    emit(rounded);
    int64_t stride;
    auto at = lane_index(n->src[1], lane_node(), &stride);
    if (valid) emit(*valid);
    Scope& sc = scopes_[open_[home(n)]];
    std::string ind = indent(sc.depth);
    if (stride == 1 && plain_storage(dt) && !valid && vec(value)) {
      sc.code << ind << "memcpy(" << ref(buf) << " + " << at(0) << ", &" << ref(value) << ", sizeof " << ref(value)
              << ");\n";
      return;
    }
    if (bf16_lanes) {
      if (stride > 1 && (!valid || vec(*valid)) && emit_store_rows(n, stride)) return;
      std::string bits = "v" + std::to_string(next_++);
      sc.code << ind << "const tv_int32_t " << bits << " = " << bf16_bits(rounded) << ";\n";
      if (stride == 1 && !valid) {
        sc.code << ind << "{ tv_int16_t t_ = __builtin_convertvector(" << bits << ", tv_int16_t); memcpy(" << ref(buf)
                << " + " << at(0) << ", &t_, sizeof t_); }\n";
        return;
      }
      for (int64_t l = 0; l < k_.lanes; l++) {
        sc.code << ind;
        if (valid) sc.code << "if (" << lane(*valid, l) << ") ";
        sc.code << ref(buf) << "[" << at(l) << "] = (uint16_t)" << bits << "[" << l << "];\n";
      }
      return;
    }
    if (stride > 1 && (!valid || vec(*valid)) && dt == DType::Float32 && vec(value) && emit_store_rows(n, stride))
      return;
    for (int64_t l = 0; l < k_.lanes; l++) {
      sc.code << ind;
      if (valid) sc.code << "if (" << lane(*valid, l) << ") ";
      sc.code << ref(buf) << "[" << at(l) << "] = " << to_storage(dt, lane(value, l)) << ";\n";
    }
  }

  // The float32 vector a bfloat16 vector rounds (its bits are stored through tiny_f2bf_v, one rounding: the
  // same bits), else the value itself.
  const UOpPtr& rounded_from(const UOpPtr& value) {
    bool rounds = value->dtype == DType::BFloat16 && vec(value) && value->op == Ops::CAST &&
                  value->src[0]->dtype == DType::Float32 && vec(value->src[0]);
    return rounds ? value->src[0] : value;
  }

  // Float32 or bfloat16 vector stores whose lanes stride through the output by `stride` and whose bases are
  // consecutive elements (the positions of a register block: a convolution's NCHW result, lanes along its
  // channels) go out together, up to 8 at a time, as 16 rows of contiguous elements (tiny_store_rows,
  // tiny_store_rows_bf16) instead of a scalar store per lane. The group is the run of such stores of one
  // dtype into the same buffer, in the same scope, whose bases differ from n's by constants; its rows must
  // not overlap (stride >= the run's length), and no load of the buffer may see the stores' order. Returns
  // false (nothing emitted) where that does not hold.
  bool emit_store_rows(const UOpPtr& n, int64_t stride) {
    const DType dt = n->src[2]->dtype;
    if (k_.lanes != 16 || (dt != DType::Float32 && dt != DType::BFloat16)) return false;
    const UOpPtr& buf = n->src[0];
    for (const UOpPtr& m : toposort(k_.ast))
      if (m->op == Ops::LOAD && m->src[0] == buf) return false;
    auto base_of = [&](const UOpPtr& st) -> UOpPtr {
      auto split = lane_split(st->src[1], lane_node());
      return split && split->second == stride ? split->first : nullptr;
    };
    UOpPtr base = base_of(n);
    if (!base) return false;
    std::map<int64_t, UOpPtr> run;
    // (stores valid lane by lane, the lanes of a short lane loop: all with n's validity, as a mask of rows)
    const UOpPtr* valid = n->src.size() > 3 ? &n->src[3] : nullptr;
    for (const UOpPtr& st : k_.ast->src) {
      if (st->op != Ops::STORE || st->src[0] != buf || st->src.size() != n->src.size() ||
          (valid && st->src[3] != *valid) || st->src[2]->dtype != dt || !vec(st->src[2]) ||
          stored_as_rows_.count(st.get()))
        continue;
      UOpPtr b = base_of(st);
      if (auto d = b ? constant_offset(b, base) : std::nullopt) run.emplace(*d, st);
    }
    int64_t lo = 0, hi = 0;
    while (run.count(lo - 1))
      lo--;
    while (run.count(hi + 1))
      hi++;
    if (hi == lo || stride < hi - lo + 1) return false;
    std::vector<UOpPtr> stores;
    for (int64_t d = lo; d <= hi; d++)
      stores.push_back(run.at(d));
    for (const UOpPtr& st : stores)
      emit(rounded_from(st->src[2]));
    size_t at = home(n);
    for (const UOpPtr& st : stores)
      if (home(st) != at) return false;
    if (valid) emit(*valid);
    Scope& sc = scopes_[open_[at]];
    std::string ind = indent(sc.depth), rows;
    if (valid) {
      rows = "v" + std::to_string(next_++);
      sc.code << ind << "unsigned " << rows << " = 0;\n"
              << ind << "for (int l = 0; l < 16; l++) " << rows << " |= (unsigned)(" << ref(*valid)
              << "[l] != 0) << l;\n";
    }
    for (size_t first = 0; first < stores.size(); first += 8) {
      size_t count = std::min<size_t>(8, stores.size() - first);
      int64_t s;
      auto start = lane_index(stores[first]->src[1], lane_node(), &s);
      const bool bf16 = dt == DType::BFloat16;
      sc.code << ind << (bf16 ? "tiny_store_rows_bf16(" : "tiny_store_rows(") << ref(buf) << " + " << start(0) << ", "
              << stride << ", " << count << ", " << (valid ? rows : "0xffffu");
      for (size_t r = 0; r < 8; r++) {
        if (r >= count)
          sc.code << (bf16 ? ", (tv_int32_t)0" : ", (tv_float)0");
        else
          sc.code << ", "
                  << (bf16 ? bf16_bits(rounded_from(stores[first + r]->src[2]))
                           : ref(rounded_from(stores[first + r]->src[2])));
      }
      sc.code << ");\n";
    }
    for (const UOpPtr& st : stores)
      stored_as_rows_.insert(st.get());
    store_rows_ = true;
    return true;
  }

  // d where a == b + d for a constant d, both sums of index terms (UOps are interned: equal terms are
  // one node).
  static std::optional<int64_t> constant_offset(const UOpPtr& a, const UOpPtr& b) {
    auto terms = [](const UOpPtr& x, int64_t& constant) {
      std::map<const UOp*, int64_t> t;
      std::vector<UOpPtr> stack{x};
      while (!stack.empty()) {
        UOpPtr y = stack.back();
        stack.pop_back();
        if (y->op == Ops::ADD && y->dtype == kIndex)
          stack.insert(stack.end(), y->src.begin(), y->src.end());
        else if (y->is_const())
          constant += y->const_i();
        else
          t[y.get()]++;
      }
      return t;
    };
    int64_t ca = 0, cb = 0;
    if (terms(a, ca) != terms(b, cb)) return std::nullopt;
    return ca - cb;
  }

  const UOp* lane_node() {
    if (!lane_node_) lane_node_ = tiny::lane_node(k_);
    return lane_node_;
  }

  // A REDUCE and every other not-yet-emitted REDUCE over the same loop variables in the same scope
  // (an upcast block) accumulate in one loop.
  void emit_reduce(const UOpPtr& n) {
    size_t at = home(n);
    Scope& target = scopes_[open_[at]];
    bool lanes_in_value = vec(n->src[0]);
    std::vector<UOpPtr> group;
    for (const UOpPtr& m : reduces_)
      if (!names_.count(m.get()) && std::equal(m->src.begin() + 1, m->src.end(), n->src.begin() + 1, n->src.end()) &&
          home(m) == at && vec(m->src[0]) == lanes_in_value)
        group.push_back(m);
    // A group of bfloat16 products over pairs steps by pairs: no loop over the pair (see pair_dot).
    std::vector<PairDot> pairs;
    if (k_.lanes == 16 && lanes_in_value)
      for (const UOpPtr& m : group)
        if (auto p = pair_dot(m, lane_node())) pairs.push_back(*p);
    if (pairs.size() != group.size()) pairs.clear();
    // An AMX block (see TileBlock): the tiles' loop steps by 16 pairs as far as it can, in tiles; the rest
    // by pairs, in vectors. One tile configuration a kernel (loaded once a call).
    std::optional<TileBlock> tiles;
    if (k_.tiles && !pairs.empty()) tiles = tile_block(group, lane_node());
    if (tiles && !tile_config_.empty() && tile_config_ != tile_config(*tiles)) tiles.reset();
    if (tiles) tile_config_ = tile_config(*tiles);
    // pairs of y read in place are interleaved by tiles only: elsewhere the products widen, the pair a loop
    if (!tiles && std::ranges::any_of(pairs, [](const PairDot& p) { return p.y_rows != 0; })) pairs.clear();
    pair_dots_ = pair_dots_ || !pairs.empty();
    // The loops: every range but the lanes (a reduction over lanes steps its innermost loop by them),
    // unless the value is the same in every lane (a sum of a broadcast value): then the lanes are a loop
    // like the others, or the sum would count one lane.
    std::vector<UOpPtr> loops;
    for (size_t i = 1; i < n->src.size(); i++)
      if ((std::get<int64_t>(n->src[i]->arg) != k_.lane_range || !lanes_in_value) &&
          (pairs.empty() || i + 1 < n->src.size()))
        loops.push_back(n->src[i]);
    int64_t steps = 1;
    for (const UOpPtr& r : loops)
      steps *= r->src[0]->const_i();
    if (lanes_in_value && !tiles && group.size() >= 2 && steps >= kEpiloguePrefetchMinSteps)
      prefetch_epilogue_loads(at, target);
    // The loop body: a scope nested in `target`; what it reads that does not vary in it goes outside.
    Scope& body = scopes_.emplace_back();
    body.depth = target.depth + static_cast<int>(loops.size());
    for (const UOpPtr& r : loops)
      body.reduce_ranges.push_back(std::get<int64_t>(r->arg));
    std::vector<size_t> saved = open_;
    open_.resize(at + 1);
    open_.push_back(scopes_.size() - 1);
    // pair dots: each load's pair (at the pair loop's 0) as 32-bit words, x's one, y's one per lane
    std::vector<std::pair<std::string, std::string>> pair_words;
    // by buffer, index and lanes: two operands' pairs can sit at one index (x @ w.t() of 16 x 2 by 2 x 1, both at
    // 0: one word served both, w's never loaded)
    std::map<std::tuple<const UOp*, const UOp*, bool>, std::string> words;
    auto word = [&](const UOpPtr& load, const PairDot& p, bool lanes) {
      UOpPtr idx = load->src[1];
      if (lanes) idx = lane_split(idx, lane_node())->first;
      idx = graph_rewrite(substitute(idx, [&](const UOpPtr& r) { return r == p.pair ? idx_const(0) : nullptr; }),
                          symbolic);
      keep_.push_back(idx);
      const std::tuple key{load->src[0].get(), idx.get(), lanes};
      if (auto it = words.find(key); it != words.end()) return it->second;
      emit(load->src[0]);
      emit(idx);
      std::string v = "v" + std::to_string(next_++), t = lanes ? "tv_int32_t" : "int32_t";
      Scope& sc = scopes_[open_[home(idx)]];
      sc.code << indent(sc.depth) << "const " << t << " " << v << " = ({ " << t << " t_; memcpy(&t_, "
              << ref(load->src[0]) << " + " << ref(idx) << ", sizeof t_); t_; });\n";
      return words[key] = v;
    };
    // the tiles' loop body: their addresses only (the start of the body the pairs' loop runs)
    std::string tile_body;
    if (tiles) {
      // (names_ is keyed by address: the block's index nodes, built here, must outlive the rendering)
      keep_.insert(keep_.end(), tiles->rows.begin(), tiles->rows.end());
      keep_.insert(keep_.end(), tiles->cols.begin(), tiles->cols.end());
      emit(tiles->x->src[0]);
      emit(tiles->y->src[0]);
      for (int64_t g = 0; g < tiles->groups(); g++)
        emit(tiles->rows[static_cast<size_t>(16 * g)]);
      for (const UOpPtr& c : tiles->cols)
        emit(c);
      tile_body = body.code.str();
    }
    for (const PairDot& p : pairs)
      if (!p.y_rows) pair_words.emplace_back(word(p.x, p, false), word(p.y, p, true)); // (else tiles do all)
    if (pairs.empty())
      for (const UOpPtr& m : group)
        emit(m->src[0]);
    for (const UOpPtr& st : reduce_stores_)
      if (!stored_in_reduce_loops_.count(st.get()) && loops_open(st)) {
        emit(st);
        stored_in_reduce_loops_.insert(st.get());
      }
    open_ = saved;

    // Accumulators: a vector where the value is one (lanes of outputs, or lanes of the reduced axis,
    // combined after the loop).
    std::string ind = indent(target.depth);
    std::vector<std::string> accs;
    for (const UOpPtr& m : group) {
      std::string acc = "acc" + std::to_string(next_++);
      accs.push_back(acc);
      std::string id = reduce_identity(m->reduce_arg().op, m->dtype);
      if (vec(m->src[0]))
        target.code << ind << vec_type(m->dtype) << " " << acc << " = (" << vec_type(m->dtype) << ")(("
                    << lane_elem(m->dtype) << ")" << id << ");\n";
      else
        target.code << ind << reg_type(m->dtype) << " " << acc << " = " << id << ";\n";
    }
    // the loops, the innermost from `begin` to `end` by `step`
    // A register block of vector accumulators (8 or more) steps its innermost loop two at a time: clang
    // leaves it rolled at -O2, and its loop counter and addresses then share the ports with the loads and
    // FMAs (C harness, one thread: the demo's conv2d forward kernel 12.1 -> 11.1 ms, weight gradients 3-5%
    // faster (a loop of 14 included), a 1024^3 matmul's the same). A block of products of a broadcast
    // value (no pair dots) unrolls a loop of 32 or fewer steps in full: a weight gradient's 14 positions,
    // 3-5% faster than by two (same harness), its 28 positions 7% (the demo's 28 x 28 one, 14.4 -> 13.5 ms; by
    // four the same); batch norm's sums of 12 loads or squares ran 25% slower so.
    const bool unroll_two = lanes_in_value && group.size() >= 8 && wide_vectors();
    const bool products = pairs.empty() && std::all_of(group.begin(), group.end(), [&](const UOpPtr& m) {
                            const UOpPtr& p = m->src[0];
                            return p->op == Ops::MUL && (!vec(p->src[0]) || !vec(p->src[1]));
                          });
    // A vector accumulator alone (a row's sum or max in softmax or layer norm, a full sum) is a chain of
    // dependent adds, bound by their latency: it runs as two, the even and the odd steps of its innermost loop
    // (the body twice, its loop variable shadowed), combined after the loop. Layer norm's (4096, 1024) kernel
    // on a Zen 3, one thread: 2.88 -> 2.52 ms (by four without the second chain: 2.64). A sum's order changes
    // as torch's vectorized sums' does.
    const UOpPtr& first = group.front();
    const Ops first_op = first->reduce_arg().op;
    const int64_t inner_extent = loops.empty() ? 0 : loops.back()->src[0]->const_i();
    const bool two_chains = !tiles && pairs.empty() && group.size() == 1 && vec(first->src[0]) &&
                            native_lanes(first->dtype) && is_float(first->dtype) &&
                            (first_op == Ops::ADD || first_op == Ops::MAX || first_op == Ops::MIN) &&
                            inner_extent >= 8 && inner_extent % 2 == 0;
    auto open_loops = [&](int64_t begin, int64_t end, int64_t step, const std::string& code) {
      for (size_t i = 0; i < loops.size(); i++) {
        std::string rn = "r" + std::to_string(std::get<int64_t>(loops[i]->arg));
        bool inner = i + 1 == loops.size();
        if (inner && two_chains) {
          step = 2;
          rn += "_";
          target.code << indent(target.depth + static_cast<int>(i)) << "#pragma clang loop unroll_count(2)\n";
        }
        if (inner && step == 1 && unroll_two && end - begin >= 12)
          target.code << indent(target.depth + static_cast<int>(i))
                      << (end - begin <= 32 && products ? "#pragma clang loop unroll(full)\n"
                                                        : "#pragma clang loop unroll_count(2)\n");
        target.code << indent(target.depth + static_cast<int>(i)) << "for (int64_t " << rn << " = "
                    << (inner ? begin : 0) << "; " << rn << " < " << (inner ? end : loops[i]->src[0]->const_i()) << "; "
                    << rn << (inner && step > 1 ? " += " + std::to_string(step) : "++") << ") {\n";
      }
      target.code << code;
    };
    auto close_loops = [&] {
      for (size_t i = loops.size(); i-- > 0;)
        target.code << indent(target.depth + static_cast<int>(i)) << "}\n";
    };
    std::string bind = indent(body.depth);
    const int64_t extent = loops.empty() ? 1 : loops.back()->src[0]->const_i();
    int64_t begin = 0;
    // the loops in vectors or scalars: all of them, or what the tiles leave (an empty loop stays a loop)
    auto rest = [&] { return !tiles || begin < extent; };
    if (tiles) {
      begin = extent / 16 * 16;
      emit_tiles(
          target.code, *tiles, accs, target.depth, bind, [&] { open_loops(0, begin, 16, tile_body); }, close_loops);
    }
    if (two_chains) {
      const std::string acc = accs[0], second = "acc" + std::to_string(next_++);
      const std::string rn = "r" + std::to_string(std::get<int64_t>(loops.back()->arg));
      target.code << ind << vec_type(first->dtype) << " " << second << " = " << acc << ";\n";
      std::string code;
      for (const auto& [name, at_step] : {std::pair{acc, ""}, std::pair{second, " + 1"}})
        code += bind + "{\n" + bind + "const int64_t " + rn + " = " + rn + "_" + at_step + ";\n" + body.code.str() +
                bind + name + " = " + vector_update(first, name) + ";\n" + bind + "}\n";
      open_loops(0, extent, 2, code);
      close_loops();
      target.code << ind << acc << " = " << vector_update(first, acc, second) << ";\n";
    } else if (rest()) {
      open_loops(begin, extent, 1, body.code.str());
    }
    if (!pairs.empty() && rest()) {
      // x's pair in every lane; lane l's pair of y. AVX512_BF16: one vdpbf16ps (bfloat16 denormals read
      // as zero, a denormal result flushes); else each bfloat16 widened (its bits are float32's upper
      // half) and multiply-added in the plain loop's order.
      target.code << "#if defined(__AVX512BF16__)\n";
      for (size_t g = 0; g < group.size(); g++)
        target.code << bind << accs[g] << " = (tv_float)_mm512_dpbf16_ps((__m512)" << accs[g]
                    << ", (__m512bh)(tv_int32_t)" << pair_words[g].first << ", (__m512bh)" << pair_words[g].second
                    << ");\n";
      target.code << "#else\n";
      for (size_t g = 0; g < group.size(); g++) {
        const auto& [x, y] = pair_words[g];
        target.code << bind << accs[g] << " = " << accs[g] << " + (tv_float)((tv_int32_t)" << x
                    << " * 65536) * (tv_float)(" << y << " * 65536);\n"
                    << bind << accs[g] << " = " << accs[g] << " + (tv_float)((tv_int32_t)" << x
                    << " & -65536) * (tv_float)(" << y << " & -65536);\n";
      }
      target.code << "#endif\n";
    }
    for (size_t g = 0; g < group.size() && pairs.empty() && !two_chains; g++) {
      const UOpPtr& m = group[g];
      DType dt = m->dtype;
      Ops op = m->reduce_arg().op;
      const std::string &acc = accs[g], &v = ref(m->src[0]);
      if (vec(m->src[0])) {
        target.code << bind << acc << " = " << vector_update(m, acc) << ";\n";
        continue;
      }
      // A float sum may be reordered (as torch's vectorized sums are) so that its loop vectorizes,
      // unless its block vectorizes across accumulators instead.
      bool reassociate =
          (group.size() == 1 || k_.vectorize_reduce) && is_float(dt) && (op == Ops::ADD || op == Ops::MUL);
      if (reassociate) target.code << bind << "{\n#pragma clang fp reassociate(on)\n";
      target.code << bind << acc << " = (" << reg_type(dt) << ")(" << combine(op, dt, acc, v) << ");\n";
      if (reassociate) target.code << bind << "}\n";
    }
    if (rest() && !two_chains) close_loops();
    for (size_t g = 0; g < group.size(); g++) {
      const UOpPtr& m = group[g];
      where_[m.get()] = open_[at];
      if (vec(m->src[0]) && !vec(m) && whole_vector_combine(m)) {
        names_[m.get()] = combine_lanes(target.code, m, accs[g], ind);
      } else if (vec(m->src[0]) && !vec(m)) {
        // a reduction over lanes: the lanes' accumulators combine, pairwise, each step a named value
        // (nested expressions would repeat their operands: source exponential in the steps)
        std::vector<std::string> parts;
        for (int64_t l = 0; l < k_.lanes; l++)
          parts.push_back(accs[g] + "[" + std::to_string(l) + "]");
        while (parts.size() > 1) {
          std::vector<std::string> next;
          for (size_t i = 0; i + 1 < parts.size(); i += 2) {
            std::string h = "acc" + std::to_string(next_++);
            target.code << ind << "const " << reg_type(m->dtype) << " " << h << " = (" << reg_type(m->dtype) << ")("
                        << combine(m->reduce_arg().op, m->dtype, parts[i], parts[i + 1]) << ");\n";
            next.push_back(h);
          }
          if (parts.size() % 2) next.push_back(parts.back());
          parts = std::move(next);
        }
        names_[m.get()] = parts[0];
      } else {
        names_[m.get()] = accs[g];
      }
    }
  }

  // Tiles of an AMX block: C tile (g, v) holds rows [16 g, 16 g + 16) of vector v (g V + v), then an A
  // tile per 16 rows of x, a B tile per vector of y. A tile config (ldtilecfg's 64 bytes): palette 1,
  // each tile's bytes per row at 16 + 2 t, its rows at 48 + t.
  static std::string tile_config(const TileBlock& t) {
    std::array<int, 64> cfg{};
    cfg[0] = 1;
    const int64_t groups = t.groups(), vecs = static_cast<int64_t>(t.cols.size());
    const int64_t rows = static_cast<int64_t>(t.rows.size());
    auto set = [&](int64_t tile, int64_t tile_rows) {
      cfg[static_cast<size_t>(16 + 2 * tile)] = 64;
      cfg[static_cast<size_t>(48 + tile)] = static_cast<int>(tile_rows);
    };
    for (int64_t g = 0; g < groups; g++) {
      int64_t n = std::min<int64_t>(16, rows - 16 * g);
      for (int64_t v = 0; v < vecs; v++)
        set(g * vecs + v, n);
      set(groups * vecs + g, n);
    }
    for (int64_t v = 0; v < vecs; v++)
      set(groups * vecs + groups + v, 16);
    std::string s;
    for (int b : cfg)
      s += (s.empty() ? "" : ", ") + std::to_string(b);
    return s;
  }

  // The tiles' part of an AMX block's reduction: C tiles zeroed, the loops (open_loops: the tiles' loop
  // by 16 pairs), each step an A tile per 16 rows and a B tile per vector loaded and multiplied into
  // every C tile; then the C tiles stored to a block the accumulators are read from (the rest of the
  // loop, in vectors, and the epilogue continue from them). TDPBF16PS rounds as vdpbf16ps does (bfloat16
  // denormals read as zero, a denormal result flushes, round to nearest even).
  void emit_tiles(std::ostringstream& os, const TileBlock& t, const std::vector<std::string>& accs, int depth,
                  const std::string& bind, const std::function<void()>& open_loops,
                  const std::function<void()>& close_loops) {
    const int64_t groups = t.groups(), vecs = static_cast<int64_t>(t.cols.size());
    const std::string ind = indent(depth);
    for (int64_t c = 0; c < groups * vecs; c++)
      os << ind << "_tile_zero(" << c << ");\n";
    const std::string x = ref(t.x->src[0]), y = ref(t.y->src[0]);
    const std::string staged = t.y_rows ? "tiny_b" + std::to_string(next_++) : "";
    if (t.y_rows) os << ind << "uint16_t " << staged << "[" << vecs << "][16][32] __attribute__((aligned(64)));\n";
    open_loops();
    for (int64_t g = 0; g < groups; g++)
      os << bind << "_tile_loadd(" << groups * vecs + g << ", " << x << " + "
         << ref(t.rows[static_cast<size_t>(16 * g)]) << ", " << 2 * t.row_stride << ");\n";
    if (t.y_rows) stage_pairs(os, t, y, staged, bind);
    for (int64_t v = 0; v < vecs; v++)
      if (t.y_rows)
        os << bind << "_tile_loadd(" << groups * vecs + groups + v << ", &" << staged << "[" << v << "][0][0], 64);\n";
      else
        os << bind << "_tile_loadd(" << groups * vecs + groups + v << ", " << y << " + "
           << ref(t.cols[static_cast<size_t>(v)]) << ", " << 2 * t.y_step << ");\n";
    for (int64_t g = 0; g < groups; g++)
      for (int64_t v = 0; v < vecs; v++)
        os << bind << "_tile_dpbf16ps(" << g * vecs + v << ", " << groups * vecs + g << ", "
           << groups * vecs + groups + v << ");\n";
    close_loops();
    std::string block = "tiles" + std::to_string(next_++);
    os << ind << "float " << block << "[" << 16 * groups << "][" << 16 * vecs << "] __attribute__((aligned(64)));\n";
    for (int64_t g = 0; g < groups; g++)
      for (int64_t v = 0; v < vecs; v++)
        os << ind << "_tile_stored(" << g * vecs + v << ", &" << block << "[" << 16 * g << "][" << 16 * v << "], "
           << 64 * vecs << ");\n";
    for (size_t i = 0; i < accs.size(); i++) {
      const auto [row, v] = t.at[i];
      if (!t.y_rows) {
        os << ind << "memcpy(&" << accs[i] << ", &" << block << "[" << row << "][" << 16 * v << "], sizeof " << accs[i]
           << ");\n";
        continue;
      }
      // staged pairs hold their lanes in the unpacks' order (see stage_pairs): lanes n0..n0 + 3 (n0 = 16 v + 4 q)
      // are columns 4 L + (the half's width) h of the block, L = n0 / 8 the 128-bit lane, h = n0 / 4 % 2 the unpack
      for (int64_t q = 0; q < 4; q++) {
        const int64_t n0 = 16 * static_cast<int64_t>(v) + 4 * q, col = 4 * (n0 / 8) + 8 * vecs * (n0 / 4 % 2);
        os << ind << "memcpy((char*)&" << accs[i] << " + " << 16 * q << ", &" << block << "[" << row << "][" << col
           << "], 16);\n";
      }
    }
  }

  // A step's B tiles of y read in place (TileBlock::y_rows): pair i of lane n is y's elements n of rows 2 i and
  // 2 i + 1, interleaved by unpacking the two rows' vectors, two tiles' 32 lanes in one 512-bit vector each (one
  // 256-bit vector for one tile). An unpack interleaves within each 128-bit lane, so a tile holds lanes in the
  // order 0-3, 8-11, ... (the low halves of the 128-bit lanes), then 4-7, 12-15, ...; its C tile's columns too
  // (undone where the accumulators are read, see emit_tiles). Interleaving the 16 x 32 pairs each step in place
  // of reading a panel copied by pairs: x @ w of 32 rows by 1024 x 1024, two threads, 63 us against 52 + 36 for
  // the copy and the product (a C harness); a 256-bit unpack a tile took 96 us, a full permute (vpermt2w) 100.
  void stage_pairs(std::ostringstream& os, const TileBlock& t, const std::string& y, const std::string& staged,
                   const std::string& bind) {
    const bool wide = t.cols.size() == 2;
    const std::string vec = wide ? "__m512i" : "__m256i", fn = wide ? "_mm512_" : "_mm256_";
    const std::string load = wide ? "_mm512_loadu_si512((const void*)(" : "_mm256_loadu_si256((const __m256i*)(";
    const std::string at = y + " + " + ref(t.cols[0]) + " + tiny_i * " + std::to_string(t.y_step);
    os << bind << "for (int64_t tiny_i = 0; tiny_i < 16; tiny_i++) {\n"
       << bind << "  const " << vec << " tiny_r0 = " << load << at << ")), tiny_r1 = " << load << at << " + "
       << t.y_rows << "));\n";
    for (int h = 0; h < 2; h++)
      os << bind << "  " << fn << (wide ? "store_si512((void*)" : "store_si256((__m256i*)") << "&" << staged << "["
         << (wide ? h : 0) << "][tiny_i][" << (wide ? 0 : 16 * h) << "], " << fn << (h ? "unpackhi" : "unpacklo")
         << "_epi16(tiny_r0, tiny_r1));\n";
    os << bind << "}\n";
  }

  // Whether the lanes of m's vector accumulator combine as whole vectors (combine_lanes): an op C computes on
  // vectors of its type (bool lanes are bytes of 0 or 1: or, and, xor), over a power of two of lanes.
  bool whole_vector_combine(const UOpPtr& m) const {
    const DType dt = m->dtype;
    return (native_lanes(dt) || dt == DType::Bool) && k_.lanes >= 2 && (k_.lanes & (k_.lanes - 1)) == 0;
  }

  // The lanes of m's vector accumulator acc combined in log2(lanes) steps, each the vector and its lanes swapped
  // in pairs of halves (lane l takes lane l ^ half): lane 0 ends with the result. A tree of scalar steps on the
  // lanes took 15 dependent scalar ops a row (with a NaN test each for a max); softmax over rows of 65 (sdpa's,
  // 8320 rows, one thread): 595 -> 491 us. A sum's order changes as torch's vectorized sums' does.
  std::string combine_lanes(std::ostream& os, const UOpPtr& m, const std::string& acc, const std::string& ind) {
    const std::string type = vec_type(m->dtype);
    std::string v = acc;
    for (int64_t half = k_.lanes / 2; half >= 1; half /= 2) {
      std::string swapped = "acc" + std::to_string(next_++), next = "acc" + std::to_string(next_++);
      os << ind << "const " << type << " " << swapped << " = __builtin_shufflevector(" << v << ", " << v;
      for (int64_t l = 0; l < k_.lanes; l++)
        os << ", " << (l ^ half);
      os << ");\n" << ind << "const " << type << " " << next << " = " << vector_update(m, v, swapped) << ";\n";
      v = next;
    }
    return "(" + v + "[0])";
  }

  // The reduction m's vector accumulator acc updated with `v` (m's value in this step by default): lanes
  // accumulate separately, each in the scalar order.
  std::string vector_update(const UOpPtr& m, const std::string& acc, std::string v = {}) {
    const DType dt = m->dtype;
    const Ops op = m->reduce_arg().op;
    if (v.empty() && (native_lanes(dt) || dt == DType::Bool)) v = ref(m->src[0]);
    if (dt == DType::Bool) return acc + bool_op(op) + v; // bytes of 0 or 1
    if (!native_lanes(dt))
      return per_lane(dt, [&](int64_t l) {
        return combine(op, dt, acc + "[" + std::to_string(l) + "]",
                       v.empty() ? lane(m->src[0], l) : v + "[" + std::to_string(l) + "]");
      });
    if (op == Ops::MAX || op == Ops::MIN) return vector_minmax(op, dt, acc, v);
    return acc + (op == Ops::ADD ? " + " : op == Ops::MUL ? " * " : " ^ ") + v;
  }

  // A reduction's op over bools as a C operator (on bytes of 0 or 1: a vector's lanes too): any, all, parity.
  static std::string bool_op(Ops op) {
    return op == Ops::ADD || op == Ops::MAX ? " | " : op == Ops::XOR ? " ^ " : " & ";
  }

  // acc op v for a reduction's op.
  static std::string combine(Ops op, DType dt, const std::string& acc, const std::string& v) {
    switch (op) {
    case Ops::ADD:
      return dt == DType::Bool ? acc + " | " + v : acc + " + " + v;
    case Ops::MUL:
      return dt == DType::Bool ? acc + " & " + v : acc + " * " + v;
    case Ops::XOR:
      return acc + " ^ " + v;
    case Ops::MAX:
    case Ops::MIN:
      return render_binary(op, dt, dt, acc, v);
    default:
      throw std::logic_error("render_c: bad reduce op");
    }
  }

  // max/min of two vectors, with torch's NaN propagation for floats.
  static std::string vector_minmax(Ops op, DType dt, const std::string& a, const std::string& b) {
    std::string pick = op == Ops::MAX ? "(" + a + " < " + b + " ? " + b + " : " + a + ")"
                                      : "(" + b + " < " + a + " ? " + b + " : " + a + ")";
    if (!is_float(dt)) return pick;
    return "((" + a + " != " + a + ") | (" + b + " != " + b + ") ? " + a + " + " + b + " : " + pick + ")";
  }
};

} // namespace

std::string render_c(const Kernel& k, const std::string& fn_name) {
  return k.winograd ? kPrelude + render_winograd(k, fn_name) : CRenderer(k).render(fn_name);
}

std::string render_c_bundle(const std::vector<std::string>& sources, const std::vector<std::string>& fn_names) {
  std::string_view prelude = kPrelude;
  std::ostringstream os;
  os << prelude;
  for (size_t i = 0; i < sources.size(); i++) {
    if (!sources[i].starts_with(prelude))
      throw std::logic_error("render_c_bundle: kernel " + fn_names.at(i) + " is not render_c's source");
    // After the prelude a source declares its vector types and its function, and names the flag
    // through the prelude's macros: renaming by macros reaches every use, expanded or not.
    std::string suffix = bundle_suffix(i);
    std::vector<std::string> names{fn_names.at(i), "tiny_errors"};
    for (auto [t, name] : kVectorTypes)
      names.emplace_back(name);
    for (auto [t, name] : kUnsignedVectorTypes)
      if (sources[i].find(std::string(" ") + name + " __attribute__") != std::string::npos) names.emplace_back(name);
    for (const char* name : kVectorHelpers)
      names.emplace_back(name);
    if (sources[i].find("void tiny_copy(") != std::string::npos) names.emplace_back("tiny_copy");
    if (sources[i].find("void tiny_store_rows(") != std::string::npos)
      for (const char* name : kStoreRowsNames)
        names.emplace_back(name);
    os << "\n";
    for (const std::string& name : names)
      os << "#define " << name << " " << name << suffix << "\n";
    os << "int tiny_errors" << suffix << ";\n";
    os << std::string_view(sources[i]).substr(prelude.size());
    for (const std::string& name : names)
      os << "#undef " << name << "\n";
  }
  return os.str();
}

std::string unsigned_division(Ops op, const std::string& a, const std::string& b, const std::string& zero) {
  return "(" + b + " == 0 ? " + zero + " : " + a + (op == Ops::IDIV ? " / " : " % ") + b + ")";
}

std::string float_to_unsigned(const std::string& a, DType from, DType to, const std::string& to_type,
                              const std::string& i32, const std::string& i64) {
  bool f64 = from == DType::Float64, to_64 = to == DType::UInt64;
  // float16 has no vectorized conversion to uint32 there: the 64-bit one, truncated
  if (!to_64 && from == DType::Float16) return float_to_int(a, false, true, to_type, i32, i64);
  std::string top = std::string(to_64 ? "9223372036854775808.0" : "2147483648.0") + (f64 ? "" : "f");
  std::string low = float_to_int(a, f64, to_64, to_type, i32, i64);
  std::string high = float_to_int("(" + a + " - " + top + ")", f64, to_64, to_type, i32, i64);
  std::string top_bit = "((" + to_type + ")1 << " + (to_64 ? "63" : "31") + ")";
  return "(" + a + " >= " + top + " ? (" + to_type + ")(" + high + " ^ " + top_bit + ") : " + low + ")";
}

std::string float_to_int(const std::string& a, bool from_f64, bool to_64, const std::string& to_type,
                         const std::string& i32, const std::string& i64) {
  std::string lim = std::string(to_64 ? "9223372036854775808.0" : "2147483648.0") + (from_f64 ? "" : "f");
  std::string t = to_64 ? i64 : i32;
  std::string min = to_64 ? "(-9223372036854775807LL - 1)" : "(-2147483647 - 1)";
  return "((" + to_type + ")(" + a + " >= -" + lim + " && " + a + " < " + lim + " ? (" + t + ")" + a + " : (" + t +
         ")" + min + "))";
}

} // namespace tiny
