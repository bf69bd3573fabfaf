#pragma once
// TINY_GPU_COMPILE_CHECK: every schedule a GPU device makes is made again for the NVIDIA and AMD targets,
// and each of its kernels rendered and compiled for their architectures (NVRTC for sm_80 and sm_90,
// clang for gfx942 and gfx1100), the binaries' resource usage checked where the tools are found. A test
// run on the CL device (PoCL here) thereby fails when a kernel it ran would not compile, or would spill,
// on those GPUs.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "compiler/schedule.h"
#include "runtime/device.h"

namespace tiny::runtime {

// One architecture the check compiles for.
struct CompileCheckTarget {
  std::string arch; // "sm_90", "gfx942"
  Target target;    // dialect and limits the kernels are scheduled and lowered for
  // Made at the first kernel; throws saying what is missing (no NVRTC, no clang-19).
  std::function<std::unique_ptr<Compiler>()> make_compiler;
  // What is wrong with a compiled binary's resource usage ("": nothing); set where the tool that reads
  // it is found. `tool` names that tool (part of what the disk marker of a checked kernel is keyed by).
  std::function<std::string(const std::string& binary, const std::string& src)> resource_problems;
  std::string tool;
  // State: the compiler once made, the kernels checked, and the counts since the target was made:
  // kernels checked (distinct sources), of them compiled now, and found checked by an earlier process
  // (a marker under $TINY_CACHE_DIR/gpu_check).
  std::unique_ptr<Compiler> compiler;
  std::set<std::string> seen;
  int64_t kernels = 0, compiled = 0, cached = 0;
};

// The architectures `spec` names: "1" (or "all") every one of sm_80, sm_90 (NVRTC; cubins read by
// cuobjdump: $TINY_CUOBJDUMP, else on PATH), gfx942, gfx1100 (clang-19; code objects read by llvm-readelf:
// $TINY_LLVM_READELF, else llvm-readelf-19 or llvm-readelf on PATH); otherwise a comma-separated list of
// them. Throws on a name it does not know.
std::vector<CompileCheckTarget> compile_check_targets(const std::string& spec);

// Schedules with `schedule_for(target)` for each target, renders each kernel and compiles it (each
// architecture on a thread of its own), and checks its resources: a kernel is checked once per target
// object and once per cache directory. Throws a runtime_error on the first failure, naming the
// architecture, the kernel and where its source was written.
void check_gpu_compiles(const std::function<Schedule(const Target&)>& schedule_for,
                        std::span<CompileCheckTarget> targets);

// The check TINY_GPU_COMPILE_CHECK asks for (unset or 0: off), with the process's counters, printed to
// stderr at exit. The realize engine calls it for every new schedule of a GPU device.
bool gpu_compile_check_on();
void check_gpu_compiles(const std::function<Schedule(const Target&)>& schedule_for);

// Problems in `cuobjdump -res-usage` output: a kernel using local memory (spills), stack past
// `allowed_stack` bytes, or more than 48 KiB of shared memory. Problems in `llvm-readelf --notes` output of an AMDGPU
// code object: a private segment (scratch), register spills, a dynamic stack, or more than 48 KiB of group segment.
std::string cubin_usage_problems(const std::string& res_usage, int64_t allowed_stack = 0);
// The stack a CUDA kernel may use: CUDA's sinf/cosf/tanf (and sin/cos/tan) reduce a huge argument
// through a small array on the stack (32 bytes seen for float); 64 bytes when `src` calls one, else 0.
int64_t cuda_allowed_stack(const std::string& src);
std::string code_object_usage_problems(const std::string& notes);

} // namespace tiny::runtime
