#pragma once
// torch.special's orthogonal polynomials of degree n (a tensor, truncated to an integer as the CPU does):
// chebyshev_polynomial_t, _u, _v and _w, their shifted forms (of 2x - 1), hermite_polynomial_h and _he,
// laguerre_polynomial_l, legendre_polynomial_p.
// Each follows torch's CPU kernel: its special cases (negative n, |x| == 1, the trigonometric form of the
// Chebyshev polynomials for |x| < 1 and large n, hermite's NaN past a degree limit) as selects, and otherwise
// its three-term recurrence, run n - 1 times from (1, P_1(x)).
//
// The recurrence's trip count depends on the data: the largest n among the elements that recur is read to the
// host (a small kernel of its own), and that many steps are built, each element keeping its value once its
// own n is reached. A step's k and index are runtime scalars and every 16 steps realize their state, so the
// steps' kernels are the same programs whatever the degree (compiled once per shape); a degree past
// kMaxRecurrenceSteps raises instead of building a graph that large.

#include <ATen/ATen.h>

#include <functional>

#include "aten_ops/builders.h"
#include "aten_ops/read_on_host.h"

namespace tiny::aten_ops::polynomials {

constexpr int64_t kMaxRecurrenceSteps = 4096;
constexpr int64_t kStepsPerKernel = 16;

// r = step(k, p, q): the next value from the last two, with the step's k (a runtime scalar).
using Step = std::function<UOpPtr(const UOpPtr& k, const UOpPtr& p, const UOpPtr& q)>;

inline UOpPtr scalar_like(const UOpPtr& s, const Shape& shape) {
  return expand(reshape(s, Shape(shape.size(), 1)), shape);
}

// The value after n - 1 steps from (p, q) = (1, q1) for the elements where `recurs`; k = k0, k0 + dk, ...
inline UOpPtr recurrence(const char* op, const UOpPtr& n, const UOpPtr& recurs, const UOpPtr& q1, int64_t k0,
                         int64_t dk, const Step& step, c10::Device device) {
  const Shape& shape = q1->shape;
  DType dt = q1->dtype;
  UOpPtr trips = where(recurs, sub(n, fixed(DType::Int64, 1, shape)), fixed(DType::Int64, 0, shape));
  const int64_t steps = max_on_host(trips, device);
  TORCH_CHECK(steps <= kMaxRecurrenceSteps, op, " on tiny: degree ", steps + 1, " needs ", steps,
              " recurrence steps; tiny builds at most ", kMaxRecurrenceSteps);
  UOpPtr p = fixed(dt, 1, shape), q = q1;
  for (int64_t i = 1; i <= steps; i++) {
    UOpPtr k = scalar_like(var_float(dt, static_cast<double>(k0 + (i - 1) * dk)), shape);
    UOpPtr runs = lt(scalar_like(var_int(DType::Int64, i), shape), n); // step i runs while i <= n - 1
    UOpPtr r = step(k, p, q);
    p = where(runs, q, p);
    q = where(runs, r, q);
    if (i % kStepsPerKernel == 0 && i < steps) {
      p = contiguous(p);
      q = contiguous(q);
    }
  }
  return q;
}

// What every polynomial reads: x, n truncated to int64, and torch's common cases.
struct Args {
  UOpPtr x, n;
  Shape shape;
  c10::Device device;
  UOpPtr c(double v) const { return fixed(x->dtype, v, shape); }
  UOpPtr i(int64_t v) const { return fixed(DType::Int64, static_cast<double>(v), shape); }
  UOpPtr n_is(int64_t v) const { return alu(Ops::CMPEQ, n, i(v)); }
  UOpPtr n_below(int64_t v) const { return lt(n, i(v)); }
  UOpPtr nf(int64_t plus = 0) const { return cast(plus ? add(n, i(plus)) : n, x->dtype); }
  UOpPtr abs_x() const { return alu(Ops::ABS, x); }
  // x > 0 or n even: the sign of P_n(+-1) for the polynomials of one parity
  UOpPtr plus_side() const {
    UOpPtr even = alu(Ops::CMPEQ, alu(Ops::AND, n, i(1)), i(0));
    return alu(Ops::OR, lt(c(0), x), even);
  }
};

inline Args args(const UOpPtr& x, const UOpPtr& n_float, c10::Device device) {
  return {x, cast(n_float, DType::Int64), x->shape, device};
}

// Cases in torch's order: the first that holds gives the value.
inline UOpPtr cases(std::initializer_list<std::pair<UOpPtr, UOpPtr>> in_order, const UOpPtr& otherwise) {
  std::vector<std::pair<UOpPtr, UOpPtr>> v(in_order);
  UOpPtr r = otherwise;
  for (auto it = v.rbegin(); it != v.rend(); ++it)
    r = where(it->first, it->second, r);
  return r;
}

inline UOpPtr no(const UOpPtr& a) { return alu(Ops::NOT, a); }

inline UOpPtr chebyshev_t(const Args& a) {
  const UOpPtr& x = a.x;
  UOpPtr unit = alu(Ops::CMPEQ, a.abs_x(), a.c(1)), trig = both(lt(a.i(6), a.n), lt(a.abs_x(), a.c(1)));
  UOpPtr recurs = both(both(no(unit), no(trig)), no(a.n_below(2)));
  UOpPtr r = recurrence(
      "special_chebyshev_polynomial_t", a.n, recurs, x, 2, 1,
      [&](const UOpPtr&, const UOpPtr& p, const UOpPtr& q) { return sub(mul(add(x, x), q), p); }, a.device);
  return cases({{a.n_below(0), a.c(0)},
                {unit, where(a.plus_side(), a.c(1), a.c(-1))},
                {trig, alu(Ops::COS, mul(a.nf(), alu(Ops::ACOS, x)))},
                {a.n_is(0), a.c(1)},
                {a.n_is(1), x}},
               r);
}

inline UOpPtr chebyshev_u(const Args& a) {
  const UOpPtr& x = a.x;
  UOpPtr unit = alu(Ops::CMPEQ, a.abs_x(), a.c(1)), trig = both(lt(a.i(8), a.n), lt(a.abs_x(), a.c(1)));
  UOpPtr recurs = both(both(no(unit), no(trig)), no(a.n_below(2)));
  UOpPtr r = recurrence(
      "special_chebyshev_polynomial_u", a.n, recurs, add(x, x), 2, 1,
      [&](const UOpPtr&, const UOpPtr& p, const UOpPtr& q) { return sub(mul(add(x, x), q), p); }, a.device);
  UOpPtr angle = alu(Ops::ACOS, x), s = alu(Ops::SIN, angle), m = mul(a.nf(1), angle);
  UOpPtr trig_value =
      where(alu(Ops::CMPNE, s, a.c(0)), div(alu(Ops::SIN, m), s), div(mul(a.nf(1), alu(Ops::COS, m)), x));
  return cases({{a.n_below(0), a.c(0)},
                {unit, where(a.plus_side(), a.nf(1), alu(Ops::NEG, a.nf(1)))},
                {trig, trig_value},
                {a.n_is(0), a.c(1)},
                {a.n_is(1), add(x, x)}},
               r);
}

// The Chebyshev polynomials of the third and fourth kind and the shifted ones share T and U's recurrence
// r = 2y q - p from (1, q1), with y = x or 2x - 1; their special cases differ in small ways (torch's Math.h).
struct Chebyshev {
  const Args& a;
  UOpPtr y;                            // x, or x + x - 1 for the shifted ones
  UOpPtr sign(const UOpPtr& v) const { // v for even n, -v for odd
    UOpPtr even = alu(Ops::CMPEQ, alu(Ops::AND, a.n, a.i(1)), a.i(0));
    return where(even, v, alu(Ops::NEG, v));
  }
  UOpPtr odd_count() const { return cast(add(add(a.n, a.n), a.i(1)), a.x->dtype); } // n + n + 1
  UOpPtr half_angle() const { return div(alu(Ops::ACOS, y), a.c(2)); }
  UOpPtr half_step() const { return mul(add(a.nf(), a.c(0.5)), alu(Ops::ACOS, y)); } // (n + 0.5) acos(y)
  UOpPtr run(const char* op, const UOpPtr& special, const UOpPtr& q1) const {
    UOpPtr recurs = both(no(special), no(a.n_below(2)));
    return recurrence(
        op, a.n, recurs, q1, 2, 1,
        [&](const UOpPtr&, const UOpPtr& p, const UOpPtr& q) { return sub(mul(add(y, y), q), p); }, a.device);
  }
};

inline UOpPtr chebyshev_v(const Args& a) {
  Chebyshev ch{a, a.x};
  UOpPtr unit = alu(Ops::CMPEQ, a.abs_x(), a.c(1)), trig = both(lt(a.i(8), a.n), lt(a.abs_x(), a.c(1)));
  UOpPtr q1 = sub(add(a.x, a.x), a.c(1));
  UOpPtr r = ch.run("special_chebyshev_polynomial_v", alu(Ops::OR, unit, trig), q1);
  UOpPtr trig_value =
      where(alu(Ops::CMPNE, alu(Ops::SIN, ch.half_angle()), a.c(1)),
            div(alu(Ops::COS, ch.half_step()), alu(Ops::COS, ch.half_angle())), ch.sign(ch.odd_count()));
  return cases({{a.n_below(0), a.c(0)},
                {unit, where(lt(a.c(0), a.x), a.c(1), ch.sign(ch.odd_count()))},
                {trig, trig_value},
                {a.n_is(0), a.c(1)},
                {a.n_is(1), q1}},
               r);
}

inline UOpPtr chebyshev_w(const Args& a) {
  Chebyshev ch{a, a.x};
  UOpPtr unit = alu(Ops::CMPEQ, a.abs_x(), a.c(1)), trig = both(lt(a.i(8), a.n), lt(a.abs_x(), a.c(1)));
  UOpPtr q1 = add(add(a.x, a.x), a.c(1));
  UOpPtr r = ch.run("special_chebyshev_polynomial_w", alu(Ops::OR, unit, trig), q1);
  UOpPtr edge = where(lt(a.c(0), a.x), ch.odd_count(), ch.sign(a.c(1)));
  UOpPtr trig_value = where(alu(Ops::CMPNE, alu(Ops::COS, ch.half_angle()), a.c(1)),
                            div(alu(Ops::SIN, ch.half_step()), alu(Ops::SIN, ch.half_angle())), edge);
  return cases({{a.n_below(0), a.c(0)}, {unit, edge}, {trig, trig_value}, {a.n_is(0), a.c(1)}, {a.n_is(1), q1}}, r);
}

// The shifted polynomials of kind 't', 'u', 'v' or 'w': P*(x) = P(2x - 1), with torch's cases at x = 1 and x = 0.
inline UOpPtr shifted_chebyshev(const Args& a, char kind) {
  UOpPtr y = sub(add(a.x, a.x), a.c(1));
  Chebyshev ch{a, y};
  UOpPtr at_one = alu(Ops::CMPEQ, a.x, a.c(1)), at_zero = alu(Ops::CMPEQ, a.x, a.c(0));
  UOpPtr inside = lt(alu(Ops::ABS, y), a.c(1)), angle = alu(Ops::ACOS, y);
  UOpPtr n1 = a.nf(1);
  UOpPtr one_value, zero_value, trig_value, q1;
  int64_t trig_from = 6;
  switch (kind) {
  case 't':
    one_value = a.c(1);
    zero_value = ch.sign(a.c(1));
    trig_value = alu(Ops::COS, mul(a.nf(), angle));
    q1 = y;
    break;
  case 'u': {
    one_value = n1;
    zero_value = ch.sign(n1);
    UOpPtr s = alu(Ops::SIN, angle), m = mul(n1, angle);
    trig_value = where(alu(Ops::CMPNE, s, a.c(0)), div(alu(Ops::SIN, m), s), div(mul(n1, alu(Ops::COS, m)), y));
    q1 = add(y, y);
    break;
  }
  case 'v':
    one_value = a.c(1);
    zero_value = ch.sign(ch.odd_count());
    trig_value = where(alu(Ops::CMPNE, alu(Ops::SIN, ch.half_angle()), a.c(1)),
                       div(alu(Ops::COS, ch.half_step()), alu(Ops::COS, ch.half_angle())), zero_value);
    q1 = sub(add(y, y), a.c(1));
    break;
  default: // 'w'
    one_value = ch.odd_count();
    zero_value = ch.sign(a.c(1));
    trig_value = where(alu(Ops::CMPNE, alu(Ops::COS, ch.half_angle()), a.c(1)),
                       div(alu(Ops::SIN, ch.half_step()), alu(Ops::SIN, ch.half_angle())), zero_value);
    q1 = add(add(y, y), a.c(1));
    trig_from = 4;
    break;
  }
  UOpPtr trig = both(lt(a.i(trig_from), a.n), inside);
  const char* names[] = {"special_shifted_chebyshev_polynomial_t", "special_shifted_chebyshev_polynomial_u",
                         "special_shifted_chebyshev_polynomial_v", "special_shifted_chebyshev_polynomial_w"};
  UOpPtr r = ch.run(names[kind - 't'], alu(Ops::OR, alu(Ops::OR, at_one, at_zero), trig), q1);
  return cases({{a.n_below(0), a.c(0)},
                {at_one, one_value},
                {at_zero, zero_value},
                {trig, trig_value},
                {a.n_is(0), a.c(1)},
                {a.n_is(1), q1}},
               r);
}

// hermite's recurrences stop at a degree limit (128 for float, 512 for double): NaN past it, as on the CPU.
inline UOpPtr hermite(const Args& a, bool physicists) {
  const UOpPtr& x = a.x;
  const int64_t limit = x->dtype == DType::Float64 ? 512 : 128;
  UOpPtr past_limit = lt(a.i(limit), a.n);
  UOpPtr recurs = both(no(a.n_below(2)), no(past_limit));
  UOpPtr q1 = physicists ? add(x, x) : x;
  Step step = [&](const UOpPtr& k, const UOpPtr& p, const UOpPtr& q) {
    return sub(mul(physicists ? add(x, x) : x, q), mul(k, p));
  };
  UOpPtr r = recurrence(physicists ? "special_hermite_polynomial_h" : "special_hermite_polynomial_he", a.n, recurs, q1,
                        physicists ? 2 : 1, physicists ? 2 : 1, step, a.device);
  return cases({{a.n_below(0), a.c(0)}, {a.n_is(0), a.c(1)}, {a.n_is(1), q1}, {past_limit, a.c(NAN)}}, r);
}

inline UOpPtr laguerre_l(const Args& a) {
  const UOpPtr& x = a.x;
  UOpPtr at_zero = alu(Ops::CMPEQ, a.abs_x(), a.c(0)), one_minus_x = sub(a.c(1), x);
  UOpPtr recurs = both(no(at_zero), no(a.n_below(2)));
  UOpPtr r = recurrence(
      "special_laguerre_polynomial_l", a.n, recurs, one_minus_x, 1, 1,
      [&](const UOpPtr& k, const UOpPtr& p, const UOpPtr& q) {
        return div(sub(mul(add(add(k, k), one_minus_x), q), mul(k, p)), add(k, a.c(1)));
      },
      a.device);
  return cases({{a.n_below(0), a.c(0)}, {at_zero, a.c(1)}, {a.n_is(0), a.c(1)}, {a.n_is(1), one_minus_x}}, r);
}

inline UOpPtr legendre_p(const Args& a) {
  const UOpPtr& x = a.x;
  UOpPtr unit = alu(Ops::CMPEQ, a.abs_x(), a.c(1));
  UOpPtr recurs = both(no(unit), no(a.n_below(2)));
  UOpPtr r = recurrence(
      "special_legendre_polynomial_p", a.n, recurs, x, 1, 1,
      [&](const UOpPtr& k, const UOpPtr& p, const UOpPtr& q) {
        UOpPtr odd = add(add(k, k), a.c(1));
        return div(sub(mul(mul(odd, x), q), mul(k, p)), add(k, a.c(1)));
      },
      a.device);
  return cases(
      {{a.n_below(0), a.c(0)}, {unit, where(a.plus_side(), a.c(1), a.c(-1))}, {a.n_is(0), a.c(1)}, {a.n_is(1), x}}, r);
}

} // namespace tiny::aten_ops::polynomials
