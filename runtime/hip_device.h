#pragma once
// The AMD device: kernels from render_gpu's HIP dialect compiled by clang to code objects for a gfx
// target, so a build needs no ROCm toolkit.

#include <filesystem>
#include <memory>
#include <string>

#include "runtime/device.h"

namespace tiny::runtime {

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
