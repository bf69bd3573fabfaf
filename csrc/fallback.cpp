// The CPU fallback for every ATen op tiny has no kernel for (PRIVATEUSE1.md, "The CPU fallback").
//
// run_on_cpu moves the tensor arguments to the CPU (each a sync) with their sizes, strides and storage
// offset (a CPU kernel may choose its algorithm by layout, and autograd formulas re-derive that choice
// from the tiny tensor: linalg.det factors the transpose of a contiguous input), runs PyTorch's CPU kernel,
// writes mutated arguments (in-place self, out=) back into the tiny tensors with _copy_from_and_resize,
// which writes through views into their base, and moves the other results to tiny; a result that aliases
// a mutated argument is that tiny argument. Around it, tiny:
// - refuses view ops: a CPU copy cannot alias tiny storage, and a copy silently breaks in-place writes
//   through the "view";
// - runs a sparse op (one with a sparse COO or compressed tiny argument) on the CPU's sparse kernel, a sparse
//   argument it mutates written back with copy_ (its indices and values replaced);
// - refuses everything when TINY_FALLBACK=0 (to see what runs natively);
// - warns once per op, and counts calls per op for torch.tiny.stats();
// - hands random ops a CPU generator carrying the tiny generator's state, and stores the state back, so
//   they draw from tiny's generator (seeded by torch.tiny.manual_seed / a tiny torch.Generator), with the
//   CPU's random algorithm.

#include "csrc/fallback.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "csrc/backend.h"
#include "runtime/lazy_buffer.h"

namespace tiny {

namespace {

struct FallbackLog {
  std::mutex mu;
  std::map<std::string, int64_t> calls; // since the last reset_stats
  std::set<std::string> warned;         // for the life of the process
};

FallbackLog& log() {
  static auto* l = new FallbackLog(); // never destroyed: kernels may run during static destruction
  return *l;
}

// Read at every call, so that a process can switch it (the tests and the upstream runner do).
bool fallback_enabled() {
  const char* value = std::getenv("TINY_FALLBACK");
  return value == nullptr || std::string_view(value) != "0";
}

// Counts the call; true the first time this op falls back in this process.
bool record_call(const std::string& name) {
  runtime::stats().fallbacks++;
  FallbackLog& l = log();
  std::lock_guard lock(l.mu);
  l.calls[name]++;
  return l.warned.insert(name).second;
}

bool is_generator_argument(const c10::Argument& arg) {
  c10::TypePtr type = arg.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::GeneratorType;
}

// The tiny device the op runs on: that of its tiny tensor arguments, which torch requires to be one
// device, or else its tiny `device=` argument.
std::optional<c10::Device> tiny_device_of(c10::ArrayRef<c10::IValue> arguments) {
  std::optional<c10::Device> found;
  auto see = [&found](const at::Tensor& t) {
    if (!t.defined() || !t.device().is_privateuseone()) return;
    TORCH_CHECK(!found || *found == t.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", *found, " and ",
                t.device(), "!");
    found = t.device();
  };
  for (const c10::IValue& v : arguments) {
    if (v.isTensor()) see(v.toTensor());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        see(t);
  }
  if (found) return found;
  for (const c10::IValue& v : arguments)
    if (v.isDevice() && v.toDevice().is_privateuseone()) return v.toDevice();
  return std::nullopt;
}

// A CPU copy of a tiny tensor with its sizes, strides and storage offset: the storage span it reads is
// copied. Where that span is far larger than the tensor (a column of a big matrix), a dense copy in the
// tensor's stride order, as .cpu() makes.
at::Tensor to_cpu(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_privateuseone()) return t;
  if (t.layout() != at::kStrided || t.numel() == 0 || t.is_non_overlapping_and_dense()) return t.cpu();
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d)
    span += (t.size(d) - 1) * t.stride(d);
  if (span > 4 * t.numel() + 4096) return t.cpu();
  at::Tensor flat = t.as_strided({span}, {1}, t.storage_offset()).cpu();
  return flat.as_strided(t.sizes(), t.strides(), 0);
}

// An argument (a tensor, a list of tensors, a list of optional tensors, a device) for a CPU kernel: each
// tensor mapped by `f`, a tiny device named as the CPU.
template <class F> c10::IValue for_the_cpu(const c10::IValue& v, F f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList().vec())
      list.push_back(f(t));
    return list;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList().vec())
      list.push_back(t ? std::optional<at::Tensor>(f(*t)) : std::nullopt);
    return list;
  }
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(at::kCPU);
  return v;
}

// Each tiny tensor of an argument on the CPU.
c10::IValue arguments_to_cpu(const c10::IValue& v) { return for_the_cpu(v, to_cpu); }

// A result of the CPU kernel on the tiny device (a tensor or a list of tensors), layout kept.
c10::IValue result_to_tiny(const c10::IValue& v, c10::Device device) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() && t.device().is_cpu() ? t.to(device) : t;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList().vec())
      list.push_back(t.defined() && t.device().is_cpu() ? t.to(device) : t);
    return list;
  }
  return v;
}

// The CPU's values of a mutated argument written back into the tiny tensors.
void write_back(const c10::IValue& cpu, const c10::IValue& tiny) {
  if (tiny.isTensor()) {
    const at::Tensor& t = tiny.toTensor();
    if (t.defined() && (t.is_sparse() || t.is_sparse_csr())) // its indices and values replaced by the CPU's
      t.copy_(cpu.toTensor());
    else if (t.defined() && t.device().is_privateuseone())
      at::_copy_from_and_resize(cpu.toTensor(), t);
  } else if (tiny.isTensorList()) {
    std::vector<at::Tensor> from = cpu.toTensorList().vec(), to = tiny.toTensorList().vec();
    for (size_t i = 0; i < to.size(); ++i)
      if (to[i].defined() && to[i].device().is_privateuseone()) at::_copy_from_and_resize(from[i], to[i]);
  }
}

// The op's CPU kernel on CPU copies of the arguments; see the file comment.
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  auto device = tiny_device_of(c10::ArrayRef<c10::IValue>(*stack).slice(first, args.size()));
  TORCH_CHECK(device.has_value(), "tiny: the CPU fallback of ", schema.name(),
              " found no tiny tensor or device among its arguments");
  std::vector<c10::IValue> tiny_args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  for (size_t i = 0; i < args.size(); ++i)
    (*stack)[first + i] = arguments_to_cpu(tiny_args[i]);
  std::vector<c10::IValue> cpu_args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());

  // a sparse tiny tensor among the arguments: the CPU's sparse (COO or compressed) kernel
  c10::DispatchKey key = c10::DispatchKey::CPU;
  auto see = [&key](const at::Tensor& t) {
    if (t.is_sparse_csr()) key = c10::DispatchKey::SparseCsrCPU;
    if (t.is_sparse() && key == c10::DispatchKey::CPU) key = c10::DispatchKey::SparseCPU;
  };
  for (const c10::IValue& v : tiny_args) {
    if (v.isTensor()) see(v.toTensor());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        see(t);
  }
  op.redispatchBoxed(c10::DispatchKeySet(key), stack);

  for (size_t i = 0; i < args.size(); ++i) {
    const c10::AliasInfo* alias = args[i].alias_info();
    if (alias != nullptr && alias->isWrite()) write_back(cpu_args[i], tiny_args[i]);
  }
  const auto& returns = schema.returns();
  const size_t first_return = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& value = (*stack)[first_return + r];
    const c10::AliasInfo* alias = returns[r].alias_info();
    if (alias == nullptr || !alias->isWrite()) {
      value = result_to_tiny(value, *device);
      continue;
    }
    // The mutated argument this result aliases (same alias set: out= and in-place self) is the result.
    bool found = false;
    for (size_t i = 0; i < args.size() && !found; ++i) {
      const c10::AliasInfo* arg_alias = args[i].alias_info();
      if (arg_alias != nullptr && arg_alias->isWrite() && arg_alias->beforeSets() == alias->beforeSets()) {
        value = tiny_args[i];
        found = true;
      }
    }
    TORCH_INTERNAL_ASSERT(found, "tiny: the CPU fallback of ", schema.name(), " found no argument result ", r,
                          " aliases");
  }
}

// A tiny generator lent to a CPU kernel: a CPU generator with its state while the kernel runs, the state
// stored back into the tiny generator afterwards. CPU kernels accept CPU generators only.
class LentGenerator {
public:
  LentGenerator(at::Generator tiny_gen) : tiny_(std::move(tiny_gen)), lock_(tiny_.mutex()) {
    cpu_ = at::make_generator<at::CPUGeneratorImpl>();
    cpu_.set_state(tiny_.get_state());
  }
  ~LentGenerator() { tiny_.set_state(cpu_.get_state()); }
  LentGenerator(const LentGenerator&) = delete;
  LentGenerator& operator=(const LentGenerator&) = delete;
  const at::Generator& cpu() const { return cpu_; }

private:
  at::Generator tiny_;
  std::unique_lock<std::mutex> lock_;
  at::Generator cpu_;
};

} // namespace

bool names_a_dtype(const c10::Argument& arg) {
  c10::TypePtr type = arg.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::ScalarTypeType;
}

bool returns_a_view(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    if (alias != nullptr && !alias->isWrite()) return true;
  }
  return false;
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = c10::toString(schema.operator_name());
  TORCH_CHECK(!returns_a_view(schema), "tiny: ", name,
              " is a view op with no tiny kernel; the CPU fallback cannot run it, because a CPU copy would not "
              "share the tiny tensor's storage");
  TORCH_CHECK(fallback_enabled(), "tiny: ", name,
              " has no tiny kernel and the CPU fallback is disabled (TINY_FALLBACK=0)");
  if (record_call(name) || c10::WarningUtils::get_warnAlways())
    TORCH_WARN("tiny: ", name,
               " has no tiny kernel; it runs on the CPU (inputs copied to the CPU and results back). "
               "This warning is shown once per op.");

  // Random ops: swap each tiny generator argument (or the default one, for none) for a lent CPU one.
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  std::vector<std::unique_ptr<LentGenerator>> lent;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_generator_argument(args[i])) continue;
    c10::IValue& value = (*stack)[first + i];
    std::optional<at::Generator> gen;
    if (value.isGenerator() && value.toGenerator().device().is_privateuseone()) {
      gen = value.toGenerator();
    } else if (value.isNone()) {
      auto device = tiny_device_of(c10::ArrayRef<c10::IValue>(*stack).slice(first, args.size()));
      if (device) gen = default_generator(device->index());
    }
    if (!gen) continue;
    lent.push_back(std::make_unique<LentGenerator>(*gen));
    value = c10::IValue(lent.back()->cpu());
  }

  run_on_cpu(op, stack);
}

namespace {

// A stand-in for a tensor when asking the CPU kernel: same dtype and rank, sizes 1 (0 stays 0). A CPU
// scalar (0-dim) is itself; a CPU tensor mixed with tiny ones gets its device error after the probe.
at::Tensor probe_tensor(const at::Tensor& t) {
  if (!t.defined() || (t.dim() == 0 && !t.device().is_privateuseone())) return t;
  std::vector<int64_t> sizes;
  for (int64_t s : t.sizes())
    sizes.push_back(std::min<int64_t>(s, 1));
  return at::ones(sizes, t.options().device(at::kCPU));
}

// What the CPU's answer depends on: the op, and each argument's dtype and whether it is empty or 0-d
// (tensors; the CPU returns early on an empty tensor, before it checks dtypes) or kind (scalars), the
// dtype a dtype argument names (sum's), and how many ints a list holds (count_nonzero of no dims is a
// kernel of its own). Built into `key` (cleared first), whose storage a caller keeps from call to call.
void add_tensor_key(std::string& key, const at::Tensor& t) {
  if (!t.defined()) {
    key += '-';
    return;
  }
  key += static_cast<char>(t.scalar_type());
  key += t.numel() == 0 ? 'e' : t.dim() == 0 ? 'z' : 'n';
}

void probe_key(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, std::string& key) {
  const c10::FunctionSchema* schema = &op.schema();
  key.assign(reinterpret_cast<const char*>(&schema), sizeof(schema));
  for (size_t i = 0; i < args.size(); i++) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      add_tensor_key(key, v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec())
        add_tensor_key(key, t);
    } else if (v.isScalar() || v.isUnsigned()) { // a Python int above INT64_MAX is no isScalar()
      key += v.isDouble() ? 'd' : v.isInt() ? 'i' : v.isBool() ? 'b' : v.isUnsigned() ? 'u' : 'c';
      if (v.isInt() && i < schema->arguments().size() && names_a_dtype(schema->arguments()[i]))
        key += static_cast<char>(v.toInt());
    } else if (v.isIntList()) {
      key += static_cast<char>('0' + std::min<size_t>(v.toIntList().size(), 64));
    } else if (v.isString()) {
      key += v.toStringRef(); // div's rounding_mode
    }
    key += ',';
  }
}

// The calls this thread probed, so that the lookup of every recorded op takes no lock (a shared set's mutex
// was a measured part of the cost of recording an op); a new thread probes once again.
std::unordered_set<std::string>& accepted_calls() {
  thread_local std::unordered_set<std::string> accepted;
  return accepted;
}

} // namespace

void append_probe_key(std::string& key, const at::Tensor& t) {
  add_tensor_key(key, t);
  key += ',';
}

void append_probe_key(std::string& key, const at::Scalar& s) {
  key += s.isFloatingPoint() ? 'd' : s.isBoolean() ? 'b' : s.isUnsigned() ? 'u' : s.isIntegral(false) ? 'i' : 'c';
  key += ',';
}

void append_probe_key(std::string& key, const std::optional<c10::string_view>& s) {
  if (s) key += *s;
  key += ',';
}

namespace {
// The CPU kernel called on size-1 stand-ins of args (see check_cpu_accepts); throws what it throws.
void probe_on_cpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  torch::jit::Stack stack;
  const auto& schema = op.schema().arguments();
  for (size_t i = 0; i < args.size(); i++) {
    const c10::AliasInfo* alias = i < schema.size() ? schema[i].alias_info() : nullptr;
    bool out = alias && alias->isWrite() && schema[i].name() != "self" && args[i].isTensor();
    // an out= tensor is empty, so the CPU resizes it without a warning
    stack.push_back(out ? c10::IValue(at::empty({0}, args[i].toTensor().options().device(at::kCPU)))
                        : for_the_cpu(args[i], probe_tensor));
  }
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  op.callBoxed(&stack);
}

// Runs probe once per key and thread, remembering the keys whose probe returned.
void accept_once(const std::string& key, c10::function_ref<void()> probe) {
  if (accepted_calls().contains(key)) return;
  std::string probed = key; // the CPU kernel's call may record tiny ops on this thread
  probe();
  accepted_calls().insert(std::move(probed));
}
} // namespace

void check_cpu_accepts(const c10::OperatorHandle& op, const std::string& key,
                       c10::function_ref<torch::jit::Stack()> box) {
  accept_once(key, [&] { probe_on_cpu(op, box()); });
}

void check_cpu_accepts(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  thread_local std::string key; // reused: building the key allocates nothing once it has grown
  probe_key(op, args, key);
  accept_once(key, [&] { probe_on_cpu(op, args); });
}

std::map<std::string, int64_t> fallback_op_counts() {
  FallbackLog& l = log();
  std::lock_guard lock(l.mu);
  return l.calls;
}

void reset_fallback_op_counts() {
  FallbackLog& l = log();
  std::lock_guard lock(l.mu);
  l.calls.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }
// Sparse tensors (aten_ops/sparse.cpp): the ops tiny has no sparse kernel for run on the CPU's sparse kernels.
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

} // namespace tiny
