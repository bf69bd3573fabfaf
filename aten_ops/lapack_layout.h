// What the linear algebra kernels (linalg_qr.cpp, linalg_eig.cpp) share: the number of matrices in a batch,
// the column-major strides in which torch's CPU kernels return matrices (LAPACK's layout), and two building
// blocks over (batch, rows, cols) values.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compiler/uop.h"

namespace tiny {

// The matrices of a tensor (..., m, n).
inline int64_t batch_count(const at::Tensor& t) {
  int64_t b = 1;
  for (int64_t d = 0; d + 2 < t.dim(); d++)
    b *= t.size(d);
  return b;
}

// LAPACK's layout, in which torch's CPU kernels return their matrices: each matrix column-major, the batch
// row-major around them.
inline std::vector<int64_t> column_major_strides(at::IntArrayRef sizes) {
  int64_t dims = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> strides(dims, 1);
  if (dims < 2) return strides;
  int64_t m = sizes[dims - 2], n = sizes[dims - 1];
  strides[dims - 1] = std::max<int64_t>(m, 1);
  int64_t stride = std::max<int64_t>(m * n, 1);
  for (int64_t d = dims - 3; d >= 0; d--) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

// x (a scalar or already of `shape`'s rank) expanded to `shape`.
inline UOpPtr broadcast(const UOpPtr& x, const Shape& shape) {
  return expand(x->shape.empty() ? reshape(x, Shape(shape.size(), 1)) : x, shape);
}
// Each element's index along dim d.
inline UOpPtr coordinate(const Shape& shape, size_t d) {
  Shape s(shape.size(), 1);
  s[d] = shape[d];
  return expand(reshape(iota(shape[d], kIndex), s), shape);
}

} // namespace tiny
