#pragma once
// Small values an ATen kernel needs on the host at the call (a range to check, torch's data-dependent errors).

#include <ATen/ATen.h>

#include <algorithm>
#include <mutex>
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

// The largest element of an integer value (its only one for a scalar), read to the host: a loop bound that
// depends on the data (a recurrence's trip count, a series' length).
inline int64_t max_on_host(const UOpPtr& v, c10::Device device) {
  std::vector<int64_t> all(v->shape.size());
  for (size_t d = 0; d < all.size(); d++)
    all[d] = static_cast<int64_t>(d);
  return read_on_host({all.empty() ? v : reduce(v, Ops::MAX, all)}, device)[0];
}

} // namespace tiny::aten_ops
