// Interpolation: upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d, upsample_linear1d,
// upsample_bilinear2d, upsample_trilinear3d, upsample_bicubic2d, the antialiased _upsample_bilinear2d_aa and
// _upsample_bicubic2d_aa, and their backward ops (what F.interpolate's .vec overloads decompose into).
//
// Interpolation is separable: each spatial dim maps `in` input positions to `out` output positions
// through a few taps, each an input index and a weight that depend on the output position only. The
// taps are built from iotas with torch's own float formulas (the same float32 or float64 arithmetic,
// so the same indices and weights). The forward reads the input at the computed indices (GATHER) and
// combines the taps nested as torch's CPU kernel does (the first dim outermost: w0 * t0 + w1 * t1 + ...
// where each t interpolates the next dim), all in one elementwise kernel that fuses with its consumer.
// Integer-factor nearest upsampling (and a size that does not change) needs no gather at all: it is a
// broadcast view. The backward ops are the transposed maps, dim by dim: a reduce over the output
// positions of where(index == position, weight * grad, 0) (the where keeps inf/NaN out), or for
// integer-factor nearest a plain sum over the repeated positions.
//
// Antialiased resampling (torch's separable_upsample_generic_Nd_kernel_impl) is separable too, but its
// window widens with the downscale factor (up to torch's max_interp_size taps, of which each output uses
// its own first `xsize`): one dim at a time, the last first, each pass into a buffer of its own as torch's
// temporary; unused taps are left out (where), not weighted by 0, so that an inf or NaN outside the window
// stays out. Its backward scatter-adds weight * grad into each output's window, dim by dim.
//
// uint8 images (bilinear and bicubic 2d, with or without antialiasing) take torch's fixed-point path: the same
// separable passes with int16 weights, each pass rounding to uint8 (interpolate_uint8_separably); without
// antialiasing the taps are the float path's, folded at the borders as torch's uint8 kernel folds them.
//
// torch's checks, result sizes and memory formats come from the structured ops' meta functions.

#include <ATen/core/Tensor.h>
#include <ATen/native/UpSample.h>
#include <ATen/ops/_upsample_bicubic2d_aa_backward_meta_dispatch.h>
#include <ATen/ops/_upsample_bicubic2d_aa_meta_dispatch.h>
#include <ATen/ops/_upsample_bilinear2d_aa_backward_meta_dispatch.h>
#include <ATen/ops/_upsample_bilinear2d_aa_meta_dispatch.h>
#include <ATen/ops/_upsample_nearest_exact1d_backward_meta_dispatch.h>
#include <ATen/ops/_upsample_nearest_exact1d_meta_dispatch.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_meta_dispatch.h>
#include <ATen/ops/_upsample_nearest_exact2d_meta_dispatch.h>
#include <ATen/ops/_upsample_nearest_exact3d_backward_meta_dispatch.h>
#include <ATen/ops/_upsample_nearest_exact3d_meta_dispatch.h>
#include <ATen/ops/upsample_bicubic2d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_bicubic2d_meta_dispatch.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_bilinear2d_meta_dispatch.h>
#include <ATen/ops/upsample_linear1d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_linear1d_meta_dispatch.h>
#include <ATen/ops/upsample_nearest1d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_nearest1d_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_nearest2d_meta_dispatch.h>
#include <ATen/ops/upsample_nearest3d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_nearest3d_meta_dispatch.h>
#include <ATen/ops/upsample_trilinear3d_backward_meta_dispatch.h>
#include <ATen/ops/upsample_trilinear3d_meta_dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/read_on_host.h"
#include "aten_ops/sliding_window.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny {
namespace {

using Scale = std::optional<double>;

enum class Mode { Nearest, NearestExact, Linear, Cubic, LinearAA, CubicAA };

const char* mode_name(Mode m, size_t nd) {
  static const char* names[6][3] = {
      {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d"},
      {"_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"},
      {"upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d"},
      {"", "upsample_bicubic2d", ""},
      {"", "_upsample_bilinear2d_aa", ""},
      {"", "_upsample_bicubic2d_aa", ""}};
  return names[static_cast<int>(m)][nd - 1];
}

bool antialiased(Mode m) { return m == Mode::LinearAA || m == Mode::CubicAA; }

at::Tensor like_meta(const at::Tensor& meta, const at::Tensor& self) {
  return empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), self.device());
}

// ---- (out,)-shaped index and weight math on iotas ----

UOpPtr fill(const UOpPtr& c, int64_t n) { return window::expanded(window::reshaped(c, {1}), {n}); }
UOpPtr fconst(DType dt, double v, int64_t n) { return fill(const_float(dt, v), n); }
UOpPtr iconst(int64_t v, int64_t n) { return fill(const_int(DType::Int64, v), n); }
UOpPtr bin(Ops op, const UOpPtr& a, const UOpPtr& b) { return alu(op, a, b); }

// The (int64)floorf(v) of torch's guard_index_and_lambda (floorf: a float64 index rounds to float32 first).
UOpPtr floor_index(const UOpPtr& v) { return cast(alu(Ops::FLOOR, cast(v, DType::Float32)), DType::Int64); }

struct Tap {
  UOpPtr index;  // (out,) int64
  UOpPtr weight; // (out,) in the compute dtype, or null for 1
  UOpPtr valid;  // (out,) bool: whether the output uses this tap at all, or null for all of them
};

// How one dim maps: unchanged, a whole-factor repeat (a view), or taps (a reduce).
struct DimMap {
  int64_t in, out;
  int64_t repeat = 0; // > 0: output o reads input o / repeat
  bool identity = false;
  std::vector<Tap> taps;
  UOpPtr wt_max =
      nullptr; // (out,) float64: what torch takes the uint8 weights' precision from, when not the largest tap
};

// torch's nearest index of output o (UpSample.h: nearest_idx / nearest_exact_idx), on the host.
int64_t nearest_index(Mode m, int64_t o, int64_t in, int64_t out, Scale scale) {
  return m == Mode::Nearest ? at::native::nearest_idx(o, in, out, scale)
                            : at::native::nearest_exact_idx(o, in, out, scale);
}

DimMap nearest_map(Mode m, int64_t in, int64_t out, Scale scale) {
  DimMap d{in, out, 0, false, {}};
  // The index table, as torch computes it: a whole-factor pattern needs no reduce.
  bool same = true, repeat = out % in == 0;
  for (int64_t o = 0; o < out; o++) {
    int64_t i = nearest_index(m, o, in, out, scale);
    same = same && i == o;
    repeat = repeat && i == o / (out / in);
  }
  UOpPtr o = iota(out, DType::Int64), pos;
  if (same && in == out)
    d.identity = true;
  else if (repeat)
    d.repeat = out / in;
  if (d.identity || d.repeat) {
    d.taps.push_back({d.identity ? o : bin(Ops::IDIV, o, iconst(d.repeat, out)), nullptr, nullptr});
    return d;
  }
  float s = at::native::compute_scales_value<float>(scale, in, out);
  if (m == Mode::Nearest) {
    // floorf(o * scale) in float32
    pos = bin(Ops::MUL, cast(o, DType::Float32), fconst(DType::Float32, s, out));
  } else {
    // floorf((o + 0.5) * scale): the product is a double, rounded to float by floorf
    UOpPtr c = bin(Ops::ADD, cast(o, DType::Float64), fconst(DType::Float64, 0.5, out));
    pos = bin(Ops::MUL, c, fconst(DType::Float64, static_cast<double>(s), out));
  }
  d.taps.push_back({bin(Ops::MIN, floor_index(pos), iconst(in - 1, out)), nullptr, nullptr});
  return d;
}

// torch's area_pixel_compute_source_index in the compute dtype dt.
UOpPtr source_index(int64_t out, double ratio, bool align_corners, bool cubic, DType dt) {
  UOpPtr o = cast(iota(out, DType::Int64), dt), r = fconst(dt, ratio, out);
  if (align_corners) return bin(Ops::MUL, r, o);
  UOpPtr half = fconst(dt, 0.5, out);
  UOpPtr src = bin(Ops::SUB, bin(Ops::MUL, r, bin(Ops::ADD, o, half)), half);
  return cubic ? src : bin(Ops::MAX, src, fconst(dt, 0, out));
}

double ratio(int64_t in, int64_t out, bool align_corners, Scale scale, DType dt) {
  return dt == DType::Float64 ? at::native::area_pixel_compute_scale<double>(in, out, align_corners, scale)
                              : at::native::area_pixel_compute_scale<float>(in, out, align_corners, scale);
}

// torch's cubic_convolution1 ((A + 2) * x - (A + 3)) * x * x + 1, for |x| <= 1, and cubic_convolution2
// ((A * x - 5 * A) * x + 8 * A) * x - 4 * A, for 1 < |x| < 2, term by term as torch writes them, over (out,).
UOpPtr cubic_near(const UOpPtr& x, double A) {
  int64_t out = x->shape[0];
  DType dt = x->dtype;
  UOpPtr a = bin(Ops::SUB, bin(Ops::MUL, fconst(dt, A + 2, out), x), fconst(dt, A + 3, out));
  return bin(Ops::ADD, bin(Ops::MUL, bin(Ops::MUL, a, x), x), fconst(dt, 1, out));
}
UOpPtr cubic_far(const UOpPtr& x, double A) {
  int64_t out = x->shape[0];
  DType dt = x->dtype;
  UOpPtr a = bin(Ops::SUB, bin(Ops::MUL, fconst(dt, A, out), x), fconst(dt, 5 * A, out));
  return bin(Ops::SUB, bin(Ops::MUL, bin(Ops::ADD, bin(Ops::MUL, a, x), fconst(dt, 8 * A, out)), x),
             fconst(dt, 4 * A, out));
}

// The map of a dim that does not change: each output reads its own input.
DimMap identity_map(int64_t n) { return {n, n, 0, true, {{iota(n, DType::Int64), nullptr, nullptr}}}; }

DimMap linear_map(int64_t in, int64_t out, bool align_corners, Scale scale, DType dt) {
  DimMap d{in, out, 0, false, {}};
  if (in == out) return identity_map(out); // torch copies
  UOpPtr real = source_index(out, ratio(in, out, align_corners, scale, dt), align_corners, false, dt);
  UOpPtr i0 = bin(Ops::MIN, floor_index(real), iconst(in - 1, out));
  UOpPtr l1 = bin(Ops::MIN, bin(Ops::MAX, bin(Ops::SUB, real, cast(i0, dt)), fconst(dt, 0, out)), fconst(dt, 1, out));
  UOpPtr i1 = bin(Ops::ADD, i0, cast(bin(Ops::CMPLT, i0, iconst(in - 1, out)), DType::Int64));
  d.taps = {{i0, bin(Ops::SUB, fconst(dt, 1, out), l1), nullptr}, {i1, l1, nullptr}};
  return d;
}

DimMap cubic_map(int64_t in, int64_t out, bool align_corners, Scale scale, DType dt) {
  DimMap d{in, out, 0, false, {}};
  UOpPtr real = source_index(out, ratio(in, out, align_corners, scale, dt), align_corners, true, dt);
  UOpPtr i = bin(Ops::MIN, floor_index(real), iconst(in - 1, out));
  UOpPtr t = bin(Ops::MIN, bin(Ops::MAX, bin(Ops::SUB, real, cast(i, dt)), fconst(dt, 0, out)), fconst(dt, 1, out));
  // get_cubic_upsample_coefficients with A = -0.75
  constexpr double A = -0.75;
  UOpPtr one = fconst(dt, 1, out), x2 = bin(Ops::SUB, one, t);
  std::vector<UOpPtr> w{cubic_far(bin(Ops::ADD, t, one), A), cubic_near(t, A), cubic_near(x2, A),
                        cubic_far(bin(Ops::ADD, x2, one), A)};
  for (int64_t j = 0; j < 4; j++) {
    UOpPtr at = bin(Ops::ADD, i, iconst(j - 1, out));
    at = bin(Ops::MAX, bin(Ops::MIN, at, iconst(in - 1, out)), iconst(0, out));
    d.taps.push_back({at, w[static_cast<size_t>(j)], nullptr});
  }
  return d;
}

// torch's _compute_indices_min_size_weights_aa in dt (its scalar_t), with the same float and double steps:
// output o reads inputs xmin .. xmin + xsize - 1 around its center scale * (o + 0.5), weighted by the filter
// (a triangle, or Keys' cubic with a = -0.5) of their distance, normalized to sum 1.
DimMap aa_map(Mode m, int64_t in, int64_t out, bool align_corners, Scale scale, DType dt) {
  if (in == out) return identity_map(out); // torch leaves the dim as it is
  DimMap d{in, out, 0, false, {}};
  auto as_dt = [dt](double v) { return dt == DType::Float32 ? static_cast<double>(static_cast<float>(v)) : v; };
  double s = ratio(in, out, align_corners, scale, dt), half_width = m == Mode::LinearAA ? 1.0 : 2.0;
  double support = as_dt(s >= 1.0 ? half_width * s : half_width), invscale = as_dt(s >= 1.0 ? 1.0 / s : 1.0);
  int64_t taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  auto f64 = [&](double v) { return fconst(DType::Float64, v, out); };
  auto k = [&](double v) { return fconst(dt, v, out); };
  auto to_index = [&](const UOpPtr& v) { return cast(bin(Ops::ADD, cast(v, DType::Float64), f64(0.5)), DType::Int64); };
  UOpPtr o = cast(iota(out, DType::Int64), DType::Float64);
  UOpPtr center = cast(bin(Ops::MUL, f64(s), bin(Ops::ADD, o, f64(0.5))), dt);
  UOpPtr xmin = bin(Ops::MAX, to_index(bin(Ops::SUB, center, k(support))), iconst(0, out));
  UOpPtr xsize = bin(Ops::SUB, bin(Ops::MIN, to_index(bin(Ops::ADD, center, k(support))), iconst(in, out)), xmin);
  xsize = bin(Ops::MIN, bin(Ops::MAX, xsize, iconst(0, out)), iconst(taps, out));
  // the window of each output and its weights are computed once, into (out,) buffers: every element of the
  // result's rows reads them, and a weight's total sums all the taps' filters
  xmin = contiguous(xmin);
  xsize = contiguous(xsize);
  auto filter = [&](const UOpPtr& x0) {
    UOpPtr x = alu(Ops::ABS, x0);
    if (m == Mode::LinearAA) return where(bin(Ops::CMPLT, x, k(1)), bin(Ops::SUB, k(1), x), k(0));
    constexpr double A = -0.5; // Keys' cubic, as PIL's antialiased resampling
    return where(bin(Ops::CMPLT, x, k(1)), cubic_near(x, A), where(bin(Ops::CMPLT, x, k(2)), cubic_far(x, A), k(0)));
  };
  std::vector<UOpPtr> weights, used;
  UOpPtr total;
  for (int64_t j = 0; j < taps; j++) {
    UOpPtr at = bin(Ops::ADD, xmin, iconst(j, out));
    // (j + xmin - center + 0.5) * invscale: the difference in dt, the rest in double, the filter in dt
    UOpPtr x = bin(Ops::ADD, cast(bin(Ops::SUB, cast(at, dt), center), DType::Float64), f64(0.5));
    weights.push_back(filter(cast(bin(Ops::MUL, x, f64(invscale)), dt)));
    used.push_back(bin(Ops::CMPLT, iconst(j, out), xsize));
    total = total ? where(used.back(), bin(Ops::ADD, total, weights.back()), total)
                  : where(used.back(), weights.back(), k(0));
    d.taps.push_back({bin(Ops::MIN, at, iconst(in - 1, out)), nullptr, j == 0 ? nullptr : used.back()});
  }
  UOpPtr divide = bin(Ops::CMPNE, total, k(0));
  for (size_t j = 0; j < d.taps.size(); j++)
    d.taps[j].weight = contiguous(where(divide, bin(Ops::FDIV, weights[j], total), weights[j]));
  return d;
}

// torch's uint8 taps without antialiasing (_compute_indices_min_size_weights, in double): the float path's
// source index and lambda, then interp_size taps (2 or 4) from input_index - interp_size / 2 + 1, those before
// the first input or past the last folded into the first or last input's weight (the float path reads those
// clamped instead), the filter a triangle or Keys' cubic with a = -0.75. The precision comes from the largest
// weight any slot holds while the taps add up (its running sums, as torch updates it).
DimMap uint8_map(Mode m, int64_t in, int64_t out, bool align_corners, Scale scale) {
  if (in == out) return identity_map(out); // torch leaves the dim as it is
  DimMap d{in, out, 0, false, {}};
  const DType f64 = DType::Float64;
  const bool cubic = m == Mode::Cubic;
  const int64_t interp = cubic ? 4 : 2, support = interp / 2;
  auto k = [&](double v) { return fconst(f64, v, out); };
  UOpPtr real = source_index(out, ratio(in, out, align_corners, scale, f64), align_corners, cubic, f64);
  UOpPtr i = bin(Ops::MIN, floor_index(real), iconst(in - 1, out));
  UOpPtr lambda = bin(Ops::MIN, bin(Ops::MAX, bin(Ops::SUB, real, cast(i, f64)), k(0)), k(1));
  UOpPtr first = bin(Ops::ADD, i, iconst(1 - support, out));
  UOpPtr index_min = bin(Ops::MAX, first, iconst(0, out));
  UOpPtr index_size =
      bin(Ops::SUB, bin(Ops::MIN, bin(Ops::ADD, i, iconst(support + 1, out)), iconst(in, out)), index_min);
  index_size = bin(Ops::MIN, bin(Ops::MAX, index_size, iconst(0, out)), iconst(interp, out));
  auto filter = [&](const UOpPtr& x0) {
    UOpPtr x = alu(Ops::ABS, x0);
    if (!cubic) return where(bin(Ops::CMPLT, x, k(1)), bin(Ops::SUB, k(1), x), k(0));
    constexpr double A = -0.75;
    return where(bin(Ops::CMPLT, x, k(1)), cubic_near(x, A), where(bin(Ops::CMPLT, x, k(2)), cubic_far(x, A), k(0)));
  };
  std::vector<UOpPtr> w, slot;
  for (int64_t j = 0; j < interp; j++) {
    w.push_back(filter(bin(Ops::SUB, k(static_cast<double>(j + 1 - support)), lambda)));
    UOpPtr at = bin(Ops::MIN, bin(Ops::MAX, bin(Ops::ADD, first, iconst(j, out)), iconst(0, out)), iconst(in - 1, out));
    slot.push_back(bin(Ops::SUB, at, index_min));
  }
  UOpPtr wt_max = k(0);
  for (size_t j = 0; j < w.size(); j++) { // slot j's running sum once tap j is added
    UOpPtr running = w[j];
    for (size_t e = 0; e < j; e++)
      running = bin(Ops::ADD, running, where(bin(Ops::CMPEQ, slot[e], slot[j]), w[e], k(0)));
    wt_max = bin(Ops::MAX, wt_max, running);
  }
  d.wt_max = wt_max;
  for (int64_t t = 0; t < interp; t++) {
    UOpPtr weight = k(0);
    for (size_t j = 0; j < w.size(); j++)
      weight = bin(Ops::ADD, weight, where(bin(Ops::CMPEQ, slot[j], iconst(t, out)), w[j], k(0)));
    UOpPtr at = bin(Ops::MIN, bin(Ops::ADD, index_min, iconst(t, out)), iconst(in - 1, out));
    d.taps.push_back({at, weight, t == 0 ? nullptr : bin(Ops::CMPLT, iconst(t, out), index_size)});
  }
  return d;
}

DimMap dim_map(Mode m, int64_t in, int64_t out, bool align_corners, Scale scale, DType dt) {
  switch (m) {
  case Mode::LinearAA:
  case Mode::CubicAA:
    return aa_map(m, in, out, align_corners, scale, dt);
  case Mode::Nearest:
  case Mode::NearestExact:
    return nearest_map(m, in, out, scale);
  case Mode::Linear:
    return linear_map(in, out, align_corners, scale, dt);
  case Mode::Cubic:
    return cubic_map(in, out, align_corners, scale, dt);
  }
  return {};
}

// ---- applying a map along one axis ----

Shape with_dims(const Shape& s, size_t axis, std::initializer_list<int64_t> dims) {
  Shape r(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(axis));
  r.insert(r.end(), dims);
  r.insert(r.end(), s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, s.end());
  return r;
}

UOpPtr along(const UOpPtr& v, const Shape& shape, size_t axis) {
  Shape s(shape.size(), 1);
  s[axis] = v->shape[0];
  return window::expanded(window::reshaped(v, s), shape);
}

// sum over the taps of where(index == position, weight * value, 0) over `big`, whose axis
// `taps_axis` holds the output positions and `pos_axis` the input positions.
UOpPtr tap_sum(const DimMap& d, const UOpPtr& value, size_t taps_axis, size_t pos_axis) {
  const Shape& big = value->shape;
  UOpPtr pos = along(iota(d.in, DType::Int64), big, pos_axis),
         zero = window::expanded(window::reshaped(const_like(value, 0), Shape(big.size(), 1)), big);
  UOpPtr sum;
  for (const Tap& t : d.taps) {
    UOpPtr v = t.weight ? bin(Ops::MUL, along(t.weight, big, taps_axis), value) : value;
    UOpPtr term = where(bin(Ops::CMPEQ, along(t.index, big, taps_axis), pos), v, zero);
    sum = sum ? bin(Ops::ADD, sum, term) : term;
  }
  return sum;
}

// x (lead..., in...) read at the taps of every dim: the taps of dim d combine the values of dim d + 1
// read at each of their indices. `at` is the flat input index so far, of the result's shape.
UOpPtr gather_taps(const UOpPtr& flat, const std::vector<DimMap>& maps, size_t d, const UOpPtr& at, size_t lead,
                   const Shape& in) {
  if (d == maps.size()) return gather(flat, at);
  const Shape& shape = at->shape;
  int64_t stride = 1;
  for (size_t i = d + 1; i < in.size(); i++)
    stride *= in[i];
  UOpPtr sum;
  for (const Tap& t : maps[d].taps) {
    UOpPtr offset = along(bin(Ops::MUL, t.index, iconst(stride, t.index->shape[0])), shape, lead + d);
    UOpPtr v = gather_taps(flat, maps, d + 1, bin(Ops::ADD, at, offset), lead, in);
    if (t.weight) v = bin(Ops::MUL, v, along(t.weight, shape, lead + d));
    if (sum && t.valid) // an unused tap adds 0 (not its weight 0 times a value that may be inf)
      v = where(along(t.valid, shape, lead + d), v, aten_ops::like(v, 0));
    sum = sum ? bin(Ops::ADD, sum, v) : v;
  }
  return sum;
}

// x (lead..., in...) interpolated to (lead..., out...).
UOpPtr interpolate(const UOpPtr& x, const std::vector<DimMap>& maps) {
  size_t nd = maps.size(), lead = x->shape.size() - nd;
  bool views = true;
  for (const DimMap& d : maps)
    views = views && (d.identity || d.repeat);
  if (views) { // whole-factor repeats: a broadcast view
    UOpPtr v = x;
    for (size_t a = lead; a < x->shape.size(); a++) {
      const DimMap& d = maps[a - lead];
      if (d.identity) continue;
      const Shape& s = v->shape;
      v = window::reshaped(
          window::expanded(window::reshaped(v, with_dims(s, a, {d.in, 1})), with_dims(s, a, {d.in, d.repeat})),
          with_dims(s, a, {d.out}));
    }
    return v;
  }
  Shape result(x->shape.begin(), x->shape.begin() + static_cast<std::ptrdiff_t>(lead)), in;
  int64_t planes = prod(result), plane = 1;
  for (const DimMap& d : maps) {
    result.push_back(d.out);
    in.push_back(d.in);
    plane *= d.in;
  }
  // The flat index of each result element's plane, times the plane size.
  Shape lead_ones(result.size(), 1);
  std::copy(result.begin(), result.begin() + static_cast<std::ptrdiff_t>(lead), lead_ones.begin());
  UOpPtr base = bin(Ops::MUL, iota(planes, DType::Int64), iconst(plane, planes));
  base = window::expanded(window::reshaped(base, lead_ones), result);
  return gather_taps(window::reshaped(x, {prod(x->shape)}), maps, 0, base, lead, in);
}

// Antialiased: one dim at a time, the last first, each pass computed into a buffer of its own (torch's
// temporary; and a window of the previous pass's results is read by many outputs).
UOpPtr interpolate_separably(const UOpPtr& x, const std::vector<DimMap>& maps) {
  size_t lead = x->shape.size() - maps.size();
  UOpPtr v = x;
  for (size_t d = maps.size(); d-- > 0;) {
    if (maps[d].identity) continue;
    std::vector<DimMap> one;
    for (size_t i = 0; i < maps.size(); i++) {
      int64_t n = v->shape[lead + i];
      one.push_back(i == d ? maps[i] : identity_map(n));
    }
    v = contiguous(interpolate(v, one));
  }
  return v;
}

// torch's uint8 antialiased path (UpSampleKernel.cpp: _compute_index_ranges_int16_weights and the separable
// uint8 loops): each dim's weights in double, as for float64, scaled by 2^precision and rounded half away from
// zero to integers, the precision the largest under which the axis's largest weight stays below 2^15. An output
// is (sum of weight * value + 2^(precision - 1)) >> precision, clamped to [0, 255]; each pass rounds to uint8
// before the next (the last dim first). Each dim's largest weight is read to the host by itself (one small
// kernel each: the OpenCL lowering of both maxima in one kernel staged a tile outside its loop, for 8x10 to 12x20).
UOpPtr interpolate_uint8_separably(const UOpPtr& x, std::vector<DimMap> maps, c10::Device device) {
  std::vector<int> precision(maps.size(), 0);
  for (size_t i = 0; i < maps.size(); i++) {
    DimMap& d = maps[i];
    if (d.identity) continue;
    UOpPtr zero = fconst(DType::Float64, 0, d.out), m = zero; // torch's largest starts at 0
    if (d.wt_max)
      m = d.wt_max;
    else
      for (const Tap& t : d.taps)
        m = bin(Ops::MAX, m, t.valid ? where(t.valid, t.weight, zero) : t.weight);
    int64_t bits = aten_ops::read_on_host({bitcast(reduce(m, Ops::MAX, {0}), DType::Int64)}, device)[0];
    double wt_max = std::bit_cast<double>(bits);
    int p = 0;
    while (p < 22 && static_cast<int>(0.5 + wt_max * static_cast<double>(1 << (p + 1))) < (1 << 15))
      p++;
    precision[i] = p;
    UOpPtr scale = fconst(DType::Float64, static_cast<double>(1 << p), d.out),
           half = fconst(DType::Float64, 0.5, d.out);
    for (Tap& t : d.taps) {
      UOpPtr v = bin(Ops::MUL, t.weight, scale);
      UOpPtr rounded =
          where(bin(Ops::CMPLT, v, fconst(DType::Float64, 0, d.out)), bin(Ops::SUB, v, half), bin(Ops::ADD, v, half));
      t.weight = contiguous(cast(rounded, DType::Int32)); // C's (int): toward zero
    }
  }
  size_t lead = x->shape.size() - maps.size();
  UOpPtr v = x;
  for (size_t d = maps.size(); d-- > 0;) {
    if (maps[d].identity) continue;
    std::vector<DimMap> one;
    for (size_t i = 0; i < maps.size(); i++)
      one.push_back(i == d ? maps[i] : identity_map(v->shape[lead + i]));
    UOpPtr sum = interpolate(cast(v, DType::Int32), one);
    int p = precision[d];
    UOpPtr r = bin(Ops::SHR, bin(Ops::ADD, sum, aten_ops::like(sum, p > 0 ? 1 << (p - 1) : 0)), aten_ops::like(sum, p));
    r = bin(Ops::MIN, bin(Ops::MAX, r, aten_ops::like(r, 0)), aten_ops::like(r, 255));
    v = contiguous(cast(r, DType::UInt8));
  }
  return v;
}

// The antialiased transpose along `axis`: each output's used taps add weight * g at their input positions.
UOpPtr scatter_backward(const UOpPtr& g, const DimMap& d, size_t axis) {
  if (d.identity) return g;
  const Shape& s = g->shape;
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < s.size(); i++)
    (i < axis ? outer : inner) *= i == axis ? 1 : s[i];
  Shape three{outer, d.out, inner};
  UOpPtr g3 = window::reshaped(g, three);
  UOpPtr rows = along(bin(Ops::MUL, iota(outer, DType::Int64), iconst(d.in * inner, outer)), three, 0);
  UOpPtr columns = along(iota(inner, DType::Int64), three, 2);
  UOpPtr acc = aten_ops::fixed(g->dtype, 0, {outer * d.in * inner});
  int64_t n = prod(three);
  for (const Tap& t : d.taps) {
    UOpPtr at =
        bin(Ops::ADD, bin(Ops::ADD, rows, along(bin(Ops::MUL, t.index, iconst(inner, d.out)), three, 1)), columns);
    if (t.valid) at = where(along(t.valid, three, 1), at, aten_ops::fixed(DType::Int64, -1, three)); // skipped
    UOpPtr v = bin(Ops::MUL, along(t.weight, three, 1), g3);
    acc = scatter(acc, window::reshaped(at, {n}), window::reshaped(v, {n}), Ops::ADD);
  }
  return window::reshaped(acc, with_dims(s, axis, {d.in}));
}

// The transpose: g with axis `axis` (of size d.out) sent back to the d.in input positions.
UOpPtr interpolate_backward(const UOpPtr& g, const DimMap& d, size_t axis) {
  const Shape& s = g->shape;
  if (d.identity) return g;
  int64_t next = static_cast<int64_t>(axis) + 1;
  if (d.repeat)
    return window::reshaped(reduce(window::reshaped(g, with_dims(s, axis, {d.in, d.repeat})), Ops::ADD, {next}),
                            with_dims(s, axis, {d.in}));
  UOpPtr big = window::expanded(window::reshaped(g, with_dims(s, axis, {1, d.out})), with_dims(s, axis, {d.in, d.out}));
  return window::reshaped(reduce(tap_sum(d, big, axis + 1, axis), Ops::ADD, {next}), with_dims(s, axis, {d.in}));
}

struct Request {
  Mode mode;
  bool align_corners;
  std::vector<Scale> scales;
};

void check_dtype(const at::Tensor& t, Mode m, size_t nd, bool backward) {
  at::ScalarType st = t.scalar_type();
  bool nearest = m == Mode::Nearest || m == Mode::NearestExact;
  // torch's CPU kernels also take uint8: nearest (an exact gather), and bilinear and bicubic 2d with and without
  // antialiasing, with fixed-point weights (interpolate_uint8_separably).
  // antialiased: float and double (torch computes the weights in the input's dtype), and uint8
  TORCH_CHECK_NOT_IMPLEMENTED(!antialiased(m) || st == at::kFloat || st == at::kDouble || st == at::kByte,
                              "\"compute_index_ranges_weights\" not implemented for '", st, "'");
  bool fixed_point = antialiased(m) || (nd == 2 && (m == Mode::Linear || m == Mode::Cubic));
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st) || (!backward && (nearest || fixed_point) && st == at::kByte),
                              "\"", mode_name(m, nd), backward ? "_backward" : "", "\" not implemented for '", st,
                              "' on tiny");
}

std::vector<DimMap> maps(const Request& r, const Shape& in, const Shape& out, DType dt) {
  std::vector<DimMap> m;
  for (size_t i = 0; i < in.size(); i++)
    m.push_back(dim_map(r.mode, in[i], out[i], r.align_corners, r.scales[i], dt));
  return m;
}

DType compute_dtype(const Request& r, DType dt) {
  bool nearest = r.mode == Mode::Nearest || r.mode == Mode::NearestExact;
  return nearest && !is_float(dt) ? dt : opmath(dt);
}

void write_upsample(const at::Tensor& self, const at::Tensor& out, const Request& r) {
  size_t nd = r.scales.size();
  check_dtype(self, r.mode, nd, false);
  if (out.numel() == 0) return;
  DType dt = to_tiny_dtype(self.scalar_type()), ct = compute_dtype(r, dt);
  Shape s(self.sizes().begin(), self.sizes().end()), o(out.sizes().begin(), out.sizes().end());
  size_t lead = s.size() - nd;
  std::vector<DimMap> m = maps(r, Shape(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end()),
                               Shape(o.begin() + static_cast<std::ptrdiff_t>(lead), o.end()), opmath(dt));
  if (dt == DType::UInt8 && r.mode != Mode::Nearest && r.mode != Mode::NearestExact) {
    m.clear();
    for (size_t i = 0; i < nd; i++) {
      int64_t in = s[lead + i], to = o[lead + i];
      m.push_back(antialiased(r.mode) ? dim_map(r.mode, in, to, r.align_corners, r.scales[i], DType::Float64)
                                      : uint8_map(r.mode, in, to, r.align_corners, r.scales[i]));
    }
    return write(out, interpolate_uint8_separably(read(self), m, self.device()));
  }
  UOpPtr x = cast(read(self), ct);
  write(out, cast(antialiased(r.mode) ? interpolate_separably(x, m) : interpolate(x, m), dt));
}

void write_upsample_backward(const at::Tensor& grad_output, c10::IntArrayRef input_size, const at::Tensor& grad_input,
                             const Request& r) {
  size_t nd = r.scales.size();
  check_dtype(grad_output, r.mode, nd, true);
  if (grad_input.numel() == 0) return;
  DType dt = to_tiny_dtype(grad_output.scalar_type()), ct = opmath(dt);
  Shape s(input_size.begin(), input_size.end()), o(grad_output.sizes().begin(), grad_output.sizes().end());
  size_t lead = s.size() - nd;
  std::vector<DimMap> m = maps(r, Shape(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end()),
                               Shape(o.begin() + static_cast<std::ptrdiff_t>(lead), o.end()), ct);
  UOpPtr g = cast(read(grad_output), ct);
  for (size_t i = 0; i < nd; i++)
    g = antialiased(r.mode) ? scatter_backward(g, m[i], lead + i) : interpolate_backward(g, m[i], lead + i);
  write(grad_input, cast(g, dt));
}

// ---- kernels: one template per argument list ----

template <Mode M, auto Meta, class... S>
at::Tensor upsample(const at::Tensor& self, c10::IntArrayRef output_size, S... scales) {
  at::Tensor out = like_meta(Meta(self, output_size, scales...), self);
  write_upsample(self, out, {M, false, {scales...}});
  return out;
}

template <Mode M, auto Meta, class... S>
at::Tensor upsample_aligned(const at::Tensor& self, c10::IntArrayRef output_size, bool align_corners, S... scales) {
  at::Tensor out = like_meta(Meta(self, output_size, align_corners, scales...), self);
  write_upsample(self, out, {M, align_corners, {scales...}});
  return out;
}

template <Mode M, auto Meta, class... S>
at::Tensor upsample_backward(const at::Tensor& grad_output, c10::IntArrayRef output_size, c10::IntArrayRef input_size,
                             S... scales) {
  at::Tensor grad_input = like_meta(Meta(grad_output, output_size, input_size, scales...), grad_output);
  write_upsample_backward(grad_output, input_size, grad_input, {M, false, {scales...}});
  return grad_input;
}

template <Mode M, auto Meta, class... S>
at::Tensor upsample_aligned_backward(const at::Tensor& grad_output, c10::IntArrayRef output_size,
                                     c10::IntArrayRef input_size, bool align_corners, S... scales) {
  at::Tensor grad_input = like_meta(Meta(grad_output, output_size, input_size, align_corners, scales...), grad_output);
  write_upsample_backward(grad_output, input_size, grad_input, {M, align_corners, {scales...}});
  return grad_input;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  using N = Scale;
  m.impl("upsample_nearest1d", TORCH_FN((upsample<Mode::Nearest, &at::meta::upsample_nearest1d, N>)));
  m.impl("upsample_nearest2d", TORCH_FN((upsample<Mode::Nearest, &at::meta::upsample_nearest2d, N, N>)));
  m.impl("upsample_nearest3d", TORCH_FN((upsample<Mode::Nearest, &at::meta::upsample_nearest3d, N, N, N>)));
  m.impl("_upsample_nearest_exact1d",
         TORCH_FN((upsample<Mode::NearestExact, &at::meta::_upsample_nearest_exact1d, N>)));
  m.impl("_upsample_nearest_exact2d",
         TORCH_FN((upsample<Mode::NearestExact, &at::meta::_upsample_nearest_exact2d, N, N>)));
  m.impl("_upsample_nearest_exact3d",
         TORCH_FN((upsample<Mode::NearestExact, &at::meta::_upsample_nearest_exact3d, N, N, N>)));
  m.impl("upsample_linear1d", TORCH_FN((upsample_aligned<Mode::Linear, &at::meta::upsample_linear1d, N>)));
  m.impl("upsample_bilinear2d", TORCH_FN((upsample_aligned<Mode::Linear, &at::meta::upsample_bilinear2d, N, N>)));
  m.impl("upsample_trilinear3d", TORCH_FN((upsample_aligned<Mode::Linear, &at::meta::upsample_trilinear3d, N, N, N>)));
  m.impl("upsample_bicubic2d", TORCH_FN((upsample_aligned<Mode::Cubic, &at::meta::upsample_bicubic2d, N, N>)));

  m.impl("_upsample_bilinear2d_aa",
         TORCH_FN((upsample_aligned<Mode::LinearAA, &at::meta::_upsample_bilinear2d_aa, N, N>)));
  m.impl("_upsample_bicubic2d_aa",
         TORCH_FN((upsample_aligned<Mode::CubicAA, &at::meta::_upsample_bicubic2d_aa, N, N>)));

  m.impl("upsample_nearest1d_backward",
         TORCH_FN((upsample_backward<Mode::Nearest, &at::meta::upsample_nearest1d_backward, N>)));
  m.impl("upsample_nearest2d_backward",
         TORCH_FN((upsample_backward<Mode::Nearest, &at::meta::upsample_nearest2d_backward, N, N>)));
  m.impl("upsample_nearest3d_backward",
         TORCH_FN((upsample_backward<Mode::Nearest, &at::meta::upsample_nearest3d_backward, N, N, N>)));
  m.impl("_upsample_nearest_exact1d_backward",
         TORCH_FN((upsample_backward<Mode::NearestExact, &at::meta::_upsample_nearest_exact1d_backward, N>)));
  m.impl("_upsample_nearest_exact2d_backward",
         TORCH_FN((upsample_backward<Mode::NearestExact, &at::meta::_upsample_nearest_exact2d_backward, N, N>)));
  m.impl("_upsample_nearest_exact3d_backward",
         TORCH_FN((upsample_backward<Mode::NearestExact, &at::meta::_upsample_nearest_exact3d_backward, N, N, N>)));
  m.impl("upsample_linear1d_backward",
         TORCH_FN((upsample_aligned_backward<Mode::Linear, &at::meta::upsample_linear1d_backward, N>)));
  m.impl("upsample_bilinear2d_backward",
         TORCH_FN((upsample_aligned_backward<Mode::Linear, &at::meta::upsample_bilinear2d_backward, N, N>)));
  m.impl("upsample_trilinear3d_backward",
         TORCH_FN((upsample_aligned_backward<Mode::Linear, &at::meta::upsample_trilinear3d_backward, N, N, N>)));
  m.impl("upsample_bicubic2d_backward",
         TORCH_FN((upsample_aligned_backward<Mode::Cubic, &at::meta::upsample_bicubic2d_backward, N, N>)));
  m.impl("_upsample_bilinear2d_aa_backward",
         TORCH_FN((upsample_aligned_backward<Mode::LinearAA, &at::meta::_upsample_bilinear2d_aa_backward, N, N>)));
  m.impl("_upsample_bicubic2d_aa_backward",
         TORCH_FN((upsample_aligned_backward<Mode::CubicAA, &at::meta::_upsample_bicubic2d_aa_backward, N, N>)));
}

} // namespace tiny
