// Sparse COO tensors on tiny (the SparsePrivateUse1 key).
//
// A sparse tiny tensor is torch's own SparseTensorImpl: sizes, sparse_dim, dense_dim, the coalesced flag
// and two ordinary dense tiny tensors, indices (sparse_dim x nnz, int64) and values (nnz x dense sizes).
// torch's device-generic sparse kernels only touch that metadata or move the two tensors with dense ops
// (construction, _indices/_values, clone, copy_ and _to_copy, resize, zero_, unsqueeze, permute), so they
// are registered as they are, as OpenReg (PyTorch's reference PrivateUse1 backend) does. What torch
// computes with CPU- or CUDA-only code is written here with dense tiny ops on indices and values:
// coalesce, to_dense and sparse_mask (to_sparse's gradient). The conversion from dense (to_sparse) is
// torch's dense_to_sparse (nonzero, unique_dim, index: tiny kernels). Any other sparse op (add, mul, mm,
// sum, softmax...) runs on the CPU's sparse kernel through the CPU fallback (csrc/fallback.cpp), which
// under TINY_FALLBACK=0 refuses it naming the op.

#include <ATen/ATen.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/permute_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/fallback.h"

namespace tiny::aten_ops {

namespace {

// The row-major position of each entry among the sparse dims (int64, nnz): sparse indices as one number.
at::Tensor linear_positions(const at::Tensor& indices, c10::IntArrayRef sparse_sizes) {
  at::Tensor position = indices.select(0, 0);
  for (size_t d = 1; d < sparse_sizes.size(); ++d)
    position = position * sparse_sizes[d] + indices.select(0, static_cast<int64_t>(d));
  return position;
}

// The sparse indices (sparse_dim x n) of row-major positions.
at::Tensor indices_of_positions(const at::Tensor& positions, c10::IntArrayRef sparse_sizes) {
  std::vector<at::Tensor> rows(sparse_sizes.size());
  at::Tensor rest = positions;
  for (size_t d = sparse_sizes.size(); d-- > 0;) {
    rows[d] = d == 0 ? rest : rest.remainder(sparse_sizes[d]);
    if (d > 0) rest = rest.div(sparse_sizes[d], "floor");
  }
  return at::stack(rows);
}

// torch's coalesce: entries sorted by their indices (row-major), the values of equal indices summed (bool
// values: any), flagged coalesced. As the CPU, a tensor of fewer than two entries is cloned and flagged.
at::Tensor coalesce(const at::Tensor& self) {
  if (self.is_coalesced()) return self;
  const int64_t nnz = self._nnz();
  if (nnz < 2) {
    at::Tensor copy = self.clone();
    copy._coalesced_(true);
    return copy;
  }
  const int64_t sparse_dim = self.sparse_dim();
  c10::IntArrayRef sparse_sizes = self.sizes().slice(0, static_cast<size_t>(sparse_dim));
  at::Tensor values = self._values();
  at::Tensor new_indices, new_values;
  if (sparse_dim == 0) {
    new_indices = at::zeros({0, 1}, self._indices().options());
    new_values = at::zeros_like(values.narrow(0, 0, 1)).index_add_(0, at::zeros({nnz}, new_indices.options()), values);
  } else {
    at::Tensor positions = linear_positions(self._indices(), sparse_sizes);
    auto [sorted, order] = positions.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
    auto [unique, inverse, counts] = at::unique_consecutive(sorted, /*return_inverse=*/true);
    std::vector<int64_t> value_sizes = values.sizes().vec();
    value_sizes[0] = unique.size(0);
    new_values = at::zeros(value_sizes, values.options()).index_add_(0, inverse, values.index_select(0, order));
    new_indices = indices_of_positions(unique, sparse_sizes);
  }
  return at::_sparse_coo_tensor_with_dims_and_tensors(sparse_dim, self.dense_dim(), self.sizes(), new_indices,
                                                      new_values, self.options(), /*is_coalesced=*/true);
}

// torch's sparse_to_dense: zeros with each entry's values added at its indices (duplicates summed).
at::Tensor to_dense(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<bool> /*masked_grad*/) {
  TORCH_CHECK(!dtype.has_value(), "dtype argument is not supported by sparse_to_dense");
  at::Tensor dense = at::zeros(self.sizes(), self.options().layout(at::kStrided));
  if (self._nnz() == 0) return dense;
  at::Tensor indices = self._indices(), values = self._values();
  c10::List<std::optional<at::Tensor>> where;
  for (int64_t d = 0; d < self.sparse_dim(); ++d)
    where.push_back(indices.select(0, d));
  if (where.empty()) return dense.add_(values.sum(0, /*keepdim=*/false, dense.scalar_type()));
  return dense.index_put_(where, values, /*accumulate=*/true);
}

// torch's sparse_mask of a dense tensor: mask's indices (duplicates and its coalesced flag kept), each
// entry's values read from self there; the mask's values are not read.
at::Tensor sparse_mask(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.sizes().equals(self.sizes()), "sparse_mask(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  if (self.is_same(mask)) return self;
  at::Tensor dense = self.layout() == at::kSparse ? self.to_dense() : self;
  at::Tensor indices = mask._indices().clone();
  at::Tensor values;
  if (mask.sparse_dim() == 0) {
    values = dense.unsqueeze(0).expand(mask._values().sizes()).clone();
  } else {
    c10::List<std::optional<at::Tensor>> where;
    for (int64_t d = 0; d < mask.sparse_dim(); ++d)
      where.push_back(indices.select(0, d));
    values = dense.index(where);
  }
  return at::_sparse_coo_tensor_with_dims_and_tensors(mask.sparse_dim(), mask.dense_dim(), mask.sizes(), indices,
                                                      values, mask.options().dtype(self.scalar_type()),
                                                      mask.is_coalesced());
}

} // namespace

// The dense-to-sparse conversions of a dense tiny tensor.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse.sparse_dim",
         TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(at::native::dense_to_sparse)));
  m.impl("_to_sparse",
         TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, std::optional<at::Layout>, at::OptionalIntArrayRef,
                                             std::optional<int64_t>)>(at::native::dense_to_sparse)));
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // construction and metadata: torch's own kernels
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  // moving indices and values with dense ops
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  m.impl("unsqueeze", TORCH_FN(at::native::unsqueeze_sparse));
  m.impl("permute", TORCH_FN(at::native::permute_sparse_coo));
  m.impl("_to_sparse.sparse_dim",
         TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(at::native::sparse_coo_to_sparse)));
  m.impl("_to_sparse",
         TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, std::optional<at::Layout>, at::OptionalIntArrayRef,
                                             std::optional<int64_t>)>(at::native::sparse_coo_to_sparse)));
  // computed here on indices and values
  m.impl("_coalesce", TORCH_FN(coalesce));
  m.impl("_to_dense", TORCH_FN(to_dense));
  m.impl("sparse_mask", TORCH_FN(sparse_mask));
}

// Compressed layouts (CSR, CSC, BSR, BSC: the SparseCsrPrivateUse1 key) are held as torch's SparseCsrTensorImpl
// over dense tiny index and value tensors, with torch's device-generic kernels: construction, the structure,
// clone and copy_ (so `.cpu()` and `.to("tiny")` move them); every op on them runs on the CPU's kernels through
// the fallback.
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_compressed));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("clone", TORCH_FN(at::native::clone_sparse_compressed));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_compressed_));
}

// torch's structured ops (add, mul, ...) have a CompositeExplicitAutogradNonFunctional kernel, which covers the
// compressed keys (not the COO one) and outranks a backend fallback: the fallback would never see them, and
// their meta function would refuse the layout. So every op the CPU has a compressed-layout kernel for, and
// tiny none (those above, registered first in this file), gets the fallback as its kernel.
const bool compressed_ops_fall_back = [] {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::SparseCsrPrivateUse1,
                                            __FILE__, __LINE__); // never destroyed: registrations live on
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !name.name.starts_with("aten::") || !op->hasKernelForDispatchKey(c10::DispatchKey::SparseCsrCPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::SparseCsrPrivateUse1))
      continue;
    std::string qualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
  }
  return true;
}();

} // namespace tiny::aten_ops
