#pragma once
// Rendering: a lowered kernel becomes C source. One C-style renderer; dialects (CUDA, HIP) will
// change the prelude, the function signature and how the outer loop maps to threads.

#include <string>

#include "compiler/lower.h"

namespace tiny {

// The generated function has the signature
//   void NAME(void* const* bufs, const int64_t* ivars, const double* fvars, int64_t begin, int64_t end)
// and runs iterations [begin, end) of the outermost loop.
std::string render_c(const Kernel& k, const std::string& fn_name);

// The C expression converting the float register value `a` (a name: it is repeated) to an integer,
// as torch's CPU does on x86: ints of up to 32 bits through a 32-bit conversion, then truncated to
// `to_type`; a value out of range, or NaN, becomes the minimum (what cvttss2si gives), on every target.
// `from_f64` says whether `a` is a double; i32/i64 name the 32- and 64-bit integer types.
std::string float_to_int(const std::string& a, bool from_f64, bool to_64, const std::string& to_type,
                         const std::string& i32, const std::string& i64);

} // namespace tiny
