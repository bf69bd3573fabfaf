#pragma once
// The CPU fallback: every ATen op tiny has no kernel for runs on PyTorch's CPU kernel (csrc/fallback.cpp).
// It counts its calls per op; runtime::stats().fallbacks holds their total.

#include <ATen/native/CPUFallback.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tiny {

// Whether an op is a view op: a return aliases an argument without writing it (Tensor(a)). The fallback
// refuses them: a CPU copy would not share the tiny tensor's storage.
bool returns_a_view(const c10::FunctionSchema& schema);
// Whether an argument is a dtype (ScalarType or an optional one): an int in a boxed call.
bool names_a_dtype(const c10::Argument& arg);

// The boxed fallback itself, registered for every op without a tiny kernel.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A native kernel runs a case it does not compute (a dtype whose CPU kernel rounds its own way) through
// the fallback, counted, warned about and refused under TINY_FALLBACK=0 like any other:
//   return on_cpu<at::_ops::upsample_bilinear2d>(self, output_size, align_corners, scales_h, scales_w);
template <class Op, class... Args> auto on_cpu(Args&&... args) {
  return at::native::call_fallback_fn<&fallback, Op>::call(std::forward<Args>(args)...);
}

// Raises what PyTorch's CPU kernel raises for arguments of these dtypes, so that tiny refuses exactly
// what the CPU refuses (NotImplementedError for "abs_cpu" of bool, "Boolean inputs not supported for
// relu", ...): the CPU kernel runs once on tensors of the same dtypes and ranks with every size 1 (0 where
// the size is 0), other arguments as given; combinations it accepted are remembered.
void check_cpu_accepts(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);
// The same for an unboxed call: `key` names the call as probe_key would (append_probe_key builds one from typed
// arguments), and `box` makes its arguments only when this thread has not asked the CPU about the key yet, so
// that the common call boxes nothing (recording cost).
void check_cpu_accepts(const c10::OperatorHandle& op, const std::string& key,
                       c10::function_ref<torch::jit::Stack()> box);
void append_probe_key(std::string& key, const at::Tensor& t);
void append_probe_key(std::string& key, const at::Scalar& s);
void append_probe_key(std::string& key, const std::optional<c10::string_view>& s);
template <class... Args> void check_cpu_accepts_unboxed(const c10::OperatorHandle& op, const Args&... args) {
  thread_local std::string key; // reused: building the key allocates nothing once it has grown
  const c10::FunctionSchema* schema = &op.schema();
  key.assign(reinterpret_cast<const char*>(&schema), sizeof(schema));
  (append_probe_key(key, args), ...);
  check_cpu_accepts(op, key, [&] { return c10::impl::boxArgs<Args...>(args...); });
}
template <class Op, class... Args> void check_cpu_accepts(const Args&... args) {
  static const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
  torch::jit::Stack stack = c10::impl::boxArgs<Args...>(args...);
  check_cpu_accepts(handle, stack);
}

// Calls through the fallback since the last reset, by operator name ("aten::cumsum", "aten::sort.values").
std::map<std::string, int64_t> fallback_op_counts();
void reset_fallback_op_counts();

} // namespace tiny
