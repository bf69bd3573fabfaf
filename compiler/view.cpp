#include "compiler/view.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace tiny {

int64_t prod(const Shape& s) {
  int64_t p = 1;
  for (int64_t v : s)
    p *= v;
  return p;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size(), 1);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = shape[i] == 1 ? 0 : acc;
    acc *= shape[i];
  }
  return st;
}

View View::contiguous(const Shape& shape) { return View{shape, contiguous_strides(shape), 0, std::nullopt}; }

bool View::is_contiguous() const {
  if (offset != 0 || mask) return false;
  int64_t expect = 1; // contiguous_strides(shape), dim by dim from the last
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

static void hash_mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

size_t View::hash() const {
  size_t h = shape.size();
  for (int64_t v : shape)
    hash_mix(h, std::hash<int64_t>{}(v));
  for (int64_t v : strides)
    hash_mix(h, std::hash<int64_t>{}(v));
  hash_mix(h, std::hash<int64_t>{}(offset));
  if (mask)
    for (auto [b, e] : *mask)
      hash_mix(h, std::hash<int64_t>{}(b * 31 + e));
  return h;
}

static std::string join(const Shape& s) {
  std::ostringstream os;
  for (size_t i = 0; i < s.size(); i++)
    os << (i ? "," : "") << s[i];
  return os.str();
}

std::string View::str() const {
  std::ostringstream os;
  os << "View(shape=(" << join(shape) << "), strides=(" << join(strides) << "), offset=" << offset;
  if (mask) {
    os << ", mask=(";
    for (auto [b, e] : *mask)
      os << "(" << b << "," << e << ")";
    os << ")";
  }
  os << ")";
  return os.str();
}

ShapeTracker ShapeTracker::from_shape(const Shape& shape) { return of(View::contiguous(shape)); }

ShapeTracker ShapeTracker::of(View v) {
  ShapeTracker st;
  st.views.push_back(std::move(v));
  return st;
}

namespace {

// A permutation of masked `inner` (outer walks inner's row-major layout dim for dim, in another order, whole and
// unmasked) is inner permuted, its mask too: F.pad(x, ...).permute(0, 2, 3, 1) is one masked view, whose copy
// reads its lanes contiguously (see lower_transposed_copy in compiler/lower.cpp).
std::optional<View> permuted_masked(const View& inner, const View& outer) {
  const Shape& S = inner.shape;
  if (outer.mask || outer.offset != 0 || outer.shape.size() != S.size()) return std::nullopt;
  Shape suffix(S.size(), 1);
  for (size_t d = S.size(); d-- > 1;)
    suffix[d - 1] = suffix[d] * S[d];
  std::vector<bool> used(S.size(), false);
  View out{outer.shape, Shape(S.size(), 0), inner.offset, std::vector<std::pair<int64_t, int64_t>>(S.size())};
  for (size_t j = 0; j < S.size(); j++) {
    size_t d = 0;
    while (d < S.size() && (used[d] || S[d] != outer.shape[j] || (S[d] > 1 && suffix[d] != outer.strides[j])))
      d++;
    if (d == S.size()) return std::nullopt;
    used[d] = true;
    out.strides[j] = inner.strides[d];
    (*out.mask)[j] = (*inner.mask)[d];
  }
  return out;
}

// `outer` reads the row-major flattening of `inner`'s shape. When each of outer's dims walks
// within one dim of inner (a permute, expand, slice, step or flip of it), the two are one view; over a
// contiguous inner (which maps each flat position to itself) outer alone is the view, whatever its offset
// and mask (a pad of a contiguous tensor).
std::optional<View> compose(const View& inner, const View& outer) {
  const Shape& S = inner.shape;
  if (inner.is_contiguous()) return outer;
  if (inner.mask && outer.offset >= 0 && prod(S) > 0) return permuted_masked(inner, outer);
  if (inner.mask || outer.offset < 0 || prod(S) == 0) return std::nullopt;
  // a reshape of inner (outer is row-major over all of it) is one view wherever torch's rule allows it
  if (outer.is_contiguous() && prod(outer.shape) == prod(S))
    if (auto st = reshape_strides(S, inner.strides, outer.shape))
      return View{outer.shape, *st, inner.offset, std::nullopt};
  size_t n = S.size();
  Shape suffix(n, 1), start(n, 0);
  for (size_t d = n; d-- > 1;)
    suffix[d - 1] = suffix[d] * S[d];
  int64_t o = outer.offset;
  for (size_t d = 0; d < n; d++) {
    start[d] = o / suffix[d];
    o -= start[d] * suffix[d];
  }
  if (n > 0 && start[0] >= S[0] && prod(outer.shape) > 0) return std::nullopt;
  View out{outer.shape, Shape(outer.shape.size(), 0), inner.offset, outer.mask};
  for (size_t d = 0; d < n; d++)
    out.offset += start[d] * inner.strides[d];
  for (size_t j = 0; j < outer.shape.size(); j++) {
    int64_t t = outer.strides[j];
    if (t == 0 || outer.shape[j] == 1) continue;
    bool mapped = false;
    for (size_t d = 0; d < n && !mapped; d++) {
      if (S[d] == 1 || t % suffix[d] != 0) continue;
      int64_t step = t / suffix[d];
      int64_t last = start[d] + step * (outer.shape[j] - 1);
      if (std::llabs(step) >= S[d] || last < 0 || last >= S[d]) continue;
      out.strides[j] = step * inner.strides[d];
      mapped = true;
    }
    if (!mapped) return std::nullopt;
  }
  return out;
}

} // namespace

// A view of a view is one view when the two compose (always for a contiguous source).
ShapeTracker ShapeTracker::push(View v) const {
  ShapeTracker out = *this;
  if (auto c = compose(out.views.back(), v))
    out.views.back() = std::move(*c);
  else
    out.views.push_back(std::move(v));
  // a contiguous view of the view below's shape is the identity on it (a reshape round trip: flattened, then
  // unflattened), and a kernel's loops would coalesce over it as if the value were contiguous
  const size_t n = out.views.size();
  if (n >= 2 && out.views[n - 1].is_contiguous() && out.views[n - 1].shape == out.views[n - 2].shape)
    out.views.pop_back();
  return out;
}

ShapeTracker ShapeTracker::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  return push(View{shape, strides, offset, std::nullopt});
}

std::optional<Shape> reshape_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  // Walk chunks of old dims that are contiguous among themselves, matching new dims to each chunk.
  Shape new_strides(new_shape.size(), 0);
  if (prod(old_shape) == 0 || old_shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

ShapeTracker ShapeTracker::reshape(const Shape& shape) const {
  const View& top = views.back();
  if (top.shape == shape) return *this;
  if (prod(shape) != prod(top.shape)) throw std::invalid_argument("reshape: element count differs");
  if (!top.mask) {
    if (auto st = reshape_strides(top.shape, top.strides, shape)) {
      // the reshaped top view may now compose with the one below (a reshape round trip)
      ShapeTracker out = *this;
      out.views.pop_back();
      View v{shape, *st, top.offset, std::nullopt};
      if (out.views.empty()) return of(std::move(v));
      return out.push(std::move(v));
    }
  }
  ShapeTracker out = *this;
  out.views.push_back(View::contiguous(shape));
  return out;
}

ShapeTracker ShapeTracker::permute(const std::vector<int64_t>& order) const {
  const View& top = views.back();
  View v{Shape(order.size()), Shape(order.size()), top.offset, std::nullopt};
  if (top.mask) v.mask.emplace(order.size());
  for (size_t i = 0; i < order.size(); i++) {
    v.shape[i] = top.shape[order[i]];
    v.strides[i] = top.strides[order[i]];
    if (top.mask) (*v.mask)[i] = (*top.mask)[order[i]];
  }
  ShapeTracker out = *this;
  out.views.back() = std::move(v);
  return out;
}

ShapeTracker ShapeTracker::expand(const Shape& shape) const {
  View v = views.back();
  // Leading new dims, then size-1 dims broadcast with stride 0.
  size_t lead = shape.size() - v.shape.size();
  View e{shape, Shape(shape.size(), 0), v.offset, std::nullopt};
  if (v.mask) e.mask.emplace(shape.size(), std::pair<int64_t, int64_t>{0, 0});
  for (size_t i = 0; i < shape.size(); i++) {
    if (i < lead) {
      if (e.mask) (*e.mask)[i] = {0, shape[i]};
      continue;
    }
    size_t j = i - lead;
    bool broadcast = v.shape[j] == 1 && shape[i] != 1;
    e.strides[i] = broadcast ? 0 : v.strides[j];
    if (e.mask) {
      auto [b, en] = (*v.mask)[j];
      (*e.mask)[i] =
          broadcast ? (b == 0 && en == 1 ? std::pair<int64_t, int64_t>{0, shape[i]} : std::pair<int64_t, int64_t>{0, 0})
                    : std::pair<int64_t, int64_t>{b, en};
    }
  }
  ShapeTracker out = *this;
  out.views.back() = std::move(e);
  return out;
}

ShapeTracker ShapeTracker::pad(const std::vector<std::pair<int64_t, int64_t>>& pads) const {
  View v = views.back();
  bool any = false;
  for (auto [b, a] : pads)
    any = any || b != 0 || a != 0;
  if (!any) return *this;
  std::vector<std::pair<int64_t, int64_t>> mask(v.shape.size());
  for (size_t d = 0; d < v.shape.size(); d++) {
    auto [b, a] = pads[d];
    auto [lo, hi] = v.mask ? (*v.mask)[d] : std::pair<int64_t, int64_t>{0, v.shape[d]};
    mask[d] = {lo + b, hi + b};
    v.offset -= b * v.strides[d];
    v.shape[d] += b + a;
  }
  v.mask = mask;
  ShapeTracker out = *this;
  out.views.back() = std::move(v);
  return out;
}

ShapeTracker ShapeTracker::shrink(const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  View v = views.back();
  for (size_t d = 0; d < v.shape.size(); d++) {
    auto [b, e] = ranges[d];
    v.offset += b * v.strides[d];
    if (v.mask) {
      auto [lo, hi] = (*v.mask)[d];
      lo = std::clamp(lo - b, int64_t{0}, e - b);
      hi = std::clamp(hi - b, lo, e - b);
      (*v.mask)[d] = {lo, hi};
    }
    v.shape[d] = e - b;
  }
  if (v.mask) {
    bool full = true;
    for (size_t d = 0; d < v.shape.size(); d++)
      full = full && (*v.mask)[d] == std::pair<int64_t, int64_t>{0, v.shape[d]};
    if (full) v.mask.reset();
  }
  ShapeTracker out = *this;
  out.views.back() = std::move(v);
  return out;
}

ShapeTracker ShapeTracker::flip(const std::vector<bool>& axes) const {
  View v = views.back();
  for (size_t d = 0; d < v.shape.size(); d++) {
    if (!axes[d]) continue;
    v.offset += (v.shape[d] - 1) * v.strides[d];
    v.strides[d] = -v.strides[d];
    if (v.mask) {
      auto [lo, hi] = (*v.mask)[d];
      (*v.mask)[d] = {v.shape[d] - hi, v.shape[d] - lo};
    }
  }
  ShapeTracker out = *this;
  out.views.back() = std::move(v);
  return out;
}

ShapeTracker ShapeTracker::on_top_of(const ShapeTracker& inner) const {
  ShapeTracker out = inner;
  for (const View& v : views)
    out = out.push(v);
  return out;
}

size_t ShapeTracker::hash() const {
  size_t h = views.size();
  for (const View& v : views)
    hash_mix(h, v.hash());
  return h;
}

std::string ShapeTracker::str() const {
  std::string s = "ShapeTracker(";
  for (const View& v : views)
    s += v.str() + ";";
  return s + ")";
}

} // namespace tiny
