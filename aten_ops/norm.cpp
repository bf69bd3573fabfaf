// Normalization: batch norm (native_batch_norm and the ops export and functionalization reach:
// _native_batch_norm_legit, _native_batch_norm_legit_no_training, _batch_norm_with_update,
// _batch_norm_no_update, batch_norm_backward), layer norm and group norm, forward and backward.
// nn.BatchNorm2d reaches native_batch_norm / native_batch_norm_backward in train and eval mode.
//
// Each is a UOp graph over the input viewed as (outer, normalized, inner) axes: the statistics are
// reductions (two passes, as torch's CPU kernels: the mean, then the squared deviations from it), the
// output one elementwise expression of them, so a norm is a few kernels that read the input. Running
// statistics are written in place into running_mean / running_var (momentum, unbiased variance), as
// torch does. The outputs keep torch's CPU shapes, dtypes and memory formats: save_mean and
// save_invstd (rstd) are float32 when a float16/bfloat16 input comes with float32 parameters
// ("mixed" types), else the input's dtype; float16/bfloat16 compute in float32.
//
// batch_norm computes each statistic once into a buffer of its own (`once`), shared by the output
// kernel, the tensor that saves it and the backward op that reads that tensor (a per-channel statistic
// would otherwise be recomputed under the batch loop): 3 kernels in training plus the running-statistics
// updates. layer_norm's statistics are per row: while the saved mean and rstd are alive (training) they
// are realized as storages and the output kernel reads them (3 kernels); when they are not (inference),
// the output kernel computes them row by row as it writes the row (one kernel, compiler/lower.cpp's row
// kernels).
//
// The backward ops use the saved statistics they are given (torch's formulas, not a recomputation).

#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>
#include <ATen/native/Resize.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/renorm_meta_dispatch.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using at::native::check_mixed_data_type;
using at::native::is_mixed_type;

const at::Tensor& value_or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t ? *t : undefined;
}

// A statistic computed once, into a buffer of its own (a realize boundary): the kernels that read it,
// the tensor that stores it and a backward op that reads that tensor all share the buffer. (A reader
// that views a pending result differently would otherwise recompute its reduction.) Flat, so that it
// is the storage's content as it is.
UOpPtr once(const UOpPtr& v) {
  int64_t n = 1;
  for (int64_t d : v->shape)
    n *= d;
  return reshape(contiguous(reshape(v, {n})), v->shape);
}

// A 1-d per-channel tensor (weight, running stats) as (1, C, 1) in dt, broadcast to `shape`.
UOpPtr channel(const at::Tensor& t, DType dt, const Shape& shape) {
  return expand(reshape(cast(read(t), dt), {1, t.numel(), 1}), shape);
}

// A runtime scalar (eps, momentum): new values compile nothing.
UOpPtr runtime(double v, DType dt, const Shape& shape) { return scalar_constant(v, dt, shape); }

void store(const at::Tensor& out, const UOpPtr& value) {
  if (out.defined() && out.numel() > 0)
    write(out, reshape(cast(value, to_tiny_dtype(out.scalar_type())), to_shape(out.sizes())));
}

void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", name, "\" not implemented for '",
                              t.scalar_type(), "'");
}

at::ScalarType param_type(const at::Tensor& input, bool mixed) { return at::native::param_scalar_type(input, mixed); }

// ---- batch norm ----

bool contiguous_any(const at::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}

// torch's choice of the output's memory format: the input's, read from its strides.
at::MemoryFormat bn_format(const at::Tensor& t) {
  if (!contiguous_any(t)) return t.suggest_memory_format();
  if (t.is_contiguous()) return at::MemoryFormat::Contiguous;
  return t.is_contiguous(at::MemoryFormat::ChannelsLast3d) ? at::MemoryFormat::ChannelsLast3d
                                                           : at::MemoryFormat::ChannelsLast;
}

// The input as (N, C, S) in the compute dtype.
UOpPtr as_ncs(const at::Tensor& t, DType dt) {
  int64_t s = 1;
  for (int64_t d = 2; d < t.dim(); d++)
    s *= t.size(d);
  return reshape(cast(read(t), dt), {t.size(0), t.size(1), s});
}

struct BatchNormArgs {
  const at::Tensor &input, &weight, &bias, &running_mean, &running_var;
  bool train;
  double momentum, eps;
};

void check_batch_norm(const BatchNormArgs& a, bool mixed) {
  TORCH_CHECK(a.input.dim() >= 2, "batch_norm: expected an input with at least 2 dims (N, C, ...), got ",
              a.input.dim());
  check_floating(a.input, "batch_norm");
  if (mixed) check_mixed_data_type(a.input, a.weight, a.bias, a.running_mean, a.running_var);
  TORCH_CHECK(a.train || (a.running_mean.defined() && a.running_var.defined()),
              "running_mean and running_var must be defined in evaluation mode");
  if (a.train)
    TORCH_CHECK(a.input.numel() != 0,
                "input tensor must have at least one element, but got input_sizes = ", a.input.sizes());
}

// Normalizes into out; in training also the batch statistics into save_mean / save_invstd, and the
// running statistics in place.
void write_batch_norm(const BatchNormArgs& a, const at::Tensor& out, const at::Tensor& save_mean,
                      const at::Tensor& save_invstd) {
  if (a.input.numel() == 0) return;
  DType dt = opmath(to_tiny_dtype(a.input.scalar_type()));
  UOpPtr x = as_ncs(a.input, dt);
  const Shape& full = x->shape;
  int64_t c = full[1];
  Shape per_channel{1, c, 1};
  UOpPtr mean, invstd;
  if (a.train) {
    double n = static_cast<double>(full[0] * full[2]);
    mean = once(div(sum_keep(x, {0, 2}), fixed(dt, n, per_channel)));
    UOpPtr dev = sub(x, expand(mean, full));
    UOpPtr m2 = once(sum_keep(mul(dev, dev), {0, 2}));
    UOpPtr var = div(m2, fixed(dt, n, per_channel));
    // torch's InvStd: 0 where var and eps are both 0
    invstd = alu(Ops::RECIP, alu(Ops::SQRT, add(var, runtime(a.eps, dt, per_channel))));
    if (a.eps == 0) invstd = where(alu(Ops::CMPEQ, var, like(var, 0)), like(var, 0), invstd);
    store(save_mean, mean);
    store(save_invstd, invstd);
    UOpPtr m = runtime(a.momentum, dt, per_channel), keep = runtime(1.0 - a.momentum, dt, per_channel);
    if (a.running_mean.defined())
      store(a.running_mean, add(mul(m, mean), mul(keep, channel(a.running_mean, dt, per_channel))));
    if (a.running_var.defined()) {
      UOpPtr unbiased = div(m2, fixed(dt, n - 1, per_channel));
      store(a.running_var, add(mul(m, unbiased), mul(keep, channel(a.running_var, dt, per_channel))));
    }
  } else {
    mean = channel(a.running_mean, dt, per_channel);
    UOpPtr var = channel(a.running_var, dt, per_channel);
    invstd = alu(Ops::RECIP, alu(Ops::SQRT, add(var, runtime(a.eps, dt, per_channel))));
  }
  UOpPtr scale = a.weight.defined() ? mul(invstd, channel(a.weight, dt, per_channel)) : invstd;
  UOpPtr y = mul(sub(x, expand(mean, full)), expand(scale, full));
  if (a.bias.defined()) y = add(y, channel(a.bias, dt, full));
  store(out, y);
}

using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Tensors3 batch_norm(const BatchNormArgs& a) {
  bool mixed = is_mixed_type(a.input, a.weight, a.bias, a.running_mean, a.running_var);
  check_batch_norm(a, mixed);
  at::Tensor out = empty_tiny(a.input.sizes(), a.input.scalar_type(), a.input.device(), bn_format(a.input));
  at::ScalarType pt = param_type(a.input, mixed);
  int64_t stats = a.train ? a.input.size(1) : 0;
  at::Tensor save_mean = empty_tiny({stats}, pt, a.input.device());
  at::Tensor save_invstd = empty_tiny({stats}, pt, a.input.device());
  write_batch_norm(a, out, save_mean, save_invstd);
  return {out, save_mean, save_invstd};
}

void batch_norm_out(const BatchNormArgs& a, at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  bool mixed = is_mixed_type(a.input, a.weight, a.bias, a.running_mean, a.running_var);
  check_batch_norm(a, mixed);
  at::native::resize_output(out, a.input.sizes());
  if (a.train) {
    at::native::resize_output(save_mean, {a.input.size(1)});
    at::native::resize_output(save_invstd, {a.input.size(1)});
  }
  write_batch_norm(a, out, save_mean, save_invstd);
}

Tensors3 native_batch_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
                           const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  check_same_device({input, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()),
                     running_mean.value_or(at::Tensor()), running_var.value_or(at::Tensor())});
  return batch_norm({input, value_or_undefined(weight), value_or_undefined(bias), value_or_undefined(running_mean),
                     value_or_undefined(running_var), training, momentum, eps});
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&>
native_batch_norm_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
                      const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps,
                      at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  batch_norm_out({input, value_or_undefined(weight), value_or_undefined(bias), value_or_undefined(running_mean),
                  value_or_undefined(running_var), training, momentum, eps},
                 out, save_mean, save_invstd);
  return {out, save_mean, save_invstd};
}

Tensors3 batch_norm_legit(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
                          bool training, double momentum, double eps) {
  return batch_norm({input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var, training,
                     momentum, eps});
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&>
batch_norm_legit_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
                     bool training, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
                     at::Tensor& save_invstd) {
  batch_norm_out(
      {input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var, training, momentum, eps},
      out, save_mean, save_invstd);
  return {out, save_mean, save_invstd};
}

Tensors3 batch_norm_legit_no_stats(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  at::Tensor none;
  return batch_norm({input, value_or_undefined(weight), value_or_undefined(bias), none, none, training, momentum, eps});
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&>
batch_norm_legit_no_stats_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                              const std::optional<at::Tensor>& bias, bool training, double momentum, double eps,
                              at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  at::Tensor none;
  batch_norm_out({input, value_or_undefined(weight), value_or_undefined(bias), none, none, training, momentum, eps},
                 out, save_mean, save_invstd);
  return {out, save_mean, save_invstd};
}

Tensors3 batch_norm_legit_no_training(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                      const std::optional<at::Tensor>& bias, const at::Tensor& running_mean,
                                      const at::Tensor& running_var, double momentum, double eps) {
  return batch_norm(
      {input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var, false, momentum, eps});
}

using Tensors4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

at::Tensor reserve_of(const at::Tensor& input) { return empty_tiny({0}, at::kByte, input.device()); }

Tensors4 batch_norm_with_update(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                const std::optional<at::Tensor>& bias, at::Tensor& running_mean,
                                at::Tensor& running_var, double momentum, double eps) {
  auto [out, mean, invstd] = batch_norm(
      {input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var, true, momentum, eps});
  return {out, mean, invstd, reserve_of(input)};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&>
batch_norm_with_update_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
                           double momentum, double eps, at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd,
                           at::Tensor& reserve) {
  batch_norm_out(
      {input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var, true, momentum, eps},
      out, save_mean, save_invstd);
  return {out, save_mean, save_invstd, reserve};
}

Tensors4 batch_norm_no_update(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                              const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
                              const std::optional<at::Tensor>& running_var, double momentum, double eps) {
  auto [out, mean, invstd] =
      batch_norm({input, value_or_undefined(weight), value_or_undefined(bias), value_or_undefined(running_mean),
                  value_or_undefined(running_var), false, momentum, eps});
  return {out, mean, invstd, reserve_of(input)};
}

// grad_input = (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean))) * invstd * w in training,
// g * invstd * w in evaluation; grad_weight = sum(g * (x - mean)) * invstd; grad_bias = sum(g).
Tensors3 batch_norm_backward_impl(const at::Tensor& grad_out, const at::Tensor& input,
                                  const std::optional<at::Tensor>& weight_opt,
                                  const std::optional<at::Tensor>& running_mean_opt,
                                  const std::optional<at::Tensor>& running_var_opt,
                                  const std::optional<at::Tensor>& save_mean_opt,
                                  const std::optional<at::Tensor>& save_invstd_opt, bool train, double eps,
                                  std::array<bool, 3> mask) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& running_mean = value_or_undefined(running_mean_opt);
  const at::Tensor& running_var = value_or_undefined(running_var_opt);
  const at::Tensor& save_mean = value_or_undefined(save_mean_opt);
  const at::Tensor& save_invstd = value_or_undefined(save_invstd_opt);
  bool mixed = is_mixed_type(input, weight, running_mean, running_var, save_mean, save_invstd);
  check_floating(input, "batch_norm_backward_cpu");
  if (mixed) check_mixed_data_type(input, weight, running_mean, running_var, save_mean, save_invstd);
  const at::Tensor& mean_t = train ? save_mean : running_mean;
  TORCH_CHECK(mean_t.defined() && (train ? save_invstd : running_var).defined(),
              "batch_norm_backward: ", train ? "save_mean and save_invstd" : "running_mean and running_var",
              " must be defined");
  at::ScalarType pt = param_type(input, mixed);
  bool same_format = contiguous_any(input) && contiguous_any(grad_out) &&
                     input.suggest_memory_format() == grad_out.suggest_memory_format();
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0])
    grad_input = empty_tiny(input.sizes(), input.scalar_type(), input.device(),
                            same_format ? bn_format(input) : input.suggest_memory_format());
  if (mask[1]) grad_weight = empty_tiny({input.size(1)}, pt, input.device());
  if (mask[2]) grad_bias = empty_tiny({input.size(1)}, pt, input.device());
  if (input.numel() == 0) return {grad_input, grad_weight, grad_bias};

  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  UOpPtr x = as_ncs(input, dt), g = as_ncs(grad_out, dt);
  const Shape& full = x->shape;
  Shape per_channel{1, full[1], 1};
  double n = static_cast<double>(full[0] * full[2]);
  UOpPtr mean = channel(mean_t, dt, per_channel);
  UOpPtr invstd =
      train
          ? channel(save_invstd, dt, per_channel)
          : alu(Ops::RECIP, alu(Ops::SQRT, add(channel(running_var, dt, per_channel), runtime(eps, dt, per_channel))));
  UOpPtr w = weight.defined() ? channel(weight, dt, per_channel) : fixed(dt, 1, per_channel);
  UOpPtr centered = sub(x, expand(mean, full));
  UOpPtr sum_g = once(sum_keep(g, {0, 2}));
  UOpPtr dot = once(sum_keep(mul(centered, g), {0, 2}));
  if (mask[0]) {
    UOpPtr scale = mul(invstd, w);
    if (train) {
      UOpPtr k = div(mul(mul(dot, invstd), invstd), fixed(dt, n, per_channel));
      UOpPtr grad_mean = div(sum_g, fixed(dt, n, per_channel));
      UOpPtr v = sub(sub(g, expand(grad_mean, full)), mul(centered, expand(k, full)));
      store(grad_input, mul(v, expand(scale, full)));
    } else {
      store(grad_input, mul(g, expand(scale, full)));
    }
  }
  store(grad_weight, mul(dot, invstd));
  store(grad_bias, sum_g);
  return {grad_input, grad_weight, grad_bias};
}

Tensors3 batch_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
                             const std::optional<at::Tensor>& running_mean,
                             const std::optional<at::Tensor>& running_var, const std::optional<at::Tensor>& save_mean,
                             const std::optional<at::Tensor>& save_var, bool update, double eps,
                             std::array<bool, 3> mask, const at::Tensor& /*reserve*/) {
  return batch_norm_backward_impl(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                                  mask);
}

// ---- layer norm ----

// The input as (M, N): M rows of the N normalized elements.
struct LayerNormShape {
  int64_t m, n;
  Shape stat; // the input's leading dims, then 1 for each normalized dim
};

LayerNormShape layer_norm_shape(const at::Tensor& input, c10::IntArrayRef normalized_shape, const at::Tensor& weight,
                                const at::Tensor& bias) {
  auto [m, n] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  Shape stat(input.sizes().begin(), input.sizes().begin() + axis);
  stat.resize(input.dim(), 1);
  return {m, n, stat};
}

Tensors3 native_layer_norm(const at::Tensor& input, c10::IntArrayRef normalized_shape,
                           const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
                           double eps) {
  check_same_device({input, weight_opt.value_or(at::Tensor()), bias_opt.value_or(at::Tensor())});
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& bias = value_or_undefined(bias_opt);
  bool mixed = is_mixed_type(input, weight, bias);
  if (mixed) check_mixed_data_type(input, weight, bias);
  LayerNormShape s = layer_norm_shape(input, normalized_shape, weight, bias);
  check_floating(input, "LayerNormKernelImpl");
  at::ScalarType pt = param_type(input, mixed);
  at::Tensor out = empty_tiny(input.sizes(), input.scalar_type(), input.device());
  at::Tensor mean_out = empty_tiny(c10::IntArrayRef(s.stat), pt, input.device());
  at::Tensor rstd_out = empty_tiny(c10::IntArrayRef(s.stat), pt, input.device());
  if (s.m == 0) return {out, mean_out, rstd_out};

  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  Shape full{s.m, s.n}, row{s.m, 1};
  UOpPtr x = reshape(cast(read(input), dt), full);
  UOpPtr mean = div(sum_keep(x, {1}), fixed(dt, static_cast<double>(s.n), row));
  UOpPtr dev = sub(x, expand(mean, full));
  UOpPtr var = div(sum_keep(mul(dev, dev), {1}), fixed(dt, static_cast<double>(s.n), row));
  UOpPtr rstd = alu(Ops::RECIP, alu(Ops::SQRT, add(alu(Ops::MAX, var, like(var, 0)), runtime(eps, dt, row))));
  UOpPtr y = mul(dev, expand(rstd, full));
  if (weight.defined()) y = mul(y, expand(reshape(cast(read(weight), dt), {1, s.n}), full));
  if (bias.defined()) y = add(y, expand(reshape(cast(read(bias), dt), {1, s.n}), full));
  store(out, y);
  store(mean_out, mean);
  store(rstd_out, rstd);
  return {out, mean_out, rstd_out};
}

// torch's formula: with ds = sum(dY * gamma * X) and db = sum(dY * gamma) over a row,
// dX = rstd * dY * gamma + b * X + c, b = (db * mean - ds) * rstd^3 / N, c = -b * mean - db * rstd / N.
Tensors3 native_layer_norm_backward(const at::Tensor& grad_out, const at::Tensor& input,
                                    c10::IntArrayRef normalized_shape, const at::Tensor& mean_t,
                                    const at::Tensor& rstd_t, const std::optional<at::Tensor>& weight_opt,
                                    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> mask) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& bias = value_or_undefined(bias_opt);
  LayerNormShape s = layer_norm_shape(input, normalized_shape, weight, bias);
  check_floating(input, "LayerNormBackwardKernelImpl");
  TORCH_CHECK(!mask[1] || weight.defined(), "native_layer_norm_backward: grad of an undefined weight requested");
  TORCH_CHECK(!mask[2] || bias.defined(), "native_layer_norm_backward: grad of an undefined bias requested");
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) grad_input = empty_tiny(input.sizes(), input.scalar_type(), input.device());
  if (mask[1]) grad_weight = empty_tiny(weight.sizes(), weight.scalar_type(), weight.device());
  if (mask[2]) grad_bias = empty_tiny(bias.sizes(), bias.scalar_type(), bias.device());

  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  Shape full{s.m, s.n}, row{s.m, 1}, col{1, s.n};
  UOpPtr x = reshape(cast(read(input), dt), full), dy = reshape(cast(read(grad_out), dt), full);
  UOpPtr mean = s.m > 0 ? reshape(cast(read(mean_t), dt), row) : fixed(dt, 0, row);
  UOpPtr rstd = s.m > 0 ? reshape(cast(read(rstd_t), dt), row) : fixed(dt, 0, row);
  UOpPtr gamma = weight.defined() ? expand(reshape(cast(read(weight), dt), col), full) : nullptr;
  if (mask[0] && s.m > 0) {
    UOpPtr dyg = gamma ? mul(dy, gamma) : dy;
    UOpPtr ds = once(sum_keep(mul(dyg, x), {1})), db = once(sum_keep(dyg, {1}));
    UOpPtr scale = fixed(dt, 1.0 / static_cast<double>(s.n), row);
    UOpPtr rstd3 = mul(mul(rstd, rstd), rstd);
    UOpPtr b = mul(mul(sub(mul(db, mean), ds), rstd3), scale);
    UOpPtr c = sub(mul(alu(Ops::NEG, b), mean), mul(mul(db, rstd), scale));
    store(grad_input, add(add(mul(dyg, expand(rstd, full)), mul(expand(b, full), x)), expand(c, full)));
  }
  UOpPtr xhat = mul(sub(x, expand(mean, full)), expand(rstd, full));
  store(grad_weight, sum_keep(mul(dy, xhat), {0}));
  store(grad_bias, sum_keep(dy, {0}));
  return {grad_input, grad_weight, grad_bias};
}

// ---- group norm ----

void check_group_norm(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, int64_t c,
                      int64_t group) {
  TORCH_CHECK(group > 0, "Expected num groups to be greater than 0, got ", group);
  TORCH_CHECK(c % group == 0,
              "Expected number of channels in input to be divisible by num_groups, but got input of "
              "shape ",
              input.sizes(), " and num_groups=", group);
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == c),
              "Expected weight to be a vector of size equal to the number of channels in input, but got weight of "
              "shape ",
              weight.sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.numel() == c),
              "Expected bias to be a vector of size equal to the number of channels in input, but got bias of "
              "shape ",
              bias.sizes(), " and input of shape ", input.sizes());
}

// x as (N, G, C/G, HxW): a group's elements are axes 2 and 3.
struct GroupShape {
  int64_t n, g, cg, hw;
  Shape full() const { return {n, g, cg, hw}; }
  Shape stat() const { return {n, g, 1, 1}; }
  Shape per_channel() const { return {1, g, cg, 1}; }
};

UOpPtr group_channel(const at::Tensor& t, DType dt, const GroupShape& s) {
  return expand(reshape(cast(read(t), dt), s.per_channel()), s.full());
}

Tensors3 native_group_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
                           const std::optional<at::Tensor>& bias_opt, int64_t n, int64_t c, int64_t hw, int64_t group,
                           double eps) {
  check_same_device({input, weight_opt.value_or(at::Tensor()), bias_opt.value_or(at::Tensor())});
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& bias = value_or_undefined(bias_opt);
  check_group_norm(input, weight, bias, c, group);
  at::MemoryFormat format = input.suggest_memory_format(); // any layout reads; the result is dense in this one
  TORCH_CHECK(input.numel() == n * c * hw, "native_group_norm: input of shape ", input.sizes(),
              " does not hold N * C * HxW = ", n, " * ", c, " * ", hw, " elements");
  bool mixed = is_mixed_type(input, weight, bias);
  if (mixed) check_mixed_data_type(input, weight, bias);
  check_floating(input, "GroupNormKernelImpl");
  at::ScalarType pt = param_type(input, mixed);
  at::Tensor out = empty_tiny(input.sizes(), input.scalar_type(), input.device(), format);
  at::Tensor mean_out = empty_tiny({n, group}, pt, input.device());
  at::Tensor rstd_out = empty_tiny({n, group}, pt, input.device());
  if (input.numel() == 0) return {out, mean_out, rstd_out};

  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  GroupShape s{n, group, c / group, hw};
  Shape full = s.full(), stat = s.stat();
  double d = static_cast<double>(s.cg * s.hw);
  UOpPtr x = reshape(cast(read(input), dt), full);
  UOpPtr mean = once(div(sum_keep(x, {2, 3}), fixed(dt, d, stat)));
  UOpPtr dev = sub(x, expand(mean, full));
  UOpPtr var = div(sum_keep(mul(dev, dev), {2, 3}), fixed(dt, d, stat));
  UOpPtr rstd = once(alu(Ops::RECIP, alu(Ops::SQRT, add(alu(Ops::MAX, var, like(var, 0)), runtime(eps, dt, stat)))));
  // torch's kernel: y = x * scale + (beta - scale * mean) with scale = rstd * gamma, so an infinite
  // gamma gives its NaNs (inf * x - inf * mean), not (x - mean) * inf
  UOpPtr scale = expand(rstd, full);
  if (weight.defined()) scale = mul(scale, group_channel(weight, dt, s));
  UOpPtr shift = sub(like(x, 0), mul(scale, expand(mean, full)));
  if (bias.defined()) shift = add(shift, group_channel(bias, dt, s));
  store(out, add(mul(x, scale), shift));
  store(mean_out, mean);
  store(rstd_out, rstd);
  return {out, mean_out, rstd_out};
}

// torch's formula: with ds[n, c] = sum(dY * X) and db[n, c] = sum(dY) over HxW, and per group
// dsg = sum(ds * gamma), dbg = sum(db * gamma): b = (dbg * mean - dsg) * rstd^3 / D,
// c = -b * mean - dbg * rstd / D, dX = gamma * rstd * dY + b * X + c;
// dgamma = sum over n of (ds - db * mean) * rstd, dbeta = sum over n of db.
Tensors3 native_group_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean_t,
                                    const at::Tensor& rstd_t, const std::optional<at::Tensor>& weight_opt, int64_t n,
                                    int64_t c, int64_t hw, int64_t group, std::array<bool, 3> mask) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  bool mixed = is_mixed_type(input, mean_t, rstd_t);
  if (mixed) check_mixed_data_type(input, mean_t, rstd_t);
  check_group_norm(input, weight, at::Tensor(), c, group);
  check_floating(input, "GroupNormBackwardKernelImpl");
  TORCH_CHECK(input.numel() == n * c * hw && grad_out.sizes() == input.sizes(),
              "native_group_norm_backward: grad_out of shape ", grad_out.sizes(), " and input of shape ", input.sizes(),
              " do not match N * C * HxW = ", n, " * ", c, " * ", hw);
  at::ScalarType pt = weight.defined() ? weight.scalar_type() : param_type(input, mixed);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0])
    grad_input = empty_tiny(input.sizes(), input.scalar_type(), input.device(), input.suggest_memory_format());
  if (mask[1]) grad_weight = empty_tiny({c}, pt, input.device());
  if (mask[2]) grad_bias = empty_tiny({c}, pt, input.device());

  DType dt = opmath(to_tiny_dtype(input.scalar_type()));
  GroupShape s{n, group, c / group, hw};
  Shape full = s.full(), stat = s.stat(), nc{n, group, s.cg, 1};
  if (input.numel() == 0) {
    store(grad_weight, fixed(dt, 0, {c}));
    store(grad_bias, fixed(dt, 0, {c}));
    return {grad_input, grad_weight, grad_bias};
  }
  UOpPtr x = reshape(cast(read(input), dt), full), dy = reshape(cast(read(grad_out), dt), full);
  UOpPtr mean = reshape(cast(read(mean_t), dt), stat), rstd = reshape(cast(read(rstd_t), dt), stat);
  UOpPtr ds = once(sum_keep(mul(dy, x), {3})), db = once(sum_keep(dy, {3})); // (N, G, C/G, 1)
  if (mask[0]) {
    UOpPtr gamma = weight.defined() ? expand(reshape(cast(read(weight), dt), {1, group, s.cg, 1}), nc) : nullptr;
    UOpPtr dsg = once(sum_keep(gamma ? mul(ds, gamma) : ds, {2})),
           dbg = once(sum_keep(gamma ? mul(db, gamma) : db, {2}));
    UOpPtr scale = fixed(dt, 1.0 / static_cast<double>(s.cg * s.hw), stat);
    UOpPtr rstd3 = mul(mul(rstd, rstd), rstd);
    UOpPtr b = mul(mul(sub(mul(dbg, mean), dsg), rstd3), scale);
    UOpPtr cc = sub(mul(alu(Ops::NEG, b), mean), mul(mul(dbg, rstd), scale));
    UOpPtr a = expand(rstd, full);
    if (weight.defined()) a = mul(a, group_channel(weight, dt, s));
    store(grad_input, add(add(mul(a, dy), mul(expand(b, full), x)), expand(cc, full)));
  }
  if (mask[1]) {
    UOpPtr v = mul(sub(ds, mul(db, expand(mean, nc))), expand(rstd, nc));
    store(grad_weight, sum_keep(v, {0}));
  }
  if (mask[2]) store(grad_bias, sum_keep(db, {0}));
  return {grad_input, grad_weight, grad_bias};
}

// renorm: each slice along dim scaled so that its p-norm is at most maxnorm, by maxnorm / (norm + 1e-7)
// where the norm passes maxnorm, as torch's CPU kernel: the norm and the factor in the accumulate type
// (float for float16/bfloat16), the factor rounded to the input's dtype, then multiplied in.
void write_renorm(const at::Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm,
                  const at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> others;
  for (int64_t d = 0; d < self.dim(); d++)
    if (d != dim) others.push_back(d);
  at::Tensor norm = at::linalg_vector_norm(self, p, others, /*keepdim=*/true,
                                           at::toAccumulateType(self.scalar_type(), /*is_cuda=*/true));
  UOpPtr n = read(norm);
  UOpPtr cap = scalar_constant(maxnorm, n->dtype, n->shape);
  UOpPtr factor = where(lt(cap, n), div(cap, add(n, like(n, 1e-7))), like(n, 1));
  at::Tensor f = empty_tiny(norm.sizes(), self.scalar_type(), self.device());
  if (self.is_complex()) { // the norm is real: a complex self is scaled by (factor, 0)
    DType dt = element_dtype(self.scalar_type());
    write_complex(f, join_complex(cast(factor, dt), like(cast(factor, dt), 0)));
  } else {
    write(f, cast(factor, to_tiny_dtype(self.scalar_type())));
  }
  at::mul_outf(self, f, const_cast<at::Tensor&>(out));
}

at::Tensor renorm(const at::Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm) {
  at::Tensor meta = at::meta::renorm(self, p, dim, maxnorm);
  at::Tensor out = empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), self.device());
  write_renorm(self, p, dim, maxnorm, out);
  return out;
}

at::Tensor& renorm_out(const at::Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm,
                       at::Tensor& out) {
  at::meta::renorm_outf(self, p, dim, maxnorm, out);
  write_renorm(self, p, dim, maxnorm, out);
  return out;
}

at::Tensor& renorm_(at::Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm) {
  at::meta::renorm_(self, p, dim, maxnorm);
  write_renorm(self, p, dim, maxnorm, self);
  return self;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("renorm", TORCH_FN(renorm));
  m.impl("renorm.out", TORCH_FN(renorm_out));
  m.impl("renorm_", TORCH_FN(renorm_));
  m.impl("native_batch_norm.out", TORCH_FN(native_batch_norm_out));
  m.impl("_native_batch_norm_legit", TORCH_FN(batch_norm_legit));
  m.impl("_native_batch_norm_legit.out", TORCH_FN(batch_norm_legit_out));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats));
  m.impl("_native_batch_norm_legit.no_stats_out", TORCH_FN(batch_norm_legit_no_stats_out));
  m.impl("_native_batch_norm_legit_no_training", TORCH_FN(batch_norm_legit_no_training));
  m.impl("_batch_norm_with_update", TORCH_FN(batch_norm_with_update));
  m.impl("_batch_norm_with_update.out", TORCH_FN(batch_norm_with_update_out));
  m.impl("_batch_norm_no_update", TORCH_FN(batch_norm_no_update));
  m.impl("native_batch_norm_backward", TORCH_FN(batch_norm_backward_impl));
  m.impl("batch_norm_backward", TORCH_FN(batch_norm_backward));
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  m.impl("native_group_norm", TORCH_FN(native_group_norm));
  m.impl("native_group_norm_backward", TORCH_FN(native_group_norm_backward));
}

} // namespace tiny::aten_ops
