#pragma once
// A fake GPU driver (libfake_cuda.so) for testing the CUDA and HIP devices without a GPU: the cu* calls
// the CUDA device makes and the hip* calls the HIP device makes, one implementation backed by host
// memory, with `devices` devices (each block, stream and module belongs to the device current when it
// was made: CUDA's current context's, HIP's thread's device). Streams queue their work and run it when synchronized, so
// a device that reads results before the stream reached them reads stale memory. Launches are recorded (function, grid,
// block, argument bytes) and run a host function registered for the kernel's name. Page-locked host memory
// (cuMemHostAlloc, hipHostMalloc) is read by a host-to-device copy when the stream runs it, as a GPU's DMA
// reads it; pageable memory is copied at the call. Events are done once their stream ran their record, at
// a fake clock that a launch advances by 1 ms. Stream capture puts the work into a graph; an instantiated
// graph launches its nodes onto the stream, and cuGraphExecUpdate takes a graph of the same nodes (names
// and order) with new arguments and refuses any other. Tests reach this control API with dlsym on the
// library the device loaded.

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
// The driver starts with $TINY_FAKE_GPU_DEVICES (default 1) devices of 1 GiB each.
// Forgets records, failures and kernels; the driver then has `devices` devices of `memory` bytes each.
// Memory, modules and streams made before stay.
void fake_cuda_reset(int devices, size_t memory);
// The next call of `call` (a cu* or hip* name as the device resolves it) returns `result` and does nothing.
void fake_cuda_fail_next(const char* call, int result);
int fake_cuda_calls(const char* call); // calls of `call` since the reset
int fake_cuda_launch_count();
const FakeCudaLaunch* fake_cuda_launch(int i);
void fake_cuda_set_kernel(const char* name, FakeCudaKernel fn);
void* fake_cuda_host_pointer(uint64_t device_ptr);
size_t fake_cuda_pending();      // queued stream work not run yet
size_t fake_cuda_live_bytes();   // device memory allocated and not freed
size_t fake_cuda_pinned_bytes(); // page-locked host memory allocated and not freed
int fake_cuda_graph_launches();  // cuGraphLaunch and hipGraphLaunch calls since the reset
// Misuses seen since the reset: freeing device or page-locked memory that queued stream work still uses
// (a launch's pointer arguments, a copy's ends), a stream destroyed with queued work, a call that needs a
// context while none was current, or work enqueued on a stream (or a function launched) of another
// device than the current one.
int fake_cuda_misuses();
// What the streams ran, in order: "htod 64;launch twice;dtoh 64;..."
const char* fake_cuda_log();
int fake_cuda_block_device(uint64_t device_ptr); // the device a block is on; -1: not device memory
}
