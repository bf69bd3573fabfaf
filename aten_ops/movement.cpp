// Movement ATen ops that make new tensors: cat, constant/reflection/replication padding (and the
// backward of the latter two), flip, roll, repeat, repeat_interleave's indices, tril/triu, masked_fill_,
// narrow_copy.out.
//
// None of them copies. Each result is a UOp expression of views of its inputs: a shifted, flipped,
// cropped or broadcast view, and for results made of several parts (cat, pads, roll) one masked view
// per part selected by a `where` on the part's box (a masked view of `true`). The views fold into the
// index math of whichever kernel consumes the result.
//
// torch's checks come from torch itself where it can give them: a structured op's meta function
// (at::meta::cat, ...) checks the arguments, computes the result's sizes, strides and dtype, and
// checks and resizes an out= tensor exactly as the CPU kernel does. The other ops repeat the CPU
// kernel's checks here. Ops torch builds from these (stack, hstack, split, chunk, unbind, tile,
// flip.out, roll.out, masked_fill, clone, contiguous) need nothing of ours.

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Padding.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/reflection_pad1d_backward_meta_dispatch.h>
#include <ATen/ops/reflection_pad1d_meta_dispatch.h>
#include <ATen/ops/reflection_pad3d_backward_meta_dispatch.h>
#include <ATen/ops/reflection_pad3d_meta_dispatch.h>
#include <ATen/ops/replication_pad1d_backward_meta_dispatch.h>
#include <ATen/ops/replication_pad1d_meta_dispatch.h>
#include <ATen/ops/replication_pad2d_meta_dispatch.h>
#include <ATen/ops/replication_pad3d_meta_dispatch.h>
#include <ATen/ops/tril_meta_dispatch.h>
#include <ATen/ops/triu_meta_dispatch.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "aten_ops/read_on_host.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// ---- building blocks ----

// A tiny tensor with the sizes, strides and dtype torch's meta function chose.
at::Tensor like_meta(const at::Tensor& meta, c10::Device device) {
  return empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), device);
}

// Whole ranges of every dim of `shape`, with dim d's replaced by r.
Ranges along(const Shape& shape, size_t d, std::pair<int64_t, int64_t> r) {
  Ranges out;
  for (int64_t s : shape)
    out.emplace_back(0, s);
  out[d] = r;
  return out;
}

UOpPtr shrink_dim(const UOpPtr& x, size_t d, int64_t begin, int64_t end) {
  return shrink(x, along(x->shape, d, {begin, end}));
}

UOpPtr pad_dim(const UOpPtr& x, size_t d, int64_t before, int64_t after) {
  Ranges pads(x->shape.size(), {0, 0});
  pads[d] = {before, after};
  return pad(x, pads);
}

UOpPtr flip_dim(const UOpPtr& x, size_t d) {
  std::vector<bool> axes(x->shape.size());
  axes[d] = true;
  return flip(x, axes);
}

UOpPtr expand_dim(const UOpPtr& x, size_t d, int64_t n) {
  Shape s = x->shape;
  s[d] = n;
  return expand(x, s);
}

UOpPtr full_bool(bool v, const Shape& shape) { return fixed(DType::Bool, v, shape); }

// ---- complex tensors ----
// A complex tensor moves as its (real, imaginary) pairs (csrc/tensor_bridge.h: read_complex): a UOp with
// one more axis, of 2, last, which every op here leaves whole.

// (read_values, write_values, value_dtype, value_shape, scalar_value: csrc/tensor_bridge.h)

// A part of a result: `value` placed at `at` (an offset per dim).
struct Part {
  UOpPtr value;
  Shape at;
};

// A result of `shape` made of disjoint parts that cover it. Each part is padded to the whole shape
// (a masked view: 0 outside its box) and selected by a `where` on its box; a where rather than a sum
// keeps the parts' values exact (-0.0 + 0.0 would be +0.0).
UOpPtr assemble(const Shape& shape, const std::vector<Part>& parts) {
  UOpPtr out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (prod(it->value->shape) == 0) continue;
    Ranges pads;
    for (size_t d = 0; d < shape.size(); d++)
      pads.emplace_back(it->at[d], shape[d] - it->at[d] - it->value->shape[d]);
    UOpPtr placed = pad(it->value, pads);
    out = out ? where(pad(full_bool(true, it->value->shape), pads), placed, out) : placed;
  }
  return out;
}

// Every combination of one choice per list: the parts of a result split along several dims.
template <typename T> std::vector<std::vector<T>> combinations(const std::vector<std::vector<T>>& lists) {
  std::vector<std::vector<T>> out{{}};
  for (const std::vector<T>& choices : lists) {
    std::vector<std::vector<T>> next;
    for (const std::vector<T>& prefix : out)
      for (const T& c : choices) {
        next.push_back(prefix);
        next.back().push_back(c);
      }
    out = std::move(next);
  }
  return out;
}

// ---- cat ----

void write_cat(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out) {
  auto inputs = tensors.materialize();
  dim = at::legacy_cat_wrap_dim(dim, inputs);
  Shape shape = value_shape(out, to_shape(out.sizes()));
  DType dt = value_dtype(out.scalar_type());
  std::vector<Part> parts;
  int64_t offset = 0;
  for (const at::Tensor& t : inputs) {
    if (t.dim() == 1 && t.numel() == 0) continue; // torch's legacy rule: 1-D empty tensors are skipped
    at::assert_no_overlap(out, t);
    Shape at(shape.size(), 0);
    at[dim] = offset;
    // a real input of a complex result reads as (value, 0) pairs
    parts.push_back({cast(out.is_complex() ? read_complex(t) : read(t), dt), at});
    offset += t.size(dim);
  }
  if (out.numel() > 0) write_values(out, assemble(shape, parts));
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  std::vector<at::Tensor> all(tensors.begin(), tensors.end());
  all.push_back(out);
  check_same_device(all);
  at::meta::cat_outf(tensors, dim, out);
  at::assert_no_internal_overlap(out);
  write_cat(tensors, dim, out);
  return out;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  check_same_device(std::vector<at::Tensor>(tensors.begin(), tensors.end()));
  at::Tensor meta = at::meta::cat(tensors, dim);
  c10::Device device = tensors.front().device();
  for (const at::Tensor& t : tensors)
    if (t.is_privateuseone()) device = t.device();
  at::Tensor out = like_meta(meta, device);
  write_cat(tensors, dim, out);
  return out;
}

// ---- constant_pad_nd ----

// Pads (before, after) of the last len(pad)/2 dims, torch's order: last dim first.
Ranges dim_pads(int64_t ndim, c10::IntArrayRef pad) {
  Ranges out(ndim, {0, 0});
  for (size_t i = 0; i < pad.size() / 2; i++)
    out[ndim - 1 - i] = {pad[2 * i], pad[2 * i + 1]};
  return out;
}

// The positive part of each pad as a pad, the negative part as a crop.
UOpPtr pad_and_crop(const UOpPtr& x, const Ranges& pads,
                    const std::function<UOpPtr(const UOpPtr&, const Ranges&)>& grow) {
  Ranges positive, crop;
  for (size_t d = 0; d < pads.size(); d++)
    positive.emplace_back(std::max<int64_t>(pads[d].first, 0), std::max<int64_t>(pads[d].second, 0));
  UOpPtr grown = grow(x, positive);
  for (size_t d = 0; d < pads.size(); d++)
    crop.emplace_back(std::max<int64_t>(-pads[d].first, 0), grown->shape[d] - std::max<int64_t>(-pads[d].second, 0));
  return shrink(grown, crop);
}

at::Tensor constant_pad_nd(const at::Tensor& self, c10::IntArrayRef pad, const at::Scalar& value) {
  TORCH_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
  int64_t ndim = self.dim(), npad = static_cast<int64_t>(pad.size() / 2);
  TORCH_CHECK(ndim >= npad,
              "Length of pad should be no more than twice the number of dimensions of the input. Pad length is ",
              pad.size(), "while the input has ", ndim, "dimensions.");
  Ranges pads = dim_pads(ndim, pad);
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  bool grows = false;
  for (int64_t d = ndim - npad; d < ndim; d++) {
    int64_t n = self.size(d) + pads[d].first + pads[d].second;
    TORCH_CHECK(n >= 0, "The input size ", self.size(d), ", plus negative padding ", pads[d].first, " and ",
                pads[d].second, " resulted in a negative output size, which is invalid. Check dimension ", d,
                " of your input.");
    shape[d] = n;
    grows = grows || pads[d].first > 0 || pads[d].second > 0;
  }
  // torch: a pad that only crops is a clone of the narrowed input (its layout kept); otherwise a new
  // tensor in the input's suggested memory format
  at::Tensor out;
  if (grows) {
    // torch crops the input by each negative pad with narrow() before copying it in (and so raises
    // narrow's errors when a crop exceeds the input, even if the other side's pad makes up for it)
    at::Tensor cropped = self;
    for (int64_t d = ndim - npad; d < ndim; d++) {
      if (pads[d].first < 0) cropped = cropped.narrow(d, -pads[d].first, cropped.size(d) + pads[d].first);
      if (pads[d].second < 0) cropped = cropped.narrow(d, 0, cropped.size(d) + pads[d].second);
    }
    out = empty_tiny(shape, self.scalar_type(), self.device(), self.suggest_memory_format());
  } else {
    at::Tensor narrowed = self;
    for (int64_t d = ndim - npad; d < ndim; d++)
      narrowed = narrowed.narrow(d, -pads[d].first, shape[d]);
    out = at::empty_like(narrowed, at::MemoryFormat::Preserve);
  }
  if (self.is_complex()) pads.emplace_back(0, 0); // the pair's axis
  scalar_value(value, self.scalar_type(), {});    // converts (and checks) the value even when nothing is filled
  if (out.numel() == 0) return out;
  bool plain_zero = value.isComplex() ? value.toComplexDouble() == c10::complex<double>(0.0)
                                      : value.equal(0) && !(value.isFloatingPoint() && std::signbit(value.toDouble()));
  UOpPtr v = pad_and_crop(read_values(self), pads, [&](const UOpPtr& x, const Ranges& positive) {
    UOpPtr padded = tiny::pad(x, positive);
    if (plain_zero) return padded;
    Shape elements = padded->shape;
    if (self.is_complex()) elements.pop_back();
    return where(tiny::pad(full_bool(true, x->shape), positive), padded,
                 scalar_value(value, self.scalar_type(), elements));
  });
  write_values(out, v);
  return out;
}

// ---- reflection and replication padding ----

enum class PadMode { Reflect, Replicate };

// A stretch of a padded dim: output [at, at + len) reads input [src, src + src_len), flipped
// (reflection) or broadcast from one element (replication, when src_len != len).
struct Stretch {
  int64_t at, len, src, src_len;
  bool flipped;
};

std::vector<Stretch> stretches(int64_t n, int64_t before, int64_t after, PadMode mode) {
  std::vector<Stretch> out;
  bool reflect = mode == PadMode::Reflect;
  if (before > 0) out.push_back(reflect ? Stretch{0, before, 1, before, true} : Stretch{0, before, 0, 1, false});
  out.push_back({before, n, 0, n, false});
  if (after > 0)
    out.push_back(reflect ? Stretch{before + n, after, n - after - 1, after, true}
                          : Stretch{before + n, after, n - 1, 1, false});
  return out;
}

// The stretches of every padded dim (the last ones), one list per dim.
std::vector<std::vector<Stretch>> pad_layout(const Shape& shape, const Ranges& positive, PadMode mode) {
  std::vector<std::vector<Stretch>> out;
  for (size_t d = 0; d < shape.size(); d++) {
    auto [b, a] = positive[d];
    out.push_back(b == 0 && a == 0 ? std::vector<Stretch>{{0, shape[d], 0, shape[d], false}}
                                   : stretches(shape[d], b, a, mode));
  }
  return out;
}

UOpPtr mode_pad(const UOpPtr& x, const Ranges& pads, PadMode mode) {
  return pad_and_crop(x, pads, [&](const UOpPtr& x, const Ranges& positive) {
    Shape shape = x->shape;
    for (size_t d = 0; d < shape.size(); d++)
      shape[d] += positive[d].first + positive[d].second;
    std::vector<Part> parts;
    for (const std::vector<Stretch>& combo : combinations(pad_layout(x->shape, positive, mode))) {
      UOpPtr v = x;
      Shape at;
      for (size_t d = 0; d < combo.size(); d++) {
        const Stretch& s = combo[d];
        v = shrink_dim(v, d, s.src, s.src + s.src_len);
        if (s.flipped) v = flip_dim(v, d);
        if (s.src_len != s.len) v = expand_dim(v, d, s.len);
        at.push_back(s.at);
      }
      parts.push_back({v, at});
    }
    return assemble(shape, parts);
  });
}

// The gradient of mode_pad: each output stretch sends its gradient back to the input elements it
// read (flipped back, or summed over a broadcast), and the contributions add up.
UOpPtr mode_pad_backward(const UOpPtr& grad, const Shape& in_shape, const Ranges& pads, PadMode mode) {
  Ranges positive, uncrop;
  for (const auto& [b, a] : pads) {
    positive.emplace_back(std::max<int64_t>(b, 0), std::max<int64_t>(a, 0));
    uncrop.emplace_back(std::max<int64_t>(-b, 0), std::max<int64_t>(-a, 0));
  }
  UOpPtr g = pad(grad, uncrop); // the cropped elements had no gradient
  UOpPtr sum;
  for (const std::vector<Stretch>& combo : combinations(pad_layout(in_shape, positive, mode))) {
    UOpPtr v = g;
    for (size_t d = 0; d < combo.size(); d++) {
      const Stretch& s = combo[d];
      v = shrink_dim(v, d, s.at, s.at + s.len);
      if (s.flipped) v = flip_dim(v, d);
      if (s.src_len != s.len) v = reduce(v, Ops::ADD, {static_cast<int64_t>(d)});
      v = pad_dim(v, d, s.src, in_shape[d] - s.src - s.src_len);
    }
    sum = sum ? alu(Ops::ADD, sum, v) : v;
  }
  return sum;
}

void write_mode_pad(const at::Tensor& out, const at::Tensor& self, c10::IntArrayRef padding, PadMode mode) {
  if (out.numel() == 0) return;
  Ranges pads = dim_pads(self.dim(), padding);
  if (self.is_complex()) pads.emplace_back(0, 0); // the pair's axis
  write_values(out, mode_pad(read_values(self), pads, mode));
}

void write_mode_pad_backward(const at::Tensor& grad_input, const at::Tensor& grad_output, const at::Tensor& self,
                             c10::IntArrayRef padding, PadMode mode) {
  if (grad_input.numel() == 0) return;
  DType dt = value_dtype(grad_input.scalar_type());
  UOpPtr g = cast(read_values(grad_output), opmath(dt));
  Ranges pads = dim_pads(self.dim(), padding);
  if (grad_input.is_complex()) pads.emplace_back(0, 0); // the pair's axis
  write_values(grad_input, cast(mode_pad_backward(g, value_shape(grad_input, to_shape(self.sizes())), pads, mode), dt));
}

// The structured pads: torch's meta function checks and shapes. The CPU kernels then give the
// result the input's suggested memory format: reflection_pad3d (and its backward) always, even an out=
// tensor; replication_pad2d/3d through the meta function's options, which at::meta's own wrapper
// drops, so here: a new result, or an out= tensor that had to be resized.
enum class Restride { Never, Always, WhenResized };

void restride(const at::Tensor& out, const at::Tensor& self, Restride when, bool resized) {
  if (when == Restride::Always || (when == Restride::WhenResized && resized))
    out.resize_(out.sizes(), self.suggest_memory_format());
}

template <auto Meta, PadMode Mode, Restride When>
at::Tensor structured_pad(const at::Tensor& self, c10::IntArrayRef padding) {
  at::Tensor out = like_meta(Meta(self, padding), self.device());
  restride(out, self, When, true);
  write_mode_pad(out, self, padding, Mode);
  return out;
}

template <auto MetaOut, PadMode Mode, Restride When>
at::Tensor& structured_pad_out(const at::Tensor& self, c10::IntArrayRef padding, at::Tensor& out) {
  std::vector<int64_t> before(out.sizes().begin(), out.sizes().end());
  MetaOut(self, padding, out);
  restride(out, self, When, !out.sizes().equals(before));
  write_mode_pad(out, self, padding, Mode);
  return out;
}

template <auto Meta, PadMode Mode, Restride When>
at::Tensor structured_pad_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef padding) {
  at::Tensor grad_input = like_meta(Meta(grad_output, self, padding), self.device());
  restride(grad_input, self, When, true);
  write_mode_pad_backward(grad_input, grad_output, self, padding, Mode);
  return grad_input;
}

template <auto MetaOut, PadMode Mode, Restride When>
at::Tensor& structured_pad_backward_out(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef padding,
                                        at::Tensor& grad_input) {
  std::vector<int64_t> before(grad_input.sizes().begin(), grad_input.sizes().end());
  MetaOut(grad_output, self, padding, grad_input);
  restride(grad_input, self, When, !grad_input.sizes().equals(before));
  write_mode_pad_backward(grad_input, grad_output, self, padding, Mode);
  return grad_input;
}

// reflection_pad2d has no meta function: the CPU kernel's checks.
void check_reflection_pad2d(const at::Tensor& self, c10::IntArrayRef padding) {
  at::native::padding::check_valid_input<2>(self, padding);
  int64_t dim_w = self.dim() == 4 ? 3 : 2, dim_h = dim_w - 1;
  int64_t pad_l = padding[0], pad_r = padding[1], pad_t = padding[2], pad_b = padding[3];
  int64_t in_h = self.size(dim_h), in_w = self.size(dim_w);
  TORCH_CHECK(pad_l < in_w && pad_r < in_w,
              "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (",
              pad_l, ", ", pad_r, ") at dimension ", dim_w, " of input ", self.sizes());
  TORCH_CHECK(pad_t < in_h && pad_b < in_h,
              "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding (",
              pad_t, ", ", pad_b, ") at dimension ", dim_h, " of input ", self.sizes());
  int64_t out_h = in_h + pad_t + pad_b, out_w = in_w + pad_l + pad_r;
  TORCH_CHECK(out_w >= 1 || out_h >= 1, "input (H: ", in_h, ", W: ", in_w,
              ") is too small. Calculated output H: ", out_h, " W: ", out_w);
}

std::vector<int64_t> padded_sizes(const at::Tensor& self, c10::IntArrayRef padding) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  Ranges pads = dim_pads(self.dim(), padding);
  for (size_t d = 0; d < sizes.size(); d++)
    sizes[d] += pads[d].first + pads[d].second;
  return sizes;
}

at::Tensor& reflection_pad2d_out(const at::Tensor& self, c10::IntArrayRef padding, at::Tensor& out) {
  check_reflection_pad2d(self, padding);
  if (self.dim() == 4)
    out.resize_(padded_sizes(self, padding), self.suggest_memory_format());
  else
    out.resize_(padded_sizes(self, padding));
  write_mode_pad(out, self, padding, PadMode::Reflect);
  return out;
}

at::Tensor reflection_pad2d(const at::Tensor& self, c10::IntArrayRef padding) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return reflection_pad2d_out(self, padding, out);
}

// The backward ops without a meta function: the CPU kernels' checks of grad_output's sizes.
template <int Dims>
void check_pad_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef padding) {
  TORCH_CHECK(static_cast<int>(padding.size()) == 2 * Dims, "padding size is expected to be ", 2 * Dims);
  std::vector<int64_t> want = padded_sizes(self, padding);
  constexpr const char* names[] = {"width", "height", "depth"};
  for (int i = 0; i < Dims; i++) {
    int64_t d = self.dim() - 1 - i;
    TORCH_CHECK(want[d] == grad_output.size(d), "gradOutput ", names[i], " unexpected. Expected: ", want[d],
                ", Got: ", grad_output.size(d));
  }
}

template <int Dims, PadMode Mode>
at::Tensor& pad_backward_out(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef padding,
                             at::Tensor& grad_input) {
  check_pad_backward<Dims>(grad_output, self, padding);
  grad_input.resize_(self.sizes(), self.suggest_memory_format());
  write_mode_pad_backward(grad_input, grad_output, self, padding, Mode);
  return grad_input;
}

template <int Dims, PadMode Mode>
at::Tensor pad_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef padding) {
  at::Tensor grad_input = empty_tiny({0}, self.scalar_type(), self.device());
  return pad_backward_out<Dims, Mode>(grad_output, self, padding, grad_input);
}

// ---- unfold's backward ----

// The gradient g (real) has the input's shape with dim d holding the windows, plus a trailing dim of each
// window's `size` elements; element k of window w came from input position w * step + k. The gradient sums,
// for each k, the k-th elements spread `step` apart and shifted by k (views with masks: no scatter).
UOpPtr unfold_sum(UOpPtr g, const Shape& in, size_t d, int64_t size, int64_t step) {
  DType compute = g->dtype;
  Shape work = in.empty() ? Shape{1} : in; // a 0-dim input unfolds as one element
  Shape windows = work;
  windows[d] = in.empty() ? (size > 0 ? 1 : 0) : g->shape[d]; // a 0-dim input's unfold has no window dim
  windows.push_back(size);
  g = reshape(g, windows);
  int64_t n = windows[d], length = work[d];
  UOpPtr total = fixed(compute, 0, work);
  for (int64_t k = 0; k < size && n > 0; k++) {
    Shape one = windows;
    one.back() = 1;
    UOpPtr gk = reshape(shrink(g, along(windows, windows.size() - 1, {k, k + 1})), Shape(one.begin(), one.end() - 1));
    Shape spread = gk->shape; // (.., n, 1, ..) padded to (.., n, step, ..): window w at w * step
    spread.insert(spread.begin() + d + 1, 1);
    gk = pad_dim(reshape(gk, spread), d + 1, 0, step - 1);
    Shape flat = work;
    flat[d] = n * step;
    gk = reshape(gk, flat);
    int64_t after = length - k - n * step; // the last window ends inside the input: only padding is cut
    gk = after >= 0 ? pad_dim(gk, d, k, after) : shrink_dim(pad_dim(gk, d, k, 0), d, 0, length);
    total = alu(Ops::ADD, total, gk);
  }
  return reshape(total, in);
}

// A complex gradient sums its real and imaginary parts each as a real one.
at::Tensor unfold_backward(const at::Tensor& grad, c10::SymIntArrayRef input_sizes, int64_t dim, int64_t size,
                           int64_t step) {
  Shape in = to_shape(C10_AS_INTARRAYREF_SLOW(input_sizes));
  size_t d = at::maybe_wrap_dim(dim, static_cast<int64_t>(in.size()));
  TORCH_CHECK(step > 0, "step is ", step, " but must be > 0");
  at::Tensor out = empty_tiny(c10::IntArrayRef(in), grad.scalar_type(), grad.device());
  if (out.numel() == 0) return out;
  DType dt = value_dtype(grad.scalar_type()), compute = opmath(dt);
  if (grad.is_complex()) {
    UOpPtr pairs = read_complex(grad);
    UOpPtr re = unfold_sum(cast(real_part(pairs), compute), in, d, size, step);
    UOpPtr im = unfold_sum(cast(imag_part(pairs), compute), in, d, size, step);
    write_complex(out, join_complex(cast(re, dt), cast(im, dt)));
  } else {
    write(out, cast(unfold_sum(cast(read(grad), compute), in, d, size, step), dt));
  }
  return out;
}

// ---- select's and slice's backward ----

// The gradient g of a slice (dim d holding its n elements, each `step` apart from `start`) spread into zeros of the
// input's dim d of `length`: padding views, no buffer filled (see unfold_sum).
UOpPtr spread_slice(UOpPtr g, size_t d, int64_t length, int64_t start, int64_t step) {
  const int64_t n = g->shape[d];
  if (step > 1) {
    Shape spread = g->shape; // (.., n, 1, ..) padded to (.., n, step, ..): element i at i * step
    spread.insert(spread.begin() + static_cast<std::ptrdiff_t>(d) + 1, 1);
    g = pad_dim(reshape(g, spread), d + 1, 0, step - 1);
    Shape flat = g->shape;
    flat.erase(flat.begin() + static_cast<std::ptrdiff_t>(d) + 1);
    flat[d] = n * step;
    g = reshape(g, flat);
  }
  const int64_t after = length - start - n * step; // past the last element, only padding is cut
  return after >= 0 ? pad_dim(g, d, start, after) : shrink_dim(pad_dim(g, d, start, 0), d, 0, length);
}

// Zeros of the input's shape where the selected part holds the gradient, as torch's select_backward and slice_backward
// (a buffer of zeros, the gradient copied into that part, broadcast as copy_ does) compute it, but as one lazy value:
// autograd's sum of several (nn.MultiheadAttention's query, key and value selected from its packed projection: three
// zero-filled (3, L, N, E) buffers, three copies into them, then their sum) becomes one kernel.
at::Tensor spread_gradient(const at::Tensor& grad, const Shape& in, size_t d, int64_t start, int64_t n, int64_t step,
                           bool keep_dim) {
  at::Tensor out = empty_tiny(c10::IntArrayRef(in), grad.scalar_type(), grad.device());
  Shape part = in;
  part[d] = n;
  if (!keep_dim) part.erase(part.begin() + static_cast<std::ptrdiff_t>(d));
  at::Tensor g = grad.expand(c10::IntArrayRef(part)); // copy_'s broadcast
  if (out.numel() == 0) return out;
  UOpPtr v = read_values(g);
  if (!keep_dim) {
    Shape one = v->shape;
    one.insert(one.begin() + static_cast<std::ptrdiff_t>(d), 1);
    v = reshape(v, one);
  }
  write_values(out, spread_slice(v, d, in[d], start, step));
  return out;
}

at::Tensor select_backward(const at::Tensor& grad, c10::SymIntArrayRef input_sizes, int64_t dim, c10::SymInt index) {
  Shape in = to_shape(C10_AS_INTARRAYREF_SLOW(input_sizes));
  TORCH_CHECK_INDEX(!in.empty(), "select() cannot be applied to a 0-dim tensor.");
  size_t d = at::maybe_wrap_dim(dim, static_cast<int64_t>(in.size()));
  int64_t i = index.expect_int(), size = in[d];
  TORCH_CHECK_INDEX(i >= -size && i < size, "select(): index ", i, " out of range for tensor of size ",
                    c10::IntArrayRef(in), " at dimension ", dim);
  return spread_gradient(grad, in, d, i < 0 ? i + size : i, 1, 1, false);
}

at::Tensor slice_backward(const at::Tensor& grad, c10::SymIntArrayRef input_sizes, int64_t dim, c10::SymInt start,
                          c10::SymInt end, c10::SymInt step) {
  Shape in = to_shape(C10_AS_INTARRAYREF_SLOW(input_sizes));
  TORCH_CHECK_INDEX(!in.empty(), "slice() cannot be applied to a 0-dim tensor.");
  size_t d = at::maybe_wrap_dim(dim, static_cast<int64_t>(in.size()));
  int64_t size = in[d], b = start.expect_int(), e = end.expect_int(), st = step.expect_int();
  TORCH_CHECK(st > 0, "slice step must be positive");
  // slice()'s bounds: negative ones from the end, clamped to the dim, an empty slice where end precedes start
  if (b < 0) b += size;
  if (e < 0) e += size;
  b = std::clamp<int64_t>(b, 0, size);
  e = std::clamp<int64_t>(e, b, size);
  return spread_gradient(grad, in, d, b, (e - b + st - 1) / st, st, true);
}

// ---- flip, roll, repeat ----

at::Tensor flip(const at::Tensor& self, c10::IntArrayRef dims) {
  auto bits = at::dim_list_to_bitset(dims, self.dim()); // wraps, and rejects repeated dims
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  std::vector<bool> axes(self.dim() + (self.is_complex() ? 1 : 0));
  for (int64_t d = 0; d < self.dim(); d++)
    axes[d] = bits[d];
  if (out.numel() > 0) write_values(out, tiny::flip(read_values(self), axes));
  return out;
}

at::Tensor roll(const at::Tensor& self, c10::IntArrayRef shifts, c10::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) {
    // torch rolls the flattened tensor
    at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
    if (self.numel() > 0) {
      int64_t n = self.numel(), s = ((shifts[0] % n) + n) % n;
      Shape flat_shape = value_shape(self, {n}), at_end(flat_shape.size(), 0), at_s = at_end;
      at_s[0] = s;
      UOpPtr flat = reshape(read_values(self), flat_shape);
      UOpPtr rolled =
          assemble(flat_shape, {{shrink_dim(flat, 0, n - s, n), at_end}, {shrink_dim(flat, 0, 0, n - s), at_s}});
      write_values(out, reshape(rolled, value_shape(self, to_shape(self.sizes()))));
    }
    return out;
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  if (self.numel() == 0) return self.clone(at::MemoryFormat::Preserve);
  // A roll of several dims is torch's roll of each in turn: the shifts add up per dim.
  Shape shift(self.dim(), 0);
  for (size_t i = 0; i < dims.size(); i++) {
    int64_t d = at::maybe_wrap_dim(dims[i], self.dim());
    shift[d] += shifts[i];
  }
  // Per dim, the stretches of the result: (source begin, length, offset in the result).
  Shape shape = to_shape(self.sizes());
  std::vector<std::vector<std::array<int64_t, 3>>> splits;
  for (size_t d = 0; d < shape.size(); d++) {
    int64_t n = shape[d], s = ((shift[d] % n) + n) % n;
    if (s == 0)
      splits.push_back({{0, n, 0}});
    else
      splits.push_back({{n - s, s, 0}, {0, n - s, s}});
  }
  if (self.is_complex()) splits.push_back({{0, 2, 0}});
  UOpPtr x = read_values(self);
  std::vector<Part> parts;
  for (const auto& combo : combinations(splits)) {
    UOpPtr v = x;
    Shape at;
    for (size_t d = 0; d < combo.size(); d++) {
      auto [src, len, offset] = combo[d];
      v = shrink_dim(v, d, src, src + len);
      at.push_back(offset);
    }
    parts.push_back({v, at});
  }
  at::Tensor out = at::empty_like(self, self.suggest_memory_format());
  write_values(out, assemble(value_shape(self, shape), parts));
  return out;
}

at::Tensor repeat(const at::Tensor& self, c10::IntArrayRef repeats) {
  TORCH_CHECK(repeats.size() >= static_cast<size_t>(self.dim()),
              "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  size_t lead = repeats.size() - self.dim();
  Shape padded(lead, 1), target, interleaved, expanded;
  padded.insert(padded.end(), self.sizes().begin(), self.sizes().end());
  for (size_t i = 0; i < repeats.size(); i++) {
    target.push_back(padded[i] * repeats[i]);
    interleaved.insert(interleaved.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
  }
  at::Tensor out = at::empty(target, self.options()); // rejects negative repeats as torch does
  if (out.numel() == 0) return out;
  write_values(out,
               reshape(expand(reshape(read_values(self), value_shape(self, interleaved)), value_shape(self, expanded)),
                       value_shape(self, target)));
  return out;
}

// torch.repeat_interleave(repeats): each i in [0, n) repeated repeats[i] times, in repeats' dtype. Output j holds
// the number of i whose end (the cumulative sum of repeats) is at most j: a 1 scattered at each end, summed. The
// size depends on the data: the caller's output_size, trusted as torch's CUDA kernel trusts it (no sync), or else
// the total read to the host, with the smallest repeat for torch's check (one sync).
at::Tensor repeat_interleave_indices(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  // the CPU's dispatch on the dtype comes before its checks
  at::ScalarType st = repeats.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kLong || st == at::kInt || st == at::kShort || st == at::kChar ||
                                  st == at::kByte,
                              "\"repeat_interleave_cpu\" not implemented for '", st, "'");
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  int64_t n = repeats.size(0);
  if (n == 0) return at::empty_like(repeats, at::MemoryFormat::Contiguous);
  UOpPtr counts = cast(read(repeats), DType::Int64);
  at::Tensor ends = at::cumsum(repeats, 0, at::kLong);
  int64_t total = 0;
  if (output_size) {
    total = output_size->expect_int();
  } else {
    std::vector<int64_t> host =
        read_on_host({shrink(read(ends), {{n - 1, n}}), reduce(counts, Ops::MIN, {0})}, repeats.device());
    total = host[0];
    TORCH_CHECK(host[1] >= 0, "repeats can not be negative");
  }
  at::Tensor out = at::empty({total}, repeats.options());
  if (total == 0) return out;
  // slot `total` takes the ends at or past it; clamped, so an output_size below the sum (or negative repeats
  // with one) cannot scatter outside the buffer
  at::Tensor marks = empty_tiny({total + 1}, at::kLong, repeats.device());
  write(marks, fixed(DType::Int64, 0, {total + 1}));
  UOpPtr at_end =
      alu(Ops::MIN, alu(Ops::MAX, read(ends), fixed(DType::Int64, 0, {n})), fixed(DType::Int64, total, {n}));
  lazy_buffer(marks).scatter(DType::Int64, at_end, fixed(DType::Int64, 1, {n}), Ops::ADD);
  out.copy_(at::cumsum(marks.slice(0, 0, total), 0));
  return out;
}

// ---- tril, triu ----

// Keeps the elements on and below (tril) or above (triu) the k-th diagonal, by comparing iota row
// and column indices.
void write_triangle(const at::Tensor& out, const at::Tensor& self, int64_t k, bool lower) {
  if (out.numel() == 0) return;
  Shape shape = to_shape(self.sizes());
  size_t nd = shape.size();
  int64_t h = shape[nd - 2], w = shape[nd - 1];
  Shape ones(nd, 1), rows = ones, cols = ones;
  rows[nd - 2] = h;
  cols[nd - 1] = w;
  UOpPtr row = expand(reshape(iota(h, DType::Int64), rows), shape);
  UOpPtr col = expand(reshape(iota(w, DType::Int64), cols), shape);
  UOpPtr diag = alu(Ops::ADD, row, scalar_constant(at::Scalar(k), DType::Int64, shape)); // column of the diagonal
  UOpPtr keep = lower ? alu(Ops::CMPLE, col, diag) : alu(Ops::CMPLE, diag, col);
  if (self.is_complex() || out.is_complex()) {
    // a complex tensor's pairs, each kept or zeroed whole; a cast into another dtype goes to the CPU fallback
    if (self.scalar_type() != out.scalar_type())
      to_tiny_dtype(out.is_complex() ? out.scalar_type() : self.scalar_type());
    UOpPtr x = read_values(self);
    Shape lane = shape;
    lane.push_back(1);
    write_values(out, where(expand(reshape(keep, lane), x->shape), x, fixed(x->dtype, 0, x->shape)));
    return;
  }
  DType dt = to_tiny_dtype(out.scalar_type());
  UOpPtr x = cast(read(self), dt);
  write(out, where(keep, x, fixed(dt, 0, shape)));
}

template <bool Lower> at::Tensor triangle(const at::Tensor& self, int64_t k) {
  at::Tensor out = like_meta(Lower ? at::meta::tril(self, k) : at::meta::triu(self, k), self.device());
  write_triangle(out, self, k, Lower);
  return out;
}

template <bool Lower> at::Tensor& triangle_out(const at::Tensor& self, int64_t k, at::Tensor& out) {
  if (Lower)
    at::meta::tril_outf(self, k, out);
  else
    at::meta::triu_outf(self, k, out);
  write_triangle(out, self, k, Lower);
  return out;
}

// ---- masked_fill_ ----

void masked_fill_with(at::Tensor& self, const at::Tensor& mask, const std::function<UOpPtr(const Shape&)>& value) {
  check_same_device({self, mask});
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
    TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
  at::assert_no_partial_overlap(self, mask);
  // torch's iterator: the mask broadcasts to self, which keeps its shape
  at::TensorIteratorConfig()
      .set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .resize_outputs(false)
      .add_output(self)
      .add_const_input(mask)
      .build();
  Shape shape = to_shape(self.sizes());
  UOpPtr v = value(shape);
  if (self.numel() == 0) return;
  UOpPtr m = read(mask);
  Shape padded(shape.size() - m->shape.size(), 1), full = value_shape(self, shape);
  padded.insert(padded.end(), m->shape.begin(), m->shape.end());
  if (self.is_complex()) padded.push_back(1);
  write_values(self, where(expand(reshape(m, padded), full), v, read_values(self)));
}

at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  masked_fill_with(self, mask, [&](const Shape& shape) { return scalar_value(value, self.scalar_type(), shape); });
  return self;
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  if (!value.is_privateuseone()) return masked_fill_scalar(self, mask, value.item());
  check_same_device({self, value});
  // a tiny value stays lazy: no sync
  masked_fill_with(self, mask, [&](const Shape& shape) {
    UOpPtr v = cast(self.is_complex() ? read_complex(value) : read(value), value_dtype(self.scalar_type()));
    Shape full = value_shape(self, shape), ones(shape.size(), 1);
    return expand(reshape(v, value_shape(self, ones)), full);
  });
  return self;
}

// channel_shuffle: channels (dim 1) seen as (groups, channels / groups), the two swapped; the result in
// the input's suggested memory format, as torch's CPU kernel writes it.
at::Tensor channel_shuffle(const at::Tensor& self, int64_t groups) {
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input with > 2 dims, but got input with sizes ", self.sizes());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive.", " Value of groups:", groups);
  int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  at::Tensor out = empty_tiny(self.sizes(), self.scalar_type(), self.device(), self.suggest_memory_format());
  if (self.numel() == 0) return out;
  UOpPtr x = read_values(self);
  Shape split = value_shape(self, {self.size(0), groups, c / groups, self.numel() / (self.size(0) * c)});
  std::vector<int64_t> swap(split.size());
  std::iota(swap.begin(), swap.end(), 0);
  std::swap(swap[1], swap[2]);
  write_values(out, reshape(permute(reshape(x, split), swap), x->shape));
  return out;
}

// narrow_copy's out= form: the narrowed view copied into out (resized without a warning, its strides kept when
// its shape is right), with the CPU kernel's checks in its order: a 0-dim self, out's dtype, the dim (a negative
// one wrapped as everywhere, one past the last not), start (wrapped, IndexError past the size), the length.
at::Tensor& narrow_copy_out(const at::Tensor& self, int64_t dim, int64_t start, int64_t length, at::Tensor& out) {
  TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "narrow_copy(): expected out to have dtype ", self.scalar_type(),
              ", but got ", out.scalar_type());
  check_same_device({self, out});
  if (dim < 0) dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(dim < self.dim(), "narrow_copy(): dim ", dim, " is out of range for a tensor of ", self.dim(),
              " dimensions");
  const int64_t size = self.size(dim);
  TORCH_CHECK_INDEX(start >= -size && start <= size, "start out of range (expected to be in range of [", -size, ", ",
                    size, "], but got ", start, ")");
  if (start < 0) start += size;
  TORCH_CHECK(length >= 0 && start <= size - length, "start (", start, ") + length (", length,
              ") exceeds dimension size (", size, ").");
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[static_cast<size_t>(dim)] = length;
  out.resize_(sizes);
  if (out.numel() > 0) out.copy_(self.narrow(dim, start, length));
  return out;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("cat", cat, UnsignedPolicy::CpuChecked);
  m.impl("channel_shuffle", channel_shuffle);
  m.impl("cat.out", cat_out, UnsignedPolicy::CpuChecked);
  m.impl("constant_pad_nd", constant_pad_nd, UnsignedPolicy::Native);
  m.impl("reflection_pad1d", structured_pad<&at::meta::reflection_pad1d, PadMode::Reflect, Restride::Never>);
  m.impl("reflection_pad1d.out",
         structured_pad_out<&at::meta::reflection_pad1d_outf, PadMode::Reflect, Restride::Never>);
  m.impl("reflection_pad2d", reflection_pad2d);
  m.impl("reflection_pad2d.out", reflection_pad2d_out);
  m.impl("reflection_pad3d", structured_pad<&at::meta::reflection_pad3d, PadMode::Reflect, Restride::Always>);
  m.impl("reflection_pad3d.out",
         structured_pad_out<&at::meta::reflection_pad3d_outf, PadMode::Reflect, Restride::Always>);
  m.impl("replication_pad1d", structured_pad<&at::meta::replication_pad1d, PadMode::Replicate, Restride::Never>);
  m.impl("replication_pad1d.out",
         structured_pad_out<&at::meta::replication_pad1d_outf, PadMode::Replicate, Restride::Never>);
  m.impl("replication_pad2d", structured_pad<&at::meta::replication_pad2d, PadMode::Replicate, Restride::WhenResized>);
  m.impl("replication_pad2d.out",
         structured_pad_out<&at::meta::replication_pad2d_outf, PadMode::Replicate, Restride::WhenResized>);
  m.impl("replication_pad3d", structured_pad<&at::meta::replication_pad3d, PadMode::Replicate, Restride::WhenResized>);
  m.impl("replication_pad3d.out",
         structured_pad_out<&at::meta::replication_pad3d_outf, PadMode::Replicate, Restride::WhenResized>);
  m.impl("reflection_pad1d_backward",
         structured_pad_backward<&at::meta::reflection_pad1d_backward, PadMode::Reflect, Restride::Never>);
  m.impl("reflection_pad1d_backward.grad_input",
         structured_pad_backward_out<&at::meta::reflection_pad1d_backward_outf, PadMode::Reflect, Restride::Never>);
  m.impl("reflection_pad2d_backward", pad_backward<2, PadMode::Reflect>);
  m.impl("reflection_pad2d_backward.grad_input", pad_backward_out<2, PadMode::Reflect>);
  m.impl("reflection_pad3d_backward",
         structured_pad_backward<&at::meta::reflection_pad3d_backward, PadMode::Reflect, Restride::Always>);
  m.impl("reflection_pad3d_backward.grad_input",
         structured_pad_backward_out<&at::meta::reflection_pad3d_backward_outf, PadMode::Reflect, Restride::Always>);
  m.impl("replication_pad1d_backward",
         structured_pad_backward<&at::meta::replication_pad1d_backward, PadMode::Replicate, Restride::Never>);
  m.impl("replication_pad1d_backward.grad_input",
         structured_pad_backward_out<&at::meta::replication_pad1d_backward_outf, PadMode::Replicate, Restride::Never>);
  m.impl("replication_pad2d_backward", pad_backward<2, PadMode::Replicate>);
  m.impl("replication_pad2d_backward.grad_input", pad_backward_out<2, PadMode::Replicate>);
  m.impl("replication_pad3d_backward", pad_backward<3, PadMode::Replicate>);
  m.impl("replication_pad3d_backward.grad_input", pad_backward_out<3, PadMode::Replicate>);
  m.impl("unfold_backward", unfold_backward);
  m.impl("select_backward", select_backward, UnsignedPolicy::Native);
  m.impl("slice_backward", slice_backward, UnsignedPolicy::Native);
  m.impl("flip", flip, UnsignedPolicy::Native);
  m.impl("roll", roll, UnsignedPolicy::Native);
  m.impl("repeat", repeat, UnsignedPolicy::Native);
  m.impl("repeat_interleave.Tensor", repeat_interleave_indices, UnsignedPolicy::Native);
  m.impl("tril", triangle<true>);
  m.impl("tril.out", triangle_out<true>);
  m.impl("triu", triangle<false>);
  m.impl("triu.out", triangle_out<false>);
  m.impl("masked_fill_.Scalar", masked_fill_scalar);
  m.impl("masked_fill_.Tensor", masked_fill_tensor);
  m.impl("narrow_copy.out", narrow_copy_out, UnsignedPolicy::Native);
}

} // namespace tiny::aten_ops
