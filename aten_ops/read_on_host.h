#pragma once
// Small values an ATen kernel needs on the host at the call (a range to check, torch's data-dependent errors).

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/tensor_bridge.h"
#include "runtime/device.h"
#include "runtime/realize.h"

namespace tiny::aten_ops {

// Values computed now, each into a buffer of its own, without waiting for the queue: a step of a loop (a
// factorisation, a series) then reads buffers only, so its graph is the same at every step (the schedule
// cache replays it) and does not grow with the number of steps.
inline std::vector<UOpPtr> realize_now(const std::vector<UOpPtr>& values, runtime::Device& dev) {
  std::vector<UOpPtr> roots;
  for (const UOpPtr& v : values)
    roots.push_back(reshape(v, {prod(v->shape)}));
  std::vector<UOpPtr> out;
  {
    std::lock_guard lock(runtime::graph_mutex());
    out = runtime::realize_all(roots, &dev);
  }
  for (size_t i = 0; i < values.size(); i++)
    out[i] = reshape(out[i], values[i]->shape);
  return out;
}
inline UOpPtr realize_now(const UOpPtr& v, runtime::Device& dev) { return realize_now(std::vector<UOpPtr>{v}, dev)[0]; }

// Runs `steps` steps of a loop: state = step(state, k) for k = 0, 1, ... (or down from steps - 1). kStepsPerGraph
// steps are one graph, each step's values a realize boundary (CONTIGUOUS), realized together: fewer syncs.
// Each step's index is a runtime scalar of its own, so every step's kernels are the same programs (compiled
// once per shape) and every whole group has the same graph (it replays one cached schedule); a last,
// shorter group has one of its own.
constexpr int64_t kStepsPerGraph = 8;
template <class Step>
std::vector<UOpPtr> run_step_loop(std::vector<UOpPtr> state, int64_t steps, bool down, const Step& step,
                                  runtime::Device& dev) {
  for (int64_t first = 0; first < steps; first += kStepsPerGraph) {
    int64_t count = std::min(kStepsPerGraph, steps - first);
    for (int64_t t = first; t < first + count; t++) {
      state = step(state, var_int(kIndex, down ? steps - 1 - t : t));
      if (t + 1 < first + count)
        for (UOpPtr& v : state)
          v = reshape(contiguous(reshape(v, {prod(v->shape)})), v->shape);
    }
    state = realize_now(state, dev);
  }
  return state;
}

// The smallest and largest element of an integer tensor (bounds to check: class targets, indices), leaving out
// those equal to `skip` (an ignore_index), read straight from host memory where the elements are there already
// (see LazyBuffer::read_host_if_realized): no kernel runs and nothing pending is realized. nullopt where they are
// not there (pending, or on a GPU), or are more than kHostRangeElements: the caller computes them on the device.
// nll_loss's check of 64 targets after a training step: 130 us as a kernel read back, now a copy of 512 bytes.
constexpr int64_t kHostRangeElements = int64_t{1} << 20;
struct IntRange {
  int64_t min = std::numeric_limits<int64_t>::max(), max = std::numeric_limits<int64_t>::min();
  bool any = false; // some element counted
};
inline std::optional<IntRange> int_range_on_host(const at::Tensor& t, std::optional<int64_t> skip = std::nullopt) {
  const at::ScalarType st = t.scalar_type();
  if (t.device().type() != c10::DeviceType::PrivateUse1 || t.numel() > kHostRangeElements ||
      (st != at::kByte && st != at::kChar && st != at::kShort && st != at::kInt && st != at::kLong))
    return std::nullopt;
  at::Tensor host = at::empty({t.numel()}, at::TensorOptions().dtype(st));
  if (!lazy_buffer(t).read_host_if_realized(strided_view(t), host.data_ptr())) return std::nullopt;
  IntRange r;
  AT_DISPATCH_INTEGRAL_TYPES(st, "int_range_on_host", [&] {
    for (const scalar_t e : c10::ArrayRef<scalar_t>(host.const_data_ptr<scalar_t>(), t.numel())) {
      const auto v = static_cast<int64_t>(e);
      if (skip && v == *skip) continue;
      r.min = std::min(r.min, v), r.max = std::max(r.max, v), r.any = true;
    }
  });
  return r;
}

// Scalar int64 values computed on the device, read to the host: computed alone (their own small kernels,
// the work pending around the call stays lazy), or, when their graph writes a storage in place, by a sync.
inline std::vector<int64_t> read_on_host(const std::vector<UOpPtr>& values, c10::Device device) {
  int64_t n = static_cast<int64_t>(values.size());
  std::vector<UOpPtr> parts;
  for (const UOpPtr& v : values)
    parts.push_back(reshape(cast(v, DType::Int64), {1}));
  // concatenate: each value padded to n, summed
  UOpPtr all = fixed(DType::Int64, 0, {n});
  for (int64_t i = 0; i < n; i++)
    all = add(all, pad(parts[i], {{i, n - i - 1}}));
  if (runtime::evaluable_alone(all)) {
    std::vector<int64_t> out(static_cast<size_t>(n));
    runtime::evaluate_to_host(all, out.data(), runtime::device(device.index()));
    return out;
  }
  at::Tensor t = empty_tiny({n}, at::kLong, device);
  write(t, all);
  at::Tensor host = t.cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + n);
}

// int_range_on_host where the elements are in host memory, else computed on the device alone (small kernels: the
// work pending around the call stays lazy) and read back: the largest element, the largest complement (~min,
// without overflow) and the count, over the elements other than `skip`.
inline IntRange int_range(const at::Tensor& t, std::optional<int64_t> skip = std::nullopt) {
  if (t.numel() == 0) return {};
  if (std::optional<IntRange> r = int_range_on_host(t, skip)) return *r;
  UOpPtr v = reshape(cast(read(t), DType::Int64), {t.numel()});
  UOpPtr lowest = like(v, static_cast<double>(std::numeric_limits<int64_t>::min()));
  UOpPtr counted = skip ? alu(Ops::CMPNE, v, like(v, static_cast<double>(*skip))) : nullptr;
  auto among = [&](const UOpPtr& x) { return counted ? where(counted, x, lowest) : x; };
  std::vector<UOpPtr> values{reduce(among(v), Ops::MAX, {0}), reduce(among(alu(Ops::BITNOT, v)), Ops::MAX, {0})};
  if (counted) values.push_back(reduce(cast(counted, DType::Int64), Ops::ADD, {0}));
  std::vector<int64_t> r = read_on_host(values, t.device());
  IntRange out;
  out.any = !counted || r[2] > 0;
  if (out.any) out.max = r[0], out.min = ~r[1];
  return out;
}

// The largest element of an integer value (its only one for a scalar), read to the host: a loop bound that
// depends on the data (a recurrence's trip count, a series' length).
inline int64_t max_on_host(const UOpPtr& v, c10::Device device) {
  std::vector<int64_t> all(v->shape.size());
  for (size_t d = 0; d < all.size(); d++)
    all[d] = static_cast<int64_t>(d);
  return read_on_host({all.empty() ? v : reduce(v, Ops::MAX, all)}, device)[0];
}

} // namespace tiny::aten_ops
