#pragma once
// The bridge between torch tensors on tiny and the lazy storage model (DESIGN.md, "The storage model").
//
// A tiny tensor's storage owns a runtime::LazyBuffer (the DataPtr context). A tensor reads as a strided
// view of that buffer's content and writes into the elements its sizes, strides and storage_offset name.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <functional>
#include <initializer_list>
#include <optional>

#include "compiler/uop.h"
#include "runtime/lazy_buffer.h"

namespace tiny {

// A kernel met a dtype it has no native path for (complex): the kernels registered through
// KernelLibrary (csrc/kernel_library.h) catch it and run the op on the CPU fallback instead; anywhere
// else it reaches Python as torch's TypeError.
struct NotNativeDtype : c10::TypeError {
  using c10::TypeError::TypeError;
};

// torch dtype <-> tiny dtype, for the values kernels compute with. A complex dtype raises NotNativeDtype
// (complex values are pairs of real ones: element_dtype, read_complex); a dtype tiny cannot hold
// (quantized, float8, uint1..uint7) raises torch's TypeError naming it.
DType to_tiny_dtype(at::ScalarType st);
// The element a storage of `st` holds: `st` itself, or a complex dtype's real part (complex64: float32),
// so a complex storage is a buffer of twice as many real elements, real and imaginary parts interleaved.
DType element_dtype(at::ScalarType st);
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

// A complex tensor's storage as view_as_real sees it: sizes + (2,), strides * 2 + (1,), offset * 2,
// its element_dtype. For other dtypes, strided_view.
runtime::StridedView element_view(const at::Tensor& t);
// A complex tensor's value as (real, imaginary) pairs: a UOp of shape sizes + (2,) and the tensor's
// element_dtype, its conjugate and negative bits resolved. A real tensor reads as (value, 0).
UOpPtr read_complex(const at::Tensor& t);
// Writes pairs (shape dst.sizes() + (2,), dst's element_dtype) into the complex tensor `dst`.
void write_complex(const at::Tensor& dst, const UOpPtr& pairs);
// Complex values from their parts (each of the value's shape and one real dtype) and back.
UOpPtr join_complex(const UOpPtr& re, const UOpPtr& im);
UOpPtr real_part(const UOpPtr& pairs);
UOpPtr imag_part(const UOpPtr& pairs);
// The conjugate of pairs: what a conjugate view shows of its storage, and what it stores.
UOpPtr conjugated(const UOpPtr& pairs);

// A tensor's values whatever its dtype: a complex tensor's pairs (read_complex, write_complex), else its
// elements (read, write). Their dtype for a tensor of `st` (a complex dtype's element_dtype), and their
// shape for a tensor like t of `shape` (pairs: shape + (2,)).
UOpPtr read_values(const at::Tensor& t);
void write_values(const at::Tensor& t, const UOpPtr& v);
DType value_dtype(at::ScalarType st);
Shape value_shape(const at::Tensor& t, Shape shape);

// torch's error when an op's tiny tensors are on two devices (TensorIterator's message), raised at the call;
// undefined tensors and tensors of other devices (a CPU scalar) are left to the op's own checks.
void check_same_device(c10::ArrayRef<at::Tensor> tensors);
// The same for a braced list, without copying its tensors: copying a tensor that only Python holds
// takes the GIL again (torch keeps its Python object alive while C++ holds a second reference), a measured
// part of recording a matmul.
void check_same_device(std::initializer_list<std::reference_wrapper<const at::Tensor>> tensors);

// A runtime scalar (DEFINE_VAR: a kernel argument, so new values compile nothing) holding `value`
// converted to `dt` the way torch converts a Scalar for a tensor of that dtype (including torch's
// overflow error), broadcast to `shape`.
UOpPtr scalar_constant(const at::Scalar& value, DType dt, const Shape& shape = {});
// A Scalar as the value of one element of a tensor of `st` (scalar_constant; a complex dtype's pairs of
// its parts), broadcast to `shape` (pairs: shape + (2,)).
UOpPtr scalar_value(const at::Scalar& value, at::ScalarType st, const Shape& shape);

// A new tiny tensor; its storage is a fresh lazy buffer.
at::Tensor empty_tiny(c10::IntArrayRef sizes, at::ScalarType dtype, c10::Device device,
                      std::optional<c10::MemoryFormat> memory_format = std::nullopt);
at::Tensor empty_tiny(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype, c10::Device device);

} // namespace tiny
