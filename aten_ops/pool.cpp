// Pooling: max_pool2d_with_indices, max_pool3d_with_indices, avg_pool2d/avg_pool3d, _adaptive_avg_pool2d/3d,
// adaptive_max_pool2d/3d, and their backward ops; im2col/col2im (F.unfold/F.fold) as window views. Each result is one
// reduce over a window view of the (padded) input, so it fuses with what produces the input and what consumes the
// result:
//   max         the MAX over the window, the input padded with the dtype's lowest value (-inf); windows of
//               up to 9 elements elementwise over the outputs instead (a loop clang vectorizes)
//   indices     the offset in the window of the first element equal to the max (as torch; the last NaN
//               when the max is NaN, as torch), decoded to the flat input-plane index
//   max grad    for each input position, the sum over the windows that read it (the adjoint window
//               view) of grad_output where that window's index is this position (where its offset is
//               this position's, when the indices are the forward's own lazy result)
//   avg         the window sum divided by torch's divisor (a function of the output position, built
//               from iotas); its gradient spreads grad_output / divisor back through the windows
//   adaptive    windows [floor(i * in / out), ceil((i + 1) * in / out)): a plain window when out divides
//               in, else windows of varying start and length read with GATHER at computed indices
// torch's checks, output shapes and memory formats come from the structured ops' meta functions.
// Sums accumulate in float32 for float16/bfloat16 and in the windows' order, as torch's CPU kernels.

#include <ATen/core/Tensor.h>
#include <ATen/native/Pool.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/adaptive_max_pool2d_meta_dispatch.h>
#include <ATen/ops/adaptive_max_pool3d_backward_meta_dispatch.h>
#include <ATen/ops/adaptive_max_pool3d_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/avg_pool2d_meta_dispatch.h>
#include <ATen/ops/avg_pool3d_backward_meta_dispatch.h>
#include <ATen/ops/avg_pool3d_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_meta_dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "aten_ops/builders.h"
#include "aten_ops/sliding_window.h"
#include "aten_ops/window_read.h"
#include "compiler/lower.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny {
namespace {

using aten_ops::add;
using aten_ops::mul;

at::Tensor like_meta(const at::Tensor& meta, const at::Tensor& self) {
  return empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), self.device());
}

std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; i++)
    r.push_back(i);
  return r;
}

// A pooling argument as torch reads it: one value for every dim, or one per dim; empty means `fallback`.
Shape per_dim(c10::IntArrayRef a, size_t nd, const Shape& fallback) {
  if (a.empty()) return fallback;
  return a.size() == 1 ? Shape(nd, a[0]) : Shape(a.begin(), a.end());
}

window::Geometry geometry(size_t nd, c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding,
                          c10::IntArrayRef dilation) {
  Shape k = per_dim(kernel, nd, {});
  return {k, per_dim(stride, nd, k), per_dim(padding, nd, Shape(nd, 0)), per_dim(dilation, nd, Shape(nd, 1))};
}

Shape last(const Shape& s, size_t n) { return Shape(s.end() - static_cast<std::ptrdiff_t>(n), s.end()); }

// v (a UOp of `shape`'s trailing dims, or fewer) broadcast to `shape`, aligned at `at`.
UOpPtr broadcast(const UOpPtr& v, const Shape& shape, size_t at) {
  Shape s(shape.size(), 1);
  for (size_t d = 0; d < v->shape.size(); d++)
    s[at + d] = v->shape[d];
  return window::expanded(window::reshaped(v, s), shape);
}

UOpPtr index_const(int64_t v) { return const_int(DType::Int64, v); }
UOpPtr full(const UOpPtr& c, const Shape& shape) { return broadcast(c, shape, 0); }

// iota(n) * scale + shift as int64, on axis `at` of `shape`.
UOpPtr positions(int64_t n, int64_t scale, int64_t shift, const Shape& shape, size_t at) {
  UOpPtr i = iota(n, DType::Int64);
  UOpPtr v = add(mul(i, full(index_const(scale), {n})), full(index_const(shift), {n}));
  return broadcast(v, shape, at);
}

UOpPtr reduce_to(const UOpPtr& x, Ops op, const std::vector<int64_t>& axes, const Shape& shape) {
  return window::reshaped(reduce(x, op, axes), shape);
}

// Sums over the kernel axes in the order of the output positions (as torch's CPU kernels add into the
// input gradient): the adjoint window reads them in reverse.
UOpPtr sum_adjoint(const UOpPtr& u, size_t nd, const Shape& shape) {
  std::vector<bool> axes(u->shape.size(), false);
  for (size_t i = 0; i < nd; i++)
    axes[u->shape.size() - 1 - i] = true;
  size_t rank = u->shape.size();
  return reduce_to(window::flipped(u, axes), Ops::ADD,
                   range(static_cast<int64_t>(rank - nd), static_cast<int64_t>(rank)), shape);
}

void check_dtype(const at::Tensor& t, const char* op, bool ints, bool only_long) {
  at::ScalarType st = t.scalar_type();
  bool ok = at::isFloatingType(st) || (ints && at::isIntegralType(st, false) && (!only_long || st == at::kLong));
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", op, "\" not implemented for '", st, "'");
}

// ---- max pooling ----

UOpPtr lowest(DType dt) {
  switch (dt) {
  case DType::Int8:
    return const_int(dt, std::numeric_limits<int8_t>::lowest());
  case DType::Int16:
    return const_int(dt, std::numeric_limits<int16_t>::lowest());
  case DType::Int32:
    return const_int(dt, std::numeric_limits<int32_t>::lowest());
  case DType::Int64:
    return const_int(dt, std::numeric_limits<int64_t>::lowest());
  case DType::UInt8:
  case DType::UInt16:
  case DType::UInt32:
  case DType::UInt64:
    return const_int(dt, 0);
  default:
    return const_float(dt, -INFINITY);
  }
}

UOpPtr int32_const(int64_t v) { return const_int(DType::Int32, v); }

// Each element's offset in its window's scan order (row-major over the kernel dims), int32, for windows
// of `shape` whose kernel dims start at `at`.
UOpPtr window_offsets(const Shape& kernel, const Shape& shape, size_t at) {
  return broadcast(window::reshaped(iota(prod(kernel), DType::Int32), kernel), shape, at);
}

// Windows of up to this many elements are pooled elementwise (see max_pool): 2x2 and 3x3 windows (ResNet's stem pool,
// 3x3 stride 2 padding 1, (16, 64, 32, 32), one thread: its two reductions 10.5 ms -> two elementwise kernels 1.3 ms).
constexpr int64_t kUnrolledWindow = 9;

// Max pooling: the values, the flat input-plane indices torch returns, and the window offsets those
// decode (see PooledIndices).
struct MaxPool {
  UOpPtr values, indices, offsets;
};

// Max pooling x (lead..., in...) into `out` positions.
MaxPool max_pool(const UOpPtr& x_in, const Shape& out, const window::Geometry& g) {
  size_t nd = g.dims(), lead = x_in->shape.size() - nd;
  // Small windows that overlap read a computed input (ResNet's stem pool reads a batch norm's output) at each
  // of their elements: realized first as it is, not padded (the scheduler would realize the padded form, whose
  // masked reads decode each element's channel from a clamped flat index: (16, 64, 32, 32), one thread, 4.9 ms
  // against 0.4 ms for the plain one).
  bool overlapping = false;
  for (size_t i = 0; i < nd; i++)
    overlapping = overlapping || g.stride[i] < (g.kernel[i] - 1) * g.dilation[i] + 1;
  bool computed = x_in->op != Ops::BUFFER && !(x_in->op == Ops::VIEW && x_in->src[0]->op == Ops::BUFFER);
  UOpPtr x = overlapping && computed && prod(g.kernel) <= kUnrolledWindow ? contiguous(x_in) : x_in;
  Shape in = last(x->shape, nd);
  UOpPtr inside = window::pad_for_windows(full(const_int(DType::Bool, 1), x->shape), out, g);
  // windows inside the input (no padding, none past its end) read it as it is
  bool inside_only = true;
  for (size_t i = 0; i < nd; i++)
    inside_only = inside_only && g.padding[i] == 0 && g.span(i, out[i]) <= in[i];
  UOpPtr padded = inside_only
                      ? window::pad_for_windows(x, out, g)
                      : where(inside, window::pad_for_windows(x, out, g), full(lowest(x->dtype), inside->shape));
  // Overlapping windows strided along the last dim (a 3 x 3 pool with stride 2) read their taps 2 elements apart,
  // masked, scalar: they read a copy of the last dim's windows instead (unfolded_window, the pad in it), each tap
  // adjacent output columns, in vectors. One thread: ShuffleNet's stem pool, (16, 24, 32, 32) -> 16 x 16, the values
  // 0.34 -> 0.03 ms and the copy 0.16; ResNet-18's, (16, 64, 32, 32), 0.94 -> 0.15 and 0.43. The backward's
  // positions read the copy too, in vectors since render_c keeps clang from peeling their rows of 16 (see
  // inner_loop_pragma).
  UOpPtr win = window::windows(padded, out, g), valid = window::windows(inside, out, g);
  if (overlapping && g.stride.back() > 1 && prod(g.kernel) <= kUnrolledWindow)
    if (UOpPtr unfolded = unfolded_window(win, lead + nd - 1, 0, 0)) win = unfolded;
  std::vector<int64_t> kernel_axes = range(static_cast<int64_t>(lead + nd), static_cast<int64_t>(lead + 2 * nd));
  Shape result(x->shape.begin(), x->shape.begin() + static_cast<std::ptrdiff_t>(lead));
  result.insert(result.end(), out.begin(), out.end());
  // torch keeps the first position of the max, or the last NaN: the window offset of that element, which
  // decodes to the flat position.
  int64_t kk = prod(g.kernel);
  UOpPtr m, offsets;
  if (kk <= kUnrolledWindow) {
    // Small windows: elementwise over the outputs, each window element a strided view of the input, so
    // that clang vectorizes the loop over the outputs (a reduction computes a block of windows at a time,
    // scalar). The max in the window's scan order, as the reduction's: the same values. The demo's 2x2
    // pools, one thread (C kernels, thread CPU time): values 2.28 -> 0.79 ms (128 x 32 x 28 x 28) and
    // 1.04 -> 0.45 (128 x 64 x 14 x 14), the backward's offsets 2.5 -> 1.4 (128 x 32 x 28 x 28).
    std::vector<UOpPtr> xs, inside_at, prefix_max;
    for (int64_t k = 0; k < kk; k++) {
      std::vector<std::pair<int64_t, int64_t>> at;
      for (size_t d = 0; d < lead + nd; d++)
        at.emplace_back(0, win->shape[d]);
      for (size_t i = 0, below = static_cast<size_t>(kk); i < nd; i++) {
        below /= static_cast<size_t>(g.kernel[i]);
        int64_t digit = k / static_cast<int64_t>(below) % g.kernel[i];
        at.emplace_back(digit, digit + 1);
      }
      xs.push_back(window::reshaped(window::shrunk(win, at), result));
      inside_at.push_back(window::reshaped(window::shrunk(valid, at), result));
      m = m ? alu(Ops::MAX, m, xs.back()) : xs.back();
      prefix_max.push_back(m);
    }
    // The first element equal to the max (the last one when no other is): without padding, where the max
    // of the elements so far first equals it, which reads each element once (the scheduler counts reads
    // of the input, and realizes a computed input, the demo's batch norm, that more reads would
    // recompute); else the first element inside the input equal to it.
    UOpPtr first = full(int32_const(kk - 1), result);
    for (int64_t k = kk - 1; k-- > 0;) {
      UOpPtr hit =
          inside_only ? alu(Ops::CMPEQ, prefix_max[k], m) : alu(Ops::AND, inside_at[k], alu(Ops::CMPEQ, xs[k], m));
      first = where(hit, full(int32_const(k), result), first);
    }
    offsets = first;
    if (is_float(x->dtype)) {
      // the last NaN when there is one (x <= inf: not a NaN, reading x once)
      UOpPtr last_nan = full(int32_const(0), result), inf = full(const_float(x->dtype, INFINITY), result);
      for (int64_t k = 1; k < kk; k++)
        last_nan = where(alu(Ops::CMPLE, xs[k], inf), last_nan, full(int32_const(k), result));
      offsets = where(alu(Ops::CMPNE, m, m), last_nan, first);
    }
  } else {
    // The least window offset where the input equals the max, or -1 - offset for NaNs (only NaNs match a
    // NaN max), decoded.
    UOpPtr max = reduce(win, Ops::MAX, kernel_axes);
    m = window::reshaped(max, result);
    UOpPtr is_nan = alu(Ops::CMPNE, win, win);
    UOpPtr hit = alu(Ops::AND, valid, alu(Ops::OR, alu(Ops::CMPEQ, win, window::expanded(max, win->shape)), is_nan));
    UOpPtr offset = window_offsets(g.kernel, win->shape, lead + nd);
    UOpPtr key = where(is_nan, alu(Ops::SUB, full(int32_const(-1), win->shape), offset), offset);
    UOpPtr k = reduce_to(where(hit, key, full(int32_const(kk), win->shape)), Ops::MIN, kernel_axes, result);
    offsets =
        where(alu(Ops::CMPLT, k, full(int32_const(0), result)), alu(Ops::SUB, full(int32_const(-1), result), k), k);
  }
  // position along dim i: o * stride - padding + (offset's digit i) * dilation
  UOpPtr k = cast(offsets, DType::Int64), index;
  int64_t plane_stride = 1, digit = 1;
  for (size_t i = nd; i-- > 0;) {
    UOpPtr d = digit == 1 ? k : alu(Ops::IDIV, k, full(index_const(digit), result));
    if (i > 0) d = alu(Ops::MOD, d, full(index_const(g.kernel[i]), result));
    UOpPtr at = add(positions(out[i], g.stride[i], -g.padding[i], result, lead + i),
                    mul(d, full(index_const(g.dilation[i]), result)));
    UOpPtr term = plane_stride == 1 ? at : mul(at, full(index_const(plane_stride), result));
    index = index ? add(index, term) : term;
    plane_stride *= in[i];
    digit *= g.kernel[i];
  }
  return {m, index, offsets};
}

// The window offsets behind the indices max pooling wrote, by the index node (what reading the indices
// tensor whole gives back while its content is that graph): a backward handed those very indices (the
// same node, so the same values) compares offsets within the windows, and neither realizes the int64
// indices nor computes flat positions. Weak references: an entry lives as long as the indices' graph.
struct PooledIndices {
  std::weak_ptr<const UOp> index, offsets;
  window::Geometry g;
  Shape in;
};

std::mutex pooled_mutex;
std::vector<PooledIndices> pooled;

bool same_geometry(const window::Geometry& a, const window::Geometry& b) {
  return a.kernel == b.kernel && a.stride == b.stride && a.padding == b.padding && a.dilation == b.dilation;
}

void remember_offsets(const MaxPool& p, const window::Geometry& g, const Shape& in) {
  std::lock_guard lock(pooled_mutex);
  std::erase_if(pooled, [](const PooledIndices& e) { return e.index.expired(); });
  pooled.push_back({p.indices, p.offsets, g, in});
}

// The window offsets `indices` decodes (int32, see max_pool) when it is max pooling's own lazy result
// for windows g over `in`; else null.
UOpPtr recorded_offsets(const UOpPtr& indices, const window::Geometry& g, const Shape& in) {
  std::lock_guard lock(pooled_mutex);
  for (const PooledIndices& e : pooled)
    if (e.index.lock() == indices && e.in == in && same_geometry(e.g, g)) return e.offsets.lock();
  return nullptr;
}

// For windows that tile: each input position's offset in the window covering it (row-major over the
// kernel dims; 0 where no window reaches), int32 of `shape` (lead..., in...).
UOpPtr tiled_offsets(const Shape& shape, const Shape& out, const window::Geometry& g) {
  size_t nd = g.dims(), lead = shape.size() - nd;
  UOpPtr sum;
  int64_t digit = 1;
  for (size_t i = nd; i-- > 0;) {
    int64_t s = g.stride[i], n = shape[lead + i];
    UOpPtr along =
        window::reshaped(window::expanded(window::reshaped(iota(s, DType::Int32), {1, s}), {out[i], s}), {out[i] * s});
    along = window::pad_spatial(along, {{-g.padding[i], n + g.padding[i] - out[i] * s}});
    UOpPtr term = broadcast(along, shape, lead + i);
    if (digit > 1) term = mul(term, full(int32_const(digit), shape));
    sum = sum ? add(sum, term) : term;
    digit *= g.kernel[i];
  }
  return sum;
}

// The gradient of max pooling through windows that overlap with a stride above 1 (ResNet's 3x3 stride 2 stem pool),
// phase by phase: an input position h = stride * q + p takes tap k of a window only where p + padding - k * dilation
// divides by the stride, and then from output position q + (p + padding - k * dilation) / stride, an offset fixed
// for the phase. Each phase's gradient (the positions p, p + stride, ... of every spatial dim) is a sum of shifted
// views of grad, picked where the forward's window offset is that tap's, with no division in its index math; the
// taps add in the order of their output positions, from 0, as torch's CPU kernel adds into the input gradient.
// `offsets`: the forward's window offsets of its maxima (see recorded_offsets), compared with the tap's; else null and
// `indices` (flat input-plane positions, as torch's) compared with the phase's positions. Returns each phase's digits
// and gradient; write_max_pool_gradient writes them into strided views. ResNet-18's stem pool gradient, (16, 64, 32,
// 32), one thread: 13.6 ms as one sum over the adjoint windows (a division by the stride and a modulo at every tap,
// 64 scalar accumulators) -> 0.7 ms in four phase kernels.
std::vector<std::pair<std::vector<int64_t>, UOpPtr>> phased_max_pool_backward(const UOpPtr& grad, const UOpPtr& offsets,
                                                                              const UOpPtr& indices, const Shape& in,
                                                                              const window::Geometry& g) {
  const size_t nd = g.dims(), lead = grad->shape.size() - nd;
  const UOpPtr off = offsets ? contiguous(offsets) : indices;
  std::vector<std::pair<std::vector<int64_t>, UOpPtr>> parts;
  for (const auto& [p, q] : window::strided_phases(in, g.stride)) {
    // the phase's taps as (k, d) per dim: output position q + d, increasing d
    Shape shape(grad->shape.begin(), grad->shape.begin() + static_cast<std::ptrdiff_t>(lead));
    std::vector<std::vector<std::pair<int64_t, int64_t>>> taps(nd);
    for (size_t i = 0; i < nd; i++)
      for (int64_t k = g.kernel[i]; k-- > 0;)
        if (int64_t at = p[i] + g.padding[i] - k * g.dilation[i]; at % g.stride[i] == 0)
          taps[i].emplace_back(k, at / g.stride[i]);
    shape.insert(shape.end(), q.begin(), q.end());
    if (prod(shape) == 0) continue;
    const UOpPtr zero = full(const_like(grad, 0), shape);
    UOpPtr at; // the phase's flat input-plane positions, for indices
    for (int64_t i = static_cast<int64_t>(nd), plane = 1; !offsets && i-- > 0; plane *= in[static_cast<size_t>(i)]) {
      const size_t d = static_cast<size_t>(i);
      UOpPtr term = positions(q[d], g.stride[d] * plane, p[d] * plane, shape, lead + d);
      at = at ? add(at, term) : term;
    }
    UOpPtr sum = zero;
    bool more = std::ranges::none_of(taps, [](const auto& t) { return t.empty(); });
    for (std::vector<size_t> t(nd, 0); more;) {
      std::vector<std::pair<int64_t, int64_t>> pads;
      int64_t tap = 0;
      for (size_t i = 0; i < nd; i++) {
        auto [k, d] = taps[i][t[i]];
        pads.emplace_back(-d, q[i] - grad->shape[lead + i] + d); // element q reads grad at q + d, 0 outside
        tap = tap * g.kernel[i] + k;
      }
      UOpPtr picked = alu(Ops::CMPEQ, window::pad_spatial(off, pads), offsets ? full(int32_const(tap), shape) : at);
      sum = add(sum, where(picked, window::pad_spatial(grad, pads), zero));
      size_t i = nd; // the next combination, the last dim fastest
      while (i-- > 0 && ++t[i] == taps[i].size())
        t[i] = 0;
      more = i < nd;
    }
    parts.emplace_back(p, sum);
  }
  return parts;
}

UOpPtr max_pool_backward(const UOpPtr& grad, const UOpPtr& indices, const Shape& in, const window::Geometry& g) {
  size_t nd = g.dims(), lead = grad->shape.size() - nd;
  // Windows that tile the input (MaxPool2d(2)): each position is in one window, nothing to sum.
  bool tiled = window::tiles(g);
  auto adjoint = [&](const UOpPtr& v) {
    return tiled ? window::tiled_adjoint(v, in, g) : window::windows_adjoint(v, in, g);
  };
  UOpPtr u = adjoint(grad), picked, zero = full(const_like(u, 0), u->shape);
  if (UOpPtr offsets = recorded_offsets(indices, g, in)) {
    // the forward's own indices: the window offset of its max against each position's in that window
    // (realized once: computed elementwise, each position of the window would repeat it)
    UOpPtr ui = adjoint(contiguous(offsets));
    UOpPtr at =
        tiled ? tiled_offsets(u->shape, last(grad->shape, nd), g) : window_offsets(g.kernel, u->shape, lead + nd);
    picked = where(alu(Ops::CMPEQ, ui, at), u, zero);
  } else {
    UOpPtr ui = adjoint(indices), pos;
    int64_t plane_stride = 1;
    for (size_t i = nd; i-- > 0;) {
      UOpPtr term = positions(in[i], plane_stride, 0, u->shape, lead + i);
      pos = pos ? add(pos, term) : term;
      plane_stride *= in[i];
    }
    picked = where(alu(Ops::CMPEQ, ui, pos), u, zero);
  }
  if (tiled) return picked;
  Shape shape(grad->shape.begin(), grad->shape.begin() + static_cast<std::ptrdiff_t>(lead));
  shape.insert(shape.end(), in.begin(), in.end());
  return sum_adjoint(picked, nd, shape);
}

// The values and indices of max pooling self (nd pooled dims, the sizes out has) into out and indices.
std::tuple<at::Tensor&, at::Tensor&> write_max_pool(const at::Tensor& self, const window::Geometry& g, at::Tensor& out,
                                                    at::Tensor& indices) {
  if (out.numel() == 0) return {out, indices};
  DType dt = to_tiny_dtype(self.scalar_type());
  UOpPtr x = cast(read(self), opmath(dt));
  MaxPool p = max_pool(x, last(Shape(out.sizes().begin(), out.sizes().end()), g.dims()), g);
  write(out, cast(p.values, dt));
  write(indices, p.indices);
  remember_offsets(p, g, last(x->shape, g.dims()));
  return {out, indices};
}

std::tuple<at::Tensor&, at::Tensor&> write_max_pool(const at::Tensor& self, c10::IntArrayRef kernel_size,
                                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                    c10::IntArrayRef dilation, at::Tensor& out, at::Tensor& indices) {
  check_dtype(self, "max_pool2d", true, false);
  return write_max_pool(self, geometry(2, kernel_size, stride, padding, dilation), out, indices);
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(const at::Tensor& self, c10::IntArrayRef kernel_size,
                                                           c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                           c10::IntArrayRef dilation, bool ceil_mode) {
  auto [mo, mi] = at::meta::max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode);
  at::Tensor out = like_meta(mo, self), indices = like_meta(mi, self);
  write_max_pool(self, kernel_size, stride, padding, dilation, out, indices);
  return {out, indices};
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out(const at::Tensor& self, c10::IntArrayRef kernel_size,
                                                                 c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                                 c10::IntArrayRef dilation, bool ceil_mode,
                                                                 at::Tensor& out, at::Tensor& indices) {
  at::meta::max_pool2d_with_indices_outf(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices);
  return write_max_pool(self, kernel_size, stride, padding, dilation, out, indices);
}

// Writes the gradient of max pooling grad (the forward's output positions) through windows g into grad_input, whose
// last g.dims() dims are `in`, as dt: phase by phase into strided views of it where the windows overlap with a stride
// above 1 (see phased_max_pool_backward), else as one value.
void write_max_pool_gradient(const at::Tensor& grad_input, const UOpPtr& grad, const UOpPtr& indices, const Shape& in,
                             const window::Geometry& g, DType dt) {
  if (!window::tiles(g) && std::ranges::any_of(g.stride, [](int64_t s) { return s > 1; })) {
    for (const auto& [p, value] : phased_max_pool_backward(grad, recorded_offsets(indices, g, in), indices, in, g))
      write(aten_ops::phase_view(grad_input, p, g.stride), cast(value, dt));
    return;
  }
  write(grad_input, cast(max_pool_backward(grad, indices, in, g), dt));
}

at::Tensor& write_max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef kernel_size,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    const at::Tensor& indices, at::Tensor& grad_input) {
  check_dtype(self, "max_pool2d_with_indices_backward", true, false);
  if (grad_input.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(grad_input.scalar_type());
  Shape in = last(Shape(self.sizes().begin(), self.sizes().end()), 2);
  write_max_pool_gradient(grad_input, cast(read(grad_output), opmath(dt)), read(indices), in,
                          geometry(2, kernel_size, stride, padding, dilation), dt);
  return grad_input;
}

at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                                            c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode,
                                            const at::Tensor& indices) {
  at::Tensor grad_input = like_meta(at::meta::max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
                                                                               padding, dilation, ceil_mode, indices),
                                    self);
  return write_max_pool_backward(grad_output, self, kernel_size, stride, padding, dilation, indices, grad_input);
}

at::Tensor& max_pool2d_with_indices_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                 c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                                                 c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode,
                                                 const at::Tensor& indices, at::Tensor& grad_input) {
  at::meta::max_pool2d_with_indices_backward_outf(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                                  indices, grad_input);
  return write_max_pool_backward(grad_output, self, kernel_size, stride, padding, dilation, indices, grad_input);
}

// ---- max_pool3d_with_indices: torch's CPU checks and shapes (not a structured op), the same values ----

struct Pool3d {
  window::Geometry g;
  Shape out; // (otime, oheight, owidth)
  at::MemoryFormat format;
};

Pool3d pool3d_args(const at::Tensor& self, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                   c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode, const char* fn) {
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == 3,
              "max_pool3d: kernel_size must either be a single int, or a tuple of three ints")
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 3,
              "max_pool3d: stride must either be omitted, a single int, or a tuple of three ints")
  TORCH_CHECK(padding.size() == 1 || padding.size() == 3,
              "max_pool3d: padding must either be a single int, or a tuple of three ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 3,
              "max_pool3d: dilation must be either a single int, or a tuple of three ints");
  window::Geometry g = geometry(3, kernel_size, stride, padding, dilation);
  at::MemoryFormat format = self.suggest_memory_format();
  if (format == at::MemoryFormat::ChannelsLast3d) {
    TORCH_CHECK(self.dim() == 5, "non-empty 5D (batch mode) tensor expected for input with channels_last_3d layout");
  } else {
    TORCH_CHECK(self.dim() == 4 || self.dim() == 5, "non-empty 4D or 5D (batch mode) tensor expected for input");
  }
  Shape in = last(Shape(self.sizes().begin(), self.sizes().end()), 3), out(3);
  for (size_t i = 0; i < 3; i++)
    out[i] = at::native::pooling_output_shape<int64_t>(in[i], g.kernel[i], g.padding[i], g.stride[i], g.dilation[i],
                                                       ceil_mode);
  auto n = [](int64_t v) { return static_cast<int>(v); };
  at::native::pool3d_shape_check(self, self.size(-4), n(g.kernel[0]), n(g.kernel[1]), n(g.kernel[2]), n(g.stride[0]),
                                 n(g.stride[1]), n(g.stride[2]), n(g.padding[0]), n(g.padding[1]), n(g.padding[2]),
                                 n(g.dilation[0]), n(g.dilation[1]), n(g.dilation[2]), in[0], in[1], in[2], out[0],
                                 out[1], out[2], fn);
  return {g, out, format};
}

std::vector<int64_t> pooled_sizes(const at::Tensor& self, const Shape& out) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - 3);
  sizes.insert(sizes.end(), out.begin(), out.end());
  return sizes;
}

std::tuple<at::Tensor&, at::Tensor&> max_pool3d_with_indices_out(const at::Tensor& self, c10::IntArrayRef kernel_size,
                                                                 c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                                 c10::IntArrayRef dilation, bool ceil_mode,
                                                                 at::Tensor& out, at::Tensor& indices) {
  Pool3d p = pool3d_args(self, kernel_size, stride, padding, dilation, ceil_mode,
                         "max_pool3d_with_indices_out_cpu_template()");
  check_dtype(self, "max_pool3d", true, false);
  std::vector<int64_t> sizes = pooled_sizes(self, p.out);
  out.resize_(sizes, self.dim() == 5 ? std::optional(p.format) : std::nullopt);
  indices.resize_(sizes, self.dim() == 5 ? std::optional(p.format) : std::nullopt);
  return write_max_pool(self, p.g, out, indices);
}

std::tuple<at::Tensor, at::Tensor> max_pool3d_with_indices(const at::Tensor& self, c10::IntArrayRef kernel_size,
                                                           c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                           c10::IntArrayRef dilation, bool ceil_mode) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  at::Tensor indices = empty_tiny({0}, at::kLong, self.device());
  max_pool3d_with_indices_out(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices);
  return {out, indices};
}

at::Tensor& max_pool3d_with_indices_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                 c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                                                 c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode,
                                                 const at::Tensor& indices, at::Tensor& grad_input) {
  Pool3d p = pool3d_args(self, kernel_size, stride, padding, dilation, ceil_mode,
                         "max_pool3d_with_indices_backward_out_cpu_template()");
  int64_t nd = self.dim();
  for (at::Tensor t : {grad_output, indices}) {
    at::check_dim_size(t, nd, nd - 4, self.size(-4));
    for (int64_t i = 0; i < 3; i++)
      at::check_dim_size(t, nd, nd - 3 + i, p.out[i]);
  }
  check_dtype(self, "max_pool3d_with_indices_backward", false, false);
  grad_input.resize_(self.sizes(), p.format);
  if (grad_input.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(grad_input.scalar_type());
  Shape in = last(Shape(self.sizes().begin(), self.sizes().end()), 3);
  write_max_pool_gradient(grad_input, cast(read(grad_output), opmath(dt)), read(indices), in, p.g, dt);
  return grad_input;
}

at::Tensor max_pool3d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                                            c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode,
                                            const at::Tensor& indices) {
  at::Tensor grad_input = empty_tiny({0}, self.scalar_type(), self.device());
  return max_pool3d_with_indices_backward_out(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                              indices, grad_input);
}

// ---- average pooling ----

struct AvgArgs {
  window::Geometry g;
  bool count_include_pad;
  std::optional<int64_t> divisor_override;
};

AvgArgs avg_args(size_t nd, c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding,
                 bool count_include_pad, std::optional<int64_t> divisor_override) {
  return {geometry(nd, kernel, stride, padding, {}), count_include_pad, divisor_override};
}

// torch's divisor for each output position (shape lead ones..., out...), in dtype dt:
// divisor_override, or the window's size clipped to the padded input (count_include_pad), or to the input.
UOpPtr avg_divisor(const Shape& in, const Shape& out, const AvgArgs& a, DType dt) {
  size_t nd = out.size();
  if (a.divisor_override) return full(const_int(DType::Int64, *a.divisor_override), out);
  UOpPtr size;
  for (size_t i = 0; i < nd; i++) {
    Shape line{out[i]};
    UOpPtr start = positions(out[i], a.g.stride[i], -a.g.padding[i], line, 0);
    UOpPtr end = alu(Ops::MIN, add(start, full(index_const(a.g.kernel[i]), line)),
                     full(index_const(in[i] + a.g.padding[i]), line));
    if (!a.count_include_pad) {
      start = alu(Ops::MAX, start, full(index_const(0), line));
      end = alu(Ops::MIN, end, full(index_const(in[i]), line));
    }
    UOpPtr n = broadcast(alu(Ops::SUB, end, start), out, i);
    size = size ? mul(size, n) : n;
  }
  return is_float(dt) ? cast(size, dt) : size;
}

UOpPtr avg_pool(const UOpPtr& x, const Shape& out, const AvgArgs& a) {
  size_t nd = out.size(), lead = x->shape.size() - nd;
  UOpPtr win = window::windows(window::pad_for_windows(x, out, a.g), out, a.g);
  Shape result(x->shape.begin(), x->shape.begin() + static_cast<std::ptrdiff_t>(lead));
  result.insert(result.end(), out.begin(), out.end());
  UOpPtr sum =
      reduce_to(win, Ops::ADD, range(static_cast<int64_t>(lead + nd), static_cast<int64_t>(lead + 2 * nd)), result);
  UOpPtr div = broadcast(cast(avg_divisor(last(x->shape, nd), out, a, x->dtype), x->dtype), result, lead);
  return alu(is_float(x->dtype) ? Ops::FDIV : Ops::IDIV, sum, div);
}

UOpPtr avg_pool_backward(const UOpPtr& grad, const Shape& in, const AvgArgs& a) {
  size_t nd = in.size(), lead = grad->shape.size() - nd;
  Shape out = last(grad->shape, nd);
  UOpPtr div = broadcast(cast(avg_divisor(in, out, a, grad->dtype), grad->dtype), grad->shape, lead);
  UOpPtr share = alu(is_float(grad->dtype) ? Ops::FDIV : Ops::IDIV, grad, div);
  Shape shape(grad->shape.begin(), grad->shape.begin() + static_cast<std::ptrdiff_t>(lead));
  shape.insert(shape.end(), in.begin(), in.end());
  return sum_adjoint(window::windows_adjoint(share, in, a.g), nd, shape);
}

template <size_t ND> at::Tensor& write_avg_pool(const at::Tensor& self, const AvgArgs& a, at::Tensor& out) {
  check_dtype(self, ND == 2 ? "avg_pool2d" : "avg_pool3d", true, true);
  if (out.numel() == 0) return out;
  DType dt = to_tiny_dtype(self.scalar_type());
  write(out,
        cast(avg_pool(cast(read(self), opmath(dt)), last(Shape(out.sizes().begin(), out.sizes().end()), ND), a), dt));
  return out;
}

template <size_t ND>
at::Tensor& write_avg_pool_backward(const at::Tensor& grad_output, const at::Tensor& self, const AvgArgs& a,
                                    at::Tensor& grad_input) {
  check_dtype(self, ND == 2 ? "avg_pool2d_backward_out_frame" : "avg_pool3d_backward_out_frame", true, true);
  if (grad_input.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(grad_input.scalar_type());
  Shape in = last(Shape(self.sizes().begin(), self.sizes().end()), ND);
  write(grad_input, cast(avg_pool_backward(cast(read(grad_output), opmath(dt)), in, a), dt));
  return grad_input;
}

// The meta functions of avg_pool2d and avg_pool3d (and their backward ops) share signatures.
template <size_t ND, auto Meta>
at::Tensor avg_pool_fn(const at::Tensor& self, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                       std::optional<int64_t> divisor_override) {
  at::Tensor out =
      like_meta(Meta(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override), self);
  return write_avg_pool<ND>(self, avg_args(ND, kernel_size, stride, padding, count_include_pad, divisor_override), out);
}

template <size_t ND, auto MetaOut>
at::Tensor& avg_pool_out_fn(const at::Tensor& self, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                            c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                            std::optional<int64_t> divisor_override, at::Tensor& out) {
  MetaOut(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out);
  return write_avg_pool<ND>(self, avg_args(ND, kernel_size, stride, padding, count_include_pad, divisor_override), out);
}

template <size_t ND, auto Meta>
at::Tensor avg_pool_backward_fn(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef kernel_size,
                                c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                                bool count_include_pad, std::optional<int64_t> divisor_override) {
  at::Tensor grad_input = like_meta(
      Meta(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override), self);
  return write_avg_pool_backward<ND>(
      grad_output, self, avg_args(ND, kernel_size, stride, padding, count_include_pad, divisor_override), grad_input);
}

template <size_t ND, auto MetaOut>
at::Tensor& avg_pool_backward_out_fn(const at::Tensor& grad_output, const at::Tensor& self,
                                     c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                                     bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override,
                                     at::Tensor& grad_input) {
  MetaOut(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, grad_input);
  return write_avg_pool_backward<ND>(
      grad_output, self, avg_args(ND, kernel_size, stride, padding, count_include_pad, divisor_override), grad_input);
}

// ---- adaptive average pooling ----

// Ragged windows: output position o of dim i sums count_i(o) source positions from start_i(o) on.
// Read with GATHER at computed indices (out, reach) per dim, masked past each window's count, and
// summed in the windows' order.
struct Ragged {
  UOpPtr start, count; // (out,) int64
  int64_t out, reach, source;
};

// The elements of ragged windows: for each output (the lead dims, then each dim's outputs) and each offset
// in its windows (each dim's reach), the input value there (meaningless where the offset is past its
// window), whether it is inside, and its flat position in the input plane.
struct RaggedElements {
  UOpPtr value, inside, pos;
  Shape result;                     // the lead dims, then each dim's outputs
  std::vector<int64_t> window_axes; // the offsets' axes
  int64_t plane;                    // elements of an input plane
};

RaggedElements ragged_elements(const UOpPtr& src, const std::vector<Ragged>& dims) {
  size_t nd = dims.size(), lead = src->shape.size() - nd;
  Shape shape(src->shape.begin(), src->shape.begin() + static_cast<std::ptrdiff_t>(lead)), result;
  int64_t planes = prod(shape), plane = 1;
  for (const Ragged& r : dims) {
    shape.push_back(r.out);
    plane *= r.source;
  }
  result = shape;
  for (const Ragged& r : dims)
    shape.push_back(r.reach);
  Shape lead_only(shape.size(), 1);
  std::copy(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(lead), lead_only.begin());
  UOpPtr base = window::expanded(
      window::reshaped(mul(iota(planes, DType::Int64), full(index_const(plane), {planes})), lead_only), shape);
  UOpPtr pos = full(index_const(0), shape), inside;
  int64_t stride = plane;
  for (size_t i = 0; i < nd; i++) {
    const Ragged& r = dims[i];
    stride /= r.source;
    UOpPtr k = positions(r.reach, 1, 0, shape, lead + nd + i);
    pos = add(pos, mul(add(broadcast(r.start, shape, lead + i), k), full(index_const(stride), shape)));
    UOpPtr in = alu(Ops::CMPLT, k, broadcast(r.count, shape, lead + i));
    inside = inside ? alu(Ops::AND, inside, in) : in;
  }
  UOpPtr v = gather(window::reshaped(src, {prod(src->shape)}), add(base, pos));
  return {v, inside, pos, result, range(static_cast<int64_t>(lead + nd), static_cast<int64_t>(lead + 2 * nd)), plane};
}

UOpPtr ragged_sum(const UOpPtr& src, const std::vector<Ragged>& dims) {
  RaggedElements e = ragged_elements(src, dims);
  UOpPtr v = where(e.inside, e.value, full(const_like(e.value, 0), e.value->shape));
  return reduce_to(v, Ops::ADD, e.window_axes, e.result);
}

// floor(a * num / den) for a = 0..n-1, and the ceiling version, on the host and as UOps.
int64_t floor_div(int64_t a, int64_t b) { return a / b; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
UOpPtr scaled(int64_t n, int64_t num, int64_t shift, int64_t den) {
  Shape line{n};
  return alu(Ops::IDIV, positions(n, num, shift, line, 0), full(index_const(den), line));
}

// Output o of an adaptive pool averages input [floor(o * in / out), ceil((o + 1) * in / out)).
Ragged adaptive_window(int64_t in, int64_t out) {
  int64_t reach = 0;
  for (int64_t o = 0; o < out; o++)
    reach = std::max(reach, ceil_div((o + 1) * in, out) - floor_div(o * in, out));
  UOpPtr start = scaled(out, in, 0, out);
  return {start, alu(Ops::SUB, scaled(out, in, in + out - 1, out), start), out, reach, in};
}

// Input h lies in the windows of outputs [floor(h * out / in), ceil((h + 1) * out / in)).
Ragged adaptive_sources(int64_t in, int64_t out) {
  Ragged r = adaptive_window(out, in);
  r.source = out;
  return r;
}

UOpPtr divide_by_lengths(UOpPtr v, const Shape& in, const Shape& out, size_t lead) {
  for (size_t i = 0; i < in.size(); i++) {
    Ragged w = adaptive_window(in[i], out[i]);
    v = alu(Ops::FDIV, v, broadcast(cast(w.count, v->dtype), v->shape, lead + i));
  }
  return v;
}

bool divides(const Shape& in, const Shape& out) {
  bool even = true;
  for (size_t i = 0; i < in.size(); i++)
    even = even && in[i] % out[i] == 0;
  return even;
}

window::Geometry even_windows(const Shape& in, const Shape& out) {
  window::Geometry g{{}, {}, Shape(in.size(), 0), Shape(in.size(), 1)};
  for (size_t i = 0; i < in.size(); i++) {
    g.kernel.push_back(in[i] / out[i]);
    g.stride.push_back(in[i] / out[i]);
  }
  return g;
}

// torch sums each window in order and divides by its height, then its width (then depth...).
UOpPtr adaptive_avg_pool(const UOpPtr& x, const Shape& out) {
  size_t nd = out.size(), lead = x->shape.size() - nd;
  Shape in = last(x->shape, nd), result(x->shape.begin(), x->shape.begin() + static_cast<std::ptrdiff_t>(lead));
  result.insert(result.end(), out.begin(), out.end());
  UOpPtr sum;
  if (divides(in, out)) {
    window::Geometry g = even_windows(in, out);
    sum = reduce_to(window::windows(x, out, g), Ops::ADD,
                    range(static_cast<int64_t>(lead + nd), static_cast<int64_t>(lead + 2 * nd)), result);
  } else {
    std::vector<Ragged> dims;
    for (size_t i = 0; i < nd; i++)
      dims.push_back(adaptive_window(in[i], out[i]));
    sum = ragged_sum(x, dims);
  }
  return divide_by_lengths(sum, in, out, lead);
}

// The gradient: each input position sums grad / lengths over the output windows that hold it, in
// output order (as torch adds them).
UOpPtr adaptive_avg_pool_backward(const UOpPtr& grad, const Shape& in) {
  size_t nd = in.size(), lead = grad->shape.size() - nd;
  Shape out = last(grad->shape, nd),
        shape(grad->shape.begin(), grad->shape.begin() + static_cast<std::ptrdiff_t>(lead));
  shape.insert(shape.end(), in.begin(), in.end());
  UOpPtr share = divide_by_lengths(grad, in, out, lead);
  if (divides(in, out)) return sum_adjoint(window::windows_adjoint(share, in, even_windows(in, out)), nd, shape);
  std::vector<Ragged> dims;
  for (size_t i = 0; i < nd; i++)
    dims.push_back(adaptive_sources(in[i], out[i]));
  return ragged_sum(share, dims);
}

// torch's checks of adaptive_avg_pool{2,3}d (the CPU kernels': these ops have no meta function).
template <size_t ND> void check_adaptive(const at::Tensor& self, c10::IntArrayRef output_size) {
  const char* name = ND == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d";
  TORCH_CHECK(output_size.size() == ND, name, ": output_size must be ", ND);
  int64_t ndim = self.dim();
  TORCH_CHECK(ndim == static_cast<int64_t>(ND) + 1 || ndim == static_cast<int64_t>(ND) + 2, name, "(): Expected ",
              ND + 1, "D or ", ND + 2, "D tensor, but got ", self.sizes());
  for (int64_t i = 1; i < ndim; i++)
    TORCH_CHECK(self.size(i) > 0, name, "(): Expected input to have non-zero size for non-batch dimensions, but input",
                " has sizes ", self.sizes(), " with dimension ", i, " being empty");
  for (int64_t o : output_size)
    TORCH_CHECK(o >= 0, name, ": elements of output_size must be greater than or equal to 0 but received {",
                output_size, "}");
  check_dtype(self, name, false, false);
}

template <size_t ND> at::Tensor adaptive_avg_pool_fn(const at::Tensor& self, c10::IntArrayRef output_size) {
  check_adaptive<ND>(self, output_size);
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - ND);
  shape.insert(shape.end(), output_size.begin(), output_size.end());
  c10::MemoryFormat format = self.suggest_memory_format();
  at::Tensor out = empty_tiny(shape, self.scalar_type(), self.device(), format);
  if (out.numel() == 0) return out;
  DType dt = to_tiny_dtype(self.scalar_type());
  write(out, cast(adaptive_avg_pool(cast(read(self), opmath(dt)), Shape(output_size.begin(), output_size.end())), dt));
  return out;
}

template <size_t ND> at::Tensor adaptive_avg_pool_backward_fn(const at::Tensor& grad_output, const at::Tensor& self) {
  const char* name = ND == 2 ? "adaptive_avg_pool2d_backward" : "adaptive_avg_pool3d_backward";
  TORCH_CHECK(grad_output.dim() == self.dim(), name, "(): Expected dimensions ", self.dim(),
              " for `grad_output` but got dimensions ", grad_output.dim());
  TORCH_CHECK(self.scalar_type() == grad_output.scalar_type(), "expected dtype ", self.scalar_type(),
              " for `grad_output` but got dtype ", grad_output.scalar_type());
  check_dtype(self, name, false, false);
  at::Tensor grad_input = empty_tiny(self.sizes(), self.scalar_type(), self.device(), self.suggest_memory_format());
  if (grad_input.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(self.scalar_type());
  Shape in(self.sizes().end() - ND, self.sizes().end());
  write(grad_input, cast(adaptive_avg_pool_backward(cast(read(grad_output), opmath(dt)), in), dt));
  return grad_input;
}

// ---- adaptive max pooling ----

// The max of each ragged window and the flat input-plane index of its first max (its last NaN), as
// max_pool's indices.
std::pair<UOpPtr, UOpPtr> ragged_max(const UOpPtr& src, const std::vector<Ragged>& dims) {
  RaggedElements e = ragged_elements(src, dims);
  const Shape& shape = e.value->shape;
  UOpPtr v = where(e.inside, e.value, full(lowest(e.value->dtype), shape));
  UOpPtr m = reduce(v, Ops::MAX, e.window_axes);
  UOpPtr is_nan = alu(Ops::CMPNE, v, v);
  UOpPtr hit = alu(Ops::AND, e.inside, alu(Ops::OR, alu(Ops::CMPEQ, v, window::expanded(m, shape)), is_nan));
  UOpPtr key = where(is_nan, alu(Ops::SUB, full(index_const(-1), shape), e.pos), e.pos);
  UOpPtr k = reduce_to(where(hit, key, full(index_const(e.plane), shape)), Ops::MIN, e.window_axes, e.result);
  UOpPtr index =
      where(alu(Ops::CMPLT, k, full(index_const(0), e.result)), alu(Ops::SUB, full(index_const(-1), e.result), k), k);
  return {window::reshaped(m, e.result), index};
}

template <size_t ND>
std::tuple<at::Tensor&, at::Tensor&> write_adaptive_max_pool(const at::Tensor& self, c10::IntArrayRef output_size,
                                                             at::Tensor& out, at::Tensor& indices) {
  check_dtype(self, ND == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d", false, false);
  if (out.numel() == 0) return {out, indices};
  Shape in = last(Shape(self.sizes().begin(), self.sizes().end()), ND), o(output_size.begin(), output_size.end());
  if (divides(in, o)) return write_max_pool(self, even_windows(in, o), out, indices);
  DType dt = to_tiny_dtype(self.scalar_type());
  UOpPtr x = cast(read(self), opmath(dt));
  std::vector<Ragged> dims;
  for (size_t i = 0; i < ND; i++)
    dims.push_back(adaptive_window(in[i], o[i]));
  auto [m, index] = ragged_max(x, dims);
  write(out, cast(m, dt));
  write(indices, index);
  return {out, indices};
}

template <size_t ND>
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool(const at::Tensor& self, c10::IntArrayRef output_size) {
  auto [mo, mi] =
      ND == 2 ? at::meta::adaptive_max_pool2d(self, output_size) : at::meta::adaptive_max_pool3d(self, output_size);
  at::Tensor out = like_meta(mo, self), indices = like_meta(mi, self);
  write_adaptive_max_pool<ND>(self, output_size, out, indices);
  return {out, indices};
}

template <size_t ND>
std::tuple<at::Tensor&, at::Tensor&> adaptive_max_pool_out(const at::Tensor& self, c10::IntArrayRef output_size,
                                                           at::Tensor& out, at::Tensor& indices) {
  if (ND == 2)
    at::meta::adaptive_max_pool2d_outf(self, output_size, out, indices);
  else
    at::meta::adaptive_max_pool3d_outf(self, output_size, out, indices);
  return write_adaptive_max_pool<ND>(self, output_size, out, indices);
}

// The gradient: each window's grad_output goes to its max's input position. Even windows reuse max
// pooling's adjoint; ragged ones scatter-add in output order (as torch's CPU kernel adds).
template <size_t ND>
at::Tensor& write_adaptive_max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input) {
  check_dtype(self, ND == 2 ? "adaptive_max_pool2d_backward" : "adaptive_max_pool3d_backward", false, false);
  if (grad_input.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(grad_input.scalar_type());
  Shape in = last(to_shape(self.sizes()), ND), o = last(to_shape(grad_output.sizes()), ND);
  UOpPtr grad = cast(read(grad_output), opmath(dt));
  if (divides(in, o)) {
    write(grad_input, cast(max_pool_backward(grad, read(indices), in, even_windows(in, o)), dt));
    return grad_input;
  }
  at::Tensor acc = empty_tiny(grad_input.sizes(), to_scalar_type(opmath(dt)), grad_input.device());
  write(acc, full(const_like(grad, 0), to_shape(acc.sizes())));
  int64_t plane = prod(in), outs = prod(o);
  Shape flat = {grad_output.numel() / std::max<int64_t>(outs, 1), outs};
  UOpPtr base = mul(window::expanded(window::reshaped(iota(flat[0], DType::Int64), {flat[0], 1}), flat),
                    full(index_const(plane), flat));
  UOpPtr pos = add(base, window::reshaped(cast(read(indices), DType::Int64), flat));
  lazy_buffer(acc).scatter(opmath(dt), pos, window::reshaped(grad, flat), Ops::ADD);
  write(grad_input, cast(read(acc), dt));
  return grad_input;
}

template <size_t ND>
at::Tensor adaptive_max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                      const at::Tensor& indices) {
  at::Tensor meta = ND == 2 ? at::meta::adaptive_max_pool2d_backward(grad_output, self, indices)
                            : at::meta::adaptive_max_pool3d_backward(grad_output, self, indices);
  at::Tensor grad_input = like_meta(meta, self);
  return write_adaptive_max_pool_backward<ND>(grad_output, self, indices, grad_input);
}

template <size_t ND>
at::Tensor& adaptive_max_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& indices, at::Tensor& grad_input) {
  if (ND == 2)
    at::meta::adaptive_max_pool2d_backward_outf(grad_output, self, indices, grad_input);
  else
    at::meta::adaptive_max_pool3d_backward_outf(grad_output, self, indices, grad_input);
  return write_adaptive_max_pool_backward<ND>(grad_output, self, indices, grad_input);
}

// ---- im2col, col2im (F.unfold, F.fold) ----

// torch's checks of both ops' window arguments; returns the number of sliding blocks per dim.
Shape sliding_blocks(const char* op, c10::IntArrayRef spatial, c10::IntArrayRef kernel, c10::IntArrayRef dilation,
                     c10::IntArrayRef padding, c10::IntArrayRef stride) {
  TORCH_CHECK(kernel.size() == 2, "It is expected kernel_size equals to 2, but got size ", kernel.size());
  TORCH_CHECK(dilation.size() == 2, "It is expected dilation equals to 2, but got size ", dilation.size());
  TORCH_CHECK(padding.size() == 2, "It is expected padding equals to 2, but got size ", padding.size());
  TORCH_CHECK(stride.size() == 2, "It is expected stride equals to 2, but got size ", stride.size());
  TORCH_CHECK(kernel[0] > 0 && kernel[1] > 0,
              "kernel size should be greater than zero, but got kernel_height: ", kernel[0],
              " kernel_width: ", kernel[1]);
  TORCH_CHECK(dilation[0] > 0 && dilation[1] > 0,
              "dilation should be greater than zero, but got dilation_height: ", dilation[0],
              " dilation_width: ", dilation[1]);
  TORCH_CHECK(padding[0] >= 0 && padding[1] >= 0, "padding should be non-negative, but got pad_height: ", padding[0],
              " pad_width: ", padding[1]);
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0, "stride should be greater than zero, but got stride_height: ", stride[0],
              " stride_width: ", stride[1]);
  Shape blocks;
  for (size_t i = 0; i < 2; i++)
    blocks.push_back((spatial[i] + 2 * padding[i] - (dilation[i] * (kernel[i] - 1) + 1)) / stride[i] + 1);
  TORCH_CHECK(blocks[0] >= 1 && blocks[1] >= 1, op, ": Given input with spatial size (", spatial[0], ", ", spatial[1],
              "), kernel_size=(", kernel[0], ", ", kernel[1], "), dilation=(", dilation[0], ", ", dilation[1],
              "), padding=(", padding[0], ", ", padding[1], "), calculated shape of the array of sliding blocks as (",
              blocks[0], ", ", blocks[1], "), but its components must be at least one.");
  return blocks;
}

// complex32 (the CPU has no kernel for it) and complex values into a real out= or back (the CPU's dtype error)
// go to the CPU: NotNativeDtype.
void complex_to_cpu(const at::Tensor& self, const at::Tensor& out) {
  if (self.scalar_type() == at::kComplexHalf || self.is_complex() != out.is_complex())
    to_tiny_dtype(self.is_complex() ? self.scalar_type() : out.scalar_type());
}

// im2col: (N, C, H, W) -> (N, C * kh * kw, oh * ow), column [c, i, j] of block (y, x) reading the zero-padded
// input at (y * stride + i * dilation, x * stride + j * dilation): a window view, no copy.
at::Tensor& im2col_out(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef dilation,
                       c10::IntArrayRef padding, c10::IntArrayRef stride, at::Tensor& out) {
  TORCH_CHECK((self.dim() == 3 || self.dim() == 4) && self.size(-1) > 0 && self.size(-2) > 0 && self.size(-3) > 0,
              "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for "
              "input, but got: ",
              self.sizes());
  Shape blocks = sliding_blocks("im2col", self.sizes().slice(self.dim() - 2), kernel, dilation, padding, stride);
  complex_to_cpu(self, out);
  int64_t n = self.dim() == 4 ? self.size(0) : 1, c = self.size(-3);
  std::vector<int64_t> sizes = {c * kernel[0] * kernel[1], blocks[0] * blocks[1]};
  if (self.dim() == 4) sizes.insert(sizes.begin(), n);
  at::native::resize_output(out, sizes);
  if (out.numel() == 0) return out;
  window::Geometry g = geometry(2, kernel, stride, padding, dilation);
  // A complex value's pairs ride as channels: (n, c, h, w, 2) read as (n, c * 2, h, w).
  int64_t parts = self.is_complex() ? 2 : 1;
  UOpPtr x = window::reshaped(read_values(self), {n, c, self.size(-2), self.size(-1), parts});
  x = window::reshaped(window::permuted(x, {0, 1, 4, 2, 3}), {n, c * parts, self.size(-2), self.size(-1)});
  UOpPtr win = window::windows(window::pad_for_windows(x, blocks, g), blocks, g); // (n, c * parts, oh, ow, kh, kw)
  win = window::reshaped(win, {n, c, parts, blocks[0], blocks[1], kernel[0], kernel[1]});
  UOpPtr cols = window::permuted(win, {0, 1, 5, 6, 3, 4, 2}); // (n, c, kh, kw, oh, ow, parts)
  write_values(out,
               cast(window::reshaped(cols, value_shape(out, to_shape(out.sizes()))), value_dtype(out.scalar_type())));
  return out;
}

at::Tensor im2col(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef dilation, c10::IntArrayRef padding,
                  c10::IntArrayRef stride) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return im2col_out(self, kernel, dilation, padding, stride, out);
}

// col2im: the adjoint, each input position summing the columns that read it: for every kernel offset
// (i, j), the (oh, ow) blocks spread by the stride and shifted into place, kh * kw terms added in one kernel.
at::Tensor& col2im_out(const at::Tensor& self, c10::SymIntArrayRef output_size_sym, c10::IntArrayRef kernel,
                       c10::IntArrayRef dilation, c10::IntArrayRef padding, c10::IntArrayRef stride, at::Tensor& out) {
  c10::IntArrayRef output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  TORCH_CHECK(output_size.size() == 2, "It is expected output_size equals to 2, but got size ", output_size.size());
  TORCH_CHECK((self.dim() == 2 || self.dim() == 3) && self.size(-1) > 0 && self.size(-2) > 0,
              "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions "
              "for input, but got: ",
              self.sizes());
  Shape blocks = sliding_blocks("col2im", output_size, kernel, dilation, padding, stride);
  complex_to_cpu(self, out);
  int64_t taps = kernel[0] * kernel[1];
  TORCH_CHECK(
      taps > 0 && self.size(-2) % taps == 0,
      "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got input.size(1)=",
      self.size(-2), ", kernel_size=(", kernel[0], ", ", kernel[1], ").");
  TORCH_CHECK(self.size(-1) == blocks[0] * blocks[1], "Given output_size=(", output_size[0], ", ", output_size[1],
              "), kernel_size=(", kernel[0], ", ", kernel[1], "), dilation=(", dilation[0], ", ", dilation[1],
              "), padding=(", padding[0], ", ", padding[1], "), stride=(", stride[0], ", ", stride[1],
              "), expected size of input's dimension 2 to match the calculated number of sliding blocks ", blocks[0],
              " * ", blocks[1], " = ", blocks[0] * blocks[1], ", but got input.size(2)=", self.size(-1), ".");
  int64_t n = self.dim() == 3 ? self.size(0) : 1, c = self.size(-2) / taps;
  std::vector<int64_t> sizes = {c, output_size[0], output_size[1]};
  if (self.dim() == 3) sizes.insert(sizes.begin(), n);
  at::native::resize_output(out, sizes);
  if (out.numel() == 0) return out;
  DType dt = value_dtype(out.scalar_type());
  // A complex value's pairs ride as channels: (n, c * kh * kw, L, 2) read as (n, 2 * c, kh, kw, oh, ow).
  int64_t parts = self.is_complex() ? 2 : 1;
  UOpPtr values = window::reshaped(cast(read_values(self), opmath(dt)), {n, c * taps, blocks[0] * blocks[1], parts});
  UOpPtr cols = window::reshaped(window::permuted(values, {0, 3, 1, 2}),
                                 {n, parts * c, kernel[0], kernel[1], blocks[0], blocks[1]});
  c *= parts;
  UOpPtr sum;
  for (int64_t i = 0; i < kernel[0]; i++) {
    for (int64_t j = 0; j < kernel[1]; j++) {
      UOpPtr tap = window::reshaped(
          window::shrunk(cols, {{0, n}, {0, c}, {i, i + 1}, {j, j + 1}, {0, blocks[0]}, {0, blocks[1]}}),
          {n, c, blocks[0], 1, blocks[1], 1});
      // block y lands on y * stride + i * dilation - padding
      UOpPtr spread = window::reshaped(
          window::padded(tap, {{0, 0}, {0, 0}, {0, 0}, {0, stride[0] - 1}, {0, 0}, {0, stride[1] - 1}}),
          {n, c, blocks[0] * stride[0], blocks[1] * stride[1]});
      int64_t top = i * dilation[0] - padding[0], left = j * dilation[1] - padding[1];
      // a tap whose blocks all land in the padding adds nothing
      if (top + blocks[0] * stride[0] <= 0 || top >= output_size[0] || left + blocks[1] * stride[1] <= 0 ||
          left >= output_size[1])
        continue;
      UOpPtr placed = window::pad_spatial(spread, {{top, output_size[0] - top - blocks[0] * stride[0]},
                                                   {left, output_size[1] - left - blocks[1] * stride[1]}});
      sum = sum ? add(sum, placed) : placed;
    }
  }
  if (!sum) sum = full(const_like(cols, 0), {n, c, output_size[0], output_size[1]});
  sum = window::reshaped(sum, {n, parts, c / parts, output_size[0], output_size[1]});
  sum = window::permuted(sum, {0, 2, 3, 4, 1}); // (n, c, h, w, parts)
  write_values(out, cast(window::reshaped(sum, value_shape(out, to_shape(out.sizes()))), dt));
  return out;
}

at::Tensor col2im(const at::Tensor& self, c10::SymIntArrayRef output_size, c10::IntArrayRef kernel,
                  c10::IntArrayRef dilation, c10::IntArrayRef padding, c10::IntArrayRef stride) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return col2im_out(self, output_size, kernel, dilation, padding, stride, out);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("im2col", TORCH_FN(im2col));
  m.impl("im2col.out", TORCH_FN(im2col_out));
  m.impl("col2im", TORCH_FN(col2im));
  m.impl("col2im.out", TORCH_FN(col2im_out));
  m.impl("adaptive_max_pool2d", TORCH_FN(adaptive_max_pool<2>));
  m.impl("adaptive_max_pool2d.out", TORCH_FN(adaptive_max_pool_out<2>));
  m.impl("adaptive_max_pool2d_backward", TORCH_FN(adaptive_max_pool_backward<2>));
  m.impl("adaptive_max_pool2d_backward.grad_input", TORCH_FN(adaptive_max_pool_backward_out<2>));
  m.impl("adaptive_max_pool3d", TORCH_FN(adaptive_max_pool<3>));
  m.impl("adaptive_max_pool3d.out", TORCH_FN(adaptive_max_pool_out<3>));
  m.impl("adaptive_max_pool3d_backward", TORCH_FN(adaptive_max_pool_backward<3>));
  m.impl("adaptive_max_pool3d_backward.grad_input", TORCH_FN(adaptive_max_pool_backward_out<3>));
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
  m.impl("max_pool2d_with_indices.out", TORCH_FN(max_pool2d_with_indices_out));
  m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_with_indices_backward));
  m.impl("max_pool2d_with_indices_backward.grad_input", TORCH_FN(max_pool2d_with_indices_backward_out));
  m.impl("max_pool3d_with_indices", TORCH_FN(max_pool3d_with_indices));
  m.impl("max_pool3d_with_indices.out", TORCH_FN(max_pool3d_with_indices_out));
  m.impl("max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_with_indices_backward));
  m.impl("max_pool3d_with_indices_backward.grad_input", TORCH_FN(max_pool3d_with_indices_backward_out));
  m.impl("avg_pool2d", TORCH_FN((avg_pool_fn<2, &at::meta::avg_pool2d>)));
  m.impl("avg_pool2d.out", TORCH_FN((avg_pool_out_fn<2, &at::meta::avg_pool2d_outf>)));
  m.impl("avg_pool2d_backward", TORCH_FN((avg_pool_backward_fn<2, &at::meta::avg_pool2d_backward>)));
  m.impl("avg_pool2d_backward.grad_input",
         TORCH_FN((avg_pool_backward_out_fn<2, &at::meta::avg_pool2d_backward_outf>)));
  m.impl("avg_pool3d", TORCH_FN((avg_pool_fn<3, &at::meta::avg_pool3d>)));
  m.impl("avg_pool3d.out", TORCH_FN((avg_pool_out_fn<3, &at::meta::avg_pool3d_outf>)));
  m.impl("avg_pool3d_backward", TORCH_FN((avg_pool_backward_fn<3, &at::meta::avg_pool3d_backward>)));
  m.impl("avg_pool3d_backward.grad_input",
         TORCH_FN((avg_pool_backward_out_fn<3, &at::meta::avg_pool3d_backward_outf>)));
  m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool_fn<2>));
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool_backward_fn<2>));
  m.impl("_adaptive_avg_pool3d", TORCH_FN(adaptive_avg_pool_fn<3>));
  m.impl("_adaptive_avg_pool3d_backward", TORCH_FN(adaptive_avg_pool_backward_fn<3>));
}

} // namespace tiny
