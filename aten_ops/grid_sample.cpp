// grid_sampler_2d and grid_sampler_3d (F.grid_sample) and their backward ops: bilinear, nearest and
// bicubic (2d) interpolation; zeros, border and reflection padding; align_corners.
//
// input (N, C, *S) is read at the points grid (N, *O, nd) names (x for the last dim, y, z), giving
// (N, C, *O). Each spatial dim turns a grid coordinate into a few taps: an input index, a weight and the
// weight's derivative by the coordinate, all computed in a (N, 1, *O) shape with torch's own formulas
// (unnormalize, clip, reflect; the cubic convolution with A = -0.75). The result is a sum over every
// combination of one tap per dim of the weights' product times the input read there (GATHER: a tap outside
// the input, as zeros padding leaves them, reads 0 through index -1). The backward scatter-adds the same
// products times the gradient into the input's gradient, and sums each dim's weight derivative times the
// other weights, the value and the gradient over the channels for the grid's gradient, times the derivative
// of the coordinate's mapping (0 where border or reflection clipped it).

#include <ATen/ATen.h>
#include <ATen/native/GridSamplerUtils.h>
#include <torch/library.h>

#include <array>
#include <functional>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

enum class Interp { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

struct Tap {
  UOpPtr index;  // int64, the position shape
  UOpPtr weight; // compute dtype
  UOpPtr slope;  // d weight / d source coordinate; null where it is 0 (nearest)
};

// One call's settings and the (N, 1, *O) shape every coordinate lives in.
struct Sampler {
  Interp interp;
  Padding padding;
  bool align_corners;
  DType ct;
  Shape pos;

  UOpPtr k(double v) const { return fixed(ct, v, pos); }

  // grid_sampler_unnormalize; `scale` gets the derivative
  UOpPtr unnormalize(const UOpPtr& c, int64_t size, double& scale) const {
    double n = static_cast<double>(size);
    if (align_corners) {
      scale = (n - 1) / 2;
      return mul(div(add(c, k(1)), k(2)), k(n - 1));
    }
    scale = n / 2;
    return div(sub(mul(add(c, k(1)), k(n)), k(1)), k(2));
  }

  // clip_coordinates: min(size - 1, max(x, 0)) with std::min/max's NaN behaviour; `grad` 0 at and past
  // the borders (clip_coordinates_set_grad counts the borders as out of bounds)
  UOpPtr clip(const UOpPtr& x, int64_t size, UOpPtr* grad) const {
    UOpPtr hi = k(static_cast<double>(size - 1)), zero = k(0);
    if (grad) *grad = where(alu(Ops::OR, le(x, zero), le(hi, x)), zero, k(1));
    UOpPtr low = where(lt(x, zero), zero, x);
    return where(lt(low, hi), low, hi);
  }

  // reflect_coordinates between twice_low / 2 and twice_high / 2; `grad` is +-1
  UOpPtr reflect(const UOpPtr& x, int64_t twice_low, int64_t twice_high, UOpPtr* grad) const {
    if (twice_low == twice_high) {
      if (grad) *grad = k(0);
      return k(0);
    }
    double lo = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
    UOpPtr shifted = sub(x, k(lo)), in = alu(Ops::ABS, shifted);
    UOpPtr extra = alu(Ops::MOD, in, k(span));
    UOpPtr flips = alu(Ops::FLOOR, div(in, k(span)));
    UOpPtr even = alu(Ops::CMPEQ, alu(Ops::MOD, flips, k(2)), k(0));
    if (grad) {
      UOpPtr sign = where(lt(shifted, k(0)), k(-1), k(1));
      *grad = where(even, sign, sub(k(0), sign));
    }
    return where(even, add(extra, k(lo)), add(sub(k(span), extra), k(lo)));
  }

  // compute_coordinates: the padding's mapping of an unnormalized coordinate; `grad` its derivative
  UOpPtr pad(const UOpPtr& x, int64_t size, UOpPtr* grad) const {
    UOpPtr g_reflect, g_clip;
    UOpPtr r = x;
    if (padding == Padding::Border) {
      r = clip(x, size, grad ? &g_clip : nullptr);
      if (grad) *grad = g_clip;
    } else if (padding == Padding::Reflection) {
      r = align_corners ? reflect(x, 0, 2 * (size - 1), grad ? &g_reflect : nullptr)
                        : reflect(x, -1, 2 * size - 1, grad ? &g_reflect : nullptr);
      r = clip(r, size, grad ? &g_clip : nullptr);
      if (grad) *grad = mul(g_reflect, g_clip);
    } else if (grad) {
      *grad = k(1);
    }
    return r;
  }

  UOpPtr floor_index(const UOpPtr& x) const { return cast(x, DType::Int64); }

  // The taps of one dim of `size` for grid coordinate c, and the derivative of the source coordinate by c.
  std::vector<Tap> taps(const UOpPtr& c, int64_t size, UOpPtr& coordinate_grad) const {
    double scale = 0;
    UOpPtr src = unnormalize(c, size, scale);
    if (interp == Interp::Bicubic) {
      coordinate_grad = k(scale);
      return cubic_taps(src, size);
    }
    UOpPtr g_pad;
    src = pad(src, size, &g_pad);
    coordinate_grad = mul(k(scale), g_pad);
    if (interp == Interp::Nearest) return {{floor_index(alu(Ops::RINT, src)), k(1), nullptr}};
    UOpPtr f = alu(Ops::FLOOR, src), f1 = add(f, k(1));
    return {{floor_index(f), sub(f1, src), k(-1)}, {floor_index(f1), sub(src, f), k(1)}};
  }

  std::vector<Tap> cubic_taps(const UOpPtr& src, int64_t size) const {
    UOpPtr f = alu(Ops::FLOOR, src), t = sub(src, f);
    const double A = -0.75;
    auto conv1 = [&](const UOpPtr& x) { // ((A + 2) x - (A + 3)) x x + 1
      return add(mul(mul(sub(mul(k(A + 2), x), k(A + 3)), x), x), k(1));
    };
    auto conv2 = [&](const UOpPtr& x) { // ((A x - 5 A) x + 8 A) x - 4 A
      return sub(mul(add(mul(sub(mul(k(A), x), k(5 * A)), x), k(8 * A)), x), k(4 * A));
    };
    auto dconv1 = [&](const UOpPtr& x) { return mul(sub(mul(k(3 * (A + 2)), x), k(2 * (A + 3))), x); };
    auto dconv2 = [&](const UOpPtr& x) { return add(mul(sub(mul(k(3 * A), x), k(10 * A)), x), k(8 * A)); };
    UOpPtr t1 = add(t, k(1)), u = sub(k(1), t), u1 = add(u, k(1));
    std::array<UOpPtr, 4> w{conv2(t1), conv1(t), conv1(u), conv2(u1)};
    std::array<UOpPtr, 4> dw{dconv2(t1), dconv1(t), sub(k(0), dconv1(u)), sub(k(0), dconv2(u1))};
    std::vector<Tap> r;
    for (int64_t j = 0; j < 4; j++) {
      // get_value_bounded: the tap's coordinate through the padding, truncated to an index
      UOpPtr at = pad(add(f, k(static_cast<double>(j - 1))), size, nullptr);
      r.push_back({floor_index(at), w[static_cast<size_t>(j)], dw[static_cast<size_t>(j)]});
    }
    return r;
  }
};

struct Layout {
  int64_t N, C;
  Shape S, O; // input spatial sizes; output spatial sizes
  size_t nd() const { return S.size(); }
  Shape full() const {
    Shape r{N, C};
    r.insert(r.end(), O.begin(), O.end());
    return r;
  }
};

// Every combination of one tap per dim: the flat input index (or -1 outside), and each dim's tap.
struct Combo {
  UOpPtr at; // int64, (N, C, *O)
  std::vector<const Tap*> taps;
};

std::vector<Combo> combos(const Layout& L, const std::vector<std::vector<Tap>>& taps) {
  Shape full = L.full(), lead(full.size(), 1);
  lead[0] = L.N;
  lead[1] = L.C;
  int64_t plane = prod(L.S);
  UOpPtr base = mul(iota(L.N * L.C, DType::Int64), fixed(DType::Int64, static_cast<double>(plane), {L.N * L.C}));
  base = expand(reshape(base, lead), full);
  std::vector<Combo> out;
  std::vector<const Tap*> chosen(L.nd());
  std::function<void(size_t)> walk = [&](size_t d) {
    if (d == L.nd()) {
      UOpPtr flat = base, valid;
      int64_t stride = plane;
      for (size_t e = 0; e < L.nd(); e++) {
        stride /= L.S[e];
        UOpPtr i = expand(chosen[e]->index, full);
        UOpPtr in = alu(Ops::AND, le(fixed(DType::Int64, 0, full), i),
                        lt(i, fixed(DType::Int64, static_cast<double>(L.S[e]), full)));
        valid = valid ? alu(Ops::AND, valid, in) : in;
        flat = add(flat, mul(i, fixed(DType::Int64, static_cast<double>(stride), full)));
      }
      out.push_back({where(valid, flat, fixed(DType::Int64, -1, full)), chosen});
      return;
    }
    for (const Tap& t : taps[d]) {
      chosen[d] = &t;
      walk(d + 1);
    }
  };
  walk(0);
  return out;
}

struct Plan {
  Layout L;
  Sampler s;
  std::vector<std::vector<Tap>> taps; // per spatial dim, input order
  std::vector<UOpPtr> coordinate_grad;
  std::vector<Combo> all;
};

Plan plan(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation, int64_t padding, bool align_corners) {
  TORCH_CHECK(interpolation >= 0 && interpolation <= 2, "grid_sampler(): unknown interpolation mode ", interpolation);
  TORCH_CHECK(padding >= 0 && padding <= 2, "grid_sampler(): unknown padding mode ", padding);
  TORCH_CHECK(input.scalar_type() == grid.scalar_type(), "expected scalar type ", input.scalar_type(), " but found ",
              grid.scalar_type());
  Plan p;
  p.L.N = input.size(0);
  p.L.C = input.size(1);
  for (int64_t d = 2; d < input.dim(); d++)
    p.L.S.push_back(input.size(d));
  for (int64_t d = 1; d + 1 < grid.dim(); d++)
    p.L.O.push_back(grid.size(d));
  DType ct = opmath(to_tiny_dtype(input.scalar_type()));
  Shape pos{p.L.N, 1};
  pos.insert(pos.end(), p.L.O.begin(), p.L.O.end());
  p.s = Sampler{static_cast<Interp>(interpolation), static_cast<Padding>(padding), align_corners, ct, pos};
  size_t nd = p.L.nd();
  UOpPtr g = cast(read(grid), ct);
  Shape gshape = g->shape;
  for (size_t d = 0; d < nd; d++) {
    // input dim d (of D, H, W) reads grid component nd - 1 - d (z, y, x)
    std::vector<std::pair<int64_t, int64_t>> part;
    for (size_t a = 0; a + 1 < gshape.size(); a++)
      part.emplace_back(0, gshape[a]);
    int64_t comp = static_cast<int64_t>(nd - 1 - d);
    part.emplace_back(comp, comp + 1);
    UOpPtr c = reshape(shrink(g, part), pos);
    UOpPtr cg;
    p.taps.push_back(p.s.taps(c, p.L.S[d], cg));
    p.coordinate_grad.push_back(cg);
  }
  p.all = combos(p.L, p.taps);
  return p;
}

void check_dtype(const at::Tensor& input, const char* name) {
  at::ScalarType st = input.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st), "\"", name, "\" not implemented for '", st, "'");
}

at::Tensor grid_sampler(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation, int64_t padding,
                        bool align_corners) {
  check_same_device({input, grid});
  at::native::check_grid_sampler_common(input, grid);
  if (input.dim() == 4)
    at::native::check_grid_sampler_2d(input, grid);
  else
    at::native::check_grid_sampler_3d(input, grid, interpolation);
  check_dtype(input, input.dim() == 4 ? "grid_sampler_2d_cpu" : "grid_sampler3d_cpu");
  std::vector<int64_t> sizes{input.size(0), input.size(1)};
  for (int64_t d = 1; d + 1 < grid.dim(); d++)
    sizes.push_back(grid.size(d));
  at::Tensor out = empty_tiny(sizes, input.scalar_type(), input.device());
  if (out.numel() == 0) return out;
  Plan p = plan(input, grid, interpolation, padding, align_corners);
  Shape full = p.L.full();
  UOpPtr flat = reshape(cast(read(input), p.s.ct), {input.numel()}), sum;
  for (const Combo& c : p.all) {
    UOpPtr w;
    for (const Tap* t : c.taps)
      w = w ? mul(w, t->weight) : t->weight;
    UOpPtr term = mul(expand(w, full), gather(flat, c.at));
    sum = sum ? add(sum, term) : term;
  }
  write(out, cast(sum, to_tiny_dtype(input.scalar_type())));
  return out;
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                         const at::Tensor& grid, int64_t interpolation, int64_t padding,
                                                         bool align_corners, std::array<bool, 2> output_mask) {
  check_same_device({grad_output, input, grid});
  if (input.dim() == 4)
    at::native::check_grid_sampler_2d_backward(input, grid, grad_output);
  else
    at::native::check_grid_sampler_3d_backward(input, grid, grad_output, interpolation);
  check_dtype(input, input.dim() == 4 ? "grid_sampler_2d_backward_cpu" : "grid_sampler_3d_backward_cpu");
  DType dt = to_tiny_dtype(input.scalar_type());
  at::Tensor grad_input;
  if (output_mask[0]) grad_input = empty_tiny(input.sizes(), input.scalar_type(), input.device());
  at::Tensor grad_grid = empty_tiny(grid.sizes(), grid.scalar_type(), grid.device());
  if (grad_output.numel() == 0 || grid.numel() == 0) {
    if (grad_input.defined()) write(grad_input, fixed(dt, 0, to_shape(input.sizes())));
    if (grid.numel() > 0) write(grad_grid, fixed(dt, 0, to_shape(grid.sizes())));
    return {grad_input, grad_grid};
  }
  Plan p = plan(input, grid, interpolation, padding, align_corners);
  Shape full = p.L.full();
  size_t nd = p.L.nd();
  UOpPtr g = cast(read(grad_output), p.s.ct);
  if (grad_input.defined()) {
    UOpPtr acc = fixed(p.s.ct, 0, {input.numel()});
    for (const Combo& c : p.all) {
      UOpPtr w;
      for (const Tap* t : c.taps)
        w = w ? mul(w, t->weight) : t->weight;
      int64_t n = prod(full);
      acc = scatter(acc, reshape(c.at, {n}), reshape(mul(expand(w, full), g), {n}), Ops::ADD);
    }
    write(grad_input, reshape(cast(acc, dt), to_shape(input.sizes())));
  }
  // the grid's gradient, component by component (x is the last input dim)
  UOpPtr flat = reshape(cast(read(input), p.s.ct), {input.numel()});
  Shape gshape = to_shape(grid.sizes()), column = gshape;
  column.back() = 1;
  UOpPtr result;
  for (size_t d = 0; d < nd; d++) {
    UOpPtr sum;
    for (const Combo& c : p.all) {
      const Tap* mine = c.taps[d];
      if (!mine->slope) continue;
      UOpPtr w = mine->slope;
      for (size_t e = 0; e < nd; e++)
        if (e != d) w = mul(w, c.taps[e]->weight);
      UOpPtr term = mul(mul(gather(flat, c.at), expand(w, full)), g);
      sum = sum ? add(sum, term) : term;
    }
    UOpPtr comp = sum ? mul(sum_keep(sum, {1}), p.coordinate_grad[d]) : p.s.k(0); // (N, 1, *O)
    // (N, 1, *O) -> (N, *O, 1), placed at component nd - 1 - d
    std::vector<int64_t> order{0};
    for (size_t a = 2; a < comp->shape.size(); a++)
      order.push_back(static_cast<int64_t>(a));
    order.push_back(1);
    comp = permute(comp, order);
    std::vector<std::pair<int64_t, int64_t>> place(gshape.size(), {0, 0});
    int64_t slot = static_cast<int64_t>(nd - 1 - d);
    place.back() = {slot, static_cast<int64_t>(nd) - 1 - slot};
    comp = pad(comp, place);
    result = result ? add(result, comp) : comp;
  }
  write(grad_grid, cast(result, dt));
  return {grad_input, grad_grid};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("grid_sampler_2d", TORCH_FN(grid_sampler));
  m.impl("grid_sampler_3d", TORCH_FN(grid_sampler));
  m.impl("grid_sampler_2d_backward", TORCH_FN(grid_sampler_backward));
  m.impl("grid_sampler_3d_backward", TORCH_FN(grid_sampler_backward));
}

} // namespace tiny::aten_ops
