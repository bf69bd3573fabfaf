#pragma once
// The CPU fallback: every ATen op tiny has no kernel for runs on PyTorch's CPU kernel (csrc/fallback.cpp).
// It counts its calls per op; runtime::stats().fallbacks holds their total.

#include <cstdint>
#include <map>
#include <string>

namespace tiny {

// Calls through the fallback since the last reset, by operator name ("aten::cumsum", "aten::sort.values").
std::map<std::string, int64_t> fallback_op_counts();
void reset_fallback_op_counts();

} // namespace tiny
