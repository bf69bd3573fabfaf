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
  case at::kUInt16:
    return DType::UInt16;
  case at::kUInt32:
    return DType::UInt32;
  case at::kUInt64:
    return DType::UInt64;
  case at::kHalf:
    return DType::Float16;
  case at::kBFloat16:
    return DType::BFloat16;
  case at::kFloat:
    return DType::Float32;
  case at::kDouble:
    return DType::Float64;
  case at::kComplexHalf:
  case at::kComplexFloat:
  case at::kComplexDouble:
    throw NotNativeDtype({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                         std::string("tiny has no native kernel for this op on dtype torch.") +
                             std::string(c10::getDtypeNames(st).first));
  default:
    TORCH_CHECK_TYPE(false, "tiny does not support dtype torch.", c10::getDtypeNames(st).first,
                     " (supported: float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, uint16, "
                     "uint32, uint64, bool, complex64, complex128, complex32)");
  }
}

DType element_dtype(at::ScalarType st) {
  return at::isComplexType(st) ? to_tiny_dtype(c10::toRealValueType(st)) : to_tiny_dtype(st);
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
  case DType::UInt16:
    return at::kUInt16;
  case DType::UInt32:
    return at::kUInt32;
  case DType::UInt64:
    return at::kUInt64;
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
  const runtime::StridedView view = strided_view(dst);
  TORCH_CHECK(value->shape == view.sizes && value->dtype == view.dtype,
              "tiny internal error: writing a value of dtype ", name(value->dtype), " and shape ",
              c10::IntArrayRef(value->shape), " into a tensor of dtype ", name(view.dtype), " and shape ", dst.sizes());
  if (dst.numel() == 0) return;
  lazy_buffer(dst).write(view, dst.is_neg() ? alu(Ops::NEG, value) : value);
}

runtime::StridedView element_view(const at::Tensor& t) {
  if (!t.is_complex()) return strided_view(t);
  runtime::StridedView v{to_shape(t.sizes()), to_shape(t.strides()), 2 * t.storage_offset(),
                         element_dtype(t.scalar_type())};
  for (int64_t& s : v.strides)
    s *= 2;
  v.sizes.push_back(2);
  v.strides.push_back(1);
  return v;
}

UOpPtr join_complex(const UOpPtr& re, const UOpPtr& im) {
  // A select on the pair's lane, not a sum of padded parts: that would turn a -0.0 part into +0.0.
  Shape one = re->shape, two = re->shape;
  one.push_back(1);
  two.push_back(2);
  Shape lane_shape(re->shape.size(), 1);
  lane_shape.push_back(2);
  UOpPtr lane = expand(reshape(iota(2, DType::Int32), lane_shape), two);
  UOpPtr is_real = alu(Ops::CMPEQ, lane, expand(reshape(const_int(DType::Int32, 0), Shape(two.size(), 1)), two));
  return where(is_real, expand(reshape(re, one), two), expand(reshape(im, one), two));
}

namespace {
UOpPtr part(const UOpPtr& pairs, int64_t lane) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t d = 0; d + 1 < pairs->shape.size(); ++d)
    ranges.emplace_back(0, pairs->shape[d]);
  ranges.emplace_back(lane, lane + 1);
  return reshape(shrink(pairs, ranges), Shape(pairs->shape.begin(), pairs->shape.end() - 1));
}
} // namespace

UOpPtr real_part(const UOpPtr& pairs) { return part(pairs, 0); }
UOpPtr imag_part(const UOpPtr& pairs) { return part(pairs, 1); }

UOpPtr conjugated(const UOpPtr& pairs) { return join_complex(real_part(pairs), alu(Ops::NEG, imag_part(pairs))); }

UOpPtr read_complex(const at::Tensor& t) {
  if (!t.is_complex()) {
    UOpPtr re = read(t);
    UOpPtr zero = expand(reshape(const_like(re, 0.0), Shape(re->shape.size(), 1)), re->shape);
    return join_complex(re, zero);
  }
  UOpPtr pairs = lazy_buffer(t).read(element_view(t));
  if (t.is_neg()) pairs = alu(Ops::NEG, pairs);
  if (t.is_conj()) pairs = conjugated(pairs);
  return pairs;
}

void write_complex(const at::Tensor& dst, const UOpPtr& pairs) {
  runtime::StridedView view = element_view(dst);
  TORCH_CHECK(dst.is_complex() && pairs->shape == view.sizes && pairs->dtype == view.dtype,
              "tiny internal error: writing complex pairs of dtype ", name(pairs->dtype), " and shape ",
              c10::IntArrayRef(pairs->shape), " into a tensor of dtype ", dst.scalar_type(), " and shape ",
              dst.sizes());
  if (dst.numel() == 0) return;
  // The storage of a conjugate (negative) view holds the conjugate (negation) of what it shows.
  UOpPtr stored = pairs;
  if (dst.is_conj()) stored = conjugated(stored);
  if (dst.is_neg()) stored = alu(Ops::NEG, stored);
  lazy_buffer(dst).write(view, stored);
}

UOpPtr read_values(const at::Tensor& t) { return t.is_complex() ? read_complex(t) : read(t); }
void write_values(const at::Tensor& t, const UOpPtr& v) { t.is_complex() ? write_complex(t, v) : write(t, v); }
DType value_dtype(at::ScalarType st) { return at::isComplexType(st) ? element_dtype(st) : to_tiny_dtype(st); }
Shape value_shape(const at::Tensor& t, Shape shape) {
  if (t.is_complex()) shape.push_back(2);
  return shape;
}

namespace {
template <class Tensors> void check_one_device(const Tensors& tensors) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.is_privateuseone()) continue;
    if (!first) first = &t;
    TORCH_CHECK(t.device() == first->device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", first->device(),
                " and ", t.device(), "!");
  }
}
} // namespace

void check_same_device(c10::ArrayRef<at::Tensor> tensors) { check_one_device(tensors); }
void check_same_device(std::initializer_list<std::reference_wrapper<const at::Tensor>> tensors) {
  check_one_device(tensors);
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
  case DType::UInt16:
    c = make_constant<uint16_t>(value, dt);
    break;
  case DType::UInt32:
    c = make_constant<uint32_t>(value, dt);
    break;
  case DType::UInt64: // the bit pattern: 2**64 - 1 is held as -1 (compiler/dtype.h)
    c = make_constant<uint64_t>(value, dt);
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
  UOpPtr v = view(c, ShapeTracker::of(View{shape, Shape(shape.size(), 0), 0, std::nullopt}));
  recent[next] = {c.get(), shape, v};
  next = (next + 1) % recent.size();
  return v;
}

UOpPtr scalar_value(const at::Scalar& value, at::ScalarType st, const Shape& shape) {
  if (!at::isComplexType(st)) return scalar_constant(value, to_tiny_dtype(st), shape);
  c10::complex<double> z = value.toComplexDouble();
  DType dt = element_dtype(st);
  return join_complex(scalar_constant(z.real(), dt, shape), scalar_constant(z.imag(), dt, shape));
}

at::Tensor empty_tiny(c10::IntArrayRef sizes, at::ScalarType dtype, c10::Device device,
                      std::optional<c10::MemoryFormat> memory_format) {
  element_dtype(dtype);           // refuse what tiny cannot hold, at the call
  c10::DeviceGuard guard(device); // the allocator allocates on the current device
  return at::detail::empty_generic(sizes, &tiny_allocator(), kTinyKeys, dtype, memory_format);
}

at::Tensor empty_tiny(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype, c10::Device device) {
  element_dtype(dtype);
  c10::DeviceGuard guard(device);
  return at::detail::empty_strided_generic(sizes, strides, &tiny_allocator(), kTinyKeys, dtype);
}

} // namespace tiny
