#pragma once
// Rendering: a lowered kernel becomes C source. One C-style renderer; dialects (CUDA, HIP) will
// change the prelude, the function signature and how the outer loop maps to threads.

#include <string>
#include <vector>

#include "compiler/lower.h"

namespace tiny {

// The generated function has the signature
//   void NAME(void* const* bufs, const int64_t* ivars, const double* fvars, int64_t begin, int64_t end)
// and runs iterations [begin, end) of the outermost loop.
std::string render_c(const Kernel& k, const std::string& fn_name);

// Several of render_c's sources as one C source with the prelude once (a library of a schedule's
// kernels: clang starts, parses the prelude and links once for all of them). Kernel i's function and
// its zero-division flag are renamed with bundle_suffix(i) ("E_8" -> "E_8_k3", "tiny_errors" ->
// "tiny_errors_k3"): kernels of one name stay apart, and each keeps a flag of its own. Throws
// std::logic_error for a source render_c did not make.
std::string render_c_bundle(const std::vector<std::string>& sources, const std::vector<std::string>& fn_names);
inline std::string bundle_suffix(size_t i) { return "_k" + std::to_string(i); }

// The C expression converting the float register value `a` (a name: it is repeated) to an integer,
// as torch's CPU does on x86: ints of up to 32 bits through a 32-bit conversion, then truncated to
// `to_type`; a value out of range, or NaN, becomes the minimum (what cvttss2si gives), on every target.
// `from_f64` says whether `a` is a double; i32/i64 name the 32- and 64-bit integer types.
std::string float_to_int(const std::string& a, bool from_f64, bool to_64, const std::string& to_type,
                         const std::string& i32, const std::string& i64);
// a / b (op IDIV) or a % b (MOD) of unsigned operands, `zero` for a zero divisor: the signed helpers'
// `b == -1` test would match the largest unsigned value.
std::string unsigned_division(Ops op, const std::string& a, const std::string& b, const std::string& zero);
// float_to_int for uint32 and uint64 (`to`; uint8 and uint16 are float_to_int's), as torch's CPU converts them in
// its vectorized loops on x86: below 2**31 (2**63) the signed conversion above, from there that of a - 2**31
// (2**63) with the top bit set again, so that NaN and -inf give 2**31 (2**63) and +inf 0; float16 to uint32
// through the 64-bit conversion. (Its scalar loops, for a tensor's last few elements, convert values out of
// the range otherwise: C++ leaves them undefined.) `from` is the float dtype of `a`.
std::string float_to_unsigned(const std::string& a, DType from, DType to, const std::string& to_type,
                              const std::string& i32, const std::string& i64);

} // namespace tiny
