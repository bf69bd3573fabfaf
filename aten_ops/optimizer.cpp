// Fused optimizer steps: _fused_adam_ and _fused_adamw_ (torch.optim.Adam/AdamW(fused=True)), each a UOp
// graph per parameter, so a step stays on the device and fuses into one kernel per written tensor.
//
// They compute as torch's CPU kernel does: the step's constants (bias corrections, step size, the AdamW
// decay factor) in float64, rounded to the parameter's opmath type, the update in that type. The step
// count, a tensor, is read lazily (the CPU kernel reads it on the host; tiny would need a sync). With
// grad_scale the gradients are unscaled and written back; with found_inf == 1 nothing changes (a select,
// so no sync either).

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <variant>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

// A one-element tensor's value as a scalar of dtype dt.
UOpPtr scalar_of(const at::Tensor& t, DType dt) {
  TORCH_CHECK(t.numel() == 1, "tiny: expected a one-element tensor, got ", t.sizes());
  return reshape(cast(read(t), dt), {});
}

UOpPtr spread(const UOpPtr& scalar, const Shape& shape) {
  return shape.empty() ? scalar : expand(reshape(scalar, Shape(shape.size(), 1)), shape);
}

struct AdamConfig {
  bool adamw;
  std::variant<double, at::Tensor> lr;
  double beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize;
  std::optional<at::Tensor> grad_scale, found_inf;
};

void fused_adam(const AdamConfig& cfg, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList state_steps) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && state_steps.size() == n,
              "_fused_adam_: params, grads, exp_avgs, exp_avg_sqs and state_steps must have the same length");
  TORCH_CHECK(!cfg.amsgrad || max_exp_avg_sqs.size() == n,
              "_fused_adam_: max_exp_avg_sqs must have one tensor per parameter with amsgrad");
  auto f64 = [](double v) { return var_float(DType::Float64, v); };
  UOpPtr lr = std::holds_alternative<double>(cfg.lr) ? f64(std::get<double>(cfg.lr))
                                                     : scalar_of(std::get<at::Tensor>(cfg.lr), DType::Float64);
  UOpPtr one = const_float(DType::Float64, 1.0);
  for (size_t i = 0; i < n; i++) {
    const at::Tensor& p = params[i];
    if (p.numel() == 0) continue;
    for (const at::Tensor& t : {grads[i], exp_avgs[i], exp_avg_sqs[i]})
      TORCH_CHECK(t.sizes() == p.sizes() && t.scalar_type() == p.scalar_type(),
                  "_fused_adam_: every state tensor must match its parameter's shape and dtype");
    DType c = opmath(to_tiny_dtype(p.scalar_type()));
    Shape shape = to_shape(p.sizes());
    auto in_c = [&](const UOpPtr& scalar64) { return spread(cast(scalar64, c), shape); };
    UOpPtr step = scalar_of(state_steps[i], DType::Float64);
    UOpPtr bias1 = alu(Ops::SUB, one, alu(Ops::POW, f64(cfg.beta1), step));
    UOpPtr bias2_sqrt = alu(Ops::SQRT, alu(Ops::SUB, one, alu(Ops::POW, f64(cfg.beta2), step)));

    UOpPtr param = cast(read(p), c), grad = cast(read(grads[i]), c);
    UOpPtr exp_avg = cast(read(exp_avgs[i]), c), exp_avg_sq = cast(read(exp_avg_sqs[i]), c);
    if (cfg.grad_scale) grad = div(grad, spread(scalar_of(*cfg.grad_scale, c), shape));
    UOpPtr unscaled = grad;
    if (cfg.maximize) grad = alu(Ops::NEG, grad);
    if (cfg.weight_decay != 0) {
      if (cfg.adamw)
        param = mul(param, in_c(alu(Ops::SUB, one, mul(lr, f64(cfg.weight_decay)))));
      else
        grad = add(grad, mul(param, in_c(f64(cfg.weight_decay))));
    }
    // exp_avg.lerp_(grad, 1 - beta1), from the nearer end as torch's lerp
    UOpPtr w = in_c(f64(1 - cfg.beta1));
    UOpPtr diff = sub(grad, exp_avg);
    UOpPtr avg = 1 - cfg.beta1 < 0.5 ? add(exp_avg, mul(w, diff)) : sub(grad, mul(diff, sub(like(w, 1), w)));
    UOpPtr avg_sq = add(mul(exp_avg_sq, in_c(f64(cfg.beta2))), mul(mul(in_c(f64(1 - cfg.beta2)), grad), grad));
    UOpPtr second = avg_sq, max_sq;
    if (cfg.amsgrad) {
      max_sq = alu(Ops::MAX, cast(read(max_exp_avg_sqs[i]), c), avg_sq);
      second = max_sq;
    }
    UOpPtr denom = add(div(alu(Ops::SQRT, second), in_c(bias2_sqrt)), in_c(f64(cfg.eps)));
    UOpPtr step_size = in_c(alu(Ops::NEG, div(lr, bias1)));
    UOpPtr new_param = add(param, div(mul(step_size, avg), denom));

    // found_inf == 1 skips the step; every value keeps its old content
    UOpPtr skip =
        cfg.found_inf
            ? spread(alu(Ops::CMPEQ, scalar_of(*cfg.found_inf, DType::Float32), const_float(DType::Float32, 1.0)),
                     shape)
            : nullptr;
    auto store = [&](const at::Tensor& t, const UOpPtr& v) {
      UOpPtr value = cast(v, to_tiny_dtype(t.scalar_type()));
      write(t, skip ? where(skip, read(t), value) : value);
    };
    store(exp_avgs[i], avg);
    store(exp_avg_sqs[i], avg_sq);
    if (cfg.amsgrad) store(max_exp_avg_sqs[i], max_sq);
    if (cfg.grad_scale) store(grads[i], unscaled);
    store(p, new_param);
  }
}

template <bool AdamW>
void adam_step(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
               at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
               double weight_decay, double eps, bool amsgrad, bool maximize,
               const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  fused_adam({AdamW, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf}, self, grads,
             exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps);
}

template <bool AdamW>
void adam_step_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                         at::TensorList max_exp_avg_sqs, at::TensorList state_steps, const at::Tensor& lr, double beta1,
                         double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                         const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  // a learning rate on the CPU is a number (reading it needs no sync)
  std::variant<double, at::Tensor> rate = lr;
  if (!lr.is_privateuseone()) rate = lr.item<double>();
  fused_adam({AdamW, rate, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf}, self, grads,
             exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_fused_adam_", TORCH_FN(adam_step<false>));
  m.impl("_fused_adam_.tensor_lr", TORCH_FN(adam_step_tensor_lr<false>));
  m.impl("_fused_adamw_", TORCH_FN(adam_step<true>));
  m.impl("_fused_adamw_.tensor_lr", TORCH_FN(adam_step_tensor_lr<true>));
}

} // namespace tiny::aten_ops
