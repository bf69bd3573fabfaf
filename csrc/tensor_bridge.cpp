#include "csrc/tensor_bridge.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <array>
#include <memory>
#include <type_traits>

#include "csrc/allocator.h"

namespace tiny {

namespace {

constexpr c10::DispatchKeySet kTinyKeys(c10::DispatchKey::PrivateUse1);

template <typename T> UOpPtr make_constant(const at::Scalar& value, DType dt) {
  T v = value.to<T>(); // torch's own conversion: its rounding, and its overflow error
  if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, at::Half> || std::is_same_v<T, at::BFloat16>)
    return var_float(dt, static_cast<double>(v));
  else
    return var_int(dt, static_cast<int64_t>(v));
}

} // namespace

DType to_tiny_dtype(at::ScalarType st) {
  switch (st) {
  case at::kBool:
    return DType::Bool;
  case at::kChar:
    return DType::Int8;
  case at::kShort:
    return DType::Int16;
  case at::kInt:
    return DType::Int32;
  case at::kLong:
    return DType::Int64;
  case at::kByte:
    return DType::UInt8;
  case at::kHalf:
    return DType::Float16;
  case at::kBFloat16:
    return DType::BFloat16;
  case at::kFloat:
    return DType::Float32;
  case at::kDouble:
    return DType::Float64;
  default:
    TORCH_CHECK_TYPE(false, "tiny does not support dtype torch.", c10::getDtypeNames(st).first,
                     " (supported: float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool)");
  }
}

at::ScalarType to_scalar_type(DType dt) {
  switch (dt) {
  case DType::Bool:
    return at::kBool;
  case DType::Int8:
    return at::kChar;
  case DType::Int16:
    return at::kShort;
  case DType::Int32:
    return at::kInt;
  case DType::Int64:
    return at::kLong;
  case DType::UInt8:
    return at::kByte;
  case DType::Float16:
    return at::kHalf;
  case DType::BFloat16:
    return at::kBFloat16;
  case DType::Float32:
    return at::kFloat;
  case DType::Float64:
    return at::kDouble;
  case DType::Void:
    break;
  }
  TORCH_CHECK(false, "tiny internal error: no torch dtype for ", name(dt));
}

Shape to_shape(c10::IntArrayRef sizes) { return Shape(sizes.begin(), sizes.end()); }

runtime::LazyBuffer& lazy_buffer(const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "tiny: expected a defined tensor");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "expected a tensor on tiny, got one on ", t.device());
  TORCH_CHECK(t.has_storage(), "tiny: the tensor has no storage");
  runtime::LazyBuffer* buffer = lazy_buffer_of(t.storage().data_ptr());
  TORCH_CHECK(buffer != nullptr, "tiny: the tensor's storage does not hold a tiny lazy buffer");
  return *buffer;
}

runtime::StridedView strided_view(const at::Tensor& t) {
  return {to_shape(t.sizes()), to_shape(t.strides()), t.storage_offset(), to_tiny_dtype(t.scalar_type())};
}

UOpPtr read(const at::Tensor& t) {
  UOpPtr value = lazy_buffer(t).read(strided_view(t));
  // A negative view (Tensor._neg_view, made by autograd) reads as the negation of its storage.
  return t.is_neg() ? alu(Ops::NEG, value) : value;
}

void write(const at::Tensor& dst, const UOpPtr& value) {
  runtime::StridedView view = strided_view(dst);
  TORCH_CHECK(value->shape == view.sizes && value->dtype == view.dtype,
              "tiny internal error: writing a value of dtype ", name(value->dtype), " and shape ",
              c10::IntArrayRef(value->shape), " into a tensor of dtype ", name(view.dtype), " and shape ", dst.sizes());
  if (dst.numel() == 0) return;
  lazy_buffer(dst).write(view, dst.is_neg() ? alu(Ops::NEG, value) : value);
}

void check_same_device(c10::ArrayRef<at::Tensor> tensors) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.is_privateuseone()) continue;
    if (!first) first = &t;
    TORCH_CHECK(t.device() == first->device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", first->device(),
                " and ", t.device(), "!");
  }
}

UOpPtr scalar_constant(const at::Scalar& value, DType dt, const Shape& shape) {
  UOpPtr c;
  switch (dt) {
  case DType::Bool:
    c = make_constant<bool>(value, dt);
    break;
  case DType::Int8:
    c = make_constant<int8_t>(value, dt);
    break;
  case DType::Int16:
    c = make_constant<int16_t>(value, dt);
    break;
  case DType::Int32:
    c = make_constant<int32_t>(value, dt);
    break;
  case DType::Int64:
    c = make_constant<int64_t>(value, dt);
    break;
  case DType::UInt8:
    c = make_constant<uint8_t>(value, dt);
    break;
  case DType::Float16:
    c = make_constant<at::Half>(value, dt);
    break;
  case DType::BFloat16:
    c = make_constant<at::BFloat16>(value, dt);
    break;
  case DType::Float32:
    c = make_constant<float>(value, dt);
    break;
  case DType::Float64:
    c = make_constant<double>(value, dt);
    break;
  case DType::Void:
    TORCH_CHECK(false, "tiny internal error: a constant of dtype void");
  }
  if (shape.empty()) return c;
  // The same scalar broadcast to the same shape recurs call after call (the 1.0 of `y + 1.0` in a loop): the
  // view node of the last few is remembered (weakly: it dies with the graphs that hold it) rather than
  // built again. Interning would return that same node.
  struct Broadcast {
    const UOp* scalar = nullptr;
    Shape shape;
    std::weak_ptr<const UOp> node;
  };
  thread_local std::array<Broadcast, 8> recent;
  thread_local size_t next = 0;
  for (const Broadcast& r : recent)
    if (r.scalar == c.get() && r.shape == shape)
      if (UOpPtr alive = r.node.lock()) return alive;
  // The scalar (shape ()) broadcast to `shape`: every stride 0. The tracker is built as it is rather than
  // by a reshape and an expand of a ()-shaped one (the same view, without their intermediate trackers).
  UOpPtr v = view(c, ShapeTracker{{View{shape, Shape(shape.size(), 0), 0, std::nullopt}}});
  recent[next] = {c.get(), shape, v};
  next = (next + 1) % recent.size();
  return v;
}

at::Tensor empty_tiny(c10::IntArrayRef sizes, at::ScalarType dtype, c10::Device device,
                      std::optional<c10::MemoryFormat> memory_format) {
  to_tiny_dtype(dtype);           // refuse what tiny cannot hold, at the call
  c10::DeviceGuard guard(device); // the allocator allocates on the current device
  return at::detail::empty_generic(sizes, &tiny_allocator(), kTinyKeys, dtype, memory_format);
}

at::Tensor empty_tiny(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype, c10::Device device) {
  to_tiny_dtype(dtype);
  c10::DeviceGuard guard(device);
  return at::detail::empty_strided_generic(sizes, strides, &tiny_allocator(), kTinyKeys, dtype);
}

} // namespace tiny
