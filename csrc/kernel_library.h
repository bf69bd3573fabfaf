#pragma once
// KernelLibrary: how aten_ops registers its kernels for the PrivateUse1 key.
//
// A kernel written for real dtypes meets complex tensors too (torch dispatches by device, not dtype).
// It reads them through to_tiny_dtype / read / write, which raise NotNativeDtype for a complex tensor;
// every unboxed kernel registered here catches that and runs the op on the CPU fallback instead, as if
// tiny had no kernel for it (counted, warned about, an error under TINY_FALLBACK=0). Kernels with a
// native complex path (copies, fills, the complex entries of the elementwise table) never raise it.
//
//   TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
//     KernelLibrary m(library);
//     m.impl("cumsum", TORCH_FN(cumsum));
//   }
//
// torch's barebones unsigned dtypes (uint16, uint32, uint64) are held natively, but torch's CPU has kernels for
// few ops of them (copies, mul, true division, eq/ne, bitwise and/or/xor, sum/prod, sort, indexing...) and raises
// NotImplementedError ("add_stub" not implemented for 'UInt16') for the others. A kernel computes them only where
// its registration says so (an UnsignedPolicy); for any other kernel a tensor or dtype argument of one sends the
// call to the CPU fallback, which computes it or raises exactly as the CPU does:
//
//     m.impl("sum.dim_IntList", TORCH_FN(sum), UnsignedPolicy::CpuChecked);
//
// The wrapper costs one extra call on the common path; the try block itself costs nothing until it throws.

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/TypeTraits.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "csrc/fallback.h"
#include "csrc/tensor_bridge.h"

namespace tiny {

// How a kernel meets a uint16, uint32 or uint64 argument (see the top of this file).
enum class UnsignedPolicy : uint8_t {
  Fallback,   // it does not compute them: the call runs on the CPU fallback
  Native,     // it computes them, and refuses what the CPU refuses (the CPU accepts every call its checks pass)
  CpuChecked, // it computes them once check_cpu_accepts has asked the CPU about these dtypes (size-1 stand-ins
              // of the tensors must be a valid call: no index or shape arguments that they would break)
};

inline bool is_unsigned_dtype(at::ScalarType st) { return st == at::kUInt16 || st == at::kUInt32 || st == at::kUInt64; }

// Whether an argument is, holds or names a uint16/32/64 tensor or dtype.
template <class T> bool names_unsigned(const T& arg) {
  using A = std::decay_t<T>;
  if constexpr (std::is_same_v<A, at::Tensor>) {
    return arg.defined() && is_unsigned_dtype(arg.scalar_type());
  } else if constexpr (std::is_same_v<A, at::ScalarType>) {
    return is_unsigned_dtype(arg);
  } else if constexpr (std::is_same_v<A, std::optional<at::Tensor>> ||
                       std::is_same_v<A, std::optional<at::ScalarType>>) {
    return arg.has_value() && names_unsigned(*arg);
  } else if constexpr (std::is_same_v<A, at::TensorList> || std::is_same_v<A, at::ITensorListRef>) {
    for (const at::Tensor& t : arg)
      if (names_unsigned(t)) return true;
    return false;
  } else if constexpr (std::is_same_v<A, c10::List<std::optional<at::Tensor>>>) {
    for (std::optional<at::Tensor> t : arg)
      if (names_unsigned(t)) return true;
    return false;
  } else {
    return false;
  }
}

// The same over a boxed call's arguments: tensors, lists of them and dtypes (ints where the schema says so).
inline bool names_unsigned(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); i++) {
    const c10::IValue& v = args[i];
    if (v.isTensor() && names_unsigned(v.toTensor())) return true;
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        if (names_unsigned(t)) return true;
    if (v.isInt() && i < schema.arguments().size() && names_a_dtype(schema.arguments()[i]) &&
        is_unsigned_dtype(static_cast<at::ScalarType>(v.toInt())))
      return true;
  }
  return false;
}

// A boxed kernel that runs the op on the CPU fallback when it raises NotNativeDtype, or when its policy sends a
// uint16/32/64 call there. The kernel must raise it before it changes the stack (tiny's boxed kernels drop their
// arguments only once they are done).
template <c10::BoxedKernel::BoxedKernelFunction* kernel, UnsignedPolicy policy = UnsignedPolicy::Fallback>
void native_or_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if constexpr (policy != UnsignedPolicy::Native) {
    auto args = torch::jit::last(*stack, op.schema().arguments().size());
    if (names_unsigned(op.schema(), args) && !returns_a_view(op.schema())) {
      if (policy == UnsignedPolicy::Fallback) return fallback(op, stack);
      check_cpu_accepts(op, args);
    }
  }
  try {
    kernel(op, stack);
  } catch (const NotNativeDtype&) {
    fallback(op, stack);
  }
}

class KernelLibrary {
public:
  explicit KernelLibrary(torch::Library& library) : library_(library) {}

  // Boxed kernels and fallthroughs pass through (a boxed kernel wraps itself in native_or_cpu).
  KernelLibrary& impl(const char* name, torch::CppFunction&& f) {
    library_.impl(name, std::move(f));
    return *this;
  }
  template <class FuncType, FuncType* func>
  KernelLibrary& impl(const char* name, c10::CompileTimeFunctionPointer<FuncType, func>,
                      UnsignedPolicy policy = UnsignedPolicy::Fallback) {
    return wrap(name, func,
                static_cast<typename c10::guts::infer_function_traits_t<FuncType>::parameter_types*>(nullptr), policy);
  }
  template <class Func>
  requires std::is_function_v<Func> KernelLibrary& impl(const char* name, Func* func,
                                                        UnsignedPolicy policy = UnsignedPolicy::Fallback) {
    return wrap(name, func, static_cast<typename c10::guts::infer_function_traits_t<Func>::parameter_types*>(nullptr),
                policy);
  }
  template <class Lambda>
  requires c10::guts::is_functor<std::decay_t<Lambda>>::value KernelLibrary&
  impl(const char* name, Lambda&& lambda, UnsignedPolicy policy = UnsignedPolicy::Fallback) {
    return wrap(
        name, std::forward<Lambda>(lambda),
        static_cast<typename c10::guts::infer_function_traits_t<std::decay_t<Lambda>>::parameter_types*>(nullptr),
        policy);
  }

private:
  template <class F, class... Args>
  KernelLibrary& wrap(const char* name, F&& f, c10::guts::typelist::typelist<Args...>* /*parameters*/,
                      UnsignedPolicy policy) {
    using Return = typename c10::guts::infer_function_traits_t<std::decay_t<F>>::return_type;
    std::string qualified = std::string("aten::") + name;
    size_t dot = qualified.find('.');
    std::string op = qualified.substr(0, dot), overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
    auto kernel = [f = std::forward<F>(f), op, overload, policy](Args... args) -> Return {
      auto handle = [&] { return c10::Dispatcher::singleton().findSchemaOrThrow(op.c_str(), overload.c_str()); };
      auto on_cpu = [&]() -> Return {
        return c10::impl::BoxedKernelWrapper<Return(Args...)>::call(c10::BoxedKernel::makeFromFunction<&fallback>(),
                                                                    handle(), c10::DispatchKeySet(), args...);
      };
      // a view op computes nothing: its kernel runs whatever the dtype
      if (policy != UnsignedPolicy::Native && (names_unsigned(args) || ...) && !returns_a_view(handle().schema())) {
        if (policy == UnsignedPolicy::Fallback) return on_cpu();
        check_cpu_accepts(handle(), c10::impl::boxArgs<Args...>(args...));
      }
      try {
        return f(args...); // not forwarded: the fallback may need the arguments again
      } catch (const NotNativeDtype&) {
        return on_cpu();
      }
    };
    library_.impl(name, torch::CppFunction(std::move(kernel)));
    return *this;
  }

  torch::Library& library_;
};

} // namespace tiny
