#pragma once
// A fake CUDA driver (libfake_cuda.so) for testing the CUDA device without a GPU: the cu* calls the
// device makes, backed by host memory. Streams queue their work and run it when synchronized, so a
// device that reads results before the stream reached them reads stale memory. Launches are recorded
// (function, grid, block, argument bytes) and run a host function registered for the kernel's name.
// Tests reach this control API with dlsym on the library the device loaded.

#include <cstddef>
#include <cstdint>

struct FakeCudaLaunch {
  char name[128];
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  size_t arg_size;
  unsigned char args[512];
};

// A kernel's host stand-in: its packed arguments; device pointers in them map through fake_cuda_host_pointer.
using FakeCudaKernel = void (*)(const unsigned char* args, size_t size);

extern "C" {
// Forgets records, failures and kernels; the driver then has `devices` devices of `memory` bytes each.
// Memory, modules and streams made before stay.
void fake_cuda_reset(int devices, size_t memory);
// The next call of `call` (a cu* name as the device resolves it) returns `result` and does nothing.
void fake_cuda_fail_next(const char* call, int result);
int fake_cuda_calls(const char* call); // calls of `call` since the reset
int fake_cuda_launch_count();
const FakeCudaLaunch* fake_cuda_launch(int i);
void fake_cuda_set_kernel(const char* name, FakeCudaKernel fn);
void* fake_cuda_host_pointer(uint64_t device_ptr);
size_t fake_cuda_pending();    // queued stream work not run yet
size_t fake_cuda_live_bytes(); // device memory allocated and not freed
// Misuses seen since the reset: a cuMemFree while a stream still had queued work, or a call that
// needs a context while none was current.
int fake_cuda_misuses();
// What the streams ran, in order: "htod 64;launch twice;dtoh 64;..."
const char* fake_cuda_log();
}
