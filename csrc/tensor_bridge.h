#pragma once
// The bridge between torch tensors on tiny and the lazy storage model (DESIGN.md, "The storage model").
//
// A tiny tensor's storage owns a runtime::LazyBuffer (the DataPtr context). A tensor reads as a strided
// view of that buffer's content and writes into the elements its sizes, strides and storage_offset name.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include <optional>

#include "compiler/uop.h"
#include "runtime/lazy_buffer.h"

namespace tiny {

// torch dtype <-> tiny dtype. A dtype tiny cannot hold (complex, quantized, float8, uint16...) raises
// torch's TypeError naming it.
DType to_tiny_dtype(at::ScalarType st);
at::ScalarType to_scalar_type(DType dt);
Shape to_shape(c10::IntArrayRef sizes);

// The lazy buffer behind a tiny tensor's storage.
runtime::LazyBuffer& lazy_buffer(const at::Tensor& t);
// The tensor as a window onto its storage: sizes, strides, storage_offset (elements), dtype.
runtime::StridedView strided_view(const at::Tensor& t);

// The tensor's current value as a UOp of its shape and dtype (a lazy read; nothing runs).
UOpPtr read(const at::Tensor& t);
// Writes `value` (the tensor's shape and dtype) into the elements of `dst`, visible through every
// alias of its storage. `dst` must not overlap itself.
void write(const at::Tensor& dst, const UOpPtr& value);

// torch's error when an op's tiny tensors are on two devices (TensorIterator's message), raised at the call;
// undefined tensors and tensors of other devices (a CPU scalar) are left to the op's own checks.
void check_same_device(c10::ArrayRef<at::Tensor> tensors);

// A runtime scalar (DEFINE_VAR: a kernel argument, so new values compile nothing) holding `value`
// converted to `dt` the way torch converts a Scalar for a tensor of that dtype (including torch's
// overflow error), broadcast to `shape`.
UOpPtr scalar_constant(const at::Scalar& value, DType dt, const Shape& shape = {});

// A new tiny tensor; its storage is a fresh lazy buffer.
at::Tensor empty_tiny(c10::IntArrayRef sizes, at::ScalarType dtype, c10::Device device,
                      std::optional<c10::MemoryFormat> memory_format = std::nullopt);
at::Tensor empty_tiny(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype, c10::Device device);

} // namespace tiny
