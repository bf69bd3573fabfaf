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

} // namespace tiny::aten_ops
