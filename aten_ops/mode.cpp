// mode along a dim: the most frequent value of each slice and an index of it, as the CPU picks them.
//
// The CPU sorts each slice's (value, index) pairs by value and keeps the first run of greatest length: of the
// values tied for most frequent, the smallest, and the index of the last pair of its run. For slices of up to
// 16 elements its sort is an insertion sort, which keeps equal values in index order: the last index holding
// the value (longer slices leave the order of equal values to std::sort). tiny counts with one-hot compares:
// count[k] = number of j with x[j] == x[k] (a reduction over the slice, per element), then the smallest value
// with the largest count, then the largest index holding it: a few reductions, no sort.

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <limits>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

// The largest value of dt: what no candidate exceeds.
UOpPtr largest(DType dt, const Shape& shape) {
  if (is_float(dt)) return fixed(dt, std::numeric_limits<double>::infinity(), shape);
  const int64_t bits = 8 * static_cast<int64_t>(itemsize(dt));
  UOpPtr c = dt == DType::Int64   ? const_int(dt, std::numeric_limits<int64_t>::max())
             : dt == DType::UInt8 ? const_int(dt, 255)
                                  : const_int(dt, (int64_t{1} << (bits - 1)) - 1);
  return expand(reshape(c, Shape(shape.size(), 1)), shape);
}

// Writes each slice's mode into values and indices, resized to the kept shape (mode.values, in sort.cpp,
// copies the functional form's results into its out= tensors).
void write_mode(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values, at::Tensor& indices) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t length = self.dim() == 0 ? 1 : self.size(dim);
  std::vector<int64_t> kept = self.sizes().vec();
  if (self.dim() > 0) {
    if (keepdim)
      kept[static_cast<size_t>(dim)] = 1;
    else
      kept.erase(kept.begin() + dim);
  }
  at::native::resize_output(values, kept);
  at::native::resize_output(indices, kept);
  if (values.numel() == 0) return;
  TORCH_CHECK_INDEX(length > 0, "mode(): Expected reduction dim ", dim, " to have non-zero size.");

  // each slice as a row of (rows, length)
  at::Tensor moved = self.dim() == 0 ? self.reshape({1, 1}) : self.movedim(dim, -1);
  const int64_t rows = self.numel() / length;
  DType dt = to_tiny_dtype(self.scalar_type());
  DType key = dt == DType::Bool ? DType::Int32 : dt; // bools order as 0 and 1
  UOpPtr x = cast(reshape(read(moved), {rows, length}), key);
  Shape pairs{rows, length, length}, row{rows, length};
  UOpPtr a = expand(reshape(x, {rows, length, 1}), pairs), b = expand(reshape(x, {rows, 1, length}), pairs);
  UOpPtr count = reshape(reduce(cast(alu(Ops::CMPEQ, a, b), DType::Int32), Ops::ADD, {2}), row);
  UOpPtr most = expand(reduce(count, Ops::MAX, {1}), row);
  UOpPtr value = reduce(where(alu(Ops::CMPEQ, count, most), x, largest(key, row)), Ops::MIN, {1});
  UOpPtr position = expand(reshape(iota(length, DType::Int64), {1, length}), row);
  UOpPtr holds = alu(Ops::CMPEQ, x, expand(value, row));
  UOpPtr index = reduce(where(holds, position, fixed(DType::Int64, -1, row)), Ops::MAX, {1});
  Shape out = to_shape(values.sizes());
  write(values, reshape(cast(value, dt), out));
  write(indices, reshape(index, out));
}

std::tuple<at::Tensor, at::Tensor> mode(const at::Tensor& self, int64_t dim, bool keepdim) {
  at::Tensor values = empty_tiny({0}, self.scalar_type(), self.device());
  at::Tensor indices = empty_tiny({0}, at::kLong, self.device());
  write_mode(self, dim, keepdim, values, indices);
  return {values, indices};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("mode", TORCH_FN(mode));
}

} // namespace tiny::aten_ops
