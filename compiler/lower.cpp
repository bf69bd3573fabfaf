#include "compiler/lower.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace tiny {

namespace {

bool has_mask(const ShapeTracker& st) {
  for (const View& v : st.views)
    if (v.mask) return true;
  return false;
}

// VIEW(f(a, b), st) -> f(VIEW(a, st), VIEW(b, st)) for elementwise f: a view without masks commutes
// with elementwise ops, and views that meet at a leaf compose into one tracker.
UOpPtr push_view_through_elementwise(const UOpPtr& n) {
  const UOpPtr& x = n->src[0];
  if (!(is_alu(x->op) || x->op == Ops::CAST || x->op == Ops::BITCAST) || has_mask(n->st())) return nullptr;
  std::vector<UOpPtr> src;
  for (const UOpPtr& s : x->src)
    src.push_back(view(s, n->st()));
  return UOp::make(x->op, x->dtype, std::move(src), x->arg);
}

} // namespace

const PatternMatcher push_views("push_views", {{{Ops::VIEW}, push_view_through_elementwise}});

namespace {

// The value a reduction starts from: x op identity == x.
UOpPtr reduce_identity(Ops op, DType dt) {
  bool max = op == Ops::MAX;
  switch (op) {
  case Ops::ADD:
    return is_float(dt) ? const_float(dt, 0) : const_int(dt, 0);
  case Ops::XOR:
    return const_int(dt, 0);
  case Ops::MUL:
    return is_float(dt) ? const_float(dt, 1) : const_int(dt, 1);
  case Ops::MAX:
  case Ops::MIN: {
    if (is_float(dt)) return const_float(dt, max ? -INFINITY : INFINITY);
    if (dt == DType::Bool) return const_int(dt, max ? 0 : 1);
    int bits = static_cast<int>(itemsize(dt) * 8);
    // unsigned: the largest is all ones (uint64's bit pattern is -1)
    if (!info(dt).is_signed) return const_int(dt, max ? 0 : static_cast<int64_t>(UINT64_MAX >> (64 - bits)));
    int64_t top = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
    return const_int(dt, max ? -top - 1 : top);
  }
  default:
    throw std::logic_error(std::string("lower_kernel: no identity for reduce ") + op_name(op));
  }
}

UOpPtr unflatten_dim(const UOpPtr& flat, const Shape& shape, size_t d) {
  int64_t suffix = 1;
  for (size_t i = d + 1; i < shape.size(); i++)
    suffix *= shape[i];
  UOpPtr q = UOp::make(Ops::IDIV, kIndex, {flat, idx_const(suffix)});
  return d == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(shape[d])});
}

std::vector<UOpPtr> unflatten(const UOpPtr& flat, const Shape& shape) {
  std::vector<UOpPtr> idx;
  for (size_t d = 0; d < shape.size(); d++)
    idx.push_back(unflatten_dim(flat, shape, d));
  return idx;
}

// The bounds [lo, hi] that `valid`'s clauses (lo <= a x + b, a x + b < hi, and-ed) narrow, of each x that is a loop or
// index math bounded on its own (a loop's remainder: a concatenation along a dim that a reshape merged, as a ViT's
// class token before its patches, masks i % 65 >= 1).
std::map<const UOp*, std::pair<int64_t, int64_t>> narrowed_ranges(const UOpPtr& valid) {
  std::map<const UOp*, std::pair<int64_t, int64_t>> bounds;
  std::vector<UOpPtr> stack{valid};
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (n->op == Ops::AND) {
      stack.push_back(n->src[0]), stack.push_back(n->src[1]);
      continue;
    }
    bool le = n->op == Ops::CMPLE && n->src[0]->op == Ops::CONST,
         lt = n->op == Ops::CMPLT && n->src[1]->op == Ops::CONST;
    if (!le && !lt) continue;
    Sum sum; // a x + b for one x
    flatten_sum(n->src[le ? 1 : 0], 1, sum);
    if (sum.terms.size() != 1 || sum.terms[0].second == 0) continue;
    const UOp* r = sum.terms[0].first.get();
    const int64_t a = sum.terms[0].second, b = sum.constant;
    if (r->op == Ops::RANGE ? r->src[0]->op != Ops::CONST : r->vmax - r->vmin >= (int64_t{1} << 40)) continue;
    auto [it, fresh] = bounds.try_emplace(r, r->vmin, r->vmax);
    auto& [lo, hi] = it->second;
    // lo' <= a r + b: a r >= t; a r + b < hi': a r <= t
    int64_t t = le ? n->src[0]->const_i() - b : n->src[1]->const_i() - b - 1;
    if (le == (a > 0))
      lo = std::max(lo, -floor_div(-t, a)); // r >= ceil(t / a)
    else
      hi = std::min(hi, floor_div(t, a));
  }
  return bounds;
}

// The index of each dim of `shape` at the flat index `flat` where `valid` holds, 0 elsewhere (a masked view of a
// computed value: its reads there are discarded, and must stay inside it). Unflattened with the loops bounded as
// valid bounds them, so that the divisions fold: a channel shuffle's gradient read through a concatenation's
// mask divided its clamped index (valid ? i : 0) by each dim, 64 divisions an element in ShuffleNet's backward
// (its kernels there 4 ms of 15 on one thread).
std::vector<UOpPtr> unflatten_given(const UOpPtr& flat, const Shape& shape, const UOpPtr& valid) {
  std::unordered_map<const UOp*, UOpPtr> to_narrow, back;
  const UOpPtr clauses = graph_rewrite(valid, symbolic); // holds the nodes narrowed_ranges names
  const auto narrowed = narrowed_ranges(clauses);
  // A narrowed value that is no loop stands for a loop of its own while the index is unflattened: ids past every
  // loop's, in the order of the values' hashes (the same ids, so the same kernel source, in every run).
  std::vector<const UOp*> values;
  for (const auto& [r, b] : narrowed)
    if (r->op != Ops::RANGE) values.push_back(r);
  std::ranges::sort(values, {}, &UOp::hash);
  for (const auto& [r, b] : narrowed) {
    auto [lo, hi] = b;
    if (lo > hi) return std::vector<UOpPtr>(shape.size(), idx_const(0)); // never valid
    if (lo == r->vmin && hi == r->vmax) continue;
    const int64_t id = r->op == Ops::RANGE ? (int64_t{1} << 40) + std::get<int64_t>(r->arg)
                                           : (int64_t{1} << 41) + (std::ranges::find(values, r) - values.begin());
    UOpPtr narrow = UOp::make(Ops::RANGE, kIndex, {idx_const(hi - lo + 1)}, id);
    to_narrow[r] = narrow + idx_const(lo);
    back[narrow.get()] = r->shared_from_this() + idx_const(-lo);
  }
  if (to_narrow.empty()) return unflatten(UOp::make(Ops::WHERE, kIndex, {valid, flat, idx_const(0)}), shape);
  auto swap = [](const UOpPtr& x, const std::unordered_map<const UOp*, UOpPtr>& map) {
    return graph_rewrite(substitute(x, map), symbolic);
  };
  // simplified first, so that a narrowed value that is no loop appears in it as the valid clauses name it
  std::vector<UOpPtr> idx = unflatten(swap(graph_rewrite(flat, symbolic), to_narrow), shape);
  for (size_t d = 0; d < idx.size(); d++) {
    idx[d] = swap(graph_rewrite(idx[d], symbolic), back);
    if (idx[d]->vmin < 0 || idx[d]->vmax >= shape[d])
      idx[d] = UOp::make(Ops::WHERE, kIndex, {valid, idx[d], idx_const(0)});
  }
  return idx;
}

UOpPtr bool_and(const UOpPtr& a, const UOpPtr& b) {
  if (a->is_const()) return a->const_i() ? b : a;
  if (b->is_const()) return b->const_i() ? a : b;
  return UOp::make(Ops::AND, DType::Bool, {a, b});
}

} // namespace

std::pair<UOpPtr, UOpPtr> view_index(const ShapeTracker& st, const std::vector<UOpPtr>& idx) {
  UOpPtr valid = const_int(DType::Bool, 1);
  std::vector<UOpPtr> cur = idx;
  UOpPtr flat;
  for (size_t k = st.views.size(); k-- > 0;) {
    const View& v = st.views[k];
    if (v.mask)
      for (size_t d = 0; d < v.shape.size(); d++) {
        auto [lo, hi] = (*v.mask)[d];
        if (lo > 0) valid = bool_and(valid, UOp::make(Ops::CMPLE, DType::Bool, {idx_const(lo), cur[d]}));
        if (hi < v.shape[d]) valid = bool_and(valid, UOp::make(Ops::CMPLT, DType::Bool, {cur[d], idx_const(hi)}));
      }
    flat = idx_const(v.offset);
    for (size_t d = 0; d < v.shape.size(); d++)
      flat = flat + cur[d] * idx_const(v.strides[d]);
    if (k > 0) cur = unflatten(flat, st.views[k - 1].shape);
  }
  return {flat, valid};
}

namespace {

// The bfloat16 read of a product of two: a float32 cast of a view of a buffer; null for anything else.
UOpPtr bf16_read(const UOpPtr& c) {
  bool ok = c->op == Ops::CAST && c->dtype == DType::Float32 && c->src[0]->op == Ops::VIEW &&
            c->src[0]->dtype == DType::BFloat16 && c->src[0]->src[0]->op == Ops::BUFFER;
  return ok ? c->src[0] : nullptr;
}

// Whether axis a of a reduction's value x is the pairs of the axis before (see pair_reduced_axis): the last, of 2,
// of a float32 product of two bfloat16 reads. Its loop stays one of its own (tiles and pair dot products step by
// it), even where both reads walk the two axes as one (y read in place, see pairs_in_place).
bool pair_axis(const UOpPtr& x, int64_t a) {
  return a + 1 == static_cast<int64_t>(x->shape.size()) && x->shape[static_cast<size_t>(a)] == 2 && x->op == Ops::MUL &&
         bf16_read(x->src[0]) && bf16_read(x->src[1]);
}

// Groups of adjacent output dims that every access (the output and each read) walks as one loop;
// size-1 dims belong to no group.
static std::vector<std::vector<size_t>> coalesce(const Shape& shape, const std::vector<const View*>& accesses) {
  bool masked = false;
  for (const View* v : accesses)
    masked = masked || v->mask.has_value();
  std::vector<std::vector<size_t>> groups;
  for (size_t d = 0; d < shape.size(); d++) {
    if (shape[d] == 1) continue;
    bool merge = !groups.empty() && !masked;
    if (merge)
      for (const View* v : accesses)
        if (v->strides[groups.back().back()] != v->strides[d] * v->shape[d]) {
          merge = false;
          break;
        }
    if (merge)
      groups.back().push_back(d);
    else
      groups.push_back({d});
  }
  return groups;
}

class Lowerer {
public:
  std::vector<BufferRef> buffers;
  std::unordered_map<const BufferBase*, UOpPtr> params;
  int64_t next_range = 0; // loop ids: the kernel's own loops first, then one per reduced axis
  Shape kernel_loops;     // the kernel's own loop sizes (outermost first)
  int64_t outputs = 0;    // the outputs the kernel computes (its loops times their blocks and lanes)
  std::vector<UOpPtr> must_realize;
  std::vector<int64_t> ivars;
  std::vector<double> fvars;
  std::vector<UOpPtr> var_nodes;
  UOpPtr reduce_lane; // set: innermost reduce loops read contiguously step by these lanes
  bool reduce_lanes_used = false;
  // GPU: the extent of each thread-id RANGE (kGroupRange.., kLocalRange..); a reduction read the same
  // by many threads is realized first. group_lane set: every reduction is a grouped reduce whose
  // elements the group's threads (this RANGE) share.
  bool gpu = false;
  std::array<int64_t, kGpuRanges> thread_extent{1, 1, 1, 1, 1, 1};
  UOpPtr group_lane;
  // CPU row kernels: a costly value that a row's reduction and the row's output both compute
  // (softmax's exp(x - max)) is stored into the output by that reduction's loop and read back by the
  // loop that writes the row, so each element computes it once (as torch's softmax does).
  struct RowScratch {
    UOpPtr value;                 // the shared value (tensor level)
    const UOp* reduce = nullptr;  // the reduction whose loop stores it
    BufferRef out;                // the kernel's output, which holds it
    View region;                  // the output's view
    std::vector<UOpPtr> root_idx; // the index the kernel's value is evaluated at
    std::vector<UOpPtr> stores;   // the stores in the reduction's loops
  } scratch;

  UOpPtr param(const BufferRef& b) {
    auto it = params.find(b.get());
    if (it != params.end()) return it->second;
    UOpPtr p = UOp::make(Ops::PARAM, b->dtype, {}, static_cast<int64_t>(buffers.size()));
    buffers.push_back(b);
    params[b.get()] = p;
    return p;
  }

  UOpPtr eval(const UOpPtr& n, const std::vector<UOpPtr>& idx) {
    std::pair<const UOp*, std::vector<const UOp*>> key{n.get(), {}};
    for (const UOpPtr& i : idx)
      key.second.push_back(i.get());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    UOpPtr r = eval_uncached(n, idx);
    // the key's nodes stay alive: a freed index node's address reused by another (a GPU thread's next
    // row) would find this row's value
    keep_.push_back(n);
    keep_.insert(keep_.end(), idx.begin(), idx.end());
    memo_[key] = r;
    return r;
  }

private:
  std::map<std::pair<const UOp*, std::vector<const UOp*>>, UOpPtr> memo_;
  std::vector<UOpPtr> keep_;
  std::vector<const UOp*> active_; // loop variables of the reductions being lowered
  struct ReduceLoops {
    std::vector<UOpPtr> ranges; // the loops
    std::vector<UOpPtr> index;  // each reduced axis's index over them
    UOpPtr valid;               // set: iterations where this is false add the identity
    // set: the elements the lanes leave over (a row of 1000 is 62 steps of 16 lanes, then 8), in a
    // loop of their own inside the same outer loops; the two results combine
    std::shared_ptr<ReduceLoops> tail;
  };
  std::unordered_map<const UOp*, ReduceLoops> reduce_loops_;

  // Whether every read of x walks axes a and a + 1 as one (a's stride is a + 1's times its size,
  // no mask on either): one loop over both then indexes without division.
  static bool walk_as_one(const UOpPtr& x, int64_t a) {
    size_t b = static_cast<size_t>(a) + 1;
    for (const UOpPtr& m : toposort(x)) {
      // (a buffer or iota is read through a view of x's rank, checked here)
      if (m->op == Ops::REDUCE || m->op == Ops::GATHER) return false;
      if (m->op != Ops::VIEW) continue;
      if (m->shape.size() != x->shape.size()) return false;
      const View& v = m->st().views.back();
      if (v.mask && ((*v.mask)[a] != std::pair<int64_t, int64_t>{0, v.shape[a]} ||
                     (*v.mask)[b] != std::pair<int64_t, int64_t>{0, v.shape[b]}))
        return false;
      if (v.strides[a] != v.strides[b] * v.shape[b]) return false;
      if (m->st().views.size() > 1 && !inner_views_walk_as_one(m->st(), a)) return false;
    }
    return true;
  }

  // Whether the views under the last of st walk its axes a and a + 1 as one too: the flat index of a
  // loop over both has no division left (a panel interleaved by pairs, see pair_dot, does not).
  static bool inner_views_walk_as_one(const ShapeTracker& st, int64_t a) {
    const Shape shape = st.shape();
    size_t b = static_cast<size_t>(a) + 1;
    UOpPtr r = UOp::make(Ops::RANGE, kIndex, {idx_const(shape[a] * shape[b])}, int64_t{1} << 30);
    std::vector<UOpPtr> idx(shape.size(), idx_const(0));
    idx[a] = UOp::make(Ops::IDIV, kIndex, {r, idx_const(shape[b])});
    idx[b] = UOp::make(Ops::MOD, kIndex, {r, idx_const(shape[b])});
    for (const UOpPtr& n : toposort(graph_rewrite(view_index(st, idx).first, symbolic))) {
      if (n->op != Ops::IDIV && n->op != Ops::MOD) continue;
      std::vector<UOpPtr> under = toposort(n);
      if (std::ranges::find(under, r) != under.end()) return false;
    }
    return true;
  }

  // The loops of a reduction of x over axes: adjacent axes that every read walks as one share a loop.
  ReduceLoops reduce_loops(const UOpPtr& x, const std::vector<int64_t>& axes) {
    std::vector<std::vector<int64_t>> runs;
    for (int64_t a : axes)
      if (!runs.empty() && runs.back().back() == a - 1 && walk_as_one(x, a - 1) && !pair_axis(x, a))
        runs.back().push_back(a);
      else
        runs.push_back({a});
    ReduceLoops out;
    out.index.resize(axes.size());
    // each axis of a run's index from the run's flattened index r
    auto run_index = [&](ReduceLoops& l, const std::vector<int64_t>& run, size_t i, const UOpPtr& r) {
      int64_t suffix = 1;
      for (size_t k = run.size(); k-- > 0;) {
        int64_t a = run[k];
        UOpPtr q = suffix == 1 ? r : UOp::make(Ops::IDIV, kIndex, {r, idx_const(suffix)});
        l.index[i + k] = k == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(x->shape[a])});
        suffix *= x->shape[a];
      }
    };
    size_t i = 0;
    int64_t all_terms = 1;
    for (int64_t a : axes)
      all_terms *= x->shape[a];
    for (const auto& run : runs) {
      int64_t size = 1;
      for (int64_t a : run)
        size *= x->shape[a];
      // The innermost loop of a reduction read contiguously steps by vector lanes (reduce_lane):
      // each lane accumulates every 16th element, the lanes are combined after the loop; the elements
      // past the last whole step are a scalar tail loop. A loop of 64 or more; of 32 where the outer reduce
      // loops make 256 or more terms in all (a first convolution's weight gradient over rows of 32 output
      // columns: clang vectorized the loop of 32 alone and summed its 24 accumulators across lanes at every exit,
      // 0.63 -> 0.43 ms one thread; attention's scores over 32 features a head keep clang's loop: the lanes'
      // combine each output cost twice the products, 1.4 -> 2.7 ms).
      int64_t lane_count = reduce_lane ? reduce_lane->src[0]->const_i() : 1;
      bool lanes = reduce_lane && &run == &runs.back() &&
                   (size >= 4 * lane_count || (size >= 2 * lane_count && all_terms >= 16 * lane_count));
      int64_t width = lanes ? lane_count : 1, rest = size % width;
      UOpPtr r = UOp::make(Ops::RANGE, kIndex, {idx_const(size / width)}, next_range++);
      out.ranges.push_back(r);
      if (lanes) {
        r = r * idx_const(width) + reduce_lane;
        out.ranges.push_back(reduce_lane);
        reduce_lanes_used = true;
      }
      if (rest) {
        out.tail = std::make_shared<ReduceLoops>(out);
        out.tail->ranges.resize(out.ranges.size() - 2); // the outer runs' loops
        UOpPtr t = UOp::make(Ops::RANGE, kIndex, {idx_const(rest)}, next_range++);
        out.tail->ranges.push_back(t);
        run_index(*out.tail, run, i, idx_const(size - rest) + t);
      }
      run_index(out, run, i, r);
      i += run.size();
    }
    return out;
  }

  // A sum over one axis a of where((coordinate along a == t) & m..., v, 0), where t and the masks m are the
  // same all along a: the one term the mask lets through, v evaluated at coordinate t (0 where t is outside
  // the axis or a mask is false), without a loop over a. nll_loss and the margin losses pick each
  // row's target class so (aten_ops/loss.cpp): a third pass over a log_softmax row becomes one load. The
  // loop's value but for the sign of a zero picked (the loop adds it to +0), which is what torch's direct
  // read gives. nullptr: not of that form.
  UOpPtr one_hot_sum(const UOpPtr& n, const std::vector<UOpPtr>& idx) {
    const ReduceArg& ra = n->reduce_arg();
    const UOpPtr& x = n->src[0];
    if (ra.op != Ops::ADD || ra.axes.size() != 1 || x->op != Ops::WHERE || n->dtype != x->dtype ||
        !is_zero(x->src[2]) || n.get() == scratch.reduce)
      return nullptr;
    int64_t a = ra.axes[0];
    std::vector<UOpPtr> terms, masks;
    and_terms(x->src[0], terms);
    UOpPtr target;
    for (const UOpPtr& c : terms) {
      if (!target && c->op == Ops::CMPEQ) {
        for (int k = 0; k < 2 && !target; k++)
          if (is_coordinate(c->src[k], a) && independent_of(c->src[1 - k], a)) target = c->src[1 - k];
        if (target) continue;
      }
      if (!independent_of(c, a)) return nullptr;
      masks.push_back(c);
    }
    if (!target) return nullptr;
    auto [i, valid] = checked_index(cast(eval(target, idx), kIndex), x->shape[a]);
    for (const UOpPtr& m : masks)
      valid = bool_and(valid, eval(m, idx));
    std::vector<UOpPtr> at = idx;
    at[a] = i;
    return UOp::make(Ops::WHERE, n->dtype, {valid, eval(x->src[1], at), reduce_identity(Ops::ADD, n->dtype)});
  }

  static bool is_zero(const UOpPtr& z) {
    const UOp* c = z.get();
    if (c->op == Ops::VIEW) {
      if (has_mask(c->st())) return false;
      c = c->src[0].get();
    }
    return c->op == Ops::CONST && (is_float(c->dtype) ? c->const_f() == 0.0 : c->const_i() == 0);
  }

  static void and_terms(const UOpPtr& c, std::vector<UOpPtr>& out) {
    if (c->op == Ops::AND && c->dtype == DType::Bool) {
      and_terms(c->src[0], out);
      and_terms(c->src[1], out);
    } else {
      out.push_back(c);
    }
  }

  // A stand-in for the coordinate along axis a, to see what an index does with it (never rendered).
  static std::vector<UOpPtr> probe_index(size_t rank, int64_t a, int64_t size) {
    std::vector<UOpPtr> idx(rank, idx_const(0));
    idx[a] = UOp::make(Ops::RANGE, kIndex, {idx_const(size)}, (int64_t{1} << 30) + 1);
    return idx;
  }

  // Whether c is an integer iota read as the coordinate along axis a itself.
  static bool is_coordinate(const UOpPtr& c, int64_t a) {
    if (c->op != Ops::VIEW || c->src[0]->op != Ops::IOTA || !is_int(c->dtype) || has_mask(c->st())) return false;
    std::vector<UOpPtr> probe = probe_index(c->shape.size(), a, c->shape[a]);
    return graph_rewrite(view_index(c->st(), probe).first, symbolic) == probe[a];
  }

  // Whether v has the same value all along axis a: no read in it (a view) moves with a.
  static bool independent_of(const UOpPtr& v, int64_t a) {
    if (v->op == Ops::CONST || v->op == Ops::DEFINE_VAR) return true;
    if (v->op == Ops::VIEW) {
      std::vector<UOpPtr> probe = probe_index(v->shape.size(), a, v->shape[a]);
      auto [flat, valid] = view_index(v->st(), probe);
      for (const UOpPtr& u : {flat, valid})
        if (std::ranges::count(toposort(graph_rewrite(u, symbolic)), probe[a])) return false;
      return true;
    }
    if (is_alu(v->op) || v->op == Ops::CAST || v->op == Ops::BITCAST)
      return std::ranges::all_of(v->src, [&](const UOpPtr& s) { return independent_of(s, a); });
    return false;
  }

  // The nodes of an index as the symbolic pass leaves it, and the loops of one iteration it names (the pass
  // folds them away, but a value read at them still sits inside their loop: a statistic at a kernel's
  // channel loop of one iteration, the channels a block, is recomputed for every batch element around it).
  static std::vector<UOpPtr> index_nodes(const UOpPtr& i) {
    std::vector<UOpPtr> nodes = toposort(graph_rewrite(i, symbolic));
    for (const UOpPtr& n : toposort(i))
      if (n->op == Ops::RANGE && n->vmax == 0 && std::ranges::find(nodes, n) == nodes.end()) nodes.push_back(n);
    return nodes;
  }

  static bool varies_with(const std::vector<UOpPtr>& idx, const std::vector<const UOp*>& ranges) {
    for (const UOpPtr& i : idx)
      for (const UOpPtr& n : index_nodes(i))
        if (n->op == Ops::RANGE && std::find(ranges.begin(), ranges.end(), n.get()) != ranges.end()) return true;
    return false;
  }

  // Whether an index is clamped to a mask somewhere (a WHERE: see unflatten_given).
  static bool clamped(const std::vector<UOpPtr>& idx) {
    for (const UOpPtr& i : idx)
      for (const UOpPtr& n : index_nodes(i))
        if (n->op == Ops::WHERE) return true;
    return false;
  }

  // Whether a value indexed by idx would be computed again by a kernel loop it does not depend on
  // that encloses one it does.
  // A value with fewer elements than the kernel has outputs, read where every kernel loop moves its
  // index (so no loop can hoist it) but through a division (several outputs read one element), is
  // computed again for each of them: a window's maximum position read by each element of the window in
  // a max pool's gradient.
  bool recomputed(const std::vector<UOpPtr>& idx, int64_t elements) const {
    if (gpu) return recomputed_by_threads(idx);
    std::vector<bool> dep(kernel_loops.size(), false);
    bool divided = false;
    for (const UOpPtr& i : idx)
      for (const UOpPtr& n : index_nodes(i)) {
        if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) < static_cast<int64_t>(dep.size()))
          dep[std::get<int64_t>(n->arg)] = true;
        // (or clamped to a mask: a concatenation's half read, see unflatten_given)
        divided = divided || n->op == Ops::IDIV || n->op == Ops::WHERE;
      }
    int64_t repeats = 1;
    bool inner_dep = false, every = true;
    for (size_t g = dep.size(); g-- > 0;) {
      inner_dep = inner_dep || dep[g];
      if (inner_dep && !dep[g]) repeats *= kernel_loops[g];
      every = every && (dep[g] || kernel_loops[g] == 1);
    }
    return repeats > 1 || (every && divided && elements < outputs);
  }

  // GPU: whether threads that differ only in an id the index does not depend on would each compute
  // the value (a grouped reduce's threads share it: local ids do not count there).
  bool recomputed_by_threads(const std::vector<UOpPtr>& idx) const {
    std::array<bool, kGpuRanges> dep{};
    for (const UOpPtr& i : idx)
      for (const UOpPtr& n : index_nodes(i))
        if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) < kGpuRanges) dep[std::get<int64_t>(n->arg)] = true;
    int64_t repeats = 1;
    for (int64_t r = 0; r < kGpuRanges; r++)
      if (!dep[r] && !(group_lane && r >= kLocalRange)) repeats *= thread_extent[r];
    return repeats > 1;
  }

  // A grouped reduce's loop: the group's threads take the reduced elements (flattened over the axes)
  // in turn, thread t every group_size-th from t. Past the end, a thread reads element 0 and adds the
  // reduction's identity (valid).
  ReduceLoops grouped_loops(const UOpPtr& x, const std::vector<int64_t>& axes) {
    int64_t size = 1, width = group_lane->src[0]->const_i();
    for (int64_t a : axes)
      size *= x->shape[a];
    UOpPtr r = UOp::make(Ops::RANGE, kIndex, {idx_const((size + width - 1) / width)}, next_range++);
    UOpPtr flat = r * idx_const(width) + group_lane;
    ReduceLoops out;
    out.ranges = {r, group_lane};
    if (size % width != 0) {
      out.valid = UOp::make(Ops::CMPLT, DType::Bool, {flat, idx_const(size)});
      flat = UOp::make(Ops::WHERE, kIndex, {out.valid, flat, idx_const(0)});
    }
    out.index.resize(axes.size());
    int64_t suffix = 1;
    for (size_t k = axes.size(); k-- > 0;) {
      UOpPtr q = suffix == 1 ? flat : UOp::make(Ops::IDIV, kIndex, {flat, idx_const(suffix)});
      out.index[k] = k == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(x->shape[axes[k]])});
      suffix *= x->shape[axes[k]];
    }
    return out;
  }

  UOpPtr load(const UOpPtr& buf, const UOpPtr& flat, const UOpPtr& valid) {
    if (valid->is_const() && valid->const_i()) return UOp::make(Ops::LOAD, buf->dtype, {param(buf->buffer()), flat});
    return UOp::make(Ops::LOAD, buf->dtype, {param(buf->buffer()), flat, valid});
  }

public:
  // A data-dependent index, its validity (0 <= i < n), and the index clamped so that even an
  // invalid one addresses memory in bounds.
  static std::pair<UOpPtr, UOpPtr> checked_index(const UOpPtr& i, int64_t n) {
    UOpPtr valid = UOp::make(
        Ops::AND, DType::Bool,
        {UOp::make(Ops::CMPLE, DType::Bool, {idx_const(0), i}), UOp::make(Ops::CMPLT, DType::Bool, {i, idx_const(n)})});
    return {UOp::make(Ops::WHERE, kIndex, {valid, i, idx_const(0)}), valid};
  }

private:
  static UOpPtr where_valid(const UOpPtr& v, const UOpPtr& valid) {
    if (valid->is_const() && valid->const_i()) return v;
    return UOp::make(Ops::WHERE, v->dtype, {valid, v, const_like(v, 0)});
  }

  UOpPtr eval_uncached(const UOpPtr& n, const std::vector<UOpPtr>& idx) {
    if (n == scratch.value && active_.empty() && idx == scratch.root_idx)
      return UOp::make(Ops::LOAD, n->dtype,
                       {param(scratch.out), view_index(ShapeTracker{{scratch.region}}, idx).first});
    switch (n->op) {
    case Ops::CONST:
      return n;
    case Ops::DEFINE_VAR: {
      bool fl = is_float(n->dtype);
      int64_t slot = static_cast<int64_t>(fl ? fvars.size() : ivars.size());
      if (fl)
        fvars.push_back(n->const_f());
      else
        ivars.push_back(n->const_i());
      var_nodes.push_back(n);
      return UOp::make(Ops::ARG, n->dtype, {}, slot);
    }
    case Ops::BUFFER:
      return load(n, idx.at(0), const_int(DType::Bool, 1));
    case Ops::IOTA:
      return cast(idx.at(0), n->dtype);
    case Ops::REDUCE: {
      if (UOpPtr picked = one_hot_sum(n, idx)) return picked;
      // A loop of its own over the reduced axes, accumulating src.
      const ReduceArg& ra = n->reduce_arg();
      const UOpPtr& x = n->src[0];
      // Inside another reduction's loop, a reduction whose index moves with that loop would be
      // recomputed every iteration: it has to be realized on its own.
      if (!active_.empty() && varies_with(idx, active_)) must_realize.push_back(n);
      // Read through a broadcast whose loop runs outside the loops it depends on (a per-channel
      // batch-norm statistic in an (N, C, H, W) kernel), it would be recomputed for each of those
      // iterations: realized on its own instead.
      else if (active_.empty() && recomputed(idx, prod(n->shape)))
        must_realize.push_back(n);
      // Read through a mask (a concatenation's half: its index clamped, see unflatten_given), a sum of 16 or more
      // terms an element would be computed at every output, the masked ones too, in this kernel's scalar loops:
      // realized on its own, in its own lanes (ShuffleNet's 1 x 1 convolutions' input gradients under its channel
      // shuffle's concatenation, one thread: 0.25 ms -> 0.011 for the sum in lanes and 0.006 for the kernel).
      else if (active_.empty() && prod(x->shape) >= 16 * prod(n->shape) && clamped(idx))
        must_realize.push_back(n);
      size_t mark = active_.size();
      // Every evaluation of one reduction shares its loop variables: evaluations at other output
      // indices (an upcast block) then accumulate in one loop.
      auto& all_loops = reduce_loops_[n.get()];
      if (all_loops.ranges.empty()) all_loops = group_lane ? grouped_loops(x, ra.axes) : reduce_loops(x, ra.axes);
      auto accumulate = [&](const ReduceLoops& loops) {
        std::vector<UOpPtr> src_idx = idx, srcs{nullptr};
        for (size_t i = 0; i < ra.axes.size(); i++)
          src_idx[ra.axes[i]] = loops.index[i];
        for (const UOpPtr& r : loops.ranges) {
          srcs.push_back(r);
          active_.push_back(r.get());
        }
        srcs[0] = eval(x, src_idx);
        if (n.get() == scratch.reduce)
          scratch.stores.push_back(
              UOp::make(Ops::STORE, DType::Void,
                        {param(scratch.out), view_index(ShapeTracker{{scratch.region}}, src_idx).first,
                         eval(scratch.value, src_idx)}));
        if (loops.valid)
          srcs[0] = UOp::make(Ops::WHERE, x->dtype, {loops.valid, srcs[0], reduce_identity(ra.op, x->dtype)});
        active_.resize(mark);
        return UOp::make(Ops::REDUCE, n->dtype, std::move(srcs), ra);
      };
      UOpPtr acc = accumulate(all_loops);
      if (all_loops.tail) acc = UOp::make(ra.op, n->dtype, {acc, accumulate(*all_loops.tail)});
      return acc;
    }
    case Ops::GATHER: {
      auto [i, valid] = checked_index(cast(eval(n->src[1], idx), kIndex), n->src[0]->shape[0]);
      return where_valid(eval(n->src[0], {i}), valid);
    }
    case Ops::VIEW: {
      const UOpPtr& x = n->src[0];
      auto [flat, valid] = view_index(n->st(), idx);
      if (x->op == Ops::BUFFER) return load(x, flat, valid);
      if (x->op == Ops::IOTA) return where_valid(cast(flat, x->dtype), valid);
      bool scalar = x->op == Ops::CONST || x->op == Ops::DEFINE_VAR;
      if (scalar) return where_valid(eval(x, {}), valid);
      // The reads of a masked computed value happen at index 0 where the mask is off (the value there is
      // discarded): its loads are not guarded by the mask, and an index past the buffer can fault.
      if (valid->is_const() && valid->const_i()) return eval(x, unflatten(flat, x->shape));
      return where_valid(eval(x, unflatten_given(flat, x->shape, valid)), valid);
    }
    default:
      if (is_alu(n->op) || n->op == Ops::CAST || n->op == Ops::BITCAST) {
        std::vector<UOpPtr> src;
        for (const UOpPtr& s : n->src)
          src.push_back(eval(s, idx));
        return UOp::make(n->op, n->dtype, std::move(src), n->arg);
      }
      throw std::logic_error(std::string("lower_kernel: cannot lower ") + op_name(n->op));
    }
  }
};

} // namespace

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kReduceLanes = -2; // lower_blocked's lane group: lanes along the reduced axes

// What the CPU the C kernels are compiled for (-march=native: this one) has, asked once.
struct HostCpu {
  bool avx512 = true;
};

const HostCpu& host_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  static const HostCpu cpu{__builtin_cpu_supports("avx512f") != 0};
#else
  static const HostCpu cpu;
#endif
  return cpu;
}

// Whether the host has 32 vector registers of 16 floats (AVX-512) rather than 16 of 8 (AVX2), where a
// 16-lane vector takes two registers and a register block must be a quarter the size. 1024^3 x @ w on
// one AVX2 thread (a 16-core EPYC): 8 x 2 vector accumulators 90-139 ms, 4 x 2 68-71 ms (both spill: 16
// registers of accumulators), 4 x 1 30 ms (8 registers of accumulators, 2 of the panel's row, 1 broadcast).
bool wide_vector_registers() { return host_cpu().avx512; }

// The views of buffers a reduction reads in its own loop: not those of reductions nested in it (a
// softmax's max and sum under log_softmax + nll's sum), which are computed in loops of their own.
std::vector<UOpPtr> own_buffer_reads(const UOpPtr& r) {
  std::vector<UOpPtr> reads, stack{r->src[0]};
  std::unordered_map<const UOp*, bool> seen;
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (n->op == Ops::REDUCE || seen[n.get()]) continue;
    seen[n.get()] = true;
    if (n->op == Ops::VIEW && n->src[0]->op == Ops::BUFFER) reads.push_back(n);
    stack.insert(stack.end(), n->src.begin(), n->src.end());
  }
  return reads;
}

} // namespace

// (lower.h) A reduction whose reads all step by 0 or 1 along its innermost reduced axis steps its loop by vector lanes:
// the demo's batch norm mean over its convolution's biased ReLU read the bias through two views and summed element by
// element, 0.91 of its step's 1.6 ms in such kernels; in lanes 0.37.
int64_t step_along(const ShapeTracker& st, size_t d) {
  if (st.views.size() == 1) return st.views.back().strides[d];
  const Shape shape = st.shape();
  std::vector<UOpPtr> idx;
  for (size_t e = 0; e < shape.size(); e++)
    idx.push_back(UOp::make(Ops::RANGE, kIndex, {idx_const(shape[e])}, static_cast<int64_t>(e)));
  auto [flat, valid] = view_index(st, idx);
  auto step = lane_split(graph_rewrite(flat, symbolic), idx[d].get());
  auto valid_step = lane_split(graph_rewrite(valid, symbolic), idx[d].get());
  return step && valid_step && valid_step->second == 0 ? step->second : -1;
}

namespace {

// Whether every buffer a reduction reads walks each of the reduced axes `axes` contiguously (or not at
// all).
bool reads_contiguously_along(const UOpPtr& r, const std::vector<int64_t>& axes) {
  size_t rank = r->src[0]->shape.size();
  for (const UOpPtr& m : own_buffer_reads(r)) {
    // A read of another rank (behind a gather's computed index, say) has no reduced axes to walk, and
    // indexing its strides by the reduction's axes would read past them.
    if (m->shape.size() != rank) return false;
    for (int64_t a : axes)
      if (int64_t st = step_along(m->st(), static_cast<size_t>(a)); st != 0 && st != 1) return false;
  }
  return true;
}

bool reads_reduced_contiguously(const UOpPtr& r) { return reads_contiguously_along(r, r->reduce_arg().axes); }

// Whether the reduction's innermost loop, over its last reduced axis, reads every buffer contiguously:
// its reduce loop steps by vector lanes (a per-channel sum of an (N, C, H*W) tensor walks H*W).
bool reads_innermost_reduced_contiguously(const UOpPtr& r) {
  return reads_contiguously_along(r, {r->reduce_arg().axes.back()});
}

// Whether the value reads reductions, each only through views that broadcast it along the dims `dims`
// (so every element of a row along them reads the same reduced value).
bool reductions_broadcast_along(const UOpPtr& value, const std::vector<size_t>& dims) {
  std::unordered_map<const UOp*, int> broadcast_reads;
  for (const UOpPtr& n : toposort(value)) {
    if (n->op != Ops::VIEW || n->src[0]->op != Ops::REDUCE) continue;
    const ShapeTracker& st = n->st();
    if (st.views.size() != 1 || n->shape.size() != value->shape.size()) return false;
    for (size_t d : dims)
      if (st.views.back().strides[d] != 0 || n->shape[d] == 1) return false;
    broadcast_reads[n->src[0].get()]++;
  }
  if (broadcast_reads.empty()) return false;
  // every read of each reduction (outside other reductions) is one of those views
  for (const UOpPtr& n : toposort(value))
    for (const UOpPtr& s : n->src)
      if (s->op == Ops::REDUCE && n->op != Ops::VIEW && !broadcast_reads.count(s.get())) return false;
  return value->op != Ops::REDUCE;
}

// A row kernel's value that its output can hold for the loop that writes the row (see
// Lowerer::RowScratch): computed elementwise from the kernel's value and from the source of a
// reduction over the row's dims that the value reads as a plain broadcast, costly (a transcendental
// op), and of the output's own dtype (float32, float64), so that holding it rounds nothing.
struct RowScratchPlan {
  UOpPtr value;
  const UOp* reduce = nullptr;
};

// The nodes computed from n through elementwise ops only (no view, reduction or read in between).
std::vector<UOpPtr> elementwise_under(const UOpPtr& n) {
  std::vector<UOpPtr> out, stack{n};
  std::unordered_map<const UOp*, bool> seen;
  while (!stack.empty()) {
    UOpPtr m = stack.back();
    stack.pop_back();
    if (seen[m.get()] || !(is_alu(m->op) || m->op == Ops::CAST)) continue;
    seen[m.get()] = true;
    out.push_back(m);
    stack.insert(stack.end(), m->src.begin(), m->src.end());
  }
  return out;
}

bool costly_op(Ops op) {
  return (is_unary(op) && op != Ops::NEG && op != Ops::NOT && op != Ops::BITNOT && op != Ops::ABS) || op == Ops::POW ||
         op == Ops::ATAN2;
}

RowScratchPlan plan_row_scratch(const BufferRef& out, const UOpPtr& value, const std::vector<size_t>& row) {
  DType dt = out->dtype;
  if (dt != DType::Float32 && dt != DType::Float64) return {};
  std::vector<UOpPtr> outside = elementwise_under(value);
  std::unordered_map<const UOp*, bool> in_output;
  for (const UOpPtr& n : outside)
    in_output[n.get()] = true;
  RowScratchPlan best;
  int64_t best_cost = 0;
  for (const UOpPtr& m : outside)
    for (const UOpPtr& v : m->src) {
      if (v->op != Ops::VIEW || v->src[0]->op != Ops::REDUCE) continue;
      const UOpPtr& r = v->src[0];
      const View& bv = v->st().views.back();
      std::vector<size_t> axes;
      for (int64_t a : r->reduce_arg().axes)
        axes.push_back(static_cast<size_t>(a));
      if (v->st().views.size() != 1 || bv.mask || bv.offset != 0 || r->src[0]->shape != value->shape || axes != row)
        continue;
      // a plain broadcast: the reduction's value for the row that the output's element is in
      Shape strides = contiguous_strides(r->shape);
      bool plain = true;
      for (size_t d = 0; d < strides.size(); d++)
        plain = plain && (r->shape[d] == 1 || bv.strides[d] == strides[d]);
      // and the only read of the reduction, by the output's own elementwise ops: a read at another row
      // (a flip of the result) would store into a row another thread is writing
      bool only = true;
      for (const UOpPtr& n : toposort(value))
        for (const UOpPtr& s : n->src)
          only = only && !((s->op == Ops::VIEW && s->src[0] == r && s != v) || (s == v && !in_output.count(n.get())));
      if (!plain || !only) continue;
      for (const UOpPtr& e : elementwise_under(r->src[0])) {
        if (!in_output.count(e.get()) || e->dtype != dt) continue;
        std::vector<UOpPtr> ops = elementwise_under(e);
        bool costly = false;
        for (const UOpPtr& k : ops)
          costly = costly || costly_op(k->op);
        int64_t cost = static_cast<int64_t>(ops.size());
        if (costly && cost > best_cost) best = {e, r.get()}, best_cost = cost;
      }
    }
  return best;
}

// The kernel computing blocks of outputs: up[g] outputs of loop group g together (for the lane group,
// up[g] vectors of kLanes lanes each).
// split: {group, n}: that group's loop becomes an outer loop in its place and an inner one of n iterations,
// the kernel's innermost loop.
Kernel lower_blocked(const BufferRef& out, const View& out_region, const UOpPtr& value,
                     const std::vector<std::vector<size_t>>& groups, const Shape& loops, const Shape& up,
                     int64_t lane_group, const RowScratchPlan& scratch = {},
                     std::pair<int64_t, int64_t> split = {-1, 1}, bool masked_stores = false) {
  // A lane loop that does not divide into whole vectors ends on a vector that overlaps the one before (its base
  // min(i * lanes, extent - lanes)): its outputs are computed and stored twice, the same values (a copy's; see
  // lower_transposed_copy, which allows it where the kernel reads nothing it writes and no two threads share it).
  Shape kloops = loops;
  for (size_t g = 0; g < loops.size(); g++) {
    const int64_t per = up[g] * (static_cast<int64_t>(g) == lane_group ? kLanes : 1);
    kloops[g] = (loops[g] + per - 1) / per;
  }
  if (split.first >= 0) {
    kloops[static_cast<size_t>(split.first)] /= split.second;
    kloops.push_back(split.second);
  }

  Lowerer lw;
  lw.param(out);
  if (scratch.value) lw.scratch = {scratch.value, scratch.reduce, out, out_region, {}, {}};
  int64_t lane_id = static_cast<int64_t>(kloops.size());
  UOpPtr lane = UOp::make(Ops::RANGE, kIndex, {idx_const(kLanes)}, lane_id);
  if (lane_group == kReduceLanes) lw.reduce_lane = lane;
  lw.next_range = lane_id + 1;
  lw.kernel_loops = kloops;
  lw.outputs = prod(loops);
  std::vector<UOpPtr> ranges;
  for (size_t g = 0; g < kloops.size(); g++)
    ranges.push_back(UOp::make(Ops::RANGE, kIndex, {idx_const(kloops[g])}, static_cast<int64_t>(g)));
  if (split.first >= 0) {
    UOpPtr& outer = ranges[static_cast<size_t>(split.first)];
    outer = outer * idx_const(split.second) + ranges.back();
  }
  // One store per element of the block: offsets u (row-major over the upcast loops).
  std::vector<UOpPtr> stores;
  for (int64_t block = 0, nblock = prod(up); block < nblock; block++) {
    std::vector<UOpPtr> idx(value->shape.size(), idx_const(0));
    int64_t rest = block;
    for (size_t g = groups.size(); g-- > 0;) {
      int64_t u = rest % up[g];
      rest /= up[g];
      UOpPtr r;
      if (static_cast<int64_t>(g) == lane_group) {
        const int64_t per = up[g] * kLanes;
        UOpPtr base = ranges[g] * idx_const(per);
        if (loops[g] % per != 0) base = UOp::make(Ops::MIN, kIndex, {base, idx_const(loops[g] - per)});
        r = base + idx_const(u * kLanes) + lane;
      } else if (up[g] > 1 && loops[g] % up[g] != 0) {
        // (a block of rows that does not divide its loop overlaps the block before the same way)
        r = UOp::make(Ops::MIN, kIndex, {ranges[g] * idx_const(up[g]), idx_const(loops[g] - up[g])}) + idx_const(u);
      } else {
        r = up[g] == 1 ? ranges[g] : ranges[g] * idx_const(up[g]) + idx_const(u);
      }
      // the index of each original dim in the group, from the group's loop variable
      int64_t suffix = 1;
      for (size_t k = groups[g].size(); k-- > 0;) {
        size_t d = groups[g][k];
        UOpPtr q = suffix == 1 ? r : UOp::make(Ops::IDIV, kIndex, {r, idx_const(suffix)});
        idx[d] = k == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(value->shape[d])});
        suffix *= value->shape[d];
      }
    }
    lw.scratch.root_idx = idx;
    UOpPtr v = lw.eval(value, idx);
    auto [flat, valid] = view_index(ShapeTracker{{out_region}}, idx);
    // (masked_stores: an output region padded past the output, see lower_transposed_copy, stores where valid only)
    if (masked_stores && valid)
      stores.push_back(UOp::make(Ops::STORE, DType::Void, {lw.param(out), flat, v, valid}));
    else
      stores.push_back(UOp::make(Ops::STORE, DType::Void, {lw.param(out), flat, v}));
  }
  stores.insert(stores.end(), lw.scratch.stores.begin(), lw.scratch.stores.end());
  UOpPtr ast = graph_rewrite(UOp::make(Ops::SINK, DType::Void, stores), symbolic);

  bool reduces = false;
  for (const UOpPtr& n : toposort(ast))
    reduces = reduces || n->op == Ops::REDUCE;
  std::string name = reduces ? "R" : "E";
  for (int64_t s : kloops)
    name += "_" + std::to_string(s);
  Kernel k{name, ast, lw.buffers, kloops, lw.ivars, lw.fvars, lw.var_nodes, lw.must_realize};
  for (size_t g = 0; g < loops.size(); g++)
    k.stores_twice = k.stores_twice || loops[g] % (up[g] * (static_cast<int64_t>(g) == lane_group ? kLanes : 1)) != 0;
  k.launch.global[0] = kloops[0];
  if (lane_group >= 0 || lw.reduce_lanes_used) {
    k.lane_range = lane_id;
    k.lanes = kLanes;
    k.name += "_v" + std::to_string(kLanes);
  }
  return k;
}

// Whether a kernel's lanes vectorize its reduce loops: every load there reads the lanes contiguously
// (one vector load) or is the same for all of them, at a place valid for all lanes or none.
bool lanes_pay(const Kernel& k) {
  const UOp* lane = lane_node(k);
  if (!lane) return false;
  for (const UOpPtr& r : toposort(k.ast)) {
    if (r->op != Ops::REDUCE || pair_dot(r, lane)) continue;
    for (const UOpPtr& n : toposort(r->src[0])) {
      if (n->op != Ops::LOAD) continue;
      auto split = lane_split(n->src[1], lane);
      if (!split || (split->second != 0 && split->second != 1)) return false;
      if (n->src.size() > 2) {
        auto valid = lane_split(n->src[2], lane);
        if (!valid || valid->second != 0) return false;
      }
    }
  }
  return true;
}

// Whether a kernel loads from the buffer it stores to (its outputs stored twice must be the same values: see
// lower_blocked's overlapping vectors).
bool reads_output(const Kernel& k) {
  const UOpPtr& written = k.ast->src[0]->src[0];
  return std::ranges::any_of(toposort(k.ast),
                             [&](const UOpPtr& n) { return n->op == Ops::LOAD && n->src[0] == written; });
}

// For each of a kernel's loops (its RANGE ids 0..loops - 1), whether some load in a reduction's loops does not depend
// on it: rows unrolled along that loop share that load.
std::vector<bool> loops_sharing_loads(const Kernel& k) {
  std::vector<bool> shared(k.loops.size(), false);
  for (const UOpPtr& r : toposort(k.ast)) {
    if (r->op != Ops::REDUCE) continue;
    for (const UOpPtr& n : toposort(r->src[0])) {
      if (n->op != Ops::LOAD) continue;
      std::vector<bool> uses(k.loops.size(), false);
      for (size_t i = 1; i < n->src.size(); i++)
        for (const UOpPtr& m : toposort(n->src[i]))
          if (m->op == Ops::RANGE && std::get<int64_t>(m->arg) < static_cast<int64_t>(uses.size()))
            uses[static_cast<size_t>(std::get<int64_t>(m->arg))] = true;
      for (size_t i = 0; i < uses.size(); i++)
        shared[i] = shared[i] || !uses[i];
    }
  }
  return shared;
}

// Whether a kernel stores its lanes apart (not one vector store).
bool lanes_stored_apart(const Kernel& k) {
  const UOp* lane = lane_node(k);
  for (const UOpPtr& st : k.ast->src)
    if (auto split = st->op == Ops::STORE ? lane_split(st->src[1], lane) : std::nullopt; !split || split->second != 1)
      return true;
  return false;
}

// The iterations of a kernel's longest reduction (its reduce loops' extents multiplied).
int64_t longest_reduction(const Kernel& k) {
  int64_t most = 0;
  for (const UOpPtr& n : toposort(k.ast)) {
    if (n->op != Ops::REDUCE) continue;
    int64_t len = 1;
    for (size_t i = 1; i < n->src.size(); i++)
      len *= n->src[i]->src[0]->const_i();
    most = std::max(most, len);
  }
  return most;
}

// Whether every reduction of a kernel is part of a block of AMX tiles (see TileBlock): its reductions
// over the same loops, together.
bool in_tiles(const Kernel& k) {
  const UOp* lane = lane_node(k);
  std::map<std::vector<UOpPtr>, std::vector<UOpPtr>> blocks;
  for (const UOpPtr& n : toposort(k.ast))
    if (n->op == Ops::REDUCE) blocks[std::vector<UOpPtr>(n->src.begin() + 1, n->src.end())].push_back(n);
  for (const auto& [loops, reduces] : blocks)
    if (!tile_block(reduces, lane)) return false;
  return !blocks.empty();
}

} // namespace

const UOp* range_node(const Kernel& k, int64_t id) {
  if (id < 0) return nullptr;
  for (const UOpPtr& n : toposort(k.ast))
    if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) == id) return n.get();
  return nullptr;
}

const UOp* lane_node(const Kernel& k) { return range_node(k, k.lane_range); }

std::optional<std::pair<UOpPtr, int64_t>> lane_split(const UOpPtr& idx, const UOp* lane) {
  std::unordered_map<const UOp*, bool> memo;
  std::function<bool(const UOpPtr&)> uses = [&](const UOpPtr& n) {
    if (n.get() == lane) return true;
    if (auto it = memo.find(n.get()); it != memo.end()) return it->second;
    bool u = false;
    for (const UOpPtr& s : n->src)
      u = u || uses(s);
    return memo[n.get()] = u;
  };
  if (!uses(idx)) return std::pair{idx, int64_t{0}};
  std::vector<UOpPtr> terms, stack{idx};
  while (!stack.empty()) {
    UOpPtr t = stack.back();
    stack.pop_back();
    if (t->op == Ops::ADD && t->dtype == kIndex)
      stack.insert(stack.end(), t->src.begin(), t->src.end());
    else
      terms.push_back(t);
  }
  UOpPtr base;
  int64_t stride = 0;
  for (const UOpPtr& t : terms) {
    if (t.get() == lane)
      stride += 1;
    else if (t->op == Ops::MUL && t->src[0].get() == lane && t->src[1]->is_const())
      stride += t->src[1]->const_i();
    else if (t->op == Ops::MUL && t->src[1].get() == lane && t->src[0]->is_const())
      stride += t->src[0]->const_i();
    else if (uses(t))
      return std::nullopt;
    else
      base = base ? base + t : t;
  }
  return std::pair{base ? base : idx_const(0), stride};
}

std::optional<PairDot> pair_dot(const UOpPtr& r, const UOp* lane) {
  if (!lane || r->op != Ops::REDUCE || r->reduce_arg().op != Ops::ADD || r->dtype != DType::Float32 ||
      r->src.size() < 2 || r->src[0]->op != Ops::MUL)
    return std::nullopt;
  const UOpPtr& pair = r->src.back();
  if (pair.get() == lane || !pair->src[0]->is_const() || pair->src[0]->const_i() != 2) return std::nullopt;
  auto load_of = [](const UOpPtr& c) -> UOpPtr {
    if (c->op != Ops::CAST || c->dtype != DType::Float32) return nullptr;
    const UOpPtr& l = c->src[0];
    return l->op == Ops::LOAD && l->dtype == DType::BFloat16 && l->src.size() == 2 ? l : nullptr;
  };
  UOpPtr x = load_of(r->src[0]->src[0]), y = load_of(r->src[0]->src[1]);
  if (!x || !y) return std::nullopt;
  // (stride along the lanes, stride along the pair)
  auto strides = [&](const UOpPtr& l) -> std::pair<int64_t, int64_t> {
    auto by_lane = lane_split(l->src[1], lane);
    auto by_pair = by_lane ? lane_split(by_lane->first, pair.get()) : std::nullopt;
    return by_pair ? std::pair{by_lane->second, by_pair->second} : std::pair{int64_t{-1}, int64_t{-1}};
  };
  if (strides(x) != std::pair<int64_t, int64_t>{0, 1}) std::swap(x, y);
  if (strides(x) != std::pair<int64_t, int64_t>{0, 1}) return std::nullopt;
  auto [lane_stride, pair_stride] = strides(y);
  if (lane_stride == 2 && pair_stride == 1) return PairDot{pair, x, y};
  if (lane_stride == 1 && pair_stride >= 2) return PairDot{pair, x, y, pair_stride};
  return std::nullopt;
}

bool wide_vectors() { return wide_vector_registers(); }

namespace {

// idx as a constant plus other terms (a sum flattened; the terms by identity, in a fixed order).
std::pair<std::vector<const UOp*>, int64_t> split_constant(const UOpPtr& idx) {
  std::vector<const UOp*> terms;
  int64_t c = 0;
  std::vector<UOpPtr> stack{idx};
  while (!stack.empty()) {
    UOpPtr t = stack.back();
    stack.pop_back();
    if (t->op == Ops::ADD && t->dtype == kIndex)
      stack.insert(stack.end(), t->src.begin(), t->src.end());
    else if (t->is_const())
      c += t->const_i();
    else
      terms.push_back(t.get());
  }
  std::sort(terms.begin(), terms.end());
  return {terms, c};
}

// Whether a kernel whose lanes are stored apart stores its rows next to one another: every store the same terms
// plus a constant, the constants in runs of 8 or more (the rows' loop walks the output with stride 1: a linear
// layer's x @ w.t() of few rows, its lanes x's rows and its rows w's). A block then writes each lane's rows as one
// run, not a cache line a lane and row.
bool rows_stored_together(const Kernel& k) {
  const UOp* lane = lane_node(k);
  std::vector<const UOp*> terms;
  std::set<int64_t> at;
  for (const UOpPtr& st : k.ast->src) {
    auto split = st->op == Ops::STORE ? lane_split(st->src[1], lane) : std::nullopt;
    if (!split) return false;
    auto [t, c] = split_constant(split->first);
    if (!at.empty() && t != terms) return false;
    terms = t;
    at.insert(c);
  }
  int64_t ends = 0; // constants without a successor: a run's last row
  for (int64_t c : at)
    ends += !at.count(c + 1);
  return ends > 0 && static_cast<int64_t>(at.size()) >= 8 * ends;
}

} // namespace

std::optional<TileBlock> tile_block(const std::vector<UOpPtr>& reduces, const UOp* lane) {
  if (reduces.empty() || reduces[0]->src.size() < 3) return std::nullopt;
  TileBlock t;
  // the innermost loop before the pair; the loops' order is the reductions' own (see render_c)
  t.loop = reduces[0]->src[reduces[0]->src.size() - 2];
  if (t.loop.get() == lane || t.loop->src[0]->const_i() < 16) return std::nullopt;
  // each reduction's x and y word indices at pair 0 (y's at lane 0), as the same terms plus a constant
  std::vector<std::pair<UOpPtr, UOpPtr>> words;
  std::vector<std::pair<int64_t, int64_t>> offsets;
  std::vector<const UOp*> x_terms, y_terms;
  for (const UOpPtr& r : reduces) {
    auto p = pair_dot(r, lane);
    if (!p || !std::equal(r->src.begin() + 1, r->src.end(), reduces[0]->src.begin() + 1, reduces[0]->src.end()))
      return std::nullopt;
    if (!t.x) t.x = p->x, t.y = p->y, t.y_rows = p->y_rows;
    if (p->x->src[0] != t.x->src[0] || p->y->src[0] != t.y->src[0] || p->y_rows != t.y_rows) return std::nullopt;
    auto at_pair0 = [&](const UOpPtr& idx) {
      return graph_rewrite(substitute(idx, [&](const UOpPtr& n) { return n == p->pair ? idx_const(0) : nullptr; }),
                           symbolic);
    };
    UOpPtr xi = at_pair0(p->x->src[1]), yi = at_pair0(lane_split(p->y->src[1], lane)->first);
    // x: 32 contiguous bfloat16 values a step (an A tile row); y: a step's 16 pairs y_step apart
    auto x_step = lane_split(xi, t.loop.get()), y_step = lane_split(yi, t.loop.get());
    if (!x_step || x_step->second != 2 || !y_step || y_step->second <= 0) return std::nullopt;
    if (t.y_step && y_step->second != t.y_step) return std::nullopt;
    t.y_step = y_step->second;
    auto [xt, xc] = split_constant(xi);
    auto [yt, yc] = split_constant(yi);
    if (words.empty()) x_terms = xt, y_terms = yt;
    if (xt != x_terms || yt != y_terms) return std::nullopt;
    words.emplace_back(xi, yi);
    offsets.emplace_back(xc, yc);
  }
  // rows in order, evenly apart; vectors in order of first use
  std::vector<int64_t> x_off, y_off;
  for (auto [xc, yc] : offsets) {
    if (std::find(x_off.begin(), x_off.end(), xc) == x_off.end()) x_off.push_back(xc);
    if (std::find(y_off.begin(), y_off.end(), yc) == y_off.end()) y_off.push_back(yc);
  }
  std::sort(x_off.begin(), x_off.end());
  int64_t rows = static_cast<int64_t>(x_off.size()), cols = static_cast<int64_t>(y_off.size());
  // y in place: whole steps, and one vector or two adjacent (see TileBlock)
  if (t.y_rows && (t.loop->src[0]->const_i() % 16 != 0 || cols > 2 || (cols == 2 && y_off[1] != y_off[0] + kLanes)))
    return std::nullopt;
  t.row_stride = rows > 1 ? x_off[1] - x_off[0] : 0;
  for (int64_t i = 1; i < rows; i++)
    if (x_off[i] - x_off[i - 1] != t.row_stride) return std::nullopt;
  // every row times every vector once; tiles: a C tile per (16 rows, vector), an A per 16 rows, a B per
  // vector, eight at most
  int64_t groups = (rows + 15) / 16;
  if (static_cast<int64_t>(reduces.size()) != rows * cols || groups * cols + groups + cols > 8) return std::nullopt;
  t.rows.resize(x_off.size());
  t.cols.resize(y_off.size());
  std::vector<std::vector<char>> seen(x_off.size(), std::vector<char>(y_off.size(), 0));
  for (size_t i = 0; i < reduces.size(); i++) {
    size_t r = std::find(x_off.begin(), x_off.end(), offsets[i].first) - x_off.begin();
    size_t c = std::find(y_off.begin(), y_off.end(), offsets[i].second) - y_off.begin();
    if (seen[r][c]++) return std::nullopt;
    t.rows[r] = words[i].first;
    t.cols[c] = words[i].second;
    t.at.emplace_back(r, c);
  }
  return t;
}

namespace {

// The target-neutral start of lowering: views pushed to the leaves, output dims coalesced into loops.
struct LoopPlan {
  UOpPtr value;
  std::vector<std::vector<size_t>> groups; // the value's dims each loop walks, outermost first
  Shape loops;                             // their extents (at least one loop)
};

LoopPlan plan_loops(const View& out_region, const UOpPtr& value_in) {
  if (value_in->shape != out_region.shape) throw std::logic_error("lower_kernel: value shape differs from region");
  UOpPtr value = graph_rewrite(value_in, push_views);

  // Coalesce loops over every access: the output region and each view that reads a leaf at the
  // kernel's rank (inside reductions too: reduced axes have size 1 in the kernel and never merge).
  std::vector<const View*> accesses{&out_region};
  std::vector<UOpPtr> stack{value};
  std::unordered_map<const UOp*, bool> seen;
  bool opaque = false; // a read whose layout is unknown here: keep every dim
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (seen[n.get()]) continue;
    seen[n.get()] = true;
    if (n->op == Ops::VIEW) {
      accesses.push_back(&n->st().views.back());
      // a reduction reshaped to the kernel's rank reads at its own: its reads' layout is unknown here
      opaque = opaque || (n->src[0]->op == Ops::REDUCE && n->src[0]->shape.size() != value->shape.size());
    } else if (n->op == Ops::BUFFER || n->op == Ops::IOTA)
      opaque = opaque || n->shape != value->shape;
    else if (n->op == Ops::GATHER)
      stack.push_back(n->src[1]); // the data is read at computed places
    else
      for (const UOpPtr& s : n->src)
        stack.push_back(s);
  }
  std::vector<std::vector<size_t>> groups;
  if (opaque)
    for (size_t d = 0; d < value->shape.size(); d++)
      groups.push_back({d});
  else
    groups = coalesce(value->shape, accesses);
  Shape loops;
  for (const auto& g : groups) {
    int64_t n = 1;
    for (size_t d : g)
      n *= value->shape[d];
    loops.push_back(n);
  }
  if (loops.empty()) loops.push_back(1);
  return {value, groups, loops};
}

Kernel lower_kernel_gpu(const BufferRef& out, const View& out_region, const LoopPlan& plan, const Target& target,
                        int64_t lanes = 0);

// An unmasked view whose dims `groups` walk together (each group's dims one run of memory, as coalesce found them)
// as a view of one dim per group, of extents `loops`; nothing where it has a mask.
std::optional<View> merged(const View& v, const std::vector<std::vector<size_t>>& groups, const Shape& loops) {
  if (v.mask) return std::nullopt;
  View m{loops, Shape(loops.size(), 0), v.offset, std::nullopt};
  for (size_t g = 0; g < groups.size(); g++) {
    for (size_t i = 1; i < groups[g].size(); i++)
      if (v.strides[groups[g][i - 1]] != v.strides[groups[g][i]] * v.shape[groups[g][i]]) return std::nullopt;
    m.strides[g] = v.strides[groups[g].back()];
  }
  return m;
}

// A layout copy whose output is contiguous along its innermost loop and whose read is contiguous along another
// loop (a convolution's padded channels-last input read from NCHW: the channels innermost in the copy, the columns
// in the read): lanes along the read's contiguous loop, 8 outputs of the innermost loop a block, so that each
// block is 8 vector loads (masked where lanes fall on padding) whose 8 x 16 values go out as 16 rows of 8
// contiguous elements (tiny_store_rows in compiler/render_c.cpp), not an element at a time read 400 bytes apart.
// Float32 and bfloat16 values on AVX-512 (the masked loads); a value computed elementwise too (a ReLU's, copied for
// a convolution, see copied_window) where every load reads the lanes contiguously or alike. The demo's (128, 32, 14,
// 14) bfloat16 input into (128, 16, 16, 32), one thread, C harness: 0.59 -> 0.12 ms; in float32 0.34 -> 0.13. A
// copy larger than the L3 (the demo's 28 x 28 float32, 27 MB moved) runs at memory speed either way. The kernel is
// kept only where its loads and stores came out so (a masked view of a computed value clamps its index: no lanes).
// The block may span the innermost two loops (a bfloat16 weight gradient's paired grad_output panel, 4 channels x an
// image pair: 0.43-0.83 -> 0.18 ms at the demo's bfloat16 shapes, two threads), and a lane loop that does not divide
// into vectors ends on one overlapping the vector before (NCHW -> channels-last of (128, 64, 14, 14) float32: 196
// positions, 0.68 -> 0.10 ms). Each load prefetches what it loads one outer iteration on (Kernel::prefetch_next):
// read cold, a block's 8 rows hundreds of bytes apart defeat the hardware prefetchers (the bfloat16 backward's
// padded 64-channel grad_output copy, its source evicted by the step before: 0.68 -> 0.19 ms; C harness, one
// thread: 760-950 -> 260-300 us cold, warm unchanged). A bfloat16 load whose lanes are 2 elements apart (a pair's
// half: the panels of a bfloat16 x @ w.t()'s w, each lane a pair of columns) is one masked load as well (render_c):
// the 1024² panel copy 0.35 -> 0.07 ms, element by element before. A lane loop of 8 to 15 (a 3 x 3 convolution
// weight's taps, read contiguously by its panel copy) takes the lanes masked: the value and the output region padded
// to 16, the loads masked and the stores' rows past the loop skipped (tiny_store_rows' rows mask): ResNet-18's layer4
// panel (512 x 512 x 3 x 3), one thread, 2.7 -> 0.9 ms; shorter rows (4 to 7 positions) ran slower so and keep their
// loops. Lanes that walk memory backwards (the flipped taps of the input gradient's panel) are one load, its lanes
// reversed (render_c): 1.8 -> 1.1 ms.
int64_t lane_stride(const ShapeTracker& st, size_t d, int64_t panel); // (below)

std::optional<Kernel> lower_transposed_copy(const BufferRef& out, const View& out_region, const LoopPlan& plan) {
  const UOpPtr& value = plan.value;
  const Shape& loops = plan.loops;
  const DType dt = value->dtype;
  if (!wide_vector_registers() || loops.size() < 2 || (dt != DType::Float32 && dt != DType::BFloat16) ||
      out_region.mask)
    return std::nullopt;
  // the block: 8 outputs contiguous in the innermost loop, or in the innermost two (a bfloat16 weight gradient's
  // paired grad_output panel: 4 channels x an image pair)
  const size_t last = loops.size() - 1;
  auto out_stride = [&](size_t g) { return out_region.strides[plan.groups[g].back()]; };
  if (out_stride(last) != 1) return std::nullopt;
  Shape up(loops.size(), 1);
  // (a loop longer than 8 that does not divide into blocks of 8 ends on a block overlapping the one before, see
  // lower_blocked, where the read walks it 4 KiB or more a step: the keys of a ViT's attention, 65 of them, copied
  // keys-innermost from its packed projection, rows 48 KiB apart, one thread, 280-286 -> 132-154 us; sdpa's keys from
  // (128, 65, 32), rows 128 bytes apart, ran slower so, 96-104 -> 124-130, and stay element by element in float32,
  // which clang gathers; in bfloat16, 2-byte elements it cannot gather, blocks: 66-75 -> 26-36 us on two threads)
  bool far_rows = false;
  for (const UOpPtr& m : toposort(value))
    if (m->op == Ops::VIEW && m->src[0]->op == Ops::BUFFER && m->shape == value->shape)
      if (int64_t st = lane_stride(m->st(), plan.groups[last].back(), kLanes); st != -1)
        far_rows = far_rows || std::llabs(st) * static_cast<int64_t>(itemsize(m->dtype)) >= 4096;
  const bool rows_overlap = loops[last] % 8 != 0 && loops[last] > 8 && (far_rows || dt == DType::BFloat16);
  if (loops[last] % 8 == 0 || rows_overlap) {
    up[last] = 8;
  } else if (8 % loops[last] == 0 && loops[last - 1] % (8 / loops[last]) == 0 && out_stride(last - 1) == loops[last]) {
    up[last] = loops[last];
    up[last - 1] = 8 / loops[last];
  } else {
    return std::nullopt;
  }
  for (size_t h = up[last - 1] > 1 ? last - 1 : last; h-- > 0;) {
    // the outermost loop is the threads': lanes there must leave it 8 iterations, whole vectors (a loop that does
    // not divide into them ends on a vector overlapping the one before, see lower_blocked: not the threads' loop)
    const bool overlaps = loops[h] % kLanes != 0 && loops[h] > kLanes, short_lanes = loops[h] < kLanes;
    if (((overlaps || short_lanes) && h == 0) || (h == 0 && loops[h] / kLanes < 8)) continue;
    // A lane loop shorter than the lanes (a 3 x 3 convolution weight's 9 taps: its panel copy) runs on a value and an
    // output region padded to the lanes, the lanes past the loop masked off in its loads and stores.
    // (A loop of several dims, the weight's 3 x 3 taps, is one dim of the value and region reshaped to the loops.)
    UOpPtr v = value;
    View region = out_region;
    Shape lane_loops = loops;
    std::vector<std::vector<size_t>> groups = plan.groups;
    if (short_lanes) {
      if (loops[h] < 8 || value->op != Ops::VIEW || value->st().views.size() != 1) continue;
      std::optional<View> read = merged(value->st().views[0], plan.groups, loops),
                          written = merged(out_region, plan.groups, loops);
      if (!read || !written) continue;
      std::vector<std::pair<int64_t, int64_t>> pads(loops.size(), {0, 0});
      pads[h].second = kLanes - loops[h];
      v = view(value->src[0], ShapeTracker{{*read}}.pad(pads));
      region = *written;
      region.mask.emplace();
      for (size_t i = 0; i < region.shape.size(); i++)
        region.mask->emplace_back(0, region.shape[i]);
      region.shape[h] = kLanes;
      lane_loops[h] = kLanes;
      for (size_t g = 0; g < groups.size(); g++)
        groups[g] = {g};
    }
    Kernel k = lower_blocked(out, region, v, groups, lane_loops, up, static_cast<int64_t>(h), {}, {-1, 1}, short_lanes);
    const UOp* lane = lane_node(k);
    // every load reads its lanes contiguously (one is enough; the others may be the same for all lanes), a
    // float32 or bfloat16 vector; every store is a row apart
    bool transposes = lane != nullptr, contiguous = false;
    for (const UOpPtr& n : toposort(k.ast)) {
      if (!transposes) break;
      if (n->op == Ops::LOAD) {
        // (bfloat16 lanes 2 elements apart, a pair's halves, are one masked load too: see render_c)
        auto split = lane_split(n->src[1], lane);
        const bool bf16_pairs = n->dtype == DType::BFloat16 && split && split->second == 2;
        // (and lanes walking memory backwards, a flipped kernel's taps: one load, its lanes reversed)
        const bool whole = split && (split->second == 1 || split->second == -1) &&
                           (n->dtype == DType::Float32 || n->dtype == DType::BFloat16);
        transposes = split && (split->second == 0 || bf16_pairs || whole);
        contiguous = contiguous || whole || bf16_pairs;
      } else if (n->op == Ops::STORE) {
        auto split = lane_split(n->src[1], lane);
        transposes = n->src.size() == (short_lanes ? 4u : 3u) && split && split->second >= 8;
      }
    }
    // outputs stored twice must be the same values: nothing the kernel writes may be read
    if (transposes && contiguous && !((overlaps || rows_overlap) && reads_output(k))) {
      k.prefetch_next = true;
      return k;
    }
  }
  return std::nullopt;
}

// The phases c (2 to 4) an elementwise kernel's innermost loop splits into when its index math divides that loop by
// c (a non-overlapping 2x2 max pool's gradient reads its index and gradient at position / 2 and compares with
// position % 2): unrolled by c, each iteration stores c adjacent outputs from reads contiguous along the loop, with
// no division left, and vectorizes (see inner_loop_pragma in compiler/render_c.cpp) where 8 or more iterations are
// left. 1: none (no division, several divisors, or a loop that would keep a single iteration). The 2x2 pool gradient
// of 14 x 14 planes (rows of 7 pairs, not vectorized), 128 x 64 planes, one thread: on a Zen 3 with clang-14 4.0 ms
// split or not; on a Zen 4 with clang-19, which keeps the divided loop rolled, 0.91 -> 0.54 ms.
int64_t phase_split(const Kernel& k) {
  if (k.loops.size() < 2 || k.lane_range >= 0 || k.tiles) return 1;
  const int64_t inner = static_cast<int64_t>(k.loops.size()) - 1, n = k.loops.back();
  int64_t c = 1;
  for (const UOpPtr& d : toposort(k.ast)) {
    if ((d->op != Ops::IDIV && d->op != Ops::MOD) || d->src[0]->op != Ops::RANGE ||
        std::get<int64_t>(d->src[0]->arg) != inner)
      continue;
    if (!d->src[1]->is_const()) return 1;
    const int64_t by = d->src[1]->const_i();
    if (by < 2 || by > 4 || n % by != 0 || n / by < 2 || (c > 1 && by != c)) return 1;
    c = by;
  }
  return c;
}

} // namespace

namespace {

// unmerged: each dim its own loop, and only a kernel with vector lanes over one of them, else none (see below).
std::optional<Kernel> lower_kernel_at(const BufferRef& out, const View& out_region, const UOpPtr& value_in,
                                      const Target& target, bool unmerged = false, bool odd_lanes = false) {
  LoopPlan plan = plan_loops(out_region, value_in);
  if (target.gpu()) return lower_kernel_gpu(out, out_region, plan, target);
  if (unmerged) { // a loop for each dim of more than one element (dims of one join the loop before, or the first)
    plan.groups.clear();
    plan.loops.clear();
    for (size_t d = 0; d < plan.value->shape.size(); d++) {
      if (plan.groups.empty() || (plan.value->shape[d] > 1 && plan.loops.back() > 1)) {
        plan.groups.push_back({});
        plan.loops.push_back(1);
      }
      plan.groups.back().push_back(d);
      plan.loops.back() *= plan.value->shape[d];
    }
  }
  const UOpPtr& value = plan.value;
  const auto& groups = plan.groups;
  const Shape& loops = plan.loops;

  // Upcast: in kernels that reduce, output loops are unrolled into a block of outputs computed
  // together, so each value loaded in the reduce loop is reused across the block and the
  // accumulators live in registers (a register-blocked matmul). Three block shapes, first that fits:
  // - lanes: one output loop along which every read in the reduce loops is contiguous or broadcast
  //   becomes vector lanes (16 outputs, up to 2 vectors), another loop unrolls up to 8 rows: x @ w
  //   with w row-major is a block of 8 x 32 outputs, 16 vector accumulators;
  // - when every read walks the reduced axis contiguously (a row times a column stored as a row, as
  //   in x @ w.t()), a 4 x 4 block whose reduce loop vectorizes along that axis;
  // - otherwise a 4 x 16 block that the C compiler may vectorize across the block's accumulators.
  bool has_reduce = false, contiguous_reduce = true, bitcast = false;
  for (const UOpPtr& n : toposort(value)) {
    bitcast = bitcast || n->op == Ops::BITCAST;
    if (n->op != Ops::REDUCE) continue;
    has_reduce = true;
    contiguous_reduce = contiguous_reduce && reads_innermost_reduced_contiguously(n);
  }
  // A row kernel: every reduction is read broadcast along the innermost loop (softmax's max and sum,
  // layer norm's statistics, each read by every element of its row). One iteration of the outer loops
  // computes its rows' reductions once, each in its own loop, then the elementwise loop over the row
  // reads them: one pass over rows that stay in cache instead of a kernel (and a read from memory) per
  // reduction. A reduction that would be recomputed (a per-channel statistic under a batch loop) is
  // left to the blocked kernels below, which realize it.
  if (!unmerged && has_reduce && !bitcast && loops.size() >= 2 && reductions_broadcast_along(value, groups.back())) {
    // Short rows (128 elements or fewer: attention's softmax over 65 keys) one at a time wait on each step's
    // latency (a row's max, its exponentials' sum, the normalization, each horizontal): 4 rows a block (else 2)
    // interleave four such chains. sdpa's softmax of 8320 rows of 65, two threads: 193 -> 147 us (2 rows: 166).
    Shape row_up(loops.size(), 1);
    const size_t row_loop = loops.size() - 2;
    for (int64_t u : {4, 2})
      if (loops.back() <= 128 && loops[row_loop] % u == 0 && loops[row_loop] > u) {
        row_up[row_loop] = u;
        break;
      }
    Kernel k = lower_blocked(out, out_region, value, groups, loops, row_up, contiguous_reduce ? kReduceLanes : -1,
                             plan_row_scratch(out, value, groups.back()));
    if (k.must_realize.empty()) {
      k.vectorize_reduce = contiguous_reduce;
      return k;
    }
  }
  auto pick = [&](size_t g, std::initializer_list<int64_t> sizes) {
    for (int64_t u : sizes)
      if (loops[g] % u == 0 && loops[g] > u) return u;
    return int64_t{1};
  };
  // the outermost loop is split across threads: keep it long; an inner one may unroll whole
  // (outer_free: the lanes' loop takes the outermost place, and the threads, instead; see the loop order below)
  auto rows = [&](size_t g, std::initializer_list<int64_t> sizes, bool outer_free = false) {
    if (g == 0 && !outer_free) return loops[g] >= 64 ? pick(g, sizes) : int64_t{1};
    for (int64_t u : sizes)
      if (loops[g] % u == 0) return u;
    return int64_t{1};
  };
  // A bfloat16 matmul on a host with AMX tiles tries a block of 16 or 32 rows whose accumulators are tiles
  // (see TileBlock), kept when its reductions form one.
  bool try_tiles = false, float32_reads = true; // (the split of the lanes' loop below was measured on float32 only)
  for (const UOpPtr& n : toposort(value)) {
    try_tiles = try_tiles || (target.amx_bf16 && has_reduce && n->op == Ops::BUFFER && n->dtype == DType::BFloat16);
    float32_reads = float32_reads && (n->op != Ops::BUFFER || n->dtype == DType::Float32);
  }
  std::optional<Kernel> fallback; // a tile block of 16 rows by two vectors, when one vector does not form tiles
  if (has_reduce && !bitcast)
    for (size_t g = loops.size(); g-- > 0;)
      // tiles of 32 or 16 rows, then 16 rows by one vector (see below), then the register block
      for (auto [tile_rows, one_vector] : {std::pair{32, false}, {16, false}, {16, true}, {0, false}}) {
        const bool tiles = tile_rows > 0;
        // odd_lanes: only a loop that does not divide into vectors, longer than one, not the threads' (its last vector
        // overlaps the one before, see lower_blocked: two threads would store the same outputs) unless it is the only
        // loop (see below), in a kernel that stores its lanes together and reads nothing it writes, and of a sum of 64
        // terms or fewer (see short_contiguous_sum) unless it is the only loop
        const bool odd = loops[g] % kLanes != 0;
        if (odd != odd_lanes || (tiles && !try_tiles)) continue;
        if (odd && (tiles || (g == 0 && loops.size() > 1) || loops[g] < kLanes)) continue;
        Shape up(loops.size(), 1);
        // two vectors (with 32 registers) when the loop keeps two iterations (the outermost: enough to share
        // among threads)
        bool wide = wide_vector_registers();
        up[g] = wide && loops[g] % (2 * kLanes) == 0 && loops[g] / (2 * kLanes) >= (g > 0 ? 1 : 2) ? 2 : 1;
        if (one_vector) {
          if (up[g] == 1) continue; // the try before was this block
          up[g] = 1;
        }
        // tiles: the innermost loop that unrolls by 32 or 16 rows (16 only, the second try); the outermost too where
        // the lanes' loop can take its place (x @ w of 32 rows: its loop of 32 rows, see the register block below)
        for (size_t h = loops.size(); tiles && h-- > 0;)
          if (int64_t u = h == g ? 1 : rows(h, {tile_rows, 16}, h == 0 && loops[g] / (up[g] * kLanes) >= 8); u > 1) {
            up[h] = u;
            break;
          }
        if (tiles && prod(up) == up[g]) continue;
        // (tried again where the rows chosen share no load, see below)
        std::vector<bool> unshared(loops.size(), false); // row loops whose rows were found to share no load
        const Shape lanes_up = up;
        std::optional<Kernel> lowered;
        for (bool retry = true; retry;) {
          up = lanes_up;
          // rows: the innermost loop that unrolls by 4 or more (its loads share cache lines), else the one
          // that unrolls furthest; then, while that leaves at most 8 accumulators, a second one as far as
          // 24 (registers: 32 vectors). With half the registers (AVX2): one vector, up to 4 rows.
          for (int64_t budget : {wide ? 16 : 4, wide ? 24 : 4}) {
            if (tiles) break;
            size_t row = g;
            int64_t acc = prod(up), best = 1;
            for (size_t h = loops.size(); h-- > 0;) {
              if (h == g || up[h] > 1 || unshared[h]) continue;
              // a short outermost loop (x @ w of 32 rows) unrolls where the lanes' loop can take its place: each
              // row of w then read once a block of rows, not once a row (32 x 1024 by 1024 x 1024, one thread: 5.4 ms)
              const bool free = h == 0 && loops[g] / (up[g] * kLanes) >= 8;
              // 6 and 5 too: a ViT's 65 tokens took blocks of one row by two vectors, a scalar load and two vector
              // loads for two products (its step's kernels on one Sapphire Rapids thread: 202 -> 168 ms)
              // (odd lanes, one vector: as many rows as divide the loop up to 16, a ViT's 65 queries 13, whose
              // multiply-adds then hide their latency; 5 rows: the scores of (128, 65, 32) x (128, 32, 65), one thread,
              // 437 us, 13: 390)
              int64_t u = wide && odd ? rows(h, {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2}, free)
                          : wide      ? rows(h, {8, 7, 6, 5, 4, 3, 2}, free)
                                      : rows(h, {4, 3, 2}, free);
              if (u > best && acc * u <= budget && best < 4) row = h, best = u;
            }
            if (row == g || (wide && budget == 24 && acc > 8)) break;
            up[row] = best;
          }
          // Loop order: the lane loop runs outside the rows' loops, so that its operand's panel (a block of
          // columns of x @ w's w, reduce length x 32) stays in cache while every row block reads it; the
          // outermost loop keeps 8 iterations or more to share among threads.
          auto order_groups = groups;
          Shape order_loops = loops, order_up = up;
          size_t lane_at = g;
          for (size_t h = 0; h < g; h++)
            if (up[h] > 1 && (h > 0 || (!odd && loops[g] / (up[g] * kLanes) >= 8))) {
              order_groups.erase(order_groups.begin() + static_cast<std::ptrdiff_t>(g));
              order_groups.insert(order_groups.begin() + static_cast<std::ptrdiff_t>(h), groups[g]);
              for (Shape* v : {&order_loops, &order_up}) {
                int64_t x = (*v)[g];
                v->erase(v->begin() + static_cast<std::ptrdiff_t>(g));
                v->insert(v->begin() + static_cast<std::ptrdiff_t>(h), x);
              }
              lane_at = h;
              break;
            }
          // Tiles, the lanes outermost: their loop splits, the inner part innermost, so that the row blocks
          // between read the inner part's panels from L2: 8 panels (512 KiB at 1024³) while the outer keeps 4
          // iterations for the threads, else 8 outer iterations. 1024³ on one thread, a C loop nest in tiny's
          // form: 2.37 ms the lanes' loop whole, 1.65-1.75 ms 4 panels at a time, 1.54-1.60 8, 1.52-1.55 16,
          // 2.1 32 (1 MiB of panels and the rows' block: L2 misses).
          std::pair<int64_t, int64_t> split{-1, 1};
          int64_t lane_iters = order_loops[lane_at] / (order_up[lane_at] * kLanes);
          // The lanes outermost in one iteration (x @ w.t() of 16 rows, the lanes x's rows) would leave the threads
          // nothing to share: the next loop, of 2 or more, takes the outermost place (x @ w.t() of 16 x 1024 by
          // 1024 x 1024, float32: one thread's 256 us on two). So it does where a few iterations do not divide among
          // the threads (48, 80 or 112 rows: 3, 5 or 7 vectors, one thread's 2 against the other's 1 for 48) and the
          // next loop has two or more for each: x @ w.t() by 1024 x 1024, two threads, bfloat16 48 rows 122 -> 86 us,
          // 80 rows 317 -> 229, float32 48 rows 566 -> 442; 112 x 768 by 768 x 768 171 -> 150; of the models of
          // training_step.py only a ShuffleNet kernel changed (12.5 -> 8 us).
          const int64_t next = order_loops.size() > 1 ? order_loops[1] / order_up[1] : 0;
          const bool uneven =
              lane_iters % target.threads != 0 && lane_iters < 4 * target.threads && next >= 2 * target.threads;
          if (lane_at == 0 && ((lane_iters == 1 && next >= 2) || uneven)) {
            std::swap(order_groups[0], order_groups[1]);
            std::swap(order_loops[0], order_loops[1]);
            std::swap(order_up[0], order_up[1]);
            lane_at = 1;
          }
          if (tiles && lane_at == 0 && order_loops.size() > 1 && lane_iters % 8 == 0 && lane_iters >= 16)
            split = {0, lane_iters / 8 >= 4 ? 8 : lane_iters / 8};
          // Vector accumulators, the lanes outermost: the same split, as many panels (of 128 KiB at 1024³) as
          // leave the outer 8 iterations and two per thread of the target, so that a block of rows is read from L3
          // once per few panels, not once per panel. 1024³ float32 on one thread (C harness): 12.8 ms the
          // lanes' loop whole, 12.4 2 panels at a time, 12.2 4, 11.9 8, 14.4 16.
          const int64_t min_outer = std::max<int64_t>(8, 2 * target.threads);
          for (int64_t inner : {8, 4, 2})
            if (!tiles && wide && float32_reads && split.first < 0 && lane_at == 0 && order_loops.size() > 1 &&
                lane_iters % inner == 0 && lane_iters / inner >= min_outer)
              split = {0, inner};
          // A kernel of one loop with odd lanes (a column sum of (4096, 1000), scalar otherwise, each column a walk
          // through lines 4000 bytes apart: 28 ms on one thread, 1.2 with lanes): its vectors split into an outer loop,
          // the threads', and an inner one of the smallest divisor, so that the last two, which overlap, run on one
          // thread (a prime count of vectors: one outer iteration).
          if (odd && g == 0) {
            const int64_t blocks = (loops[0] + kLanes - 1) / kLanes;
            int64_t inner = blocks;
            for (int64_t i = 2; i <= blocks; i++)
              if (blocks % i == 0) {
                inner = i;
                break;
              }
            split = {0, inner};
          }
          lowered = lower_blocked(out, out_region, value, order_groups, order_loops, order_up,
                                  static_cast<int64_t>(lane_at), {}, split);
          // Rows along a loop that every load of the sums depends on (a batch: attention's key gradient over 8 images,
          // 16 vector loads and 8 broadcasts for 16 multiply-adds) are tried instead along a loop some load does not,
          // whose rows share that load: a ViT's key and query gradients (sequence-first, 65 tokens, rows along them),
          // one thread, 2.4 -> 0.85, 1.8 -> 0.55, 2.2 -> 0.9 ms; no kernel of the other models of training_step.py
          // changed.
          retry = false;
          if (!tiles) {
            std::vector<bool> shares = loops_sharing_loads(*lowered);
            auto at = [&](size_t h) {
              return static_cast<size_t>(std::ranges::find(order_groups, groups[h]) - order_groups.begin());
            };
            bool moved = false;
            for (size_t h = 0; h < loops.size() && !moved; h++)
              if (h != g && up[h] > 1 && !shares[at(h)])
                for (size_t o = 0; o < loops.size(); o++)
                  if (o != g && up[o] == 1 && shares[at(o)] && !unshared[o] && rows(o, {8, 7, 6, 5, 4, 3, 2}) > 1) {
                    unshared[h] = moved = true;
                    break;
                  }
            retry = moved;
          }
        }
        Kernel k = std::move(*lowered);
        // A block of 32 rows whose output strides along the lanes (a bfloat16 convolution's NCHW output, the
        // lanes its channels) writes 1024 cache lines per block, reused by the next block (the next pixel)
        // only if they stay in L1: 16 rows (512 lines) ran the 128 x 64 x 14 x 14 forward kernel in 2.34 ms
        // on one thread, 32 rows in 2.99. With a short reduction (under 2048 products an output) such stores
        // cost more than the sums, and 16 rows by one vector (256 lines, beside the filter panel and the input
        // rows) keep them in L1: the forward kernel 2.49 -> 1.36 ms on one thread, its input gradient's 2.38 ->
        // 1.37 (the C kernels, thread CPU time, the same bits); a weight gradient (thousands of products an
        // output) keeps two vectors (the demo's over its whole batch: 1.96 ms, 3.23 by one).
        if (tiles) {
          k.tiles = in_tiles(k);
          if (!k.tiles) continue;
          // (rows stored next to one another write whole lines: two vectors where a block of 16 rows by one vector
          // outgrows L1 too, a reduction of more than 512: the operands' 32 rows of it, 48 KiB at 768; bfloat16
          // linear of 32 x 1024 by 1024 x 1024, two threads: the product 162 -> 133 us; of 64 x 768 by 3072 x 768,
          // 0.41 -> 0.22 ms all told; of 32 x 512 by 2048 x 512, 67 -> 84 us)
          bool apart = lanes_stored_apart(k) && !(longest_reduction(k) > 512 && rows_stored_together(k));
          if (!apart || one_vector || (tile_rows == 16 && (up[g] == 1 || longest_reduction(k) >= 2048))) return k;
          if (tile_rows == 16) fallback = std::move(k);
          continue;
        }
        if (fallback) return *fallback; // the one-vector try did not form tiles
        if (lanes_pay(k) &&
            !(odd && (reads_output(k) || lanes_stored_apart(k) || (g > 0 && longest_reduction(k) > 64))))
          return k;
      }
  if (odd_lanes) return std::nullopt;
  // Loops are coalesced by the last views of the reads; a read through a copy laid out in panels (see panel_copy) walks
  // a merged loop only through divisions by the panel (a transposed convolution's weight gradient, its output channels
  // and taps one loop (4096 of them), the panel's lanes its channels: no lanes paid, 4 x 16 scalar accumulators). Each
  // dim its own loop, the lanes may take the panel's dim: (100, 256, 4, 4) from 32 images, one thread, 3.6 -> 0.5 ms.
  if (unmerged) return std::nullopt;
  if (has_reduce && !bitcast && std::ranges::any_of(groups, [](const auto& g) { return g.size() > 1; }))
    if (std::optional<Kernel> k = lower_kernel_at(out, out_region, value_in, target, true)) return k;
  // Lanes along a loop that does not divide into vectors, where no loop does (merged, then each dim a loop):
  // attention's scores over 65 keys, a column sum of (4096, 1000)
  if (has_reduce && !bitcast)
    for (bool each_dim : {false, true})
      if (std::optional<Kernel> k = lower_kernel_at(out, out_region, value_in, target, each_dim, true)) return k;
  if (!has_reduce)
    if (std::optional<Kernel> k = lower_transposed_copy(out, out_region, plan)) return *k;
  Shape up(loops.size(), 1);
  if (has_reduce && loops.size() >= 2) {
    size_t last = loops.size() - 1, second = loops.size() - 2;
    up[last] = contiguous_reduce ? pick(last, {4, 2}) : pick(last, {16, 8, 4});
    up[second] = rows(second, {4, 2});
    // Neither of the last two loops unrolls (a 3 x 3 window's taps: a first convolution's weight gradient, 24 x 3 x
    // 3 x 3 over 3-channel images): a block over the inner loops that do, up to 24 accumulators, so that the sums
    // are independent chains, not one chain of dependent adds an output. ShuffleNet's first weight gradient (16
    // images of 64 x 64, stride 2), one thread: 8.2 ms -> 1.9.
    if (prod(up) == 1) {
      // the two inner loops (not the threads') that unroll furthest, as far as 24 accumulators together
      std::vector<std::pair<int64_t, size_t>> by_unroll;
      for (size_t h = 1; h < loops.size(); h++)
        if (int64_t u = rows(h, {8, 6, 4, 3, 2}); u > 1) by_unroll.emplace_back(u, h);
      std::ranges::stable_sort(by_unroll, std::greater<>{}, [](const auto& p) { return p.first; });
      for (const auto& [u, h] : by_unroll)
        if (prod(up) * u <= 24 && std::ranges::count_if(up, [](int64_t x) { return x > 1; }) < 2) up[h] = u;
    }
  }
  // A 2- or 4-byte layout copy runs its loops outside its innermost ones (those that write a cache line together) in
  // the read's order, the largest read stride outermost, so that the lines it reads stay in L1 while it walks them:
  // the bfloat16 panels of x @ w with w row-major (each panel reads 32 columns of every pair of rows) read whole rows
  // (1024², one thread: 0.24 ms -> 0.14; the panels outermost read 64 bytes of each 2 KiB row); a bfloat16 weight
  // gradient's paired grad_output panel ([chunk][channel block][position][image pair][channel][pair] from NCHW) walks
  // the positions inside the image pairs (C harness, one thread: 0.99 -> 0.59 ms; the positions outside touched 64 KiB
  // of rows between two reads of a line). Float32 panels alike (session 49, two threads): the 1024² panel of a.t() @
  // b's a (see row_panel_copy) 270-345 -> 151-161 us, b's 186-188 -> 168-186; ResNet-18's 13 copies whose order
  // this changed (its step's, best of each) 758 -> 549 us in all, the DCGAN's 97 -> 58.
  auto order_groups = groups;
  Shape order_loops = loops;
  const auto item = static_cast<int64_t>(itemsize(value->dtype));
  if (!has_reduce && loops.size() >= 3 && (item == 2 || item == 4) && value->op == Ops::VIEW &&
      value->src[0]->op == Ops::BUFFER && value->st().views.size() == 1 && !value->st().views[0].mask &&
      !out_region.mask) {
    auto stride = [&](const View& v, size_t g) { return v.strides[groups[g].back()]; };
    const View& read = value->st().views[0];
    // the innermost loops, in the output's order, that write a cache line (64 bytes) or more together
    size_t run = loops.size() - 1;
    for (int64_t written = loops[run]; run > 0 && written * item < 64; written *= loops[run])
      run--;
    std::vector<size_t> order(loops.size());
    for (size_t g = 0; g < order.size(); g++)
      order[g] = g;
    std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(run),
                     [&](size_t a, size_t b) { return std::abs(stride(read, a)) > std::abs(stride(read, b)); });
    for (size_t g = 0; g < order.size(); g++) {
      order_groups[g] = groups[order[g]];
      order_loops[g] = loops[order[g]];
    }
  }
  // (the renderer has no BITCAST over lanes: a bool view's reduction keeps a scalar loop)
  Kernel k = lower_blocked(out, out_region, value, order_groups, order_loops, up,
                           contiguous_reduce && !bitcast ? kReduceLanes : -1);
  k.vectorize_reduce = has_reduce && contiguous_reduce;
  if (int64_t phases = has_reduce ? 1 : phase_split(k); phases > 1) {
    up.back() = phases;
    Kernel split = lower_blocked(out, out_region, value, order_groups, order_loops, up, -1);
    if (phase_split(split) == 1) return split;
  }
  return k;
}

} // namespace

// A storage holds its value flat, and a value that views another through a view that cannot merge with a
// reshape (a permuted tensor made contiguous: x.t().contiguous(), F.pad(x).permute(0, 2, 3, 1).contiguous())
// reads VIEW(x, [that view, a flat reshape]). Lowered at the rank of the view under the reshape, the kernel's
// loops walk the tensor's dims, each read with a stride, instead of one flat loop that divides its index by
// every dim (two threads: the padded channels-last bfloat16 copy of (128, 32, 14, 14), F.pad(x, (1, 1, 1, 1))
// .permute(0, 2, 3, 1).contiguous(), 1.0 ms -> 0.54 as a loop nest, 0.29 as a transposed copy, see
// lower_transposed_copy; x.t().contiguous() of 1024^2 floats 2.0 -> 0.17 ms, where the loop nest alone gained
// nothing).
namespace {

Kernel lower_kernel_shaped(const BufferRef& out, const View& out_region, const UOpPtr& value, const Target& target) {
  // Both forms below write a region contiguous but for its offset, lowered at another shape of the same elements.
  View flat = out_region;
  flat.offset = 0;
  const bool contiguous_out = !out_region.mask && flat.is_contiguous();
  auto at_shape = [&](const UOpPtr& v) {
    View region = View::contiguous(v->shape);
    region.offset = out_region.offset;
    return *lower_kernel_at(out, region, v, target);
  };
  // A value whose last view reshapes the one below it (all of its elements: a contiguous view of fewer, the first
  // elements of the flattened view below, is a shrink, and lowering the view below wrote past the end of `out`:
  // `t[0].clone()` of a permuted (6, 2, 2, 3) tensor wrote 72 elements into 12; fuzzer seed 44392)
  auto reshapes_below = [](const ShapeTracker& st) {
    const auto& vs = st.views;
    return vs.size() >= 2 && vs.back().is_contiguous() && prod(vs.back().shape) == prod(vs[vs.size() - 2].shape);
  };
  if (contiguous_out && value->op == Ops::VIEW && reshapes_below(value->st())) {
    ShapeTracker st = value->st();
    st.views.pop_back();
    return at_shape(view(value->src[0], std::move(st)));
  }
  // A flat value over a reduction read through a reshape (a linear layer's result kept flat, plus a residual read in
  // another order; or the result permuted, then flattened: the tokens of a ViT's MLP batch-first, its output
  // sequence-first) is lowered at the shape the reshape flattens: its output dims become loops of their own, rows to
  // unroll beside the lanes, instead of one flat loop whose block is a row of vectors with as many accumulators. The
  // MLP's second layer of a ViT block with its residual, 2080 x 512 @ 512 x 128, one thread: 5.2 ms -> 2.6. So is a
  // value of more dims whose loops all merge into one (sdpa's query gradient, (128, 65, 32) written as (32, 4, 65, 32)
  // and scaled: one row of two vectors a block, 556 us on one thread; at (128, 65, 32), blocks of 5 rows, 280 us).
  if (contiguous_out && (value->shape.size() == 1 || plan_loops(out_region, value).loops.size() == 1))
    for (const UOpPtr& n : toposort(value)) {
      if (n->op != Ops::VIEW || n->src[0]->op != Ops::REDUCE) continue;
      const auto& vs = n->st().views;
      Shape lifted = is_reshape(n)                                 ? n->src[0]->shape
                     : vs.size() >= 2 && vs.back().is_contiguous() ? vs[vs.size() - 2].shape
                                                                   : Shape{};
      if (lifted.size() >= 2 && prod(lifted) == prod(value->shape)) return at_shape(reshape(value, lifted));
    }
  return *lower_kernel_at(out, out_region, value, target);
}

} // namespace

Kernel lower_kernel(const BufferRef& out, const View& out_region, const UOpPtr& value, const Target& target) {
  Kernel k = lower_kernel_shaped(out, out_region, value, target);
  int64_t terms = 1;
  for (const UOpPtr& n : toposort(value))
    if (n->op == Ops::REDUCE) terms = std::max(terms, prod(n->src[0]->shape) / std::max<int64_t>(1, prod(n->shape)));
  k.launch.work = prod(out_region.shape) * terms;
  return k;
}

namespace {

// The width of a lane panel (see panel_copy): the lanes a kernel blocks together on the target, two
// vectors where registers allow (see lower_kernel), one on AVX2; the GPU lowering reads 32-lane panels.
int64_t panel_lanes(const Target& target) { return target.gpu() || wide_vector_registers() ? 2 * kLanes : kLanes; }

// A read without its broadcast dims: what a copy of it holds.
UOpPtr unbroadcast(const UOpPtr& m) {
  const View& v = m->st().views.back();
  std::vector<std::pair<int64_t, int64_t>> keep;
  for (size_t e = 0; e < v.shape.size(); e++)
    keep.push_back({0, v.strides[e] == 0 ? 1 : v.shape[e]});
  return shrink(m, keep);
}

// x read from a contiguous copy laid out in the dim order `order` (outermost first); x itself where its buffer holds
// it so already (sdpa's value, (128, 65, 32), in panels of its 32 features: a copy of 0.5 MB that changed nothing).
UOpPtr copied_in_order(const UOpPtr& x, const std::vector<int64_t>& order) {
  std::vector<int64_t> back(order.size());
  for (size_t i = 0; i < order.size(); i++)
    back[order[i]] = static_cast<int64_t>(i);
  UOpPtr laid = permute(x, order);
  if (laid->op == Ops::VIEW && laid->src[0]->op == Ops::BUFFER && laid->st().views.size() == 1) {
    View v = laid->st().views[0];
    v.offset = 0;
    if (v.is_contiguous()) return x;
  }
  return permute(contiguous(laid), back);
}

// How far apart adjacent lanes along dim d of a read through st are, as lowering will index them
// (0: the same place; -1: not evenly, or valid for some lanes only). The lanes start at multiples of
// a panel (see panel_copy) when d allows it, as the lane blocks of a kernel do.
int64_t lane_stride(const ShapeTracker& st, size_t d, int64_t panel) {
  const Shape shape = st.shape();
  int64_t step = shape[d] % panel == 0 ? panel : kLanes;
  if (shape[d] < kLanes) return -1;
  std::vector<UOpPtr> idx;
  UOpPtr lane = UOp::make(Ops::RANGE, kIndex, {idx_const(kLanes)}, static_cast<int64_t>(shape.size()) + 1);
  for (size_t e = 0; e < shape.size(); e++) {
    UOpPtr r = UOp::make(Ops::RANGE, kIndex, {idx_const(e == d ? shape[e] / step : shape[e])}, static_cast<int64_t>(e));
    if (e == d) {
      UOpPtr half = UOp::make(Ops::RANGE, kIndex, {idx_const(step / kLanes)}, static_cast<int64_t>(shape.size()));
      r = r * idx_const(step) + half * idx_const(kLanes) + lane;
    }
    idx.push_back(r);
  }
  auto [flat, valid] = view_index(st, idx);
  auto split = lane_split(graph_rewrite(flat, symbolic), lane.get());
  auto valid_split = lane_split(graph_rewrite(valid, symbolic), lane.get());
  if (!split || !valid_split || valid_split->second != 0) return -1;
  return split->second;
}

// Whether a read that walks lane dim d contiguously strides 1 KiB or more along a long reduced axis
// (the right operand of a large x @ w): each step of the reduce loop then lands in the same cache
// sets, and a copy in panels (see panel_copy) pays when the read is reused enough.
bool wants_panels(const UOpPtr& m, size_t d, const std::vector<int64_t>& axes, int64_t work, int64_t panel,
                  bool pairs) {
  const View& v = m->st().views.back();
  if (v.shape[d] % panel != 0 || v.mask) return false;
  int64_t size = static_cast<int64_t>(itemsize(m->dtype));
  for (size_t e = 0; e < v.shape.size(); e++)
    if (v.strides[e] != 0) size *= v.shape[e];
  // bfloat16 panels interleave pairs for pair dot products (see pair_reduced_axis), half the instructions of the
  // widened products: they pay from 16 reads an element (x @ w of 32 rows by 1024 x 1024, one thread: 0.66 ms widened,
  // 0.38 with the panel's copy), and whatever the stride: only such a panel pairs (a.t() @ b of 2080 x 512 x 128 on an
  // AMX host, b's rows 256 B apart, two threads: 1.35 ms widened, 0.33 paired)
  pairs = pairs && m->dtype == DType::BFloat16;
  const int64_t reuse = pairs ? 16 : 64;
  for (int64_t a : axes)
    if ((pairs ? v.strides[a] != 0 : std::llabs(v.strides[a]) * static_cast<int64_t>(itemsize(m->dtype)) >= 1024) &&
        v.shape[a] >= 64)
      return work * static_cast<int64_t>(itemsize(m->dtype)) >= reuse * size;
  return false;
}

// x laid out in panels: dim d split into blocks of `panel`, each block's elements for every other
// index stored together, (d / panel, other dims..., panel), read back as x's shape. With a pair axis
// (see pair_dot), that dim's adjacent pairs are innermost: (d / panel, other dims..., pair / 2, panel, 2).
UOpPtr panel_copy(const UOpPtr& x, size_t d, int64_t panel, int64_t pair = -1) {
  Shape split;
  std::vector<int64_t> at(x->shape.size()); // where each dim (its outer part) is in split
  for (size_t e = 0; e < x->shape.size(); e++) {
    at[e] = static_cast<int64_t>(split.size());
    int64_t inner = e == d ? panel : static_cast<int64_t>(e) == pair ? 2 : 1;
    split.push_back(x->shape[e] / inner);
    if (inner > 1) split.push_back(inner);
  }
  auto inner_of = [&](int64_t e) { return e == static_cast<int64_t>(d) || e == pair ? at[e] + 1 : -1; };
  std::vector<int64_t> order{at[d]};
  for (int64_t e = 0; e < static_cast<int64_t>(split.size()); e++)
    if (e != at[d] && e != inner_of(static_cast<int64_t>(d)) && (pair < 0 || e != inner_of(pair))) order.push_back(e);
  order.push_back(inner_of(static_cast<int64_t>(d)));
  if (pair >= 0) order.push_back(inner_of(pair));
  return reshape(copied_in_order(reshape(x, split), order), x->shape);
}

// Whether the bfloat16 read y of a float32 sum of products n, its lanes along dim d, is read in place by AMX tiles,
// each tile's pairs of the reduced axis interleaved from two rows of y as it loads (see TileBlock::y_rows), instead
// of from a panel copied by pairs first (see pair_reduced_axis): on an AMX host, y's lanes contiguous in whole
// vectors, 256 lanes or more (8 blocks of 32 or more: the lanes' loop then takes the threads, the rows' the tiles, see
// lower_kernel_at), its one reduced axis a multiple of 32 long (tiles of 16 pairs, no rest) with its rows 2 or more
// elements apart, and 16 or 32 rows of outputs sharing y (one block of tile rows, which interleaves each pair of y's
// rows once), or 64 where y spans 2 MiB or less (two blocks, the second reading y's strip of columns from L2: 64 x
// 1024 x 1024 0.78x -> 0.99x eager's speed, 64 x 768 x 768 0.94x -> 1.54x; a wider y's strip left L2, 64 x 1024 x
// 4096 0.46 -> 0.51 ms, and 48 rows, three blocks of 16, ran slower too). x @ w of 32 rows by 1024 x 1024 (w's 2 MiB),
// two threads of a Sapphire Rapids in a C harness: the panel's copy and the product 52 + 36 us (and 15 more adding 4
// parts of its reduced axis), in place 63 us.
bool pairs_in_place(const UOpPtr& y, const UOpPtr& n, size_t d, const Target& target) {
  const auto& axes = n->reduce_arg().axes;
  if (!target.amx_bf16 || axes.size() != 1 || y->op != Ops::VIEW || y->dtype != DType::BFloat16 ||
      y->src[0]->op != Ops::BUFFER || y->st().views.size() != 1 || y->shape != n->src[0]->shape)
    return false;
  const View& v = y->st().views.back();
  const auto a = static_cast<size_t>(axes[0]);
  if (v.mask || d == a || v.strides[d] != 1 || v.shape[d] % kLanes != 0 || v.shape[d] < 256 || v.strides[a] < 2 ||
      v.shape[a] % 32 != 0)
    return false;
  int64_t rows = 1;
  for (size_t e = 0; e < v.shape.size(); e++)
    if (e != d && e != a && v.strides[e] == 0) rows *= v.shape[e];
  return rows == 16 || rows == 32 || (rows == 64 && v.shape[a] * v.strides[a] * 2 <= (int64_t{2} << 20));
}

// Whether a reduction is a float32 sum of bfloat16 products whose operand y some output dim reads in place by
// pairs (pairs_in_place): its reduced axis is then not split (see split_long_reductions), so that the output dims
// share the threads and the tiles read y once.
bool has_pairs_in_place(const UOpPtr& n, const Target& target) {
  const UOpPtr& src = n->src[0];
  if (n->dtype != DType::Float32 || src->op != Ops::MUL || n->reduce_arg().op != Ops::ADD) return false;
  UOpPtr x = bf16_read(src->src[0]), y = bf16_read(src->src[1]);
  if (!x || !y) return false;
  for (size_t d = 0; d < src->shape.size(); d++)
    if (pairs_in_place(x, n, d, target) || pairs_in_place(y, n, d, target)) return true;
  return false;
}

// A float32 sum of bfloat16 products x * y whose lanes (dim d) read y from a panel copy (or in place, see
// pairs_in_place) and x broadcast, over a reduced axis of even length (32 or more: a weight gradient's short window
// axis split in pairs made its unrolled index math blow up in the symbolic pass) that x walks with stride 1, reduces
// over that axis's pairs (the pair innermost, a loop of its own) and reads y from a panel interleaved by them (`panel`
// lanes wide, or one vector where y's lanes are not a multiple of it), or in place, so each step is one pair dot
// product per lane (see pair_dot). Records the reduction's replacement in `replace`.
void pair_reduced_axis(const UOpPtr& n, size_t d, int64_t panel, std::unordered_map<const UOp*, UOpPtr>& replace,
                       const Target& target) {
  const UOpPtr& src = n->src[0];
  if (n->dtype != DType::Float32 || src->op != Ops::MUL) return;
  UOpPtr x = bf16_read(src->src[0]), y = bf16_read(src->src[1]);
  if (!x || !y) return;
  auto replaced = [&](const UOpPtr& m) { return replace.count(m.get()) ? replace.at(m.get()) : m; };
  // y's lanes come from a panel copy, or y is read in place (pairs_in_place); x is broadcast along them
  auto panelled = [&](const UOpPtr& m) { return replace.count(m.get()) && m->st().views.size() == 1; };
  auto in_place = [&](const UOpPtr& m) { return !replace.count(m.get()) && pairs_in_place(m, n, d, target); };
  if (!panelled(y) && !in_place(y)) std::swap(x, y);
  UOpPtr xr = replaced(x);
  const bool direct = in_place(y);
  // a panel as wide as the lanes' blocks, or one vector where they are one (x @ w.t() of 16 rows, the lanes x's)
  if (y->shape[d] % panel != 0) panel = kLanes;
  if ((!panelled(y) && !direct) || xr->op != Ops::VIEW || xr->st().views.size() != 1 || x->shape != src->shape ||
      y->shape != src->shape || (!direct && y->shape[d] % panel != 0))
    return;
  const View& xv = xr->st().views.back();
  const View& yv = y->st().views.back();
  if (xv.mask || xv.strides[d] != 0) return;
  int64_t a = -1;
  for (int64_t e : n->reduce_arg().axes)
    if (xv.strides[e] == 1 && yv.strides[e] != 0 && src->shape[e] % 2 == 0 && src->shape[e] >= 32) a = e;
  if (a < 0) return;
  UOpPtr yr = direct ? y : expand(panel_copy(unbroadcast(y), d, panel, a), y->shape);
  bool x_first = bf16_read(src->src[0]) == x;
  UOpPtr product = x_first ? alu(Ops::MUL, cast(xr, DType::Float32), cast(yr, DType::Float32))
                           : alu(Ops::MUL, cast(yr, DType::Float32), cast(xr, DType::Float32));
  // axis a becomes (a / 2, 2), the 2 moved last: the other axes keep their positions
  Shape split = src->shape;
  split[a] /= 2;
  split.insert(split.begin() + a + 1, 2);
  std::vector<int64_t> order;
  for (int64_t e = 0; e < static_cast<int64_t>(split.size()); e++)
    if (e != a + 1) order.push_back(e);
  order.push_back(a + 1);
  std::vector<int64_t> axes = n->reduce_arg().axes;
  axes.push_back(static_cast<int64_t>(src->shape.size()));
  replace[n.get()] = reshape(reduce(permute(reshape(product, split), order), Ops::ADD, axes), n->shape);
}

// A copy of x, read through `window` (a view over x's contiguous layout), laid out so that the innermost
// reduced axis the window walks is innermost in memory: a convolution's padded input channels-last, so
// that the reduce loop over input channels reads adjacent floats, not one every 1 KiB (lines 4 KiB
// apart share L1 sets). The demo's conv2d (128, 32, 14, 14) * (64, 32, 3, 3) on one AVX2 thread: 42.5
// -> 15.4 ms. A GPU keeps the window's own layout, where adjacent threads read adjacent pixels.
UOpPtr walked_innermost(const UOpPtr& x, const View& window, const std::vector<int64_t>& axes) {
  const Shape& shape = x->shape;
  Shape strides(shape.size(), 1);
  for (size_t e = shape.size(); e-- > 1;)
    strides[e - 1] = strides[e] * shape[e];
  for (auto a = axes.rbegin(); a != axes.rend(); ++a) {
    int64_t step = window.strides[static_cast<size_t>(*a)];
    if (step == 0 || window.shape[static_cast<size_t>(*a)] == 1) continue;
    for (size_t e = 0; e + 1 < shape.size(); e++)
      if (shape[e] > 1 && strides[e] == step) {
        std::vector<int64_t> order;
        for (size_t o = 0; o < shape.size(); o++)
          if (o != e) order.push_back(static_cast<int64_t>(o));
        order.push_back(static_cast<int64_t>(e));
        return copied_in_order(x, order);
      }
    break;
  }
  return contiguous(x);
}

// A padded window read (its inner views masked: a pad) whose window strides along lane dim d over one dim of the
// padded value reads a copy of the padded value with that dim innermost, the copy walked_innermost makes for a
// window that reduces along that dim: a convolution's weight gradient summed over the adjoint windows of
// grad_output (lanes along the output channels) reads the padded grad_output channels-last that its input
// gradient (reducing along them) reads, one buffer (see conv_weight_grad_adjoint in aten_ops/conv.cpp).
// Only an adjoint window (it walks its kernel axes backward: a negative stride) takes such a copy: a forward
// window along the lanes (a weight gradient's padded input, lanes along its channels) keeps the copies it had
// (the bfloat16 weight gradient's batch-innermost input and paired panels for AMX tiles).
// Null where the read is not such a window or is not reused enough to pay for the copy.
UOpPtr padded_lane_copy(const UOpPtr& m, size_t d, int64_t work) {
  const auto& vs = m->st().views;
  if (vs.size() < 2 || vs.back().mask ||
      std::none_of(vs.back().strides.begin(), vs.back().strides.end(), [](int64_t s) { return s < 0; }))
    return nullptr;
  std::vector<View> inner(vs.begin(), vs.end() - 1);
  bool masked = false;
  for (const View& v : inner)
    masked = masked || v.mask.has_value();
  if (!masked || work < 8 * prod(inner.back().shape)) return nullptr;
  UOpPtr padded = view(m->src[0], ShapeTracker{inner});
  const Shape& shape = padded->shape;
  int64_t step = vs.back().strides[d], contiguous_stride = 1;
  bool found = false;
  for (size_t e = shape.size(); e-- > 0;) {
    found = found || (e + 1 < shape.size() && shape[e] > 1 && contiguous_stride == step);
    contiguous_stride *= shape[e];
  }
  if (!found || vs.back().shape[d] == 1) return nullptr;
  return view(walked_innermost(padded, vs.back(), {static_cast<int64_t>(d)}), ShapeTracker{{vs.back()}});
}

} // namespace

// (lower.h) ShuffleNet's first convolution, 3 -> 24 channels, stride 2, batch 16 at 64 x 64, one thread: forward 3.8 ->
// 0.3 ms (and the copy 0.13), weight gradient 1.9 -> 0.2-0.4 ms. A single view of a buffer is refused: its source is
// the flat storage, so U would be any gather (lane_copies copies such reads whole).
UOpPtr unfolded_window(const UOpPtr& m, size_t d, int64_t work, int64_t reuse) {
  if (m->op != Ops::VIEW) return nullptr;
  const auto& vs = m->st().views;
  const View& v = vs.back();
  if ((vs.size() < 2 && m->src[0]->op == Ops::BUFFER) || v.mask || v.strides[d] <= 1 || v.shape[d] == 1 ||
      std::any_of(v.strides.begin(), v.strides.end(), [](int64_t s) { return s < 0; }))
    return nullptr;
  UOpPtr below = vs.size() < 2 ? m->src[0] : view(m->src[0], ShapeTracker{std::vector<View>(vs.begin(), vs.end() - 1)});
  const Shape& ps = below->shape;
  const Shape cs = contiguous_strides(ps);
  const size_t rank = v.shape.size();
  std::vector<int64_t> dim_of(rank, -1), base(ps.size()), reach(ps.size(), 0);
  for (size_t x = 0; x < rank; x++) {
    if (v.strides[x] == 0 || v.shape[x] == 1) continue;
    for (size_t f = 0; f < ps.size() && dim_of[x] < 0; f++)
      if (ps[f] > 1 && v.strides[x] % cs[f] == 0 && v.strides[x] / cs[f] < ps[f]) dim_of[x] = static_cast<int64_t>(f);
    if (dim_of[x] < 0) return nullptr;
    reach[dim_of[x]] += v.strides[x] / cs[dim_of[x]] * (v.shape[x] - 1);
  }
  int64_t rest = v.offset;
  for (size_t f = 0; f < ps.size(); f++) {
    if (ps[f] == 1) continue; // stride 0 (contiguous_strides)
    base[f] = rest / cs[f], rest %= cs[f];
    if (base[f] + reach[f] >= ps[f]) return nullptr;
  }
  // U's dims: below's in order, dim e replaced by the window's dims along it (d last); d strides e (a dim it walks
  // step by step is made innermost by walked_innermost)
  const int64_t e = dim_of[d];
  if (v.strides[d] / cs[e] < 2) return nullptr;
  std::vector<int64_t> along; // window dims walking e
  for (size_t x = 0; x < rank; x++)
    if (dim_of[x] == e && x != d) along.push_back(static_cast<int64_t>(x));
  along.push_back(static_cast<int64_t>(d));
  Shape us, ustrides;
  std::vector<int64_t> pos_of_dim(ps.size(), -1), pos_of_along(rank, -1);
  for (size_t f = 0; f < ps.size(); f++) {
    if (static_cast<int64_t>(f) != e) {
      pos_of_dim[f] = static_cast<int64_t>(us.size());
      us.push_back(ps[f]), ustrides.push_back(cs[f]);
      continue;
    }
    for (int64_t x : along) {
      pos_of_along[x] = static_cast<int64_t>(us.size());
      us.push_back(v.shape[x]), ustrides.push_back(v.strides[x]);
    }
  }
  if (work < reuse * prod(us)) return nullptr;
  UOpPtr u = contiguous(view(below, ShapeTracker::of(View{us, ustrides, base[e] * cs[e], std::nullopt})));
  const Shape uc = contiguous_strides(us);
  Shape strides(rank, 0);
  int64_t offset = 0;
  for (size_t f = 0; f < ps.size(); f++)
    if (static_cast<int64_t>(f) != e) offset += base[f] * uc[pos_of_dim[f]];
  for (size_t x = 0; x < rank; x++) {
    if (dim_of[x] < 0) continue;
    strides[x] = dim_of[x] == e ? uc[pos_of_along[x]] : v.strides[x] / cs[dim_of[x]] * uc[pos_of_dim[dim_of[x]]];
  }
  return view(u, ShapeTracker::of(View{v.shape, strides, offset, std::nullopt}));
}

namespace {

// Whether v is computed elementwise from buffers and constants (no reduction, data-dependent read or write in
// it): a copy of a view of it computes it once an element. A value of constants alone (a scale broadcast, a
// kernel argument: sdpa's sqrt(1 / sqrt(d)) multiplying its key's gradient) costs nothing to recompute: no copy,
// whose buffer the kernel would read instead (a 1 MB fill, and a read in the transposed key's layout that kept
// sdpa's query gradient scalar: (32, 4, 65, 32), one thread, 8.2 ms -> 0.6).
bool computed_elementwise(const UOpPtr& v) {
  if (v->op == Ops::BUFFER) return false;
  bool reads = false;
  for (const UOpPtr& n : toposort(v)) {
    if (n->op == Ops::REDUCE || n->op == Ops::GATHER || n->op == Ops::SCATTER || n->op == Ops::ASSIGN ||
        n->op == Ops::CONTIGUOUS)
      return false;
    reads = reads || n->op == Ops::BUFFER;
  }
  return reads;
}

// Whether a reduction that reads the view m `work` times in all reads it from a copy: m is a window (its last view,
// unmasked, over views below it) of a padded buffer whose elements are each read 8 times or more (a convolution's
// padded input: the copy has no masks left for the loop), or of a computed value whose elements are each read twice
// or more (conv2d(x.relu(), w): a pad does not commute with the value, so the view stays on it, and the reduction
// would compute it at every tap, element by element, at indexes clamped to the mask, unvectorized; the copy computes
// it once: (128, 32, 14, 14) x (64, 32, 3, 3) after a ReLU, two threads, 133 -> 4.5 ms; a depthwise 3 x 3 conv of
// (128, 32, 28, 28) after a ReLU, each element read 9 times, 23 -> 1.9 ms).
bool copied_window(const UOpPtr& m, int64_t work) {
  if (m->op != Ops::VIEW) return false;
  const auto& vs = m->st().views;
  if (vs.size() < 2 || vs.back().mask) return false;
  const int64_t size = prod(vs[vs.size() - 2].shape);
  if (work < 2 * size) return false;
  if (m->src[0]->op != Ops::BUFFER) return computed_elementwise(m->src[0]);
  if (work < 8 * size) return false;
  for (size_t i = 0; i + 1 < vs.size(); i++)
    if (vs[i].mask) return true;
  return false;
}

// The windows of computed values that reduction r reads from copies (copied_window).
std::vector<UOpPtr> computed_windows(const UOpPtr& r) {
  std::vector<UOpPtr> windows;
  int64_t work = prod(r->src[0]->shape);
  for (const UOpPtr& m : toposort(r->src[0]))
    if (m->op == Ops::VIEW && m->src[0]->op != Ops::BUFFER && copied_window(m, work)) windows.push_back(m);
  return windows;
}

// A window read from its copy: the views below the window laid out walked_innermost (on a GPU contiguous), the
// window over it.
UOpPtr window_copy(const UOpPtr& m, const std::vector<int64_t>& axes, const Target& target,
                   std::optional<DType> as = std::nullopt) {
  const auto& vs = m->st().views;
  UOpPtr below = view(m->src[0], ShapeTracker{std::vector<View>(vs.begin(), vs.end() - 1)});
  if (as) below = cast(below, *as);
  below = target.gpu() ? contiguous(below) : walked_innermost(below, vs.back(), axes);
  return view(below, ShapeTracker{{vs.back()}});
}

// The 16-bit float reads of a float32 reduction whose lanes (dim d) broadcast them, reused 64 times or more, read
// from float32 copies (where bfloat16 products do not step by pairs): each step of the loop otherwise widened one
// element to a scalar and broadcast it from a general register, a shuffle-port instruction per row of the register
// block beside the lanes' multiply-adds (x @ w of 32 rows by 1024 x 1024 in bfloat16 on one Sapphire Rapids thread,
// the loop nest in C: 735 -> 545 us; a float32 broadcast is a load). Reused 16 or 32 times, the copy cost more than it
// saved (4096 x 1024 by 1024 x 16, two threads: 1.10 ms against 0.97; x 32: 1.52 against 1.44; x 64: 0.70 against
// 0.73). A window read from a copy (a convolution's padded input, see copied_window) is copied as float32 instead.
// Records the copies in `replace`.
void widened_broadcast_copies(const UOpPtr& n, size_t d, int64_t work, const Target& target,
                              std::unordered_map<const UOp*, UOpPtr>& replace) {
  const UOpPtr& src = n->src[0];
  for (const UOpPtr& c : toposort(src)) {
    if (c->op != Ops::CAST || c->dtype != DType::Float32 || replace.count(c.get())) continue;
    const UOpPtr& m = c->src[0];
    if (m->op != Ops::VIEW || (m->dtype != DType::BFloat16 && m->dtype != DType::Float16) || m->shape != src->shape)
      continue;
    const View& v = m->st().views.back();
    if (v.mask || v.strides[d] != 0) continue;
    if (auto it = replace.find(m.get()); it != replace.end()) { // copied: as float32 where it is a window's copy
      const auto& axes = n->reduce_arg().axes;
      if (copied_window(m, work) && it->second == window_copy(m, axes, target))
        replace[c.get()] = window_copy(m, axes, target, DType::Float32);
      continue;
    }
    if (m->src[0]->op != Ops::BUFFER || m->st().views.size() != 1) continue;
    UOpPtr base = unbroadcast(m);
    if (work < 64 * prod(base->shape)) continue;
    replace[c.get()] = expand(contiguous(cast(base, DType::Float32)), m->shape);
  }
}

// f's distinct elements (f shrunk to one element along each dim that all its reads broadcast), where f computes (an
// ALU op or more) from plain reads only: single unmasked views of buffers at f's rank, constants, scalars. Null
// otherwise.
UOpPtr plain_broadcast_base(const UOpPtr& f) {
  std::vector<bool> broadcast(f->shape.size(), true);
  bool computed = false, reads = false;
  for (const UOpPtr& m : toposort(f)) {
    if (m->op == Ops::VIEW) {
      if (m->src[0]->op == Ops::CONST || m->src[0]->op == Ops::DEFINE_VAR) continue;
      if (m->src[0]->op != Ops::BUFFER || m->st().views.size() != 1 || m->shape.size() != f->shape.size())
        return nullptr;
      const View& v = m->st().views[0];
      if (v.mask) return nullptr;
      for (size_t e = 0; e < v.shape.size(); e++)
        broadcast[e] = broadcast[e] && (v.strides[e] == 0 || v.shape[e] == 1);
      reads = true;
    } else if (is_alu(m->op)) {
      computed = true;
    } else if (m->op != Ops::CAST && m->op != Ops::BUFFER && m->op != Ops::CONST && m->op != Ops::DEFINE_VAR) {
      return nullptr;
    }
  }
  if (!computed || !reads) return nullptr;
  std::vector<std::pair<int64_t, int64_t>> keep;
  for (size_t e = 0; e < f->shape.size(); e++)
    keep.push_back({0, broadcast[e] ? 1 : f->shape[e]});
  return shrink(f, keep);
}

// A factor of a sum of products that the lanes broadcast (the same value in every lane) and that is computed from its
// reads (sdpa's query scaled by the square root of the scale before q @ k.transpose(-2, -1)): in a register block each
// row's factor is then a scalar op and a broadcast beside every multiply-add, recomputed for each block of lanes.
// Reused 16 times or more, it is computed once into a copy that the block reads as plain loads (multiply-adds from a
// broadcast load): sdpa's forward scores over (128, 65, 32), one Sapphire Rapids thread, 770 us -> 63 (the copy) +
// 441; a ViT's (nn.MultiheadAttention's, q read from its packed projection) 800-870 -> 95-145 + 415-500 a layer. No
// kernel of the other models of bench/training_step.py changed.
void computed_broadcast_factor_copies(const UOpPtr& n, size_t d, int64_t work,
                                      std::unordered_map<const UOp*, UOpPtr>& replace) {
  const UOpPtr& src = n->src[0];
  if (src->op != Ops::MUL) return;
  for (const UOpPtr& f : src->src) {
    if (replace.count(f.get())) continue;
    UOpPtr base = plain_broadcast_base(f);
    if (!base || base->shape[d] != 1 || work < 16 * prod(base->shape)) continue;
    replace[f.get()] = expand(contiguous(base), f->shape);
  }
}

// Whether a float read that the lanes broadcast (the left operand of a.t() @ b: a linear layer's weight gradient
// reads its grad_output or activations so, tokens-major) sums over one axis, 512 B or more apart and 1 MiB or more of
// it walked, reused 64 times or more: each step of the reduce loop then reads a block of output rows' elements from a
// line of its own, lines in few cache sets, every other one a new page, that L2 does not keep for the next block of
// columns. Such a read comes from a copy with its reduced axis innermost (reduced_innermost_copy), as x of x @ w is
// read. One Sapphire Rapids thread, a.t() @ b as K x M x N, the product alone against the copy and the product:
// 2080 x 512 x 128 (a ViT's MLP weight gradient) 3.2 ms -> 0.53 + 1.58; 1024^3 31 -> 15 (two threads 15.0 -> 7.3);
// 4096 x 256 x 256 7.7 -> 4.5; 512^3 2.06 -> 1.77; 2080 x 128 x 512 2.43 -> 2.07. Slower, so excluded: 2080 x 64 x 512
// (a walk of 532 KB) 1.22 -> 1.38, 256^3 (256 KiB) 0.203 -> 0.216, and a DCGAN's transposed convolution's weight
// gradient (summed over batch and pixels) 4.1 -> 2.4 + 3.8. float16 reads, and bfloat16 reads without pair dot
// products, take float32 copies in logical order already (widened_broadcast_copies). With `pairs` (the target's
// bfloat16 products step by pairs of the reduced axis, see pair_reduced_axis) a bfloat16 read is copied too: pairs
// need the reduced axis at stride 1 (a bfloat16 a.t() @ b on an AMX host, K x M x N, two threads: 1024^3 11.2 ms
// widened element by element, eager's oneDNN 1.5).
bool reads_across_reduced_axes(const UOpPtr& m, const std::vector<int64_t>& axes, int64_t work, bool pairs = false) {
  if (m->dtype != DType::Float32 && m->dtype != DType::Float64 && !(pairs && m->dtype == DType::BFloat16)) return false;
  if (m->src[0]->op != Ops::BUFFER || m->st().views.size() != 1) return false;
  const View& v = m->st().views.back();
  if (v.mask) return false;
  const auto size = static_cast<int64_t>(itemsize(m->dtype));
  int64_t reduced = 0, step = 0, n = 0;
  for (int64_t a : axes)
    if (v.shape[static_cast<size_t>(a)] > 1) {
      reduced++;
      step = std::llabs(v.strides[static_cast<size_t>(a)]) * size;
      n = v.shape[static_cast<size_t>(a)];
    }
  if (pairs && m->dtype == DType::BFloat16) // the copy is what pairs them, wherever the rows lie
    return reduced == 1 && step > size && work >= 16 * prod(unbroadcast(m)->shape);
  return reduced == 1 && step >= 512 && step * n >= (1 << 20) && work >= 64 * prod(unbroadcast(m)->shape);
}

// m (a float read the lanes broadcast, see reads_across_reduced_axes) read from a copy in panels of a cache line along
// a dim it keeps and walks with stride 1 (a.t() @ b's a, (K, M): (M / 16, K, 16) floats, see panel_copy), or null
// where none divides into lines: each step of the reduce loop reads its block of output rows' elements from one line,
// as from a copy with the reduced axis innermost (reduced_innermost_copy), and each line of the panel is one of m's
// moved whole, not gathered from 16 rows as a transposing copy does. a.t() @ b of 1024^3 floats, two threads: the copy
// 416 -> 151-161 us (its rows walked in order, see lower_kernel_at), the product unchanged; one thread in a C harness,
// the product reading the panel 13.0-13.2 ms, the transposed copy 13.7-13.8.
UOpPtr row_panel_copy(const UOpPtr& m, const std::vector<int64_t>& axes) {
  const View& v = m->st().views.back();
  const auto line = static_cast<int64_t>(64 / itemsize(m->dtype));
  for (size_t e = 0; e < v.shape.size(); e++)
    if (v.strides[e] == 1 && v.shape[e] % line == 0 &&
        std::find(axes.begin(), axes.end(), static_cast<int64_t>(e)) == axes.end())
      return expand(panel_copy(unbroadcast(m), e, line), m->shape);
  return nullptr;
}

// m read from a copy of it with its reduced axes innermost, in their order, the other dims outside in theirs.
UOpPtr reduced_innermost_copy(const UOpPtr& m, const std::vector<int64_t>& axes) {
  std::vector<int64_t> order;
  for (int64_t e = 0; e < static_cast<int64_t>(m->shape.size()); e++)
    if (std::find(axes.begin(), axes.end(), e) == axes.end()) order.push_back(e);
  order.insert(order.end(), axes.begin(), axes.end());
  return expand(copied_in_order(unbroadcast(m), order), m->shape);
}

// Whether bfloat16 products of reduction n, its lanes along dim d, step by pairs of the reduced axis (see
// pair_reduced_axis): where the host's pair dot products pay (Target::bf16_pair_dots), or on an AMX host where a
// block of tiles may form, an output dim other than the lanes' of a multiple of 16 rows (see the tile rows in
// lower_reduce). Elsewhere an AMX host whose vdpbf16ps costs more than two multiply-adds widens them: x @ w of 24
// rows by 1024 x 1024 (no tiles), two threads, 320 us by pair dots, 206 widened (eager's oneDNN 97).
bool steps_by_pairs(const UOpPtr& n, size_t d, const Target& target) {
  if (target.gpu() || !target.bf16_pairs()) return false;
  if (target.bf16_pair_dots) return true;
  const auto& axes = n->reduce_arg().axes;
  const Shape& shape = n->src[0]->shape;
  for (size_t e = 0; e < shape.size(); e++)
    if (e != d && shape[e] % 16 == 0 && std::find(axes.begin(), axes.end(), static_cast<int64_t>(e)) == axes.end())
      return true;
  return false;
}

// A reduction's output dim d can be vector lanes when every read is contiguous or broadcast along it;
// small reads that stride along d (a convolution's filters along the output channels) are read from
// copies laid out with d innermost. Records those copies in `replace` and returns true when some
// dim d works.
bool lane_copies(const UOpPtr& n, std::unordered_map<const UOp*, UOpPtr>& replace, int64_t reuse, const Target& target,
                 bool odd_lanes) {
  const UOpPtr& src = n->src[0];
  const int64_t panel = panel_lanes(target);
  const auto& axes = n->reduce_arg().axes;
  auto reduced = [&](size_t d) { return std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end(); };
  int64_t work = prod(src->shape);
  // The reads of buffers; those under a computed window are the window copy's, not the loop's.
  std::vector<UOpPtr> reads, windows = computed_windows(n);
  std::unordered_set<const UOp*> copied;
  for (const UOpPtr& m : windows)
    for (const UOpPtr& r : toposort(m->src[0]))
      copied.insert(r.get());
  for (const UOpPtr& m : toposort(src))
    if (m->op == Ops::VIEW && m->src[0]->op == Ops::BUFFER && !copied.count(m.get()))
      reads.push_back(m), windows.push_back(m);
  // A window unfolded for its lanes (unfolded_window) only where no dim has lanes without it: a 7 x 7 stride-2
  // convolution to 64 channels keeps its lanes along the channels (3.5 ms, against 5.2 along unfolded columns).
  // odd_lanes: a dim of more than 16 that does not divide into vectors may take them too (attention's scores over a
  // ViT's 65 tokens: lanes along the keys), its last vector overlapping the one before (see lower_blocked).
  for (int pass = 0; pass < 2; pass++)
    for (size_t d = src->shape.size(); d-- > 0;) {
      const bool odd = src->shape[d] % kLanes != 0;
      if (reduced(d) || (odd && (!odd_lanes || src->shape[d] < kLanes))) continue;
      std::vector<UOpPtr> copies, panels, reordered;
      std::vector<std::pair<UOpPtr, UOpPtr>> padded_lanes; // reads and their padded copies (padded_lane_copy)
      const bool pairs = steps_by_pairs(n, d, target);
      bool ok = true;
      for (const UOpPtr& m : reads) {
        const View& v = m->st().views.back();
        bool single = m->st().views.size() == 1;
        int64_t stride = m->shape == src->shape ? lane_stride(m->st(), d, panel) : -1;
        if (stride == 0 || stride == 1) {
          if (single && v.strides[d] == 1 && wants_panels(m, d, axes, work, panel, pairs) &&
              !(pairs && pairs_in_place(m, n, d, target)))
            panels.push_back(m);
          if (stride == 0 && !target.gpu() && reads_across_reduced_axes(m, axes, work, pairs)) reordered.push_back(m);
          continue;
        }
        if (m->shape == src->shape && !target.gpu())
          if (UOpPtr c = padded_lane_copy(m, d, work); c || (pass == 1 && (c = unfolded_window(m, d, work, 8)))) {
            padded_lanes.emplace_back(m, c);
            continue;
          }
        // a copy pays when each element is reused enough; windows and pads would be copied expanded
        int64_t size = prod(unbroadcast(m)->shape);
        if (m->shape != src->shape || has_mask(m->st()) || (!single && !odd_lanes) || size > prod(m->src[0]->shape) ||
            work < reuse * size) {
          ok = false;
          break;
        }
        copies.push_back(m);
      }
      if (!ok) continue;
      for (const auto& [m, c] : padded_lanes)
        replace[m.get()] = c;
      // A padded window read (a convolution's input) reads a padded copy instead: no masks in the loop; so does a
      // window of a computed value (see copied_window).
      for (const UOpPtr& m : windows)
        if (copied_window(m, work) && !replace.count(m.get())) replace[m.get()] = window_copy(m, axes, target);
      for (const UOpPtr& m : panels)
        replace[m.get()] = expand(panel_copy(unbroadcast(m), d, panel), m->shape);
      // (a bfloat16 read whose products step by pairs needs its reduced axis innermost: pair_reduced_axis)
      for (const UOpPtr& m : reordered) {
        UOpPtr rows = m->dtype == DType::BFloat16 ? nullptr : row_panel_copy(m, axes);
        replace[m.get()] = rows ? rows : reduced_innermost_copy(m, axes);
      }
      for (const UOpPtr& m : copies) {
        if (m->shape[d] % panel == 0) {
          replace[m.get()] = expand(panel_copy(unbroadcast(m), d, panel), m->shape);
          continue;
        }
        std::vector<int64_t> order;
        for (size_t e = 0; e < m->shape.size(); e++)
          if (e != d) order.push_back(static_cast<int64_t>(e));
        order.push_back(static_cast<int64_t>(d));
        replace[m.get()] = expand(copied_in_order(unbroadcast(m), order), m->shape);
      }
      if (pairs) pair_reduced_axis(n, d, panel, replace, target);
      // products that do not pair (a bfloat16 read that no copy lays out by pairs) widen as on a host without pairs
      if (!target.gpu() && !replace.count(n.get())) widened_broadcast_copies(n, d, work, target, replace);
      if (!target.gpu()) computed_broadcast_factor_copies(n, d, work, replace);
      return true;
    }
  return false;
}

// The reductions a value reads through elementwise ops and reshapes only: their output dims are the value's, in order.
std::unordered_set<const UOp*> reductions_read_in_place(const UOpPtr& value) {
  std::unordered_set<const UOp*> seen, found;
  std::vector<UOpPtr> stack{value};
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (!seen.insert(n.get()).second) continue;
    if (n->op == Ops::REDUCE)
      found.insert(n.get());
    else if (n->op != Ops::VIEW || is_reshape(n))
      stack.insert(stack.end(), n->src.begin(), n->src.end());
  }
  return found;
}

// Whether every read of a sum walks its reduced axes contiguously and they hold 64 elements or fewer (attention's
// scores over a head's 32 features): its loop vectorized along them is a few multiply-adds and a horizontal sum an
// output. Where the CPU device's kernel stores the sum in place (reductions_read_in_place), its reads are copied for
// lanes along an output dim from 16 reads an element (not 256), and a dim that does not divide into vectors may take
// them (lane_copies' odd_lanes, lower_kernel_at's): q @ k.transpose(-2, -1) of (128, 65, 32), one Sapphire Rapids
// thread, 975 us -> 98 (the keys' copy) + 390; scaled_dot_product_attention's forward and backward over (32, 4, L, 32),
// 5.8 -> 3.6 ms at L = 65, 4.2 -> 2.7 at 64, 17.9 -> 10.8 at 128. Of the models of bench/training_step.py only the
// ViT's kernels changed (its attention's scores, below).
bool short_contiguous_sum(const UOpPtr& n) {
  int64_t len = 1;
  for (int64_t a : n->reduce_arg().axes)
    len *= n->src[0]->shape[static_cast<size_t>(a)];
  if (len > 64) return false;
  // Reads through several views, unmasked, count by the stride of their flat index along each reduced axis: a ViT's
  // nn.MultiheadAttention reads q and k from its packed projection, (65, 32, 384) viewed as (128, 65, 32), which
  // were copied whole first (2 x 0.1 ms), the scores summed with a horizontal sum an output (1.8 ms); now k alone
  // is copied keys-innermost (0.3 ms) and the scores take lanes (0.85 ms), one thread.
  for (const UOpPtr& m : own_buffer_reads(n)) {
    if (m->shape != n->src[0]->shape || has_mask(m->st())) return false;
    for (int64_t a : n->reduce_arg().axes)
      if (m->shape[static_cast<size_t>(a)] > 1)
        if (int64_t st = lane_stride(m->st(), static_cast<size_t>(a), kLanes); st != 0 && st != 1) return false;
  }
  return true;
}

} // namespace

namespace {

// Whether x holds one value at every element: constants and runtime scalars, broadcast by unmasked views, through
// elementwise ops and casts (no read, no index).
bool uniform(const UOpPtr& x) {
  for (const UOpPtr& m : toposort(x)) {
    const bool leaf = m->op == Ops::CONST || m->op == Ops::DEFINE_VAR;
    if (!(leaf || is_alu(m->op) || m->op == Ops::CAST || (m->op == Ops::VIEW && !has_mask(m->st())))) return false;
  }
  return true;
}

// A float sum of products with factors that hold one value everywhere (sdpa's math form scales q and k by the
// square root of the scale before q @ k.transpose(-2, -1)), those factors applied once to the sum instead: its
// reads are then plain loads, not values computed per element or copied to be computed once (see
// computed_broadcast_factor_copies and realize_reused_values). torch's fused CPU attention scales its scores so too
// (after the product). The sum rounds differently by a few units in the last place, one whose unscaled products
// overflow where the scaled would not (float32 |q|, |k| over 1e19) overflows, and an infinite or zero factor gives
// the sum's sign where terms of both signs gave inf - inf = NaN or +0.
UOpPtr hoist_uniform_factors(const UOpPtr& n) {
  if (n->reduce_arg().op != Ops::ADD || n->src[0]->op != Ops::MUL || !is_float(n->dtype)) return nullptr;
  std::vector<UOpPtr> stack{n->src[0]}, kept, hoisted;
  while (!stack.empty()) {
    UOpPtr f = stack.back();
    stack.pop_back();
    if (f->op == Ops::MUL)
      stack.insert(stack.end(), {f->src[1], f->src[0]});
    else if (f->op == Ops::VIEW && f->src[0]->op == Ops::MUL && !has_mask(f->st()))
      stack.insert(stack.end(), {view(f->src[0]->src[1], f->st()), view(f->src[0]->src[0], f->st())});
    else
      (uniform(f) ? hoisted : kept).push_back(f);
  }
  if (hoisted.empty() || kept.empty()) return nullptr;
  auto product = [](const std::vector<UOpPtr>& fs) {
    UOpPtr p = fs[0];
    for (size_t i = 1; i < fs.size(); i++)
      p = alu(Ops::MUL, p, fs[i]);
    return p;
  };
  std::vector<std::pair<int64_t, int64_t>> one;
  for (int64_t s : n->shape)
    one.push_back({0, s});
  return alu(Ops::MUL, reduce(product(kept), Ops::ADD, n->reduce_arg().axes), shrink(product(hoisted), one));
}

} // namespace

const PatternMatcher hoist_factors("hoist_factors", {{{Ops::REDUCE}, hoist_uniform_factors}});

UOpPtr contiguous_reduce_layout(const UOpPtr& value_in, const Target& target) {
  const UOpPtr& value = value_in;
  std::unordered_map<const UOp*, UOpPtr> replace;
  const std::unordered_set<const UOp*> in_place = reductions_read_in_place(value);
  for (const UOpPtr& n : toposort(value)) {
    if (n->op != Ops::REDUCE || n->reduce_arg().op != Ops::ADD) continue;
    const UOpPtr& src = n->src[0];
    // lanes need no copy, or one of a read reused at least 16 times (256 where the reduction could instead vectorize
    // along a contiguous reduced axis of more than 64 elements; a shorter one, attention's scores over a head's
    // features, may take lanes along a dim that does not divide into vectors: see short_contiguous_sum)
    const bool short_sum = !target.gpu() && in_place.count(n.get()) && short_contiguous_sum(n);
    if (lane_copies(n, replace, reads_reduced_contiguously(n) && !short_sum ? 256 : 16, target, short_sum)) continue;
    int64_t work = prod(src->shape);
    // Windows of computed values; and of padded buffers whose innermost reduced axis the window strides (a transposed
    // convolution to few channels, its sum over the input channels a plane apart), where the sum is long enough that
    // a copy's launch is small beside it: copied without masks, that axis innermost, its loop reads contiguously.
    // conv_transpose2d of (16, 64, 31, 31) by (64, 3, 4, 4), padding 1, one thread: 134 ms -> 2.7 ms.
    const int64_t inner = n->reduce_arg().axes.back();
    for (const UOpPtr& m : toposort(src))
      if (copied_window(m, work) &&
          (m->src[0]->op != Ops::BUFFER || (work >= (1 << 16) && m->shape.size() == src->shape.size() &&
                                            std::abs(m->st().views.back().strides[inner]) > 1))) {
        UOpPtr unfolded = target.gpu() ? nullptr : unfolded_window(m, static_cast<size_t>(inner), work, 8);
        replace[m.get()] = unfolded ? unfolded : window_copy(m, n->reduce_arg().axes, target);
      }
    for (const UOpPtr& m : toposort(src)) {
      if (m->op != Ops::VIEW || m->src[0]->op != Ops::BUFFER || m->shape != src->shape || replace.count(m.get()))
        continue;
      const View& v = m->st().views.back();
      const auto& axes = n->reduce_arg().axes;
      auto reduced = [&](size_t d) {
        return std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
      };
      bool unit_reduce = false, moves = false, unit_output = false;
      for (size_t d = 0; d < v.shape.size(); d++) {
        bool unit = v.strides[d] == 1 && v.shape[d] > 1;
        if (reduced(d))
          unit_reduce = unit_reduce || unit, moves = moves || v.strides[d] != 0;
        else
          unit_output = unit_output || unit;
      }
      // The copy pays only where neither a reduced dim (the innermost loop walks it) nor an output
      // dim (vectorized across outputs, as x @ w with w row-major) is contiguous.
      bool single = m->st().views.size() == 1;
      if (single && (!moves || unit_reduce || unit_output)) continue;
      // The read without its broadcast dims, with the reduced axes innermost, copied contiguous.
      std::vector<int64_t> order;
      for (size_t d = 0; d < v.shape.size(); d++)
        if (!reduced(d)) order.push_back(static_cast<int64_t>(d));
      for (int64_t a : axes)
        order.push_back(a);
      UOpPtr base = unbroadcast(m);
      if (work < 8 * prod(base->shape)) continue; // too little reuse to pay for the copy
      replace[m.get()] = expand(copied_in_order(base, order), m->shape);
    }
  }
  if (replace.empty()) return value_in;
  return substitute(value, replace);
}

namespace {

// Ops in a value, down to its reads (a reduction or data-dependent read inside counts as one).
int64_t elementwise_cost(const UOpPtr& v) {
  int64_t ops = 0;
  std::vector<UOpPtr> stack{v};
  std::unordered_map<const UOp*, bool> seen;
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (seen[n.get()]) continue;
    seen[n.get()] = true;
    if (n->op == Ops::REDUCE || n->op == Ops::GATHER || n->op == Ops::SCATTER) {
      ops++;
      continue;
    }
    if (n->op == Ops::BUFFER || n->op == Ops::CONST || n->op == Ops::DEFINE_VAR || n->op == Ops::IOTA ||
        n->op == Ops::CONTIGUOUS)
      continue;
    if (n->op != Ops::VIEW) ops++;
    for (const UOpPtr& s : n->src)
      stack.push_back(s);
  }
  return ops;
}

} // namespace

namespace {

// Whether the view m, read in reduction r's loop, broadcasts its source only along r's reduced axes.
bool broadcast_along_reduced_axes_only(const UOpPtr& m, const UOpPtr& r) {
  const ShapeTracker& st = m->st();
  if (st.views.size() != 1 || st.views[0].mask || m->shape.size() != r->src[0]->shape.size()) return false;
  const std::vector<int64_t>& axes = r->reduce_arg().axes;
  for (size_t d = 0; d < m->shape.size(); d++)
    if (st.views[0].strides[d] == 0 && m->shape[d] > 1 &&
        std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end())
      return false;
  return true;
}

} // namespace

namespace {

// The order (outermost first) in which the buffers an elementwise value reads lay out its dims, where every read of a
// buffer (one view at the value's shape, unmasked) walks them in the same order, other than the value's own; empty
// otherwise. A value realized for reuse is written in that order: its reads and its writes run contiguously.
std::vector<int64_t> source_order(const UOpPtr& x) {
  std::vector<int64_t> found;
  for (const UOpPtr& m : toposort(graph_rewrite(x, push_views))) {
    if (m->op == Ops::REDUCE || m->op == Ops::GATHER || m->op == Ops::SCATTER) return {};
    if (m->op != Ops::VIEW || m->src[0]->op != Ops::BUFFER) continue;
    const ShapeTracker& st = m->st();
    if (m->shape != x->shape || st.views.size() != 1 || st.views[0].mask) return {};
    const View& v = st.views[0];
    std::vector<int64_t> order(v.shape.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    // dims of one element or broadcast keep their place; the others by stride, largest first
    std::vector<int64_t> walked;
    for (int64_t d : order)
      if (v.shape[static_cast<size_t>(d)] > 1 && v.strides[static_cast<size_t>(d)] != 0) walked.push_back(d);
    std::vector<int64_t> sorted = walked;
    std::ranges::stable_sort(sorted, [&](int64_t a, int64_t b) {
      return std::llabs(v.strides[static_cast<size_t>(a)]) > std::llabs(v.strides[static_cast<size_t>(b)]);
    });
    for (size_t i = 0; i < walked.size(); i++)
      order[static_cast<size_t>(walked[i])] = sorted[i];
    if (!found.empty() && found != order) return {};
    found = order;
  }
  for (size_t i = 0; i < found.size(); i++)
    if (found[i] != static_cast<int64_t>(i)) return found;
  return {};
}

} // namespace

namespace {

// n's distinct elements (plain_broadcast_base), where n is an elementwise value of a float dtype that computes a costly
// op (costly_op, or a division) and holds 64 times fewer distinct values than elements, of 65536 elements or more (the
// work saved then outweighs a kernel's launch): (N, C, H, W)'s per-channel factor of batch norm's gradient, gamma /
// sqrt(var + eps) / count, read as (1, C, 1, 1). Null otherwise.
UOpPtr broadcast_factor(const UOpPtr& n) {
  if (!is_alu(n->op) || !is_float(n->dtype) || prod(n->shape) < 65536) return nullptr;
  const auto nodes = toposort(n);
  if (std::ranges::none_of(nodes, [](const UOpPtr& m) { return costly_op(m->op) || m->op == Ops::FDIV; }))
    return nullptr;
  UOpPtr base = plain_broadcast_base(n);
  return base && 64 * prod(base->shape) <= prod(n->shape) ? base : nullptr;
}

} // namespace

UOpPtr realize_broadcast_factors(const UOpPtr& value, const Target& target) {
  if (target.gpu()) return value;
  std::unordered_map<const UOp*, UOpPtr> replace;
  std::unordered_set<const UOp*> seen;
  std::vector<UOpPtr> stack{value};
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (!seen.insert(n.get()).second) continue;
    if (UOpPtr base = broadcast_factor(n)) {
      replace[n.get()] = expand(contiguous(base), n->shape);
      continue;
    }
    // (through elementwise ops and views of them only: a reduction's reads are its own lowering's, see
    // computed_broadcast_factor_copies)
    if (is_alu(n->op) || n->op == Ops::CAST || n->op == Ops::BITCAST || n->op == Ops::VIEW)
      stack.insert(stack.end(), n->src.begin(), n->src.end());
  }
  if (replace.empty()) return value;
  return substitute(value, replace);
}

UOpPtr realize_reused_values(const UOpPtr& value) {
  std::unordered_map<const UOp*, UOpPtr> replace;
  for (const UOpPtr& r : toposort(value)) {
    if (r->op != Ops::REDUCE) continue;
    for (const UOpPtr& m : toposort(r->src[0])) {
      if (m->op != Ops::VIEW || replace.count(m.get())) continue;
      const UOpPtr& x = m->src[0];
      if (!(is_alu(x->op) || x->op == Ops::CAST) || prod(m->shape) < 2 * prod(x->shape)) continue;
      // broadcast along the reduced axes only (a row's mean in its variance): the value does not change
      // in the reduce loop and is computed once per output, before it
      if (broadcast_along_reduced_axes_only(m, r)) continue;
      int64_t cost = elementwise_cost(x);
      if (cost < 2) continue; // one op (relu(x)) is cheaper to recompute than to write and read back
      const std::vector<int64_t> order = source_order(x);
      replace[m.get()] = view(order.empty() ? contiguous(x) : copied_in_order(x, order), m->st());
    }
  }
  if (replace.empty()) return value;
  return substitute(value, replace);
}

namespace {

// n (a REDUCE of x) as partial results over `parts` equal runs of each output's elements, realized (a CONTIGUOUS
// node), then reduced. With `whole_axes` the first reduced axis alone is split (it divides by parts), the other
// reduced axes stay whole; otherwise the reduced axes are flattened into (parts, elements / parts). The partial
// results are laid out (kept axes..., parts), or with `parts_outer` (parts, kept axes...). x is n's source
// (rewritten: its own long reductions split).
UOpPtr split_reduction(const UOpPtr& n, int64_t parts, bool whole_axes, const UOpPtr& x, bool parts_outer = false) {
  const ReduceArg& r = n->reduce_arg();
  const int64_t first = x->shape[static_cast<size_t>(r.axes[0])];
  const int64_t elements = prod(x->shape) / prod(n->shape);
  // x with the kept axes first, then (parts, the rest of the first reduced axis, the other reduced
  // axes), or the reduced axes flattened into (parts, elements / parts)
  std::vector<int64_t> order;
  Shape split;
  for (int64_t d = 0; d < static_cast<int64_t>(x->shape.size()); d++)
    if (std::find(r.axes.begin(), r.axes.end(), d) == r.axes.end()) {
      order.push_back(d);
      split.push_back(x->shape[d]);
    }
  order.insert(order.end(), r.axes.begin(), r.axes.end());
  const int64_t kept = static_cast<int64_t>(split.size());
  split.push_back(parts);
  split.push_back((whole_axes ? first : elements) / parts);
  if (whole_axes)
    for (size_t a = 1; a < r.axes.size(); a++)
      split.push_back(x->shape[static_cast<size_t>(r.axes[a])]);
  std::vector<int64_t> within;
  for (int64_t a = kept + 1; a < static_cast<int64_t>(split.size()); a++)
    within.push_back(a);
  UOpPtr partial = reduce(reshape(permute(x, order), split), r.op, within);
  if (!parts_outer) return reshape(reduce(contiguous(partial), r.op, {kept}), n->shape);
  // (kept..., parts, 1...) -> (parts, kept...)
  Shape flat(split.begin(), split.begin() + kept + 1);
  std::vector<int64_t> outer{kept};
  for (int64_t a = 0; a < kept; a++)
    outer.push_back(a);
  return reshape(reduce(contiguous(permute(reshape(partial, flat), outer)), r.op, {0}), n->shape);
}

// Whether a CPU sum of products over one reduced axis of 1024 to 2048 reads a large operand (1 MiB or more, a
// row-major x @ w's w) whose reduced axis strides 1 to 4 KiB and which 9 to 63 rows of outputs share (broadcast
// along them): a register block of 8 rows reads the operand once per block, each time from L3, since its rows a
// stride apart land in the same few L2 sets and a whole strip of columns does not stay there; from 64 rows its
// panels are copied instead (see wants_panels). Measured (one thread's kernels, split against not): 16, 24, 48 rows
// by 1024 x 1024 139 / 205 / 378 us against 180 / 277 / 504, 32 x 2048 x 512 259 against 695, 40 x 2048 x 1024 757
// against 1109; with wider rows it lost (32 x 1024 x 2048: 905 against 645; x 4096: 1498 against 1303) and with
// 16 parts of a 4096-long axis the parts' kernel took a layout copy and one thread (24 x 4096 x 1024: 16.8 ms
// against 1.4).
bool rereads_strided_panel(const UOpPtr& n) {
  const ReduceArg& r = n->reduce_arg();
  const UOpPtr& src = n->src[0];
  if (r.op != Ops::ADD || r.axes.size() != 1 || src->op != Ops::MUL) return false;
  const size_t a = static_cast<size_t>(r.axes[0]);
  if (src->shape[a] < 1024 || src->shape[a] > 2048 || src->shape[a] % 256 != 0) return false;
  for (const UOpPtr& m : toposort(src)) {
    if (m->op != Ops::VIEW || m->src[0]->op != Ops::BUFFER || m->shape != src->shape) continue;
    const ShapeTracker& st = m->st();
    if (st.views.size() != 1 || st.views[0].mask) continue;
    const View& v = st.views[0];
    const int64_t size = static_cast<int64_t>(itemsize(m->dtype));
    const int64_t stride = std::llabs(v.strides[a]) * size;
    if (stride < 1024 || stride > 4096 || prod(m->src[0]->shape) * size < (int64_t{1} << 20)) continue;
    int64_t rows = 1;
    for (size_t d = 0; d < v.shape.size(); d++)
      if (d != a && v.strides[d] == 0) rows *= v.shape[d];
    if (rows > 8 && rows < 64) return true;
  }
  return false;
}

// Whether a CPU reduction over one axis of 3072 or more rows far apart is summed in runs of about 256 rows (see
// run_near_256): no read broadcast along the outputs, and one, a view of a buffer, walking 256 or more outputs
// contiguously and the reduced axis 1 KiB or more apart (a column sum, a bias gradient over many rows). Each block of
// the outputs' lanes walks every row; a run of 256 rows instead stays in L2 while every block reads it. Measured, two
// threads: (4096, 1000) summed over its rows 0.70-0.82
// -> 0.30-0.37 ms (eager 0.46-0.53), (3072, 1000) 0.51-0.56 -> 0.26, (4096, 300) 0.22 -> 0.10-0.19; no gain from
// 2048 or 2080 rows (the ViT's bias gradients of 2080 x 512: one thread 169 -> 292 us, its parts blocked 8 at a
// time), (4096, 1024) 0.39-0.45 -> 0.42-0.50 and (8192, 256) about the same.
bool walks_far_rows(const UOpPtr& n) {
  const ReduceArg& r = n->reduce_arg();
  const UOpPtr& src = n->src[0];
  if (r.axes.size() != 1) return false;
  const size_t a = static_cast<size_t>(r.axes[0]);
  if (src->shape[a] < 3072) return false;
  bool far = false;
  for (const UOpPtr& m : toposort(src)) {
    if (m->op == Ops::REDUCE) return false;
    if (m->op != Ops::VIEW || m->shape != src->shape) continue;
    const ShapeTracker& st = m->st();
    const View& v = st.views.back();
    bool lanes = false;
    for (size_t d = 0; d < v.shape.size(); d++) {
      if (d != a && v.strides[d] == 0 && v.shape[d] > 1) return false; // broadcast: a product's operand
      lanes = lanes || (d != a && v.strides[d] == 1 && v.shape[d] >= 256);
    }
    if (m->src[0]->op == Ops::BUFFER && st.views.size() == 1 && !v.mask)
      far = far || (lanes && std::llabs(v.strides[a]) * static_cast<int64_t>(itemsize(m->dtype)) >= 1024);
  }
  return far;
}

// A CPU sum of products whose operand broadcast along the output's innermost dim (the lanes: a.t() @ b's a, a linear
// layer's activations in its weight gradient) would be copied with its reduced axis innermost (see
// reads_across_reduced_axes), 512 B to 2 KiB apart along it, and is reused fewer than 512 times (b's columns): the
// copy costs a third of the product or more. Summed in runs of about 256 instead, each run's rows of the operand fit
// L2's sets and the copy is not needed. Two threads, best of 30 interleaved, copy against runs (eager): a.t() @ b of
// K x M x N = 2080 x 512 x 128 1.47-2.23 -> 1.19-2.04 ms (1.13-2.26), 2080 x 128 x 384 1.47 -> 1.25 (1.12),
// 2080 x 128 x 128 0.47 -> 0.44 (0.58), 4096 x 256 x 256 2.73 -> 2.46 (2.41), 2080 x 128 x 512 1.67 -> 1.60 (1.32);
// slower and so copied, reused 512 times or more: 2048 x 512 x 512 5.08 -> 5.57, 1024^3 9.3 -> 11.8.
bool copies_little_reused_operand(const UOpPtr& n) {
  const ReduceArg& r = n->reduce_arg();
  const UOpPtr& src = n->src[0];
  if (r.op != Ops::ADD || r.axes.size() != 1 || src->op != Ops::MUL) return false;
  const size_t a = static_cast<size_t>(r.axes[0]);
  std::optional<size_t> lanes; // the innermost kept dim of more than one element
  for (size_t d = 0; d < src->shape.size(); d++)
    if (d != a && src->shape[d] > 1) lanes = d;
  if (!lanes) return false;
  const int64_t work = prod(src->shape);
  for (const UOpPtr& m : toposort(src)) {
    if (m->op != Ops::VIEW || m->src[0]->op != Ops::BUFFER || m->shape != src->shape) continue;
    const View& v = m->st().views.back();
    if (v.strides[*lanes] != 0 || std::llabs(v.strides[a]) * static_cast<int64_t>(itemsize(m->dtype)) > 2048) continue;
    if (reads_across_reduced_axes(m, r.axes, work) && work < 512 * prod(unbroadcast(m)->shape)) return true;
  }
  return false;
}

// A divisor of `rows` near 256 (within 128), 0 where none is.
int64_t run_near_256(int64_t rows) {
  for (int64_t k = 0; k <= 128; k++)
    for (int64_t run : {256 - k, 256 + k})
      if (rows % run == 0) return run;
  return 0;
}

} // namespace

UOpPtr split_long_reductions(const UOpPtr& value, const Target& target) {
  return substitute(value, [&](const UOpPtr& n) -> UOpPtr {
    if (n->op != Ops::REDUCE) return nullptr;
    const UOpPtr& x = n->src[0];
    int64_t outputs = prod(n->shape);
    if (outputs == 0) return nullptr;
    // A CPU sum that re-reads a strided operand from L3 once per block of rows sums runs of 256 (in parts, the
    // parts' sums added after), so that each run of the operand's rows stays in L2 while every block reads it:
    // x @ w of 32 rows by 1024 x 1024, float32, one thread 610 -> 498 + 20 us, two 377 -> 262 (eager 344).
    // So do a CPU reduction that walks many rows far apart and a product that would copy an operand it reuses little,
    // in runs of about 256 (walks_far_rows, copies_little_reused_operand).
    if (!target.gpu()) {
      const int64_t rows = x->shape[static_cast<size_t>(n->reduce_arg().axes[0])];
      int64_t run = rereads_strided_panel(n) && !has_pairs_in_place(n, target) ? 256 : 0;
      if (!run && (walks_far_rows(n) || copies_little_reused_operand(n))) run = run_near_256(rows);
      if (run) return split_reduction(n, rows / run, true, split_long_reductions(x, target), /*parts_outer=*/true);
    }
    if (outputs >= kSplitOutputs) return nullptr;
    int64_t elements = prod(x->shape) / outputs;
    if (elements < kSplitMinElements) return nullptr;
    const int64_t most = std::min((kSplitOutputs + outputs - 1) / outputs, elements / kSplitMinPart);
    auto largest_divisor = [&](int64_t of) {
      for (int64_t p = most; p >= 2; p--)
        if (of % p == 0) return p;
      return int64_t{0};
    };
    int64_t parts = largest_divisor(elements);
    if (parts == 0) return nullptr; // a prime count of elements, say: no even split
    // Split the first reduced axis alone when it divides about as evenly: the other reduced axes stay
    // whole, so the parts' loops index x without the division and modulo per element that recover them
    // from one flat axis (a batch norm's per-channel sums over (batch, h, w) through a max-pool gradient
    // ran 10 integer divisions per element).
    const int64_t axis_parts = largest_divisor(x->shape[static_cast<size_t>(n->reduce_arg().axes[0])]);
    const bool whole_axes = 2 * axis_parts >= parts;
    return split_reduction(n, whole_axes ? axis_parts : parts, whole_axes, split_long_reductions(x, target));
  });
}

Kernel lower_scatter(const BufferRef& out, const UOpPtr& index, const UOpPtr& value, int64_t combine,
                     const Target& target) {
  // One thread walks the elements in order, as torch's CPU kernels do: writes to one place combine
  // deterministically. On the CPU the leading loop of size 1 is the (unsplit) parallel loop; on a GPU
  // one work-group of one thread runs every loop.
  bool gpu = target.gpu();
  Lowerer lw;
  lw.gpu = gpu;
  lw.param(out);
  Shape loops;
  if (!gpu) loops.push_back(1);
  loops.insert(loops.end(), index->shape.begin(), index->shape.end());
  if (loops.empty()) loops.push_back(1);
  int64_t first = gpu ? kGpuRanges : 0;
  lw.next_range = first + static_cast<int64_t>(loops.size());
  std::vector<UOpPtr> ranges, idx;
  for (size_t d = 0; d < loops.size(); d++) {
    ranges.push_back(UOp::make(Ops::RANGE, kIndex, {idx_const(loops[d])}, first + static_cast<int64_t>(d)));
    if (gpu ? d < index->shape.size() : d > 0) idx.push_back(ranges.back());
  }
  auto [at, valid] = Lowerer::checked_index(cast(lw.eval(index, idx), kIndex), out->numel);
  UOpPtr v = lw.eval(value, idx);
  UOpPtr p = lw.param(out);
  if (combine >= 0) v = alu(static_cast<Ops>(combine), UOp::make(Ops::LOAD, out->dtype, {p, at}), v);
  UOpPtr store = UOp::make(Ops::STORE, DType::Void, {p, at, v, valid});
  UOpPtr ast = graph_rewrite(UOp::make(Ops::SINK, DType::Void, {store}), symbolic);
  std::string name = "S";
  for (int64_t s : index->shape)
    name += "_" + std::to_string(s);
  Kernel k{name, ast, lw.buffers, loops, lw.ivars, lw.fvars, lw.var_nodes, lw.must_realize};
  if (!gpu) k.launch.global[0] = loops[0];
  for (const UOpPtr& n : lw.var_nodes)
    k.launch.f64_scalars = k.launch.f64_scalars || n->dtype == DType::Float64;
  return k;
}

namespace {

// Output loops on a GPU grid: the innermost loop is axis x, the next y, the others merge into z (their
// indices recovered by div/mod); when an axis would need more work-groups than the device allows,
// every loop merges into x. Each axis has up to `budget` threads per work-group in all, a divisor of
// its size when one is close, else the grid rounds up and `valid` marks threads past the end.
struct Grid {
  std::vector<UOpPtr> loop_index; // per loop
  UOpPtr valid;                   // null: every thread has an output
  Launch launch;
  std::array<int64_t, kGpuRanges> extent{1, 1, 1, 1, 1, 1}; // per thread-id RANGE
};

Grid make_grid(const Shape& loops, const Target& target, int64_t budget) {
  size_t n = loops.size();
  std::array<std::vector<size_t>, 3> axes;
  for (size_t i = 0; i < n; i++)
    axes[std::min<size_t>(n - 1 - i, 2)].push_back(i);
  Grid grid;
  for (int attempt = 0; attempt < 2; attempt++) {
    grid = Grid{};
    int64_t left = budget;
    bool fits = true;
    for (size_t a = 0; a < 3; a++) {
      int64_t size = 1;
      for (size_t i : axes[a])
        size *= loops[i];
      int64_t local = std::max<int64_t>(1, std::min(size, left));
      for (int64_t d = local; d * 2 > local; d--)
        if (size % d == 0) {
          local = d;
          break;
        }
      left /= local;
      int64_t groups = (size + local - 1) / local;
      fits = fits && groups <= target.max_groups[a];
      grid.launch.global[a] = groups;
      grid.launch.local[a] = local;
      grid.extent[kGroupRange + a] = groups;
      grid.extent[kLocalRange + a] = local;
      auto id = [](int64_t extent, int64_t r) {
        return extent == 1 ? idx_const(0) : UOp::make(Ops::RANGE, kIndex, {idx_const(extent)}, r);
      };
      UOpPtr t = id(groups, kGroupRange + static_cast<int64_t>(a)) * idx_const(local) +
                 id(local, kLocalRange + static_cast<int64_t>(a));
      if (size % local != 0) {
        UOpPtr in = UOp::make(Ops::CMPLT, DType::Bool, {t, idx_const(size)});
        grid.valid = grid.valid ? UOp::make(Ops::AND, DType::Bool, {grid.valid, in}) : in;
      }
      int64_t suffix = 1;
      grid.loop_index.resize(n);
      for (size_t k = axes[a].size(); k-- > 0;) {
        size_t i = axes[a][k];
        UOpPtr q = suffix == 1 ? t : UOp::make(Ops::IDIV, kIndex, {t, idx_const(suffix)});
        grid.loop_index[i] = k == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(loops[i])});
        suffix *= loops[i];
      }
    }
    if (fits) return grid;
    axes = {};
    for (size_t i = 0; i < n; i++)
      axes[0].push_back(i);
  }
  throw std::runtime_error("tiny: a kernel over " + std::to_string(prod(loops)) +
                           " outputs needs more work-groups than the device's grid allows");
}

constexpr int64_t kGpuThreads = 256;      // threads per work-group, at most
constexpr int64_t kGroupedReduce = 256;   // a reduction this long or longer ...
constexpr int64_t kGroupedOutputs = 8192; // ... with this few outputs or fewer is a grouped reduce
constexpr int64_t kGpuRows = 8;           // outputs per thread of a reduction in its own loop, at most

// ---- tiles staged in local memory ----
//
// In a reduction that every thread of a work-group runs (not a grouped reduce; no thread past the end),
// a load whose address does not depend on some of the group's thread ids reads each element from global
// memory once per such thread (x @ w: a row of x once per column thread). The reduction's outermost
// loop r (extent K) splits into kt (K / T) and ki (T); in each kt step the group's threads copy the
// load's tile (its elements over ki, the inner reduce loops and the thread ids it depends on) into
// local memory together (STAGE, between barriers), and the reduction reads the copy.
constexpr int64_t kStageDepth = 16;      // T: the reduce steps a tile holds, at most
constexpr int64_t kStageElements = 4096; // elements of one tile, at most
constexpr DType kStageDtypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64};

struct TileDim {
  UOpPtr range; // a thread id, ki or an inner reduce loop
  int64_t extent;
};

// The RANGE ids idx depends on.
std::vector<int64_t> range_ids(const std::vector<UOpPtr>& roots) {
  std::vector<int64_t> ids;
  for (const UOpPtr& root : roots)
    for (const UOpPtr& n : toposort(root))
      if (n->op == Ops::RANGE && std::find(ids.begin(), ids.end(), std::get<int64_t>(n->arg)) == ids.end())
        ids.push_back(std::get<int64_t>(n->arg));
  return ids;
}

// The loads of a reduction's value, not looking inside other reductions (computed before its loop).
std::vector<UOpPtr> reduce_loads(const UOpPtr& value) {
  std::vector<UOpPtr> loads, stack{value};
  std::unordered_map<const UOp*, bool> seen;
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (seen[n.get()] || n->op == Ops::REDUCE) continue;
    seen[n.get()] = true;
    if (n->op == Ops::LOAD) loads.push_back(n);
    stack.insert(stack.end(), n->src.begin(), n->src.end());
  }
  return loads;
}

class TileStager {
public:
  TileStager(const std::array<int64_t, kGpuRanges>& extent, const Target& target, int64_t& next_range)
      : extent_(extent), budget_(target.local_mem / 2), next_range_(next_range) {}

  UOpPtr run(const UOpPtr& ast) {
    // the reductions that share loops accumulate in one loop (a thread's rows): they split together
    std::vector<std::vector<UOpPtr>> groups;
    for (const UOpPtr& n : toposort(ast)) {
      if (n->op != Ops::REDUCE) continue;
      auto same = [&](const std::vector<UOpPtr>& g) {
        return std::equal(g[0]->src.begin() + 1, g[0]->src.end(), n->src.begin() + 1, n->src.end());
      };
      auto it = std::find_if(groups.begin(), groups.end(), same);
      if (it == groups.end())
        groups.push_back({n});
      else
        it->push_back(n);
    }
    std::unordered_map<const UOp*, UOpPtr> replaced;
    for (const auto& g : groups)
      split(g, replaced);
    if (replaced.empty()) return ast;
    return substitute(ast, replaced);
  }

private:
  const std::array<int64_t, kGpuRanges>& extent_;
  int64_t budget_; // bytes of local memory the tiles may take
  int64_t& next_range_;

  UOpPtr range(int64_t n) { return UOp::make(Ops::RANGE, kIndex, {idx_const(n)}, next_range_++); }

  void split(const std::vector<UOpPtr>& group, std::unordered_map<const UOp*, UOpPtr>& replaced) {
    std::vector<UOpPtr> loops(group[0]->src.begin() + 1, group[0]->src.end());
    std::vector<int64_t> loop_ids;
    for (const UOpPtr& r : loops) {
      if (std::get<int64_t>(r->arg) < kGpuRanges) return; // a grouped reduce
      loop_ids.push_back(std::get<int64_t>(r->arg));
    }
    int64_t k = loops[0]->src[0]->const_i(), depth = 0;
    for (int64_t t = std::min(kStageDepth, k); t >= 4 && depth == 0; t--)
      if (k % t == 0) depth = t;
    if (depth == 0) return;
    UOpPtr kt = k / depth > 1 ? range(k / depth) : nullptr, ki = range(depth);
    UOpPtr r0 = kt ? kt * idx_const(depth) + ki : ki;
    std::unordered_map<const UOp*, UOpPtr> staged;
    for (const UOpPtr& m : group)
      for (const UOpPtr& load : reduce_loads(m->src[0]))
        if (!staged.count(load.get()))
          if (UOpPtr s = stage(load, loops, loop_ids, r0, ki, depth)) staged[load.get()] = s;
    if (staged.empty()) return;
    std::vector<UOpPtr> inner_loops{ki};
    inner_loops.insert(inner_loops.end(), loops.begin() + 1, loops.end());
    for (const UOpPtr& m : group) {
      UOpPtr v = substitute(m->src[0], [&](const UOpPtr& n) -> UOpPtr {
        if (auto it = staged.find(n.get()); it != staged.end()) return it->second;
        return n == loops[0] ? r0 : nullptr;
      });
      std::vector<UOpPtr> src{graph_rewrite(v, symbolic)};
      src.insert(src.end(), inner_loops.begin(), inner_loops.end());
      UOpPtr inner = UOp::make(Ops::REDUCE, m->dtype, std::move(src), m->arg);
      replaced[m.get()] = kt ? UOp::make(Ops::REDUCE, m->dtype, {inner, kt}, m->arg) : inner;
    }
  }

  // The load read through a tile in local memory, or nullptr when it does not pay or cannot be.
  UOpPtr stage(const UOpPtr& load, const std::vector<UOpPtr>& loops, const std::vector<int64_t>& loop_ids,
               const UOpPtr& r0, const UOpPtr& ki, int64_t depth) {
    if (load->src[0]->op != Ops::PARAM || std::get<int64_t>(load->src[0]->arg) == 0) return nullptr;
    if (std::find(std::begin(kStageDtypes), std::end(kStageDtypes), load->dtype) == std::end(kStageDtypes))
      return nullptr;
    std::vector<UOpPtr> addr(load->src.begin() + 1, load->src.end());
    std::vector<int64_t> ids = range_ids(addr);
    // the tile: the thread ids and reduce loops the address depends on; group ids are the same for
    // the whole group, and nothing else may vary (a kernel loop, another reduction's loop)
    bool reduced = false;
    int64_t reuse = 1;
    std::vector<TileDim> dims;
    for (int64_t r = kLocalRange; r < kGpuRanges; r++)
      if (std::find(ids.begin(), ids.end(), r) == ids.end()) reuse *= extent_[r];
    for (int64_t id : ids) {
      if (id < kLocalRange) continue;
      if (id < kGpuRanges) {
        dims.push_back({UOp::make(Ops::RANGE, kIndex, {idx_const(extent_[id])}, id), extent_[id]});
        continue;
      }
      auto at = std::find(loop_ids.begin(), loop_ids.end(), id);
      if (at == loop_ids.end()) return nullptr;
      reduced = true;
      if (at != loop_ids.begin())
        dims.push_back({loops[at - loop_ids.begin()], loops[at - loop_ids.begin()]->src[0]->const_i()});
    }
    if (!reduced || reuse < 2) return nullptr;
    if (std::find(ids.begin(), ids.end(), loop_ids[0]) != ids.end()) dims.push_back({ki, depth});
    // the dim the address steps through by one element goes last: consecutive threads fill
    // consecutive elements (coalesced on a GPU)
    auto unit = std::find_if(dims.begin(), dims.end(), [&](const TileDim& d) {
      auto at = [&](int64_t step) {
        return graph_rewrite(substitute(addr[0],
                                        [&](const UOpPtr& n) -> UOpPtr {
                                          if (n->op != Ops::RANGE) return nullptr;
                                          return idx_const(n == d.range || (d.range == ki && n == loops[0]) ? step : 0);
                                        }),
                             symbolic);
      };
      UOpPtr a = at(0), b = at(1);
      return a->is_const() && b->is_const() && b->const_i() - a->const_i() == 1;
    });
    if (unit != dims.end()) std::rotate(unit, unit + 1, dims.end());
    int64_t size = 1;
    for (const TileDim& d : dims)
      size *= d.extent;
    int64_t bytes = size * static_cast<int64_t>(itemsize(load->dtype));
    if (size > kStageElements || bytes > budget_) return nullptr;
    budget_ -= bytes;
    // element f of the tile holds the dims' values f's digits name (the last dim fastest)
    UOpPtr fill = UOp::make(Ops::RANGE, kIndex, {idx_const(size)}, next_range_++), local = idx_const(0);
    std::unordered_map<const UOp*, UOpPtr> digit;
    int64_t suffix = 1;
    for (size_t i = dims.size(); i-- > 0;) {
      UOpPtr q = suffix == 1 ? fill : UOp::make(Ops::IDIV, kIndex, {fill, idx_const(suffix)});
      digit[dims[i].range.get()] = i == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(dims[i].extent)});
      local = local + dims[i].range * idx_const(suffix);
      suffix *= dims[i].extent;
    }
    std::vector<UOpPtr> src{fill, load->src[0]};
    for (const UOpPtr& a : addr) {
      UOpPtr in_loop = substitute(a, [&](const UOpPtr& n) { return n == loops[0] ? r0 : nullptr; });
      UOpPtr in_tile = substitute(in_loop, digit);
      src.push_back(graph_rewrite(in_tile, symbolic));
    }
    UOpPtr tile = UOp::make(Ops::STAGE, load->dtype, std::move(src), size);
    return UOp::make(Ops::LOAD, load->dtype, {tile, graph_rewrite(local, symbolic)});
  }
};

} // namespace

int64_t index_alignment(const UOpPtr& idx) {
  constexpr int64_t kMost = int64_t{1} << 30;
  switch (idx->op) {
  case Ops::CONST: {
    int64_t v = idx->const_i(), a = 1;
    if (v == 0) return kMost;
    while (a < kMost && v % (a * 2) == 0)
      a *= 2;
    return a;
  }
  case Ops::ADD:
    return std::min(index_alignment(idx->src[0]), index_alignment(idx->src[1]));
  case Ops::MUL:
    return std::min(index_alignment(idx->src[0]) * index_alignment(idx->src[1]), kMost);
  default:
    return 1;
  }
}

namespace {

// Vector lanes of an elementwise GPU kernel: each thread computes `lanes` adjacent outputs of the
// innermost loop, so that its contiguous reads and its store are one 16-byte access each (4 float32,
// 8 float16, 16 bytes, 2 float64; fewer when the loop's length needs). 1: none (a reduction, or a loop
// no count of 2 or more divides).
int64_t gpu_vector_lanes(const LoopPlan& plan, DType out) {
  int64_t inner = plan.loops.back();
  for (int64_t n = 16 / static_cast<int64_t>(itemsize(out)); n >= 2; n /= 2)
    if (inner % n == 0) return n;
  return 1;
}

Kernel lower_kernel_gpu(const BufferRef& out, const View& out_region, const LoopPlan& plan, const Target& target,
                        int64_t lanes) {
  const UOpPtr& value = plan.value;
  int64_t outputs = prod(plan.loops), longest = 0, reduces = 0;
  for (const UOpPtr& n : toposort(value)) {
    if (n->op != Ops::REDUCE) continue;
    int64_t size = 1;
    for (int64_t a : n->reduce_arg().axes)
      size *= n->src[0]->shape[a];
    longest = std::max(longest, size);
    reduces++;
  }
  // A grouped reduce keeps one partial result per thread in local memory for each reduction (8 bytes
  // at most); the group is a power of two for the tree that combines them.
  int64_t width = std::min({kGpuThreads, target.max_local, target.local_mem / (8 * std::max<int64_t>(reduces, 1))});
  int64_t group = 1;
  while (group * 2 <= width)
    group *= 2;
  bool grouped = longest >= kGroupedReduce && outputs <= kGroupedOutputs && group >= 32;
  if (lanes == 0) lanes = reduces ? 1 : gpu_vector_lanes(plan, out->dtype);
  // Rows: a thread that loops over a reduction computes up to 8 outputs of the second-innermost loop
  // (rows of x @ w; the largest count that divides the loop: 7 of a 14 x 14 image's rows): each value
  // loaded along the innermost loop serves every row (PoCL, 512^3 x @ w: 1.3 GFLOP/s with one row, 3.0
  // with 4, 5.1 with 8; the demo's 14 x 14 convolution 23x slower than the CPU device with one row).
  size_t n = plan.loops.size();
  int64_t rows = 1;
  if (!grouped && reduces && n >= 2)
    for (int64_t r = kGpuRows; r >= 2 && rows == 1; r--)
      if (plan.loops[n - 2] % r == 0) rows = r;
  Shape grid_loops = plan.loops;
  if (rows > 1) grid_loops[n - 2] /= rows;
  grid_loops[n - 1] /= lanes;
  Grid grid = make_grid(grid_loops, target, grouped ? 1 : std::min(kGpuThreads, target.max_local));

  Lowerer lw;
  lw.gpu = true;
  lw.param(out);
  lw.next_range = kGpuRanges;
  lw.thread_extent = grid.extent;
  if (grouped) {
    lw.group_lane = UOp::make(Ops::RANGE, kIndex, {idx_const(group)}, kLocalRange);
    lw.thread_extent[kLocalRange] = group;
    grid.launch.local[0] = group;
  }
  UOpPtr lane = lanes > 1 ? UOp::make(Ops::RANGE, kIndex, {idx_const(lanes)}, lw.next_range++) : nullptr;
  std::vector<UOpPtr> stores;
  for (int64_t row = 0; row < rows; row++) {
    std::vector<UOpPtr> idx(value->shape.size(), idx_const(0));
    for (size_t g = 0; g < plan.groups.size(); g++) {
      UOpPtr r = grid.loop_index[g];
      if (rows > 1 && g == n - 2) r = r * idx_const(rows) + idx_const(row);
      if (lane && g == n - 1) r = r * idx_const(lanes) + lane;
      int64_t suffix = 1;
      for (size_t k = plan.groups[g].size(); k-- > 0;) {
        size_t d = plan.groups[g][k];
        UOpPtr q = suffix == 1 ? r : UOp::make(Ops::IDIV, kIndex, {r, idx_const(suffix)});
        idx[d] = k == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(value->shape[d])});
        suffix *= value->shape[d];
      }
    }
    UOpPtr v = lw.eval(value, idx);
    auto [flat, valid] = view_index(ShapeTracker{{out_region}}, idx);
    std::vector<UOpPtr> store{lw.param(out), flat, v};
    // every thread of a grouped reduce has the result; one stores it
    if (grouped) store.push_back(UOp::make(Ops::CMPEQ, DType::Bool, {lw.group_lane, idx_const(0)}));
    stores.push_back(UOp::make(Ops::STORE, DType::Void, std::move(store)));
  }
  UOpPtr ast = graph_rewrite(UOp::make(Ops::SINK, DType::Void, stores), symbolic);
  // lanes pay only when the output takes them as one aligned vector; else each thread takes one output
  if (lane) {
    auto split = lane_split(ast->src[0]->src[1], lane.get());
    if (!split || split->second != 1 || index_alignment(split->first) % lanes != 0)
      return lower_kernel_gpu(out, out_region, plan, target, 1);
  }
  // every thread reaches a tile's barriers: none leaves early
  if (!grouped && reduces && !grid.valid) ast = TileStager(lw.thread_extent, target, lw.next_range).run(ast);

  std::string name = grouped ? "G" : reduces ? "R" : "E";
  for (int64_t s : grid_loops)
    name += "_" + std::to_string(s);
  if (rows > 1) name += "_r" + std::to_string(rows);
  if (lane) name += "_v" + std::to_string(lanes);
  // A kernel with no outputs has a loop of no iterations: it is not launched (as on the CPU).
  Kernel k{name, ast, lw.buffers, outputs == 0 ? Shape{0} : Shape{}, lw.ivars, lw.fvars, lw.var_nodes, lw.must_realize};
  k.launch = grid.launch;
  if (grid.valid) k.thread_valid = graph_rewrite(grid.valid, symbolic);
  if (lane) {
    k.lane_range = std::get<int64_t>(lane->arg);
    k.lanes = lanes;
  }
  for (const UOpPtr& n : lw.var_nodes)
    k.launch.f64_scalars = k.launch.f64_scalars || n->dtype == DType::Float64;
  return k;
}

} // namespace

} // namespace tiny
