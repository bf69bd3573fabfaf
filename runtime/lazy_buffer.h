#pragma once
// LazyBuffer: what a torch storage on tiny owns (the storage model of DESIGN.md).
//
// Its content is a UOp: a flat (1-D) array of `numel()` elements of `dtype()`. Reads take a strided
// view of the content; a write covering the whole storage replaces the content, and a write into a
// region makes the content "old content with that region replaced" (ASSIGN). Nothing runs until
// realize(), which realizes every pending LazyBuffer together.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "compiler/uop.h"

namespace tiny::runtime {

class Device;

// A strided window onto a storage, in elements of `dtype` (torch's sizes, strides, storage_offset).
struct StridedView {
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  friend bool operator==(const StridedView&, const StridedView&) = default;
};

class LazyBuffer {
public:
  LazyBuffer(Device& device, size_t nbytes);
  ~LazyBuffer();
  LazyBuffer(const LazyBuffer&) = delete;
  LazyBuffer& operator=(const LazyBuffer&) = delete;

  Device& device() const { return device_; }
  size_t nbytes() const { return nbytes_; }

  // The tensor `v` of this storage as a UOp of shape v.sizes and dtype v.dtype.
  UOpPtr read(const StridedView& v);
  // Writes `value` (shape v.sizes, dtype v.dtype) into the elements `v` names.
  void write(const StridedView& v, const UOpPtr& value);
  // Writes value[i] into storage element index[i] (int64, counted in elements of `dtype`) in element
  // order, or combines it with the element's current value by `combine` (ADD, MUL, MAX, MIN). Indices
  // outside the storage are skipped. A write through a strided view passes the view's storage
  // positions (offset + sum of coordinate * stride).
  void scatter(DType dtype, const UOpPtr& index, const UOpPtr& value, std::optional<Ops> combine);
  // Copies host memory into the elements `v` names (v is non-overlapping and dense in host memory
  // order: `src` holds prod(v.sizes) elements in row-major order). A dtype of another element size
  // than the content's (torch's byte-level storage copies) works for contiguous windows.
  void write_host(const StridedView& v, const void* src);
  // Realizes (everything pending, then) `v` and copies it to `dst` in row-major order.
  void read_host(const StridedView& v, void* dst);
  // Copies `v` to `dst` in row-major order where its elements are in host memory already: the content is a
  // realized buffer (nothing pending) of a device whose memory is the host's (the CPU device). Nothing is
  // realized and nothing runs; false (dst untouched) otherwise.
  bool read_host_if_realized(const StridedView& v, void* dst);

  // True while the content is an unrealized graph.
  bool pending() const;

private:
  friend void synchronize();
  friend void flush();
  friend void synchronize(Device& device);
  static void realize_pending(Device* only, bool wait = true);
  UOpPtr content_locked(DType dtype); // content as `dtype`, created empty on first use
  const UOpPtr& content();            // content_, built from whole_ first where it is deferred (may be null)
  void set_content(UOpPtr c);         // a new content (whole_ dropped)
  const UOpPtr& flattened() const;    // the value whose row-major flattening whole_'s content is
  bool flat_is_one_view() const;      // that content is one view of flattened() (not it, nor a composed reshape)
  void set_whole(UOpPtr value);       // a value written over the whole storage: 1-D the content, else whole_
  void write_host_bytes(const StridedView& v, const void* src);
  void copy_out_bytes(void* dst); // the whole storage, realized
  Device& device_;
  size_t nbytes_;
  UOpPtr content_; // null until first use; flat array
  // The value a write over the whole storage stored (every op's result, a whole in-place update), in its own
  // shape, where it is not 1-D: the content is its row-major flattening, a view node built only when something
  // needs the flat content (a partial write, a sync). A result read whole or through a window by the next op
  // and dead before the sync never builds it: recording cost. Null when the content is not such a value.
  UOpPtr whole_;
  // The last two reads through views of the content (a parameter read by every step's ops, a tensor used
  // as an operand again and again, most recent first): the same view read again is that node, without
  // building and interning it anew. Two, not one: an op reading a tensor and a view of it (`y + y[0]`,
  // `x @ w` beside `w.t()`) alternates between them, and one entry missed every time. Dropped with the
  // content they read (set_content).
  std::array<UOpPtr, 2> recent_reads_;
  std::array<StridedView, 2> recent_views_;
  // The pending list, in the order storages first became pending (a step that repeats writes them in
  // the same order, so its graphs have the same key in the schedule cache): intrusive, so that
  // recording an op allocates nothing for it.
  bool in_pending_ = false;
  LazyBuffer* prev_pending_ = nullptr;
  LazyBuffer* next_pending_ = nullptr;
  void mark_pending();
  void leave_pending();
};

// Realizes every pending LazyBuffer (one schedule per device, in the order the devices' storages first
// became pending) and waits for the queues of the devices it ran on and of those flush() left running.
void synchronize();
// Realizes every pending LazyBuffer as synchronize() does, without waiting for the kernels it enqueues (on the CPU
// device's queue, see set_cpu_queues; on a GPU's stream): the end of an optimizer step, so that Python records the
// next step while they run. A later sync point, or a host read of their results, waits for them.
void flush();
// The same for the pending LazyBuffers of one device (an event's record, torch.tiny.synchronize(device)).
void synchronize(Device& device);

// Counters reported by torch.tiny.stats().
struct Stats {
  std::atomic<int64_t> kernels{0};        // kernels launched
  std::atomic<int64_t> compiles{0};       // programs compiled (not found in memory or on disk)
  std::atomic<int64_t> cache_hits{0};     // programs found in the memory or disk cache
  std::atomic<int64_t> disk_hits{0};      // programs loaded from the disk cache
  std::atomic<int64_t> schedule_hits{0};  // syncs replayed from the schedule cache
  std::atomic<int64_t> graph_launches{0}; // replayed schedules a GPU device launched as one graph
  std::atomic<int64_t> syncs{0};          // realizes that ran at least one kernel
  std::atomic<int64_t> fallbacks{0};      // CPU-fallback calls (counted by csrc)
  std::atomic<int64_t> live_buffers{0};
  std::atomic<int64_t> live_bytes{0};
  std::atomic<int64_t> peak_bytes{0}; // the most live_bytes since reset_stats()
};
Stats& stats();
void reset_stats(); // clears the event counters (not live_*; peak_bytes starts again from live_bytes)

// Kernels report an integer division by zero (torch raises ZeroDivisionError at the call; tiny sees
// the values only when a kernel runs): the sync that ran the kernel raises it after it has finished.
void report_zero_division();
void raise_kernel_errors();

// The lock that guards every lazy graph and the realize engine.
std::recursive_mutex& graph_mutex();

} // namespace tiny::runtime
