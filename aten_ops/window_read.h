#pragma once
// A tensor read through another window onto its storage, as one view node of its storage's content: a
// broadcast or a permutation of the tensor built from its strides directly. Moving the read tensor instead
// (reshape, then expand) builds and interns a view node per movement, each dropped at once when the next
// composes onto the content: a measured part of the cost of recording an op (issue #13). And a tensor's strided
// phase (phase_view), the window a phase-by-phase gradient writes through.

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

// `t`'s elements at `sizes` and `strides` (in elements) from its storage offset, in its dtype.
inline UOpPtr read_window(const at::Tensor& t, Shape sizes, Shape strides) {
  runtime::StridedView v{std::move(sizes), std::move(strides), t.storage_offset(), to_tiny_dtype(t.scalar_type())};
  UOpPtr value = lazy_buffer(t).read(v);
  // A negative view (Tensor._neg_view) reads as the negation of its storage, as tiny::read does.
  return t.is_neg() ? alu(Ops::NEG, value) : value;
}

// `t` broadcast to `shape` by torch's rule (leading dims added, size-1 dims repeated: stride 0 there).
// `t` must broadcast to it.
inline UOpPtr read_broadcast(const at::Tensor& t, const Shape& shape) {
  size_t lead = shape.size() - static_cast<size_t>(t.dim());
  Shape strides(shape.size(), 0);
  for (size_t d = lead; d < shape.size(); d++) {
    auto i = static_cast<int64_t>(d - lead);
    if (t.size(i) == shape[d]) strides[d] = t.stride(i);
  }
  return read_window(t, shape, std::move(strides));
}

// The elements of t at the positions p, p + stride, ... of its last p.size() dims (a strided phase, see
// window::strided_phases), as a view of it.
inline at::Tensor phase_view(at::Tensor t, const std::vector<int64_t>& p, const Shape& stride) {
  const int64_t lead = t.dim() - static_cast<int64_t>(p.size());
  for (size_t i = 0; i < p.size(); i++)
    t = t.slice(lead + static_cast<int64_t>(i), p[i], std::nullopt, stride[i]);
  return t;
}

} // namespace tiny::aten_ops
