#include "runtime/realize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>

#include "compiler/lower.h"
#include "compiler/render_c.h"
#include "compiler/render_gpu.h"
#include "compiler/schedule.h"
#include "runtime/debug.h"
#include "runtime/device.h"
#include "runtime/gpu_check.h"
#include "runtime/lazy_buffer.h"

namespace tiny::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// ---- what a profiler sees (RealizeTracer in realize.h) ----

std::atomic<RealizeTracer*> installed_tracer{nullptr};

// Times one span of the engine's work for the installed tracer; with none installed it costs one atomic
// load (begin) and a branch (end).
class Traced {
public:
  explicit Traced(RealizeSpan::Kind kind) : tracer_(installed_tracer.load(std::memory_order_acquire)), kind_(kind) {
    if (tracer_) begin_ = now_ns();
  }
  // Reports the span as ending now. A kernel's span waits for the device first: a GPU launch only enqueues.
  void end(Device& device, const std::string& name, int64_t count = 0, bool cached = false) {
    if (!tracer_) return;
    if (kind_ == RealizeSpan::Kind::Kernel) device.synchronize();
    tracer_->record(RealizeSpan{kind_, &device, name, begin_, now_ns(), count, cached});
  }

private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  RealizeTracer* tracer_;
  RealizeSpan::Kind kind_;
  int64_t begin_ = 0;
};

// ---- the structure of a set of graphs, for the schedule cache ----

// A graph's structure with its inputs as parameters: buffers numbered by first appearance and
// runtime scalars by position, so the same computation on other buffers and scalar values has the
// same key.
struct GraphKey {
  std::vector<uint64_t> tokens;
  std::vector<BufferRef> buffers; // parameter i
  // The buffers dead after this sync: a kernel may write its value into one (schedule()'s `reusable`); part of
  // the key. A buffer is dead when only the graph's nodes hold its node, and no node above it (reading it) is held
  // by anything but the graph and the storages being realized: a value an op's C++ code keeps across a sync (the
  // QR steps of linalg.eig read a flag's old value after the sync that updated it) reads the old buffer after it.
  std::vector<BufferRef> reusable;
  std::vector<UOpPtr> vars; // DEFINE_VAR parameter i
  std::unordered_map<const UOp*, size_t> buffer_index, var_index;
  size_t hash = 0;
  Device* device = nullptr; // the device its buffers are on (null: it reads none)

  GraphKey(const std::vector<UOpPtr>& roots, Device* on, const std::vector<const UOp*>& storage_nodes = {})
      : device(on) {
    if (device) tokens.push_back(reinterpret_cast<uintptr_t>(device)); // schedules are per device
    // Each node's position in a walk of the roots in order, sources first (toposort's order): a node is entered
    // (position kEntered) when first reached and numbered when its sources are. Walked here, not by toposort(r, seen):
    // the nodes' walk marks (UOp::walk, walk_pos, one walk at a time) serve as the visited set and the positions
    // (ShuffleNet's step, one thread: the key 1.6-1.9 ms through toposort, 1.2-1.4 walked here with a map from nodes
    // to positions); the nodes are listed by position for the dead buffers' check below.
    static std::mutex walking;
    static uint64_t walks = 0;
    std::lock_guard walk_lock(walking);
    const uint64_t walk = ++walks;
    constexpr uint32_t kEntered = ~uint32_t{0};
    auto enter = [&](const UOp* n) {
      if (n->walk == walk) return false;
      n->walk = walk, n->walk_pos = kEntered;
      return true;
    };
    uint32_t numbered = 0;
    std::vector<const UOp*> order;   // the nodes by position (sources first)
    std::vector<int64_t> graph_refs; // by position: the graph's references to the node
    std::vector<std::pair<const UOp*, size_t>> stack;
    for (const UOpPtr& r : roots) {
      if (enter(r.get())) stack.emplace_back(r.get(), 0);
      while (!stack.empty()) {
        auto& [n, i] = stack.back();
        if (i < n->src.size()) {
          const UOp* s = n->src[i++].get();
          if (enter(s)) stack.emplace_back(s, 0);
          continue;
        }
        const UOp* done = n;
        stack.pop_back();
        done->walk_pos = numbered++;
        order.push_back(done);
        graph_refs.push_back(0);
        tokens.push_back(static_cast<uint64_t>(done->op) << 8 | static_cast<uint64_t>(done->dtype));
        tokens.push_back(done->src.size());
        for (const UOpPtr& s : done->src) {
          uint32_t at = s->walk_pos;
          tokens.push_back(at);
          graph_refs[at]++;
        }
        add_arg(*done);
      }
      tokens.push_back(~uint64_t{0});
      tokens.push_back(r->walk_pos);
    }
    // held: a node something outside the graph and the pending storages holds, or one under such a node.
    // Consumers come before their sources walking the positions down. The storages' references are counted
    // exactly (a root is also in `roots`): a root that an op's code holds too is read after the sync.
    NodeMap<int64_t> storages;
    for (const UOpPtr& r : roots)
      ++*storages.try_emplace(r.get()).first;
    for (const UOp* n : storage_nodes)
      ++*storages.try_emplace(n).first;
    std::vector<char> held(order.size());
    for (size_t at = order.size(); at-- > 0;) {
      const UOp* n = order[at];
      const int64_t* by_storages = storages.find(n);
      held[at] = held[at] || n->weak_from_this().use_count() > graph_refs[at] + (by_storages ? *by_storages : 0);
      if (held[at])
        for (const UOpPtr& s : n->src)
          held[s->walk_pos] = 1;
    }
    std::vector<char> dead(buffers.size());
    for (const auto& [node, i] : buffer_index) {
      uint32_t at = node->walk_pos;
      dead[i] = !held[at] && node->weak_from_this().use_count() == graph_refs[at];
    }
    for (size_t i = 0; i < buffers.size(); i++) {
      tokens.push_back(dead[i]);
      if (dead[i]) reusable.push_back(buffers[i]);
    }
    for (uint64_t t : tokens)
      hash = hash * 1099511628211ULL ^ t;
  }

  void add_arg(const UOp& node) {
    const UOp* n = &node;
    if (n->op == Ops::BUFFER) {
      auto [it, fresh] = buffer_index.emplace(n, buffers.size());
      if (fresh) {
        buffers.push_back(n->buffer());
        Device& d = static_cast<Buffer&>(*n->buffer()).device();
        if (device && device != &d)
          throw std::runtime_error("tiny: one graph reads buffers on " + device->name() + " and " + d.name());
        if (!device) tokens.push_back(reinterpret_cast<uintptr_t>(&d)); // schedules are per device
        device = &d;
      }
      tokens.push_back(it->second);
      tokens.push_back(static_cast<uint64_t>(n->buffer()->numel));
    } else if (n->op == Ops::DEFINE_VAR) {
      auto [it, fresh] = var_index.emplace(n, vars.size());
      if (fresh) vars.push_back(n->shared_from_this());
      tokens.push_back(it->second);
    } else {
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, int64_t>)
              tokens.push_back(static_cast<uint64_t>(v));
            else if constexpr (std::is_same_v<T, double>) {
              uint64_t bits;
              std::memcpy(&bits, &v, sizeof bits);
              tokens.push_back(bits);
            } else if constexpr (std::is_same_v<T, ShapeTracker>) {
              for (const View& w : v.views)
                add_view(w);
            } else if constexpr (std::is_same_v<T, View>) {
              add_view(v);
            } else if constexpr (std::is_same_v<T, ReduceArg>) {
              tokens.push_back(static_cast<uint64_t>(v.op));
              for (int64_t a : v.axes)
                tokens.push_back(static_cast<uint64_t>(a));
            }
          },
          n->arg);
    }
  }

  void add_view(const View& v) {
    tokens.push_back(v.shape.size());
    for (int64_t x : v.shape)
      tokens.push_back(static_cast<uint64_t>(x));
    for (int64_t x : v.strides)
      tokens.push_back(static_cast<uint64_t>(x));
    tokens.push_back(static_cast<uint64_t>(v.offset));
    if (v.mask)
      for (auto [b, e] : *v.mask)
        tokens.push_back(static_cast<uint64_t>(b) << 32 ^ static_cast<uint64_t>(e));
  }
};

// A schedule that can run again on other inputs: kernels whose buffers and scalars are slots.
struct CachedSchedule {
  struct Step {
    std::shared_ptr<Program> program;
    std::vector<int64_t> buffers;      // >= 0: input parameter; < 0: ~(new buffer index)
    std::vector<int64_t> ivars, fvars; // var parameter index (or ~literal index when not a parameter)
    Launch launch;
    std::string name;
  };
  Device* device = nullptr;
  std::vector<uint64_t> tokens;
  std::vector<std::pair<DType, int64_t>> new_buffers;
  std::vector<Step> steps;
  std::vector<int64_t> results; // per root, as in Step::buffers
  // Memory plan: a new buffer is allocated by the first step that uses it and released after the
  // last (results are kept), so later intermediates reuse its memory (the allocator's cache).
  std::vector<std::vector<int64_t>> release_after; // per step: new buffer indices
  // What the device keeps between replays (a GPU device: the schedule's graph); dies with the entry.
  mutable std::unique_ptr<ReplayState> device_state;

  void plan() {
    std::vector<int64_t> last(new_buffers.size(), -1);
    for (size_t i = 0; i < steps.size(); i++)
      for (int64_t b : steps[i].buffers)
        if (b < 0) last[~b] = static_cast<int64_t>(i);
    for (int64_t r : results)
      if (r < 0) last[~r] = -1; // a result outlives the schedule
    release_after.assign(steps.size(), {});
    for (size_t b = 0; b < new_buffers.size(); b++)
      if (last[b] >= 0) release_after[last[b]].push_back(static_cast<int64_t>(b));
  }
};

class ScheduleCache {
public:
  const CachedSchedule* find(const GraphKey& key) {
    auto it = map_.find(key.hash);
    if (it == map_.end()) return nullptr;
    for (const CachedSchedule& s : it->second)
      if (s.tokens == key.tokens) return &s;
    return nullptr;
  }
  // Keeps at most 4 schedules per hash and TINY_MAX_SCHEDULES in all, dropping the oldest (their
  // programs stay loaded while something holds them).
  void add(size_t hash, CachedSchedule s) {
    auto& list = map_[hash];
    if (list.size() >= 4) drop_oldest_of(hash, std::find(order_.begin(), order_.end(), hash));
    map_[hash].push_back(std::move(s));
    order_.push_back(hash);
    while (static_cast<int64_t>(order_.size()) > max_)
      drop_oldest_of(order_.front(), order_.begin());
  }

private:
  // Drops the oldest schedule of `hash`; `at` is its entry in order_.
  void drop_oldest_of(size_t hash, std::deque<size_t>::iterator at) {
    order_.erase(at);
    auto it = map_.find(hash);
    it->second.erase(it->second.begin());
    if (it->second.empty()) map_.erase(it);
  }
  std::unordered_map<size_t, std::vector<CachedSchedule>> map_;
  std::deque<size_t> order_; // one entry per cached schedule: its hash, oldest first
  int64_t max_ = env_limit("TINY_MAX_SCHEDULES", 512);
};

ScheduleCache& schedule_cache() {
  static auto* c = new ScheduleCache();
  return *c;
}

// ---- running a schedule ----

std::string render(const Kernel& k, const Target& target) {
  return target.gpu() ? render_gpu(k, k.name, target) : render_c(k, k.name);
}

// Compiles (cached) and launches one kernel on `device`, from its source.
std::shared_ptr<Program> run_kernel(const Kernel& k, const std::string& src, Device& device) {
  auto t0 = Clock::now();
  if (debug_level() >= 4) std::fprintf(stderr, "tiny: kernel\n%s", k.ast->tree_str().c_str());
  if (debug_level() >= 3) std::fprintf(stderr, "%s\n", src.c_str());
  // A program not in memory yet is compiled, or loaded from the disk cache (precompile() may have compiled it).
  Traced loading(RealizeSpan::Kind::Compile);
  int64_t compiled = stats().compiles, memory_hits = stats().cache_hits - stats().disk_hits;
  std::shared_ptr<Program> prog = device.program(src, k.name);
  if (stats().compiles != compiled)
    loading.end(device, "tiny::compile", stats().compiles - compiled);
  else if (stats().cache_hits - stats().disk_hits == memory_hits)
    loading.end(device, "tiny::load");
  std::vector<void*> ptrs;
  for (const BufferRef& b : k.buffers)
    ptrs.push_back(std::static_pointer_cast<Buffer>(b)->ptr());
  auto t1 = Clock::now();
  Traced running(RealizeSpan::Kind::Kernel);
  prog->launch(ptrs, k.ivars, k.fvars, k.launch);
  running.end(device, k.name);
  stats().kernels++;
  if (debug_level() >= 2) device.synchronize(); // a GPU device's launch only enqueues: time the kernel itself
  if (debug_level() >= 2)
    std::fprintf(stderr, "tiny: kernel %-24s %3zu bufs  prepare %8.1f us  run %8.1f us\n", k.name.c_str(),
                 k.buffers.size(), std::chrono::duration<double, std::micro>(t1 - t0).count(), us_since(t1));
  return prog;
}

// Runs a new schedule's kernels and records them for the schedule cache, in slots of `key`'s inputs and
// the schedule's new buffers; nullopt when a kernel uses a buffer or scalar the key does not name.
std::optional<CachedSchedule> run_and_record(const Schedule& s, const GraphKey& key, Device& device) {
  CachedSchedule rec;
  rec.device = &device;
  bool recordable = true;
  std::unordered_map<const BufferBase*, int64_t> made;
  for (const BufferRef& b : s.made) {
    made[b.get()] = static_cast<int64_t>(rec.new_buffers.size());
    rec.new_buffers.emplace_back(b->dtype, b->numel);
  }
  auto slot = [&](const BufferRef& b) -> int64_t {
    if (auto it = made.find(b.get()); it != made.end()) return ~it->second;
    for (size_t i = 0; i < key.buffers.size(); i++)
      if (key.buffers[i] == b) return static_cast<int64_t>(i);
    recordable = false;
    return 0;
  };
  Traced compiling(RealizeSpan::Kind::Compile); // rendering, and compiling what no cache holds
  int64_t compiled = stats().compiles;
  std::vector<std::pair<std::string, std::string>> sources;
  for (const Kernel& k : s.kernels)
    sources.emplace_back(render(k, device.target()), k.name);
  device.precompile(sources);
  compiling.end(device, "tiny::compile", stats().compiles - compiled);
  for (size_t i = 0; i < s.kernels.size(); i++) {
    const Kernel& k = s.kernels[i];
    CachedSchedule::Step step{run_kernel(k, sources[i].first, device), {}, {}, {}, k.launch, k.name};
    for (const BufferRef& b : k.buffers)
      step.buffers.push_back(slot(b));
    for (const UOpPtr& v : k.var_nodes) {
      auto it = key.var_index.find(v.get());
      if (it == key.var_index.end()) recordable = false;
      (is_float(v->dtype) ? step.fvars : step.ivars).push_back(it == key.var_index.end() ? 0 : it->second);
    }
    rec.steps.push_back(std::move(step));
  }
  for (const UOpPtr& r : s.results)
    rec.results.push_back(slot(r->buffer()));
  if (!recordable) return std::nullopt;
  rec.plan();
  return rec;
}

// Runs a cached schedule on the inputs `key` names; returns the root buffers.
std::vector<UOpPtr> replay(const CachedSchedule& s, const GraphKey& key) {
  std::vector<BufferRef> made(s.new_buffers.size());
  auto buf = [&](int64_t slot) -> const BufferRef& {
    if (slot >= 0) return key.buffers[slot];
    BufferRef& b = made[~slot];
    if (!b) b = std::make_shared<Buffer>(*s.device, s.new_buffers[~slot].first, s.new_buffers[~slot].second);
    return b;
  };
  std::vector<void*> ptrs;
  std::vector<int64_t> iv;
  std::vector<double> fv;
  auto launch_kernels = [&] {
    for (size_t i = 0; i < s.steps.size(); i++) {
      const CachedSchedule::Step& step = s.steps[i];
      ptrs.clear();
      iv.clear();
      fv.clear();
      for (int64_t b : step.buffers)
        ptrs.push_back(static_cast<Buffer&>(*buf(b)).ptr());
      for (int64_t v : step.ivars)
        iv.push_back(key.vars[v]->const_i());
      for (int64_t v : step.fvars)
        fv.push_back(key.vars[v]->const_f());
      auto t = Clock::now();
      Traced running(RealizeSpan::Kind::Kernel);
      step.program->launch(ptrs, iv, fv, step.launch);
      running.end(*s.device, step.name, 0, true);
      stats().kernels++;
      stats().cache_hits++; // the program came from the cache, with the schedule
      if (debug_level() >= 2) s.device->synchronize();
      if (debug_level() >= 2)
        std::fprintf(stderr, "tiny: kernel %-24s (cached)  run %8.1f us\n", step.name.c_str(), us_since(t));
      for (int64_t b : s.release_after[i])
        made[b].reset();
    }
  };
  // The device launches the kernels as it will (a GPU device: as one graph), unless a profiler or
  // TINY_DEBUG>=2 times each kernel, which waits for it.
  if (installed_tracer.load(std::memory_order_acquire) || debug_level() >= 2)
    launch_kernels();
  else
    s.device->replay(s.device_state, launch_kernels);
  std::vector<UOpPtr> out;
  for (int64_t r : s.results)
    out.push_back(buffer(buf(r)));
  return out;
}

// New buffers of a schedule for `device`: memory comes when a kernel first uses them.
NewBuffer new_buffers_on(Device& device) {
  return [&device](DType dt, int64_t numel) -> BufferRef { return std::make_shared<Buffer>(device, dt, numel); };
}

} // namespace

std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots, Device* on,
                                const std::vector<const UOp*>& storage_nodes) {
  auto t0 = Clock::now();
  int64_t k0 = stats().kernels;
  Traced syncing(RealizeSpan::Kind::Sync);
  GraphKey key(roots, on, storage_nodes);
  Device& dev = key.device ? *key.device : device(0);
  std::vector<UOpPtr> out;
  bool hit = false;
  if (const CachedSchedule* cached = schedule_cache().find(key)) {
    out = replay(*cached, key);
    stats().schedule_hits++;
    hit = true;
  } else {
    if (dev.target().gpu() && gpu_compile_check_on())
      check_gpu_compiles([&](const Target& t) { return schedule(roots, t, new_buffers_on(dev), key.reusable); });
    Traced scheduling(RealizeSpan::Kind::Schedule);
    Schedule s = schedule(roots, dev.target(), new_buffers_on(dev), key.reusable);
    scheduling.end(dev, "tiny::schedule", static_cast<int64_t>(s.kernels.size()));
    if (std::optional<CachedSchedule> rec = run_and_record(s, key, dev)) {
      rec->tokens = key.tokens;
      schedule_cache().add(key.hash, std::move(*rec));
    }
    out = s.results;
  }
  int64_t launched = stats().kernels - k0;
  if (launched > 0) stats().syncs++;
  syncing.end(dev, "tiny::sync", launched, hit);
  if (debug_level() >= 1)
    std::fprintf(stderr, "tiny: sync  %zu storages  %lld kernels%s  %.3f ms\n", roots.size(),
                 static_cast<long long>(launched), hit ? " (cached schedule)" : "", us_since(t0) / 1000);
  return out;
}

BufferRef realize_value(const UOpPtr& value, Device* on) {
  Traced syncing(RealizeSpan::Kind::Sync);
  Device* dev = on;
  for (const UOpPtr& n : toposort(value)) {
    if (n->op != Ops::BUFFER) continue;
    Device& d = static_cast<Buffer&>(*n->buffer()).device();
    if (dev && dev != &d)
      throw std::runtime_error("tiny: one graph reads buffers on " + dev->name() + " and " + d.name());
    dev = &d;
  }
  Device& d = dev ? *dev : device(0);
  if (d.target().gpu() && gpu_compile_check_on())
    check_gpu_compiles([&](const Target& t) { return schedule_value(value, t, new_buffers_on(d)); });
  Traced scheduling(RealizeSpan::Kind::Schedule);
  Schedule s = schedule_value(value, d.target(), new_buffers_on(d));
  scheduling.end(d, "tiny::schedule", static_cast<int64_t>(s.kernels.size()));
  for (const Kernel& k : s.kernels)
    run_kernel(k, render(k, d.target()), d);
  syncing.end(d, "tiny::sync", static_cast<int64_t>(s.kernels.size()));
  return s.results.at(0)->buffer();
}

bool evaluable_alone(const UOpPtr& value) {
  for (const UOpPtr& n : toposort(value))
    if (n->op == Ops::ASSIGN || n->op == Ops::SCATTER) return false;
  return true;
}

void evaluate_to_host(const UOpPtr& value, void* dst, Device& on) {
  if (!evaluable_alone(value)) throw std::logic_error("evaluate_to_host: the graph writes a storage in place");
  BufferRef out = realize_value(value, &on);
  auto& buf = static_cast<Buffer&>(*out);
  copy_to_host(on, buf, 0, buf.nbytes(), dst);
}

void copy_to_host(Device& device, Buffer& buf, size_t offset, size_t nbytes, void* dst) {
  device.wait_for_writes(buf.ptr()); // (a GPU device learns of its kernels' errors there)
  device.allocator().copy_out(dst, buf.ptr(), offset, nbytes);
  raise_kernel_errors();
}

void set_realize_tracer(RealizeTracer* tracer) { installed_tracer.store(tracer, std::memory_order_release); }

} // namespace tiny::runtime
