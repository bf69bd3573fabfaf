#pragma once
// One GPU device over a table of a vendor's API entry points. The CUDA driver API and the HIP runtime
// are near isomorphic (devices by ordinal, a stream, device memory, modules, launches with packed
// arguments), so the device, its allocator, its programs and its queue are written once here; a vendor
// (runtime/cuda_device.cpp, runtime/hip_device.cpp) adds only its row of GpuVendor, its compiler and
// its naming.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.h"

namespace tiny::runtime {

using GpuResult = int;
using GpuHandle = void*; // a context, stream, module or function
using GpuPtr = uint64_t; // device memory: CUDA's CUdeviceptr, HIP's void* (the same 8 bytes, passed alike)

// The entry points a GPU device calls, in one shape. A vendor leaves null what it has not: CUDA makes
// a device current by pushing its primary context, HIP by setting the thread's device; CUDA returns
// error texts through pointers, HIP returns them.
struct GpuApi {
  GpuResult (*Init)(unsigned);
  GpuResult (*DeviceGetCount)(int*);
  GpuResult (*DeviceGet)(int*, int);
  GpuResult (*DeviceGetName)(char*, int, int);
  GpuResult (*DeviceGetAttribute)(int*, int, int);
  GpuResult (*DeviceTotalMem)(size_t*, int);
  GpuResult (*StreamCreate)(GpuHandle*, unsigned);
  GpuResult (*StreamDestroy)(GpuHandle);
  GpuResult (*StreamSynchronize)(GpuHandle);
  GpuResult (*MemGetInfo)(size_t*, size_t*);
  GpuResult (*MemAlloc)(GpuPtr*, size_t);
  GpuResult (*MemFree)(GpuPtr);
  GpuResult (*MemcpyHtoDAsync)(GpuPtr, const void*, size_t, GpuHandle);
  GpuResult (*MemcpyDtoHAsync)(void*, GpuPtr, size_t, GpuHandle);
  GpuResult (*MemsetD8Async)(GpuPtr, unsigned char, size_t, GpuHandle);
  GpuResult (*ModuleLoadData)(GpuHandle*, const void*);
  GpuResult (*ModuleGetFunction)(GpuHandle*, GpuHandle, const char*);
  GpuResult (*ModuleUnload)(GpuHandle);
  GpuResult (*LaunchKernel)(GpuHandle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, GpuHandle,
                            void**, void**);
  // page-locked host memory, for staging host copies
  GpuResult (*MemHostAlloc)(void**, size_t, unsigned);
  GpuResult (*MemFreeHost)(void*);
  // events: markers on a stream
  GpuResult (*EventCreate)(GpuHandle*, unsigned);
  GpuResult (*EventRecord)(GpuHandle, GpuHandle);
  GpuResult (*EventQuery)(GpuHandle);
  GpuResult (*EventSynchronize)(GpuHandle);
  GpuResult (*EventElapsedTime)(float*, GpuHandle, GpuHandle);
  GpuResult (*EventDestroy)(GpuHandle);
  // graphs, captured from a stream
  GpuResult (*StreamBeginCapture)(GpuHandle, int);
  GpuResult (*StreamEndCapture)(GpuHandle, GpuHandle*);
  GpuResult (*GraphInstantiate)(GpuHandle*, GpuHandle, unsigned long long);
  GpuResult (*GraphLaunch)(GpuHandle, GpuHandle);
  GpuResult (*GraphExecDestroy)(GpuHandle);
  GpuResult (*GraphDestroy)(GpuHandle);
  // CUDA
  GpuResult (*PrimaryCtxRetain)(GpuHandle*, int);
  GpuResult (*PrimaryCtxRelease)(int);
  GpuResult (*CtxPushCurrent)(GpuHandle);
  GpuResult (*CtxPopCurrent)(GpuHandle*);
  GpuResult (*ErrorNameTo)(GpuResult, const char**);
  GpuResult (*ErrorStringTo)(GpuResult, const char**);
  GpuResult (*GraphExecUpdateInfo)(GpuHandle, GpuHandle, void*); // cuGraphExecUpdate_v2: a result-info struct
  // HIP
  GpuResult (*GetDevice)(int*);
  GpuResult (*SetDevice)(int);
  const char* (*ErrorName)(GpuResult);
  const char* (*ErrorString)(GpuResult);
  GpuResult (*GetDeviceProperties)(void*, int);
  GpuResult (*GraphExecUpdate)(GpuHandle, GpuHandle, GpuHandle*, int*); // hipGraphExecUpdate: node and result out
  // the library's name of an entry point above ("cuMemAlloc_v2", "hipMalloc"), for messages
  std::map<const void*, std::string> names;
  template <class F> std::string name(F* fn) const {
    auto it = names.find(reinterpret_cast<const void*>(fn));
    return it == names.end() ? "?" : it->second;
  }
};

// A vendor's row: where its entry points are found and what its numbers and names are.
struct GpuVendor {
  const char* name;    // "CUDA", "HIP": the backend, in messages and the device's name
  const char* runtime; // "the NVIDIA driver", "the HIP runtime (ROCm)"
  Dialect dialect;
  // (symbol, slot in a GpuApi) for every entry point this vendor has, by the names its library exports
  std::vector<std::pair<const char*, void**>> (*symbols)(GpuApi&);
  int attr_threads;                               // max threads per block
  int attr_block_x;                               // max block dims x, y, z follow
  int attr_grid_x;                                // max grid dims x, y, z follow
  int attr_shared;                                // shared memory per block
  int attr_units;                                 // multiprocessors / compute units
  int64_t max_static_shared;                      // what a kernel's static shared arrays may take, at most
  GpuResult out_of_memory;                        // the allocation's result when memory is short
  void* launch_param_end;                         // the last word of LaunchKernel's `extra`
  std::string (*arch)(const GpuApi&, int device); // "sm_90", "gfx942"
  std::unique_ptr<Compiler> (*compiler)(const std::string& arch);
  std::string (*binary_path)(const std::string& compiler_key, const std::string& src);
};

// The vendor's library at `path`, loaded once and its entry points resolved; throws naming the library
// and what is missing.
const GpuApi& gpu_api(const GpuVendor& vendor, const std::string& path);

// The devices the vendor's library at `path` reports; 0 when it cannot be loaded or initialized.
int gpu_device_count(const GpuVendor& vendor, const std::string& path);

// The device `ordinal` of the library at `path`: one in-order stream, the caching allocator, programs
// compiled with `compiler` (null: the vendor's for the device's arch, made at the first compile).
// Host copies go through page-locked staging buffers (copy_in returns before its copy ran); memory goes
// back to the driver once the stream passed its last use (an event); a replayed schedule is captured
// once as a graph and launched as one (TINY_GPU_GRAPHS=0: kernel by kernel).
// Throws a runtime_error naming what is missing: no library, no device.
std::unique_ptr<Device> make_gpu_device(const GpuVendor& vendor, const std::string& path, int ordinal,
                                        std::unique_ptr<Compiler> compiler = nullptr);

// The process-wide devices of the vendor's library at `path`, one per ordinal, opened at the first use
// and never destroyed (buffers may be freed during static teardown); a failure to open one is
// remembered and raised again to every caller.
Device& gpu_device(const GpuVendor& vendor, const std::string& path, int ordinal);

} // namespace tiny::runtime
