// Pairwise distances: _cdist_forward (torch.cdist) and _cdist_backward; _pdist_forward (F.pdist) and
// _pdist_backward, the distances between the rows of one matrix, from the same formulas.
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

// The p-norm distance over the last axis of |a - b| (kept as size 1): p = 0 counts the nonzero differences,
// inf takes the largest, any other p is the p-th root of the sum of p-th powers (1 and 2 without powers).
UOpPtr distance(const UOpPtr& absdiff, double p, DType ct) {
  const Shape& space = absdiff->shape;
  const int64_t axis = static_cast<int64_t>(space.size()) - 1;
  if (p == 0) return reduce(cast(alu(Ops::CMPNE, absdiff, fixed(ct, 0, space)), ct), Ops::ADD, {axis});
  if (p == 1) return reduce(absdiff, Ops::ADD, {axis});
  if (p == 2) return alu(Ops::SQRT, reduce(mul(absdiff, absdiff), Ops::ADD, {axis}));
  if (std::isinf(p)) return reduce(absdiff, Ops::MAX, {axis});
  UOpPtr sum = reduce(alu(Ops::POW, absdiff, scalar_constant(p, ct, space)), Ops::ADD, {axis});
  return alu(Ops::POW, sum, scalar_constant(1.0 / p, ct, sum->shape));
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
  UOpPtr d = distance(alu(Ops::ABS, sub(a, b)), p, ct);
  write(out, reshape(cast(d, dt), to_shape(out.sizes())));
  return out;
}

UOpPtr sign(const UOpPtr& x) {
  UOpPtr zero = like(x, 0);
  return sub(cast(lt(zero, x), x->dtype), cast(lt(x, zero), x->dtype));
}

// torch's gradient of one pair's distance with respect to the first point, per coordinate: diff = a - b, g the
// pair's upstream gradient, dist its distance (p = 0 has none).
UOpPtr gradient_term(const UOpPtr& diff, const UOpPtr& g, const UOpPtr& dist, double p) {
  const Shape& space = diff->shape;
  DType ct = diff->dtype;
  UOpPtr zero = fixed(ct, 0, space), absdiff = alu(Ops::ABS, diff);
  UOpPtr at_zero = alu(Ops::CMPEQ, dist, zero);
  if (p == 1) return mul(sign(diff), g);
  if (p == 2) return where(at_zero, zero, div(mul(diff, g), dist));
  if (std::isinf(p)) return mul(mul(sign(diff), cast(alu(Ops::CMPEQ, absdiff, dist), ct)), g);
  if (p < 2) {
    UOpPtr pm1 = scalar_constant(p - 1, ct, space);
    UOpPtr v = div(mul(mul(sign(diff), alu(Ops::POW, absdiff, pm1)), g), alu(Ops::POW, dist, pm1));
    UOpPtr skip = at_zero;
    if (p < 1) skip = alu(Ops::OR, skip, alu(Ops::CMPEQ, diff, zero));
    return where(skip, zero, v);
  }
  UOpPtr v = mul(mul(diff, alu(Ops::POW, absdiff, scalar_constant(p - 2, ct, space))), g);
  return where(at_zero, zero, div(v, alu(Ops::POW, dist, scalar_constant(p - 1, ct, space))));
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
  UOpPtr term = gradient_term(sub(a, b), g, dist, p);
  write(grad_x1, reshape(cast(reduce(term, Ops::ADD, {2}), dt), out_shape));
  return grad_x1;
}

// ---- pdist: the distances between the rows of one (N, M) matrix, pairs i < j in row-major order ----

// pdist's list of pairs as cells of the N x N pair matrix (i * N + j, i < j, in order), and the inverse: each
// cell's position in the list, either order of the pair, -1 (out of range: a gather reads 0) on the diagonal.
// Both depend on N only, so they are built on the host.
at::Tensor pair_cells(int64_t n, c10::Device device) {
  at::Tensor cells = at::empty({n * (n - 1) / 2}, at::kLong);
  auto c = cells.accessor<int64_t, 1>();
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++)
      c[k++] = i * n + j;
  return cells.to(device);
}

at::Tensor pair_positions(int64_t n, c10::Device device) {
  at::Tensor pos = at::full({n, n}, -1, at::kLong);
  auto p = pos.accessor<int64_t, 2>();
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) {
      p[i][j] = k;
      p[j][i] = k;
      k++;
    }
  return pos.to(device);
}

void check_pdist(const at::Tensor& self, const char* what) {
  TORCH_CHECK(self.is_contiguous(), what);
  TORCH_CHECK(self.dim() == 2, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "pdist only supports floating-point dtypes");
}

// Every pair's distance in an (N, N, M) space; the list keeps the cells above the diagonal.
at::Tensor pdist_forward(const at::Tensor& self, double p) {
  check_pdist(self, "_pdist_forward requires contiguous input");
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
  const int64_t n = self.size(0), m = self.size(1);
  at::Tensor out = empty_tiny({n > 1 ? n * (n - 1) / 2 : 0}, self.scalar_type(), self.device());
  if (out.numel() == 0) return out;
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  if (m == 0) {
    write(out, fixed(dt, 0, {out.numel()}));
    return out;
  }
  Shape space{n, n, m};
  UOpPtr x = cast(read(self), ct);
  UOpPtr a = expand(reshape(x, {n, 1, m}), space), b = expand(reshape(x, {1, n, m}), space);
  UOpPtr all = reshape(distance(alu(Ops::ABS, sub(a, b)), p, ct), {n * n});
  write(out, cast(gather(all, read(pair_cells(n, self.device()))), dt));
  return out;
}

// The gradient of the first point of each pair, summed over both orders of every pair: pdist's gradient is
// odd in the difference, so row i gets sum over j != i of the cdist term of (x_i - x_j).
at::Tensor pdist_backward(const at::Tensor& grad, const at::Tensor& self, double p, const at::Tensor& pdist) {
  check_pdist(self, "_pdist_backward requires self to be contiguous");
  TORCH_CHECK(pdist.is_contiguous(), "_pdist_backward requires pdist to be contiguous");
  check_same_device({grad, self, pdist});
  at::Tensor result = empty_tiny(self.sizes(), self.scalar_type(), self.device());
  const int64_t n = self.size(0), m = self.size(1);
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  if (p == 0 || grad.numel() == 0 || n <= 1 || m == 0) {
    write(result, fixed(dt, 0, to_shape(self.sizes())));
    return result;
  }
  Shape space{n, n, m};
  UOpPtr x = cast(read(self), ct);
  UOpPtr a = expand(reshape(x, {n, 1, m}), space), b = expand(reshape(x, {1, n, m}), space);
  UOpPtr positions = read(pair_positions(n, self.device()));
  auto per_pair = [&](const at::Tensor& t) {
    return expand(reshape(cast(gather(reshape(read(t), {t.numel()}), positions), ct), {n, n, 1}), space);
  };
  UOpPtr term = gradient_term(sub(a, b), per_pair(grad), per_pair(pdist), p);
  write(result, reshape(cast(reduce(term, Ops::ADD, {1}), dt), {n, m}));
  return result;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_cdist_forward", TORCH_FN(cdist_forward));
  m.impl("_cdist_backward", TORCH_FN(cdist_backward));
  m.impl("_pdist_forward", TORCH_FN(pdist_forward));
  m.impl("_pdist_backward", TORCH_FN(pdist_backward));
}

} // namespace tiny::aten_ops
