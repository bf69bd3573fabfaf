#include "compiler/dtype.h"

#include <array>

namespace tiny {

namespace {
constexpr std::array<DTypeInfo, 14> kInfos = {{
    {"bool", "_Bool", 1, false, false},
    {"int8", "int8_t", 1, false, true},
    {"int16", "int16_t", 2, false, true},
    {"int32", "int32_t", 4, false, true},
    {"int64", "int64_t", 8, false, true},
    {"uint8", "uint8_t", 1, false, false},
    {"float16", "uint16_t", 2, true, true},
    {"bfloat16", "uint16_t", 2, true, true},
    {"float32", "float", 4, true, true},
    {"float64", "double", 8, true, true},
    {"uint16", "uint16_t", 2, false, false},
    {"uint32", "uint32_t", 4, false, false},
    {"uint64", "uint64_t", 8, false, false},
    {"void", "void", 0, false, false},
}};
} // namespace

const DTypeInfo& info(DType dt) { return kInfos[static_cast<size_t>(dt)]; }

} // namespace tiny
