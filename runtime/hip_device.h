#pragma once
// The AMD device: the HIP runtime (libamdhip64) loaded with dlopen at run time, and kernels from
// render_gpu's HIP dialect compiled by clang to code objects for the device's gfx target, so a build
// needs no ROCm toolkit and runs where there is no GPU.

#include <filesystem>
#include <memory>
#include <string>

#include "runtime/device.h"

namespace tiny::runtime {

// The HIP runtime the process-wide HIP devices load: $TINY_LIBHIP, else the first of libamdhip64.so,
// .so.6, .so.5 that loads (Debian's libamdhip64-5 has only .so.5).
std::string default_libhip();

// The process-wide HIP device `ordinal` of default_libhip() (TINY_DEVICE=HIP: tiny:N is ordinal N).
// Opened once; a failure is remembered and raised again to every caller.
Device& hip_device(int ordinal = 0);

// The HIP devices the runtime at `libhip` reports; 0 when it cannot be loaded or has no GPU.
int hip_device_count(const std::string& libhip);

// The device `ordinal` of the HIP runtime at `libhip` (runtime/gpu_device.h's over the runtime's entry
// points; the device is made the thread's current one around each call, and what was current before is
// restored) with one in-order non-blocking stream. Kernels compile with `compiler` (null: hip_compiler
// for the device's gfx target, $TINY_HIP_ARCH overriding it). Throws naming what is missing.
std::unique_ptr<Device> make_hip_device(const std::string& libhip, int ordinal,
                                        std::unique_ptr<Compiler> compiler = nullptr);

// HIP C to a code object for `gfx_arch` ("gfx942", "gfx1100", ...) with clang (a path or a name on PATH;
// empty: $TINY_HIP_CLANG, else clang-19, clang-20, clang-18) and its lld, header-free (-nogpuinc
// -nogpulib). The libm functions a kernel calls come from ROCm's ocml.bc ($TINY_HIP_DEVICE_LIBS, else
// Debian's rocm-device-libs or /opt/rocm's), linked only when a kernel calls one. Throws saying what to
// install when no clang is found. compile() writes the code object to hip_binary_path(key(), src) and
// returns that path; a compile error names the kernel, the log and where its source was written.
std::unique_ptr<Compiler> hip_compiler(const std::string& gfx_arch, const std::string& clang = "");

// Where a HIP compiler with key `compiler_key` keeps the code object of `src`: $TINY_CACHE_DIR/hip.
std::filesystem::path hip_binary_path(const std::string& compiler_key, const std::string& src);

} // namespace tiny::runtime
