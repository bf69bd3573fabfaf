#pragma once
// Sliding windows over the trailing (spatial) dims of a UOp, as views: no copy, only index math.
//
// The forward window (convolution, pooling) reads x[o * stride + k * dilation - padding] for each
// output position o and kernel offset k. Its adjoint (the gradient of reading through windows: the
// input gradient of a convolution, pooling backward, transposed convolution) gives each input position
// h the values of the output positions whose window reads h: v[(h + padding - k * dilation) / stride]
// when that is a whole in-range index, else 0. The adjoint spreads v by the stride (stride - 1 zeros
// after each element), pads it into place and reads it through a window with a reversed kernel axis.

#include <algorithm>
#include <utility>
#include <vector>

#include "compiler/lower.h"
#include "compiler/uop.h"

namespace tiny::window {

// Movements applied to x's own view. The compiler's builders compose a movement of a VIEW as a new
// view on top of it when its top view is not contiguous, which adds a division and a modulo per dim
// to the kernel's index math; ShapeTracker's own movements change the top view when they can.
template <class Move> UOpPtr moved(const UOpPtr& x, Move&& move) {
  return x->op == Ops::VIEW ? view(x->src[0], move(x->st())) : view(x, move(ShapeTracker::from_shape(x->shape)));
}
inline UOpPtr reshaped(const UOpPtr& x, const Shape& s) {
  return moved(x, [&](const ShapeTracker& st) { return st.reshape(s); });
}
inline UOpPtr expanded(const UOpPtr& x, const Shape& s) {
  return moved(x, [&](const ShapeTracker& st) { return st.expand(s); });
}
inline UOpPtr permuted(const UOpPtr& x, const std::vector<int64_t>& order) {
  return moved(x, [&](const ShapeTracker& st) { return st.permute(order); });
}
inline UOpPtr padded(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& pads) {
  return moved(x, [&](const ShapeTracker& st) { return st.pad(pads); });
}
inline UOpPtr shrunk(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  return moved(x, [&](const ShapeTracker& st) { return st.shrink(ranges); });
}
inline UOpPtr flipped(const UOpPtr& x, const std::vector<bool>& axes) {
  return moved(x, [&](const ShapeTracker& st) { return st.flip(axes); });
}
inline UOpPtr strided(const UOpPtr& x, const Shape& shape, const Shape& strides, int64_t offset) {
  return moved(x, [&](const ShapeTracker& st) { return st.as_strided(shape, strides, offset); });
}

// One window geometry per spatial dim.
struct Geometry {
  Shape kernel, stride, padding, dilation;
  size_t dims() const { return kernel.size(); }
  // The length of input one window row of `out` positions reads: (out - 1) * stride + (kernel - 1) * dilation + 1.
  int64_t span(size_t i, int64_t out) const { return (out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1; }
};

// Pads the last pads.size() dims of x by (before, after) zeros each; a negative amount crops instead.
inline UOpPtr pad_spatial(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& pads) {
  size_t lead = x->shape.size() - pads.size();
  std::vector<std::pair<int64_t, int64_t>> keep, grow;
  for (size_t d = 0; d < x->shape.size(); d++) {
    auto [b, a] = d < lead ? std::pair<int64_t, int64_t>{0, 0} : pads[d - lead];
    keep.emplace_back(std::max<int64_t>(-b, 0), x->shape[d] - std::max<int64_t>(-a, 0));
    grow.emplace_back(std::max<int64_t>(b, 0), std::max<int64_t>(a, 0));
  }
  return padded(shrunk(x, keep), grow);
}

// x (lead..., L...) padded by `padding` before, and by whatever the last window needs after (cropped
// when it needs less): the input a window of `out` positions reads from index 0 on.
inline UOpPtr pad_for_windows(const UOpPtr& x, const Shape& out, const Geometry& g) {
  size_t lead = x->shape.size() - g.dims();
  std::vector<std::pair<int64_t, int64_t>> pads;
  for (size_t i = 0; i < g.dims(); i++)
    pads.emplace_back(g.padding[i], g.span(i, out[i]) - x->shape[lead + i] - g.padding[i]);
  return pad_spatial(x, pads);
}

// x (lead..., L...) -> (lead..., out..., kernel...): element [.., o, k] = x[.., o * stride + k * dilation].
// The windows must lie inside x (pad_for_windows makes them). One strided view of x's flattening.
inline UOpPtr windows(const UOpPtr& x, const Shape& out, const Geometry& g) {
  size_t nd = g.dims(), lead = x->shape.size() - nd;
  Shape flat = contiguous_strides(x->shape), shape, strides;
  for (size_t d = 0; d < lead; d++) {
    shape.push_back(x->shape[d]);
    strides.push_back(flat[d]);
  }
  for (size_t i = 0; i < nd; i++) {
    shape.push_back(out[i]);
    strides.push_back(g.stride[i] * flat[lead + i]);
  }
  for (size_t i = 0; i < nd; i++) {
    shape.push_back(g.kernel[i]);
    strides.push_back(g.dilation[i] * flat[lead + i]);
  }
  return strided(x, shape, strides, 0);
}

// The adjoint of windows(pad_for_windows(x)): v (lead..., out...) -> (lead..., in..., kernel...) with
// element [.., h, k] = v[.., (h + padding - k * dilation) / stride] where that divides evenly and lies
// in [0, out), else 0. Summing over k gives the gradient of x for a gradient v of the windows' result.
// Whether windows tile each line (stride == kernel, no dilation): every input position is in at most one.
inline bool tiles(const Geometry& g) {
  for (size_t i = 0; i < g.dims(); i++)
    if (g.stride[i] != g.kernel[i] || g.dilation[i] != 1) return false;
  return true;
}

// For windows that tile (see tiles): v (lead..., out...) moved to the input positions its windows
// cover, (lead..., in...): each window's value repeated over it, zero where no window reaches.
inline UOpPtr tiled_adjoint(const UOpPtr& v, const Shape& in, const Geometry& g) {
  size_t nd = g.dims(), lead = v->shape.size() - nd;
  Shape split(v->shape.begin(), v->shape.begin() + static_cast<std::ptrdiff_t>(lead)), repeated = split, joined = split;
  std::vector<std::pair<int64_t, int64_t>> pads;
  for (size_t i = 0; i < nd; i++) {
    int64_t o = v->shape[lead + i], s = g.stride[i];
    split.insert(split.end(), {o, 1});
    repeated.insert(repeated.end(), {o, s});
    joined.push_back(o * s);
    // position h reads joined index h + padding
    pads.emplace_back(-g.padding[i], in[i] + g.padding[i] - o * s);
  }
  return pad_spatial(reshaped(expanded(reshaped(v, split), repeated), joined), pads);
}

// The phases of positions strided by `stride` over `in` (a value's last dims): for each combination of digits
// p[i] < stride[i], the last dim's fastest, the positions p[i], p[i] + stride[i], ... and their count q[i] (0 where
// in[i] <= p[i]). Strided gradients through windows (a convolution's input gradient, a max pool's) are written phase
// by phase, each phase a fixed set of the kernel's taps with no division by the stride in its index math.
struct StridedPhase {
  std::vector<int64_t> p;
  Shape q;
};

inline std::vector<StridedPhase> strided_phases(const Shape& in, const Shape& stride) {
  const size_t nd = stride.size();
  int64_t count = 1;
  for (int64_t s : stride)
    count *= s;
  std::vector<StridedPhase> phases;
  for (int64_t phase = 0; phase < count; phase++) {
    StridedPhase ph{std::vector<int64_t>(nd), Shape(nd)};
    for (size_t i = nd, rest = static_cast<size_t>(phase); i-- > 0;) {
      ph.p[i] = static_cast<int64_t>(rest) % stride[i];
      rest /= static_cast<size_t>(stride[i]);
      ph.q[i] = std::max<int64_t>((in[i] - ph.p[i] + stride[i] - 1) / stride[i], 0);
    }
    phases.push_back(std::move(ph));
  }
  return phases;
}

// The adjoint windows of g over `common`, a value v (spread by g's stride, see windows_adjoint) padded by before[i]
// before each spatial dim and by at least what the windows read after: windows_adjoint(v, in, g)'s elements, as one
// strided view of common. Windows of several geometries (the phases of a strided input gradient, stride 1 each) may
// so read one padded value, which the lowering then copies once.
inline UOpPtr windows_adjoint_from(const UOpPtr& common, const Shape& before, const Shape& in, const Geometry& g) {
  size_t nd = g.dims(), lead = common->shape.size() - nd;
  Shape flat = contiguous_strides(common->shape), shape, strides;
  int64_t offset = 0;
  for (size_t d = 0; d < lead; d++) {
    shape.push_back(common->shape[d]);
    strides.push_back(flat[d]);
  }
  for (size_t i = 0; i < nd; i++) {
    shape.push_back(in[i]);
    strides.push_back(flat[lead + i]);
  }
  for (size_t i = 0; i < nd; i++) {
    // element [h, k] reads v[h + padding - k * dilation], at common's h + padding + before - k * dilation
    shape.push_back(g.kernel[i]);
    strides.push_back(-g.dilation[i] * flat[lead + i]);
    offset += (g.padding[i] + before[i]) * flat[lead + i];
  }
  return strided(common, shape, strides, offset);
}

inline UOpPtr windows_adjoint(const UOpPtr& v, const Shape& in, const Geometry& g) {
  size_t nd = g.dims(), lead = v->shape.size() - nd;
  // Spread: v[o] moves to o * stride, with zeros between.
  Shape split(v->shape.begin(), v->shape.begin() + static_cast<std::ptrdiff_t>(lead)), spread = split;
  std::vector<std::pair<int64_t, int64_t>> gaps(lead, {0, 0});
  for (size_t i = 0; i < nd; i++) {
    int64_t o = v->shape[lead + i];
    split.insert(split.end(), {o, 1});
    gaps.insert(gaps.end(), {{0, 0}, {0, g.stride[i] - 1}});
    spread.push_back(o * g.stride[i]);
  }
  UOpPtr s = reshaped(padded(reshaped(v, split), gaps), spread);
  // Align: index j of the spread v is read at h + (kernel - 1 - k) * dilation, so it moves to
  // j + (kernel - 1) * dilation - padding, in a row of in + (kernel - 1) * dilation elements.
  std::vector<std::pair<int64_t, int64_t>> pads;
  Shape befores;
  for (size_t i = 0; i < nd; i++) {
    int64_t reach = (g.kernel[i] - 1) * g.dilation[i], before = reach - g.padding[i];
    befores.push_back(before);
    pads.emplace_back(before, in[i] + reach - before - spread[lead + i]);
  }
  // Read h + (kernel - 1 - k) * dilation: a window with a reversed kernel axis.
  return windows_adjoint_from(pad_spatial(s, pads), befores, in, g);
}

} // namespace tiny::window
