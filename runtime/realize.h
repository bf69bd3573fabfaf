#pragma once
// The realize engine: schedules lazy graphs into kernels (compiler/schedule.h), renders, compiles and
// runs them on their device's queue, and replays a schedule seen before (the schedule cache).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/uop.h"

namespace tiny::runtime {

class Buffer;
class Device;

// Realizes the contents of pending storages together: each root becomes a BUFFER node holding
// its value (schedule() says which kernels do it). The kernels run on `on` (null: the device of the
// buffers the graphs read, tiny:0 when they read none); a graph reading buffers of two devices throws.
// `storage_nodes`: each reference the pending storages hold (their contents, deferred values and cached reads),
// dropped with them once realized; a node of the graphs that anything else holds keeps the buffers under it
// unwritten (see GraphKey::reusable).
std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots, Device* on = nullptr,
                                const std::vector<const UOp*>& storage_nodes = {});

// Evaluates a graph over realized buffers into a new contiguous buffer (row-major over its shape).
BufferRef realize_value(const UOpPtr& value, Device* on = nullptr);

// Computes `value` and copies its bytes (row-major) to `dst`, realizing no pending storage: the graph's
// pending parts are computed for this value alone (a pending storage keeps its graph for the next sync).
// A small value an op must read at the call (nll_loss's target range) then costs its own kernels, and
// the work pending around the call stays one schedule. Only for a graph that writes no storage in place
// (no ASSIGN or SCATTER: those realize at a sync): evaluable_alone() says.
bool evaluable_alone(const UOpPtr& value);
void evaluate_to_host(const UOpPtr& value, void* dst, Device& on);

// Bytes [offset, offset + nbytes) of a realized buffer of `device` to dst, once the kernels enqueued that write it
// have run (Device::wait_for_writes: not all the work a sync enqueued, which a CPU device's queue runs on, a training
// step's backward pass and weight updates behind its loss read by .item()); raises their kernels' errors.
void copy_to_host(Device& device, Buffer& buf, size_t offset, size_t nbytes, void* dst);

// The realize engine's work as a profiler sees it: each sync, the scheduling and compiling it did, and
// every kernel it ran, with its times. csrc/profiler.cpp installs a tracer while torch.profiler records
// tiny's activity (runtime/ knows nothing of torch); with none installed the engine reads one pointer
// per kernel and nothing else. Times are nanoseconds of the system clock since the epoch (the clock
// torch's profiler stamps its events with).
struct RealizeSpan {
  enum class Kind { Sync, Schedule, Compile, Kernel };
  Kind kind;
  Device* device;
  std::string name; // the kernel's name; "tiny::sync", "tiny::schedule", "tiny::compile", "tiny::load"
  int64_t begin_ns, end_ns;
  int64_t count = 0;   // Sync: kernels launched; Schedule: kernels made; Compile: programs compiled (0: a load)
  bool cached = false; // Sync, Kernel: replayed from the schedule cache
};
class RealizeTracer {
public:
  virtual ~RealizeTracer() = default;
  // Called on the thread that realizes, after the span ended: the kernels of a sync come before the sync.
  virtual void record(const RealizeSpan& span) = 0;
};
// Installs `tracer` (null: none). While one is installed, a GPU device waits for each kernel it launches, so
// that the kernel's span is its run time, not the time to enqueue it.
void set_realize_tracer(RealizeTracer* tracer);

} // namespace tiny::runtime
