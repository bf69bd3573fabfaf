// Views and storage metadata: as_strided, view, _reshape_alias, unfold, set_, resize_,
// _has_compatible_shallow_copy_type.
//
// Views reuse torch's own metadata kernels, so sizes, strides, storage_offset and aliasing are exactly
// the CPU's; every other view op (transpose, slice, select, expand, diagonal, alias...) is
// CompositeExplicitAutograd in torch and builds on these. set_ and resize_ follow the CPU kernels, except
// that a storage grows by swapping in a bigger lazy buffer (torch's CPU version would memcpy our fake
// addresses).

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/StorageImpl.h>
#include <torch/library.h>

#include "csrc/allocator.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

// Sets sizes (and strides, or contiguous ones) and grows the storage when they need more bytes, as
// at::native::resize_impl_cpu_ does.
void resize_impl(const at::Tensor& self, c10::IntArrayRef size, at::OptionalIntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, size, stride, /*resize_storage=*/false);
  // A tensor of no elements needs no storage (and with an offset its byte count would be meaningless).
  if (impl->numel() == 0) return;
  size_t itemsize = impl->dtype().itemsize();
  size_t needed = stride ? at::detail::computeStorageNbytes(size, *stride, itemsize, impl->storage_offset())
                         : at::detail::computeStorageNbytesContiguous(size, itemsize, impl->storage_offset());
  const c10::Storage& storage = impl->unsafe_storage();
  if (needed > storage.nbytes())
    resize_storage_bytes(*storage.unsafeGetStorageImpl(), needed, element_dtype(self.scalar_type()));
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  resize_impl(self, size, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  at::OptionalIntArrayRef stride_opt = stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  resize_impl(self, size, stride_opt);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) { return at::native::set_(self, std::move(source)); }

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) { return at::native::set_tensor_(self, source); }

// set_() with no source: an empty storage of our own (CPU's set_ would give a CPU one).
at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocate_lazy_buffer(0, self.device().index()),
                       &tiny_allocator(), /*resizable=*/true);
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

bool is_set_to(const at::Tensor& self, const at::Tensor& tensor) { return at::native::is_set_to(self, tensor); }

// module.to("tiny") and `p.data = t` (set_data) ask whether `from`'s TensorImpl may be shallow-copied into
// `self`'s. torch says yes for two strided dense tensors of its own backends (CPU, CUDA, ...), which is how
// module.to("cuda") keeps the same Parameter objects, and leaves PrivateUse1 to the backend. A tiny tensor
// is a plain dense TensorImpl, so tiny is one more such backend.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    switch (t.device().type()) {
    case c10::DeviceType::CPU:
    case c10::DeviceType::CUDA:
    case c10::DeviceType::MPS:
    case c10::DeviceType::HIP:
    case c10::DeviceType::XPU:
    case c10::DeviceType::HPU:
    case c10::DeviceType::MTIA:
    case c10::DeviceType::PrivateUse1:
      return t.layout() == at::kStrided && t.key_set().has(c10::DispatchKey::Dense);
    default:
      return false;
    }
  };
  return self.key_set() == from.key_set() || (dense(self) && dense(from));
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type, UnsignedPolicy::Native);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  // torch's own metadata kernels: a complex storage is read as (real, imaginary) pairs anyway
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("unfold", unfold);
  m.impl("resize_", resize_, UnsignedPolicy::Native);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset, UnsignedPolicy::Native);
  m.impl("set_.source_Storage", set_storage, UnsignedPolicy::Native);
  m.impl("set_.source_Tensor", set_tensor, UnsignedPolicy::Native);
  m.impl("set_", set_empty, UnsignedPolicy::Native);
  m.impl("is_set_to", is_set_to, UnsignedPolicy::Native);
}

} // namespace tiny::aten_ops
