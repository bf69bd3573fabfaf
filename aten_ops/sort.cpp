// Sorting: sort (ascending or descending, along any dim; always stable), topk and kthvalue, and what torch
// builds from them (argsort, msort, ...); median, nanmedian, unique and unique_consecutive (also along a dim)
// from the stable sort;
// searchsorted and bucketize;
// mode's out= form.
//
// A row of up to kCountingMax elements is sorted by counting, in UOps. An element's place in its sorted
// row is the number of elements that go before it, rank[i] = #{j : x[j] before x[i]} + #{j < i : x[j]
// ties x[i]} (ties keep their order, so the sort is stable; NaN goes after every number, as in torch),
// and the element placed at r is found by a second count, order[r] = sum over i of i * (rank[i] == r).
// Both counts are reductions over the row for every element: O(n^2) work in two parallel kernels (rank
// is realized between them), which is the fastest way for short rows.
//
// A longer row goes through a bitonic sorting network: the row padded to N = 2^m, then m(m+1)/2
// compare-exchange stages, each one elementwise kernel that swaps an element with its partner i ^ j.
// The stages carry the permutation (positions into the row) and compare the elements it points at, with
// ties broken by position, so the network sorts stably. j and the block size are runtime scalars: every
// stage runs the same compiled kernel. O(n log^2 n) work in m(m+1)/2 kernels (120 for 2^15).
//
// The values are a gather from the row at the sorted positions.

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/SortingUtils.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/masked_select.h>
#include <ATen/ops/mode.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sort_meta_dispatch.h>
#include <ATen/ops/topk_meta_dispatch.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <tuple>
#include <vector>

#include "csrc/fallback.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

UOpPtr full(int64_t v, const Shape& shape) {
  return expand(reshape(const_int(kIndex, v), Shape(shape.size(), 1)), shape);
}

UOpPtr coordinate(const Shape& shape, size_t d) {
  Shape s(shape.size(), 1);
  s[d] = shape[d];
  return expand(reshape(iota(shape[d], kIndex), s), shape);
}

UOpPtr is_nan(const UOpPtr& x) { return alu(Ops::CMPNE, x, x); }

// torch's order: NaN after every number (before every number when descending).
UOpPtr goes_before(const UOpPtr& a, const UOpPtr& b, bool descending) {
  UOpPtr lt = descending ? alu(Ops::CMPLT, b, a) : alu(Ops::CMPLT, a, b);
  if (!is_float(a->dtype)) return lt;
  UOpPtr nan_first = descending ? alu(Ops::AND, is_nan(a), alu(Ops::NOT, is_nan(b)))
                                : alu(Ops::AND, is_nan(b), alu(Ops::NOT, is_nan(a)));
  return alu(Ops::OR, lt, nan_first);
}

UOpPtr ties(const UOpPtr& a, const UOpPtr& b) {
  UOpPtr eq = alu(Ops::CMPEQ, a, b);
  return is_float(a->dtype) ? alu(Ops::OR, eq, alu(Ops::AND, is_nan(a), is_nan(b))) : eq;
}

// The sorted position of each element of x (rows, n) within its row (int64, rows x n), realized.
UOpPtr ranks(const UOpPtr& x, bool descending) {
  int64_t rows = x->shape[0], n = x->shape[1];
  Shape sq{rows, n, n}; // [row, i, j]
  UOpPtr xi = expand(reshape(x, {rows, n, 1}), sq), xj = expand(reshape(x, {rows, 1, n}), sq);
  UOpPtr earlier = alu(Ops::CMPLT, coordinate(sq, 2), coordinate(sq, 1));
  UOpPtr before = alu(Ops::OR, goes_before(xj, xi, descending), alu(Ops::AND, ties(xj, xi), earlier));
  return contiguous(reshape(reduce(cast(before, kIndex), Ops::ADD, {2}), {rows, n}));
}

// For r in [first, first + count): the index of the element of rank r in each row (rows x count).
UOpPtr order(const UOpPtr& rank, int64_t first, int64_t count) {
  int64_t rows = rank->shape[0], n = rank->shape[1];
  Shape sq{rows, count, n}; // [row, r, i]
  UOpPtr r = alu(Ops::ADD, coordinate(sq, 1), full(first, sq));
  UOpPtr hit = alu(Ops::CMPEQ, expand(reshape(rank, {rows, 1, n}), sq), r);
  UOpPtr i = where(hit, coordinate(sq, 2), full(0, sq));
  return reshape(reduce(i, Ops::ADD, {2}), {rows, count});
}

// Rows longer than this are sorted by the bitonic network.
constexpr int64_t kCountingMax = 2048;

UOpPtr broadcast(const UOpPtr& scalar, const Shape& shape) {
  return expand(reshape(scalar, Shape(shape.size(), 1)), shape);
}

// The sorted positions of each row of x (rows, n; a realized value), by a bitonic network (rows x n).
UOpPtr bitonic_order(const UOpPtr& x, bool descending) {
  int64_t rows = x->shape[0], n = x->shape[1], padded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)));
  Shape s{rows, padded};
  UOpPtr data = reshape(x, {rows * n}), row = coordinate(s, 0), i = coordinate(s, 1);
  UOpPtr zero = full(0, s), none = full(-1, s);
  auto element = [&](const UOpPtr& p) { // x[row, p]; positions past the row are padding
    UOpPtr real = alu(Ops::CMPLT, p, full(n, s));
    return gather(data, where(real, alu(Ops::ADD, alu(Ops::MUL, row, full(n, s)), p), none));
  };
  // Does the element at position a go before the one at b? Padding goes after every element.
  auto precedes = [&](const UOpPtr& a, const UOpPtr& b) {
    UOpPtr real_a = alu(Ops::CMPLT, a, full(n, s)), real_b = alu(Ops::CMPLT, b, full(n, s));
    UOpPtr xa = element(a), xb = element(b);
    UOpPtr by_value = alu(Ops::OR, goes_before(xa, xb, descending), alu(Ops::AND, ties(xa, xb), alu(Ops::CMPLT, a, b)));
    UOpPtr both_real = alu(Ops::AND, real_a, alu(Ops::OR, alu(Ops::NOT, real_b), by_value));
    UOpPtr both_pad = alu(Ops::AND, alu(Ops::NOT, alu(Ops::OR, real_a, real_b)), alu(Ops::CMPLT, a, b));
    return alu(Ops::OR, both_real, both_pad);
  };
  UOpPtr p = i; // p[row, i]: the position of the element now at i
  for (int64_t k = 2; k <= padded; k *= 2) {
    for (int64_t j = k / 2; j >= 1; j /= 2) {
      UOpPtr partner = alu(Ops::XOR, i, broadcast(var_int(kIndex, j), s));
      UOpPtr other = gather(reshape(p, {rows * padded}), alu(Ops::ADD, alu(Ops::MUL, row, full(padded, s)), partner));
      // in blocks of k, alternately ascending and descending; the lower of a pair takes the first
      UOpPtr ascending = alu(Ops::CMPEQ, alu(Ops::AND, i, broadcast(var_int(kIndex, k), s)), zero);
      UOpPtr takes_first = alu(Ops::CMPEQ, alu(Ops::CMPLT, i, partner), ascending);
      p = contiguous(where(alu(Ops::CMPEQ, takes_first, precedes(p, other)), p, other));
    }
  }
  return shrink(p, {{0, rows}, {0, n}});
}

// self with `dim` moved last, as (rows, n); and the way back.
struct Rows {
  UOpPtr x;
  Shape permuted; // self's shape with dim last
  std::vector<int64_t> perm, inverse;
  int64_t rows = 1, n = 1;

  Rows(const at::Tensor& self, int64_t dim) {
    Shape shape = self.dim() == 0 ? Shape{1} : to_shape(self.sizes());
    for (size_t d = 0; d < shape.size(); d++)
      if (static_cast<int64_t>(d) != dim) perm.push_back(static_cast<int64_t>(d));
    perm.push_back(dim);
    inverse.resize(perm.size());
    for (size_t i = 0; i < perm.size(); i++)
      inverse[perm[i]] = static_cast<int64_t>(i);
    for (int64_t d : perm)
      permuted.push_back(shape[d]);
    n = shape[dim];
    rows = n == 0 ? 0 : prod(shape) / n;
    x = reshape(permute(reshape(read(self), shape), perm), {rows, n});
  }

  // A (rows, count) result back in self's layout, with `count` along dim.
  UOpPtr back(const UOpPtr& v, const at::Tensor& out) const {
    Shape p = permuted;
    p.back() = v->shape[1];
    return reshape(permute(reshape(v, p), inverse), to_shape(out.sizes()));
  }

  UOpPtr values_at(const UOpPtr& idx) const {
    int64_t count = idx->shape[1];
    Shape s{rows, count};
    UOpPtr pos = alu(Ops::ADD, alu(Ops::MUL, coordinate(s, 0), full(n, s)), idx);
    return gather(reshape(x, {rows * n}), pos);
  }
};

// The elements of rank [first, first + count) of each row of self along dim, into values and indices.
void write_ranked(const at::Tensor& self, int64_t dim, bool descending, int64_t first, int64_t count,
                  const at::Tensor& values, const at::Tensor& indices) {
  if (values.numel() == 0) return;
  Rows r(self, dim);
  UOpPtr idx = r.n <= kCountingMax
                   ? order(ranks(r.x, descending), first, count)
                   : shrink(bitonic_order(contiguous(r.x), descending), {{0, r.rows}, {first, first + count}});
  write(values, r.back(r.values_at(idx), values));
  write(indices, r.back(idx, indices));
}

std::tuple<at::Tensor&, at::Tensor&> sort_out(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                              bool descending, at::Tensor& values, at::Tensor& indices) {
  at::meta::sort_outf(self, stable, dim, descending, values, indices);
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  write_ranked(self, dim, descending, 0, n, values, indices);
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                              bool /*sorted: the result is always sorted*/, at::Tensor& values,
                                              at::Tensor& indices) {
  at::meta::topk_outf(self, k, dim, largest, true, values, indices);
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  // torch's CPU kernel returns a 0-d input itself for k of 0 or 1
  write_ranked(self, dim, largest, 0, self.dim() == 0 ? 1 : k, values, indices);
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> kthvalue_out(const at::Tensor& self, int64_t k, int64_t dim_, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices) {
  int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), /*wrap_scalar=*/true);
  int64_t slicesize = self.dim() == 0 ? 1 : self.size(dim);
  at::native::zero_numel_check_dims(self, dim, "kthvalue()");
  TORCH_CHECK(k >= 1 && k <= slicesize, "kthvalue(): selected number k out of range for dimension ", dim);
  at::assert_no_overlap(self, values);
  at::native::_reduction_with_indices_allocate_or_resize_output(values, indices, self, dim_, keepdim);
  // torch's CPU kernel returns a 0-d input itself before it dispatches on the dtype
  TORCH_CHECK_NOT_IMPLEMENTED(self.dim() == 0 || self.scalar_type() != at::kBool,
                              "\"kthvalue_cpu\" not implemented for 'Bool'");
  write_ranked(self, dim, false, k - 1, 1, values, indices);
  if (!keepdim && self.dim() > 0) {
    values.squeeze_(dim);
    indices.squeeze_(dim);
  }
  return {values, indices};
}

// ---- searchsorted and bucketize ----
//
// torch's CPU kernel runs a binary search per value: start, end = 0, n; while start < end: mid = (start +
// end) / 2 halves the range by `!(b[mid] >= v)` (left) or `!(b[mid] > v)` (right). The same search here,
// unrolled: bit_width(n) steps, each a gather of b[mid] for every value (so NaNs land where torch's search
// puts them).
UOpPtr binary_search(const UOpPtr& bounds, const UOpPtr& sorter, const UOpPtr& row_base, const UOpPtr& v, int64_t n,
                     bool right) {
  const Shape& s = v->shape;
  auto c = [&](int64_t x) { return full(x, s); };
  UOpPtr start = c(0), end = c(n);
  for (int64_t step = 0, steps = std::bit_width(static_cast<uint64_t>(n)); step < steps; step++) {
    UOpPtr active = alu(Ops::CMPLT, start, end);
    UOpPtr mid = alu(Ops::ADD, start, alu(Ops::IDIV, alu(Ops::SUB, end, start), c(2)));
    UOpPtr at = sorter ? gather(sorter, alu(Ops::ADD, row_base, mid)) : mid;
    UOpPtr b = gather(bounds, alu(Ops::ADD, row_base, at));
    UOpPtr go_right = alu(Ops::NOT, right ? alu(Ops::CMPLT, v, b) : alu(Ops::CMPLE, v, b)); // !(b > v), !(b >= v)
    UOpPtr move = alu(Ops::AND, active, go_right), shrink = alu(Ops::AND, active, alu(Ops::NOT, go_right));
    start = where(move, alu(Ops::ADD, mid, c(1)), start);
    end = where(shrink, mid, end);
  }
  return start;
}

at::Tensor& searchsorted_out(const at::Tensor& sorted_sequence, const at::Tensor& self, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                             at::Tensor& out) {
  at::Tensor raw_sorter = sorter_opt.value_or(at::Tensor());
  at::native::searchsorted_pre_check(sorted_sequence, self, out, out_int32, right, side, raw_sorter);
  check_cpu_accepts<at::_ops::searchsorted_Tensor>(sorted_sequence, self, out_int32, right, side,
                                                   std::optional<at::Tensor>()); // a sorter of 1s is out of range
  at::native::resize_output(out, self.sizes());
  bool is_right = side ? *side == "right" : right;
  if (self.numel() == 0) return out;
  at::Tensor input, bounds, sorter;
  at::native::searchsorted_maybe_trim_input_tensors(input, bounds, sorter, self, sorted_sequence, raw_sorter);
  const at::Tensor& x = input.defined() ? input : self;
  const at::Tensor& b = bounds.defined() ? bounds : sorted_sequence;
  const at::Tensor& so = sorter.defined() ? sorter : raw_sorter;
  int64_t n = b.size(-1), numel = x.numel();
  DType dt = to_tiny_dtype(x.scalar_type());
  UOpPtr v = reshape(read(x), {numel});
  UOpPtr flat_bounds = cast(reshape(read(b), {b.numel()}), dt);
  // the row of each value's boundaries: 0 for 1-D boundaries, else value index / values per row * n
  UOpPtr row_base = full(0, {numel});
  if (b.dim() > 1) {
    int64_t per_row = x.size(-1);
    row_base = alu(Ops::MUL, alu(Ops::IDIV, iota(numel, DType::Int64), full(per_row, {numel})), full(n, {numel}));
  }
  UOpPtr flat_sorter = so.defined() ? reshape(read(so), {so.numel()}) : nullptr;
  UOpPtr r = binary_search(flat_bounds, flat_sorter, row_base, v, n, is_right);
  write(out, cast(reshape(r, to_shape(out.sizes())), to_tiny_dtype(out.scalar_type())));
  return out;
}

at::ScalarType index_dtype(bool out_int32) { return out_int32 ? at::kInt : at::kLong; }

at::Tensor searchsorted_tensor(const at::Tensor& sorted_sequence, const at::Tensor& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  at::Tensor out = empty_tiny({0}, index_dtype(out_int32), self.device());
  return searchsorted_out(sorted_sequence, self, out_int32, right, side, sorter, out);
}

at::Tensor& searchsorted_scalar_out(const at::Tensor& sorted_sequence, const at::Scalar& self, bool out_int32,
                                    bool right, std::optional<c10::string_view> side,
                                    const std::optional<at::Tensor>& sorter, at::Tensor& out) {
  return searchsorted_out(sorted_sequence, at::native::searchsorted_scalar_tensor(self, sorted_sequence.device()),
                          out_int32, right, side, sorter, out);
}

at::Tensor searchsorted_scalar(const at::Tensor& sorted_sequence, const at::Scalar& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  at::Tensor out = empty_tiny({0}, index_dtype(out_int32), sorted_sequence.device());
  return searchsorted_scalar_out(sorted_sequence, self, out_int32, right, side, sorter, out);
}

at::Tensor& bucketize_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right,
                          at::Tensor& out) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, out);
}

at::Tensor bucketize_tensor(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  at::Tensor out = empty_tiny({0}, index_dtype(out_int32), self.device());
  return bucketize_out(self, boundaries, out_int32, right, out);
}

at::Tensor bucketize_scalar(const at::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  return bucketize_tensor(at::native::searchsorted_scalar_tensor(self, boundaries.device()), boundaries, out_int32,
                          right);
}

// torch's mode.values kernel is composite but accepts CPU, CUDA and XPU tensors only: the functional
// mode (aten_ops/mode.cpp), its results written into values and indices.
std::tuple<at::Tensor&, at::Tensor&> mode_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                              at::Tensor& indices) {
  TORCH_CHECK(self.device() == values.device() && self.device() == indices.device(),
              "mode: expected input, values and indices on the same device, got ", self.device(), ", ", values.device(),
              " and ", indices.device());
  TORCH_CHECK(self.scalar_type() == values.scalar_type(), "mode: expected values tensor to have the dtype ",
              self.scalar_type(), " of the input, got ", values.scalar_type());
  TORCH_CHECK(indices.scalar_type() == at::kLong, "mode: expected indices tensor to have dtype Long, got ",
              indices.scalar_type());
  auto [v, i] = at::mode(self, dim, keepdim);
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

// ---- median, nanmedian ----

// torch's lower median along dim and its index, from the stable sort (NaN last): element (k - 1) / 2 of the
// k numbers for nanmedian (the first NaN when all are NaN); for median the first NaN when there is one.
std::tuple<at::Tensor, at::Tensor> median_along(const at::Tensor& self, int64_t dim, bool keepdim, bool ignore_nan) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  const char* name = ignore_nan ? "nanmedian()" : "median()";
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) > 0, name, ": Expected reduction dim ", dim,
                    " to have non-zero size.");
  if (self.dim() == 0) return {self.clone(), at::zeros({}, self.options().dtype(at::kLong))};
  auto [sorted, order] = at::sort(self, /*stable=*/true, dim, /*descending=*/false);
  at::Tensor numbers = at::eq(sorted, sorted).sum(dim, /*keepdim=*/true); // int64: the non-NaN count
  at::Tensor lower = at::floor_divide(at::clamp_min(numbers.sub(1), 0), 2);
  at::Tensor pos = ignore_nan ? lower : at::where(numbers.lt(self.size(dim)), numbers, lower);
  at::Tensor values = sorted.gather(dim, pos), indices = order.gather(dim, pos);
  if (!keepdim) return {values.squeeze(dim), indices.squeeze(dim)};
  return {values, indices};
}

template <bool IgnoreNan>
std::tuple<at::Tensor&, at::Tensor&> median_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                    at::Tensor& values, at::Tensor& indices) {
  const char* name = IgnoreNan ? "nanmedian" : "median";
  TORCH_CHECK(self.scalar_type() == values.scalar_type(), name, "(): Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", values.scalar_type(), " instead");
  TORCH_CHECK(indices.scalar_type() == at::kLong, name, "(): Expected out tensor to have dtype Long, but got ",
              indices.scalar_type(), " instead");
  auto [v, i] = median_along(self, dim, keepdim, IgnoreNan);
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

template <bool IgnoreNan>
std::tuple<at::Tensor, at::Tensor> median_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return median_along(self, dim, keepdim, IgnoreNan);
}

// Over every element: an empty input gives NaN (converted to the dtype, as the CPU).
template <bool IgnoreNan> at::Tensor median_all(const at::Tensor& self) {
  if (self.numel() == 0) return at::full({}, NAN, self.options().dtype(at::kDouble)).to(self.scalar_type());
  return std::get<0>(median_along(self.reshape({-1}), 0, false, IgnoreNan));
}

template <bool IgnoreNan> at::Tensor& median_all_out(const at::Tensor& self, at::Tensor& out) {
  at::Tensor v = median_all<IgnoreNan>(self);
  at::native::resize_output(out, v.sizes());
  out.copy_(v);
  return out;
}

// ---- unique (torch.unique without dim), unique_consecutive ----

// The runs of equal neighbours in `values` (1-D; NaNs are never equal, so each is its own run): the first
// element of each run, and on request the run of every element (put back in input order through `order`,
// the input position of each element of `values`, when it is defined) and the length of each run. The number
// of runs sizes the result: the run starts are read to the host (one sync, in masked_select); the rest is lazy.
std::tuple<at::Tensor, at::Tensor, at::Tensor> runs_of(const at::Tensor& values, const at::Tensor& order,
                                                       at::IntArrayRef input_sizes, bool return_inverse,
                                                       bool return_counts) {
  at::TensorOptions longs = values.options().dtype(at::kLong);
  int64_t n = values.numel();
  at::Tensor inverse = at::empty(return_inverse ? input_sizes : at::IntArrayRef{0}, longs);
  at::Tensor counts = at::empty({0}, longs);
  if (n == 0) return {values.clone(), inverse, counts};
  at::Tensor starts = at::cat(
      {at::ones({1}, values.options().dtype(at::kBool)), at::ne(values.slice(0, 1), values.slice(0, 0, n - 1))});
  // uint16/32/64 select through a signed view of their bits: the CPU has no masked_select for them, and
  // tiny's refuses them as the CPU does
  at::ScalarType st = values.scalar_type();
  at::ScalarType bits = st == at::kUInt16   ? at::kShort
                        : st == at::kUInt32 ? at::kInt
                        : st == at::kUInt64 ? at::kLong
                                            : st;
  at::Tensor first = at::masked_select(values.view(bits), starts).view(st);
  // scatters straight into the buffers: the positions are valid by construction, so no range check (a sync)
  UOpPtr run = reshape(read(at::cumsum(starts, 0).sub_(1)), {n});
  UOpPtr zeros = expand(reshape(const_int(DType::Int64, 0), {1}), {n});
  if (return_inverse) {
    at::Tensor flat = empty_tiny({n}, at::kLong, values.device());
    if (order.defined()) {
      write(flat, zeros);
      lazy_buffer(flat).scatter(DType::Int64, reshape(read(order), {n}), run, std::nullopt);
    } else {
      write(flat, run);
    }
    inverse = flat.reshape(input_sizes);
  }
  if (return_counts) {
    int64_t k = first.numel();
    counts = empty_tiny({k}, at::kLong, values.device());
    write(counts, expand(reshape(const_int(DType::Int64, 0), {1}), {k}));
    lazy_buffer(counts).scatter(DType::Int64, run, expand(reshape(const_int(DType::Int64, 1), {1}), {n}), Ops::ADD);
  }
  return {first, inverse, counts};
}

// torch.unique: always sorted (stably, NaNs last), which is also what the CPU gives for sorted=False.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool /*sorted*/, bool return_inverse,
                                                       bool return_counts) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  // bools sort as bytes
  if (self.scalar_type() == at::kBool) {
    auto [values, inverse, counts] = unique2(self.to(at::kByte), true, return_inverse, return_counts);
    return {values.to(at::kBool), inverse, counts};
  }
  at::Tensor flat = self.reshape({-1});
  if (flat.numel() == 0) return runs_of(flat, at::Tensor(), self.sizes(), return_inverse, return_counts);
  auto [values, order] = at::sort(flat, /*stable=*/true, 0, /*descending=*/false);
  return runs_of(values, order, self.sizes(), return_inverse, return_counts);
}

// torch._unique, unique's older form: as _unique2 without the counts (the CPU sorts for sorted=False too).
std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  auto result = unique2(self, sorted, return_inverse, false);
  return {std::get<0>(result), std::get<1>(result)};
}

// torch.unique(dim=) and unique_consecutive(dim=): the slices along dim as rows (n, m). unique sorts the rows
// lexicographically first, as m stable sorts by one column each from the last column to the first (the order
// among equal rows does not matter: they are one run). A row starts a run when it differs from the one before
// in any column; the run starts are read to the host (one sync, in nonzero) and the inverse and the counts are
// SCATTERs, as for runs_of. Like the CPU, both are always computed.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_slices(const at::Tensor& self, int64_t dim, bool sort_rows) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::TensorOptions longs = self.options().dtype(at::kLong);
  int64_t zero_dims = std::count(self.sizes().begin(), self.sizes().end(), 0);
  if (self.size(dim) == 0) {
    TORCH_CHECK(zero_dims == 1, "Number of zero sized dimensions is more than one, so unique cannot be applied ");
    return {at::empty(self.sizes(), self.options()), at::empty({0}, longs), at::empty({0}, longs)};
  }
  TORCH_CHECK(zero_dims == 0, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  // bools sort as bytes
  at::Tensor values = self.scalar_type() == at::kBool ? self.to(at::kByte) : self;
  at::Tensor moved = values.movedim(dim, 0);
  int64_t n = moved.size(0);
  at::Tensor rows = moved.reshape({n, -1});
  int64_t m = rows.size(1);
  at::Tensor order = at::arange(n, longs);
  if (sort_rows) {
    for (int64_t c = m - 1; c >= 0; c--) {
      at::Tensor keys = rows.select(1, c).index_select(0, order);
      order = order.index_select(0, std::get<1>(at::sort(keys, /*stable=*/true, 0, /*descending=*/false)));
    }
    rows = rows.index_select(0, order);
  }
  at::Tensor starts = at::ones({1}, self.options().dtype(at::kBool));
  if (n > 1) starts = at::cat({starts, at::ne(rows.slice(0, 1), rows.slice(0, 0, n - 1)).any(1)});
  at::Tensor first = at::nonzero(starts).reshape({-1});
  int64_t k = first.numel();
  std::vector<int64_t> shape(moved.sizes().begin(), moved.sizes().end());
  shape[0] = k;
  at::Tensor output = rows.index_select(0, first).reshape(shape).movedim(0, dim);
  if (self.scalar_type() == at::kBool) output = output.to(at::kBool);
  // the run of each sorted row, put back at its input position
  UOpPtr run = reshape(read(at::cumsum(starts, 0).sub_(1)), {n});
  at::Tensor inverse = empty_tiny({n}, at::kLong, self.device());
  if (sort_rows) {
    write(inverse, expand(reshape(const_int(DType::Int64, 0), {1}), {n}));
    lazy_buffer(inverse).scatter(DType::Int64, reshape(read(order), {n}), run, std::nullopt);
  } else {
    write(inverse, run);
  }
  at::Tensor counts = empty_tiny({k}, at::kLong, self.device());
  write(counts, expand(reshape(const_int(DType::Int64, 0), {1}), {k}));
  lazy_buffer(counts).scatter(DType::Int64, run, expand(reshape(const_int(DType::Int64, 1), {1}), {n}), Ops::ADD);
  return {output, inverse, counts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim, bool /*sorted*/,
                                                          bool /*return_inverse*/, bool /*return_counts*/) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  return unique_slices(self, dim, true);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  if (dim.has_value() && self.dim() > 1) return unique_slices(self, *dim, false);
  return runs_of(self.reshape({-1}), at::Tensor(), self.sizes(), return_inverse, return_counts);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("mode.values", TORCH_FN(mode_out));
  m.impl("_unique", TORCH_FN(unique), UnsignedPolicy::Native);
  m.impl("_unique2", TORCH_FN(unique2), UnsignedPolicy::Native);
  m.impl("unique_consecutive", TORCH_FN(unique_consecutive), UnsignedPolicy::Native);
  m.impl("unique_dim", TORCH_FN(unique_dim), UnsignedPolicy::Native);
  m.impl("median", TORCH_FN(median_all<false>));
  m.impl("median.out", TORCH_FN(median_all_out<false>));
  m.impl("median.dim", TORCH_FN(median_dim<false>));
  m.impl("median.dim_values", TORCH_FN(median_dim_out<false>));
  m.impl("nanmedian", TORCH_FN(median_all<true>));
  m.impl("nanmedian.out", TORCH_FN(median_all_out<true>));
  m.impl("nanmedian.dim", TORCH_FN(median_dim<true>));
  m.impl("nanmedian.dim_values", TORCH_FN(median_dim_out<true>));
  m.impl("searchsorted.Tensor", TORCH_FN(searchsorted_tensor));
  m.impl("searchsorted.Tensor_out", TORCH_FN(searchsorted_out));
  m.impl("searchsorted.Scalar", TORCH_FN(searchsorted_scalar));
  m.impl("searchsorted.Scalar_out", TORCH_FN(searchsorted_scalar_out));
  m.impl("bucketize.Tensor", TORCH_FN(bucketize_tensor));
  m.impl("bucketize.Tensor_out", TORCH_FN(bucketize_out));
  m.impl("bucketize.Scalar", TORCH_FN(bucketize_scalar));
  m.impl("sort.values_stable", TORCH_FN(sort_out), UnsignedPolicy::Native);
  m.impl("topk.values", TORCH_FN(topk_out));
  m.impl("kthvalue.values", TORCH_FN(kthvalue_out));
}

} // namespace tiny::aten_ops
