#pragma once
// Kernels of every shape the GPU lowering makes, for tests that compile them in each dialect without
// running them (their buffers are only identities: nothing is allocated).

#include <string>
#include <vector>

#include "compiler/lower.h"
#include "compiler/target.h"

namespace tiny {

struct SampleKernel {
  std::string what; // "softmax: grouped reduces", ...
  Kernel kernel;
};

// The first calls libm functions (erf), which a HIP build takes from ROCm's device library. Among the
// others: an elementwise kernel per dtype (integer ones dividing, so they take the error flag), vector
// lanes per dtype class over aligned, broadcast, misaligned and strided reads, grouped reduces, matmuls
// (float32 with tiles staged in local memory, float16), float16/bfloat16 bitcasts,
// float64 masked views with runtime scalars, a scatter and a gather.
std::vector<SampleKernel> sample_gpu_kernels(const Target& t);

} // namespace tiny
