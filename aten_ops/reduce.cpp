// Reductions: sum, mean, prod, amax/amin, all/any, max/min (values and indices), argmax/argmin,
// aminmax, var/std and var_mean/std_mean, norm/linalg_vector_norm, cumsum/cumprod, and softmax /
// log_softmax with their backward ops. Each is a UOp expression over tiny::reduce (ADD, MUL, MAX,
// MIN over a set of axes), so a reduction fuses with its elementwise inputs and epilogue.
//
// torch's checks come from torch itself where it can give them: a structured op's meta function
// (at::meta::sum, ...) checks the arguments, computes the result's sizes, strides and dtype (int sums
// are int64, all/any of uint8 are uint8, ...), and checks and resizes an out= tensor as the CPU kernel
// does. The ops without a meta function (prod, max, min, var, std, var_mean, std_mean) repeat the
// CPU kernels' checks here. Ops torch builds from these (logsumexp, softmax, log_softmax, var.dim,
// std.dim, norm.Scalar, prod.out, ...) need nothing of ours.
//
// Accumulation follows torch's CPU kernels: float16/bfloat16 in float32, rounded once at the end;
// integer sums and products in the result dtype (int64 unless dtype= says otherwise).

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_log_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_log_softmax_meta_dispatch.h>
#include <ATen/ops/_logcumsumexp_ops.h>
#include <ATen/ops/_softmax_backward_data_meta_dispatch.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amin_meta_dispatch.h>
#include <ATen/ops/aminmax_meta_dispatch.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/argmax_meta_dispatch.h>
#include <ATen/ops/argmin_meta_dispatch.h>
#include <ATen/ops/cumprod_meta_dispatch.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/hash_tensor_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta_dispatch.h>
#include <ATen/ops/max_meta_dispatch.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/min_meta_dispatch.h>
#include <ATen/ops/norm_meta_dispatch.h>
#include <ATen/ops/prod_meta_dispatch.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "aten_ops/complex_math.h"
#include "aten_ops/read_on_host.h"
#include "csrc/fallback.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using Axes = std::vector<int64_t>;
using at::native::DimMask;

// ---- building blocks ----

at::Tensor like_meta(const at::Tensor& meta, const at::Tensor& self) {
  return empty_tiny(meta.sizes(), meta.strides(), meta.scalar_type(), self.device());
}

// A compile-time constant broadcast to `shape` (identities, counts: never a new value per call).
UOpPtr fixed(DType dt, double v, const Shape& shape) {
  UOpPtr c = is_float(dt) ? const_float(dt, v) : const_int(dt, static_cast<int64_t>(v));
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

UOpPtr like(const UOpPtr& x, double v) { return fixed(x->dtype, v, x->shape); }

// A value from Python (a correction, a norm's order) as a runtime scalar: a new value compiles nothing.
UOpPtr runtime_like(const UOpPtr& x, double v) {
  UOpPtr s = var_float(x->dtype, v);
  return x->shape.empty() ? s : expand(reshape(s, Shape(x->shape.size(), 1)), x->shape);
}

// A tensor's value with at least one dim: a 0-dim tensor reduces as shape (1,).
UOpPtr input(const at::Tensor& self) {
  UOpPtr x = read(self);
  return self.dim() == 0 ? reshape(x, {1}) : x;
}

Axes axes_of(const DimMask& mask, const UOpPtr& x) {
  Axes axes;
  for (size_t d = 0; d < x->shape.size(); d++)
    if (mask[d]) axes.push_back(static_cast<int64_t>(d));
  return axes;
}

Axes one_axis(const at::Tensor& self, int64_t dim) {
  return {self.dim() == 0 ? 0 : at::maybe_wrap_dim(dim, self.dim())};
}

int64_t extent(const UOpPtr& x, const Axes& axes) {
  int64_t n = 1;
  for (int64_t a : axes)
    n *= x->shape[a];
  return n;
}

// The value each reduction starts from: what a reduction over no elements gives. (torch raises for
// max/min over no elements of an integer tensor before asking.)
double identity(Ops op, DType dt) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  TORCH_INTERNAL_ASSERT(op == Ops::ADD || op == Ops::MUL || op == Ops::XOR || is_float(dt) || dt == DType::Bool,
                        "tiny: max/min over no elements has no identity");
  switch (op) {
  case Ops::ADD:
  case Ops::XOR:
    return 0;
  case Ops::MUL:
    return 1;
  case Ops::MAX:
    return dt == DType::Bool ? 0 : -inf;
  default:
    return dt == DType::Bool ? 1 : inf;
  }
}

// x reduced over `axes`, keeping them as size-1 dims. A reduction over no elements is its identity.
UOpPtr fold_keep(const UOpPtr& x, Ops op, const Axes& axes) {
  if (extent(x, axes) > 0) return reduce(x, op, axes);
  Shape kept = x->shape;
  for (int64_t a : axes)
    kept[a] = 1;
  return fixed(x->dtype, identity(op, x->dtype), kept);
}

// The same, shaped as the result (keepdim or not, the elements are in the same order).
UOpPtr fold(const UOpPtr& x, Ops op, const Axes& axes, const Shape& shape) {
  return reshape(fold_keep(x, op, axes), shape);
}

UOpPtr back(const UOpPtr& kept, const UOpPtr& x) { return expand(kept, x->shape); }

// An int64 index along `axis`, broadcast to `shape`.
UOpPtr index_along(const Shape& shape, int64_t axis) {
  Shape s(shape.size(), 1);
  s[axis] = shape[axis];
  return expand(reshape(iota(shape[axis], DType::Int64), s), shape);
}

void finish(const at::Tensor& out, const UOpPtr& value) {
  if (out.numel() > 0) write(out, reshape(cast(value, to_tiny_dtype(out.scalar_type())), to_shape(out.sizes())));
}

UOpPtr truth(const UOpPtr& x) { return x->dtype == DType::Bool ? x : alu(Ops::CMPNE, x, like(x, 0)); }

// ---- complex values: (real, imaginary) pairs, the pair's axis last (csrc/tensor_bridge.h) ----

namespace cm = complex_math;

using cm::pairs_of;
using cm::parts_of;

// Pairs of shape `shape` (the pair's axis last) all 1 + 0i.
UOpPtr complex_ones(DType dt, Shape shape) {
  shape.pop_back();
  return join_complex(fixed(dt, 1, shape), fixed(dt, 0, shape));
}

UOpPtr shrink_axis(const UOpPtr& x, int64_t axis, int64_t begin, int64_t end) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t s : x->shape)
    ranges.emplace_back(0, s);
  ranges[axis] = {begin, end};
  return shrink(x, ranges);
}

// Pairs x extended along `axis` by `before` and `after` elements of 1 + 0i.
UOpPtr pad_with_ones(const UOpPtr& x, int64_t axis, int64_t before, int64_t after) {
  std::vector<std::pair<int64_t, int64_t>> pads(x->shape.size(), {0, 0});
  pads[axis] = {before, after};
  UOpPtr padded = pad(x, pads);
  return where(pad(fixed(DType::Bool, 1, x->shape), pads), padded, complex_ones(x->dtype, padded->shape));
}

// The complex product of pairs x along `axis`, kept as a dim of 1: the two halves multiplied until one
// element is left (log2 n steps of elementwise products, which fuse into one kernel).
UOpPtr complex_product_along(UOpPtr x, int64_t axis) {
  int64_t n = x->shape[axis];
  if (n == 0) {
    Shape kept = x->shape;
    kept[axis] = 1;
    return complex_ones(x->dtype, kept);
  }
  while (n > 1) {
    if (n % 2) x = pad_with_ones(x, axis, 0, 1), n++;
    x = pairs_of(cm::mul(parts_of(shrink_axis(x, axis, 0, n / 2)), parts_of(shrink_axis(x, axis, n / 2, n))));
    n /= 2;
  }
  return x;
}

// The running complex product of pairs x along `axis` (Hillis and Steele's scan: after the step of
// shift s each element holds the product of the 2s elements that end at it).
UOpPtr complex_cumprod(UOpPtr x, int64_t axis) {
  int64_t n = x->shape[axis];
  for (int64_t s = 1; s < n; s *= 2)
    x = pairs_of(cm::mul(parts_of(pad_with_ones(shrink_axis(x, axis, 0, n - s), axis, s, 0)), parts_of(x)));
  return x;
}

// complex32: the CPU has no sum, prod or scan kernel for it; NotNativeDtype sends the call to the fallback, which
// raises the CPU's error.
void refuse_complex_half(const at::Tensor& self, const at::Tensor& out) {
  if (self.scalar_type() == at::kComplexHalf || out.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf);
}

// A complex tensor's pairs with at least one dim besides the pair's, in dtype dt's opmath.
UOpPtr complex_input(const at::Tensor& self, DType dt) {
  UOpPtr x = read_complex(self);
  if (self.dim() == 0) x = reshape(x, {1, 2});
  return cast(cast(x, dt), opmath(dt));
}

// ---- sum, mean, prod, amax, amin, all, any, nansum: one table ----

struct Fold {
  Ops op;
  bool accumulate; // in the result dtype's opmath (sum, mean, prod); amax/amin compare as they are
  bool truth;      // all/any fold x != 0
  bool mean;
  bool nan_is_zero = false; // nansum
};

enum Kind { Sum, Mean, Prod, Amax, Amin, All, Any, NanSum };

constexpr Fold kFolds[] = {
    /* Sum  */ {Ops::ADD, true, false, false},
    /* Mean */ {Ops::ADD, true, false, true},
    /* Prod */ {Ops::MUL, true, false, false},
    /* Amax */ {Ops::MAX, false, false, false},
    /* Amin */ {Ops::MIN, false, false, false},
    /* All  */ {Ops::MIN, false, true, false},
    /* Any  */ {Ops::MAX, false, true, false},
    /* NanSum */ {Ops::ADD, true, false, false, true},
};

void write_fold(Kind kind, const at::Tensor& self, const DimMask& mask, const at::Tensor& out) {
  const Fold& f = kFolds[kind];
  if ((out.is_complex() || self.is_complex()) && !f.truth) {
    // sum and mean of complex values fold each part alone, prod multiplies pairs; all and any fold their
    // truth below; other folds of complex values run on the CPU
    if (kind != Sum && kind != Mean && kind != Prod) to_tiny_dtype(self.scalar_type());
    refuse_complex_half(self, out);
    DType dt = element_dtype(out.scalar_type());
    UOpPtr x = complex_input(self, dt);
    Axes axes = axes_of(mask, x);
    if (!axes.empty() && axes.back() == static_cast<int64_t>(x->shape.size()) - 1) axes.pop_back(); // not the pairs
    Shape shape = to_shape(out.sizes());
    shape.push_back(2);
    UOpPtr r;
    if (kind == Prod) {
      r = x;
      for (int64_t a : axes)
        r = complex_product_along(r, a);
      r = reshape(r, shape);
    } else {
      r = fold(x, Ops::ADD, axes, shape);
    }
    if (f.mean) r = alu(Ops::FDIV, r, like(r, static_cast<double>(extent(x, axes))));
    if (out.numel() > 0) write_complex(out, cast(r, dt));
    return;
  }
  DType out_dt = to_tiny_dtype(out.scalar_type());
  // a complex value is true where either part is nonzero
  UOpPtr x = f.truth && self.is_complex()
                 ? cm::nonzero(parts_of(complex_input(self, element_dtype(self.scalar_type()))))
                 : input(self);
  // torch converts the input to the result dtype first (sum(int8) adds int64s; sum(x, dtype=f16)
  // rounds x to float16), then accumulates in that dtype's opmath
  if (f.truth)
    x = truth(x);
  else if (f.accumulate)
    x = cast(cast(x, out_dt), opmath(out_dt));
  if (f.nan_is_zero && is_float(x->dtype)) x = where(alu(Ops::CMPNE, x, x), like(x, 0), x);
  Axes axes = axes_of(mask, x);
  UOpPtr r = fold(x, f.op, axes, to_shape(out.sizes()));
  if (f.mean) r = alu(Ops::FDIV, r, like(r, static_cast<double>(extent(x, axes))));
  finish(out, r);
}

DimMask mask_of(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  return at::native::make_dim_mask(dim, self.dim());
}
DimMask mask_of(const at::Tensor& self, int64_t dim) { return mask_of(self, at::IntArrayRef{dim}); }
DimMask all_dims() { return DimMask().flip(); }

at::Tensor sum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = like_meta(at::meta::sum(self, dim, keepdim, dtype), self);
  write_fold(Sum, self, mask_of(self, dim), out);
  return out;
}

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::meta::sum_outf(self, dim, keepdim, dtype, out);
  write_fold(Sum, self, mask_of(self, dim), out);
  return out;
}

// nansum: sum's result dtype and shape, NaNs counted as 0.
at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
  at::Tensor out = like_meta(at::meta::sum(self, dim, keepdim, dtype), self);
  write_fold(NanSum, self, mask_of(self, dim), out);
  return out;
}

at::Tensor& nansum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::meta::sum_outf(self, dim, keepdim, dtype, out);
  write_fold(NanSum, self, mask_of(self, dim), out);
  return out;
}

// trace: the diagonal's sum (integers give int64, as sum); the CPU kernel takes no bool.
at::Tensor trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"trace\" not implemented for 'Bool'");
  return at::sum(self.diagonal());
}

// equal: same sizes and every element equal (compared in the promoted dtype; NaN is unequal). A sync.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ", self.device(),
              " and ", other.device());
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

at::Tensor mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype) {
  at::Tensor out = like_meta(at::meta::mean(self, dim, keepdim, dtype), self);
  write_fold(Mean, self, mask_of(self, dim), out);
  return out;
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::meta::mean_outf(self, dim, keepdim, dtype, out);
  write_fold(Mean, self, mask_of(self, dim), out);
  return out;
}

at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  at::Tensor out = like_meta(at::meta::prod(self, dim, keepdim, dtype), self);
  write_fold(Prod, self, mask_of(self, dim), out);
  return out;
}

at::Tensor& prod_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype,
                         at::Tensor& out) {
  at::meta::prod_outf(self, dim, keepdim, dtype, out);
  write_fold(Prod, self, mask_of(self, dim), out);
  return out;
}

// prod over every element has no meta function: torch's rule for its dtype.
at::Tensor prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  at::ScalarType dt = at::native::get_dtype_from_self(self, dtype, /*promote_integers=*/true);
  at::Tensor out = empty_tiny({}, dt, self.device());
  write_fold(Prod, self, all_dims(), out);
  return out;
}

template <Kind K> at::Tensor extreme(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  at::Tensor out = like_meta(K == Amax ? at::meta::amax(self, dim, keepdim) : at::meta::amin(self, dim, keepdim), self);
  write_fold(K, self, mask_of(self, dim), out);
  return out;
}

template <Kind K> at::Tensor& extreme_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  if (K == Amax)
    at::meta::amax_outf(self, dim, keepdim, out);
  else
    at::meta::amin_outf(self, dim, keepdim, out);
  write_fold(K, self, mask_of(self, dim), out);
  return out;
}

// all/any in their three forms (every element, one dim, a list of dims), functional and out=.
template <Kind K> at::Tensor truth_all(const at::Tensor& self) {
  at::Tensor out = like_meta(K == All ? at::meta::all(self) : at::meta::any(self), self);
  write_fold(K, self, all_dims(), out);
  return out;
}

template <Kind K> at::Tensor& truth_all_out(const at::Tensor& self, at::Tensor& out) {
  if (K == All)
    at::meta::all_outf(self, out);
  else
    at::meta::any_outf(self, out);
  write_fold(K, self, all_dims(), out);
  return out;
}

template <Kind K> at::Tensor truth_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  at::Tensor out = like_meta(K == All ? at::meta::all(self, dim, keepdim) : at::meta::any(self, dim, keepdim), self);
  write_fold(K, self, mask_of(self, dim), out);
  return out;
}

template <Kind K> at::Tensor& truth_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {
  if (K == All)
    at::meta::all_outf(self, dim, keepdim, out);
  else
    at::meta::any_outf(self, dim, keepdim, out);
  write_fold(K, self, mask_of(self, dim), out);
  return out;
}

// torch: all/any over an empty list of dims reduce nothing (sum over one reduces everything)
DimMask dims_mask(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  return at::native::make_dim_mask(dim, self.dim(), /*allow_empty_dims=*/true);
}

template <Kind K> at::Tensor truth_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  at::Tensor out = like_meta(K == All ? at::meta::all(self, dim, keepdim) : at::meta::any(self, dim, keepdim), self);
  write_fold(K, self, dims_mask(self, dim), out);
  return out;
}

template <Kind K>
at::Tensor& truth_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out) {
  if (K == All)
    at::meta::all_outf(self, dim, keepdim, out);
  else
    at::meta::any_outf(self, dim, keepdim, out);
  write_fold(K, self, dims_mask(self, dim), out);
  return out;
}

// ---- max/min over everything (no meta function: the CPU kernels' checks) ----

template <Kind K> void check_full_extreme(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, K == Amax ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the "
              "'dim' argument.");
}

template <Kind K> at::Tensor full_extreme(const at::Tensor& self) {
  check_full_extreme<K>(self);
  at::Tensor out = empty_tiny({}, self.scalar_type(), self.device());
  write_fold(K, self, all_dims(), out);
  return out;
}

template <Kind K> at::Tensor& full_extreme_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(self.device() == out.device());
  TORCH_CHECK(at::canCast(self.scalar_type(), out.scalar_type()));
  check_full_extreme<K>(self);
  at::native::resize_output(out, {});
  UOpPtr x = input(self);
  finish(out, fold(x, kFolds[K].op, axes_of(all_dims(), x), {}));
  return out;
}

// ---- indices of extremes: max.dim, min.dim, argmax, argmin ----

// The first index along `axis` where x equals its extreme m (kept dims): torch's first occurrence.
// A NaN counts as a hit, so with max/min propagating NaN the first NaN's index wins, as in torch.
UOpPtr first_index(const UOpPtr& x, const UOpPtr& m, int64_t axis) {
  UOpPtr hit = alu(Ops::CMPEQ, x, back(m, x));
  if (is_float(x->dtype)) hit = alu(Ops::OR, hit, alu(Ops::CMPNE, x, x));
  UOpPtr idx = index_along(x->shape, axis);
  return reduce(where(hit, idx, like(idx, static_cast<double>(x->shape[axis]))), Ops::MIN, {axis});
}

template <Kind K>
void write_extreme_and_index(const at::Tensor& self, const Axes& axes, const at::Tensor& values,
                             const at::Tensor& indices) {
  UOpPtr x = input(self);
  UOpPtr m = fold_keep(x, kFolds[K].op, axes);
  if (values.defined()) finish(values, m);
  if (indices.numel() > 0) finish(indices, first_index(x, m, axes.at(0)));
}

template <Kind K> std::tuple<at::Tensor, at::Tensor> extreme_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  auto [mv, mi] = K == Amax ? at::meta::max(self, dim, keepdim) : at::meta::min(self, dim, keepdim);
  at::Tensor values = like_meta(mv, self), indices = like_meta(mi, self);
  write_extreme_and_index<K>(self, one_axis(self, dim), values, indices);
  return {values, indices};
}

template <Kind K>
std::tuple<at::Tensor&, at::Tensor&> extreme_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                     at::Tensor& values, at::Tensor& indices) {
  if (K == Amax)
    at::meta::max_outf(self, dim, keepdim, values, indices);
  else
    at::meta::min_outf(self, dim, keepdim, values, indices);
  write_extreme_and_index<K>(self, one_axis(self, dim), values, indices);
  return {values, indices};
}

// argmax/argmin without a dim index the flattened tensor.
template <Kind K> void write_arg(const at::Tensor& self, std::optional<int64_t> dim, const at::Tensor& out) {
  if (dim) return write_extreme_and_index<K>(self, one_axis(self, *dim), at::Tensor(), out);
  if (out.numel() == 0) return;
  UOpPtr x = reshape(read(self), {self.numel()});
  finish(out, first_index(x, fold_keep(x, kFolds[K].op, {0}), 0));
}

template <Kind K> at::Tensor arg(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  at::Tensor out =
      like_meta(K == Amax ? at::meta::argmax(self, dim, keepdim) : at::meta::argmin(self, dim, keepdim), self);
  write_arg<K>(self, dim, out);
  return out;
}

template <Kind K>
at::Tensor& arg_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  if (K == Amax)
    at::meta::argmax_outf(self, dim, keepdim, out);
  else
    at::meta::argmin_outf(self, dim, keepdim, out);
  write_arg<K>(self, dim, out);
  return out;
}

void write_aminmax(const at::Tensor& self, std::optional<int64_t> dim, const at::Tensor& min, const at::Tensor& max) {
  DimMask mask = dim ? mask_of(self, *dim) : all_dims();
  write_fold(Amin, self, mask, min);
  write_fold(Amax, self, mask, max);
}

std::tuple<at::Tensor, at::Tensor> aminmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  auto [mn, mx] = at::meta::aminmax(self, dim, keepdim);
  at::Tensor min = like_meta(mn, self), max = like_meta(mx, self);
  write_aminmax(self, dim, min, max);
  return {min, max};
}

std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                                                 at::Tensor& min, at::Tensor& max) {
  at::meta::aminmax_outf(self, dim, keepdim, min, max);
  write_aminmax(self, dim, min, max);
  return {min, max};
}

// ---- var, std, var_mean, std_mean ----

struct Moments {
  UOpPtr var, mean; // kept dims
};

// Two passes, as torch's CPU kernel for accuracy: the mean, then the squared deviations from it.
// The divisor is max(0, n - correction): torch's inf or nan when the correction uses up every element.
Moments moments(const UOpPtr& x, const Axes& axes, double correction) {
  double n = static_cast<double>(extent(x, axes));
  UOpPtr sum = fold_keep(x, Ops::ADD, axes);
  UOpPtr mean = alu(Ops::FDIV, sum, like(sum, n));
  UOpPtr dev = alu(Ops::SUB, x, back(mean, x));
  UOpPtr m2 = fold_keep(alu(Ops::MUL, dev, dev), Ops::ADD, axes);
  return {alu(Ops::FDIV, m2, runtime_like(m2, std::max(0.0, n - correction))), mean};
}

// torch's CPU var_mean computes the mean by Welford's updates, m += (x - m) / k: an infinity followed by
// any element makes it NaN (inf - inf), and only an infinity in the last place (row-major over the
// reduced dims, the order of a contiguous input) leaves it infinite, where sum / n is infinite for both.
UOpPtr welford_mean(const UOpPtr& x, const Axes& axes, const UOpPtr& mean) {
  UOpPtr last;
  for (int64_t a : axes) {
    Shape s(x->shape.size(), 1);
    s[a] = x->shape[a];
    UOpPtr at_end = alu(Ops::CMPEQ, iota(s[a], DType::Int64), fixed(DType::Int64, s[a] - 1, {s[a]}));
    at_end = expand(reshape(at_end, s), x->shape);
    last = last ? alu(Ops::AND, last, at_end) : at_end;
  }
  if (!last) return mean;
  UOpPtr inf = alu(Ops::CMPEQ, alu(Ops::ABS, x), like(x, INFINITY));
  UOpPtr early = fold_keep(cast(alu(Ops::AND, inf, alu(Ops::NOT, last)), x->dtype), Ops::MAX, axes);
  return where(alu(Ops::CMPLT, like(early, 0), early), like(mean, NAN), mean);
}

struct StdVar {
  const char* name;
  bool sqrt;
};
constexpr StdVar kVar{"var", false}, kStd{"std", true};

// torch's std_var_out: the checks, the warning, and the result's dtype (out='s own, when given).
void write_std_var(const StdVar& f, const at::Tensor& self, at::OptionalIntArrayRef dim,
                   const std::optional<at::Scalar>& correction_opt, bool keepdim, at::Tensor& result,
                   at::Tensor mean_result) {
  TORCH_CHECK(self.layout() == at::Layout::Strided, "std and var only supports strided layout, got: ", self.layout());
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "std and var only support floating point and complex dtypes");
  at::ScalarType dtype = at::native::get_dtype_from_result(result, {});
  DimMask mask = mask_of(self, dim);
  // torch computes a complex input's var (and mean) as its real and imaginary parts' in the result's real
  // dtype: var = var(re) + var(im), mean = mean(re) + i mean(im)
  at::ScalarType part_dtype = c10::toRealValueType(dtype), self_part = c10::toRealValueType(self.scalar_type());
  at::native::resize_reduction_result(result, self, mask, keepdim, dtype);
  if (mean_result.defined())
    at::native::resize_reduction_result(mean_result, self, mask, keepdim, mean_result.scalar_type());
  TORCH_CHECK(at::canCast(self_part, part_dtype), "result type ", self_part,
              " can't be cast to the desired output type ", part_dtype);
  double correction = correction_opt.value_or(1).toDouble();
  int64_t reducing = result.numel() == 0 ? 0 : self.numel() / result.numel();
  if (static_cast<double>(reducing) - correction <= 0)
    TORCH_WARN(f.name, "(): degrees of freedom is <= 0. Correction should be strictly less than the reduction factor "
                       "(input numel divided by output numel).");
  if (self.is_complex()) {
    DType dt = to_tiny_dtype(part_dtype);
    UOpPtr pairs = complex_input(self, dt);
    UOpPtr re = real_part(pairs), im = imag_part(pairs);
    Axes axes = axes_of(mask, re);
    Moments mr = moments(re, axes, correction), mi = moments(im, axes, correction);
    // each part's variance is rounded to the result's dtype, then added (and the square root taken) in it
    auto rounded = [&](const UOpPtr& v) { return cast(cast(v, dt), opmath(dt)); };
    UOpPtr var = rounded(alu(Ops::ADD, rounded(mr.var), rounded(mi.var)));
    UOpPtr value = f.sqrt ? alu(Ops::SQRT, var) : var;
    if (result.is_complex()) {
      if (result.numel() > 0)
        write_complex(result, reshape(join_complex(cast(value, dt), like(cast(value, dt), 0)),
                                      value_shape(result, to_shape(result.sizes()))));
    } else {
      finish(result, value);
    }
    if (mean_result.defined() && mean_result.numel() > 0) {
      UOpPtr mean = join_complex(cast(welford_mean(re, axes, mr.mean), dt), cast(welford_mean(im, axes, mi.mean), dt));
      write_complex(mean_result, reshape(cast(mean, element_dtype(mean_result.scalar_type())),
                                         value_shape(mean_result, to_shape(mean_result.sizes()))));
    }
    return;
  }
  DType dt = to_tiny_dtype(dtype);
  UOpPtr x = cast(cast(input(self), dt), opmath(dt));
  Moments m = moments(x, axes_of(mask, x), correction);
  finish(result, f.sqrt ? alu(Ops::SQRT, m.var) : m.var);
  if (mean_result.defined()) finish(mean_result, welford_mean(x, axes_of(mask, x), m.mean));
}

template <const StdVar& F>
at::Tensor std_var(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                   bool keepdim) {
  // std and var of complex values are real
  at::Tensor result = empty_tiny({0}, c10::toRealValueType(self.scalar_type()), self.device());
  write_std_var(F, self, dim, correction, keepdim, result, at::Tensor());
  return result;
}

template <const StdVar& F>
at::Tensor& std_var_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                        const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out) {
  write_std_var(F, self, dim, correction, keepdim, out, at::Tensor());
  return out;
}

template <const StdVar& F>
std::tuple<at::Tensor, at::Tensor> std_var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                const std::optional<at::Scalar>& correction, bool keepdim) {
  at::Tensor result = empty_tiny({0}, c10::toRealValueType(self.scalar_type()), self.device());
  at::Tensor mean = empty_tiny({0}, self.scalar_type(), self.device());
  write_std_var(F, self, dim, correction, keepdim, result, mean);
  return {result, mean};
}

// ---- norms ----

// linalg_vector_norm's value for every ord torch accepts: the max/min of |x| for +-inf, the count of
// nonzeros for 0, sum(|x|^p)^(1/p) otherwise (with 1 and 2 spelt out).
UOpPtr vector_norm(const UOpPtr& x, double ord, const Axes& axes, const Shape& shape) {
  UOpPtr a = alu(Ops::ABS, x);
  if (std::isinf(ord)) return fold(a, ord > 0 ? Ops::MAX : Ops::MIN, axes, shape);
  if (ord == 0) return fold(cast(truth(x), x->dtype), Ops::ADD, axes, shape);
  if (ord == 1) return fold(a, Ops::ADD, axes, shape);
  if (ord == 2) return alu(Ops::SQRT, fold(alu(Ops::MUL, x, x), Ops::ADD, axes, shape));
  UOpPtr s = fold(alu(Ops::POW, a, runtime_like(a, ord)), Ops::ADD, axes, shape);
  return alu(Ops::POW, s, runtime_like(s, 1.0 / ord));
}

// The input converted to dtype= (torch converts before the norm), computed in its opmath.
void write_norm(const at::Tensor& self, double ord, const DimMask& mask, std::optional<at::ScalarType> dtype,
                const at::Tensor& out) {
  if (out.numel() == 0) return;
  UOpPtr x;
  if (self.is_complex()) {
    // the norm of the absolute values, real (dtype= names a complex dtype then)
    DType dt = element_dtype(dtype ? *dtype : self.scalar_type());
    UOpPtr pairs = complex_input(self, dt);
    x = cm::abs(parts_of(pairs));
  } else {
    DType dt = dtype ? to_tiny_dtype(*dtype) : to_tiny_dtype(out.scalar_type());
    x = cast(cast(input(self), dt), opmath(dt));
  }
  finish(out, vector_norm(x, ord, axes_of(mask, x), to_shape(out.sizes())));
}

at::Tensor linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                              std::optional<at::ScalarType> dtype) {
  at::Tensor out = like_meta(at::meta::linalg_vector_norm(self, ord, dim, keepdim, dtype), self);
  write_norm(self, ord.toDouble(), mask_of(self, dim), dtype, out);
  return out;
}

at::Tensor& linalg_vector_norm_out(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                                   bool keepdim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::meta::linalg_vector_norm_outf(self, ord, dim, keepdim, dtype, out);
  write_norm(self, ord.toDouble(), mask_of(self, dim), dtype, out);
  return out;
}

double norm_ord(const std::optional<at::Scalar>& p) { return p ? p->toDouble() : 2.0; }

at::Tensor norm(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
  at::Tensor out = like_meta(at::meta::norm(self, p, dim, keepdim), self);
  write_norm(self, norm_ord(p), mask_of(self, dim), std::nullopt, out);
  return out;
}

at::Tensor& norm_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
  at::meta::norm_outf(self, p, dim, keepdim, out);
  write_norm(self, norm_ord(p), mask_of(self, dim), std::nullopt, out);
  return out;
}

at::Tensor norm_dtype(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                      at::ScalarType dtype) {
  at::Tensor out = like_meta(at::meta::norm(self, p, dim, keepdim, dtype), self);
  write_norm(self, norm_ord(p), mask_of(self, dim), dtype, out);
  return out;
}

at::Tensor& norm_dtype_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim,
                           bool keepdim, at::ScalarType dtype, at::Tensor& out) {
  at::meta::norm_outf(self, p, dim, keepdim, dtype, out);
  write_norm(self, norm_ord(p), mask_of(self, dim), dtype, out);
  return out;
}

// ---- cumsum, cumprod ----

// out[i] = op over j <= i of x[j] along `axis`: x spread over a new axis j next to i, the elements
// with j > i replaced by the identity (an iota comparison), and folded over j. Elements accumulate in
// index order, as torch's CPU kernel does.
UOpPtr cumulative(const UOpPtr& x, Ops op, int64_t axis) {
  Shape spread = x->shape, source = x->shape;
  spread.insert(spread.begin() + axis, x->shape[axis]);
  source.insert(source.begin() + axis, 1);
  UOpPtr xs = expand(reshape(x, source), spread); // [..., i, j, ...] = x[..., j, ...]
  UOpPtr in_prefix = alu(Ops::CMPLE, index_along(spread, axis + 1), index_along(spread, axis));
  UOpPtr masked = where(in_prefix, xs, like(xs, identity(op, x->dtype)));
  return reshape(reduce(masked, op, {axis + 1}), x->shape);
}

template <Ops Op> void write_cumulative(const at::Tensor& self, int64_t dim, const at::Tensor& out) {
  if (out.numel() == 0) return;
  if (out.is_complex()) {
    refuse_complex_half(self, out);
    DType dt = element_dtype(out.scalar_type());
    UOpPtr x = complex_input(self, dt);
    int64_t axis = one_axis(self, dim)[0];
    UOpPtr r = Op == Ops::ADD ? cumulative(x, Ops::ADD, axis) : complex_cumprod(x, axis);
    Shape shape = to_shape(out.sizes());
    shape.push_back(2);
    write_complex(out, reshape(cast(r, dt), shape));
    return;
  }
  DType dt = to_tiny_dtype(out.scalar_type());
  UOpPtr x = cast(cast(input(self), dt), opmath(dt));
  finish(out, cumulative(x, Op, one_axis(self, dim)[0]));
}

template <Ops Op> at::Tensor cumulative_op(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  at::Tensor meta = Op == Ops::ADD ? at::meta::cumsum(self, dim, dtype) : at::meta::cumprod(self, dim, dtype);
  at::Tensor out = like_meta(meta, self);
  write_cumulative<Op>(self, dim, out);
  return out;
}

template <Ops Op>
at::Tensor& cumulative_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  if (Op == Ops::ADD)
    at::meta::cumsum_outf(self, dim, dtype, out);
  else
    at::meta::cumprod_outf(self, dim, dtype, out);
  check_cpu_accepts<std::conditional_t<Op == Ops::ADD, at::_ops::cumsum_out, at::_ops::cumprod_out>>(self, dim, dtype,
                                                                                                     out);
  // torch's CPU kernel writes through a TensorIterator that refuses an out= whose elements overlap
  if (self.dim() > 0 && self.numel() > 0) at::assert_no_internal_overlap(out);
  write_cumulative<Op>(self, dim, out);
  return out;
}

// ---- cummax, cummin, logcumsumexp ----

// x spread over a new axis j next to `axis` (i): [..., i, j, ...] = x[..., j, ...], and whether j <= i.
struct Prefix {
  UOpPtr xs, in_prefix;
};
Prefix prefix_of(const UOpPtr& x, int64_t axis) {
  Shape spread = x->shape, source = x->shape;
  spread.insert(spread.begin() + axis, x->shape[axis]);
  source.insert(source.begin() + axis, 1);
  UOpPtr xs = expand(reshape(x, source), spread);
  return {xs, alu(Ops::CMPLE, index_along(spread, axis + 1), index_along(spread, axis))};
}

// A value of the spread shape that is x[..., 0, ...] everywhere: a member of every prefix, so a masked
// max/min needs no identity (integers have none that torch's kernel would give).
UOpPtr first_of(const UOpPtr& xs, int64_t axis) {
  return expand(shrink(xs,
                       [&] {
                         std::vector<std::pair<int64_t, int64_t>> r;
                         for (int64_t s : xs->shape)
                           r.emplace_back(0, s);
                         r[axis + 1] = {0, 1};
                         return r;
                       }()),
                xs->shape);
}

// torch's CPU cummax/cummin: the running extreme (a NaN, once seen, wins) and the index of the last
// element that set it (x[j] >= the running max replaces it, so ties take the later index): the last
// j <= i whose x[j] equals the extreme at i, NaN matching NaN.
template <Ops Op> void cum_extreme(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  UOpPtr x = input(self);
  if (x->dtype == DType::Bool) x = cast(x, DType::Int32);
  int64_t axis = one_axis(self, dim)[0];
  Prefix p = prefix_of(x, axis);
  UOpPtr masked = where(p.in_prefix, p.xs, first_of(p.xs, axis));
  UOpPtr m = reduce(masked, Op, {axis + 1}); // [..., i, 1, ...]
  UOpPtr me = expand(m, p.xs->shape);
  UOpPtr hit = alu(Ops::CMPEQ, p.xs, me);
  if (is_float(x->dtype)) hit = alu(Ops::OR, hit, alu(Ops::AND, alu(Ops::CMPNE, p.xs, p.xs), alu(Ops::CMPNE, me, me)));
  Shape spread = p.xs->shape;
  UOpPtr j = index_along(spread, axis + 1);
  UOpPtr idx = reduce(where(alu(Ops::AND, hit, p.in_prefix), j, fixed(DType::Int64, -1, spread)), Ops::MAX, {axis + 1});
  finish(values, reshape(m, x->shape));
  finish(indices, reshape(idx, x->shape));
}

// log(sum over j <= i of exp(x[j])), shifted by the prefix's max m (0 when m is infinite, so that all
// -inf gives -inf and a +inf gives inf), in opmath.
void write_logcumsumexp(const at::Tensor& self, int64_t dim, const at::Tensor& out) {
  if (out.numel() == 0) return;
  DType dt = to_tiny_dtype(out.scalar_type());
  UOpPtr x = cast(cast(input(self), dt), opmath(dt));
  int64_t axis = one_axis(self, dim)[0];
  Prefix p = prefix_of(x, axis);
  UOpPtr m = reduce(where(p.in_prefix, p.xs, first_of(p.xs, axis)), Ops::MAX, {axis + 1});
  m = where(alu(Ops::CMPEQ, alu(Ops::ABS, m), like(m, INFINITY)), like(m, 0), m);
  UOpPtr me = expand(m, p.xs->shape);
  UOpPtr terms = where(p.in_prefix, alu(Ops::EXP, alu(Ops::SUB, p.xs, me)), like(p.xs, 0));
  UOpPtr s = reduce(terms, Ops::ADD, {axis + 1});
  finish(out, reshape(alu(Ops::ADD, alu(Ops::LOG, s), m), x->shape));
}

// torch's CPU kernel folds complex values in order, acc = logaddexp(x[k], acc) from (-inf, 0), with its complex
// logaddexp (complex_math's log_add_exp), whose imaginary part stays on the branch of the operand with the larger
// real part rather than the principal one of the sum: no reordering gives its values. So a loop of n steps, the
// step index a runtime scalar (every step the same kernels): step k folds the slice x[k] into the running value and
// writes it to out[k].
void write_complex_logcumsumexp(const at::Tensor& self, int64_t dim, const at::Tensor& out) {
  if (out.numel() == 0) return;
  DType dt = element_dtype(out.scalar_type());
  UOpPtr x = complex_input(self, dt); // (..., n, ..., 2) in opmath
  int64_t axis = one_axis(self, dim)[0], rank = static_cast<int64_t>(x->shape.size());
  int64_t n = x->shape[axis], rest = tiny::prod(x->shape) / (2 * n);
  // the scanned axis first, the pair's axis last: (n, rest, 2)
  std::vector<int64_t> order{axis};
  for (int64_t d = 0; d < rank; d++)
    if (d != axis) order.push_back(d);
  std::vector<int64_t> inverse(rank);
  for (int64_t d = 0; d < rank; d++)
    inverse[order[d]] = d;
  UOpPtr pairs = reshape(permute(x, order), {n, rest, 2});
  runtime::Device& dev = runtime::device(self.device().index());
  std::vector<UOpPtr> parts =
      realize_now({reshape(real_part(pairs), {n * rest}), reshape(imag_part(pairs), {n * rest})}, dev);
  Shape line{rest}, all{n, rest};
  UOpPtr column = iota(rest, kIndex);
  UOpPtr row = expand(reshape(iota(n, kIndex), {n, 1}), all);
  UOpPtr start_re = fixed(pairs->dtype, -INFINITY, line), start_im = fixed(pairs->dtype, 0, line);
  UOpPtr empty = fixed(pairs->dtype, 0, all);
  auto step = [&](const std::vector<UOpPtr>& st, const UOpPtr& k) -> std::vector<UOpPtr> {
    UOpPtr at = add(mul(expand(reshape(k, {1}), line), fixed(kIndex, rest, line)), column);
    cm::Cx acc = cm::log_add_exp({gather(parts[0], at), gather(parts[1], at)}, {st[0], st[1]});
    UOpPtr here = alu(Ops::CMPEQ, row, expand(reshape(k, {1, 1}), all));
    auto spread = [&](const UOpPtr& v) { return expand(reshape(v, {1, rest}), all); };
    return {acc.re, acc.im, where(here, spread(acc.re), st[2]), where(here, spread(acc.im), st[3])};
  };
  std::vector<UOpPtr> state = run_step_loop({start_re, start_im, empty, empty}, n, false, step, dev);
  Shape moved;
  for (int64_t d : order)
    moved.push_back(x->shape[d]);
  UOpPtr result = reshape(join_complex(state[2], state[3]), moved);
  Shape shape = to_shape(out.sizes());
  shape.push_back(2);
  write_complex(out, reshape(cast(permute(result, inverse), dt), shape));
}

at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  check_cpu_accepts<at::_ops::_logcumsumexp_out>(self, dim, out);
  at::native::resize_output(out, self.sizes());
  if (out.is_complex())
    write_complex_logcumsumexp(self, dim, out);
  else
    write_logcumsumexp(self, dim, out);
  return out;
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
  at::Tensor out = empty_tiny(self.sizes(), self.scalar_type(), self.device());
  return logcumsumexp_out(self, dim, out);
}

// hash_tensor (mode 0, xor): each element widened to float64 or int64 (bool: 0 or 1), its 64 bits folded
// by xor as a uint64. (torch's CPU kernel has none for complex or uint16/32/64 inputs: the latter get its
// error from the registration's CPU check.)
void write_hash(const at::Tensor& self, at::IntArrayRef dim, int64_t mode, const at::Tensor& out) {
  TORCH_CHECK(mode == 0, "Unknown hash_tensor mode: ", mode);
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), "\"xor_sum_cpu\" not implemented for '", self.scalar_type(), "'");
  UOpPtr x = input(self);
  x = bitcast(cast(x, is_float(x->dtype) ? DType::Float64 : DType::Int64), DType::UInt64);
  finish(out, fold(x, Ops::XOR, axes_of(mask_of(self, dim), x), to_shape(out.sizes())));
}

at::Tensor hash_tensor(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, int64_t mode) {
  at::Tensor out = like_meta(at::meta::hash_tensor(self, dim, keepdim, mode), self);
  write_hash(self, dim, mode, out);
  return out;
}

at::Tensor& hash_tensor_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, int64_t mode, at::Tensor& out) {
  at::meta::hash_tensor_outf(self, dim, keepdim, mode, out);
  write_hash(self, dim, mode, out);
  return out;
}

// count_nonzero over a list of dims (every dim when empty), an int64 without the counted dims.
at::Tensor count_nonzero(const at::Tensor& self, at::IntArrayRef dims) {
  DimMask mask = at::native::make_dim_mask(dims, self.dim());
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < self.dim(); d++)
    if (!mask[d]) sizes.push_back(self.size(d));
  at::Tensor out = empty_tiny(sizes, at::kLong, self.device());
  UOpPtr flags = self.is_complex() ? cm::nonzero(parts_of(complex_input(self, element_dtype(self.scalar_type()))))
                                   : truth(input(self));
  UOpPtr x = cast(flags, DType::Int64);
  finish(out, fold(x, Ops::ADD, axes_of(mask, x), to_shape(out.sizes())));
  return out;
}

// ---- softmax, log_softmax and their backward ----

// exp(x - max) * (1 / sum) and (x - max) - log(sum), over `axis`, in opmath: the reciprocal once per row, as
// torch's CPU kernel (a division per element is the slowest part of the row's last pass).
UOpPtr softmax_value(const UOpPtr& x, int64_t axis, bool log) {
  UOpPtr shifted = alu(Ops::SUB, x, back(fold_keep(x, Ops::MAX, {axis}), x));
  UOpPtr e = alu(Ops::EXP, shifted);
  UOpPtr sum = fold_keep(e, Ops::ADD, {axis});
  return log ? alu(Ops::SUB, shifted, alu(Ops::LOG, back(sum, x))) : alu(Ops::MUL, e, back(alu(Ops::RECIP, sum), x));
}

template <bool Log> void write_softmax(const at::Tensor& self, int64_t dim, bool half_to_float, const at::Tensor& out) {
  TORCH_CHECK(!half_to_float, Log ? "log_softmax" : "softmax",
              " with half to float conversion is not supported on CPU");
  if (out.numel() == 0) return;
  UOpPtr x = input(self);
  x = cast(x, opmath(x->dtype));
  finish(out, softmax_value(x, one_axis(self, dim)[0], Log));
}

template <bool Log> at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  at::Tensor meta =
      Log ? at::meta::_log_softmax(self, dim, half_to_float) : at::meta::_softmax(self, dim, half_to_float);
  check_cpu_accepts<std::conditional_t<Log, at::_ops::_log_softmax, at::_ops::_softmax>>(self, dim, half_to_float);
  at::Tensor out = like_meta(meta, self);
  write_softmax<Log>(self, dim, half_to_float, out);
  return out;
}

template <bool Log> at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  if (Log)
    at::meta::_log_softmax_outf(self, dim, half_to_float, out);
  else
    at::meta::_softmax_outf(self, dim, half_to_float, out);
  check_cpu_accepts<std::conditional_t<Log, at::_ops::_log_softmax, at::_ops::_softmax>>(self, dim, half_to_float);
  write_softmax<Log>(self, dim, half_to_float, out);
  return out;
}

// _safe_softmax (torch's math attention): softmax with rows whose elements are all -inf set to 0. A row is all -inf
// exactly where its max is -inf (a NaN makes both false; an empty row both true), so the test reads softmax's own
// row max instead of a pass of its own and its horizontal combine (sdpa over (32, 4, 65, 32), two threads, old and new
// builds in turn: float32 0.614-0.636 -> 0.595-0.602 ms, bfloat16 0.699-0.721 -> 0.674-0.683). A conversion to another
// dtype (a double below float's range becomes -inf) keeps torch's form, the test on self.
at::Tensor safe_softmax(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  if (dtype && *dtype != self.scalar_type()) {
    at::Tensor out = at::softmax(self, dim, dtype);
    at::Tensor rows = self.eq(-std::numeric_limits<double>::infinity()).all(dim, true);
    return at::where(rows, at::zeros({}, out.options()), out);
  }
  at::Tensor meta = at::meta::_softmax(self, dim, false);
  check_cpu_accepts<at::_ops::_softmax>(self, dim, false);
  at::Tensor out = like_meta(meta, self);
  if (out.numel() == 0) return out;
  UOpPtr x = input(self);
  x = cast(x, opmath(x->dtype));
  int64_t axis = one_axis(self, dim)[0];
  UOpPtr all_neg_inf = alu(Ops::CMPEQ, back(fold_keep(x, Ops::MAX, {axis}), x), like(x, -INFINITY));
  finish(out, where(all_neg_inf, like(x, 0), softmax_value(x, axis, false)));
  return out;
}

// softmax: grad_input = y * (g - sum(g * y)); log_softmax: grad_input = g - exp(y) * sum(g).
template <bool Log>
void write_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            const at::Tensor& out) {
  if (out.numel() == 0) return;
  UOpPtr g = input(grad_output), y = input(output);
  DType acc = opmath(g->dtype);
  g = cast(g, acc);
  y = cast(y, acc);
  int64_t axis = one_axis(output, dim)[0];
  UOpPtr v = Log ? alu(Ops::SUB, g, alu(Ops::MUL, alu(Ops::EXP, y), back(fold_keep(g, Ops::ADD, {axis}), g)))
                 : alu(Ops::MUL, y, alu(Ops::SUB, g, back(fold_keep(alu(Ops::MUL, g, y), Ops::ADD, {axis}), g)));
  finish(out, v);
}

template <bool Log>
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  at::Tensor meta = Log ? at::meta::_log_softmax_backward_data(grad_output, output, dim, input_dtype)
                        : at::meta::_softmax_backward_data(grad_output, output, dim, input_dtype);
  at::Tensor out = like_meta(meta, grad_output);
  write_softmax_backward<Log>(grad_output, output, dim, out);
  return out;
}

template <bool Log>
at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                 at::ScalarType input_dtype, at::Tensor& out) {
  if (Log)
    at::meta::_log_softmax_backward_data_outf(grad_output, output, dim, input_dtype, out);
  else
    at::meta::_softmax_backward_data_outf(grad_output, output, dim, input_dtype, out);
  write_softmax_backward<Log>(grad_output, output, dim, out);
  return out;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("sum.dim_IntList", sum, UnsignedPolicy::CpuChecked);
  m.impl("sum.IntList_out", sum_out, UnsignedPolicy::CpuChecked);
  m.impl("nansum", nansum, UnsignedPolicy::CpuChecked);
  m.impl("nansum.out", nansum_out, UnsignedPolicy::CpuChecked);
  m.impl("trace", trace);
  m.impl("equal", equal, UnsignedPolicy::CpuChecked);
  m.impl("mean.dim", mean);
  m.impl("mean.out", mean_out);
  m.impl("prod", prod, UnsignedPolicy::CpuChecked);
  m.impl("prod.dim_int", prod_dim, UnsignedPolicy::CpuChecked);
  m.impl("prod.int_out", prod_dim_out, UnsignedPolicy::CpuChecked);
  m.impl("amax", extreme<Amax>);
  m.impl("amax.out", extreme_out<Amax>);
  m.impl("amin", extreme<Amin>);
  m.impl("amin.out", extreme_out<Amin>);
  m.impl("all", truth_all<All>, UnsignedPolicy::CpuChecked);
  m.impl("all.all_out", truth_all_out<All>, UnsignedPolicy::CpuChecked);
  m.impl("all.dim", truth_dim<All>, UnsignedPolicy::CpuChecked);
  m.impl("all.out", truth_dim_out<All>, UnsignedPolicy::CpuChecked);
  m.impl("all.dims", truth_dims<All>, UnsignedPolicy::CpuChecked);
  m.impl("all.dims_out", truth_dims_out<All>, UnsignedPolicy::CpuChecked);
  m.impl("any", truth_all<Any>, UnsignedPolicy::CpuChecked);
  m.impl("any.all_out", truth_all_out<Any>, UnsignedPolicy::CpuChecked);
  m.impl("any.dim", truth_dim<Any>, UnsignedPolicy::CpuChecked);
  m.impl("any.out", truth_dim_out<Any>, UnsignedPolicy::CpuChecked);
  m.impl("any.dims", truth_dims<Any>, UnsignedPolicy::CpuChecked);
  m.impl("any.dims_out", truth_dims_out<Any>, UnsignedPolicy::CpuChecked);
  m.impl("max", full_extreme<Amax>);
  m.impl("max.unary_out", full_extreme_out<Amax>);
  m.impl("min", full_extreme<Amin>);
  m.impl("min.unary_out", full_extreme_out<Amin>);
  m.impl("max.dim", extreme_dim<Amax>);
  m.impl("max.dim_max", extreme_dim_out<Amax>);
  m.impl("min.dim", extreme_dim<Amin>);
  m.impl("min.dim_min", extreme_dim_out<Amin>);
  m.impl("argmax", arg<Amax>);
  m.impl("argmax.out", arg_out<Amax>);
  m.impl("argmin", arg<Amin>);
  m.impl("argmin.out", arg_out<Amin>);
  m.impl("aminmax", aminmax);
  m.impl("aminmax.out", aminmax_out);
  m.impl("var.correction", std_var<kVar>);
  m.impl("var.correction_out", std_var_out<kVar>);
  m.impl("std.correction", std_var<kStd>);
  m.impl("std.correction_out", std_var_out<kStd>);
  m.impl("var_mean.correction", std_var_mean<kVar>);
  m.impl("std_mean.correction", std_var_mean<kStd>);
  m.impl("linalg_vector_norm", linalg_vector_norm);
  m.impl("linalg_vector_norm.out", linalg_vector_norm_out);
  m.impl("norm.ScalarOpt_dim", norm);
  m.impl("norm.out", norm_out);
  m.impl("norm.ScalarOpt_dim_dtype", norm_dtype);
  m.impl("norm.dtype_out", norm_dtype_out);
  m.impl("cumsum", cumulative_op<Ops::ADD>, UnsignedPolicy::CpuChecked);
  m.impl("cumsum.out", cumulative_out<Ops::ADD>, UnsignedPolicy::CpuChecked);
  m.impl("cumprod", cumulative_op<Ops::MUL>, UnsignedPolicy::CpuChecked);
  m.impl("cumprod.out", cumulative_out<Ops::MUL>, UnsignedPolicy::CpuChecked);
  m.impl("_cummax_helper", cum_extreme<Ops::MAX>);
  m.impl("_cummin_helper", cum_extreme<Ops::MIN>);
  m.impl("_logcumsumexp", logcumsumexp);
  m.impl("_logcumsumexp.out", logcumsumexp_out);
  m.impl("count_nonzero.dim_IntList", count_nonzero, UnsignedPolicy::CpuChecked);
  m.impl("hash_tensor", hash_tensor, UnsignedPolicy::CpuChecked);
  m.impl("hash_tensor.out", hash_tensor_out, UnsignedPolicy::CpuChecked);
  m.impl("_softmax", softmax<false>);
  m.impl("_safe_softmax", safe_softmax);
  m.impl("_softmax.out", softmax_out<false>);
  m.impl("_log_softmax", softmax<true>);
  m.impl("_log_softmax.out", softmax_out<true>);
  m.impl("_softmax_backward_data", softmax_backward<false>);
  m.impl("_softmax_backward_data.out", softmax_backward_out<false>);
  m.impl("_log_softmax_backward_data", softmax_backward<true>);
  m.impl("_log_softmax_backward_data.out", softmax_backward_out<true>);
}

} // namespace tiny::aten_ops
