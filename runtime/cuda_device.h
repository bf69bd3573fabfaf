#pragma once
// The NVIDIA device: the CUDA driver API and NVRTC, both loaded with dlopen at run time, so the build
// needs neither and runs where there is no GPU.

#include <filesystem>
#include <memory>
#include <string>

#include "runtime/device.h"

namespace tiny::runtime {

// The driver library the process-wide CUDA device loads: $TINY_LIBCUDA, default libcuda.so.1.
std::string default_libcuda();

// The process-wide CUDA device `ordinal` of default_libcuda() (TINY_DEVICE=CUDA: tiny:N is ordinal N).
// Opened once; a failure is remembered and raised again to every caller.
Device& cuda_device(int ordinal = 0);

// The CUDA devices the driver at `libcuda` reports; 0 when it cannot be loaded or initialized.
int cuda_device_count(const std::string& libcuda);

// The device `ordinal` of the driver at `libcuda` (runtime/gpu_device.h's over the driver's entry
// points), on its primary context (shared with torch.cuda) and one in-order stream. Kernels compile with `compiler`
// (null: NVRTC for the device's compute capability, loaded at the first compile). Throws a runtime_error naming what is
// missing: no driver, no device.
std::unique_ptr<Device> make_cuda_device(const std::string& libcuda, int ordinal,
                                         std::unique_ptr<Compiler> compiler = nullptr);

// CUDA C to a cubin for sm_<arch> (80, 90, ...) with NVRTC loaded from `nvrtc` (a path or a soname;
// empty: $TINY_NVRTC, else libnvrtc.so.13, .so.12, .so). Throws saying so when NVRTC cannot be loaded.
// compile() writes the cubin to cuda_binary_path(key(), src) and returns that path; a compile error
// names the kernel, the log and where its source was written.
std::unique_ptr<Compiler> nvrtc_compiler(int arch, const std::string& nvrtc = "");

// Where a CUDA compiler with key `compiler_key` keeps the binary of `src`: $TINY_CACHE_DIR/cuda.
std::filesystem::path cuda_binary_path(const std::string& compiler_key, const std::string& src);

} // namespace tiny::runtime
