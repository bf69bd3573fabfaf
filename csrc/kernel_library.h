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
// The wrapper costs one extra call on the common path; the try block itself costs nothing until it throws.

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/TypeTraits.h>
#include <torch/library.h>

#include <string>
#include <type_traits>
#include <utility>

#include "csrc/fallback.h"
#include "csrc/tensor_bridge.h"

namespace tiny {

// A boxed kernel that runs the op on the CPU fallback when it raises NotNativeDtype. The kernel must raise
// it before it changes the stack (tiny's boxed kernels drop their arguments only once they are done).
template <c10::BoxedKernel::BoxedKernelFunction* kernel>
void native_or_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
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
  KernelLibrary& impl(const char* name, c10::CompileTimeFunctionPointer<FuncType, func>) {
    return wrap(name, func,
                static_cast<typename c10::guts::infer_function_traits_t<FuncType>::parameter_types*>(nullptr));
  }
  template <class Func>
  requires std::is_function_v<Func> KernelLibrary& impl(const char* name, Func* func) {
    return wrap(name, func, static_cast<typename c10::guts::infer_function_traits_t<Func>::parameter_types*>(nullptr));
  }
  template <class Lambda>
  requires c10::guts::is_functor<std::decay_t<Lambda>>::value KernelLibrary& impl(const char* name, Lambda&& lambda) {
    return wrap(
        name, std::forward<Lambda>(lambda),
        static_cast<typename c10::guts::infer_function_traits_t<std::decay_t<Lambda>>::parameter_types*>(nullptr));
  }

private:
  template <class F, class... Args>
  KernelLibrary& wrap(const char* name, F&& f, c10::guts::typelist::typelist<Args...>* /*parameters*/) {
    using Return = typename c10::guts::infer_function_traits_t<std::decay_t<F>>::return_type;
    std::string qualified = std::string("aten::") + name;
    size_t dot = qualified.find('.');
    std::string op = qualified.substr(0, dot), overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
    auto kernel = [f = std::forward<F>(f), op, overload](Args... args) -> Return {
      try {
        return f(args...); // not forwarded: the fallback may need the arguments again
      } catch (const NotNativeDtype&) {
        c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op.c_str(), overload.c_str());
        return c10::impl::BoxedKernelWrapper<Return(Args...)>::call(c10::BoxedKernel::makeFromFunction<&fallback>(),
                                                                    handle, c10::DispatchKeySet(), args...);
      }
    };
    library_.impl(name, torch::CppFunction(std::move(kernel)));
    return *this;
  }

  torch::Library& library_;
};

} // namespace tiny
