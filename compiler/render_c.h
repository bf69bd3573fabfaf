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

} // namespace tiny
