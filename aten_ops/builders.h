#pragma once
// Named elementwise builders the ATen kernels write their formulas with.

#include "compiler/uop.h"

namespace tiny::aten_ops {

inline UOpPtr add(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::ADD, a, b); }
inline UOpPtr sub(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::SUB, a, b); }
inline UOpPtr mul(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::MUL, a, b); }
inline UOpPtr div(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::FDIV, a, b); }
inline UOpPtr lt(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::CMPLT, a, b); }
inline UOpPtr le(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::CMPLE, a, b); }
inline UOpPtr exp(const UOpPtr& a) { return alu(Ops::EXP, a); }
inline UOpPtr log(const UOpPtr& a) { return alu(Ops::LOG, a); }
inline UOpPtr eq(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::CMPEQ, a, b); }
inline UOpPtr both(const UOpPtr& a, const UOpPtr& b) { return alu(Ops::AND, a, b); }

// A literal of a formula (the 0.5 in huber) or a count, broadcast to `shape`: folded by the compiler.
inline UOpPtr fixed(DType dt, double v, const Shape& shape) {
  UOpPtr c = is_float(dt) ? const_float(dt, v) : const_int(dt, static_cast<int64_t>(v));
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}
inline UOpPtr like(const UOpPtr& x, double v) { return fixed(x->dtype, v, x->shape); }

// The sum of x over `axes`, keeping them as size 1; a sum over no elements is 0.
inline UOpPtr sum_keep(const UOpPtr& x, const std::vector<int64_t>& axes) {
  Shape kept = x->shape;
  int64_t n = 1;
  for (int64_t a : axes) {
    n *= x->shape[a];
    kept[a] = 1;
  }
  return n > 0 ? reduce(x, Ops::ADD, axes) : fixed(x->dtype, 0, kept);
}

} // namespace tiny::aten_ops
