// Convolution, 1d/2d/3d, plain and transposed, with its backward: convolution_overrideable and
// convolution_backward_overrideable, the two ops torch's _convolution and convolution_backward call for
// a PrivateUse1 tensor (after their own shape checks, with 1d convolutions viewed as 2d).
//
// Each result is one reduce of a broadcast product, so it is one kernel with its epilogue (bias,
// activation) fused:
//   forward         out[n, g, o, y] = sum_{c, k} x[n, g, c, y * stride + k * dilation - padding] * w[g, o, c, k]
//                   (a window view of the padded input: no im2col copy)
//   grad_input      sum_{o, k} adjoint windows of grad_output (spread by the stride) * w[g, o, c, k]
//   grad_weight     sum_{n, y} windows of the padded input * grad_output
//   grad_bias       sum of grad_output over batch and positions
// A transposed convolution is the input gradient of a plain one, and its backward is a plain forward
// (grad_input) and a plain weight gradient with input and grad_output exchanged.
//
// float16/bfloat16 are computed in float32 and rounded once; integer dtypes (where torch's CPU kernels
// take them) accumulate in their own dtype, which wraps exactly as the CPU kernels do.

#include <ATen/core/Tensor.h>
#include <c10/core/MemoryFormat.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>

#include "aten_ops/sliding_window.h"
#include "aten_ops/window_read.h"
#include "compiler/lower.h"
#include "compiler/winograd.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"
#include "runtime/device.h"

namespace tiny {
namespace {

Shape ints(c10::IntArrayRef a) { return Shape(a.begin(), a.end()); }

struct Conv {
  window::Geometry g;
  Shape output_padding;
  int64_t groups;
  bool transposed;
  size_t dims() const { return g.dims(); }
};

// torch passes stride, padding, dilation and output_padding expanded to one value per spatial dim.
Conv conv_args(const at::Tensor& weight, c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
               bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
  size_t nd = static_cast<size_t>(weight.dim() - 2);
  auto per_dim = [nd](c10::IntArrayRef a, const char* what, int64_t fill) {
    TORCH_CHECK(a.size() == nd || a.size() == 1 || (a.empty() && fill >= 0), "expected ", what, " to be a single ",
                "integer value or a list of ", nd, " values to match the convolution dimensions, but got ", what, "=",
                a);
    return a.empty() ? Shape(nd, fill) : a.size() == 1 ? Shape(nd, a[0]) : ints(a);
  };
  Conv c{{Shape(weight.sizes().begin() + 2, weight.sizes().end()), per_dim(stride, "stride", -1),
          per_dim(padding, "padding", -1), per_dim(dilation, "dilation", -1)},
         per_dim(output_padding, "output_padding", 0),
         groups,
         transposed};
  TORCH_CHECK(groups > 0, "non-positive groups is not supported");
  for (size_t i = 0; i < nd; i++) {
    TORCH_CHECK(c.g.stride[i] > 0, "non-positive stride is not supported");
    TORCH_CHECK(c.g.padding[i] >= 0, "negative padding is not supported");
    TORCH_CHECK(c.g.dilation[i] > 0, "dilation should be greater than zero");
    TORCH_CHECK(c.output_padding[i] >= 0, "negative output_padding is not supported");
    TORCH_CHECK(!transposed || c.output_padding[i] < c.g.stride[i] || c.output_padding[i] < c.g.dilation[i],
                "output padding must be smaller than either stride or dilation, but got output_padding=",
                c.output_padding[i], ", stride=", c.g.stride[i], ", dilation=", c.g.dilation[i]);
  }
  return c;
}

// The dtypes torch's CPU convolution kernels take: floating types; integer types in the slow
// (im2col + gemm) kernels only, which run plain undilated convolutions and, for int64, all of them.
void check_dtypes(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  const Conv& c) {
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "expected scalar type ", weight.scalar_type(), " but found ",
              input.scalar_type());
  if (bias && bias->defined())
    TORCH_CHECK(bias->scalar_type() == input.scalar_type(), "Input type (", input.scalar_type(), ") and bias type (",
                bias->scalar_type(), ") should be the same");
  at::ScalarType st = input.scalar_type();
  bool dilated = false;
  for (int64_t d : c.g.dilation)
    dilated = dilated || d != 1;
  bool ok = at::isFloatingType(st) || st == at::kLong || (at::isIntegralType(st, false) && !c.transposed && !dilated);
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", c.transposed ? "slow_conv_transpose" : "slow_conv", c.dims(),
                              "d_cpu\" not implemented for '", st, "'");
}

// torch's CPU kernels give the result channels-last when the input or the weight is.
c10::MemoryFormat result_format(const at::Tensor& input, const at::Tensor& weight) {
  for (const at::Tensor* t : {&input, &weight}) {
    c10::MemoryFormat f = t->suggest_memory_format();
    if (f == c10::MemoryFormat::ChannelsLast || f == c10::MemoryFormat::ChannelsLast3d) return f;
  }
  return c10::MemoryFormat::Contiguous;
}

Shape spatial(const UOpPtr& x) { return Shape(x->shape.begin() + 2, x->shape.end()); }

Shape concat(std::initializer_list<Shape> parts) {
  Shape out;
  for (const Shape& p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; i++)
    r.push_back(i);
  return r;
}

// out[n, g*Co + o, y] = sum_{k, c} win[n, g*Cr + c, y..., k...] * filters[g, o, c, k...]: windows
// (N, G*Cr, positions..., kernel...) against per-group filters (G, Co, Cr, kernel...). The channels
// are the innermost reduced axis: the padding tests of a tap stay outside their loop.
UOpPtr grouped_correlation(const UOpPtr& win, const UOpPtr& filters, const Shape& positions, const Shape& kernel) {
  int64_t N = win->shape[0], G = filters->shape[0], Co = filters->shape[1], Cr = filters->shape[2];
  int64_t nd = static_cast<int64_t>(kernel.size());
  Shape full = concat({{N, G, Co}, positions, kernel, {Cr}});
  UOpPtr u = window::reshaped(win, concat({{N, G, 1, Cr}, positions, kernel}));
  std::vector<int64_t> order{0, 1, 2}, f_order{0, 1};
  for (int64_t i = 0; i < 2 * nd; i++)
    order.push_back(4 + i);
  order.push_back(3);
  for (int64_t i = 0; i < nd; i++)
    f_order.push_back(3 + i);
  f_order.push_back(2);
  u = window::permuted(window::expanded(u, concat({{N, G, Co, Cr}, positions, kernel})), order);
  UOpPtr fv = window::expanded(
      window::reshaped(window::permuted(filters, f_order), concat({{1, G, Co}, Shape(nd, 1), kernel, {Cr}})), full);
  DType dt = opmath(win->dtype); // after the windows: reads of float16/bfloat16 stay 16-bit (see convolution)
  UOpPtr r = reduce(alu(Ops::MUL, cast(u, dt), cast(fv, dt)), Ops::ADD, range(3 + nd, 4 + 2 * nd));
  return window::reshaped(r, concat({{N, G * Co}, positions}));
}

// out[n, g*Og + o, y] = sum_{c, k} x[n, g*Cg + c, y * stride + k * dilation - padding] * w[g*Og + o, c, k]
// for x (N, G*Cg, in...), w (G*Og, Cg, kernel...) and the output positions `out`.
UOpPtr conv_forward(const UOpPtr& x, const UOpPtr& w, const Shape& out, const window::Geometry& g, int64_t groups) {
  int64_t G = groups, Cg = w->shape[1], Og = w->shape[0] / G;
  UOpPtr win = window::windows(window::pad_for_windows(x, out, g), out, g); // (N, C, out..., kernel...)
  return grouped_correlation(win, window::reshaped(w, concat({{G, Og, Cg}, g.kernel})), out, g.kernel);
}

// The gradient of conv_forward with respect to x, of spatial size `in`, from u, the adjoint windows of grad_output
// (N, G*Og, in..., kernel...) (see windows_adjoint).
UOpPtr conv_input_grad_from(const UOpPtr& u, const UOpPtr& w, const Shape& in, const window::Geometry& g,
                            int64_t groups) {
  int64_t G = groups, Cg = w->shape[1], Og = w->shape[0] / G, nd = static_cast<int64_t>(g.dims());
  std::vector<int64_t> w_order{0, 2, 1};
  for (int64_t i = 0; i < nd; i++)
    w_order.push_back(3 + i);
  UOpPtr wt = window::permuted(window::reshaped(w, concat({{G, Og, Cg}, g.kernel})), w_order); // (G, Cg, Og, kernel...)
  // The adjoint windows walk grad_output backward along the kernel axes; with the kernel index reversed in
  // both factors they walk it forward, so adjacent taps and channels of its channels-last copy are one run
  // and the reduce loops merge, as the forward's do (the filters' panel copy takes the reversal).
  auto taps = [&](const UOpPtr& v) {
    std::vector<bool> axes(v->shape.size(), false);
    std::fill(axes.end() - nd, axes.end(), true);
    return window::flipped(v, axes);
  };
  return grouped_correlation(taps(u), taps(wt), in, g.kernel);
}

// The gradient of conv_forward with respect to x, of spatial size `in`: for grad_output go (N, G*Og, out...).
UOpPtr conv_input_grad(const UOpPtr& go, const UOpPtr& w, const Shape& in, const window::Geometry& g, int64_t groups) {
  return conv_input_grad_from(window::windows_adjoint(go, in, g), w, in, g, groups);
}

// One phase of a strided input gradient: the input positions p, p + stride, ... of each spatial dim (p the digits)
// and their values (null: no tap of the kernel reaches them, zero).
struct Phase {
  std::vector<int64_t> p;
  UOpPtr value;
};

// conv_input_grad phase by phase where a stride is above 1: input position h = stride * q + p takes tap k only where
// p + padding - k * dilation divides by the stride, from output position q + (p + padding - k * dilation) / stride.
// Those taps are every t-th (t = stride / gcd(stride, dilation)) from the first, k0, their output positions a step
// of dilation / gcd apart: each phase is the input gradient of a stride-1 convolution by taps k0, k0 + t, ... with
// that dilation and a padding of k0's offset (negative, or past the kernel's reach: it crops grad_output). Summed
// over the adjoint windows of grad_output spread by the stride, the kernel multiplied stride^2 times as many zeros as
// values and divided by the stride at every tap: ResNet-18's stride-2 (16, 64, 16, 16) input gradient, one thread,
// 5.3 ms (and 1.2 ms to copy the spread grad_output) -> 1.4 ms in four phases (and 0.2 ms of copies); its stem's
// (3 channels, 7 x 7) 905 ms of scalar index math -> 5.4 ms.
std::vector<Phase> conv_input_grad_phases(const UOpPtr& go, const UOpPtr& w, const Shape& in, const window::Geometry& g,
                                          int64_t groups) {
  const size_t nd = g.dims();
  if (std::ranges::all_of(g.stride, [](int64_t s) { return s == 1; }))
    return {{std::vector<int64_t>(nd, 0), conv_input_grad(go, w, in, g, groups)}};
  const Shape flat = contiguous_strides(w->shape);
  struct Taps {
    std::vector<int64_t> p;
    Shape q, w_shape, w_strides;
    window::Geometry g;
    int64_t offset;
    bool reached;
  };
  std::vector<Taps> taps;
  for (const auto& [p, q] : window::strided_phases(in, g.stride)) {
    Shape w_shape(w->shape.begin(), w->shape.end()), w_strides = flat;
    window::Geometry pg{Shape(nd), Shape(nd, 1), Shape(nd), Shape(nd)};
    int64_t offset = 0;
    for (size_t i = 0; i < nd; i++) {
      const int64_t s = g.stride[i], dil = g.dilation[i], common = std::gcd(s, dil);
      int64_t k0 = 0;
      while (k0 < g.kernel[i] && (p[i] + g.padding[i] - k0 * dil) % s != 0)
        k0++;
      const int64_t t = s / common;
      pg.kernel[i] = k0 < g.kernel[i] ? (g.kernel[i] - 1 - k0) / t + 1 : 0;
      pg.padding[i] = (p[i] + g.padding[i] - k0 * dil) / s;
      pg.dilation[i] = dil / common;
      offset += k0 * flat[2 + i];
      w_shape[2 + i] = pg.kernel[i];
      w_strides[2 + i] = t * flat[2 + i];
    }
    if (std::ranges::any_of(q, [](int64_t n) { return n <= 0; })) continue;
    const bool reached = std::ranges::none_of(pg.kernel, [](int64_t k) { return k == 0; });
    taps.push_back({p, q, w_shape, w_strides, pg, offset, reached});
  }
  // One padded grad_output for every phase (each phase's windows an offset into it): the lowering copies it once,
  // where a padding per phase made a copy per phase (a DCGAN generator's last layer, one thread: 4 x 0.45 ms; the
  // generator's training step's kernels 72 -> 66 ms).
  const Shape out = spatial(go);
  Shape before(nd, std::numeric_limits<int64_t>::min()), after(nd, std::numeric_limits<int64_t>::min());
  for (const Taps& t : taps)
    for (size_t i = 0; t.reached && i < nd; i++) {
      const int64_t reach = (t.g.kernel[i] - 1) * t.g.dilation[i];
      before[i] = std::max(before[i], reach - t.g.padding[i]);
      after[i] = std::max(after[i], t.q[i] + t.g.padding[i] - out[i]);
    }
  std::vector<std::pair<int64_t, int64_t>> pads;
  for (size_t i = 0; i < nd; i++)
    pads.emplace_back(before[i], after[i]);
  const bool any = std::ranges::any_of(taps, [](const Taps& t) { return t.reached; });
  const UOpPtr common = any ? window::pad_spatial(go, pads) : nullptr;
  std::vector<Phase> phases;
  for (const Taps& t : taps) {
    if (!t.reached) {
      phases.push_back({t.p, nullptr});
      continue;
    }
    const UOpPtr u = window::windows_adjoint_from(common, before, t.q, t.g);
    phases.push_back(
        {t.p, conv_input_grad_from(u, window::strided(w, t.w_shape, t.w_strides, t.offset), t.q, t.g, groups)});
  }
  return phases;
}

// A transposed convolution of single positions without padding or dilation (a generator's first layer: noise (N, 100,
// 1, 1) to (N, 256, 4, 4)): each output position takes one tap, out[n, g*Og + o, k] = sum_c x[n, g*Cg + c] *
// w[g*Cg + c, o, k], a matmul of x by the weight's (Cg, Og * taps) matrix. Summed over the adjoint windows, each
// position read every tap, all but one of them padding: that layer, batch 32, one thread, 3.8 ms (eager 1.0).
bool is_single_position_transposed(const at::Tensor& input, const Conv& c) {
  for (size_t i = 0; i < c.dims(); i++)
    if (input.size(static_cast<int64_t>(2 + i)) != 1 || c.g.padding[i] != 0 || c.g.dilation[i] != 1 ||
        c.output_padding[i] != 0)
      return false;
  return c.transposed;
}

UOpPtr single_position_transposed(const UOpPtr& x, const UOpPtr& w, int64_t groups) {
  const int64_t N = x->shape[0], G = groups, Cg = w->shape[0] / G, Og = w->shape[1];
  const Shape kernel(w->shape.begin() + 2, w->shape.end());
  const int64_t K = prod(kernel);
  const Shape full{N, G, Og, K, Cg};
  UOpPtr xv = window::expanded(window::reshaped(x, {N, G, 1, 1, Cg}), full);
  UOpPtr wv = window::permuted(window::reshaped(w, {G, Cg, Og, K}), {0, 2, 3, 1});
  wv = window::expanded(window::reshaped(wv, {1, G, Og, K, Cg}), full);
  const DType dt = opmath(x->dtype);
  UOpPtr r = reduce(alu(Ops::MUL, cast(xv, dt), cast(wv, dt)), Ops::ADD, {4});
  return window::reshaped(r, concat({{N, G * Og}, kernel}));
}

// The sum over the batch and the positions of a weight gradient's products p (N, G, A, B, positions..., kernel...)
// -> (G, A, B, kernel...), or (G, B, A, kernel...) with swap_ab: the chunks' total, in vectors, is copied into
// that order by a kernel of its own (the total summed in the swapped order ran scalar along the chunks, 2-3x
// slower; left a permuted view, it was copied and read through its permutation by the optimizer's kernels too).
// batch_inner: the batch is the innermost reduced axis, whole (see pairs_batch). chunk: the images summed
// first (see weight_grad_chunk).
UOpPtr weight_grad_sum(const UOpPtr& p, size_t nd, bool batch_inner, int64_t chunk, bool swap_ab) {
  const int64_t N = p->shape[0], n = static_cast<int64_t>(nd), chunks = N / chunk;
  // (N, G, A, B, positions..., kernel...) -> (chunks, chunk, ...) -> (chunks, G, A, B, kernel..., chunk, positions...),
  // or batch innermost (chunks, G, A, B, kernel..., positions..., chunk)
  UOpPtr q = window::reshaped(p, concat({{chunks, chunk}, Shape(p->shape.begin() + 1, p->shape.end())}));
  std::vector<int64_t> order{0, 2, 3, 4};
  for (int64_t i = 0; i < n; i++)
    order.push_back(5 + n + i);
  if (!batch_inner) order.push_back(1);
  for (int64_t i = 0; i < n; i++)
    order.push_back(5 + i);
  if (batch_inner) order.push_back(1);
  UOpPtr r = reduce(window::permuted(q, order), Ops::ADD, range(4 + n, 5 + 2 * n));
  // the batch-innermost chunks' sums are realized first: lowered inside their sum, the tile block's index math
  // did not get through the symbolic pass in two minutes
  if (chunks > 1) r = reduce(batch_inner ? contiguous(r) : r, Ops::ADD, {0});
  if (swap_ab) {
    std::vector<int64_t> swap{0, 1, 3, 2};
    for (int64_t i = 4; i < static_cast<int64_t>(r->shape.size()); i++)
      swap.push_back(i);
    r = contiguous(window::permuted(contiguous(r), swap));
  }
  const int64_t a = p->shape[swap_ab ? 3 : 2], b = p->shape[swap_ab ? 2 : 3];
  return window::reshaped(r, concat({{p->shape[1], a, b}, Shape(p->shape.end() - n, p->shape.end())}));
}

// The gradient of conv_forward with respect to w (G*Og, Cg, kernel...), for grad_output go (N, G*Og, out...):
// windows of the padded input times grad_output. batch_inner: see weight_grad_sum.
UOpPtr conv_weight_grad(const UOpPtr& x, const UOpPtr& go, const window::Geometry& g, int64_t groups, bool batch_inner,
                        int64_t chunk) {
  int64_t N = x->shape[0], G = groups, Cg = x->shape[1] / G, Og = go->shape[1] / G;
  Shape out = spatial(go), ones(g.dims(), 1);
  UOpPtr win = window::windows(window::pad_for_windows(x, out, g), out, g); // (N, C, out..., kernel...)
  win = window::expanded(window::reshaped(win, concat({{N, G, 1, Cg}, out, g.kernel})),
                         concat({{N, G, Og, Cg}, out, g.kernel}));
  UOpPtr gv = window::expanded(window::reshaped(go, concat({{N, G, Og, 1}, out, ones})), win->shape);
  DType dt = opmath(x->dtype);
  UOpPtr r = weight_grad_sum(alu(Ops::MUL, cast(win, dt), cast(gv, dt)), g.dims(), batch_inner, chunk, false);
  return window::reshaped(r, concat({{G * Og, Cg}, g.kernel}));
}

// The same gradient as a sum over the input positions h: x[n, c, h] times the adjoint windows of grad_output
// (see windows_adjoint), go[n, o, h + padding - k * dilation] (zero outside), for a stride of 1. The adjoint
// windows read grad_output padded, and the input gradient reads the same padded grad_output with the channels
// innermost (a copy the lowering makes for it, conv_input_grad): the output channels, this kernel's lanes, read
// that copy too, and no other layout of grad_output or of the input is copied (the demo's step made three:
// the padded input, grad_output channels-last or in panels, and the input gradient's padded grad_output).
UOpPtr conv_weight_grad_adjoint(const UOpPtr& x, const UOpPtr& go, const window::Geometry& g, int64_t groups,
                                int64_t chunk) {
  int64_t N = x->shape[0], G = groups, Cg = x->shape[1] / G, Og = go->shape[1] / G;
  Shape in = spatial(x), ones(g.dims(), 1);
  UOpPtr u = window::windows_adjoint(go, in, g); // (N, G*Og, in..., kernel...)
  // (N, G, Cg, Og, in..., kernel...): the output channels after the input channels, the lanes the lowering picks
  Shape full = concat({{N, G, Cg, Og}, in, g.kernel});
  UOpPtr uv = window::expanded(window::reshaped(u, concat({{N, G, 1, Og}, in, g.kernel})), full);
  UOpPtr xv = window::expanded(window::reshaped(x, concat({{N, G, Cg, 1}, in, ones})), full);
  DType dt = opmath(x->dtype);
  UOpPtr r = weight_grad_sum(alu(Ops::MUL, cast(xv, dt), cast(uv, dt)), g.dims(), false, chunk,
                             true); // (G, Og, Cg, kernel...)
  return window::reshaped(r, concat({{G * Og, Cg}, g.kernel}));
}

// Whether a weight gradient computed beside its input gradient sums the adjoint windows of grad_output
// (conv_weight_grad_adjoint): on a CPU device (where the lowering copies padded windows channels-last), float32
// and float64, with a stride of 1 and a padding within the kernel's reach (the input gradient's padded
// grad_output then pads, never crops), and a weight smaller than the input: the adjoint sum's result is the
// weight transposed and copied once more into the weight's layout, where the other sum copies the input (ResNet-18's
// 512 x 512 x 3 x 3 weight gradients at 2 x 2 positions, one thread: the copy 2.6 ms each).
bool weight_grad_reads_adjoint(const at::Tensor& input, const at::Tensor& weight, const Conv& c, bool with_input_grad) {
  if (!with_input_grad || c.transposed || (input.scalar_type() != at::kFloat && input.scalar_type() != at::kDouble) ||
      weight.numel() >= input.numel() || runtime::device(input.device().index()).target().gpu())
    return false;
  for (size_t i = 0; i < c.dims(); i++)
    if (c.g.stride[i] != 1 || c.g.padding[i] > (c.g.kernel[i] - 1) * c.g.dilation[i]) return false;
  return true;
}

UOpPtr bias_grad(const UOpPtr& go) {
  std::vector<int64_t> axes{0};
  for (size_t d = 2; d < go->shape.size(); d++)
    axes.push_back(static_cast<int64_t>(d));
  return window::reshaped(reduce(go, Ops::ADD, axes), {go->shape[1]});
}

// Whether a weight gradient of a bfloat16 `input` (N, C, ...) sums its batch innermost: on a CPU device with
// AMX tiles or AVX512_BF16 pair dots and a batch that pairs (even, 32 or more), the reduction then steps along the
// batch in pairs of a batch-innermost copy of the input (see pair_reduced_axis in compiler/lower.cpp), with AMX 16
// pairs at a time in tiles, each tile row a run of 32 images, else one vdpbf16ps a pair of images; with the batch
// outermost the only contiguous reduced axis is a row of the window, too short to pair, and the sum ran in float32
// multiply-adds. The demo's (128, 32, 14, 14) gradient of a (64, 32, 3, 3) filter, one thread (the C kernels): 7.8 ms
// -> 1.96 whole, 1.17 in chunks of 32 images (see conv_weight_grad) on a Sapphire Rapids' tiles; on a Zen 4's pair
// dots, two threads, its kernels 5.1 -> 3.2 ms, the convolution's backward with its input gradient 8.1 -> 6.1.
bool pairs_batch(const at::Tensor& input) {
  const int64_t N = input.size(0);
  const Target& target = runtime::device(input.device().index()).target();
  return input.scalar_type() == at::kBFloat16 && N % 2 == 0 && N >= 32 && target.bf16_pairs();
}

// The images a weight gradient of `input` and `grad_output` sums first (see weight_grad_sum), its chunks' sums added
// after. Batch innermost (see pairs_batch): 32 images where they divide (one tile step a pixel), each chunk's input and
// gradient (1.3 MB for the demo's) held in L2 while every filter tap and channel block reads them; the whole batch
// streamed the gradient's panel from L3 for each block (the demo's kernel 1.96 -> 1.17 ms, one thread). Otherwise the
// whole batch where its input and gradient fit in one core's L2 (ResNet-18's layer4 at batch 16, 256 KiB: in chunks,
// each chunk's partial sum, the weight's size, was written and summed again; its 512 x 512 x 3 x 3 gradient, one
// thread, 5.3 + 1.0 ms -> 4.8 ms whole), else a batch of 16 or more in 8s: 8 images, or 4, 2 or 1 where 8 images' input
// and gradient do not fit in one core's L2 (the device's Target::l2_bytes), since each chunk's are read again by every
// filter tap and channel block. The demo's (128, 32, 28, 28) gradient with its input gradient, one thread on a Zen 3
// (512 KiB of L2): 75.1 ms in chunks of 8, 62.0 of 4, 54.1 of 2, 54.5 of 1; the (128, 64, 14, 14) one 56.0, 51.1, 52.2,
// 57.0 (on a Sapphire Rapids' 2 MiB both keep 8).
int64_t weight_grad_chunk(const at::Tensor& input, const at::Tensor& grad_output, bool batch_inner) {
  const int64_t N = input.size(0);
  if (batch_inner) return N % 32 == 0 ? 32 : N;
  if (N % 8 != 0 || N < 16) return N;
  const Target& target = runtime::device(input.device().index()).target();
  const int64_t image = (input.numel() + grad_output.numel()) / N * input.element_size();
  if (!target.gpu() && N * image <= target.l2_bytes) return N;
  int64_t chunk = 8;
  while (chunk > 1 && !target.gpu() && chunk * image > target.l2_bytes)
    chunk /= 2;
  return chunk;
}

UOpPtr read_as(const at::Tensor& t, DType dt) { return cast(read(t), dt); }

at::Tensor empty_result(const Shape& shape, const at::Tensor& like, c10::MemoryFormat format) {
  return empty_tiny(c10::IntArrayRef(shape), like.scalar_type(), like.device(),
                    shape.size() == 4 || shape.size() == 5 ? std::optional(format) : std::nullopt);
}

at::Tensor result(const Shape& shape, const at::Tensor& like, c10::MemoryFormat format, const UOpPtr& value) {
  at::Tensor out = empty_result(shape, like, format);
  write(out, cast(value, to_tiny_dtype(like.scalar_type())));
  return out;
}

// `bias` (C) broadcast to `shape` (N, C, positions...).
UOpPtr bias_of(const UOpPtr& bias, const Shape& shape) {
  Shape b_shape(shape.size(), 1);
  b_shape[1] = shape[1];
  return window::expanded(window::reshaped(bias, b_shape), shape);
}

// A result of `shape` (N, C, positions...) from the phases of conv_input_grad_phases, each plus `bias` (C; null:
// none): written into strided views of it phase by phase where a stride is above 1 (a phase no tap reaches is the
// bias, or zeros).
at::Tensor phased_result(const Shape& shape, const at::Tensor& like, c10::MemoryFormat format,
                         const std::vector<Phase>& phases, const Shape& stride, const UOpPtr& bias) {
  const DType dt = to_tiny_dtype(like.scalar_type()), sums = opmath(dt); // the phases' and the bias's dtype
  const UOpPtr zero = is_float(sums) ? const_float(sums, 0) : const_int(sums, 0);
  auto value = [&](const UOpPtr& v, const Shape& at) {
    UOpPtr r = v ? v : window::expanded(window::reshaped(zero, Shape(at.size(), 1)), at);
    return bias ? alu(Ops::ADD, r, bias_of(bias, at)) : r;
  };
  if (std::ranges::all_of(stride, [](int64_t s) { return s == 1; }))
    return result(shape, like, format, value(phases.at(0).value, shape));
  at::Tensor out = empty_result(shape, like, format);
  for (const Phase& ph : phases) {
    at::Tensor part = aten_ops::phase_view(out, ph.p, stride);
    write(part, cast(value(ph.value, ints(part.sizes())), dt));
  }
  return out;
}

// Whether a convolution of `input` by `weight` (its input and filter gradients too) runs as Winograd kernels
// (compiler/winograd.h): float32 2-D images by 3 x 3 filters of stride 1 and dilation 1, one group, channels and
// filters by whole vectors of 16, padding up to 2 (the input gradient's is 2 - padding), outputs of 16 tiles or more
// an image (a block of tiles holds one image's: fewer, too few accumulators to hide the multiply-adds' latency), on a
// target that has the kernels. Forward and both gradients' kernels, two threads, Winograd against direct (ms): the
// demo's (128, 32, 28, 28) by 32 filters 15.5 / 18.8, (128, 64, 14, 14) by 64 14.2 / 14.9, ResNet-18's at 64 x 64
// (16, 64, 16, 16) by 64 2.1 / 2.4 and (16, 128, 8, 8) by 128 2.3 / 2.8; (16, 256, 4, 4) by 256, 4 tiles an image,
// 6.9 / 4.0.
bool runs_winograd(const at::Tensor& input, const at::Tensor& weight, const Conv& c) {
  const Target& target = runtime::device(input.device().index()).target();
  if (!target.winograd || c.transposed || c.groups != 1 || weight.dim() != 4 || input.scalar_type() != at::kFloat ||
      weight.scalar_type() != at::kFloat || c.g.kernel != Shape{3, 3} || c.g.stride != Shape{1, 1} ||
      c.g.dilation != Shape{1, 1} || c.g.padding[0] > 2 || c.g.padding[1] > 2 || weight.size(0) % 16 != 0 ||
      weight.size(1) % 16 != 0)
    return false;
  int64_t tiles = 1;
  for (size_t i = 0; i < 2; i++) // (output + 1) / 2 tiles along each dim
    tiles *= std::max<int64_t>(0, input.size(static_cast<int64_t>(2 + i)) + 2 * c.g.padding[i] - 1) / 2;
  return tiles >= 16;
}

// ---- kernels ----

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  check_same_device({input, weight, bias.value_or(at::Tensor())});
  TORCH_CHECK(weight.dim() >= 3 && weight.dim() <= 5 && input.dim() == weight.dim(), "tiny: convolution expects a ",
              "batched input and a weight of 3, 4 or 5 dims, got input ", input.sizes(), " and weight ",
              weight.sizes());
  Conv c = conv_args(weight, stride, padding, dilation, transposed, output_padding, groups);
  check_dtypes(input, weight, bias, c);
  // The operands in their own dtype: float16/bfloat16 become float at the multiply, after the windows and
  // copies the lowering makes of them, which then hold and read 16-bit values (as vectors).
  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  UOpPtr x = read(input), w = read(weight);
  Shape in = spatial(x), out;
  for (size_t i = 0; i < c.dims(); i++)
    out.push_back(transposed
                      ? c.g.span(i, in[i]) - 2 * c.g.padding[i] + c.output_padding[i]
                      : (in[i] + 2 * c.g.padding[i] - (c.g.kernel[i] - 1) * c.g.dilation[i] - 1) / c.g.stride[i] + 1);
  int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  TORCH_CHECK(input.size(1) == (transposed ? weight.size(0) : weight.size(1) * groups), "Given groups=", groups,
              ", weight of size ", weight.sizes(), ", expected input", input.sizes(), " to have ",
              transposed ? weight.size(0) : weight.size(1) * groups, " channels, but got ", input.size(1),
              " channels instead");
  for (int64_t o : out) // torch's transposed convolution gives an empty result where a size is 0
    TORCH_CHECK(o > 0 || (transposed && o == 0), "tiny: convolution output size ", c10::IntArrayRef(out),
                " is too small");
  Shape shape = concat({{input.size(0), channels}, out});
  if (prod(shape) == 0) return empty_result(shape, input, result_format(input, weight));
  UOpPtr b = bias && bias->defined() ? read_as(*bias, dt) : nullptr;
  if (is_single_position_transposed(input, c)) {
    UOpPtr y = single_position_transposed(x, w, groups);
    return result(shape, input, result_format(input, weight), b ? alu(Ops::ADD, y, bias_of(b, shape)) : y);
  }
  if (transposed)
    return phased_result(shape, input, result_format(input, weight), conv_input_grad_phases(x, w, out, c.g, groups),
                         c.g.stride, b);
  UOpPtr y =
      runs_winograd(input, weight, c) ? winograd_correlation(x, w, c.g.padding) : conv_forward(x, w, out, c.g, groups);
  return result(shape, input, result_format(input, weight), b ? alu(Ops::ADD, y, bias_of(b, shape)) : y);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor>
convolution_backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                     c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                     c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  Conv c = conv_args(weight, stride, padding, dilation, transposed, output_padding, groups);
  check_dtypes(input, weight, std::nullopt, c);
  TORCH_CHECK(grad_output.scalar_type() == input.scalar_type(), "expected grad_output of dtype ", input.scalar_type(),
              ", got ", grad_output.scalar_type());
  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  UOpPtr go = read(grad_output), x = read(input), w = read(weight); // cast at the multiply, as in convolution
  c10::MemoryFormat format = result_format(input, weight);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0] && runs_winograd(input, weight, c)) {
    // the input gradient correlates grad_output with the filters flipped and transposed, padded by 2 - padding
    const UOpPtr flipped = permute(flip(w, {false, false, true, true}), {1, 0, 2, 3});
    grad_input = result(ints(input.sizes()), input, format,
                        winograd_correlation(go, flipped, {2 - c.g.padding[0], 2 - c.g.padding[1]}));
  } else if (output_mask[0])
    grad_input = transposed
                     ? result(ints(input.sizes()), input, format, conv_forward(go, w, spatial(x), c.g, groups))
                     : phased_result(ints(input.sizes()), input, format,
                                     conv_input_grad_phases(go, w, spatial(x), c.g, groups), c.g.stride, nullptr);
  if (output_mask[1] && runs_winograd(input, weight, c)) {
    // summed by F(3 x 3, 2 x 2) in a chunk of the images per thread, the chunks' sums then added
    const int64_t chunks =
        std::clamp<int64_t>(runtime::device(input.device().index()).target().threads, 1, x->shape[0]);
    grad_weight = result(ints(weight.sizes()), weight, weight.suggest_memory_format(),
                         winograd_filter_gradient(x, go, c.g.padding, chunks));
  } else if (output_mask[1]) {
    const bool batch_inner = pairs_batch(input);
    const int64_t chunk = weight_grad_chunk(input, grad_output, batch_inner);
    grad_weight = result(ints(weight.sizes()), weight, weight.suggest_memory_format(),
                         transposed ? conv_weight_grad(go, x, c.g, groups, batch_inner, chunk)
                         : weight_grad_reads_adjoint(input, weight, c, output_mask[0])
                             ? conv_weight_grad_adjoint(x, go, c.g, groups, chunk)
                             : conv_weight_grad(x, go, c.g, groups, batch_inner, chunk));
  }
  if (output_mask[2]) grad_bias = result({grad_output.size(1)}, grad_output, format, bias_grad(cast(go, dt)));
  return {grad_input, grad_weight, grad_bias};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

} // namespace tiny
