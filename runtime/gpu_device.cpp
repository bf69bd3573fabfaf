// The GPU device of gpu_device.h, written once over a vendor's GpuApi: one in-order stream per device,
// the caching allocator over device memory (host copies staged through page-locked buffers, memory given
// back to the driver once the stream passed it), modules loaded from compiled binaries (cached in memory
// and on disk), launches with their arguments packed into one buffer, events, and replayed schedules
// launched as graphs.

#include "runtime/gpu_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "compiler/render_gpu.h"
#include "runtime/debug.h"
#include "runtime/lazy_buffer.h"
#include "runtime/program_cache.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

constexpr GpuResult kSuccess = 0;
constexpr unsigned kStreamNonBlocking = 1; // CU_STREAM_NON_BLOCKING, hipStreamNonBlocking
void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(1);
void* const kLaunchParamBufferSize = reinterpret_cast<void*>(2);
constexpr GpuResult kNotReady = 600;        // CUDA_ERROR_NOT_READY, hipErrorNotReady: an event not passed yet
constexpr unsigned kEventDisableTiming = 2; // CU_EVENT_DISABLE_TIMING, hipEventDisableTiming
constexpr int kCaptureRelaxed = 2;          // CU_STREAM_CAPTURE_MODE_RELAXED, hipStreamCaptureModeRelaxed
// Host copies go through this many page-locked buffers of this size, in turn: a large copy is chunked,
// the host filling one buffer while the stream copies from the others.
constexpr size_t kStagingChunk = size_t{4} << 20;
constexpr size_t kStagingBuffers = 4;

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", "hipErrorOutOfMemory (out of memory)": the library's own.
std::string error_text(const GpuApi& api, GpuResult r) {
  const char *name = nullptr, *text = nullptr;
  if (api.ErrorNameTo) {
    api.ErrorNameTo(r, &name);
    api.ErrorStringTo(r, &text);
  } else {
    name = api.ErrorName(r);
    text = api.ErrorString(r);
  }
  return std::string(name ? name : "error " + std::to_string(r)) + " (" + (text ? text : "unknown") + ")";
}

void check(const GpuVendor& v, const GpuApi& api, GpuResult r, const std::string& what) {
  if (r != kSuccess)
    throw std::runtime_error(std::string("tiny: ") + v.name + " " + what + " failed: " + error_text(api, r));
}

// A kernel launch as the stream gets it: the function, its grid and block, its packed arguments.
struct KernelLaunch {
  GpuHandle function = nullptr;
  std::array<unsigned, 6> dims{}; // grid x, y, z, block x, y, z
  std::vector<unsigned char> args;
  std::string name;
  bool operator==(const KernelLaunch& o) const { return function == o.function && dims == o.dims && args == o.args; }
};

// While a replayed schedule runs (GpuDevice::replay), programs record their launches here instead of
// enqueuing them, and blocks the cache gives back to the driver (from any thread) wait for the launches
// to be enqueued. While the stream captures, nothing else is enqueued on it and no block is freed.
struct Recording {
  std::atomic<bool> active = false;
  std::atomic<bool> capturing = false;
  std::vector<KernelLaunch> launches;
};

// What a device's calls need in common: the vendor, its entry points, its device and its stream.
struct GpuContext {
  const GpuVendor& vendor;
  const GpuApi& api;
  int device = 0;
  GpuHandle ctx = nullptr; // CUDA's primary context
  GpuHandle stream = nullptr;
  std::shared_ptr<Recording> recording = std::make_shared<Recording>();
  void check(GpuResult r, const std::string& what) const { runtime::check(vendor, api, r, what); }
};

// The device is current on the calling thread for the guard's life, and what was current before is
// current again after (torch's threads may use another device): CUDA pushes its primary context, HIP
// sets the thread's device.
class CurrentGuard {
public:
  explicit CurrentGuard(const GpuContext& c) : c_(c) {
    if (c.api.CtxPushCurrent) {
      c.check(c.api.CtxPushCurrent(c.ctx), c.api.name(c.api.CtxPushCurrent));
      return;
    }
    c.check(c.api.GetDevice(&previous_), c.api.name(c.api.GetDevice));
    if (previous_ != c.device)
      c.check(c.api.SetDevice(c.device), c.api.name(c.api.SetDevice) + " " + std::to_string(c.device));
  }
  ~CurrentGuard() {
    if (c_.api.CtxPopCurrent) {
      GpuHandle ctx = nullptr;
      c_.api.CtxPopCurrent(&ctx);
    } else if (previous_ != c_.device) {
      c_.api.SetDevice(previous_);
    }
  }
  CurrentGuard(const CurrentGuard&) = delete;
  CurrentGuard& operator=(const CurrentGuard&) = delete;

private:
  const GpuContext& c_;
  int previous_ = 0;
};

GpuPtr handle(const void* p) { return reinterpret_cast<GpuPtr>(p); }

// Enqueues `l` on the stream (the device is current).
void enqueue_launch(const GpuContext& c, const KernelLaunch& l) {
  size_t size = l.args.size();
  void* extra[] = {kLaunchParamBufferPointer, const_cast<unsigned char*>(l.args.data()), kLaunchParamBufferSize, &size,
                   c.vendor.launch_param_end};
  c.check(c.api.LaunchKernel(l.function, l.dims[0], l.dims[1], l.dims[2], l.dims[3], l.dims[4], l.dims[5], 0, c.stream,
                             nullptr, extra),
          c.api.name(c.api.LaunchKernel) + " of " + l.name);
}

// A marker on the device's stream. Timing events may be measured between; the allocator's own are
// created without timing (cheaper to record).
class GpuEvent : public Event {
public:
  GpuEvent(const GpuContext& c, bool timing) : c_(c), timing_(timing) {
    CurrentGuard g(c_);
    c_.check(c_.api.EventCreate(&event_, timing ? 0 : kEventDisableTiming), c_.api.name(c_.api.EventCreate));
  }
  ~GpuEvent() override {
    try {
      CurrentGuard g(c_);
      c_.api.EventDestroy(event_);
    } catch (const std::runtime_error&) { // a lost device: nothing to give back
    }
  }
  GpuEvent(const GpuEvent&) = delete;
  GpuEvent& operator=(const GpuEvent&) = delete;
  void record() {
    CurrentGuard g(c_);
    c_.check(c_.api.EventRecord(event_, c_.stream), c_.api.name(c_.api.EventRecord));
  }
  bool query() override {
    CurrentGuard g(c_);
    GpuResult r = c_.api.EventQuery(event_);
    if (r == kNotReady) return false;
    c_.check(r, c_.api.name(c_.api.EventQuery) + " (a kernel or copy enqueued before failed)");
    return true;
  }
  void synchronize() override {
    CurrentGuard g(c_);
    c_.check(c_.api.EventSynchronize(event_),
             c_.api.name(c_.api.EventSynchronize) + " (a kernel or copy enqueued before failed)");
  }
  double elapsed_ms(Event& end) override {
    auto* e = dynamic_cast<GpuEvent*>(&end);
    if (!e || !e->on(c_))
      throw std::runtime_error(std::string("tiny: elapsed time between events of two devices (") + c_.vendor.name +
                               " device " + std::to_string(c_.device) + " and another)");
    if (!timing_ || !e->timing_) throw std::runtime_error("tiny: elapsed time of an event recorded without timing");
    synchronize();
    e->synchronize();
    float ms = 0;
    CurrentGuard g(c_);
    c_.check(c_.api.EventElapsedTime(&ms, event_, e->event_), c_.api.name(c_.api.EventElapsedTime));
    return ms;
  }
  bool on(const GpuContext& c) const { return c.stream == c_.stream; }

private:
  GpuContext c_;
  GpuHandle event_ = nullptr;
  bool timing_;
};

// Device memory in size buckets. The stream is in order: whatever is enqueued with a block after it
// came back here runs after every use enqueued before, so a block is reused only once the stream has
// passed its last use. A block the cache gives back goes to the driver once an event recorded after
// its last use has passed (checked at the next allocation, sync or return to the driver; an
// allocation the driver refuses waits for them all and is retried).
class GpuAllocator : public Allocator {
public:
  explicit GpuAllocator(const GpuContext& c) : c_(c) { staging_.reserve(kStagingBuffers); }
  // Through the page-locked staging buffers: the caller's bytes are copied into one and the copy from it
  // is enqueued, so this returns before the copy ran and the caller may reuse its memory at once. A
  // staging buffer is refilled only once the stream passed its last copy (its event). Where no
  // page-locked memory can be had, the driver stages the pageable memory itself.
  void copy_in(void* dst, const void* src, size_t n) override {
    std::lock_guard lock(staging_mu_);
    CurrentGuard g(c_);
    for (size_t at = 0; at < n; at += kStagingChunk) {
      size_t len = std::min(kStagingChunk, n - at);
      const auto* from = static_cast<const unsigned char*>(src) + at;
      Staging* s = next_staging();
      if (s) std::memcpy(s->host, from, len);
      c_.check(c_.api.MemcpyHtoDAsync(handle(dst) + at, s ? s->host : from, len, c_.stream),
               c_.api.name(c_.api.MemcpyHtoDAsync));
      if (!s) continue;
      s->used->record();
      s->recorded = ++records_;
    }
  }
  // The host memory holds the bytes when this returns: each chunk is copied into a staging buffer and
  // out of it once the stream passed that copy, the next chunks' copies enqueued meanwhile.
  void copy_out(void* dst, const void* src, size_t offset, size_t n) override {
    std::lock_guard lock(staging_mu_);
    CurrentGuard g(c_);
    struct InFlight {
      Staging* s;
      size_t at, len;
    };
    std::deque<InFlight> inflight;
    auto drain = [&] {
      InFlight f = inflight.front();
      inflight.pop_front();
      f.s->used->synchronize();
      std::memcpy(static_cast<unsigned char*>(dst) + f.at, f.s->host, f.len);
      f.s->busy = false;
    };
    bool direct = false;
    try {
      for (size_t at = 0; at < n; at += kStagingChunk) {
        size_t len = std::min(kStagingChunk, n - at);
        if (!inflight.empty() && inflight.size() >= staging_limit_) drain(); // a buffer not in flight is left
        Staging* s = next_staging();
        direct = direct || !s;
        c_.check(c_.api.MemcpyDtoHAsync(s ? s->host : static_cast<unsigned char*>(dst) + at, handle(src) + offset + at,
                                        len, c_.stream),
                 c_.api.name(c_.api.MemcpyDtoHAsync));
        if (!s) continue;
        s->used->record();
        s->busy = true;
        s->recorded = ++records_;
        inflight.push_back({s, at, len});
      }
      while (!inflight.empty())
        drain();
    } catch (...) {
      for (InFlight& f : inflight)
        f.s->busy = false;
      throw;
    }
    if (direct) c_.check(c_.api.StreamSynchronize(c_.stream), c_.api.name(c_.api.StreamSynchronize));
  }
  void memset(void* dst, unsigned char value, size_t n) {
    CurrentGuard g(c_);
    c_.check(c_.api.MemsetD8Async(handle(dst), value, n, c_.stream), c_.api.name(c_.api.MemsetD8Async));
  }
  // Gives back to the driver the blocks whose last use the stream passed; `wait`: all of them, waiting.
  // While a replay records its launches, blocks given back wait for them to be enqueued.
  void reclaim(bool wait) {
    std::lock_guard lock(free_mu_);
    fence_locked();
    reclaim_locked(wait);
  }
  // Before the device's stream goes: everything the stream still uses is waited for and given back.
  void release_all() {
    {
      std::lock_guard lock(free_mu_);
      fence_locked();
      reclaim_locked(true);
      spare_.clear();
    }
    std::lock_guard lock(staging_mu_);
    CurrentGuard g(c_);
    for (Staging& s : staging_) {
      s.used->synchronize();
      c_.api.MemFreeHost(s.host);
    }
    staging_.clear();
  }

protected:
  void* system_alloc(size_t nbytes) override {
    std::lock_guard lock(free_mu_);
    CurrentGuard g(c_);
    reclaim_locked(false);
    GpuPtr p = 0;
    GpuResult r = c_.api.MemAlloc(&p, nbytes);
    if (r == c_.vendor.out_of_memory && !batches_.empty()) { // memory the stream is about to pass
      reclaim_locked(true);
      r = c_.api.MemAlloc(&p, nbytes);
    }
    if (r == c_.vendor.out_of_memory) return nullptr;
    c_.check(r, c_.api.name(c_.api.MemAlloc) + " of " + std::to_string(nbytes) + " bytes");
    return reinterpret_cast<void*>(p);
  }
  void system_free(void* ptr, size_t) override {
    std::lock_guard lock(free_mu_);
    unfenced_.push_back(ptr);
  }
  void returned_to_system() override { reclaim(false); }

private:
  struct Staging {
    void* host;
    std::unique_ptr<GpuEvent> used; // recorded after the last copy from or into it
    uint64_t recorded = 0;          // when, in records_
    bool busy = false;              // copy_out has yet to copy out of it
  };
  struct Batch {
    std::vector<void*> blocks;
    std::unique_ptr<GpuEvent> passed; // recorded after their last use
  };
  // A staging buffer whose last copy the stream passed: one that is free now, else a new one (up to
  // kStagingBuffers), else the least recently used once the stream passed it. Null where the driver has
  // no page-locked memory to give (copies then go from pageable memory).
  Staging* next_staging() {
    for (Staging& s : staging_)
      if (!s.busy && s.used->query()) return &s;
    if (staging_.size() < staging_limit_) {
      void* host = nullptr;
      if (c_.api.MemHostAlloc(&host, kStagingChunk, 0) == kSuccess) {
        staging_.push_back({host, std::make_unique<GpuEvent>(c_, false)});
        return &staging_.back();
      }
      staging_limit_ = staging_.size(); // the driver has no more: make do with those there are
      if (staging_.empty()) return nullptr;
    }
    Staging* oldest = nullptr;
    for (Staging& s : staging_)
      if (!s.busy && (!oldest || s.recorded < oldest->recorded)) oldest = &s;
    if (!oldest) return nullptr; // all in flight for the copy out being made: this chunk goes direct
    oldest->used->synchronize();
    return oldest;
  }
  // The blocks given back since the last fence wait for an event recorded now (not while a replay
  // records: its launches are not enqueued yet).
  void fence_locked() {
    if (unfenced_.empty() || c_.recording->active) return;
    std::unique_ptr<GpuEvent> e;
    if (!spare_.empty()) {
      e = std::move(spare_.back());
      spare_.pop_back();
    } else {
      e = std::make_unique<GpuEvent>(c_, false);
    }
    e->record();
    batches_.push_back({std::move(unfenced_), std::move(e)});
    unfenced_.clear();
  }
  void reclaim_locked(bool wait) {
    if (c_.recording->capturing) return;
    CurrentGuard g(c_);
    while (!batches_.empty()) {
      Batch& b = batches_.front();
      if (wait)
        b.passed->synchronize();
      else if (!b.passed->query())
        break; // the events after it were recorded later
      for (void* p : b.blocks)
        c_.check(c_.api.MemFree(handle(p)), c_.api.name(c_.api.MemFree));
      spare_.push_back(std::move(b.passed));
      batches_.pop_front();
    }
  }
  const GpuContext& c_;
  std::mutex staging_mu_;
  std::vector<Staging> staging_;
  uint64_t records_ = 0;
  size_t staging_limit_ = kStagingBuffers;
  std::mutex free_mu_;
  std::vector<void*> unfenced_;
  std::deque<Batch> batches_;
  std::vector<std::unique_ptr<GpuEvent>> spare_; // events of batches given back, for the next
};

// The device's integer-division error flag: kernels that divide a user's integers set it (their last
// argument); a sync reads and clears it.
struct ErrorFlag {
  void* mem = nullptr;            // a device int
  std::atomic<bool> used = false; // a kernel that may set it ran since the last check
};

// What a launch may ask of the device.
struct Limits {
  std::array<int64_t, 3> grid{};
  std::array<int64_t, 3> block{};
  int64_t threads = 0;
};

class GpuProgram : public Program {
public:
  GpuProgram(const GpuContext& c, const std::vector<char>& image, const std::string& name, const Limits& limits,
             ErrorFlag* errors)
      : c_(c), name_(name), limits_(limits), errors_(errors) {
    CurrentGuard g(c_);
    c_.check(c_.api.ModuleLoadData(&module_, image.data()), c_.api.name(c_.api.ModuleLoadData) + " of kernel " + name);
    GpuResult r = c_.api.ModuleGetFunction(&function_, module_, name.c_str());
    if (r != kSuccess) c_.api.ModuleUnload(module_);
    c_.check(r, c_.api.name(c_.api.ModuleGetFunction) + " " + name);
  }
  ~GpuProgram() override {
    CurrentGuard g(c_);
    c_.api.ModuleUnload(module_);
  }
  // Arguments in render_gpu's order (buffers, int64 scalars, float or double scalars, the error flag),
  // packed as the kernel's parameters lie in memory: each aligned to its size. Enqueued (or recorded for
  // the graph of a replay); a sync waits.
  void launch(std::span<void* const> bufs, std::span<const int64_t> ivars, std::span<const double> fvars,
              const Launch& launch) override {
    check_limits(launch);
    std::vector<unsigned char> args;
    auto put = [&](const void* v, size_t n) {
      size_t at = (args.size() + n - 1) / n * n;
      args.resize(at + n);
      std::memcpy(args.data() + at, v, n);
    };
    for (void* b : bufs) {
      GpuPtr p = handle(b);
      put(&p, sizeof p);
    }
    for (int64_t v : ivars)
      put(&v, sizeof v);
    for (double v : fvars) {
      float f = static_cast<float>(v);
      if (launch.f64_scalars)
        put(&v, sizeof v);
      else
        put(&f, sizeof f);
    }
    if (errors_) {
      GpuPtr p = handle(errors_->mem);
      put(&p, sizeof p);
      errors_->used = true;
    }
    auto dim = [](int64_t v) { return static_cast<unsigned>(v); };
    KernelLaunch l{function_,
                   {dim(launch.global[0]), dim(launch.global[1]), dim(launch.global[2]), dim(launch.local[0]),
                    dim(launch.local[1]), dim(launch.local[2])},
                   std::move(args),
                   name_};
    if (c_.recording->active) {
      c_.recording->launches.push_back(std::move(l));
      return;
    }
    CurrentGuard g(c_);
    enqueue_launch(c_, l);
  }

private:
  // The lowering keeps within the target's limits; a launch past them says so before the driver's
  // invalid-value error would.
  void check_limits(const Launch& launch) const {
    bool ok = launch.local[0] * launch.local[1] * launch.local[2] <= limits_.threads;
    for (int a = 0; a < 3; a++)
      ok = ok && launch.global[a] >= 1 && launch.global[a] <= limits_.grid[a] && launch.local[a] >= 1 &&
           launch.local[a] <= limits_.block[a];
    if (ok) return;
    auto dims = [](const std::array<int64_t, 3>& d) {
      return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + ")";
    };
    throw std::runtime_error("tiny: kernel " + name_ + " launches a grid of " + dims(launch.global) + " blocks of " +
                             dims(launch.local) + " threads, past the " + c_.vendor.name + " device's limits (grid " +
                             dims(limits_.grid) + ", block " + dims(limits_.block) + ", " +
                             std::to_string(limits_.threads) + " threads)");
  }
  GpuContext c_; // a copy: a cached schedule may hold the program after a test's device went away
  GpuHandle module_ = nullptr;
  GpuHandle function_ = nullptr;
  std::string name_;
  Limits limits_;
  ErrorFlag* errors_; // null: the kernel divides no user's integers
};

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.push_back('\0'); // an image the driver reads as text (PTX) ends at a NUL
  return bytes;
}

// A replayed schedule's kernels as one graph: captured from the stream at the first replay, updated
// (cuGraphExecUpdate, hipGraphExecUpdate) with a new capture when a replay's launches differ (other
// buffers from the memory plan, other scalars), instantiated anew when the driver refuses the update.
// Where the driver cannot capture or instantiate the launches, the schedule's kernels go one by one.
class GpuGraph : public ReplayState {
public:
  explicit GpuGraph(const GpuContext& c) : c_(c) {}
  ~GpuGraph() override {
    if (!exec_) return;
    try {
      CurrentGuard g(c_);
      c_.api.GraphExecDestroy(exec_);
    } catch (const std::runtime_error&) { // a lost device: nothing to give back
    }
  }
  // Enqueues the launches (the device is current).
  void launch(std::vector<KernelLaunch>&& launches) {
    if (!usable_) return one_by_one(launches);
    if (!exec_ || launches != launches_) {
      GpuHandle graph = capture(launches);
      if (!graph) {
        usable_ = false;
        return one_by_one(launches);
      }
      bool updated = exec_ && update(graph);
      if (!updated) {
        if (exec_) c_.api.GraphExecDestroy(exec_);
        exec_ = nullptr;
        GpuResult r = c_.api.GraphInstantiate(&exec_, graph, 0);
        if (r != kSuccess) exec_ = nullptr;
      }
      c_.api.GraphDestroy(graph);
      if (!exec_) {
        usable_ = false;
        return one_by_one(launches);
      }
      launches_ = std::move(launches);
    }
    c_.check(c_.api.GraphLaunch(exec_, c_.stream), c_.api.name(c_.api.GraphLaunch));
    stats().graph_launches++;
  }

private:
  void one_by_one(const std::vector<KernelLaunch>& launches) {
    for (const KernelLaunch& l : launches)
      enqueue_launch(c_, l);
  }
  // The launches captured into a graph; null when the driver refused (the capture is ended either way).
  GpuHandle capture(const std::vector<KernelLaunch>& launches) {
    struct Capturing {
      std::atomic<bool>& on;
      explicit Capturing(std::atomic<bool>& f) : on(f) { on = true; }
      ~Capturing() { on = false; }
    } capturing(c_.recording->capturing);
    if (c_.api.StreamBeginCapture(c_.stream, kCaptureRelaxed) != kSuccess) return nullptr;
    bool ok = true;
    for (const KernelLaunch& l : launches) {
      size_t size = l.args.size();
      void* extra[] = {kLaunchParamBufferPointer, const_cast<unsigned char*>(l.args.data()), kLaunchParamBufferSize,
                       &size, c_.vendor.launch_param_end};
      const auto& d = l.dims;
      ok = ok && c_.api.LaunchKernel(l.function, d[0], d[1], d[2], d[3], d[4], d[5], 0, c_.stream, nullptr, extra) ==
                     kSuccess;
    }
    GpuHandle graph = nullptr;
    if (c_.api.StreamEndCapture(c_.stream, &graph) != kSuccess) return nullptr;
    if (!ok && graph) c_.api.GraphDestroy(graph);
    return ok ? graph : nullptr;
  }
  // exec_ takes `graph`'s arguments; false when the driver refuses (not the same kernels and shapes).
  bool update(GpuHandle graph) {
    if (c_.api.GraphExecUpdateInfo) {
      alignas(8) unsigned char info[32] = {}; // CUgraphExecUpdateResultInfo
      return c_.api.GraphExecUpdateInfo(exec_, graph, info) == kSuccess;
    }
    GpuHandle node = nullptr;
    int result = 0;
    return c_.api.GraphExecUpdate(exec_, graph, &node, &result) == kSuccess;
  }
  GpuContext c_;
  GpuHandle exec_ = nullptr;
  std::vector<KernelLaunch> launches_; // what exec_ launches
  bool usable_ = true;
};

class GpuDevice : public Device {
public:
  GpuDevice(const GpuVendor& vendor, const GpuApi& api, int ordinal, std::unique_ptr<Compiler> compiler)
      : c_{vendor, api}, compiler_(std::move(compiler)) {
    c_.check(api.DeviceGet(&c_.device, ordinal), api.name(api.DeviceGet) + " " + std::to_string(ordinal));
    char name[256] = {};
    c_.check(api.DeviceGetName(name, sizeof name - 1, c_.device), api.name(api.DeviceGetName));
    name_ = name;
    arch_ = vendor.arch(api, c_.device);
    for (int a = 0; a < 3; a++) {
      limits_.grid[a] = attribute(vendor.attr_grid_x + a);
      limits_.block[a] = attribute(vendor.attr_block_x + a);
    }
    limits_.threads = attribute(vendor.attr_threads);
    compute_units_ = attribute(vendor.attr_units);
    c_.check(api.DeviceTotalMem(&total_memory_, c_.device), api.name(api.DeviceTotalMem));
    target_.dialect = vendor.dialect;
    target_.max_local = limits_.threads;
    target_.local_mem = std::min<int64_t>(attribute(vendor.attr_shared), vendor.max_static_shared);
    target_.max_groups = limits_.grid;
    target_.fp64 = true;
    if (api.PrimaryCtxRetain) c_.check(api.PrimaryCtxRetain(&c_.ctx, c_.device), api.name(api.PrimaryCtxRetain));
    CurrentGuard g(c_);
    c_.check(api.StreamCreate(&c_.stream, kStreamNonBlocking), api.name(api.StreamCreate));
    allocator_ = std::make_unique<GpuAllocator>(c_);
    allocator_->set_device_name(this->name());
    const char* graphs = std::getenv("TINY_GPU_GRAPHS");
    graphs_ = !(graphs && std::string(graphs) == "0");
    errors_.mem = allocator_->alloc(sizeof(int));
    allocator_->memset(errors_.mem, 0, sizeof(int));
    if (debug_level() >= 1) std::fprintf(stderr, "tiny: %s\n", this->name().c_str());
  }
  // Only devices made for a test go away (the process-wide ones stay): what they hold goes back to the
  // driver, and a failure to do so (a lost device) is not raised from a destructor.
  ~GpuDevice() override {
    try {
      programs_.clear();
      allocator_->free(errors_.mem, sizeof(int));
      allocator_->empty_cache();
      allocator_->release_all();
      CurrentGuard g(c_);
      c_.api.StreamSynchronize(c_.stream);
      c_.api.StreamDestroy(c_.stream);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "tiny: releasing the %s device failed: %s\n", c_.vendor.name, e.what());
    }
    if (c_.api.PrimaryCtxRelease) c_.api.PrimaryCtxRelease(c_.device);
  }
  std::string name() const override { return std::string(c_.vendor.name) + ": " + name_ + " (" + arch_ + ")"; }
  int64_t total_memory() const override { return static_cast<int64_t>(total_memory_); }
  int compute_units() const override { return compute_units_; }
  std::optional<int64_t> free_memory() const override {
    CurrentGuard g(c_);
    size_t free = 0, total = 0;
    c_.check(c_.api.MemGetInfo(&free, &total), c_.api.name(c_.api.MemGetInfo));
    return static_cast<int64_t>(free);
  }
  const Target& target() const override { return target_; }
  Allocator& allocator() override { return *allocator_; }
  // The vendor's compiler for this device's arch, made at the first compile
  Compiler& compiler() override {
    std::lock_guard lock(compiler_mu_);
    if (!compiler_) compiler_ = c_.vendor.compiler(arch_);
    return *compiler_;
  }
  std::shared_ptr<Program> program(const std::string& src, const std::string& fn_name) override {
    return programs_.get(fn_name + "\n" + src, [&] {
      Compiler& c = compiler();
      fs::path bin = c_.vendor.binary_path(c.key(), src);
      if (fs::exists(bin)) {
        stats().cache_hits++;
        stats().disk_hits++;
      } else {
        bin = c.compile(src, fn_name);
        stats().compiles++;
      }
      bool checks = src.find(std::string("int* ") + kGpuErrorFlag) != std::string::npos;
      return std::make_shared<GpuProgram>(c_, read_file(bin), fn_name, limits_, checks ? &errors_ : nullptr);
    });
  }
  // Waits for the stream; a kernel that failed asynchronously is reported here, by the driver.
  void synchronize() override {
    {
      CurrentGuard g(c_);
      c_.check(c_.api.StreamSynchronize(c_.stream),
               c_.api.name(c_.api.StreamSynchronize) + " (a kernel or copy enqueued before failed)");
    }
    allocator_->reclaim(true); // the stream passed every block's last use
    if (!errors_.used.exchange(false)) return;
    int flag = 0;
    allocator_->copy_out(&flag, errors_.mem, 0, sizeof flag);
    if (!flag) return;
    allocator_->memset(errors_.mem, 0, sizeof flag);
    report_zero_division();
  }
  std::unique_ptr<Event> record_event(bool timing) override {
    auto e = std::make_unique<GpuEvent>(c_, timing);
    e->record();
    return e;
  }
  void wait_event(Event& event) override {
    auto* e = dynamic_cast<GpuEvent*>(&event);
    if (!e || !e->on(c_)) event.synchronize(); // this stream is in order: a marker of its own needs nothing
  }
  // The schedule's launches are recorded, then enqueued as its graph (GpuGraph): one launch for the whole
  // schedule. Blocks the replay gives back to the driver wait for the launches.
  void replay(std::unique_ptr<ReplayState>& state, const std::function<void()>& launch_kernels) override {
    if (!graphs_) return launch_kernels();
    Recording& rec = *c_.recording;
    rec.launches.clear();
    rec.active = true;
    try {
      launch_kernels();
      std::vector<KernelLaunch> launches = std::move(rec.launches);
      rec.launches.clear();
      if (!state) state = std::make_unique<GpuGraph>(c_);
      CurrentGuard g(c_);
      if (launches.size() < 2) // a graph saves nothing over one launch
        for (const KernelLaunch& l : launches)
          enqueue_launch(c_, l);
      else
        static_cast<GpuGraph&>(*state).launch(std::move(launches));
    } catch (...) {
      rec.active = false;
      rec.launches.clear();
      allocator_->reclaim(false);
      throw;
    }
    rec.active = false;
    allocator_->reclaim(false); // the blocks given back during the replay wait for its launches
  }

private:
  int attribute(int which) const {
    int v = 0;
    c_.check(c_.api.DeviceGetAttribute(&v, which, c_.device),
             c_.api.name(c_.api.DeviceGetAttribute) + " " + std::to_string(which));
    return v;
  }
  GpuContext c_;
  std::string name_, arch_;
  int compute_units_ = 0;
  size_t total_memory_ = 0;
  Limits limits_;
  Target target_;
  std::unique_ptr<GpuAllocator> allocator_;
  std::mutex compiler_mu_;
  std::unique_ptr<Compiler> compiler_;
  ErrorFlag errors_;
  ProgramCache programs_;
  bool graphs_ = true; // TINY_GPU_GRAPHS=0: replays launch kernel by kernel
};

// The library at `path`, initialized; throws saying what is missing.
const GpuApi& initialized(const GpuVendor& vendor, const std::string& path) {
  const GpuApi& api = gpu_api(vendor, path);
  check(vendor, api, api.Init(0), api.name(api.Init) + " (no usable GPU, or " + vendor.runtime + " cannot use it)");
  return api;
}

} // namespace

const GpuApi& gpu_api(const GpuVendor& vendor, const std::string& path) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, GpuApi> apis;
  std::lock_guard lock(mu);
  std::pair key{std::string(vendor.name), path};
  if (auto it = apis.find(key); it != apis.end()) return it->second;
  // stays loaded for the process: the devices it makes are never destroyed
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw std::runtime_error(std::string("tiny: the ") + vendor.name + " device needs " + vendor.runtime + "'s " +
                             path + ", which cannot be loaded: " + dlerror());
  GpuApi api{};
  for (const auto& [name, slot] : vendor.symbols(api)) {
    void* f = dlsym(lib, name);
    if (!f) throw std::runtime_error("tiny: " + path + " has no " + name);
    *slot = f;
    api.names[f] = name;
  }
  return apis.emplace(key, api).first->second;
}

int gpu_device_count(const GpuVendor& vendor, const std::string& path) {
  try {
    const GpuApi& api = initialized(vendor, path);
    int n = 0;
    return api.DeviceGetCount(&n) == kSuccess ? n : 0;
  } catch (const std::runtime_error&) {
    return 0;
  }
}

std::unique_ptr<Device> make_gpu_device(const GpuVendor& vendor, const std::string& path, int ordinal,
                                        std::unique_ptr<Compiler> compiler) {
  const GpuApi& api = initialized(vendor, path);
  int n = 0;
  check(vendor, api, api.DeviceGetCount(&n), api.name(api.DeviceGetCount));
  if (n == 0)
    throw std::runtime_error(std::string("tiny: ") + vendor.runtime + " (" + path + ") reports no " + vendor.name +
                             " device");
  if (ordinal < 0 || ordinal >= n)
    throw std::runtime_error(std::string("tiny: ") + vendor.name + " device " + std::to_string(ordinal) +
                             " asked for, but there are " + std::to_string(n));
  return std::make_unique<GpuDevice>(vendor, api, ordinal, std::move(compiler));
}

Device& gpu_device(const GpuVendor& vendor, const std::string& path, int ordinal) {
  struct Opened {
    Device* device = nullptr; // never destroyed: buffers may be freed during static teardown
    std::string error;
  };
  static std::mutex mu;
  static auto* opened = new std::map<std::tuple<std::string, std::string, int>, Opened>();
  std::lock_guard lock(mu);
  auto [it, fresh] = opened->try_emplace({vendor.name, path, ordinal});
  if (fresh) {
    try {
      it->second.device = make_gpu_device(vendor, path, ordinal).release();
    } catch (const std::runtime_error& e) {
      it->second.error = e.what();
    }
  }
  if (!it->second.device) throw std::runtime_error(it->second.error);
  return *it->second.device;
}

} // namespace tiny::runtime
