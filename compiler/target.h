#pragma once
// What lowering and rendering need to know about the device a kernel runs on, and how a lowered
// kernel is launched.

#include <array>
#include <cstdint>

namespace tiny {

// The source language a kernel is rendered in: C for the CPU device, or one of the GPU dialects of
// render_gpu (one renderer; a dialect is a row of its tables).
enum class Dialect : uint8_t { C, OpenCL, CUDA, HIP };

struct Target {
  Dialect dialect = Dialect::C;
  int64_t max_local = 256;       // threads per work-group (the device's limit, capped)
  int64_t local_mem = 16 * 1024; // bytes of __local / __shared__ memory per work-group
  std::array<int64_t, 3> max_groups{int64_t{1} << 31, 65535, 65535}; // work-groups per grid axis
  bool fp64 = true;                                                  // double arithmetic available
  // CPU: AMX-BF16 tiles usable: the host has them and the OS granted this process their state (see
  // amx_tiles in runtime/cpu_device.cpp). A bfloat16 matmul's register block then accumulates in tiles.
  bool amx_bf16 = false;
  // CPU: bfloat16 products step by AVX512_BF16 pair dot products (vdpbf16ps) where they pay on this host (see
  // pair_dots_pay in runtime/cpu_device.cpp), else by widened float32 multiply-adds.
  bool bf16_pair_dots = false;
  // CPU: float32 3 x 3 convolutions of stride 1 run as Winograd kernels (compiler/winograd.h): the host has
  // AVX-512F, which they are written in, and TINY_WINOGRAD is not 0.
  bool winograd = false;
  // CPU: the threads a kernel's outermost loop is split across (runtime/thread_pool.h).
  int64_t threads = 1;
  // CPU: the bytes of one core's L2 cache (sysconf), which a convolution's weight gradient sizes its batch
  // chunks by (see weight_grad_chunk in aten_ops/conv.cpp).
  int64_t l2_bytes = int64_t{2} << 20;
  bool gpu() const { return dialect != Dialect::C; }
  // CPU: bfloat16 products pair their reduced axis (AMX tiles and pair dot products both step by pairs).
  bool bf16_pairs() const { return !gpu() && (amx_bf16 || bf16_pair_dots); }
};

// Launch dimensions. GPU: `global` work-groups per axis of `local` threads each (CUDA's grid and
// block; OpenCL's global size is their product). CPU: global[0] iterations of the outermost loop,
// split across the thread pool.
struct Launch {
  std::array<int64_t, 3> global{1, 1, 1};
  std::array<int64_t, 3> local{1, 1, 1};
  // GPU kernels take float scalars as float, or as double when the kernel computes in float64.
  bool f64_scalars = false;
  // CPU: the kernel's work, its outputs times the terms each one sums (0: unknown). The CPU device runs a kernel of
  // little work on the calling thread alone (see CpuProgram::launch).
  int64_t work = 0;
  // The buffers the kernel writes, its buffer arguments [0, outputs): 1, or several for elementwise kernels merged
  // into one (see merge_elementwise in compiler/schedule.cpp: Adam's three updates of a parameter), a store to each.
  // The rest it only reads (a device's queue orders the host's reads and writes of a buffer by them).
  int64_t outputs = 1;
};

} // namespace tiny
