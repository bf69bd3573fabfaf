// segment_reduce (sum, mean, max, min, prod over segments given by lengths or offsets along an axis) and
// _segment_reduce_backward.
//
// data is seen as (A, N, I): A the batch dims before the axis (lengths' leading dims), N the axis, I the dims
// after it. Segment s of batch a covers [start[a, s], end[a, s]) of N. Both directions are masked reductions
// over a (A, S, N, I) space where mask[a, s, j] says element j is in segment s: the forward reduces over j, the
// backward over s (an element is in one segment, so no scatter). Only the !unsafe checks of the lengths (none
// negative, every row summing to the axis' size) read to the host, as the CPU kernel does.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

enum class Reduce { Sum, Mean, Max, Min, Prod };

Reduce reduction(c10::string_view name) {
  if (name == "sum") return Reduce::Sum;
  if (name == "mean") return Reduce::Mean;
  if (name == "max") return Reduce::Max;
  if (name == "min") return Reduce::Min;
  if (name == "prod") return Reduce::Prod;
  TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", name);
}

// The (A, S, N, I) space of one call and the mask of which element is in which segment.
struct Segments {
  int64_t A, S, N, I;
  UOpPtr mask;  // (A, S, N, I) bool
  UOpPtr count; // (A, S, 1, I) the segment's length, in the compute dtype
  Shape space() const { return {A, S, N, I}; }
};

// The bounds of the segments as (A, S) int64 tiny tensors.
std::pair<at::Tensor, at::Tensor> bounds(const at::Tensor& lengths, const at::Tensor& offsets) {
  if (offsets.defined()) {
    at::Tensor o = offsets.to(at::kLong);
    int64_t last = o.dim() - 1, k = o.size(last);
    return {o.narrow(last, 0, std::max<int64_t>(k - 1, 0)), o.narrow(last, std::min<int64_t>(k, 1), k - 1)};
  }
  at::Tensor l = lengths.to(at::kLong), ends = at::cumsum(l, -1);
  return {ends - l, ends};
}

Segments segments(const at::Tensor& data, const at::Tensor& lengths, const at::Tensor& offsets, int64_t axis,
                  DType ct) {
  Segments seg{1, 0, data.size(axis), 1, nullptr, nullptr};
  for (int64_t d = 0; d < axis; d++)
    seg.A *= data.size(d);
  for (int64_t d = axis + 1; d < data.dim(); d++)
    seg.I *= data.size(d);
  auto [starts, ends] = bounds(lengths, offsets);
  seg.S = starts.size(-1);
  TORCH_CHECK(starts.numel() == seg.A * seg.S, "segment_reduce(): Expected ", offsets.defined() ? "offsets" : "lengths",
              " to have the batch sizes of data before axis ", axis, ", got ", data.sizes(), " and ",
              (offsets.defined() ? offsets : lengths).sizes());
  Shape space = seg.space(), per{seg.A, seg.S, 1, 1};
  UOpPtr lo = expand(reshape(read(starts.contiguous()), per), space);
  UOpPtr hi = expand(reshape(read(ends.contiguous()), per), space);
  UOpPtr j = expand(reshape(iota(seg.N, DType::Int64), {1, 1, seg.N, 1}), space);
  seg.mask = alu(Ops::AND, le(lo, j), lt(j, hi));
  Shape kept{seg.A, seg.S, 1, seg.I};
  seg.count = cast(expand(reshape(read((ends - starts).contiguous()), per), kept), ct);
  return seg;
}

// x (data's shape) in the compute dtype, seen as (A, 1, N, I) and spread over the segments.
UOpPtr spread(const at::Tensor& x, const Segments& seg, DType ct) {
  return expand(reshape(cast(read(x), ct), {seg.A, 1, seg.N, seg.I}), seg.space());
}

double identity(Reduce r) {
  switch (r) {
  case Reduce::Max:
    return -std::numeric_limits<double>::infinity();
  case Reduce::Min:
    return std::numeric_limits<double>::infinity();
  case Reduce::Prod:
    return 1;
  default:
    return 0;
  }
}

Ops combine(Reduce r) {
  switch (r) {
  case Reduce::Max:
    return Ops::MAX;
  case Reduce::Min:
    return Ops::MIN;
  case Reduce::Prod:
    return Ops::MUL;
  default:
    return Ops::ADD;
  }
}

void check_data(const at::Tensor& data, const at::Tensor& index, const char* kernel) {
  at::ScalarType it = index.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(it == at::kInt || it == at::kLong, "\"", kernel, "\" not implemented for '", it, "'");
  at::ScalarType st = data.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st), "\"_segment_reduce_cpu\" not implemented for '", st, "'");
}

at::Tensor segment_reduce(const at::Tensor& data, c10::string_view reduce_name,
                          const std::optional<at::Tensor>& lengths_in, const std::optional<at::Tensor>& indices,
                          const std::optional<at::Tensor>& offsets_in, int64_t axis, bool unsafe,
                          const std::optional<at::Scalar>& initial) {
  (void)indices; // torch's CPU kernel takes it and ignores it too
  axis = at::maybe_wrap_dim(axis, data.dim());
  at::Tensor lengths = lengths_in.value_or(at::Tensor()), offsets = offsets_in.value_or(at::Tensor());
  TORCH_CHECK(lengths.defined() || offsets.defined(), "segment_reduce(): Either lengths or offsets must be defined.");
  Reduce r = reduction(reduce_name);
  const at::Tensor& index = offsets.defined() ? offsets : lengths;
  const char* name = offsets.defined() ? "offsets" : "lengths";
  TORCH_CHECK(index.device() == data.device(), "segment_reduce(): Expected data and ", name,
              " on the same device, got ", data.device(), " and ", index.device());
  TORCH_CHECK(data.dim() >= index.dim(), "segment_reduce(): Expected data.dim() >= ", name, ".dim()");
  if (!offsets.defined() && !unsafe) {
    // the CPU's checks of the lengths: two values read to the host
    TORCH_CHECK(lengths.min().item<int64_t>() >= 0, "lengths contains negative value!");
    TORCH_CHECK(at::all(lengths.sum({-1}) == data.size(axis)).item<bool>(),
                "segment_reduce(): Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) "
                "when !unsafe.");
  }
  TORCH_CHECK(axis == index.dim() - 1, "segment_reduce(): Expected axis to be the last dimension of ", name,
              " but got ", axis, ".");
  check_data(data, index,
             offsets.defined() ? "_segment_reduce_offsets_cpu_kernel1" : "_segment_reduce_lengths_cpu_kernel1");

  DType dt = to_tiny_dtype(data.scalar_type()), ct = opmath(dt);
  std::vector<int64_t> shape(data.sizes().begin(), data.sizes().end());
  shape[static_cast<size_t>(axis)] = index.size(-1) - (offsets.defined() ? 1 : 0);
  at::Tensor out = empty_tiny(shape, data.scalar_type(), data.device());
  if (out.numel() == 0) return out;

  Segments seg = segments(data, lengths, offsets, axis, ct);
  Shape kept{seg.A, seg.S, 1, seg.I};
  bool has_initial = initial.has_value();
  UOpPtr init = has_initial ? scalar_constant(*initial, ct, kept) : nullptr;
  UOpPtr v = where(seg.mask, spread(data, seg, ct), fixed(ct, identity(r), seg.space()));
  UOpPtr result = reduce(v, combine(r), {2});
  if (has_initial) result = alu(combine(r), init, result);
  if (r == Reduce::Mean) {
    UOpPtr empty = alu(Ops::CMPEQ, seg.count, fixed(ct, 0, kept));
    UOpPtr mean = div(result, where(empty, fixed(ct, 1, kept), seg.count));
    result = where(empty, has_initial ? init : fixed(ct, NAN, kept), mean);
  }
  write(out, reshape(cast(result, dt), to_shape(out.sizes())));
  return out;
}

at::Tensor segment_reduce_backward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& data,
                                   c10::string_view reduce_name, const std::optional<at::Tensor>& lengths_in,
                                   const std::optional<at::Tensor>& offsets_in, int64_t axis,
                                   const std::optional<at::Scalar>& initial) {
  axis = at::maybe_wrap_dim(axis, data.dim());
  at::Tensor lengths = lengths_in.value_or(at::Tensor()), offsets = offsets_in.value_or(at::Tensor());
  TORCH_CHECK(lengths.defined() || offsets.defined(), "segment_reduce(): Either lengths or offsets must be defined.");
  TORCH_CHECK(grad.sizes() == output.sizes(), "segment_reduce(): Expected grad and output to have the same sizes.");
  Reduce r = reduction(reduce_name);
  const at::Tensor& index = offsets.defined() ? offsets : lengths;
  check_data(data, index,
             offsets.defined() ? "_segment_reduce_cpu_offsets_backward_kernel1"
                               : "_segment_reduce_cpu_lengths_backward_kernel1");
  at::Tensor grad_input = empty_tiny(data.sizes(), data.scalar_type(), data.device());
  if (data.numel() == 0) return grad_input;
  DType dt = to_tiny_dtype(data.scalar_type()), ct = opmath(dt);
  Segments seg = segments(data, lengths, offsets, axis, ct);
  Shape space = seg.space(), kept{seg.A, seg.S, 1, seg.I};
  UOpPtr zero = fixed(ct, 0, space);
  UOpPtr g = cast(reshape(read(grad), kept), ct), x = spread(data, seg, ct);
  auto over_space = [&](const UOpPtr& k) { return expand(k, space); };
  UOpPtr share; // (A, S, N, I): what element j gets from segment s
  switch (r) {
  case Reduce::Sum:
    share = where(seg.mask, over_space(g), zero);
    break;
  case Reduce::Mean: {
    UOpPtr n = where(alu(Ops::CMPEQ, seg.count, fixed(ct, 0, kept)), fixed(ct, 1, kept), seg.count);
    share = where(seg.mask, over_space(div(g, n)), zero);
    break;
  }
  case Reduce::Max:
  case Reduce::Min: {
    // the elements equal to the result (NaN matching NaN) get its gradient; the CPU kernel then divides the
    // positive ones (only: it picks them by grad_input > 0) by the number of ties
    UOpPtr y = over_space(cast(reshape(read(output), kept), ct));
    UOpPtr hit = alu(Ops::OR, alu(Ops::CMPEQ, x, y), alu(Ops::AND, alu(Ops::CMPNE, x, x), alu(Ops::CMPNE, y, y)));
    hit = alu(Ops::AND, seg.mask, hit);
    UOpPtr ties = reduce(where(hit, fixed(ct, 1, space), zero), Ops::ADD, {2});
    UOpPtr shared = where(lt(fixed(ct, 0, kept), g), div(g, ties), g);
    share = where(hit, over_space(shared), zero);
    break;
  }
  case Reduce::Prod: {
    // grad * output / x, except at a zero or NaN x: grad times the product of the segment's other elements
    // (the initial value included), which is the product of its ordinary elements times 0 or NaN when
    // another element is one.
    UOpPtr y = over_space(cast(reshape(read(output), kept), ct));
    UOpPtr is_nan = alu(Ops::CMPNE, x, x), is_zero = alu(Ops::CMPEQ, x, zero);
    UOpPtr special = alu(Ops::OR, is_nan, is_zero), one = fixed(ct, 1, space);
    UOpPtr ordinary = reduce(where(seg.mask, where(special, one, x), one), Ops::MUL, {2});
    if (initial.has_value()) ordinary = mul(ordinary, scalar_constant(*initial, ct, kept));
    auto count_of = [&](const UOpPtr& flag) {
      return over_space(reduce(where(alu(Ops::AND, seg.mask, flag), one, zero), Ops::ADD, {2}));
    };
    UOpPtr nans = sub(count_of(is_nan), where(is_nan, one, zero));
    UOpPtr zeros = sub(count_of(is_zero), where(is_zero, one, zero));
    UOpPtr others = where(lt(zero, nans), fixed(ct, NAN, space), where(lt(zero, zeros), zero, over_space(ordinary)));
    UOpPtr gs = over_space(g);
    share = where(seg.mask, where(special, mul(gs, others), div(mul(gs, y), x)), zero);
    break;
  }
  }
  UOpPtr result = sum_keep(share, {1}); // (A, 1, N, I)
  write(grad_input, reshape(cast(result, dt), to_shape(data.sizes())));
  return grad_input;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("segment_reduce", TORCH_FN(segment_reduce));
  m.impl("_segment_reduce_backward", TORCH_FN(segment_reduce_backward));
}

} // namespace tiny::aten_ops
