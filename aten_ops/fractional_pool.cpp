// fractional_max_pool2d / fractional_max_pool3d (values and indices) and their backward ops.
//
// Each plane (n, c) pools windows of a fixed kernel whose starts come from the op's random_samples, one
// sample u per spatial dim: start[o] = int((o + u) * alpha) - int(u * alpha) with alpha = (in - kernel) /
// (out - 1), in the input's dtype as torch's CPU kernel computes it, and in - kernel for the last o. The
// windows are read by one GATHER into a (planes, out..., kernel elements) space; the value is their max and
// the index (flat within the plane) the CPU loop's pick: the last NaN when there is one, else the first
// maximum. The backward scatter-adds the gradient at the indices.
//
// torch's checks, result sizes and memory formats come from the structured ops' meta functions (the 3d
// backward, not structured, checks its own).

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/fractional_max_pool2d_backward_meta_dispatch.h>
#include <ATen/ops/fractional_max_pool2d_meta_dispatch.h>
#include <ATen/ops/fractional_max_pool3d_meta_dispatch.h>
#include <torch/library.h>

#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

UOpPtr int_literal(int64_t v, const Shape& shape) { return fixed(DType::Int64, static_cast<double>(v), shape); }

// (in - kernel) / (out - 1) as the CPU computes it in the input's dtype.
double alpha_in(DType dt, int64_t num, int64_t den) {
  if (dt == DType::Float64) return static_cast<double>(num) / static_cast<double>(den);
  float f = static_cast<float>(num) / static_cast<float>(den);
  if (dt == DType::Float16) return static_cast<float>(c10::Half(f));
  if (dt == DType::BFloat16) return static_cast<float>(c10::BFloat16(f));
  return f;
}

// Writes the pooled values and indices of `self` ((N, C, S...) or (C, S...)) into output and indices.
void write_fractional_max_pool(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef output_size,
                               const at::Tensor& samples, const at::Tensor& output, const at::Tensor& indices,
                               const char* cpu_name) {
  at::ScalarType st = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st), "\"", cpu_name, "\" not implemented for '", st, "'");
  if (output.numel() == 0) return;
  check_same_device({self, samples});
  size_t nd = kernel.size();
  int64_t lead = self.dim() - static_cast<int64_t>(nd);
  int64_t planes = 1, plane = 1;
  for (int64_t d = 0; d < lead; d++)
    planes *= self.size(d);
  Shape S, O, K;
  int64_t window = 1;
  for (size_t d = 0; d < nd; d++) {
    S.push_back(self.size(lead + static_cast<int64_t>(d)));
    O.push_back(output_size[d]);
    K.push_back(kernel[d]);
    plane *= S.back();
    window *= K.back();
  }
  DType dt = to_tiny_dtype(st);
  // The (planes, O..., window) space.
  Shape space{planes};
  space.insert(space.end(), O.begin(), O.end());
  space.push_back(window);
  size_t rank = space.size();
  UOpPtr u = reshape(read(samples), {planes, static_cast<int64_t>(nd)});
  UOpPtr k = iota(window, DType::Int64), flat_pos, choice_base;
  std::vector<UOpPtr> starts;
  Shape kshape(rank, 1);
  kshape.back() = window;
  for (size_t d = 0, kstride = static_cast<size_t>(window); d < nd; d++) {
    // the sample of input dim d: 2d samples are (w, h), 3d samples (t, h, w)
    int64_t comp = nd == 2 ? static_cast<int64_t>(nd - 1 - d) : static_cast<int64_t>(d);
    Shape along(rank, 1);
    along[0] = planes;
    along[d + 1] = O[d];
    Shape po{planes, O[d]};
    UOpPtr sample = expand(shrink(u, {{0, planes}, {comp, comp + 1}}), po);
    UOpPtr start;
    if (O[d] > 1) {
      double alpha = alpha_in(dt, S[d] - K[d], O[d] - 1);
      UOpPtr a = fixed(dt, alpha, po);
      UOpPtr o = expand(reshape(iota(O[d], DType::Int64), {1, O[d]}), po);
      UOpPtr scaled = cast(mul(add(cast(o, dt), sample), a), DType::Int64);
      start = sub(scaled, cast(mul(sample, a), DType::Int64));
      start = where(alu(Ops::CMPEQ, o, int_literal(O[d] - 1, po)), int_literal(S[d] - K[d], po), start);
    } else {
      start = int_literal(S[d] - K[d], po);
    }
    start = expand(reshape(start, along), space);
    kstride /= static_cast<size_t>(K[d]);
    UOpPtr kd = alu(Ops::MOD, alu(Ops::IDIV, k, int_literal(static_cast<int64_t>(kstride), {window})),
                    int_literal(K[d], {window}));
    UOpPtr pos = add(start, expand(reshape(kd, kshape), space));
    int64_t stride = 1;
    for (size_t e = d + 1; e < nd; e++)
      stride *= S[e];
    UOpPtr term = mul(pos, int_literal(stride, space));
    flat_pos = flat_pos ? add(flat_pos, term) : term;
  }
  Shape lead_shape(rank, 1);
  lead_shape[0] = planes;
  UOpPtr base = expand(reshape(mul(iota(planes, DType::Int64), int_literal(plane, {planes})), lead_shape), space);
  UOpPtr values = gather(reshape(read(self), {planes * plane}), add(base, flat_pos));
  // the CPU loop: a NaN always replaces (so the last NaN wins), a value replaces only when larger
  std::vector<int64_t> last{static_cast<int64_t>(rank - 1)};
  UOpPtr best = reduce(values, Ops::MAX, last);
  UOpPtr ks = expand(reshape(k, kshape), space);
  UOpPtr last_nan = reduce(where(alu(Ops::CMPNE, values, values), ks, int_literal(-1, space)), Ops::MAX, last);
  UOpPtr first_max =
      reduce(where(alu(Ops::CMPEQ, values, expand(best, space)), ks, int_literal(window, space)), Ops::MIN, last);
  Shape kept = best->shape;
  UOpPtr pick = where(le(int_literal(0, kept), last_nan), last_nan, first_max);
  // the picked element's flat position: flat_pos read at k = pick, as a masked sum
  UOpPtr index =
      reduce(where(alu(Ops::CMPEQ, ks, expand(pick, space)), flat_pos, int_literal(0, space)), Ops::ADD, last);
  Shape out_shape = to_shape(output.sizes());
  write(output, reshape(best, out_shape));
  write(indices, reshape(index, out_shape));
}

template <size_t ND> struct Family;
template <> struct Family<2> {
  static constexpr const char* cpu = "fractional_max_pool2d_out_frame";
  static std::tuple<at::Tensor, at::Tensor> meta(const at::Tensor& s, at::IntArrayRef k, at::IntArrayRef o,
                                                 const at::Tensor& r) {
    return at::meta::fractional_max_pool2d(s, k, o, r);
  }
  static void meta_out(const at::Tensor& s, at::IntArrayRef k, at::IntArrayRef o, const at::Tensor& r, at::Tensor& out,
                       at::Tensor& idx) {
    at::meta::fractional_max_pool2d_outf(s, k, o, r, out, idx);
  }
};
template <> struct Family<3> {
  static constexpr const char* cpu = "fractional_max_pool3d_out_frame";
  static std::tuple<at::Tensor, at::Tensor> meta(const at::Tensor& s, at::IntArrayRef k, at::IntArrayRef o,
                                                 const at::Tensor& r) {
    return at::meta::fractional_max_pool3d(s, k, o, r);
  }
  static void meta_out(const at::Tensor& s, at::IntArrayRef k, at::IntArrayRef o, const at::Tensor& r, at::Tensor& out,
                       at::Tensor& idx) {
    at::meta::fractional_max_pool3d_outf(s, k, o, r, out, idx);
  }
};

at::Tensor like_meta(const at::Tensor& meta, const at::Tensor& self) {
  return empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), self.device());
}

template <size_t ND>
std::tuple<at::Tensor, at::Tensor> fractional_max_pool(const at::Tensor& self, at::IntArrayRef kernel,
                                                       at::IntArrayRef output_size, const at::Tensor& samples) {
  auto [m_out, m_idx] = Family<ND>::meta(self, kernel, output_size, samples);
  at::Tensor out = like_meta(m_out, self), idx = like_meta(m_idx, self);
  write_fractional_max_pool(self, kernel, output_size, samples, out, idx, Family<ND>::cpu);
  return {out, idx};
}

template <size_t ND>
std::tuple<at::Tensor&, at::Tensor&> fractional_max_pool_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                             at::IntArrayRef output_size, const at::Tensor& samples,
                                                             at::Tensor& out, at::Tensor& idx) {
  Family<ND>::meta_out(self, kernel, output_size, samples, out, idx);
  write_fractional_max_pool(self, kernel, output_size, samples, out, idx, Family<ND>::cpu);
  return {out, idx};
}

// grad_input (self's sizes, contiguous) gets grad_output added at each plane's indices.
void write_fractional_max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& indices, const at::Tensor& grad_input, size_t nd) {
  at::ScalarType st = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st), "\"fractional_max_pool", nd,
                              "d_backward_out_frame\" not implemented for '", st, "'");
  TORCH_CHECK(grad_output.sizes() == indices.sizes(), "fractional_max_pool", nd, "d_backward(): gradOutput sizes ",
              grad_output.sizes(), " do not match indices sizes ", indices.sizes());
  check_same_device({grad_output, self, indices});
  if (grad_input.numel() == 0) return;
  int64_t lead = self.dim() - static_cast<int64_t>(nd), planes = 1, plane = 1, per = 1;
  for (int64_t d = 0; d < self.dim(); d++)
    (d < lead ? planes : plane) *= self.size(d);
  per = grad_output.numel() / std::max<int64_t>(planes, 1);
  DType dt = to_tiny_dtype(st), ct = opmath(dt);
  UOpPtr acc = fixed(ct, 0, {planes * plane});
  if (grad_output.numel() > 0) {
    Shape pp{planes, per};
    UOpPtr base = expand(reshape(mul(iota(planes, DType::Int64), int_literal(plane, {planes})), {planes, 1}), pp);
    UOpPtr at = add(base, reshape(read(indices), pp));
    int64_t n = planes * per;
    acc = scatter(acc, reshape(at, {n}), reshape(cast(read(grad_output), ct), {n}), Ops::ADD);
  }
  write(grad_input, reshape(cast(acc, dt), to_shape(self.sizes())));
}

at::Tensor fractional_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                      at::IntArrayRef output_size, const at::Tensor& indices) {
  at::Tensor meta = at::meta::fractional_max_pool2d_backward(grad_output, self, kernel, output_size, indices);
  at::Tensor grad_input = like_meta(meta, self);
  write_fractional_max_pool_backward(grad_output, self, indices, grad_input, 2);
  return grad_input;
}

at::Tensor fractional_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                      at::IntArrayRef output_size, const at::Tensor& indices) {
  (void)kernel;
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5, "fractional_max_pool3d_backward(): expected 4D or 5D input, got ",
              self.dim(), "D");
  int64_t lead = self.dim() - 3;
  const char* names[3] = {"time", "height", "width"};
  for (int64_t d = 0; d < 3; d++)
    TORCH_CHECK(grad_output.dim() == self.dim() && grad_output.size(lead + d) == output_size[static_cast<size_t>(d)],
                "fractional_max_pool3d_backward_out(): gradOutput ", names[d], " unexpected");
  at::Tensor grad_input = empty_tiny(self.sizes(), self.scalar_type(), self.device());
  write_fractional_max_pool_backward(grad_output, self, indices, grad_input, 3);
  return grad_input;
}

// The .grad_input forms: the gradient computed as above, written into `grad_input`.
template <auto Backward>
at::Tensor& fractional_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef kernel,
                                         at::IntArrayRef output_size, const at::Tensor& indices,
                                         at::Tensor& grad_input) {
  at::Tensor r = Backward(grad_output, self, kernel, output_size, indices);
  at::native::resize_output(grad_input, r.sizes());
  return grad_input.copy_(r);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("fractional_max_pool2d", TORCH_FN(fractional_max_pool<2>));
  m.impl("fractional_max_pool2d.output", TORCH_FN(fractional_max_pool_out<2>));
  m.impl("fractional_max_pool3d", TORCH_FN(fractional_max_pool<3>));
  m.impl("fractional_max_pool3d.output", TORCH_FN(fractional_max_pool_out<3>));
  m.impl("fractional_max_pool2d_backward", TORCH_FN(fractional_pool2d_backward));
  m.impl("fractional_max_pool2d_backward.grad_input",
         TORCH_FN(fractional_pool_backward_out<fractional_pool2d_backward>));
  m.impl("fractional_max_pool3d_backward", TORCH_FN(fractional_pool3d_backward));
  m.impl("fractional_max_pool3d_backward.grad_input",
         TORCH_FN(fractional_pool_backward_out<fractional_pool3d_backward>));
}

} // namespace tiny::aten_ops
