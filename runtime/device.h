#pragma once
// A device: allocator, compiler, programs and an in-order queue.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler/target.h"
#include "compiler/uop.h"

namespace tiny::runtime {

class Device;

// A device that cannot give the memory asked for: Allocator::alloc throws it (every device), with a message
// naming the bytes asked for, the device and what its allocator holds. The process and every other buffer
// survive it (torch's OutOfMemoryError at the torch layer).
class OutOfMemoryError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// One counter of a device's memory: its value now, its peak since the last reset_peak_memory_stats(),
// and the totals it grew and shrank by since the last reset_accumulated_memory_stats() (torch's Stat).
struct MemoryCounter {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
  void increase(int64_t n);
  void decrease(int64_t n);
};

// What a device's allocator holds (torch.tiny.memory_stats), named as torch's caching allocators name it,
// for all blocks and for each pool (as torch's: large blocks are 1 MiB or more, small ones less).
struct PoolMemoryStats {
  MemoryCounter allocation;      // live blocks
  MemoryCounter allocated_bytes; // their bytes (the block sizes: requests rounded up to 64 or 4096 bytes)
  MemoryCounter requested_bytes; // the bytes asked for
  MemoryCounter segment;         // blocks held from the system: live ones and cached free ones
  MemoryCounter reserved_bytes;  // their bytes
};
enum class MemoryPool { All, Small, Large };
struct MemoryStats {
  std::array<PoolMemoryStats, 3> pools; // indexed by MemoryPool
  int64_t num_alloc_retries = 0;        // system allocations that failed, emptied the cache and were retried
  int64_t num_ooms = 0;                 // allocations that failed after that
  int64_t num_device_alloc = 0;         // blocks allocated from the system
  int64_t num_device_free = 0;          // blocks returned to it
  const PoolMemoryStats& all() const { return pools[0]; }
};

// Device memory with a size-bucketed cache of freed blocks (a training step frees and allocates the
// same sizes every iteration). A backend supplies the system allocation and the copies.
class Allocator {
public:
  virtual ~Allocator() = default;
  void* alloc(size_t nbytes); // throws OutOfMemoryError when the device is out of memory
  void free(void* ptr, size_t nbytes);
  void empty_cache(); // returns every cached free block to the system
  MemoryStats memory_stats();
  void reset_peak_memory_stats();
  void reset_accumulated_memory_stats();

  virtual void copy_in(void* dst, const void* src, size_t nbytes) = 0;
  // Copies nbytes from byte `offset` of the device block `src` (a handle, not an address, on a GPU).
  virtual void copy_out(void* dst, const void* src, size_t offset, size_t nbytes) = 0;

  // The device's name in an out-of-memory message ("CUDA: NVIDIA H200 (sm_90)"); its device sets it.
  void set_device_name(std::string name) { device_name_ = std::move(name); }

protected:
  // A block of `nbytes` from the system; nullptr when the device is out of memory.
  virtual void* system_alloc(size_t nbytes) = 0;
  virtual void system_free(void* ptr, size_t nbytes) = 0; // a block system_alloc gave for nbytes
  // Called after the cache returned its blocks to the system (system_free for each), with the lock held.
  virtual void returned_to_system() {}

private:
  void empty_cache_locked();
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_; // cached free blocks by size
  size_t cached_bytes_ = 0;
  MemoryStats stats_;
  std::string device_name_ = "the device";
};

// A realized device buffer. Memory is allocated on first use and returned when the last holder
// (a BUFFER UOp, a LazyBuffer's content, a schedule) lets go.
class Buffer : public BufferBase {
public:
  Buffer(Device& device, DType dtype, int64_t numel);
  ~Buffer() override;
  Device& device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel) * itemsize(dtype); }
  void* ptr(); // allocates (zero-filled) on first use
  bool allocated() const { return ptr_ != nullptr; }

private:
  Device& device_;
  void* ptr_ = nullptr;
};

// A compiled kernel ready to launch.
class Program {
public:
  virtual ~Program() = default;
  // Runs the kernel (CPU: iterations [0, launch.global[0]) of its outermost loop; GPU: the grid). A GPU
  // device enqueues it and returns.
  virtual void launch(std::span<void* const> bufs, std::span<const int64_t> ivars, std::span<const double> fvars,
                      const Launch& launch) = 0;
};

// A marker on a device's queue (Device::record_event): done once the queue has run everything enqueued
// on it before the marker. torch.tiny.Event is one.
class Event {
public:
  virtual ~Event() = default;
  // Whether the queue has passed the marker; never blocks.
  virtual bool query() = 0;
  // Blocks the calling thread until the queue has passed the marker.
  virtual void synchronize() = 0;
  // Milliseconds from this marker to `end`, a later one of the same device, both recorded with timing;
  // waits for both. Throws a runtime_error when either was recorded without timing or they are of two
  // devices.
  virtual double elapsed_ms(Event& end) = 0;
};

// What a device keeps of a schedule the realize engine replays, between its replays (a GPU device: the
// schedule's graph). The schedule cache's entry owns it and destroys it with the entry.
class ReplayState {
public:
  virtual ~ReplayState() = default;
};

class Compiler {
public:
  virtual ~Compiler() = default;
  // A stable description of compiler and flags, part of the cache key.
  virtual std::string key() const = 0;
  // Source to a loadable binary (a shared object path on CPU); throws with the source's path on failure.
  virtual std::string compile(const std::string& src, const std::string& name) = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // What lowering and rendering target: the dialect and the device's limits.
  virtual const Target& target() const = 0;
  virtual Allocator& allocator() = 0;
  virtual Compiler& compiler() = 0;
  // A program from the source its target renders (cached in memory and on disk).
  virtual std::shared_ptr<Program> program(const std::string& src, const std::string& fn_name) = 0;
  // A hint before several program() calls: the sources (source, function name) may be compiled now, at
  // once, so that program() finds them (the CPU device runs one compiler per core). Errors are left to
  // program() to report.
  virtual void precompile(const std::vector<std::pair<std::string, std::string>>& sources) { (void)sources; }
  // Waits until everything enqueued has run.
  virtual void synchronize() = 0;
  // Waits until what is enqueued so far that writes `block` (a block of its allocator) has run, so that the host
  // may read it. The default waits for everything (synchronize()); the CPU device's queue knows each task's writes.
  virtual void wait_for_writes(const void* block) {
    (void)block;
    synchronize();
  }
  // A marker enqueued now on the device's queue (timing: elapsed_ms may measure from or to it). The
  // default, for a queue that runs its work as it is enqueued (the CPU device), synchronizes and stamps
  // the host clock: the marker is done when recorded.
  virtual std::unique_ptr<Event> record_event(bool timing = true);
  // Makes what is enqueued on the device next wait for `event`: a GPU device's in-order queue needs
  // nothing for a marker of its own; otherwise (the default) the calling thread waits for it.
  virtual void wait_event(Event& event) { event.synchronize(); }
  // Runs a schedule the realize engine replays: `launch_kernels` launches its kernels in order with
  // Program::launch (allocating and freeing the schedule's buffers between them). `state` is what the
  // device kept at this schedule's earlier replays (null at the first). The default calls launch_kernels(),
  // each kernel launched as it comes; a GPU device launches them as one graph.
  virtual void replay(std::unique_ptr<ReplayState>& state, const std::function<void()>& launch_kernels) {
    (void)state;
    launch_kernels();
  }
  // torch.tiny.get_device_properties: the device's memory in bytes (the machine's RAM for the CPU device),
  // its parallel units (the thread pool's threads on the CPU, compute units on OpenCL), and the memory
  // the system could still give when the backend can tell (OpenCL cannot).
  virtual int64_t total_memory() const = 0;
  virtual int compute_units() const = 0;
  virtual std::optional<int64_t> free_memory() const = 0;
};

// The device `tiny:index` of the backend runtime/backend.h chooses: TINY_DEVICE=CPU|CL|CUDA|HIP, unset the
// first of CUDA and HIP with a device, else CPU. A GPU backend's devices are its ordinals; the CPU backend
// has TINY_CPU_DEVICES (default 1) devices, each with its own allocator, programs and queue (they share
// the thread pool), so that multi-device code runs and is tested on one machine; CL has one.
Device& device(int index = 0);
int device_count();
// The device of a backend by name ("CPU", "CL", "CUDA", "HIP"), whatever TINY_DEVICE says; throws a runtime_error
// saying what is missing when the backend cannot run here (no libOpenCL.so.1, no OpenCL platform).
Device& backend_device(const std::string& backend);
Device& cpu_device(int index = 0); // index < cpu_device_count()
int cpu_device_count();            // TINY_CPU_DEVICES, default 1
// Whether the CPU devices run their kernels on a queue thread of their own (asynchronously, in order, as a GPU's
// stream does) rather than on the launching thread. Off unless set: the torch extension turns it on (TINY_ASYNC=0
// keeps it off), so that a sync point that need not wait (flush()) leaves the kernels running while Python records
// the next step. A host read of a block of a device's memory (copy_out) waits for the queued work that writes it; a
// host write (copy_in) into a block that queued work uses joins the queue behind it (see runtime/queue.h).
void set_cpu_queues(bool on);
Device& cl_device(); // TINY_CL_DEVICE=N picks the N-th OpenCL device (all platforms, in order)
// The C compiler the CPU device runs: TINY_CC, else the newest `clang-N` on PATH, else clang, cc or gcc; throws
// a runtime_error when there is none.
std::string cpu_c_compiler();

// Programs loaded now (on the CPU each is a dlopen'ed library, and a process can map only so many):
// devices keep at most TINY_MAX_PROGRAMS (default 2048) cached, dropping the least recently used, and
// the schedule cache at most TINY_MAX_SCHEDULES (default 512) schedules.
int64_t loaded_programs();
// A positive integer from the environment variable `name`, or `fallback`.
int64_t env_limit(const char* name, int64_t fallback);

} // namespace tiny::runtime
