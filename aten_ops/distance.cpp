// Pairwise distances: _cdist_forward (torch.cdist) and _cdist_backward.
//
// x1 (B..., P, M) and x2 (B..., R, M), their batch dims broadcast, give (B..., P, R). The direct form is a
// reduction over M of |x1[p] - x2[r]| in a (B, P, R, M) space: p = 0 counts the nonzero differences, 1 sums
// them, 2 is the root of the sum of squares, inf the largest, any other p the p-th root of the sum of p-th
// powers (p a runtime argument, so a new p compiles nothing). For p = 2 with more than 25 rows on a side (or
// compute_mode 1) torch uses matrix products (|a|^2 - 2 a.b + |b|^2, clamped and rooted); that is
// _euclidean_dist's composite, whose ops are tiny's own, so the same rounding as the CPU follows.
// The backward is torch's per-pair formula for each p, summed over R; like the CPU's it has the broadcast
// batch shape (autograd sums it down to x1's).

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

struct Pairs {
  std::vector<int64_t> batch; // the broadcast batch dims
  int64_t B, P, R, M;
};

Pairs check_and_shape(const at::Tensor& x1, const at::Tensor& x2) {
  TORCH_CHECK(at::isFloatingType(x1.scalar_type()),
              "cdist only supports floating-point dtypes, X1 got: ", x1.scalar_type());
  TORCH_CHECK(at::isFloatingType(x2.scalar_type()),
              "cdist only supports floating-point dtypes, X2 got: ", x2.scalar_type());
  TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. X1: ", x1.size(-1),
              " X2: ", x2.size(-1));
  TORCH_CHECK(x1.scalar_type() == x2.scalar_type(), "expected scalar type ", x1.scalar_type(), " but found ",
              x2.scalar_type());
  check_same_device({x1, x2});
  Pairs s;
  s.batch = at::infer_size(x1.sizes().slice(0, static_cast<size_t>(x1.dim() - 2)),
                           x2.sizes().slice(0, static_cast<size_t>(x2.dim() - 2)));
  s.B = c10::multiply_integers(s.batch);
  s.P = x1.size(-2);
  s.R = x2.size(-2);
  s.M = x1.size(-1);
  return s;
}

// x (batch..., rows, M) broadcast to the batch and seen as (B, rows, M).
UOpPtr batched(const at::Tensor& x, const Pairs& s, int64_t rows, DType ct) {
  std::vector<int64_t> full = s.batch;
  full.insert(full.end(), {rows, s.M});
  return reshape(cast(read(x.expand(full)), ct), {s.B, rows, s.M});
}

std::vector<int64_t> with_rows(const Pairs& s, int64_t a, int64_t b) {
  std::vector<int64_t> r = s.batch;
  r.insert(r.end(), {a, b});
  return r;
}

at::Tensor cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p, std::optional<int64_t> compute_mode) {
  Pairs s = check_and_shape(x1, x2);
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  int64_t mode = compute_mode.value_or(0);
  TORCH_CHECK(mode >= 0 && mode <= 2, "possible modes: 0, 1, 2, but was: ", mode);
  at::Tensor out = empty_tiny(with_rows(s, s.P, s.R), x1.scalar_type(), x1.device());
  if (out.numel() == 0) return out;
  DType dt = to_tiny_dtype(x1.scalar_type()), ct = opmath(dt);
  if (s.M == 0) {
    write(out, fixed(dt, 0, to_shape(out.sizes())));
    return out;
  }
  if (p == 2 && (mode == 1 || (mode == 0 && (s.P > 25 || s.R > 25)))) {
    at::Tensor a = x1.expand(with_rows(s, s.P, s.M)), b = x2.expand(with_rows(s, s.R, s.M));
    return out.copy_(at::_euclidean_dist(a, b));
  }
  Shape space{s.B, s.P, s.R, s.M};
  UOpPtr a = expand(reshape(batched(x1, s, s.P, ct), {s.B, s.P, 1, s.M}), space);
  UOpPtr b = expand(reshape(batched(x2, s, s.R, ct), {s.B, 1, s.R, s.M}), space);
  UOpPtr diff = alu(Ops::ABS, sub(a, b)), d;
  if (p == 0) {
    d = reduce(cast(alu(Ops::CMPNE, diff, fixed(ct, 0, space)), ct), Ops::ADD, {3});
  } else if (p == 1) {
    d = reduce(diff, Ops::ADD, {3});
  } else if (p == 2) {
    d = alu(Ops::SQRT, reduce(mul(diff, diff), Ops::ADD, {3}));
  } else if (std::isinf(p)) {
    d = reduce(diff, Ops::MAX, {3});
  } else {
    Shape kept{s.B, s.P, s.R, 1};
    UOpPtr sum = reduce(alu(Ops::POW, diff, scalar_constant(p, ct, space)), Ops::ADD, {3});
    d = alu(Ops::POW, sum, scalar_constant(1.0 / p, ct, kept));
  }
  write(out, reshape(cast(d, dt), to_shape(out.sizes())));
  return out;
}

UOpPtr sign(const UOpPtr& x) {
  UOpPtr zero = like(x, 0);
  return sub(cast(lt(zero, x), x->dtype), cast(lt(x, zero), x->dtype));
}

at::Tensor cdist_backward(const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2, double p,
                          const at::Tensor& cdist) {
  Pairs s = check_and_shape(x1, x2);
  at::Tensor grad_x1 = empty_tiny(with_rows(s, s.P, s.M), x1.scalar_type(), x1.device());
  if (grad_x1.numel() == 0) return grad_x1;
  DType dt = to_tiny_dtype(x1.scalar_type()), ct = opmath(dt);
  Shape space{s.B, s.P, s.R, s.M}, out_shape = to_shape(grad_x1.sizes());
  if (p == 0 || s.R == 0) {
    write(grad_x1, fixed(dt, 0, out_shape));
    return grad_x1;
  }
  UOpPtr a = expand(reshape(batched(x1, s, s.P, ct), {s.B, s.P, 1, s.M}), space);
  UOpPtr b = expand(reshape(batched(x2, s, s.R, ct), {s.B, 1, s.R, s.M}), space);
  auto pairwise = [&](const at::Tensor& t) {
    return expand(reshape(cast(read(t.expand(with_rows(s, s.P, s.R))), ct), {s.B, s.P, s.R, 1}), space);
  };
  UOpPtr g = pairwise(grad), dist = pairwise(cdist);
  UOpPtr diff = sub(a, b), zero = fixed(ct, 0, space), absdiff = alu(Ops::ABS, diff);
  UOpPtr at_zero = alu(Ops::CMPEQ, dist, zero), term;
  if (p == 1) {
    term = mul(sign(diff), g);
  } else if (p == 2) {
    term = where(at_zero, zero, div(mul(diff, g), dist));
  } else if (std::isinf(p)) {
    term = mul(mul(sign(diff), cast(alu(Ops::CMPEQ, absdiff, dist), ct)), g);
  } else if (p < 2) {
    UOpPtr pm1 = scalar_constant(p - 1, ct, space);
    UOpPtr v = div(mul(mul(sign(diff), alu(Ops::POW, absdiff, pm1)), g), alu(Ops::POW, dist, pm1));
    UOpPtr skip = at_zero;
    if (p < 1) skip = alu(Ops::OR, skip, alu(Ops::CMPEQ, diff, zero));
    term = where(skip, zero, v);
  } else {
    UOpPtr v = mul(mul(diff, alu(Ops::POW, absdiff, scalar_constant(p - 2, ct, space))), g);
    term = where(at_zero, zero, div(v, alu(Ops::POW, dist, scalar_constant(p - 1, ct, space))));
  }
  write(grad_x1, reshape(cast(reduce(term, Ops::ADD, {2}), dt), out_shape));
  return grad_x1;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_cdist_forward", TORCH_FN(cdist_forward));
  m.impl("_cdist_backward", TORCH_FN(cdist_backward));
}

} // namespace tiny::aten_ops
