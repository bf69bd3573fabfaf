#pragma once
// Rendering for GPUs: one C-style renderer; OpenCL, CUDA and HIP are rows of its dialect tables
// (keywords, address spaces, types, thread ids, barrier, local memory, math names).

#include <string>

#include "compiler/lower.h"
#include "compiler/target.h"

namespace tiny {

// The kernel `fn_name` of a GPU-lowered kernel. Its arguments, in order: the buffers (slot order),
// then each integer scalar as int64, then each float scalar as float (double when
// k.launch.f64_scalars), then, when the kernel divides integers of the user's (checked_division), a
// pointer to the device's int error flag named kGpuErrorFlag, set to 1 on a zero divisor. Throws when
// the kernel computes in float64 and the target has none.
constexpr const char* kGpuErrorFlag = "tiny_errors";
std::string render_gpu(const Kernel& k, const std::string& fn_name, const Target& target);

} // namespace tiny
