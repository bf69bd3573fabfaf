// Losses and their backward ops: nll_loss (1d and 2d: nll_loss_forward, nll_loss2d_forward and their
// backward ops; class weights, ignore_index, every reduction), mse_loss, smooth_l1_loss, huber_loss,
// binary_cross_entropy. torch builds the rest from these and from other families: cross_entropy is
// log_softmax + nll_loss (probability targets and label smoothing add elementwise ops and sums),
// l1_loss is abs + mean, binary_cross_entropy_with_logits is log_sigmoid and elementwise ops.
//
// nll_loss picks each position's target class with a one-hot compare, where(iota(C) == target, ...)
// reduced over the classes: no data-dependent load, and it fuses with the reduction of the loss.
//
// Syncs. torch's CPU kernels check data element by element and raise at the call: a target class out
// of range ("Target 12 is out of bounds.", IndexError) and binary_cross_entropy's input or target
// outside [0, 1]. tiny checks the same at the call: one small reduce kernel computed alone and read to
// the host (runtime::evaluate_to_host), so the work pending around the call (a model's forward) stays
// lazy and the training step stays one schedule; only a check of a storage written in place realizes
// everything pending first. Backward ops skip the check: autograd's forward checked the same targets.
//
// Accumulation is in float32 for float16/bfloat16 (torch's nll_loss accumulates in the input dtype);
// an elementwise loss is rounded to the result dtype before a mean or sum, as torch's is.

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/mse_loss_meta_dispatch.h>
#include <ATen/ops/nll_loss_backward_meta_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta_dispatch.h>
#include <ATen/ops/smooth_l1_loss_meta_dispatch.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/read_on_host.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using at::Reduction::Mean;
using at::Reduction::None;
using at::Reduction::Sum;

// ---- building blocks ----

// x (numpy-broadcastable to shape) as a UOp of `shape`.
UOpPtr broadcast(const UOpPtr& x, const Shape& shape) {
  Shape padded(shape.size() - x->shape.size(), 1);
  padded.insert(padded.end(), x->shape.begin(), x->shape.end());
  return expand(reshape(x, padded), shape);
}

UOpPtr input(const at::Tensor& t, DType dt, const Shape& shape) {
  TORCH_CHECK(t.is_privateuseone(), "Expected all tensors to be on the same device, but found at least two devices, ",
              t.device(), " and tiny:0!");
  return broadcast(cast(read(t), dt), shape);
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

std::vector<int64_t> all_axes(const UOpPtr& x) {
  std::vector<int64_t> axes(x->shape.size());
  for (size_t i = 0; i < axes.size(); i++)
    axes[i] = static_cast<int64_t>(i);
  return axes;
}

UOpPtr sum_all(const UOpPtr& x) { return reshape(sum_keep(x, all_axes(x)), {}); }

// apply_loss_reduction of torch: the elementwise loss (computed in opmath) is rounded to the result
// dtype, then summed or averaged in opmath (a mean over no elements is NaN, as 0 / 0).
UOpPtr reduce_loss(const UOpPtr& loss, int64_t reduction, DType result) {
  if (reduction == None) return loss;
  UOpPtr s = sum_all(cast(cast(loss, result), loss->dtype));
  return reduction == Mean ? div(s, like(s, static_cast<double>(numel(loss->shape)))) : s;
}

// A value computed once, into a buffer of its own (a realize boundary), so that a reduction of it
// does not nest the reduction that made it.
UOpPtr once(const UOpPtr& v) { return reshape(contiguous(reshape(v, {numel(v->shape)})), v->shape); }

void store(const at::Tensor& out, const UOpPtr& value) {
  if (out.numel() > 0) write(out, reshape(cast(value, to_tiny_dtype(out.scalar_type())), to_shape(out.sizes())));
}

at::Tensor like_meta(const at::Tensor& meta, const at::Tensor& self) {
  return empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), self.device());
}

void check_reduction(int64_t reduction) {
  TORCH_CHECK(reduction == None || reduction == Mean || reduction == Sum, "Invalid reduction type: ", reduction);
}

// ---- nll_loss: one implementation over (N, C, S) for 1-d (no batch), 2-d and 2d (spatial) inputs ----

struct NllShape {
  int64_t n, c, s;
  bool batched; // N is a real dimension (not a 1-d input)
};

NllShape nll_shape(const at::Tensor& self) {
  if (self.dim() == 1) return {1, self.size(0), 1, false};
  int64_t s = 1;
  for (int64_t d = 2; d < self.dim(); d++)
    s *= self.size(d);
  return {self.size(0), self.size(1), s, true};
}

// The target as int64 (N, 1, S) and its one-hot compare against the classes (N, C, S), with ignored
// positions all false.
struct NllTarget {
  UOpPtr valid; // (N, 1, S): the target is not ignore_index
  UOpPtr hit;   // (N, C, S)
};

NllTarget nll_target(const at::Tensor& target, const NllShape& d, int64_t ignore_index) {
  Shape full{d.n, d.c, d.s};
  UOpPtr t = reshape(cast(read(target), DType::Int64), {d.n, 1, d.s});
  UOpPtr valid = alu(Ops::CMPNE, t, fixed(DType::Int64, static_cast<double>(ignore_index), t->shape));
  UOpPtr cls = expand(reshape(iota(d.c, DType::Int64), {1, d.c, 1}), full);
  UOpPtr hit = alu(Ops::AND, alu(Ops::CMPEQ, cls, expand(t, full)), expand(valid, full));
  return {valid, hit};
}

// torch raises at the call for a target outside [0, C) that is not ignore_index.
void check_targets(const at::Tensor& target, int64_t n_classes, int64_t ignore_index) {
  IntRange r = int_range(target, ignore_index);
  if (!r.any) return; // every target ignored
  TORCH_CHECK_INDEX(r.max < n_classes, "Target ", r.max, " is out of bounds.");
  TORCH_CHECK_INDEX(r.min >= 0, "Target ", r.min, " is out of bounds.");
}

void write_nll_forward(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight_opt,
                       int64_t reduction, int64_t ignore_index, const at::Tensor& output,
                       const at::Tensor& total_weight) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"nll_loss_out_frame\" not implemented for '",
                              self.scalar_type(), "'");
  NllShape d = nll_shape(self);
  DType dt = opmath(to_tiny_dtype(self.scalar_type()));
  check_targets(target, d.c, ignore_index);
  if (target.numel() == 0) {
    double empty = reduction == Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0;
    store(output, fixed(dt, empty, to_shape(output.sizes())));
    store(total_weight, fixed(dt, 0, {}));
    return;
  }
  Shape full{d.n, d.c, d.s};
  NllTarget t = nll_target(target, d, ignore_index);
  UOpPtr x = reshape(cast(read(self), dt), full);
  UOpPtr w =
      weight_opt && weight_opt->defined() ? expand(reshape(input(*weight_opt, dt, {d.c}), {1, d.c, 1}), full) : nullptr;
  UOpPtr zero = like(x, 0);
  UOpPtr neg = alu(Ops::NEG, x);
  UOpPtr loss = sum_keep(where(t.hit, w ? mul(neg, w) : neg, zero), {1}); // (N, 1, S)
  UOpPtr wsum = w ? sum_keep(where(t.hit, w, zero), {1}) : cast(t.valid, dt);
  if (reduction == None && d.batched) {
    store(output, loss);
    store(total_weight, fixed(dt, 0, {}));
    return;
  }
  UOpPtr total = once(sum_all(once(wsum))), value = sum_all(once(loss));
  store(output, reduction == Mean ? div(value, total) : value);
  store(total_weight, total);
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    int64_t ignore_index) {
  auto [mo, mt] = at::meta::nll_loss_forward(self, target, weight, reduction, ignore_index);
  at::Tensor output = like_meta(mo, self), total_weight = like_meta(mt, self);
  write_nll_forward(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                          const std::optional<at::Tensor>& weight, int64_t reduction,
                                                          int64_t ignore_index, at::Tensor& output,
                                                          at::Tensor& total_weight) {
  at::meta::nll_loss_forward_outf(self, target, weight, reduction, ignore_index, output, total_weight);
  write_nll_forward(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

// grad_input[n, c, s] = -w[c] * g where c is the target (g / total_weight for a mean), 0 elsewhere.
void write_nll_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight_opt, int64_t reduction, int64_t ignore_index,
                        const at::Tensor& total_weight, const at::Tensor& grad_input) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()),
                              "\"nll_loss_backward_out_frame\" not implemented for '", self.scalar_type(), "'");
  if (grad_input.numel() == 0) return;
  NllShape d = nll_shape(self);
  DType dt = opmath(to_tiny_dtype(self.scalar_type()));
  Shape full{d.n, d.c, d.s};
  NllTarget t = nll_target(target, d, ignore_index);
  UOpPtr g;
  if (reduction == None && d.batched) {
    g = expand(reshape(cast(read(grad_output), dt), {d.n, 1, d.s}), full);
  } else {
    g = reshape(cast(read(grad_output), dt), {1, 1, 1});
    if (reduction == Mean) g = div(g, reshape(cast(read(total_weight), dt), {1, 1, 1}));
    g = expand(g, full);
  }
  UOpPtr v = alu(Ops::NEG, g);
  if (weight_opt && weight_opt->defined())
    v = mul(expand(reshape(input(*weight_opt, dt, {d.c}), {1, d.c, 1}), full), v);
  store(grad_input, where(t.hit, v, like(v, 0)));
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  at::Tensor grad_input = like_meta(
      at::meta::nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight), self);
  write_nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
  return grad_input;
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                  const at::Tensor& total_weight, at::Tensor& grad_input) {
  at::meta::nll_loss_backward_outf(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                                   grad_input);
  write_nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
  return grad_input;
}

// nll_loss2d has no meta function: the CPU kernel's checks.
void check_nll2d(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight_opt) {
  TORCH_CHECK(target.dim() == 3,
              "only batches of spatial targets supported (3D tensors) but got targets of dimension: ", target.dim());
  TORCH_CHECK(self.dim() == 4,
              "only batches of spatial inputs supported (4D tensors), but got input of dimension: ", self.dim());
  TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
              "expected target dtype to be Long or Byte, but got ", target.scalar_type());
  TORCH_CHECK(!weight_opt || !weight_opt->defined() || weight_opt->numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes());
}

Shape nll2d_output_shape(const at::Tensor& self, int64_t reduction) {
  return reduction == None ? Shape{self.size(0), self.size(2), self.size(3)} : Shape{};
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                                      int64_t ignore_index) {
  check_nll2d(self, target, weight);
  at::Tensor output =
      empty_tiny(c10::IntArrayRef(nll2d_output_shape(self, reduction)), self.scalar_type(), self.device());
  at::Tensor total_weight = empty_tiny({}, self.scalar_type(), self.device());
  write_nll_forward(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                            const std::optional<at::Tensor>& weight, int64_t reduction,
                                                            int64_t ignore_index, at::Tensor& output,
                                                            at::Tensor& total_weight) {
  check_nll2d(self, target, weight);
  at::native::resize_output(output, c10::IntArrayRef(nll2d_output_shape(self, reduction)));
  at::native::resize_output(total_weight, {});
  write_nll_forward(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

void check_nll2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                          const std::optional<at::Tensor>& weight, int64_t reduction, const at::Tensor& total_weight) {
  check_nll2d(self, target, weight);
  TORCH_CHECK(total_weight.numel() == 1,
              "expected total_weight to be a single element tensor, got: ", total_weight.sizes(), " (",
              total_weight.numel(), " elements)");
  if (reduction == None) {
    TORCH_CHECK(grad_output.dim() == 3,
                "grad_output must have same dimension as target (3) but got dimension: ", grad_output.sizes());
    TORCH_CHECK(grad_output.sizes() == target.sizes(), "size mismatch (got grad_output: ", grad_output.sizes(),
                " target: ", target.sizes());
  } else {
    TORCH_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1,
                "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
  }
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                               const at::Tensor& total_weight) {
  check_nll2d_backward(grad_output, self, target, weight, reduction, total_weight);
  at::Tensor grad_input = empty_tiny(self.sizes(), self.scalar_type(), self.device());
  write_nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
  return grad_input;
}

at::Tensor& nll_loss2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                    const at::Tensor& total_weight, at::Tensor& grad_input) {
  check_nll2d_backward(grad_output, self, target, weight, reduction, total_weight);
  at::native::resize_output(grad_input, self.sizes());
  TORCH_CHECK(grad_input.is_contiguous(), "grad_input must be contiguous");
  write_nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
  return grad_input;
}

// ---- pointwise losses: mse, smooth_l1, huber ----

// One elementwise loss of d = input - target and its derivative; `p` is beta or delta.
struct Pointwise {
  const char* cpu_name;
  UOpPtr (*loss)(const UOpPtr& d, const UOpPtr& p);
  // d(loss)/d(input) * g, scaled by norm (1 / numel for a mean)
  UOpPtr (*grad)(const UOpPtr& d, const UOpPtr& g, const UOpPtr& norm, const UOpPtr& p);
  double norm; // the derivative's constant factor
};

const Pointwise kMse{
    "mse_cpu", [](const UOpPtr& d, const UOpPtr&) { return mul(d, d); },
    [](const UOpPtr& d, const UOpPtr& g, const UOpPtr& norm, const UOpPtr&) { return mul(mul(norm, d), g); }, 2.0};

const Pointwise kSmoothL1{
    "smooth_l1_cpu",
    [](const UOpPtr& d, const UOpPtr& beta) {
      UOpPtr z = alu(Ops::ABS, d);
      return where(lt(z, beta), div(mul(mul(like(z, 0.5), z), z), beta), sub(z, mul(like(z, 0.5), beta)));
    },
    [](const UOpPtr& d, const UOpPtr& g, const UOpPtr& norm, const UOpPtr& beta) {
      UOpPtr ng = mul(norm, g);
      return where(le(d, alu(Ops::NEG, beta)), alu(Ops::NEG, ng), where(le(beta, d), ng, div(mul(ng, d), beta)));
    },
    1.0};

const Pointwise kHuber{"huber_cpu",
                       [](const UOpPtr& d, const UOpPtr& delta) {
                         UOpPtr z = alu(Ops::ABS, d);
                         return where(lt(z, delta), mul(mul(like(z, 0.5), z), z),
                                      mul(delta, sub(z, mul(like(z, 0.5), delta))));
                       },
                       [](const UOpPtr& d, const UOpPtr& g, const UOpPtr& norm, const UOpPtr& delta) {
                         UOpPtr ng = mul(norm, g);
                         return where(le(d, alu(Ops::NEG, delta)), alu(Ops::NEG, mul(ng, delta)),
                                      where(le(delta, d), mul(ng, delta), mul(ng, d)));
                       },
                       1.0};

void check_float(const Pointwise& f, at::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(dtype), "\"", f.cpu_name, "\" not implemented for '", dtype, "'");
}

// The loss of input against target into `out` (its shape and dtype already torch's).
void write_pointwise(const Pointwise& f, const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                     double param, const at::Tensor& out) {
  check_same_device({self, target, out});
  check_reduction(reduction);
  at::ScalarType common = at::result_type(self, target);
  check_float(f, common);
  DType dt = opmath(to_tiny_dtype(common));
  Shape shape = to_shape(at::infer_size(self.sizes(), target.sizes()));
  UOpPtr d = sub(input(self, dt, shape), input(target, dt, shape));
  UOpPtr loss = f.loss(d, scalar_constant(param, dt, shape));
  store(out, reduce_loss(loss, reduction, to_tiny_dtype(out.scalar_type())));
}

at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  at::Tensor out = like_meta(at::meta::mse_loss(self, target, reduction), self);
  write_pointwise(kMse, self, target, reduction, 0.0, out);
  return out;
}

at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  at::meta::mse_loss_outf(self, target, reduction, out);
  write_pointwise(kMse, self, target, reduction, 0.0, out);
  return out;
}

at::Tensor smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
  at::Tensor out = like_meta(at::meta::smooth_l1_loss(self, target, reduction, beta), self);
  write_pointwise(kSmoothL1, self, target, reduction, beta, out);
  return out;
}

at::Tensor& smooth_l1_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta,
                               at::Tensor& out) {
  at::meta::smooth_l1_loss_outf(self, target, reduction, beta, out);
  write_pointwise(kSmoothL1, self, target, reduction, beta, out);
  return out;
}

// huber_loss has no meta function: its result takes the input's dtype (torch computes into
// empty_like(input)).
void check_huber(double delta) { TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta."); }

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  check_huber(delta);
  Shape shape = reduction == None ? to_shape(at::infer_size(self.sizes(), target.sizes())) : Shape{};
  at::Tensor out = reduction == None && shape == to_shape(self.sizes())
                       ? at::empty_like(self)
                       : empty_tiny(c10::IntArrayRef(shape), self.scalar_type(), self.device());
  write_pointwise(kHuber, self, target, reduction, delta, out);
  return out;
}

at::Tensor& huber_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                           at::Tensor& out) {
  check_huber(delta);
  TORCH_CHECK(at::canCast(at::result_type(self, target), out.scalar_type()), "result type ",
              at::result_type(self, target), " can't be cast to the desired output type ", out.scalar_type());
  at::native::resize_output(out,
                            reduction == None ? at::infer_size(self.sizes(), target.sizes()) : std::vector<int64_t>{});
  write_pointwise(kHuber, self, target, reduction, delta, out);
  return out;
}

// The backward ops: torch's TensorIterator over (grad_input, input, target, grad_output); the
// functional form computes into a contiguous tensor of the input's shape.
void write_pointwise_backward(const Pointwise& f, const at::Tensor& grad_output, const at::Tensor& self,
                              const at::Tensor& target, int64_t reduction, double param, at::Tensor& grad_input,
                              bool promote) {
  check_same_device({grad_output, self, target, grad_input});
  check_reduction(reduction);
  at::TensorIteratorConfig cfg;
  cfg.add_output(grad_input).add_const_input(self).add_const_input(target).add_const_input(grad_output);
  if (promote)
    cfg.promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true).enforce_safe_casting_to_output(true);
  at::TensorIterator iter = cfg.build();
  at::ScalarType common = promote ? iter.common_dtype() : self.scalar_type();
  check_float(f, common);
  DType dt = opmath(to_tiny_dtype(common));
  Shape shape = to_shape(iter.output().sizes());
  double norm = f.norm * (reduction == Mean ? 1.0 / static_cast<double>(self.numel()) : 1.0);
  UOpPtr d = sub(input(self, dt, shape), input(target, dt, shape));
  UOpPtr g = input(grad_output, dt, shape), n = scalar_constant(norm, dt, shape);
  store(iter.output(), f.grad(d, g, n, scalar_constant(param, dt, shape)));
}

at::Tensor contiguous_like(const at::Tensor& self) {
  return empty_tiny(self.sizes(), self.scalar_type(), self.device());
}

at::Tensor mse_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction) {
  at::Tensor grad_input = contiguous_like(self);
  write_pointwise_backward(kMse, grad_output, self, target, reduction, 0.0, grad_input, false);
  return grad_input;
}

at::Tensor& mse_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                  int64_t reduction, at::Tensor& grad_input) {
  write_pointwise_backward(kMse, grad_output, self, target, reduction, 0.0, grad_input, false);
  return grad_input;
}

at::Tensor smooth_l1_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double beta) {
  at::Tensor grad_input = contiguous_like(self);
  write_pointwise_backward(kSmoothL1, grad_output, self, target, reduction, beta, grad_input, true);
  return grad_input;
}

at::Tensor& smooth_l1_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                        int64_t reduction, double beta, at::Tensor& grad_input) {
  write_pointwise_backward(kSmoothL1, grad_output, self, target, reduction, beta, grad_input, true);
  return grad_input;
}

at::Tensor huber_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta) {
  at::Tensor grad_input = contiguous_like(self);
  write_pointwise_backward(kHuber, grad_output, self, target, reduction, delta, grad_input, false);
  return grad_input;
}

at::Tensor& huber_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                    int64_t reduction, double delta, at::Tensor& grad_input) {
  write_pointwise_backward(kHuber, grad_output, self, target, reduction, delta, grad_input, false);
  return grad_input;
}

// ---- binary_cross_entropy ----

// torch's CPU kernel checks every element: probabilities in [0, 1] (NaN fails too).
void check_probabilities(const UOpPtr& x, const UOpPtr& y, c10::Device device) {
  if (numel(x->shape) == 0) return;
  auto outside = [](const UOpPtr& v) {
    UOpPtr inside = alu(Ops::AND, le(like(v, 0), v), le(v, like(v, 1)));
    UOpPtr flag = cast(alu(Ops::NOT, inside), DType::Int64);
    return reshape(reduce(flag, Ops::MAX, all_axes(flag)), {});
  };
  std::vector<int64_t> r = read_on_host({outside(x), outside(y)}, device);
  TORCH_CHECK(r[0] == 0, "all elements of input should be between 0 and 1");
  TORCH_CHECK(r[1] == 0, "all elements of target should be between 0 and 1");
}

void check_bce(const at::Tensor& self, const at::Tensor& target, const char* name) {
  TORCH_CHECK(self.scalar_type() == target.scalar_type(), "expected scalar type ", self.scalar_type(), " but found ",
              target.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"", name, "\" not implemented for '",
                              self.scalar_type(), "'");
  TORCH_CHECK(at::is_expandable_to(target.sizes(), self.sizes()), "The size of tensor a (", target.sizes(),
              ") must match the size of tensor b (", self.sizes(), ")");
}

// The class weight multiplies the elementwise value (torch's mul_ into a tensor of the input's shape).
UOpPtr weighted(const UOpPtr& v, const std::optional<at::Tensor>& weight, DType dt) {
  if (!weight || !weight->defined()) return v;
  TORCH_CHECK(at::is_expandable_to(weight->sizes(), c10::IntArrayRef(v->shape)), "output with shape ",
              c10::IntArrayRef(v->shape), " doesn't match the broadcast shape ", weight->sizes());
  return mul(v, input(*weight, dt, v->shape));
}

void write_bce(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
               int64_t reduction, const at::Tensor& out) {
  check_reduction(reduction);
  check_bce(self, target, "binary_cross_entropy");
  DType dt = opmath(to_tiny_dtype(self.scalar_type()));
  Shape shape = to_shape(self.sizes());
  UOpPtr x = input(self, dt, shape), y = input(target, dt, shape);
  check_probabilities(x, y, self.device());
  // (y - 1) * max(log1p(-x), -100) - y * max(log(x), -100)
  UOpPtr floor = like(x, -100.0);
  UOpPtr log_x = alu(Ops::MAX, alu(Ops::LOG, x), floor);
  UOpPtr log_1mx = alu(Ops::MAX, alu(Ops::LOG1P, alu(Ops::NEG, x)), floor);
  UOpPtr loss = sub(mul(sub(y, like(y, 1.0)), log_1mx), mul(y, log_x));
  store(out, reduce_loss(weighted(loss, weight, dt), reduction, to_tiny_dtype(out.scalar_type())));
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor out = reduction == None ? at::empty_like(self) : empty_tiny({}, self.scalar_type(), self.device());
  write_bce(self, target, weight, reduction, out);
  return out;
}

at::Tensor& binary_cross_entropy_out(const at::Tensor& self, const at::Tensor& target,
                                     const std::optional<at::Tensor>& weight, int64_t reduction, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "expected scalar type ", self.scalar_type(), " but found ",
              out.scalar_type());
  at::native::resize_output(out, reduction == None ? self.sizes() : c10::IntArrayRef{});
  write_bce(self, target, weight, reduction, out);
  return out;
}

// grad * (x - y) / max((1 - x) * x, 1e-12), times the weight, over numel for a mean.
void write_bce_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight, int64_t reduction, const at::Tensor& grad_input) {
  check_reduction(reduction);
  check_bce(self, target, "binary_cross_entropy_backward");
  DType dt = opmath(to_tiny_dtype(self.scalar_type()));
  Shape shape = to_shape(self.sizes());
  UOpPtr x = input(self, dt, shape), y = input(target, dt, shape), g = input(grad_output, dt, shape);
  UOpPtr denom = alu(Ops::MAX, mul(sub(like(x, 1.0), x), x), like(x, 1e-12));
  UOpPtr v = weighted(div(mul(g, sub(x, y)), denom), weight, dt);
  if (reduction == Mean) v = div(v, like(v, static_cast<double>(self.numel())));
  store(grad_input, v);
}

at::Tensor binary_cross_entropy_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                         const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                         int64_t reduction) {
  at::Tensor grad_input = at::empty_like(self);
  write_bce_backward(grad_output, self, target, weight, reduction, grad_input);
  return grad_input;
}

at::Tensor& binary_cross_entropy_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                              const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                              int64_t reduction, at::Tensor& grad_input) {
  at::native::resize_output(grad_input, self.sizes());
  write_bce_backward(grad_output, self, target, weight, reduction, grad_input);
  return grad_input;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward));
  m.impl("nll_loss_forward.output", TORCH_FN(nll_loss_forward_out));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward));
  m.impl("nll_loss_backward.grad_input", TORCH_FN(nll_loss_backward_out));
  m.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward));
  m.impl("nll_loss2d_forward.output", TORCH_FN(nll_loss2d_forward_out));
  m.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward));
  m.impl("nll_loss2d_backward.grad_input", TORCH_FN(nll_loss2d_backward_out));
  m.impl("mse_loss", TORCH_FN(mse_loss));
  m.impl("mse_loss.out", TORCH_FN(mse_loss_out));
  m.impl("mse_loss_backward", TORCH_FN(mse_loss_backward));
  m.impl("mse_loss_backward.grad_input", TORCH_FN(mse_loss_backward_out));
  m.impl("smooth_l1_loss", TORCH_FN(smooth_l1_loss));
  m.impl("smooth_l1_loss.out", TORCH_FN(smooth_l1_loss_out));
  m.impl("smooth_l1_loss_backward", TORCH_FN(smooth_l1_loss_backward));
  m.impl("smooth_l1_loss_backward.grad_input", TORCH_FN(smooth_l1_loss_backward_out));
  m.impl("huber_loss", TORCH_FN(huber_loss));
  m.impl("huber_loss.out", TORCH_FN(huber_loss_out));
  m.impl("huber_loss_backward", TORCH_FN(huber_loss_backward));
  m.impl("huber_loss_backward.out", TORCH_FN(huber_loss_backward_out));
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy));
  m.impl("binary_cross_entropy.out", TORCH_FN(binary_cross_entropy_out));
  m.impl("binary_cross_entropy_backward", TORCH_FN(binary_cross_entropy_backward));
  m.impl("binary_cross_entropy_backward.grad_input", TORCH_FN(binary_cross_entropy_backward_out));
}

} // namespace tiny::aten_ops
