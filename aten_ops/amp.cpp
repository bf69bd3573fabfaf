// Mixed precision: autocast's cast policies for tiny tensors (the AutocastPrivateUse1 dispatch key) and
// the two kernels torch.amp.GradScaler runs (_amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_).
//
// Autocast. tiny takes the op lists torch shares between its GPU-like backends (the AT_FORALL_* lists of
// ATen/autocast_mode.h, which CUDA registers): matmuls, linear and convolutions run in the autocast dtype;
// pointwise ops prone to overflow, norms, softmax, log_softmax, sums and losses run in float32; a few
// binary ops take the widest input type. Every other op falls through to the tiny kernel unchanged. As on
// CUDA, binary_cross_entropy refuses autocast (its input is usually a sigmoid rounded to the autocast
// dtype); torch's CPU list differs from CUDA's in places (softmax stays in the input dtype there).
//
// GradScaler. Both kernels are UOp graphs, so unscaling, the inf/NaN check and the scale update never
// leave the device: found_inf, the scale and the growth tracker stay lazy tensors until GradScaler.step
// reads found_inf (a sync) to decide whether to step. They compute as torch's CPU kernels do: gradients
// are multiplied by inv_scale in float32 (float64 for float64 gradients), and the scale is multiplied by
// the growth or backoff factor in float64 and rounded to float32.

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

constexpr c10::DeviceType kTiny = c10::DeviceType::PrivateUse1;

// ---- autocast ----

at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                        int64_t) {
  TORCH_CHECK(false, "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss refuse autocast on tiny, as on "
                     "CUDA: their input is usually a sigmoid, which the autocast dtype rounds to 0 or 1. Use "
                     "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss (one op on "
                     "the logits, computed in float32 under autocast).");
}

// ---- GradScaler ----

// A one-element tensor's value, shaped as `shape` (numel 1) or broadcast to it.
UOpPtr one_element(const at::Tensor& t, DType dt, const Shape& shape) {
  UOpPtr v = reshape(cast(read(t), dt), Shape(shape.size(), 1));
  return shape.empty() ? v : expand(v, shape);
}

UOpPtr is_finite(const UOpPtr& x) { return lt(alu(Ops::ABS, x), like(x, INFINITY)); }

void check_on_tiny(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().type() == kTiny, name, " must be a ", c10::DeviceType(kTiny), " tensor.");
}

// Multiplies each gradient by inv_scale in place; found_inf becomes 1.0 when any element of any gradient is
// inf or NaN, and keeps its value otherwise (the caller zeroes it).
void non_finite_check_and_unscale(at::TensorList scaled_grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  if (scaled_grads.empty()) return;
  check_on_tiny(inv_scale, "inv_scale");
  check_on_tiny(found_inf, "found_inf");
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(inv_scale.scalar_type() == at::kFloat, "inv_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");

  const Shape found_shape = to_shape(found_inf.sizes());
  UOpPtr any_non_finite; // float32 0 or 1, of found_inf's shape
  for (const at::Tensor& grad : scaled_grads) {
    check_on_tiny(grad, "each of scaled_grads");
    TORCH_CHECK(grad.layout() == at::kStrided, "one of scaled_grads was not a strided tensor.");
    TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(grad.scalar_type()),
                                "\"_amp_foreach_non_finite_check_and_unscale\" not implemented for '",
                                grad.scalar_type(), "'");
    if (grad.numel() == 0) continue;
    const DType dt = to_tiny_dtype(grad.scalar_type());
    const DType op = opmath(dt);
    const Shape shape = to_shape(grad.sizes());
    UOpPtr value = cast(read(grad), op);
    UOpPtr flagged = where(is_finite(value), fixed(DType::Float32, 0, shape), fixed(DType::Float32, 1, shape));
    UOpPtr found = reshape(reduce(reshape(flagged, {grad.numel()}), Ops::MAX, {0}), found_shape);
    any_non_finite = any_non_finite ? alu(Ops::MAX, any_non_finite, found) : found;
    write(grad, cast(mul(value, one_element(inv_scale, op, shape)), dt));
  }
  if (!any_non_finite) return;
  UOpPtr old = read(found_inf);
  write(found_inf, where(lt(like(old, 0), any_non_finite), like(old, 1), old));
}

// After a step: a step that found inf/NaN multiplies the scale by backoff_factor and restarts the count of
// good steps; otherwise the count grows, and reaching growth_interval multiplies the scale by growth_factor
// (unless that overflows float32) and restarts the count.
at::Tensor& update_scale(at::Tensor& current_scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_on_tiny(growth_tracker, "growth_tracker");
  check_on_tiny(current_scale, "current_scale");
  check_on_tiny(found_inf, "found_inf");
  TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(current_scale.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(current_scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");

  const Shape shape = to_shape(current_scale.sizes());
  UOpPtr scale = read(current_scale);
  UOpPtr scale64 = cast(scale, DType::Float64);
  UOpPtr tracker = one_element(growth_tracker, DType::Int32, shape);
  UOpPtr found = alu(Ops::CMPNE, one_element(found_inf, DType::Float32, shape), like(scale, 0));

  UOpPtr successful = add(tracker, like(tracker, 1));
  UOpPtr grow = alu(Ops::CMPEQ, cast(successful, DType::Int64), scalar_constant(growth_interval, DType::Int64, shape));
  UOpPtr grown = cast(mul(scale64, scalar_constant(growth_factor, DType::Float64, shape)), DType::Float32);
  UOpPtr backed_off = cast(mul(scale64, scalar_constant(backoff_factor, DType::Float64, shape)), DType::Float32);
  UOpPtr kept = where(grow, where(is_finite(grown), grown, scale), scale);
  UOpPtr new_tracker = where(grow, like(tracker, 0), successful);

  write(current_scale, where(found, backed_off, kept));
  write(growth_tracker, reshape(where(found, like(tracker, 0), new_tracker), to_shape(growth_tracker.sizes())));
  return current_scale;
}

} // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

// The norm entries of torch's list name ATen types unqualified (it is written inside namespace at).
namespace autocast_lists {
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TINY_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TINY_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TINY_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TINY_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TINY_LOWER_PRECISION_FP)
  AT_FORALL_FP32(TINY_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TINY_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TINY_PROMOTE)
#undef TINY_LOWER_PRECISION_FP
#undef TINY_FP32
#undef TINY_FP32_SET_OPT_DTYPE
#undef TINY_PROMOTE
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
}

} // namespace autocast_lists

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(non_finite_check_and_unscale));
  m.impl("_amp_update_scale_", TORCH_FN(update_scale));
}

} // namespace tiny::aten_ops
