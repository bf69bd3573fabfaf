#include "runtime/realize.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <unordered_map>

#include "compiler/lower.h"
#include "compiler/render_c.h"
#include "compiler/render_gpu.h"
#include "runtime/debug.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace tiny::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// ---- the structure of a set of graphs, for the schedule cache ----

// A graph's structure with its inputs as parameters: buffers numbered by first appearance and
// runtime scalars by position, so the same computation on other buffers and scalar values has the
// same key.
struct GraphKey {
  std::vector<uint64_t> tokens;
  std::vector<BufferRef> buffers; // parameter i
  std::vector<UOpPtr> vars;       // DEFINE_VAR parameter i
  std::unordered_map<const UOp*, size_t> buffer_index, var_index;
  size_t hash = 0;
  Device* device = nullptr; // the device its buffers are on (null: it reads none)

  explicit GraphKey(const std::vector<UOpPtr>& roots) {
    std::unordered_map<const UOp*, uint64_t> pos;
    for (const UOpPtr& r : roots) {
      for (const UOpPtr& n : toposort(r)) {
        if (pos.count(n.get())) continue;
        pos[n.get()] = pos.size();
        tokens.push_back(static_cast<uint64_t>(n->op) << 8 | static_cast<uint64_t>(n->dtype));
        tokens.push_back(n->src.size());
        for (const UOpPtr& s : n->src)
          tokens.push_back(pos.at(s.get()));
        add_arg(n);
      }
      tokens.push_back(~uint64_t{0});
      tokens.push_back(pos.at(r.get()));
    }
    for (uint64_t t : tokens)
      hash = hash * 1099511628211ULL ^ t;
  }

  void add_arg(const UOpPtr& n) {
    if (n->op == Ops::BUFFER) {
      auto [it, fresh] = buffer_index.emplace(n.get(), buffers.size());
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
      auto [it, fresh] = var_index.emplace(n.get(), vars.size());
      if (fresh) vars.push_back(n);
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

// ---- scheduling ----

// A view that only reshapes its source (row-major, every element once).
bool is_reshape(const UOpPtr& n) {
  return n->op == Ops::VIEW && n->st().is_contiguous() && prod(n->shape) == prod(n->src[0]->shape);
}

// A value read by several nodes is computed once into a buffer when inlining it would cost more ops.
constexpr int64_t kMaxInlineOps = 128;

class Scheduler {
public:
  Scheduler(const GraphKey* key, Device& device) : key_(key), device_(device) { record_.device = &device; }

  std::vector<UOpPtr> run(const std::vector<UOpPtr>& roots) {
    count_uses(roots);
    // Ops a kernel would compute to inline each node (shared subexpressions counted per use, capped).
    std::unordered_map<const UOp*, int64_t> inline_ops;
    for (const UOpPtr& n : order_) {
      int64_t ops = n->src.empty() ? 0 : 1;
      for (const UOpPtr& s : n->src)
        ops = std::min(ops + inline_ops[s.get()], kMaxInlineOps + 1);
      bool computed = is_alu(n->op) || n->op == Ops::CAST || n->op == Ops::REDUCE;
      // A reduction several nodes read (a gradient the optimizer's updates all use) is computed once,
      // and so is a long computation several nodes read: a parameter updated step after step without a
      // sync is a chain every later step would recompute (scheduling and running it grow with the square
      // of the steps).
      if (n->op == Ops::ASSIGN || n->op == Ops::SCATTER || n->op == Ops::CONTIGUOUS || is_root_.count(n.get()) ||
          (n->op == Ops::REDUCE && uses_[n.get()] > 1) || (computed && uses_[n.get()] > 1 && ops > kMaxInlineOps)) {
        realize(n);
        ops = 0;
      }
      inline_ops[n.get()] = ops;
    }
    std::vector<UOpPtr> out;
    for (const UOpPtr& r : roots) {
      UOpPtr b = realized_.count(r.get()) ? realized_.at(r.get()) : r;
      out.push_back(b);
      if (key_) record_.results.push_back(slot(b->buffer()));
    }
    return out;
  }

  UOpPtr realize_value(const UOpPtr& value) {
    UOpPtr v = resolve(value);
    if (v->op == Ops::BUFFER) return v;
    return into_new_buffer(v);
  }

  CachedSchedule take_record() {
    record_.plan();
    return std::move(record_);
  }
  bool recordable() const { return recordable_; }

private:
  const GraphKey* key_; // when set, steps are recorded for the schedule cache
  Device& device_;      // where the kernels run and the new buffers live
  CachedSchedule record_;
  bool recordable_ = true;
  std::unordered_map<const UOp*, int> uses_;
  std::unordered_map<const UOp*, bool> is_root_;
  std::unordered_map<const UOp*, UOpPtr> realized_;     // realize point -> its value read from a buffer
  std::unordered_map<const BufferBase*, int64_t> made_; // buffers made here -> new buffer index
  std::vector<UOpPtr> order_;                           // every node, sources first
  std::vector<UOpPtr> keep_;                            // realize points made while scheduling

  void count_uses(const std::vector<UOpPtr>& roots) {
    std::unordered_map<const UOp*, bool> seen;
    for (const UOpPtr& r : roots) {
      uses_[r.get()]++; // the storage holds it
      is_root_[r.get()] = true;
      // A storage holds its value reshaped flat while other kernels read the value itself: it is
      // realized where it first appears, before any of them recomputes it.
      if (is_reshape(r) && r->src[0]->op != Ops::BUFFER) is_root_[r->src[0].get()] = true;
      for (const UOpPtr& n : toposort(r)) {
        if (seen[n.get()]) continue;
        seen[n.get()] = true;
        order_.push_back(n);
        for (const UOpPtr& s : n->src)
          uses_[s.get()]++;
      }
    }
  }

  // The graph with every realized point replaced by its buffer.
  UOpPtr resolve(const UOpPtr& n) {
    return substitute(n, [&](const UOpPtr& m) -> UOpPtr {
      auto it = realized_.find(m.get());
      return it == realized_.end() ? nullptr : it->second;
    });
  }

  // A kernel's value over buffers, with layout copies for its reductions realized first.
  // Views are pushed to the leaves first, as lowering reads them: a reduction the kernel reports in
  // must_realize is then a node of this graph, and the next try finds it realized.
  // The reused values come first: the layout copies are chosen for the buffers they are read from.
  UOpPtr prepare(const UOpPtr& value) {
    UOpPtr v = realize_contiguous(realize_reused_values(resolve(value)));
    return realize_contiguous(contiguous_reduce_layout(resolve(graph_rewrite(v, push_views))));
  }

  // The graph with its CONTIGUOUS nodes realized and read from their buffers.
  UOpPtr realize_contiguous(const UOpPtr& v) {
    for (const UOpPtr& n : toposort(v))
      if (n->op == Ops::CONTIGUOUS && !realized_.count(n.get())) {
        keep_.push_back(n);
        realize(n);
      }
    return resolve(v);
  }

  int64_t slot(const BufferRef& b) {
    if (auto it = made_.find(b.get()); it != made_.end()) return ~it->second;
    if (key_) {
      auto& idx = key_->buffers;
      for (size_t i = 0; i < idx.size(); i++)
        if (idx[i] == b) return static_cast<int64_t>(i);
    }
    recordable_ = false; // a buffer the key does not name (cannot happen for well-formed graphs)
    return 0;
  }

  void realize(const UOpPtr& n) {
    if (n->op == Ops::BUFFER) return;
    // A storage holds its value reshaped flat; readers compose their views onto the value itself,
    // so the value is what gets realized (a reshape of it is the same buffer).
    if (is_reshape(n) && n->src[0]->op != Ops::BUFFER) {
      const UOpPtr& inner = n->src[0];
      if (!realized_.count(inner.get())) realize(inner);
      UOpPtr b = realized_.at(inner.get());
      if (is_reshape(b)) b = b->src[0];
      if (b->op == Ops::BUFFER) {
        realized_[n.get()] = b->shape == n->shape ? b : reshape(b, n->shape);
        return;
      }
    }
    UOpPtr b;
    if (n->op == Ops::ASSIGN || n->op == Ops::SCATTER)
      b = materialize_write(n);
    else
      b = realize_value(n->op == Ops::CONTIGUOUS ? n->src[0] : n);
    realized_[n.get()] = b->shape == n->shape ? b : reshape(b, n->shape);
  }

  UOpPtr into_new_buffer(const UOpPtr& value) {
    auto out = std::make_shared<Buffer>(device_, value->dtype, prod(value->shape));
    made_[out.get()] = static_cast<int64_t>(record_.new_buffers.size());
    record_.new_buffers.emplace_back(value->dtype, out->numel);
    View region = View::contiguous(value->shape);
    run(out, [&] { return lower_kernel(out, region, prepare(value), device_.target()); });
    return buffer(out);
  }

  // ASSIGN(base, value) and SCATTER(base, index, value) write into a buffer that holds base. That
  // buffer is base's own when this schedule made it and nothing else reads it; otherwise a copy.
  UOpPtr materialize_write(const UOpPtr& n) {
    const UOpPtr& base = n->src[0];
    UOpPtr target = resolve(base);
    bool exclusive = target->op == Ops::BUFFER && made_.count(target->buffer().get()) && only_reader(base);
    if (!exclusive) target = into_new_buffer(target);
    auto out = std::static_pointer_cast<Buffer>(target->buffer());
    if (n->op == Ops::ASSIGN)
      run(out, [&] { return lower_kernel(out, std::get<View>(n->arg), prepare(n->src[1]), device_.target()); });
    else if (prod(n->src[1]->shape) > 0)
      run(out, [&] {
        return lower_scatter(out, resolve(n->src[1]), resolve(n->src[2]), std::get<int64_t>(n->arg), device_.target());
      });
    return target;
  }

  // Whether the write is the only reader of base's buffer. A storage's flat reshape and the value
  // under it share one buffer (realize() makes them one), so a reader of either (a flip of a sum whose
  // storage is then written in place) must keep the buffer unwritten.
  bool only_reader(const UOpPtr& base) {
    if (uses_[base.get()] != 1) return false;
    for (UOpPtr b = base; is_reshape(b) && b->src[0]->op != Ops::BUFFER; b = b->src[0])
      if (uses_[b->src[0].get()] != 1) return false;
    return true;
  }

  // Lowers (realizing first what the kernel must not recompute), renders, compiles (cached) and runs
  // one kernel.
  void run(const std::shared_ptr<Buffer>& out, const std::function<Kernel()>& lower) {
    auto t0 = Clock::now();
    Kernel k;
    for (;;) {
      k = lower();
      if (debug_level() >= 5)
        std::fprintf(stderr, "tiny: lowered %s, %zu reductions to realize first\n", k.name.c_str(),
                     k.must_realize.size());
      if (k.must_realize.empty()) break;
      for (const UOpPtr& m : k.must_realize)
        if (!realized_.count(m.get())) {
          keep_.push_back(m);
          realize(m);
        }
    }
    if (prod(k.loops) == 0) return;
    if (debug_level() >= 4) std::fprintf(stderr, "tiny: kernel\n%s", k.ast->tree_str().c_str());
    const Target& target = device_.target();
    std::string src = target.gpu() ? render_gpu(k, k.name, target) : render_c(k, k.name);
    if (debug_level() >= 3) std::fprintf(stderr, "%s\n", src.c_str());
    std::shared_ptr<Program> prog = out->device().program(src, k.name);
    std::vector<void*> ptrs;
    for (const BufferRef& b : k.buffers)
      ptrs.push_back(std::static_pointer_cast<Buffer>(b)->ptr());
    auto t1 = Clock::now();
    prog->launch(ptrs, k.ivars, k.fvars, k.launch);
    stats().kernels++;
    if (debug_level() >= 2)
      std::fprintf(stderr, "tiny: kernel %-24s %3zu bufs  prepare %8.1f us  run %8.1f us\n", k.name.c_str(),
                   k.buffers.size(), std::chrono::duration<double, std::micro>(t1 - t0).count(), us_since(t1));
    if (key_) record(k, prog);
  }

  void record(const Kernel& k, const std::shared_ptr<Program>& prog) {
    CachedSchedule::Step step{prog, {}, {}, {}, k.launch, k.name};
    for (const BufferRef& b : k.buffers)
      step.buffers.push_back(slot(b));
    for (const UOpPtr& v : k.var_nodes) {
      auto it = key_->var_index.find(v.get());
      if (it == key_->var_index.end()) recordable_ = false;
      (is_float(v->dtype) ? step.fvars : step.ivars).push_back(it == key_->var_index.end() ? 0 : it->second);
    }
    record_.steps.push_back(std::move(step));
  }
};

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
  for (size_t i = 0; i < s.steps.size(); i++) {
    const CachedSchedule::Step& step = s.steps[i];
    ptrs.clear();
    iv.clear();
    fv.clear();
    for (int64_t b : step.buffers)
      ptrs.push_back(std::static_pointer_cast<Buffer>(buf(b))->ptr());
    for (int64_t v : step.ivars)
      iv.push_back(key.vars[v]->const_i());
    for (int64_t v : step.fvars)
      fv.push_back(key.vars[v]->const_f());
    auto t = Clock::now();
    step.program->launch(ptrs, iv, fv, step.launch);
    stats().kernels++;
    stats().cache_hits++; // the program came from the cache, with the schedule
    if (debug_level() >= 2)
      std::fprintf(stderr, "tiny: kernel %-24s (cached)  run %8.1f us\n", step.name.c_str(), us_since(t));
    for (int64_t b : s.release_after[i])
      made[b].reset();
  }
  std::vector<UOpPtr> out;
  for (int64_t r : s.results)
    out.push_back(buffer(buf(r)));
  return out;
}

} // namespace

std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots) {
  auto t0 = Clock::now();
  int64_t k0 = stats().kernels;
  GraphKey key(roots);
  std::vector<UOpPtr> out;
  bool hit = false;
  if (const CachedSchedule* cached = schedule_cache().find(key)) {
    out = replay(*cached, key);
    stats().schedule_hits++;
    hit = true;
  } else {
    Scheduler sched(&key, key.device ? *key.device : device(0));
    out = sched.run(roots);
    if (sched.recordable()) {
      CachedSchedule rec = sched.take_record();
      rec.tokens = key.tokens;
      schedule_cache().add(key.hash, std::move(rec));
    }
  }
  int64_t launched = stats().kernels - k0;
  if (launched > 0) stats().syncs++;
  if (debug_level() >= 1)
    std::fprintf(stderr, "tiny: sync  %zu storages  %lld kernels%s  %.3f ms\n", roots.size(),
                 static_cast<long long>(launched), hit ? " (cached schedule)" : "", us_since(t0) / 1000);
  return out;
}

BufferRef realize_value(const UOpPtr& value) {
  Device* dev = nullptr;
  for (const UOpPtr& n : toposort(value)) {
    if (n->op != Ops::BUFFER) continue;
    Device& d = static_cast<Buffer&>(*n->buffer()).device();
    if (dev && dev != &d)
      throw std::runtime_error("tiny: one graph reads buffers on " + dev->name() + " and " + d.name());
    dev = &d;
  }
  UOpPtr b = Scheduler(nullptr, dev ? *dev : device(0)).realize_value(value);
  return b->buffer();
}

} // namespace tiny::runtime
