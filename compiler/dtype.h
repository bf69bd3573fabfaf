#pragma once
// Element types the compiler knows. The set mirrors the torch dtypes tiny supports (complex ones are pairs of
// their real parts). UInt16/32/64 came last, so that the other values (kernel and cache keys) kept theirs.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tiny {

enum class DType : uint8_t {
  Bool,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  Float16,
  BFloat16,
  Float32,
  Float64,
  UInt16,
  UInt32,
  UInt64,
  Void
};

struct DTypeInfo {
  std::string_view name;   // e.g. "float32"
  std::string_view c_name; // storage type in generated C
  size_t itemsize;
  bool is_float;
  bool is_signed;
};

const DTypeInfo& info(DType dt);
inline size_t itemsize(DType dt) { return info(dt).itemsize; }
inline bool is_float(DType dt) { return info(dt).is_float; }
inline bool is_int(DType dt) { return !is_float(dt) && dt != DType::Bool && dt != DType::Void; }
// uint8..uint64. A CONST or runtime scalar of one holds its value in an int64_t, uint64's as its bit pattern
// (2**64 - 1 is -1): compare, divide, shift and convert it as unsigned, never as that int64_t.
inline bool is_unsigned(DType dt) { return is_int(dt) && !info(dt).is_signed; }
inline std::string_view name(DType dt) { return info(dt).name; }
// The type arithmetic on dt is done in: float16 and bfloat16 compute in float32 and round once at
// the end (torch's CPU kernels do the same).
inline DType opmath(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16 ? DType::Float32 : dt; }

// The type used for index arithmetic in kernels.
constexpr DType kIndex = DType::Int64;

} // namespace tiny
