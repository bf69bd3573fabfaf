#include "compiler/schedule.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "compiler/winograd.h"

namespace tiny {

namespace {

// The ops realized by a kernel of their own (compiler/winograd.h).
bool is_winograd(Ops op) { return op == Ops::WINOGRAD || op == Ops::WINOGRAD_FILTER_GRAD; }

// A value read by several nodes is computed once into a buffer when inlining it would cost more ops.
constexpr int64_t kMaxInlineOps = 128;
// The ops a read through a view of several views costs on top: its index is recomputed from the
// output's with a division and a modulo per dim of each inner view (a max pool's gradient spreads
// each pooled value over its window through a reshape of an expand).
constexpr int64_t kReindexOps = 16;

// An elementwise value of this many elements or more is written in parts (see masked_parts), each part of
// kMinPartElements or more.
constexpr int64_t kMinPartedElements = int64_t{1} << 17, kMinPartElements = int64_t{1} << 15;

// Whether a view's outermost mask limits dim d alone.
bool masked_along_only(const UOp& n, size_t d) {
  const auto& mask = n.st().views.back().mask;
  if (!mask) return false;
  for (size_t e = 0; e < mask->size(); e++)
    if (((*mask)[e] == std::pair<int64_t, int64_t>{0, n.shape[e]}) != (e != d)) return false;
  return true;
}

// The views an elementwise value reads through its elementwise ops alone (not under another view, whose dims are not
// the value's); nullopt where it computes anything else at its own shape (a reduction, a scatter).
std::optional<std::unordered_set<const UOp*>> elementwise_reads(const UOpPtr& value) {
  std::unordered_set<const UOp*> seen, views;
  std::vector<const UOp*> stack{value.get()};
  while (!stack.empty()) {
    const UOp* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->op == Ops::VIEW) {
      views.insert(n);
      continue;
    }
    if (!is_alu(n->op) && n->op != Ops::CAST && !n->src.empty()) return std::nullopt;
    for (const UOpPtr& s : n->src)
      stack.push_back(s.get());
  }
  return views;
}

// A dim of an elementwise value and its runs along it, in order, in each of which every read masked along that dim
// alone (a padded part: autograd's sum of select_backward's gradients, a cat) is wholly valid or wholly not; the dim
// that most reads are masked along, none (no runs) where fewer than two are. Each run is lowered as a kernel of its
// own, which reads only the parts valid there: one kernel computed every part's value at every element and masked
// all but one. A ViT's packed q, k and v projection gradient, (3, 65, 32, 128) from attention's three gradients (two
// scaled): the three gradients' kernels and their masked sum (0.86-0.96 ms) took 2.47-2.51 ms a layer on one thread;
// now three kernels, the gradients computed into their parts, 1.94-2.21 ms. On a CPU target (not measured on a GPU).
struct Parts {
  size_t dim = 0;
  std::vector<std::pair<int64_t, int64_t>> runs;
  std::unordered_set<const UOp*> reads; // elementwise_reads
};
Parts masked_parts(const UOpPtr& value) {
  if (prod(value->shape) < kMinPartedElements) return {};
  auto reads = elementwise_reads(value);
  if (!reads) return {};
  Parts best;
  size_t most = 1;
  for (size_t d = 0; d < value->shape.size(); d++) {
    std::vector<int64_t> cuts{0, value->shape[d]};
    size_t masked = 0;
    for (const UOp* n : *reads)
      if (masked_along_only(*n, d)) {
        masked++;
        const auto [lo, hi] = (*n->st().views.back().mask)[d];
        for (int64_t at : {lo, hi})
          cuts.push_back(std::clamp<int64_t>(at, 0, value->shape[d]));
      }
    if (masked <= most) continue;
    most = masked;
    std::ranges::sort(cuts);
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    best = {d, {}, {}};
    for (size_t i = 0; i + 1 < cuts.size(); i++)
      best.runs.emplace_back(cuts[i], cuts[i + 1]);
  }
  const int64_t per = prod(value->shape) / std::max<int64_t>(value->shape[best.dim], 1);
  for (auto [begin, end] : best.runs)
    if ((end - begin) * per < kMinPartElements) return {};
  best.reads = std::move(*reads);
  return best;
}

// value over `run`, a run of parts.dim and the whole of the others (see masked_parts): each read masked along that dim
// alone reads zeros where the run lies wholly outside its mask, and without the mask where wholly inside; then the
// run's elements of it.
UOpPtr within_run(const UOpPtr& value, const Parts& parts, const std::vector<std::pair<int64_t, int64_t>>& run) {
  const size_t d = parts.dim;
  const auto [begin, end] = run[d];
  UOpPtr v = substitute(value, [&](const UOpPtr& n) -> UOpPtr {
    if (!parts.reads.count(n.get()) || !masked_along_only(*n, d)) return nullptr;
    const auto [lo, hi] = (*n->st().views.back().mask)[d];
    if (hi <= begin || lo >= end) return expand(reshape(const_like(n, 0), Shape(n->shape.size(), 1)), n->shape);
    if (lo > begin || hi < end) return nullptr;
    ShapeTracker unmasked = n->st();
    unmasked.views.back().mask.reset();
    return view(n->src[0], std::move(unmasked));
  });
  return shrink(v, run);
}

class Scheduler {
public:
  Scheduler(const Target& target, const NewBuffer& new_buffer) : target_(target), new_buffer_(new_buffer) {}

  Schedule run(const std::vector<UOpPtr>& roots) {
    count_uses(roots);
    // Ops a kernel would compute per element to inline each node (shared subexpressions counted per
    // use, capped). A reduction costs its loop: each element read of it recomputes the whole reduction
    // (a convolution read by its ReLU and by the ReLU's gradient mask was computed twice). Read through a
    // broadcast (a row's max in softmax, a layer norm's mean), a value with reductions in it costs their
    // loops' bodies only (broadcast_ops): lowering computes them once per row, or has them realized
    // first (Kernel::must_realize).
    std::unordered_map<const UOp*, int64_t> inline_ops, broadcast_ops;
    for (const UOpPtr& n : order_) {
      int64_t ops = n->src.empty() ? 0 : 1;
      if (n->op == Ops::VIEW) ops += kReindexOps * static_cast<int64_t>(n->st().views.size() - 1);
      int64_t once = ops;
      bool broadcast = n->op == Ops::VIEW && prod(n->shape) > prod(n->src[0]->shape);
      for (const UOpPtr& s : n->src) {
        ops = std::min(ops + (broadcast ? broadcast_ops[s.get()] : inline_ops[s.get()]), kMaxInlineOps + 1);
        once = std::min(once + broadcast_ops[s.get()], kMaxInlineOps + 1);
      }
      if (n->op == Ops::REDUCE && prod(n->shape) > 0)
        ops = std::min(ops * (prod(n->src[0]->shape) / prod(n->shape)), kMaxInlineOps + 1);
      bool computed = is_alu(n->op) || n->op == Ops::CAST || n->op == Ops::REDUCE;
      // A reduction several nodes read, directly or through a reshape (a gradient the optimizer's updates all
      // use; a dot product tested for zero and divided by), is computed once: readers that recomputed it
      // could each round it otherwise. So is a computation whose recomputation by its other readers would
      // cost more than kMaxInlineOps: a parameter updated step after step without a sync is a chain every
      // later step would recompute (scheduling and running it grow with the square of the steps); a max pool's
      // gradient that batch norm's backward reads three times (two sums and its input gradient) indexes
      // with divisions that keep those sums from vector lanes.
      int64_t reads = uses_[n.get()] + view_reads_[n.get()];
      if (n->op == Ops::ASSIGN || n->op == Ops::SCATTER || n->op == Ops::CONTIGUOUS || is_winograd(n->op) ||
          is_root_.count(n.get()) || (n->op == Ops::REDUCE && reads > 1) ||
          (computed && reads > 1 && ops * (reads - 1) > kMaxInlineOps)) {
        realize(n);
        ops = once = 0;
      }
      inline_ops[n.get()] = ops;
      broadcast_ops[n.get()] = once;
    }
    for (const UOpPtr& r : roots)
      out_.results.push_back(realized_.count(r.get()) ? realized_.at(r.get()) : r);
    return std::move(out_);
  }

  Schedule run_value(const UOpPtr& value) {
    UOpPtr v = resolve(value);
    out_.results.push_back(v->op == Ops::BUFFER ? v : into_new_buffer(v));
    return std::move(out_);
  }

private:
  const Target& target_;
  const NewBuffer& new_buffer_;
  Schedule out_;
  std::unordered_map<const UOp*, int> uses_;
  // the reads of a value through a view (not a broadcast) that several nodes read, past the first
  std::unordered_map<const UOp*, int> view_reads_;
  std::unordered_map<const UOp*, bool> is_root_;
  std::unordered_map<const UOp*, UOpPtr> realized_;  // realize point -> its value read from a buffer
  std::unordered_map<const BufferBase*, bool> made_; // buffers made here
  std::vector<UOpPtr> order_;                        // every node, sources first
  std::vector<UOpPtr> keep_;                         // realize points made while scheduling

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
    for (const UOpPtr& n : order_)
      if (n->op == Ops::VIEW && prod(n->shape) <= prod(n->src[0]->shape) && uses_[n.get()] > 1)
        view_reads_[n->src[0].get()] += uses_[n.get()] - 1;
  }

  // The graph with every realized point replaced by its buffer.
  UOpPtr resolve(const UOpPtr& n) { return substitute(n, realized_); }

  // A kernel's value over buffers, with layout copies for its reductions realized first. Factors of sums of products
  // that hold one value everywhere multiply the sums instead (hoist_factors), before anything is chosen to be copied.
  // Long reductions into few outputs are split in two first (their partial results realized).
  // Views are pushed to the leaves next, as lowering reads them: a reduction the kernel reports in
  // must_realize is then a node of this graph, and the next try finds it realized.
  // The reused values come first: the layout copies are chosen for the buffers they are read from.
  UOpPtr prepare(const UOpPtr& value) {
    UOpPtr v = realize_contiguous(realize_reused_values(
        split_long_reductions(graph_rewrite(realize_winograd(resolve(value)), hoist_factors), target_)));
    v = realize_contiguous(realize_broadcast_factors(resolve(graph_rewrite(v, push_views)), target_));
    return realize_contiguous(contiguous_reduce_layout(v, target_));
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

  // The graph with its WINOGRAD and WINOGRAD_FILTER_GRAD nodes realized (a value evaluated alone meets them
  // unrealized).
  UOpPtr realize_winograd(const UOpPtr& v) {
    bool any = false;
    for (const UOpPtr& n : toposort(v))
      if (is_winograd(n->op) && !realized_.count(n.get())) {
        keep_.push_back(n);
        realize(n);
        any = true;
      }
    return any ? resolve(v) : v;
  }

  // The buffer holding v's elements in row-major order: v's own where it is one (or a reshape of one), else v realized
  // (once: the padded input a convolution's Winograd kernel and its filter gradient's both read).
  BufferRef rows_of(const UOpPtr& v) {
    UOpPtr r = resolve(v);
    if (r->op != Ops::BUFFER && !(is_reshape(r) && r->src[0]->op == Ops::BUFFER)) {
      keep_.push_back(v);
      realize(v);
      r = realized_.at(v.get());
    }
    return (r->op == Ops::BUFFER ? r : r->src[0])->buffer();
  }

  UOpPtr winograd(const UOpPtr& n) {
    const BufferRef x = rows_of(n->src[0]), u = rows_of(n->src[1]);
    BufferRef out = new_buffer_(n->dtype, prod(n->shape));
    made_[out.get()] = true;
    out_.made.push_back(out);
    add([&] { return lower_winograd(out, n, x, u); });
    return buffer(out);
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
    UOpPtr b, v;
    if (n->op == Ops::ASSIGN || n->op == Ops::SCATTER)
      b = materialize_write(n);
    else if (is_winograd(n->op))
      b = winograd(n);
    else {
      v = resolve(n->op == Ops::CONTIGUOUS ? n->src[0] : n);
      b = v->op == Ops::BUFFER ? v : into_new_buffer(v);
    }
    realized_[n.get()] = b->shape == n->shape ? b : reshape(b, n->shape);
    // n's form over the buffers realized before it is the same value: a graph that reads n, resolved
    // again after those buffers (a kernel's next try), holds that form instead of n (a layer norm's
    // variance over its realized mean was computed twice on a GPU).
    if (v && v != n && v->op != Ops::BUFFER && v->shape == n->shape) {
      keep_.push_back(v);
      realized_[v.get()] = realized_.at(n.get());
    }
  }

  UOpPtr into_new_buffer(const UOpPtr& value) {
    BufferRef out = new_buffer_(value->dtype, prod(value->shape));
    made_[out.get()] = true;
    out_.made.push_back(out);
    View region = View::contiguous(value->shape);
    const Parts parts = target_.gpu() ? Parts{} : masked_parts(value);
    if (parts.runs.empty()) add([&] { return lower_kernel(out, region, prepare(value), target_); });
    for (auto [begin, end] : parts.runs) {
      std::vector<std::pair<int64_t, int64_t>> run;
      for (size_t d = 0; d < value->shape.size(); d++)
        run.emplace_back(d == parts.dim ? std::pair{begin, end} : std::pair<int64_t, int64_t>{0, value->shape[d]});
      const UOpPtr part_value = within_run(value, parts, run);
      const View part = ShapeTracker{{region}}.shrink(run).views.back();
      add([&] { return lower_kernel(out, part, prepare(part_value), target_); });
    }
    return buffer(out);
  }

  // ASSIGN(base, value) and SCATTER(base, index, value) write into a buffer that holds base. That
  // buffer is base's own when this schedule made it and nothing else reads it; otherwise a copy.
  UOpPtr materialize_write(const UOpPtr& n) {
    const UOpPtr& base = n->src[0];
    UOpPtr target = resolve(base);
    bool exclusive = target->op == Ops::BUFFER && made_.count(target->buffer().get()) && only_reader(base);
    if (!exclusive) target = into_new_buffer(target);
    const BufferRef& out = target->buffer();
    if (n->op == Ops::ASSIGN)
      add([&] { return lower_kernel(out, std::get<View>(n->arg), prepare(n->src[1]), target_); });
    else if (prod(n->src[1]->shape) > 0)
      add([&] {
        return lower_scatter(out, resolve(n->src[1]), resolve(n->src[2]), std::get<int64_t>(n->arg), target_);
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

  // Lowers one kernel, realizing first what it must not recompute (those kernels come before it).
  void add(const std::function<Kernel()>& lower) {
    Kernel k;
    for (;;) {
      k = lower();
      if (k.must_realize.empty()) break;
      for (const UOpPtr& m : k.must_realize)
        if (!realized_.count(m.get())) {
          keep_.push_back(m);
          realize(m);
        }
    }
    if (prod(k.loops) > 0) out_.kernels.push_back(std::move(k));
  }
};

// Whether kernel k writes buffer b (slots [0, launch.outputs)), or reads it (the other slots).
bool kernel_writes(const Kernel& k, const BufferBase* b) {
  return std::any_of(k.buffers.begin(), k.buffers.begin() + k.launch.outputs,
                     [&](const BufferRef& x) { return x.get() == b; });
}
bool kernel_reads(const Kernel& k, const BufferBase* b) {
  return std::any_of(k.buffers.begin() + k.launch.outputs, k.buffers.end(),
                     [&](const BufferRef& x) { return x.get() == b; });
}

// ---- elementwise kernels merged into one ----

// Kernels merged into one write this many buffers at most.
constexpr int64_t kMaxMergedOutputs = 8;

// The loop of a kernel that merge_elementwise may merge: elementwise and flat (one loop, no lanes, no reduction), its
// one store unmasked at the loop's index, all of its output; null otherwise.
const UOp* flat_elementwise_loop(const Kernel& k) {
  if (k.launch.outputs != 1 || k.loops.size() != 1 || k.lane_range >= 0 || k.tiles || k.winograd || k.stores_twice ||
      k.prefetch_next || !k.must_realize.empty() || k.ast->src.size() != 1)
    return nullptr;
  const UOpPtr& st = k.ast->src[0];
  if (st->op != Ops::STORE || st->src.size() != 3 || st->src[0]->op != Ops::PARAM ||
      std::get<int64_t>(st->src[0]->arg) != 0)
    return nullptr;
  const UOp* loop = range_node(k, 0);
  if (!loop || st->src[1].get() != loop || k.buffers[0]->numel != k.loops[0]) return nullptr;
  // (sin, cos and tan keep the renderer's strips of their fast forms, see trig_strips in render_c.cpp)
  for (const UOpPtr& n : toposort(st->src[2]))
    if (n->op == Ops::REDUCE || n->op == Ops::SIN || n->op == Ops::COS || n->op == Ops::TAN ||
        (n->op == Ops::RANGE && n.get() != loop))
      return nullptr;
  return loop;
}

// Elementwise kernels of one loop merged as they are met (see merge_elementwise): their stores over buffers numbered
// by first appearance (PARAM ids), outputs in the order of the kernels.
struct MergedKernel {
  size_t at = 0;     // the position of its first kernel in the schedule
  const UOp* loop{}; // the loop they share
  Kernel k;          // the first kernel, its runtime scalars and work those of all (buffers and ast: see kernel())
  std::vector<UOpPtr> stores;
  std::vector<BufferRef> buffers;                  // by id
  std::vector<std::pair<int64_t, UOpPtr>> outputs; // ids and their values

  MergedKernel(size_t at, const UOp* loop, const Kernel& first) : at(at), loop(loop), k(first) {
    k.ivars.clear(), k.fvars.clear(), k.var_nodes.clear(), k.launch.work = 0;
    add(first);
  }

  int64_t id(const BufferRef& b) {
    auto it = std::find(buffers.begin(), buffers.end(), b);
    if (it == buffers.end()) it = buffers.insert(it, b);
    return it - buffers.begin();
  }
  bool has(const BufferRef& b) const { return std::find(buffers.begin(), buffers.end(), b) != buffers.end(); }
  // The value of the output with this id (or buffer); null where it is not an output here.
  UOpPtr value_of(int64_t id) const {
    for (const auto& [o, v] : outputs)
      if (o == id) return v;
    return nullptr;
  }
  UOpPtr value_of(const BufferRef& b) const {
    auto it = std::find(buffers.begin(), buffers.end(), b);
    return it == buffers.end() ? nullptr : value_of(it - buffers.begin());
  }

  // Adds a kernel's store: its PARAMs renumbered by id and its ARGs after the ones before; its loads of an output
  // of the kernels before (at the loop's index, see can_take) read that output's value instead.
  void add(const Kernel& kernel) {
    const auto ints = static_cast<int64_t>(k.ivars.size()), floats = static_cast<int64_t>(k.fvars.size());
    std::vector<int64_t> ids;
    for (const BufferRef& b : kernel.buffers)
      ids.push_back(id(b));
    UOpPtr store = substitute(kernel.ast->src[0], [&](const UOpPtr& n) -> UOpPtr {
      if (n->op == Ops::PARAM) return UOp::make(Ops::PARAM, n->dtype, {}, ids[std::get<int64_t>(n->arg)]);
      if (n->op == Ops::ARG)
        return UOp::make(Ops::ARG, n->dtype, {}, std::get<int64_t>(n->arg) + (is_float(n->dtype) ? floats : ints));
      return nullptr;
    });
    UOpPtr value = substitute(store->src[2], [&](const UOpPtr& n) -> UOpPtr {
      return n->op == Ops::LOAD ? value_of(std::get<int64_t>(n->src[0]->arg)) : nullptr;
    });
    outputs.emplace_back(ids[0], value);
    stores.push_back(UOp::make(Ops::STORE, DType::Void, {store->src[0], store->src[1], value}));
    k.ivars.insert(k.ivars.end(), kernel.ivars.begin(), kernel.ivars.end());
    k.fvars.insert(k.fvars.end(), kernel.fvars.begin(), kernel.fvars.end());
    k.var_nodes.insert(k.var_nodes.end(), kernel.var_nodes.begin(), kernel.var_nodes.end());
    k.launch.work += kernel.launch.work;
  }

  // Whether a later kernel (see flat_elementwise_loop) may join: the same loop, a buffer in common with the kernels
  // here (an input they read, or an output of theirs it reads), and each output of theirs read at the loop's index
  // only, as the value's own element.
  bool can_take(const Kernel& kernel, const UOp* kernel_loop) const {
    if (kernel_loop != loop || static_cast<int64_t>(outputs.size()) >= kMaxMergedOutputs) return false;
    if (std::none_of(kernel.buffers.begin() + 1, kernel.buffers.end(), [&](const BufferRef& b) { return has(b); }))
      return false;
    for (const UOpPtr& n : toposort(kernel.ast)) {
      if (n->op != Ops::LOAD) continue;
      const UOpPtr v = value_of(kernel.buffers[static_cast<size_t>(std::get<int64_t>(n->src[0]->arg))]);
      if (v && (n->src.size() != 2 || n->src[1].get() != loop || n->dtype != v->dtype)) return false;
    }
    return true;
  }

  // One kernel: the outputs' slots first, then the inputs' in the order they were met.
  Kernel kernel() const {
    std::vector<int64_t> slot(buffers.size(), -1);
    Kernel out = k;
    out.buffers.clear();
    for (const auto& [o, v] : outputs) {
      slot[static_cast<size_t>(o)] = static_cast<int64_t>(out.buffers.size());
      out.buffers.push_back(buffers[static_cast<size_t>(o)]);
    }
    for (size_t i = 0; i < buffers.size(); i++)
      if (slot[i] < 0) {
        slot[i] = static_cast<int64_t>(out.buffers.size());
        out.buffers.push_back(buffers[i]);
      }
    out.ast = substitute(UOp::make(Ops::SINK, DType::Void, stores), [&](const UOpPtr& n) -> UOpPtr {
      if (n->op != Ops::PARAM) return nullptr;
      return UOp::make(Ops::PARAM, n->dtype, {}, slot[static_cast<size_t>(std::get<int64_t>(n->arg))]);
    });
    out.launch.outputs = static_cast<int64_t>(outputs.size());
    out.name = k.name + "_o" + std::to_string(outputs.size());
    return out;
  }
};

// Flat elementwise kernels of one loop that share a buffer are merged into one kernel that writes each of their
// outputs (Launch::outputs), placed where the first of them was: the later ones move up past kernels that write
// nothing they read, each reads what a kernel before it computed as that value (not from its buffer), and what they
// read in common is read once. Adam's update of a parameter, three kernels (exp_avg, exp_avg_sq, then the parameter
// from both), each reading the gradient: one kernel reads the parameter, the gradient and the two states and writes
// three. Each output is a buffer this schedule made and only its kernel writes (write_in_place may then move it into an
// input). CPU targets (a GPU's kernels have grids).
void merge_elementwise(Schedule& s) {
  std::unordered_map<const BufferBase*, int> writers;
  for (const Kernel& k : s.kernels)
    for (int64_t o = 0; o < k.launch.outputs; o++)
      writers[k.buffers[static_cast<size_t>(o)].get()]++;
  std::unordered_set<const BufferBase*> made;
  for (const BufferRef& b : s.made)
    made.insert(b.get());
  std::vector<MergedKernel> merged;
  std::vector<int64_t> group(s.kernels.size(), -1); // the merged kernel each kernel went into
  std::vector<size_t> placed(s.kernels.size(), 0);  // where each kernel runs now (its position, or its group's)
  for (size_t j = 0; j < s.kernels.size(); j++) {
    const Kernel& k = s.kernels[j];
    placed[j] = j;
    const UOp* loop = flat_elementwise_loop(k);
    if (!loop || !made.count(k.buffers[0].get()) || writers[k.buffers[0].get()] != 1) continue;
    for (size_t g = 0; g < merged.size() && group[j] < 0; g++) {
      MergedKernel& m = merged[g];
      if (!m.can_take(k, loop)) continue;
      // nothing that runs between the merged kernel and k writes what k reads
      bool moves = true;
      for (size_t p = m.at + 1; p < j && moves; p++)
        if (group[p] != static_cast<int64_t>(g) && placed[p] > m.at)
          for (size_t slot = 1; slot < k.buffers.size() && moves; slot++)
            moves = !kernel_writes(s.kernels[p], k.buffers[slot].get());
      if (!moves) continue;
      m.add(k);
      group[j] = static_cast<int64_t>(g);
      placed[j] = m.at;
    }
    if (group[j] >= 0) continue;
    group[j] = static_cast<int64_t>(merged.size());
    merged.emplace_back(j, loop, k);
  }
  std::vector<Kernel> kernels;
  for (size_t j = 0; j < s.kernels.size(); j++) {
    if (group[j] < 0) {
      kernels.push_back(std::move(s.kernels[j]));
      continue;
    }
    const MergedKernel& m = merged[static_cast<size_t>(group[j])];
    if (m.at != j) continue; // merged into a kernel before it
    kernels.push_back(m.outputs.size() == 1 ? std::move(s.kernels[j]) : m.kernel());
  }
  s.kernels = std::move(kernels);
}

// Whether every load of the kernel's buffer `slot` reads the element the store it feeds writes: each STORE's
// value loads it at that STORE's index only (written in place, each element is read before it is written,
// and by nothing after), and, of a kernel of several outputs (merge_elementwise), each such load comes before the
// store of `output` (the renderer emits the stores in order, each after the loads its value needs).
bool reads_only_where_it_writes(const Kernel& k, int64_t slot, int64_t output) {
  if (k.stores_twice) return false; // an element written, then read for its second computation
  if (k.winograd) return false;     // it reads the windows around the elements it writes
  auto loads_slot = [&](const UOpPtr& n) {
    return n->op == Ops::LOAD && n->src[0]->op == Ops::PARAM && std::get<int64_t>(n->src[0]->arg) == slot;
  };
  for (const UOpPtr& st : k.ast->src) {
    if (st->op != Ops::STORE) return false;
    for (const UOpPtr& n : toposort(st->src[2]))
      if (loads_slot(n) && n->src[1] != st->src[1]) return false;
  }
  if (k.launch.outputs == 1) return true;
  bool stored = false;
  for (const UOpPtr& n : toposort(k.ast)) {
    if (n->op == Ops::STORE && std::get<int64_t>(n->src[0]->arg) == output) stored = true;
    if (stored && loads_slot(n)) return false;
  }
  return true;
}

// Moves the results written by one kernel into a reusable input that kernel reads only where it writes, same
// dtype and size, that no later kernel reads (see schedule()): the new buffer is not made, the kernel and the
// later ones read and write the input's buffer instead. Adam's update of a 512 x 512 x 3 x 3 weight, one thread:
// each of its three kernels wrote a fresh 9.4 MB buffer, whose lines were read in first.
void write_in_place(Schedule& s, const std::vector<BufferRef>& reusable) {
  std::vector<const BufferBase*> free;
  for (const BufferRef& b : reusable)
    free.push_back(b.get());
  for (UOpPtr& r : s.results) {
    UOpPtr node = r->op == Ops::BUFFER ? r : is_reshape(r) && r->src[0]->op == Ops::BUFFER ? r->src[0] : nullptr;
    if (!node) continue;
    const BufferRef out = node->buffer();
    auto made = std::find(s.made.begin(), s.made.end(), out);
    if (made == s.made.end()) continue;
    size_t writer = s.kernels.size(), writers = 0;
    int64_t output = 0; // the writer's slot of out
    for (size_t i = 0; i < s.kernels.size(); i++)
      for (int64_t o = 0; o < s.kernels[i].launch.outputs; o++)
        if (s.kernels[i].buffers[static_cast<size_t>(o)] == out) writer = i, writers++, output = o;
    if (writers != 1) continue;
    Kernel& k = s.kernels[writer];
    for (auto slot = static_cast<size_t>(k.launch.outputs); slot < k.buffers.size(); slot++) {
      const BufferRef in = k.buffers[slot];
      auto at = std::find(free.begin(), free.end(), in.get());
      if (at == free.end() || in->dtype != out->dtype || in->numel != out->numel) continue;
      if (std::any_of(s.kernels.begin() + static_cast<std::ptrdiff_t>(writer) + 1, s.kernels.end(),
                      [&](const Kernel& later) { return kernel_reads(later, in.get()); }) ||
          !reads_only_where_it_writes(k, static_cast<int64_t>(slot), output))
        continue;
      for (size_t i = writer; i < s.kernels.size(); i++)
        std::replace(s.kernels[i].buffers.begin(), s.kernels[i].buffers.end(), out, in);
      UOpPtr moved = buffer(in);
      for (UOpPtr& other : s.results)
        if (other == node)
          other = moved;
        else if (is_reshape(other) && other->src[0] == node)
          other = reshape(moved, other->shape);
      s.made.erase(made);
      free.erase(at);
      break;
    }
  }
}

} // namespace

Schedule schedule(const std::vector<UOpPtr>& roots, const Target& target, const NewBuffer& new_buffer,
                  const std::vector<BufferRef>& reusable) {
  Schedule s = Scheduler(target, new_buffer).run(roots);
  if (!target.gpu()) merge_elementwise(s);
  if (!reusable.empty()) write_in_place(s, reusable);
  return s;
}

Schedule schedule_value(const UOpPtr& value, const Target& target, const NewBuffer& new_buffer) {
  return Scheduler(target, new_buffer).run_value(value);
}

} // namespace tiny
