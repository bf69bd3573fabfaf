#include "runtime/realize.h"

#include <chrono>
#include <cstdio>
#include <unordered_map>

#include "compiler/lower.h"
#include "compiler/render_c.h"
#include "runtime/debug.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace tiny::runtime {

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<Buffer> new_buffer(DType dtype, int64_t numel) {
  return std::make_shared<Buffer>(device(0), dtype, numel);
}

// Lowers, renders, compiles (cached) and runs one kernel writing `value` into `region` of `out`.
void run_kernel(const std::shared_ptr<Buffer>& out, const View& region, const UOpPtr& value) {
  if (prod(region.shape) == 0) return;
  auto t0 = Clock::now();
  if (debug_level() >= 4) std::fprintf(stderr, "tiny: kernel graph\n%s", value->tree_str().c_str());
  Kernel k = lower_kernel(out, region, value);
  std::string src = render_c(k, k.name);
  if (debug_level() >= 3) std::fprintf(stderr, "%s\n", src.c_str());
  std::shared_ptr<Program> prog = out->device().program(src, k.name);
  std::vector<void*> ptrs;
  for (const BufferRef& b : k.buffers) ptrs.push_back(std::static_pointer_cast<Buffer>(b)->ptr());
  auto t1 = Clock::now();
  prog->launch(ptrs, k.ivars, k.fvars, k.loops[0]);
  stats().kernels++;
  if (debug_level() >= 2) {
    auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
    std::fprintf(stderr, "tiny: kernel %-24s %3zu bufs  prepare %8.1f us  run %8.1f us\n", k.name.c_str(),
                 k.buffers.size(), us(t1 - t0), us(Clock::now() - t1));
  }
}

class Scheduler {
public:
  std::vector<UOpPtr> run(const std::vector<UOpPtr>& roots) {
    count_uses(roots);
    for (const UOpPtr& n : order_)
      if (n->op == Ops::ASSIGN || is_root_.count(n.get())) realized_[n.get()] = materialize(n);
    std::vector<UOpPtr> out;
    for (const UOpPtr& r : roots) out.push_back(realized_.count(r.get()) ? realized_.at(r.get()) : r);
    return out;
  }

private:
  std::unordered_map<const UOp*, int> uses_;
  std::unordered_map<const UOp*, bool> is_root_;
  std::unordered_map<const UOp*, UOpPtr> realized_;  // realize point -> BUFFER holding its value
  std::unordered_map<const UOp*, bool> fresh_;       // BUFFERs made by this schedule
  std::vector<UOpPtr> order_;                        // every node, sources first

  void count_uses(const std::vector<UOpPtr>& roots) {
    std::unordered_map<const UOp*, bool> seen;
    for (const UOpPtr& r : roots) {
      uses_[r.get()]++; // the storage holds it
      is_root_[r.get()] = true;
      for (const UOpPtr& n : toposort(r)) {
        if (seen[n.get()]) continue;
        seen[n.get()] = true;
        order_.push_back(n);
        for (const UOpPtr& s : n->src) uses_[s.get()]++;
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

  UOpPtr into_new_buffer(const UOpPtr& value) {
    auto out = new_buffer(value->dtype, value->shape[0]);
    run_kernel(out, View::contiguous(value->shape), value);
    UOpPtr b = buffer(out);
    fresh_[b.get()] = true;
    return b;
  }

  UOpPtr materialize(const UOpPtr& n) {
    if (n->op == Ops::BUFFER) return n;
    if (n->op != Ops::ASSIGN) {
      UOpPtr v = resolve(n);
      return v->op == Ops::BUFFER ? v : into_new_buffer(v);
    }
    // ASSIGN(base, value): the region is stored into a buffer that holds base. That buffer is
    // base's own when this schedule made it and nothing else reads it; otherwise a copy.
    const UOpPtr& base = n->src[0];
    UOpPtr target = resolve(base);
    bool exclusive = target->op == Ops::BUFFER && fresh_.count(target.get()) && uses_[base.get()] == 1;
    if (!exclusive) target = into_new_buffer(target);
    auto out = std::static_pointer_cast<Buffer>(target->buffer());
    run_kernel(out, std::get<View>(n->arg), resolve(n->src[1]));
    return target;
  }
};

} // namespace

std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots) {
  auto t0 = Clock::now();
  int64_t k0 = stats().kernels;
  std::vector<UOpPtr> out = Scheduler().run(roots);
  int64_t launched = stats().kernels - k0;
  if (launched > 0) stats().syncs++;
  if (debug_level() >= 1)
    std::fprintf(stderr, "tiny: sync  %zu storages  %lld kernels  %.3f ms\n", roots.size(),
                 static_cast<long long>(launched),
                 std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  return out;
}

BufferRef realize_value(const UOpPtr& value) {
  auto out = new_buffer(value->dtype, prod(value->shape));
  run_kernel(out, View::contiguous(value->shape), value);
  return out;
}

} // namespace tiny::runtime
