// Histograms: histc, histogram (a bin count or a tensor of bin edges) and the ops torch.histogramdd is built
// from (_histogramdd_bin_edges, _histogramdd_from_bin_cts, _histogramdd_from_bin_tensors), with torch's checks
// and messages, weights and density.
//
// Counting is a one-hot sum: in the (bins_0, ..., bins_{D-1}, rows) space each bin tests every row and sums
// the weights (1 without weights) of the rows it holds, one reduction over the rows, fused with the tests
// into one kernel; counts of ones are exact in float. A bin holds its left edge and not its right one, except
// the last bin of each dim, which holds both; a row outside the edges of some dim (or NaN) counts nowhere.
// For sorted edges that is the bin the CPU's binary search (and its linear guess corrected by a local search,
// for edges from linspace) picks. histc picks the bin as the CPU's histc does, by linear interpolation in the
// input dtype, (x - min) * bins / (max - min) truncated, so values next to an edge land where the CPU puts them.
//
// When no range is given, the range is the data's (amin and amax read to the host, a sync), as on the CPU:
// the range's checks (finite, min <= max) depend on it. The CPU accumulates float16/bfloat16 histograms in
// their own dtype; tiny sums in float32 and rounds once.

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using Range = std::optional<at::ArrayRef<double>>;

// torch's histogramdd_check_inputs: input (M, N) as the kernels see it, one 1-D edge tensor per column.
void check_inputs(const at::Tensor& input, at::TensorList bins, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(input.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ",
              input.dim());
  const int64_t n = input.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == n, "torch.histogramdd: expected ", n,
              " sequences of bin edges for a ", n, "-dimensional histogram but got ", bins.size());
  for (int64_t d = 0; d < n; d++) {
    const at::Tensor& edges = bins[static_cast<size_t>(d)];
    TORCH_CHECK(input.dtype() == edges.dtype(), "torch.histogramdd: input tensor and bins tensors should have the ",
                "same dtype, but got input with dtype ", input.dtype(), " and bins for dimension ", d, " with dtype ",
                edges.dtype());
    TORCH_CHECK(edges.dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ", edges.dim(),
                " dimensions in the bins tensor for dimension ", d);
    TORCH_CHECK(edges.numel() > 0, "torch.histogramdd: bins tensor should have at least 1 element, but got ",
                edges.numel(), " elements in the bins tensor for dimension ", d);
  }
  if (!weight) return;
  TORCH_CHECK(input.dtype() == weight->dtype(), "torch.histogramdd: if weight tensor is provided, input tensor and ",
              "weight tensor should have the same dtype, but got input(", input.dtype(), "), and weight(",
              weight->dtype(), ")");
  std::vector<int64_t> rows = input.sizes().vec(), weight_sizes = weight->sizes().vec();
  rows.pop_back();
  if (weight_sizes.empty()) weight_sizes = {1};
  TORCH_CHECK(rows == weight_sizes, "torch.histogramdd: if weight tensor is provided it should have the same shape ",
              "as the input tensor excluding its innermost dimension, but got input with shape ", input.sizes(),
              " and weight with shape ", weight->sizes());
}

// torch's histogramdd_prepare_out: checks the outputs' dtypes and the bin counts, then resizes the outputs.
void prepare_out(const at::Tensor& input, const std::vector<int64_t>& bin_ct, const at::Tensor& hist,
                 at::TensorList bin_edges) {
  TORCH_CHECK(input.dtype() == hist.dtype(), "torch.histogram: input tensor and hist tensor should have the same ",
              "dtype, but got input ", input.dtype(), " and hist ", hist.dtype());
  for (size_t d = 0; d < bin_ct.size(); d++) {
    TORCH_CHECK(input.dtype() == bin_edges[d].dtype(), "torch.histogram: input tensor and bin_edges tensor should ",
                "have the same dtype, but got input ", input.dtype(), " and bin_edges ", bin_edges[d].dtype(),
                " for dimension ", d);
    TORCH_CHECK(bin_ct[d] > 0, "torch.histogram(): bins must be > 0, but got ", bin_ct[d], " for dimension ", d);
    at::native::resize_output(bin_edges[d], {bin_ct[d] + 1});
  }
  at::native::resize_output(hist, bin_ct);
}

std::vector<int64_t> edge_counts(at::TensorList bins) {
  std::vector<int64_t> ct;
  for (const at::Tensor& b : bins)
    ct.push_back(b.numel() - 1);
  return ct;
}

// The counting kernels take float dtypes only, as the CPU's ("histogram_cpu" not implemented for 'Long').
void check_float(const at::Tensor& input, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()), "\"", kernel, "\" not implemented for '",
                              input.scalar_type(), "'");
}

// torch's select_outer_bin_edges for input (M, N): the given range, else the data's per column ([0, 1] when
// empty); an empty range widens by 0.5 each way.
std::pair<std::vector<double>, std::vector<double>> outer_edges(const at::Tensor& input, Range range) {
  const int64_t n = input.size(-1);
  std::vector<double> lo(static_cast<size_t>(n), 0.0), hi(static_cast<size_t>(n), 1.0);
  if (range) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * n, "torch.histogramdd: for a ", n,
                "-dimensional histogram range should have ", 2 * n, " elements, but got ", range->size());
    for (size_t d = 0; d < lo.size(); d++) {
      lo[d] = (*range)[2 * d];
      hi[d] = (*range)[2 * d + 1];
    }
  } else if (input.numel() > 0) {
    at::ScalarType st = input.scalar_type();
    TORCH_CHECK_NOT_IMPLEMENTED(st == at::kFloat || st == at::kDouble, "\"histogramdd\" not implemented for '", st,
                                "'");
    at::Tensor extremes = at::stack({at::amin(input, 0), at::amax(input, 0)}).to(at::kDouble).cpu();
    auto e = extremes.accessor<double, 2>();
    for (int64_t d = 0; d < n; d++) {
      lo[static_cast<size_t>(d)] = e[0][d];
      hi[static_cast<size_t>(d)] = e[1][d];
    }
  }
  for (size_t d = 0; d < lo.size(); d++) {
    TORCH_CHECK(std::isfinite(lo[d]) && std::isfinite(hi[d]), "torch.histogramdd: dimension ", d, "'s range [", lo[d],
                ", ", hi[d], "] is not finite");
    TORCH_CHECK(lo[d] <= hi[d], "torch.histogramdd: min should not exceed max, but got min ", lo[d], " max ", hi[d],
                " for dimension ", d);
    if (lo[d] == hi[d]) {
      lo[d] -= 0.5;
      hi[d] += 0.5;
    }
  }
  return {lo, hi};
}

// histc's range: [min, max], the data's when they are equal, widened by 1 each way when still empty.
std::pair<double, double> histc_range(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  double lo = min.to<double>(), hi = max.to<double>();
  if (lo == hi && self.numel() > 0) {
    at::Tensor extremes = at::stack({self.amin(), self.amax()}).to(at::kDouble).cpu();
    lo = extremes[0].item<double>();
    hi = extremes[1].item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  return {lo, hi};
}

// x of `space`'s shape along `axis` only: (n) reshaped to size 1 elsewhere, then broadcast.
UOpPtr along_axis(const UOpPtr& x, size_t axis, const Shape& space) {
  Shape shape(space.size(), 1);
  shape[axis] = x->shape[0];
  return expand(reshape(x, shape), space);
}

// Bin b of n: true for the last bin (b == n - 1), the one that also holds its right edge.
UOpPtr is_last_bin(int64_t n) { return alu(Ops::CMPEQ, iota(n, DType::Int32), fixed(DType::Int32, n - 1, {n})); }

// The weights of the rows summed per bin: `inside` (bins..., rows) says which bin holds which row.
UOpPtr sum_rows(const UOpPtr& inside, const std::optional<at::Tensor>& weight, DType ct) {
  const Shape& space = inside->shape;
  size_t rows_axis = space.size() - 1;
  UOpPtr w =
      weight ? along_axis(reshape(cast(read(*weight), ct), {space.back()}), rows_axis, space) : fixed(ct, 1, space);
  UOpPtr counts = sum_keep(where(inside, w, fixed(ct, 0, space)), {static_cast<int64_t>(rows_axis)});
  return reshape(counts, Shape(space.begin(), space.end() - 1));
}

// The histogram of input (M, N) over the edges (one (bins + 1) tensor per column), in compute dtype ct.
UOpPtr count_in_bins(const at::Tensor& input, const std::vector<at::Tensor>& edges,
                     const std::optional<at::Tensor>& weight, DType ct) {
  const int64_t rows = input.size(0);
  Shape space;
  for (const at::Tensor& e : edges)
    space.push_back(e.numel() - 1);
  space.push_back(rows);
  UOpPtr x = read(input), inside;
  for (size_t d = 0; d < edges.size(); d++) {
    const int64_t bins = space[d];
    const auto col = static_cast<int64_t>(d);
    UOpPtr v = along_axis(reshape(shrink(x, {{0, rows}, {col, col + 1}}), {rows}), space.size() - 1, space);
    UOpPtr e = read(edges[d]);
    UOpPtr lo = along_axis(shrink(e, {{0, bins}}), d, space), hi = along_axis(shrink(e, {{1, bins + 1}}), d, space);
    UOpPtr below_right = alu(Ops::OR, lt(v, hi), alu(Ops::AND, along_axis(is_last_bin(bins), d, space), le(v, hi)));
    UOpPtr in_dim = alu(Ops::AND, le(lo, v), below_right);
    inside = inside ? alu(Ops::AND, inside, in_dim) : in_dim;
  }
  return sum_rows(inside, weight, ct);
}

// density: each bin's share of the total, divided by the bin's volume (its length in each dim).
UOpPtr to_density(UOpPtr hist, const std::vector<at::Tensor>& edges, DType ct) {
  std::vector<int64_t> all(hist->shape.size());
  for (size_t d = 0; d < all.size(); d++)
    all[d] = static_cast<int64_t>(d);
  hist = div(hist, expand(reduce(hist, Ops::ADD, all), hist->shape));
  for (size_t d = 0; d < edges.size(); d++) {
    UOpPtr e = cast(read(edges[d]), ct);
    const int64_t bins = e->shape[0] - 1;
    hist = div(hist, along_axis(sub(shrink(e, {{1, bins + 1}}), shrink(e, {{0, bins}})), d, hist->shape));
  }
  return hist;
}

// The histogram of input (M, N) over `edges` into hist, prepared by prepare_out.
void write_histogram(const at::Tensor& input, const std::vector<at::Tensor>& edges,
                     const std::optional<at::Tensor>& weight, bool density, const at::Tensor& hist) {
  check_float(input, "histogram_cpu");
  DType dt = to_tiny_dtype(input.scalar_type()), ct = opmath(dt);
  Shape shape = to_shape(hist.sizes());
  if (edges.empty()) { // an (M, 0) input: a 0-dim histogram of nothing
    write(hist, fixed(dt, density ? NAN : 0, shape));
    return;
  }
  UOpPtr h = count_in_bins(input, edges, weight, ct);
  if (density) h = to_density(h, edges, ct);
  write(hist, cast(h, dt));
}

std::optional<at::Tensor> flat_weight(const std::optional<at::Tensor>& weight) {
  if (!weight) return std::nullopt;
  return weight->reshape({weight->numel()});
}

std::vector<at::Tensor> new_edges(const at::Tensor& self, int64_t n) {
  std::vector<at::Tensor> edges;
  for (int64_t d = 0; d < n; d++)
    edges.push_back(empty_tiny({0}, self.scalar_type(), self.device()));
  return edges;
}

// ---- histc ----

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                      at::Tensor& out) {
  check_same_device({self, out});
  at::Tensor edges = empty_tiny({0}, self.scalar_type(), self.device());
  prepare_out(self.reshape({self.numel(), 1}), {bins}, out, edges);
  auto [lo, hi] = histc_range(self, min, max);
  check_float(self, "histogram_cpu");
  DType dt = to_tiny_dtype(self.scalar_type());
  const int64_t n = self.numel();
  if (n == 0) {
    write(out, fixed(dt, 0, {bins}));
    return out;
  }
  // The CPU's arithmetic in the input dtype: (x - min) * bins / (max - min), truncated; x == max is the last bin.
  Shape rows{n};
  UOpPtr x = reshape(read(self), rows), left = scalar_constant(lo, dt, rows), right = scalar_constant(hi, dt, rows);
  UOpPtr pos = cast(div(mul(sub(x, left), fixed(dt, static_cast<double>(bins), rows)), sub(right, left)), DType::Int64);
  pos = alu(Ops::MIN, pos, fixed(DType::Int64, bins - 1, rows));
  UOpPtr valid = alu(Ops::AND, le(left, x), le(x, right));
  Shape space{bins, n};
  UOpPtr bin = along_axis(iota(bins, DType::Int64), 0, space);
  UOpPtr inside = alu(Ops::AND, along_axis(valid, 1, space), alu(Ops::CMPEQ, along_axis(pos, 1, space), bin));
  write(out, cast(sum_rows(inside, std::nullopt, opmath(dt)), dt));
  return out;
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return histc_out(self, bins, min, max, out);
}

// ---- histogram ----

std::tuple<at::Tensor&, at::Tensor&> histogram_edges_out(const at::Tensor& self, const at::Tensor& bins,
                                                         const std::optional<at::Tensor>& weight, bool density,
                                                         at::Tensor& hist, at::Tensor& bin_edges) {
  check_same_device({self, bins, weight.value_or(at::Tensor()), hist, bin_edges});
  at::Tensor input = self.reshape({self.numel(), 1});
  std::optional<at::Tensor> w = flat_weight(weight);
  check_inputs(input, {bins}, w);
  prepare_out(input, edge_counts({bins}), hist, {bin_edges});
  bin_edges.copy_(bins);
  write_histogram(input, {bin_edges}, w, density, hist);
  return std::forward_as_tuple(hist, bin_edges);
}

std::tuple<at::Tensor, at::Tensor> histogram_edges(const at::Tensor& self, const at::Tensor& bins,
                                                   const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor hist = empty_tiny({0}, self.scalar_type(), self.device());
  at::Tensor bin_edges = empty_tiny({0}, bins.scalar_type(), self.device());
  histogram_edges_out(self, bins, weight, density, hist, bin_edges);
  return {hist, bin_edges};
}

std::tuple<at::Tensor&, at::Tensor&> histogram_count_out(const at::Tensor& self, int64_t bins, Range range,
                                                         const std::optional<at::Tensor>& weight, bool density,
                                                         at::Tensor& hist, at::Tensor& bin_edges) {
  check_same_device({self, weight.value_or(at::Tensor()), hist, bin_edges});
  at::Tensor input = self.reshape({self.numel(), 1});
  std::optional<at::Tensor> w = flat_weight(weight);
  prepare_out(input, {bins}, hist, {bin_edges});
  auto [lo, hi] = outer_edges(input, range);
  at::linspace_out(bin_edges, lo[0], hi[0], bins + 1);
  check_inputs(input, {bin_edges}, w);
  write_histogram(input, {bin_edges}, w, density, hist);
  return std::forward_as_tuple(hist, bin_edges);
}

std::tuple<at::Tensor, at::Tensor> histogram_count(const at::Tensor& self, int64_t bins, Range range,
                                                   const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor hist = empty_tiny({0}, self.scalar_type(), self.device());
  at::Tensor bin_edges = empty_tiny({0}, self.scalar_type(), self.device());
  histogram_count_out(self, bins, range, weight, density, hist, bin_edges);
  return {hist, bin_edges};
}

// ---- histogramdd ----

at::Tensor as_rows(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  return self.reshape({-1, self.size(-1)});
}

std::vector<at::Tensor> histogramdd_bin_edges(const at::Tensor& self, at::IntArrayRef bins, Range range,
                                              const std::optional<at::Tensor>& /*weight*/, bool /*density*/) {
  at::Tensor input = as_rows(self);
  const int64_t n = input.size(1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == n, "torch.histogramdd: expected ", n,
              " sequences of bin edges for a ", n, "-dimensional histogram but got ", bins.size());
  auto [lo, hi] = outer_edges(input, range);
  std::vector<at::Tensor> edges = new_edges(self, n);
  for (size_t d = 0; d < edges.size(); d++)
    at::linspace_out(edges[d], lo[d], hi[d], bins[d] + 1);
  return edges;
}

at::Tensor histogramdd_from_edges(const at::Tensor& self, at::TensorList bins, const std::optional<at::Tensor>& weight,
                                  bool density) {
  std::vector<at::Tensor> all(bins.begin(), bins.end());
  all.push_back(self);
  if (weight) all.push_back(*weight);
  check_same_device(all);
  at::Tensor input = as_rows(self);
  std::optional<at::Tensor> w = flat_weight(weight);
  check_inputs(self, bins, weight);
  at::Tensor hist = empty_tiny({0}, self.scalar_type(), self.device());
  std::vector<at::Tensor> edges = new_edges(self, input.size(1));
  prepare_out(input, edge_counts(bins), hist, edges);
  for (size_t d = 0; d < edges.size(); d++)
    edges[d].copy_(bins[d]);
  write_histogram(input, edges, w, density, hist);
  return hist;
}

at::Tensor histogramdd_from_counts(const at::Tensor& self, at::IntArrayRef bins, Range range,
                                   const std::optional<at::Tensor>& weight, bool density) {
  std::vector<at::Tensor> edges = histogramdd_bin_edges(self, bins, range, weight, density);
  return histogramdd_from_edges(self, edges, weight, density);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("histc", TORCH_FN(histc));
  m.impl("histc.out", TORCH_FN(histc_out));
  m.impl("histogram.bins_tensor", TORCH_FN(histogram_edges));
  m.impl("histogram.bins_tensor_out", TORCH_FN(histogram_edges_out));
  m.impl("histogram.bin_ct", TORCH_FN(histogram_count));
  m.impl("histogram.bin_ct_out", TORCH_FN(histogram_count_out));
  m.impl("_histogramdd_bin_edges", TORCH_FN(histogramdd_bin_edges));
  m.impl("_histogramdd_from_bin_cts", TORCH_FN(histogramdd_from_counts));
  m.impl("_histogramdd_from_bin_tensors", TORCH_FN(histogramdd_from_edges));
}

} // namespace tiny::aten_ops
