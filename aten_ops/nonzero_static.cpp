// nonzero_static: torch.nonzero with a fixed number of rows. The result's size is the caller's, so nothing is
// read to the host: the rank of each nonzero element (an inclusive cumsum of the flags, minus one) is its row,
// and a SCATTER writes its coordinates there into rows pre-filled with fill_value. Ranks past `size` and zero
// elements scatter to -1, which SCATTER skips.

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

void write_nonzero_static(const at::Tensor& self, int64_t size, int64_t fill_value, const at::Tensor& out) {
  int64_t n = self.numel(), nd = self.dim();
  if (out.numel() == 0) return;
  UOpPtr rows = fixed(DType::Int64, static_cast<double>(fill_value), {size * nd});
  if (n == 0) {
    write(out, reshape(rows, {size, nd}));
    return;
  }
  // n x nd: the rank of element i (its row) and its coordinate along each dim
  Shape both{n, nd};
  at::Tensor flags = at::ne(self, 0).reshape({n});
  UOpPtr rank = expand(reshape(read(at::cumsum(flags, 0, at::kLong)), {n, 1}), both);
  rank = sub(rank, fixed(DType::Int64, 1, both));
  UOpPtr kept = alu(Ops::AND, expand(reshape(read(flags), {n, 1}), both), lt(rank, fixed(DType::Int64, size, both)));
  std::vector<int64_t> strides(static_cast<size_t>(nd)), sizes(static_cast<size_t>(nd));
  for (int64_t d = nd - 1, s = 1; d >= 0; d--) {
    strides[static_cast<size_t>(d)] = s;
    sizes[static_cast<size_t>(d)] = self.size(d);
    s *= self.size(d);
  }
  UOpPtr element = expand(reshape(iota(n, DType::Int64), {n, 1}), both);
  UOpPtr dim = expand(reshape(iota(nd, DType::Int64), {1, nd}), both);
  UOpPtr stride = fixed(DType::Int64, 0, both), extent = fixed(DType::Int64, 1, both);
  for (int64_t d = 0; d < nd; d++) { // the stride and size of each column's dim, as selects
    UOpPtr here = alu(Ops::CMPEQ, dim, fixed(DType::Int64, static_cast<double>(d), both));
    stride = where(here, fixed(DType::Int64, static_cast<double>(strides[static_cast<size_t>(d)]), both), stride);
    extent = where(here, fixed(DType::Int64, static_cast<double>(sizes[static_cast<size_t>(d)]), both), extent);
  }
  UOpPtr coordinate = alu(Ops::MOD, alu(Ops::IDIV, element, stride), extent);
  UOpPtr at = where(kept, add(mul(rank, fixed(DType::Int64, static_cast<double>(nd), both)), dim),
                    fixed(DType::Int64, -1, both));
  write(out, reshape(scatter(rows, reshape(at, {n * nd}), reshape(coordinate, {n * nd}), std::nullopt), {size, nd}));
}

void check_size(int64_t size) { TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer"); }

at::Tensor nonzero_static(const at::Tensor& self, int64_t size, int64_t fill_value) {
  check_size(size);
  at::Tensor out = empty_tiny({size, self.dim()}, at::kLong, self.device());
  write_nonzero_static(self, size, fill_value, out);
  return out;
}

at::Tensor& nonzero_static_out(const at::Tensor& self, int64_t size, int64_t fill_value, at::Tensor& out) {
  check_size(size);
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero_static: Expected out tensor to have scalar type Long but got scalar type", out.scalar_type());
  check_same_device({self, out});
  at::native::resize_output(out, {size, self.dim()});
  write_nonzero_static(self, size, fill_value, out);
  return out;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("nonzero_static", TORCH_FN(nonzero_static));
  m.impl("nonzero_static.out", TORCH_FN(nonzero_static_out));
}

} // namespace tiny::aten_ops
