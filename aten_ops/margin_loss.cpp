// Margin losses: multi_margin_loss (F.multi_margin_loss) and multilabel_margin_loss_forward
// (F.multilabel_margin_loss) and their backward ops, with torch's checks.
//
// Each sample (a row of C scores x with target class y) adds, over the other classes d, the hinge
// max(0, margin - x[y] + x[d]) (squared for p = 2), times weight[y], divided by C. The target's score x[y]
// and weight are picked with a one-hot compare reduced over the classes, as nll_loss does (no data-dependent
// load); the whole loss is one row reduction fused with its epilogue. A target outside [0, C) raises torch's
// "target out of range" at the call: the targets' extremes are read to the host (a small kernel of its own).
//
// multilabel_margin_loss lists each frame's target classes in a row of C entries, ended by the first negative
// one; every listed target y and every class d not listed add max(0, 1 - x[y] + x[d]) / C. Over a (frames,
// slots, classes) space: which slots count, which classes are targets (a max over the slots) and each slot's
// target score (a one-hot sum), then one reduction of the hinges.

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/read_on_host.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using at::Reduction::Mean;
using at::Reduction::None;

// The input seen as (frames, classes): a vector is one frame, a scalar one frame of one class.
struct Frames {
  int64_t n, c;
};

// torch's multi_margin_loss_shape_check, and its p and dtype checks.
Frames check_multi_margin(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                          const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(p.toLong() == 1 || p.toLong() == 2, "only p == 1 and p == 2 supported");
  const int64_t dims = self.dim();
  TORCH_CHECK((dims == 2 && self.size(1) != 0) || (dims == 1 && self.size(0) != 0) || dims == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  Frames f{dims <= 1 ? 1 : self.size(0), dims == 0 ? 1 : self.size(dims - 1)};
  TORCH_CHECK(target.dim() <= 1 && target.numel() == f.n, "inconsistent target size, expected ", f.n, " but got ",
              target.sizes());
  if (weight && weight->defined())
    TORCH_CHECK(weight->dim() <= 1 && weight->numel() == f.c, "inconsistent weight size, expected ", f.c, " but got ",
                weight->sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()),
                              "\"multi_margin_loss_cpu_kernel\" not implemented for '", self.scalar_type(), "'");
  TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
  std::vector<at::Tensor> all{self, target};
  if (weight && weight->defined()) all.push_back(*weight);
  check_same_device(all);
  return f;
}

void check_targets_in_range(const at::Tensor& target, int64_t classes) {
  IntRange r = int_range(target);
  TORCH_CHECK(!r.any || (r.max < classes && r.min >= 0), "target out of range");
}

// What the loss and its gradient share, over (frames, classes) in compute dtype ct.
struct Hinges {
  UOpPtr is_target; // bool: class == target
  UOpPtr z;         // margin - x[y] + x[d]
  UOpPtr active;    // z > 0 for d != y
  UOpPtr scale;     // weight[y] per frame, broadcast (1 without weights)
};

// v's element at each frame's target class, broadcast over the classes.
UOpPtr at_target(const UOpPtr& is_target, const UOpPtr& v) {
  const Shape& s = is_target->shape;
  return expand(reduce(where(is_target, v, fixed(v->dtype, 0, s)), Ops::ADD, {1}), s);
}

Hinges hinges(const at::Tensor& self, const at::Tensor& target, const at::Scalar& margin,
              const std::optional<at::Tensor>& weight, Frames f, DType ct) {
  Shape s{f.n, f.c};
  UOpPtr x = reshape(cast(read(self), ct), s);
  UOpPtr t = expand(reshape(read(target), {f.n, 1}), s);
  Hinges h;
  h.is_target = alu(Ops::CMPEQ, expand(reshape(iota(f.c, DType::Int64), {1, f.c}), s), t);
  // the CPU's order: (margin - x[y]) + x[d], margin in the input dtype
  UOpPtr m = cast(scalar_constant(margin, to_tiny_dtype(self.scalar_type()), s), ct);
  h.z = add(sub(m, at_target(h.is_target, x)), x);
  h.active = alu(Ops::AND, lt(fixed(ct, 0, s), h.z), alu(Ops::NOT, h.is_target));
  h.scale = weight && weight->defined() ? at_target(h.is_target, expand(reshape(cast(read(*weight), ct), {1, f.c}), s))
                                        : fixed(ct, 1, s);
  return h;
}

at::Tensor& multi_margin_loss_out(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                                  const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction,
                                  at::Tensor& out) {
  Frames f = check_multi_margin(self, target, p, weight);
  // a vector input without reduction gives a loss per frame only when its target is a vector too
  at::native::resize_output(out,
                            reduction == None && target.dim() > 0 ? std::vector<int64_t>{f.n} : std::vector<int64_t>{});
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  if (self.numel() == 0) {
    write(out, fixed(dt, 0, to_shape(out.sizes())));
    return out;
  }
  check_targets_in_range(target, f.c);
  Hinges h = hinges(self, target, margin, weight, f, ct);
  UOpPtr hinge = p.toLong() == 1 ? h.z : mul(h.z, h.z);
  UOpPtr terms = where(h.active, mul(hinge, h.scale), fixed(ct, 0, h.z->shape));
  UOpPtr per_frame = div(reduce(terms, Ops::ADD, {1}), fixed(ct, static_cast<double>(f.c), {f.n, 1}));
  UOpPtr loss = reduction == None ? per_frame : reduce(per_frame, Ops::ADD, {0});
  if (reduction == Mean) loss = div(loss, fixed(ct, static_cast<double>(f.n), loss->shape));
  write(out, reshape(cast(loss, dt), to_shape(out.sizes())));
  return out;
}

at::Tensor multi_margin_loss(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                             const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return multi_margin_loss_out(self, target, p, margin, weight, reduction, out);
}

// The CPU's gradient: each active class d gets g (2 g z for p = 2) times weight[y], the target class minus their
// sum, with g = 1 / C (1 / (N C) for the mean); then times the upstream gradient (per frame without reduction).
at::Tensor& multi_margin_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, const at::Scalar& p, const at::Scalar& margin,
                                           const std::optional<at::Tensor>& weight, int64_t reduction,
                                           at::Tensor& grad_input) {
  Frames f = check_multi_margin(self, target, p, weight);
  check_same_device({grad_output, self});
  at::native::resize_output(grad_input, self.sizes());
  if (self.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  Hinges h = hinges(self, target, margin, weight, f, ct);
  const Shape& s = h.z->shape;
  double g = reduction == Mean ? 1.0 / static_cast<double>(f.n * f.c) : 1.0 / static_cast<double>(f.c);
  UOpPtr step = fixed(ct, g, s);
  UOpPtr slope = p.toLong() == 1 ? step : mul(mul(fixed(ct, 2, s), step), h.z);
  UOpPtr others = where(h.active, mul(slope, h.scale), fixed(ct, 0, s));
  UOpPtr grad = where(h.is_target, alu(Ops::NEG, expand(reduce(others, Ops::ADD, {1}), s)), others);
  UOpPtr up = cast(read(grad_output), ct);
  up = reduction == None && grad_output.dim() > 0 ? expand(reshape(up, {f.n, 1}), s) : expand(reshape(up, {1, 1}), s);
  write(grad_input, reshape(cast(mul(grad, up), dt), to_shape(self.sizes())));
  return grad_input;
}

at::Tensor multi_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                      const at::Scalar& p, const at::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor grad_input = empty_tiny({0}, self.scalar_type(), self.device());
  return multi_margin_loss_backward_out(grad_output, self, target, p, margin, weight, reduction, grad_input);
}

// ---- multilabel_margin_loss: each frame's targets are the classes listed before the first negative entry ----

// torch's multilabel_margin_loss_shape_check and dtype checks.
Frames check_multilabel(const at::Tensor& self, const at::Tensor& target) {
  const int64_t dims = self.dim();
  TORCH_CHECK((dims == 2 && self.size(1) != 0) || (dims == 1 && self.size(0) != 0) || dims == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  Frames f{dims <= 1 ? 1 : self.size(0), dims == 0 ? 1 : self.size(dims - 1)};
  const bool target_fits = dims <= 1 ? target.dim() <= 1 && target.numel() == f.c
                                     : target.dim() == 2 && target.size(0) == f.n && target.size(1) == f.c;
  TORCH_CHECK(target_fits, "inconsistent target size: ", target.sizes(), " for input of size: ", self.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()),
                              "\"multilabel_margin_loss_forward_out_frame\" not implemented for '", self.scalar_type(),
                              "'");
  TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
  check_same_device({self, target});
  return f;
}

// Over (frames, slots, classes): slot j holds target class t[j]; it counts while no earlier slot is negative.
struct Labels {
  UOpPtr listed;    // (n, j, c) bool: slot j counts and names class c
  UOpPtr is_target; // (n, c) bool
  UOpPtr active;    // (n, j, c) bool: slot j counts, c is no target, and its hinge z > 0
  UOpPtr z;         // (n, j, c): 1 - x[t[j]] + x[c]
};

Labels labels(const at::Tensor& self, const at::Tensor& target, Frames f, DType ct) {
  const int64_t n = f.n, c = f.c;
  Shape space{n, c, c}, slots{n, c};
  UOpPtr t = reshape(read(target), slots);
  UOpPtr slot = expand(reshape(iota(c, DType::Int64), {1, c}), slots);
  UOpPtr stop = reduce(where(lt(t, fixed(DType::Int64, 0, slots)), slot, fixed(DType::Int64, c, slots)), Ops::MIN, {1});
  UOpPtr counts = lt(slot, expand(stop, slots));
  UOpPtr cls = expand(reshape(iota(c, DType::Int64), {1, 1, c}), space);
  UOpPtr names = alu(Ops::CMPEQ, expand(reshape(t, {n, c, 1}), space), cls);
  Labels l;
  l.listed = alu(Ops::AND, names, expand(reshape(counts, {n, c, 1}), space));
  l.is_target = reshape(
      alu(Ops::CMPNE, reduce(cast(l.listed, DType::Int32), Ops::MAX, {1}), fixed(DType::Int32, 0, {n, 1, c})), slots);
  UOpPtr x = expand(reshape(cast(read(self), ct), {n, 1, c}), space);
  UOpPtr x_target = expand(reduce(where(names, x, fixed(ct, 0, space)), Ops::ADD, {2}), space);
  l.z = add(sub(fixed(ct, 1, space), x_target), x);
  UOpPtr other = alu(Ops::NOT, expand(reshape(l.is_target, {n, 1, c}), space));
  l.active =
      alu(Ops::AND, alu(Ops::AND, expand(reshape(counts, {n, c, 1}), space), other), lt(fixed(ct, 0, space), l.z));
  return l;
}

void check_labels_in_range(const at::Tensor& target, int64_t classes) {
  IntRange r = int_range(target);
  TORCH_CHECK(!r.any || r.min >= -1, "argument #2 'target' is out of range");
  TORCH_CHECK(!r.any || r.max < classes, "argument #2 'target' is out of range");
}

std::tuple<at::Tensor&, at::Tensor&> multilabel_margin_loss_forward_out(const at::Tensor& self,
                                                                        const at::Tensor& target, int64_t reduction,
                                                                        at::Tensor& output, at::Tensor& is_target) {
  Frames f = check_multilabel(self, target);
  // a vector input gives a scalar loss even without reduction
  at::native::resize_output(output, reduction != None || target.dim() <= 1 ? std::vector<int64_t>{}
                                                                           : std::vector<int64_t>{f.n});
  at::native::resize_output(is_target, target.sizes());
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  if (self.numel() == 0) {
    write(output, fixed(dt, 0, to_shape(output.sizes())));
    write(is_target, fixed(dt, 0, to_shape(is_target.sizes())));
    return {output, is_target};
  }
  check_labels_in_range(target, f.c);
  Labels l = labels(self, target, f, ct);
  UOpPtr per_frame = reduce(where(l.active, l.z, fixed(ct, 0, l.z->shape)), Ops::ADD, {1, 2});
  per_frame = div(reshape(per_frame, {f.n}), fixed(ct, static_cast<double>(f.c), {f.n}));
  UOpPtr loss = reduction == None ? per_frame : reduce(per_frame, Ops::ADD, {0});
  if (reduction == Mean) loss = div(loss, fixed(ct, static_cast<double>(f.n), loss->shape));
  write(output, reshape(cast(loss, dt), to_shape(output.sizes())));
  write(is_target, reshape(cast(l.is_target, dt), to_shape(is_target.sizes())));
  return {output, is_target};
}

std::tuple<at::Tensor, at::Tensor> multilabel_margin_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                                  int64_t reduction) {
  at::Tensor output = empty_tiny({0}, self.scalar_type(), self.device());
  at::Tensor is_target = empty_tiny({0}, self.scalar_type(), self.device());
  multilabel_margin_loss_forward_out(self, target, reduction, output, is_target);
  return {output, is_target};
}

// The CPU's gradient: every active (slot, class) pair adds g to the class and takes g from the slot's target,
// g = 1 / C (1 / (N C) for the mean); then times the upstream gradient (per frame without reduction).
at::Tensor& multilabel_margin_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                const at::Tensor& target, int64_t reduction,
                                                const at::Tensor& /*is_target*/, at::Tensor& grad_input) {
  Frames f = check_multilabel(self, target);
  check_same_device({grad_output, self});
  at::native::resize_output(grad_input, self.sizes());
  if (self.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  Labels l = labels(self, target, f, ct);
  const Shape& space = l.z->shape;
  Shape classes{f.n, f.c};
  UOpPtr active = cast(l.active, ct);
  UOpPtr gained = reshape(reduce(active, Ops::ADD, {1}), classes);
  UOpPtr per_slot = expand(reduce(active, Ops::ADD, {2}), space); // active classes of each slot
  UOpPtr lost = reshape(reduce(where(l.listed, per_slot, fixed(ct, 0, space)), Ops::ADD, {1}), classes);
  double g = reduction == Mean ? 1.0 / static_cast<double>(f.n * f.c) : 1.0 / static_cast<double>(f.c);
  UOpPtr grad = mul(sub(gained, lost), fixed(ct, g, classes));
  UOpPtr up = cast(read(grad_output), ct);
  up = reduction == None && grad_output.dim() > 0 ? expand(reshape(up, {f.n, 1}), classes)
                                                  : expand(reshape(up, {1, 1}), classes);
  write(grad_input, reshape(cast(mul(grad, up), dt), to_shape(self.sizes())));
  return grad_input;
}

at::Tensor multilabel_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, int64_t reduction, const at::Tensor& is_target) {
  at::Tensor grad_input = empty_tiny({0}, self.scalar_type(), self.device());
  return multilabel_margin_loss_backward_out(grad_output, self, target, reduction, is_target, grad_input);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("multi_margin_loss", TORCH_FN(multi_margin_loss));
  m.impl("multi_margin_loss.out", TORCH_FN(multi_margin_loss_out));
  m.impl("multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward));
  m.impl("multi_margin_loss_backward.grad_input", TORCH_FN(multi_margin_loss_backward_out));
  m.impl("multilabel_margin_loss_forward", TORCH_FN(multilabel_margin_loss_forward));
  m.impl("multilabel_margin_loss_forward.output", TORCH_FN(multilabel_margin_loss_forward_out));
  m.impl("multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward));
  m.impl("multilabel_margin_loss_backward.grad_input", TORCH_FN(multilabel_margin_loss_backward_out));
}

} // namespace tiny::aten_ops
