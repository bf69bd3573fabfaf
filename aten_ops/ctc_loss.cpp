// CTC loss (Graves et al., 2006): _ctc_loss and _ctc_loss_backward, lengths as lists or as tensors, computed as
// torch's CPU kernels compute them (LossCTC.cpp), in log space.
//
// A sample's target of length l extends to 2l + 1 positions, a blank before, between and after its labels.
// The forward walks time: log alpha at step t and position s is the log-sum-exp of step t - 1's s, s - 1 and,
// where the label differs from the one two positions back, s - 2, plus log_probs at that position's class.
// Every sample steps at once, as a (batch, 2L + 1) value per time step, each into a buffer of its own (it reads
// three neighbours of the previous step); past a sample's input length its alpha stays as it was, so the last
// step holds every sample's final alpha. log_alpha (batch, T, 2L + 1) is written for the backward, which walks
// beta backwards the same way and, per step, sums alpha * beta over the positions of each class (a log-sum-exp
// per class) into torch's gradient formula. The lengths are host values: tensor lengths are read to the host
// (a sync of those tensors only), as torch's own kernels read them.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/sliding_window.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny {
namespace {

using aten_ops::add;
using aten_ops::both;
using aten_ops::eq;
using aten_ops::exp;
using aten_ops::fixed;
using aten_ops::log;
using aten_ops::lt;
using aten_ops::mul;
using aten_ops::sub;
using window::expanded;
using window::reshaped;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::vector<int64_t> host_lengths(const at::Tensor& t) {
  at::Tensor h = t.to(at::kCPU, at::kLong).contiguous();
  return {h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + h.numel()};
}

// What both directions share: the extended targets and log_probs at their classes.
struct Ctc {
  int64_t T, N, C, L, S; // S = 2L + 1
  DType dt;
  UOpPtr s;         // (N, S): the position
  UOpPtr il, tl;    // (N, S): the sample's input and target length
  UOpPtr prime;     // (N, S) int64: the class at each position (blank at even ones and past the target)
  UOpPtr skip;      // (N, S) bool: position s may follow s - 2 (its label differs from the one two back)
  UOpPtr lp;        // (T, N, S): log_probs at the positions' classes
  UOpPtr log_probs; // (T, N, C) in dt

  Shape ns() const { return {N, S}; }
  UOpPtr neg() const { return fixed(dt, kNegInf, ns()); }
  UOpPtr zero() const { return fixed(dt, 0, ns()); }
  UOpPtr ints(int64_t v) const { return fixed(DType::Int64, static_cast<double>(v), ns()); }
  UOpPtr at_step(const UOpPtr& x, int64_t t) const { // (T, N, S) -> (N, S)
    return reshaped(window::shrunk(x, {{t, t + 1}, {0, N}, {0, x->shape[2]}}), {N, x->shape[2]});
  }
  // x's value k positions before (k > 0) or after (k < 0), -inf where that is outside 0..S-1
  UOpPtr shifted(const UOpPtr& x, int64_t k) const {
    UOpPtr moved = k > 0 ? window::padded(window::shrunk(x, {{0, N}, {0, S - k}}), {{0, 0}, {k, 0}})
                         : window::padded(window::shrunk(x, {{0, N}, {-k, S}}), {{0, 0}, {0, -k}});
    UOpPtr inside = k > 0 ? alu(Ops::CMPLE, ints(k), s) : lt(s, ints(S + k));
    return where(inside, moved, neg());
  }
  // torch's log-sum-exp of up to three terms: the largest by `>` (not NaN-propagating), 0 when all are -inf
  UOpPtr log_add(const UOpPtr& a, const UOpPtr& b, const UOpPtr& c) const {
    UOpPtr m = a;
    m = where(alu(Ops::CMPLT, m, b), b, m);
    m = where(alu(Ops::CMPLT, m, c), c, m);
    m = where(eq(m, neg()), zero(), m);
    return add(log(add(add(exp(sub(a, m)), exp(sub(b, m))), exp(sub(c, m)))), m);
  }
};

UOpPtr per_sample(const std::vector<int64_t>& v, c10::Device device, int64_t S) {
  UOpPtr col = read(at::tensor(v, at::kLong).to(device));
  return expanded(reshaped(col, {static_cast<int64_t>(v.size()), 1}), {static_cast<int64_t>(v.size()), S});
}

Ctc prepare(const at::Tensor& log_probs, const at::Tensor& targets, const std::vector<int64_t>& input_lengths,
            const std::vector<int64_t>& target_lengths, int64_t blank) {
  TORCH_CHECK(targets.scalar_type() == at::kLong || targets.scalar_type() == at::kInt,
              "Expected tensor for argument #2 'targets' to have one of the following scalar types: Long, Int; but "
              "got ",
              targets.scalar_type(), " instead (while checking arguments for ctc_loss_cpu)");
  TORCH_CHECK(log_probs.dim() == 3, "Expected 3-dimensional tensor, but got ", log_probs.dim(),
              "-dimensional tensor for argument #1 'log_probs' (while checking arguments for ctc_loss_cpu)");
  TORCH_CHECK(targets.dim() == 1 || targets.dim() == 2, "Expected 1 to 2 dimensions, but got ", targets.dim(),
              "-dimensional tensor for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(log_probs.scalar_type()) && log_probs.scalar_type() != at::kHalf &&
                                  log_probs.scalar_type() != at::kBFloat16,
                              "\"ctc_loss_cpu\" not implemented for '", log_probs.scalar_type(), "'");
  Ctc c{};
  c.T = log_probs.size(0);
  c.N = log_probs.size(1);
  c.C = log_probs.size(2);
  TORCH_CHECK(0 <= blank && blank < c.C, "blank must be in label range");
  TORCH_CHECK(static_cast<int64_t>(input_lengths.size()) == c.N, "input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(target_lengths.size()) == c.N, "target_lengths must be of size batch_size");
  std::vector<int64_t> base(static_cast<size_t>(c.N));
  int64_t pos = 0;
  for (int64_t b = 0; b < c.N; b++) {
    int64_t l = target_lengths[static_cast<size_t>(b)];
    TORCH_CHECK(l >= 0, "Expected target_lengths to have value at least 0, but got value ", l,
                " (while checking arguments for ctc_loss_cpu)");
    base[static_cast<size_t>(b)] = targets.dim() == 1 ? pos : b * targets.size(1);
    pos += l;
    c.L = std::max(c.L, l);
  }
  if (targets.dim() == 1) {
    TORCH_CHECK(targets.size(0) == pos, "Expected tensor to have size ", pos, " at dimension 0, but got size ",
                targets.size(0), " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
  } else {
    TORCH_CHECK(targets.size(0) == c.N, "Expected tensor to have size ", c.N, " at dimension 0, but got size ",
                targets.size(0), " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
    TORCH_CHECK(targets.size(1) >= c.L, "Expected tensor to have size at least ", c.L, " at dimension 1, but got size ",
                targets.size(1), " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)");
  }
  for (int64_t l : input_lengths) {
    TORCH_CHECK(l >= 0, "Expected input_lengths to have value at least 0, but got value ", l,
                " (while checking arguments for ctc_loss_cpu)");
    TORCH_CHECK(l <= c.T, "Expected input_lengths to have value at most ", c.T, ", but got value ", l,
                " (while checking arguments for ctc_loss_cpu)");
  }
  c.S = 2 * c.L + 1;
  c.dt = to_tiny_dtype(log_probs.scalar_type());
  c10::Device device = log_probs.device();
  c.s = expanded(reshaped(iota(c.S, DType::Int64), {1, c.S}), c.ns());
  c.il = per_sample(input_lengths, device, c.S);
  c.tl = per_sample(target_lengths, device, c.S);
  // label s / 2 of the sample's target, for odd s inside it
  UOpPtr label = alu(Ops::IDIV, c.s, c.ints(2));
  UOpPtr is_label = both(eq(alu(Ops::MOD, c.s, c.ints(2)), c.ints(1)), lt(label, c.tl));
  UOpPtr at = where(is_label, add(per_sample(base, device, c.S), label), c.ints(0));
  UOpPtr flat = targets.numel() > 0 ? cast(reshaped(read(targets.to(device)), {targets.numel()}), DType::Int64)
                                    : fixed(DType::Int64, 0, {1});
  c.prime = contiguous(where(is_label, gather(flat, at), c.ints(blank)));
  UOpPtr two_back = window::padded(window::shrunk(c.prime, {{0, c.N}, {0, std::max<int64_t>(c.S - 2, 0)}}),
                                   {{0, 0}, {std::min<int64_t>(2, c.S), 0}});
  c.skip = contiguous(both(alu(Ops::CMPLE, c.ints(2), c.s), alu(Ops::CMPNE, c.prime, two_back)));
  c.log_probs = cast(read(log_probs), c.dt);
  Shape tns{c.T, c.N, c.S};
  UOpPtr rows = mul(iota(c.T, DType::Int64), fixed(DType::Int64, static_cast<double>(c.N * c.C), {c.T}));
  UOpPtr samples = mul(iota(c.N, DType::Int64), fixed(DType::Int64, static_cast<double>(c.C), {c.N}));
  UOpPtr index = add(expanded(reshaped(rows, {c.T, 1, 1}), tns), expanded(reshaped(samples, {1, c.N, 1}), tns));
  index = add(index, expanded(reshaped(c.prime, {1, c.N, c.S}), tns));
  c.lp = contiguous(gather(reshaped(c.log_probs, {c.T * c.N * c.C}), index));
  return c;
}

std::tuple<at::Tensor, at::Tensor> ctc_forward(const at::Tensor& log_probs, const at::Tensor& targets,
                                               const std::vector<int64_t>& input_lengths,
                                               const std::vector<int64_t>& target_lengths, int64_t blank) {
  check_same_device({log_probs, targets});
  Ctc c = prepare(log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor nll = empty_tiny({c.N}, log_probs.scalar_type(), log_probs.device());
  at::Tensor log_alpha = empty_tiny({c.N, c.T, c.S}, log_probs.scalar_type(), log_probs.device());
  if (c.T == 0 || c.N == 0) {
    if (c.N > 0) write(nll, fixed(c.dt, 0, {c.N}));
    return {nll, log_alpha};
  }
  // step 0: a blank, or the first label
  UOpPtr alpha = contiguous(where(alu(Ops::OR, eq(c.s, c.ints(0)), both(eq(c.s, c.ints(1)), lt(c.ints(0), c.tl))),
                                  c.at_step(c.lp, 0), c.neg()));
  write(log_alpha.select(1, 0), alpha);
  for (int64_t t = 1; t < c.T; t++) {
    UOpPtr next =
        add(c.log_add(alpha, c.shifted(alpha, 1), where(c.skip, c.shifted(alpha, 2), c.neg())), c.at_step(c.lp, t));
    alpha = contiguous(where(lt(c.ints(t), c.il), next, alpha));
    write(log_alpha.select(1, t), alpha);
  }
  // the likelihood: the last blank and the last label at the sample's last step (the blank alone for an empty
  // target), their log-sum-exp as torch's (max by `<`, 0 when both are -inf)
  auto pick = [&](const UOpPtr& where_s) {
    return reshaped(reduce(where(where_s, alpha, c.neg()), Ops::MAX, {1}), {c.N});
  };
  UOpPtr last = mul(c.tl, c.ints(2));
  UOpPtr l1 = pick(eq(c.s, last)), l2 = pick(eq(c.s, sub(last, c.ints(1))));
  UOpPtr m = where(lt(l1, l2), l2, l1), ninf = fixed(c.dt, kNegInf, {c.N});
  m = where(eq(m, ninf), fixed(c.dt, 0, {c.N}), m);
  UOpPtr two = add(log(add(exp(sub(l1, m)), exp(sub(l2, m)))), m);
  UOpPtr empty_target = eq(reshaped(window::shrunk(c.tl, {{0, c.N}, {0, 1}}), {c.N}), fixed(DType::Int64, 0, {c.N}));
  write(nll, alu(Ops::NEG, where(empty_target, l1, two)));
  return {nll, log_alpha};
}

at::Tensor ctc_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                        const std::vector<int64_t>& input_lengths, const std::vector<int64_t>& target_lengths,
                        const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                        bool zero_infinity) {
  check_same_device({grad, log_probs, targets, neg_log_likelihood, log_alpha});
  Ctc c = prepare(log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor result = empty_tiny(log_probs.sizes(), log_probs.scalar_type(), log_probs.device());
  if (result.numel() == 0) return result;
  Shape nc{c.N, c.C}, ncs{c.N, c.C, c.S};
  auto column = [&](const at::Tensor& t) { // (N,) -> (N, C)
    return expanded(reshaped(cast(read(t), c.dt), {c.N, 1}), nc);
  };
  UOpPtr nll = column(neg_log_likelihood), g = column(grad);
  UOpPtr il_nc = expanded(reshaped(window::shrunk(c.il, {{0, c.N}, {0, 1}}), {c.N, 1}), nc);
  UOpPtr la = window::permuted(cast(read(log_alpha), c.dt), {1, 0, 2}); // (T, N, S)
  UOpPtr last = mul(c.tl, c.ints(2)), before_last = sub(last, c.ints(1));
  UOpPtr ends = alu(Ops::OR, eq(c.s, last), both(eq(c.s, before_last), lt(c.ints(0), c.tl)));
  // position s may come from s + 2 at the next step: s + 2 is inside the target and its label differs from s's
  UOpPtr skip_ahead = both(lt(c.s, before_last), eq(c.shifted(where(c.skip, c.zero(), c.neg()), -2), c.zero()));
  UOpPtr classes = expanded(reshaped(iota(c.C, DType::Int64), {1, c.C, 1}), ncs);
  UOpPtr of_class = eq(expanded(reshaped(c.prime, {c.N, 1, c.S}), ncs), classes);
  UOpPtr beta;
  for (int64_t t = c.T; t-- > 0;) {
    UOpPtr lp = c.at_step(c.lp, t), tt = c.ints(t);
    UOpPtr init = where(ends, lp, c.neg());
    UOpPtr next = init;
    if (beta) {
      UOpPtr b2 = where(lt(c.s, last), c.shifted(beta, -1), c.neg());
      next = add(c.log_add(beta, b2, where(skip_ahead, c.shifted(beta, -2), c.neg())), lp);
    }
    UOpPtr at_last = eq(tt, sub(c.il, c.ints(1))), before = lt(tt, sub(c.il, c.ints(1)));
    beta = contiguous(where(at_last, init, where(before, next, c.neg())));
    // alpha * beta of the positions inside the target, per class: a log-sum-exp over the class's positions
    UOpPtr ab = where(both(alu(Ops::CMPLE, c.s, last), lt(tt, c.il)), add(c.at_step(la, t), beta), c.neg());
    UOpPtr x = where(of_class, expanded(reshaped(ab, {c.N, 1, c.S}), ncs), fixed(c.dt, kNegInf, ncs));
    UOpPtr m = reshaped(reduce(x, Ops::MAX, {2}), nc);
    m = where(eq(m, fixed(c.dt, kNegInf, nc)), fixed(c.dt, 0, nc), m);
    UOpPtr sum = reshaped(reduce(exp(sub(x, expanded(reshaped(m, {c.N, c.C, 1}), ncs))), Ops::ADD, {2}), nc);
    UOpPtr lcab = add(log(sum), m);
    UOpPtr lpc = reshaped(window::shrunk(c.log_probs, {{t, t + 1}, {0, c.N}, {0, c.C}}), nc);
    UOpPtr v = mul(sub(exp(lpc), exp(sub(add(lcab, nll), lpc))), g);
    UOpPtr keep = lt(fixed(DType::Int64, static_cast<double>(t), nc), il_nc);
    if (zero_infinity)
      keep = both(keep, alu(Ops::CMPNE, nll, fixed(c.dt, std::numeric_limits<double>::infinity(), nc)));
    write(result.select(0, t), cast(where(keep, v, fixed(c.dt, 0, nc)), c.dt));
  }
  return result;
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_lists(const at::Tensor& log_probs, const at::Tensor& targets,
                                                  c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                                                  int64_t blank, bool /*zero_infinity*/) {
  return ctc_forward(log_probs, targets, input_lengths.vec(), target_lengths.vec(), blank);
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensors(const at::Tensor& log_probs, const at::Tensor& targets,
                                                    const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                                    int64_t blank, bool /*zero_infinity*/) {
  return ctc_forward(log_probs, targets, host_lengths(input_lengths), host_lengths(target_lengths), blank);
}

at::Tensor ctc_backward_lists(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                              c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                              const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                              bool zero_infinity) {
  return ctc_backward(grad, log_probs, targets, input_lengths.vec(), target_lengths.vec(), neg_log_likelihood,
                      log_alpha, blank, zero_infinity);
}

at::Tensor ctc_backward_tensors(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                                bool zero_infinity) {
  return ctc_backward(grad, log_probs, targets, host_lengths(input_lengths), host_lengths(target_lengths),
                      neg_log_likelihood, log_alpha, blank, zero_infinity);
}

} // namespace
} // namespace tiny

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_ctc_loss", TORCH_FN(tiny::ctc_loss_lists));
  m.impl("_ctc_loss.Tensor", TORCH_FN(tiny::ctc_loss_tensors));
  m.impl("_ctc_loss_backward", TORCH_FN(tiny::ctc_backward_lists));
  m.impl("_ctc_loss_backward.Tensor", TORCH_FN(tiny::ctc_backward_tensors));
}
