#include "compiler/lower.h"

#include <map>
#include <stdexcept>
#include <unordered_map>

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
  for (const UOpPtr& s : x->src) src.push_back(view(s, n->st()));
  return UOp::make(x->op, x->dtype, std::move(src), x->arg);
}

} // namespace

const PatternMatcher push_views("push_views", {{{Ops::VIEW}, push_view_through_elementwise}});

namespace {

UOpPtr unflatten_dim(const UOpPtr& flat, const Shape& shape, size_t d) {
  int64_t suffix = 1;
  for (size_t i = d + 1; i < shape.size(); i++) suffix *= shape[i];
  UOpPtr q = UOp::make(Ops::IDIV, kIndex, {flat, idx_const(suffix)});
  return d == 0 ? q : UOp::make(Ops::MOD, kIndex, {q, idx_const(shape[d])});
}

std::vector<UOpPtr> unflatten(const UOpPtr& flat, const Shape& shape) {
  std::vector<UOpPtr> idx;
  for (size_t d = 0; d < shape.size(); d++) idx.push_back(unflatten_dim(flat, shape, d));
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
    for (size_t d = 0; d < v.shape.size(); d++) flat = flat + cur[d] * idx_const(v.strides[d]);
    if (k > 0) cur = unflatten(flat, st.views[k - 1].shape);
  }
  return {flat, valid};
}

namespace {

// Merges adjacent output dims that every access (the output and each leaf read) walks as one, and
// drops size-1 dims. Returns the new loop shape.
Shape coalesced_shape(const Shape& shape, const std::vector<const View*>& accesses) {
  for (const View* v : accesses)
    if (v->mask) return shape;
  Shape out;
  std::vector<size_t> last_dim; // original dim at the end of each merged group
  for (size_t d = 0; d < shape.size(); d++) {
    if (shape[d] == 1) continue;
    bool merge = !out.empty();
    if (merge)
      for (const View* v : accesses)
        if (v->strides[last_dim.back()] != v->strides[d] * shape[d]) {
          merge = false;
          break;
        }
    // merge means: the previous group's innermost dim steps by exactly this dim's span
    if (merge) {
      // strides must chain through every dim of the group; checked against the group's last dim
      out.back() *= shape[d];
      last_dim.back() = d;
    } else {
      out.push_back(shape[d]);
      last_dim.push_back(d);
    }
  }
  if (out.empty()) out.push_back(1);
  return out;
}

class Lowerer {
public:
  std::vector<BufferRef> buffers;
  std::unordered_map<const BufferBase*, UOpPtr> params;

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
    for (const UOpPtr& i : idx) key.second.push_back(i.get());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    UOpPtr r = eval_uncached(n, idx);
    keep_.push_back(n);
    memo_[key] = r;
    return r;
  }

private:
  std::map<std::pair<const UOp*, std::vector<const UOp*>>, UOpPtr> memo_;
  std::vector<UOpPtr> keep_;

  UOpPtr load(const UOpPtr& buf, const UOpPtr& flat, const UOpPtr& valid) {
    if (valid->is_const() && valid->const_i()) return UOp::make(Ops::LOAD, buf->dtype, {param(buf->buffer()), flat});
    return UOp::make(Ops::LOAD, buf->dtype, {param(buf->buffer()), flat, valid});
  }

  UOpPtr eval_uncached(const UOpPtr& n, const std::vector<UOpPtr>& idx) {
    switch (n->op) {
    case Ops::CONST: return n;
    case Ops::BUFFER: return load(n, idx.at(0), const_int(DType::Bool, 1));
    case Ops::VIEW: {
      const UOpPtr& x = n->src[0];
      auto [flat, valid] = view_index(n->st(), idx);
      if (x->op == Ops::BUFFER) return load(x, flat, valid);
      UOpPtr v = x->op == Ops::CONST ? x : eval(x, unflatten(flat, x->shape));
      if (valid->is_const() && valid->const_i()) return v;
      return UOp::make(Ops::WHERE, v->dtype, {valid, v, const_like(v, 0)});
    }
    default:
      if (is_alu(n->op) || n->op == Ops::CAST || n->op == Ops::BITCAST) {
        std::vector<UOpPtr> src;
        for (const UOpPtr& s : n->src) src.push_back(eval(s, idx));
        return UOp::make(n->op, n->dtype, std::move(src), n->arg);
      }
      throw std::logic_error(std::string("lower_kernel: cannot lower ") + op_name(n->op));
    }
  }
};

} // namespace

Kernel lower_kernel(const BufferRef& out, const View& out_region, const UOpPtr& value_in) {
  if (value_in->shape != out_region.shape) throw std::logic_error("lower_kernel: value shape differs from region");
  UOpPtr value = graph_rewrite(value_in, push_views);

  // Coalesce loops over every access: the output region and each read at the kernel's own shape
  // (views reached without passing through another view, and bare buffers).
  std::vector<const View*> accesses{&out_region};
  ShapeTracker whole = ShapeTracker::from_shape(value->shape);
  std::vector<UOpPtr> stack{value};
  std::unordered_map<const UOp*, bool> seen;
  while (!stack.empty()) {
    UOpPtr n = stack.back();
    stack.pop_back();
    if (seen[n.get()]) continue;
    seen[n.get()] = true;
    if (n->op == Ops::VIEW) accesses.push_back(&n->st().views.back());
    else if (n->op == Ops::BUFFER) accesses.push_back(&whole.views[0]);
    else
      for (const UOpPtr& s : n->src) stack.push_back(s);
  }
  Shape loops = coalesced_shape(value->shape, accesses);
  ShapeTracker out_st{{out_region}};
  if (loops != value->shape) {
    value = substitute(value, [&](const UOpPtr& n) -> UOpPtr {
      if (n->op == Ops::VIEW && n->st().shape() == value_in->shape)
        return view(n->src[0], n->st().reshape(loops));
      if (n->op == Ops::BUFFER) return reshape(n, loops);
      return nullptr;
    });
    out_st = out_st.reshape(loops);
  }

  Lowerer lw;
  lw.param(out);
  std::vector<UOpPtr> ranges;
  for (size_t d = 0; d < loops.size(); d++)
    ranges.push_back(UOp::make(Ops::RANGE, kIndex, {idx_const(loops[d])}, static_cast<int64_t>(d)));
  UOpPtr v = lw.eval(value, ranges);
  auto [flat, valid] = view_index(out_st, ranges);
  UOpPtr store = UOp::make(Ops::STORE, DType::Void, {lw.param(out), flat, v});
  UOpPtr ast = graph_rewrite(UOp::make(Ops::SINK, DType::Void, {store}), symbolic);

  std::string name = "E";
  for (int64_t s : loops) name += "_" + std::to_string(s);
  return Kernel{name, ast, lw.buffers, loops};
}

} // namespace tiny
