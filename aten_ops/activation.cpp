// Activation functions and their backward ops: gelu (none, tanh), silu, mish, leaky_relu, elu (and
// what selu and celu call), hardtanh (and relu6), hardshrink, softshrink, hardswish, hardsigmoid, softplus, threshold
// (relu's backward is threshold_backward), log_sigmoid, glu, prelu (_prelu_kernel and its backward), rrelu_with_noise,
// and the backward ops sigmoid_backward and tanh_backward.
//
// One boxed kernel serves the functional, in-place and out= forms of every op in the table below, as
// elementwise.cpp does: torch's TensorIterator checks the call (broadcasting, type promotion, out=
// resizing with its warning, overlap) and allocates the result the way the CPU kernel's meta function
// does; the table says which dtypes the CPU kernel takes and how the value is built. Forward ops take
// their input's dtype (`Kind::Unary`); backward ops promote their operands (`Kind::Binary`), as torch's
// build_borrowing_binary_op does. float16/bfloat16 compute in float32 and round once.
//
// mish_backward and silu_backward are tiny's own, not torch's CompositeImplicitAutograd forms, whose ops each round
// to a float16/bfloat16 input's dtype: near the derivative's zero (x about -1.2) that lost 10-25x the CPU's accuracy
// (found by torch_tests/fuzz/shapes.py). relu itself is in elementwise.cpp.

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

enum class Kind {
  Unary,  // one operand; result and out= in its dtype (torch's build_unary_op)
  Binary, // common dtype of the operands; result must cast safely to out= (build_borrowing_binary_op)
  Same,   // every operand and out= in one dtype (a default TensorIteratorConfig)
};

struct Call {
  std::unordered_map<std::string, UOpPtr> in; // operands by argument name: compute dtype, result shape
  std::unordered_map<std::string, c10::IValue> params;
  DType compute = DType::Float32;
  Shape shape;
  bool onednn = false; // the CPU computes this call through oneDNN (see cpu_gelu_uses_onednn)

  const UOpPtr& operator[](const std::string& name) const { return in.at(name); }
  // A scalar the user passed (negative_slope, alpha, ...): a runtime argument, so new values compile nothing.
  UOpPtr scalar(const std::string& name) const { return scalar_constant(params.at(name).toScalar(), compute, shape); }
  double number(const std::string& name) const { return params.at(name).toScalar().toDouble(); }
  // A number of the formula itself: a literal the compiler can fold.
  UOpPtr constant(double v) const {
    UOpPtr c = is_float(compute) ? const_float(compute, v) : const_int(compute, static_cast<int64_t>(v));
    return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
  }
  bool flag(const std::string& name) const { return params.at(name).toBool(); }
  std::string str(const std::string& name) const { return std::string(params.at(name).toStringRef()); }
};

using Build = std::function<UOpPtr(const Call&)>;
using Check = std::function<void(const Call&)>;

struct Activation {
  Kind kind;
  const char* cpu_name; // the CPU kernel's name in torch's "... not implemented for 'Long'" error
  bool integers;        // the CPU kernel also takes integer dtypes (not bool)
  Build build;
  Check check = nullptr; // torch's op-specific argument checks
  // the functional result is empty_like(self), as the CPU's hardtanh computes into (the input's strides, a size-1
  // dim's included, where its iterator would allocate (1, 1) for a (2, 1) input of strides (1, 2))
  bool like_self = false;
};

// ---- value builders ----

UOpPtr sigmoid(const Call& c, const UOpPtr& x) { return alu(Ops::RECIP, add(c.constant(1.0), exp(alu(Ops::NEG, x)))); }

// torch's softplus: x when beta * x > threshold, else log1p(exp(beta * x)) / beta.
UOpPtr softplus(const UOpPtr& x, const UOpPtr& beta, const UOpPtr& threshold) {
  UOpPtr bx = mul(x, beta);
  return where(lt(threshold, bx), x, div(alu(Ops::LOG1P, exp(bx)), beta));
}

constexpr double kSqrt1_2 = 0.70710678118654752440; // M_SQRT1_2
constexpr double kBeta = 0.79788456080286535588;    // sqrt(2 / pi) = M_SQRT2 * M_2_SQRTPI * 0.5
constexpr double kKappa = 0.044715;
constexpr double kPdfScale = 0.39894228040143267794; // M_2_SQRTPI * M_SQRT1_2 * 0.5 = 1 / sqrt(2 pi)

void check_gelu_approximate(const Call& c) {
  std::string a = c.str("approximate");
  TORCH_CHECK(a == "none" || a == "tanh", "approximate argument must be either none or tanh.");
}

UOpPtr gelu(const Call& c) {
  const UOpPtr& x = c["self"];
  if (c.str("approximate") == "tanh") {
    UOpPtr inner = mul(c.constant(kBeta), add(x, mul(c.constant(kKappa), mul(mul(x, x), x))));
    return mul(mul(c.constant(0.5), x), add(c.constant(1.0), alu(Ops::TANH, inner)));
  }
  UOpPtr v = mul(mul(x, c.constant(0.5)), add(c.constant(1.0), alu(Ops::ERF, mul(x, c.constant(kSqrt1_2)))));
  // oneDNN's GELU gives NaN at +inf, torch's own kernel inf (fuzzer seeds 17335, 22133)
  return c.onednn ? where(eq(x, c.constant(INFINITY)), c.constant(NAN), v) : v;
}

// Whether the CPU computes gelu(self) through oneDNN: torch does (its use_mkldnn) for a contiguous self of two or
// more elements in float32, and in bfloat16 and float16 where the CPU has the instructions oneDNN needs for them,
// unless oneDNN is turned off (torch.backends.mkldnn). Asked of the CPU itself, once per dtype and setting: oneDNN's
// GELU is the one whose gelu(+inf) is NaN.
bool cpu_gelu_uses_onednn(const at::Tensor& self) {
  const at::ScalarType dt = self.scalar_type();
  if (!self.is_contiguous() || self.numel() <= 1 || (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf))
    return false;
  static std::mutex mu;
  static std::map<std::pair<at::ScalarType, bool>, bool> asked;
  const std::pair key{dt, at::globalContext().userEnabledMkldnn()};
  std::lock_guard lock(mu);
  auto it = asked.find(key);
  if (it == asked.end()) {
    at::Tensor probe = at::gelu(at::full({2}, INFINITY, at::TensorOptions().dtype(dt)));
    it = asked.emplace(key, at::isnan(probe).all().item<bool>()).first;
  }
  return it->second;
}

UOpPtr gelu_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self"];
  if (c.str("approximate") == "tanh") {
    UOpPtr x2 = mul(x, x);
    UOpPtr t = alu(Ops::TANH, mul(c.constant(kBeta), add(x, mul(c.constant(kKappa), mul(x2, x)))));
    UOpPtr left = mul(c.constant(0.5), x), right = add(c.constant(1.0), t);
    UOpPtr dleft = mul(c.constant(0.5), right);
    UOpPtr dtanh = sub(c.constant(1.0), mul(t, t));
    UOpPtr dinner = mul(c.constant(kBeta), add(c.constant(1.0), mul(c.constant(3 * kKappa), x2)));
    return mul(g, add(dleft, mul(mul(left, dtanh), dinner)));
  }
  UOpPtr cdf = mul(c.constant(0.5), add(c.constant(1.0), alu(Ops::ERF, mul(x, c.constant(kSqrt1_2)))));
  UOpPtr pdf = mul(exp(mul(c.constant(-0.5), mul(x, x))), c.constant(kPdfScale));
  return mul(g, add(cdf, mul(x, pdf)));
}

UOpPtr silu_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self"];
  UOpPtr s = sigmoid(c, x);
  return mul(mul(g, s), add(c.constant(1.0), mul(x, sub(c.constant(1.0), s))));
}

// tanh(softplus(x)), softplus without its threshold, as the CPU's mish kernels compute it
UOpPtr tanh_softplus(const UOpPtr& x) { return alu(Ops::TANH, alu(Ops::LOG1P, exp(x))); }

UOpPtr mish(const Call& c) { return mul(c["self"], tanh_softplus(c["self"])); }

// The CPU kernel's formula, g (t + x s (1 - t^2)) for t = tanh(softplus(x)) and s = sigmoid(x).
UOpPtr mish_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self"];
  UOpPtr t = tanh_softplus(x), s = sigmoid(c, x);
  return mul(g, add(t, mul(mul(x, s), sub(c.constant(1.0), mul(t, t)))));
}

void check_leaky_relu_backward(const Call& c) {
  TORCH_CHECK(!c.flag("self_is_result") || c.number("negative_slope") >= 0.0,
              "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
              "This is caused by calling in-place forward function with a negative slope, please call out-of-place "
              "version instead. File an issue at https://github.com/pytorch/pytorch if you do require supporting "
              "in-place leakRelu backward calculation with negative slope");
}

// elu(x) = x * scale for x > 0, else (exp(x * input_scale) - 1) * alpha * scale
UOpPtr elu(const Call& c) {
  const UOpPtr& x = c["self"];
  UOpPtr neg = mul(alu(Ops::EXPM1, mul(x, c.scalar("input_scale"))), mul(c.scalar("alpha"), c.scalar("scale")));
  return where(le(x, c.constant(0.0)), neg, mul(x, c.scalar("scale")));
}

// From the result (in-place elu): the derivative is input_scale * (y + alpha * scale) where y <= 0.
UOpPtr elu_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self_or_result"];
  UOpPtr negcoef = mul(c.scalar("alpha"), c.scalar("scale")), in_scale = c.scalar("input_scale");
  UOpPtr neg = c.flag("is_result") ? mul(mul(g, in_scale), add(x, negcoef))
                                   : mul(mul(mul(g, in_scale), negcoef), exp(mul(x, in_scale)));
  return where(le(x, c.constant(0.0)), neg, mul(g, c.scalar("scale")));
}

void check_elu_backward(const Call& c) {
  TORCH_CHECK(!c.flag("is_result") || c.number("alpha") >= 0.0,
              "In-place elu backward calculation is triggered with a negative slope which is not supported. This is "
              "caused by calling in-place forward function with a negative slope, please call out-of-place version "
              "instead.");
}

// hardtanh is torch's clamp with the bounds converted to the input's dtype (integer bounds truncate).
void check_hardtanh(const Call& c) {
  TORCH_CHECK_NOT_IMPLEMENTED(c.compute != DType::Bool, "Bool inputs not supported for hardtanh");
  if (!is_float(c.compute))
    TORCH_CHECK(c.compute != DType::UInt8 || (c.params.at("min_val").toScalar().toLong() >= 0 &&
                                              c.params.at("max_val").toScalar().toLong() >= 0),
                "cannot do hardtanh on an unsigned type with negative limits");
}

UOpPtr hardtanh(const Call& c) {
  return alu(Ops::MIN, alu(Ops::MAX, c["self"], c.scalar("min_val")), c.scalar("max_val"));
}

UOpPtr hardtanh_backward(const Call& c) {
  const UOpPtr& x = c["self"];
  UOpPtr outside = alu(Ops::OR, le(x, c.scalar("min_val")), le(c.scalar("max_val"), x));
  return where(outside, c.constant(0.0), c["grad_output"]);
}

UOpPtr relu6_of(const Call& c, const UOpPtr& x) {
  return alu(Ops::MIN, alu(Ops::MAX, add(x, c.constant(3.0)), c.constant(0.0)), c.constant(6.0));
}

// The CPU kernel's branches: 0 up to -3 (included), g (x / 3 + 1/2) strictly between, g from 3 (included); at -3 and 3
// the two one-sided slopes differ, and the CPU takes the outer one (found by shapes.py: bfloat16 holds -3 exactly).
UOpPtr hardswish_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self"];
  UOpPtr mid = mul(g, add(div(x, c.constant(3.0)), c.constant(0.5)));
  return where(le(x, c.constant(-3.0)), c.constant(0.0), where(lt(x, c.constant(3.0)), mid, g));
}

UOpPtr hardsigmoid_backward(const Call& c) {
  const UOpPtr& x = c["self"];
  UOpPtr inside = alu(Ops::AND, lt(c.constant(-3.0), x), lt(x, c.constant(3.0)));
  return where(inside, div(c["grad_output"], c.constant(6.0)), c.constant(0.0));
}

UOpPtr softplus_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self"];
  UOpPtr beta = c.scalar("beta"), bx = mul(x, beta), z = exp(bx);
  return where(lt(c.scalar("threshold"), bx), g, div(mul(g, z), add(z, c.constant(1.0))));
}

// log_sigmoid's backward from the input; the CPU kernel's buffer holds exp(-|x|), recomputed here.
UOpPtr log_sigmoid_backward(const Call& c) {
  const UOpPtr &g = c["grad_output"], &x = c["self"];
  UOpPtr neg = lt(x, c.constant(0.0));
  UOpPtr z = exp(alu(Ops::NEG, alu(Ops::ABS, x)));
  UOpPtr sign = where(neg, c.constant(1.0), c.constant(-1.0));
  UOpPtr max_deriv = where(neg, c.constant(1.0), c.constant(0.0));
  return mul(sub(max_deriv, mul(sign, div(z, add(c.constant(1.0), z)))), g);
}

// hardshrink and softshrink zero |x| <= lambd; their gradients are zero there too.
UOpPtr within_lambd(const Call& c, const UOpPtr& x) {
  UOpPtr lambd = c.scalar("lambd");
  return alu(Ops::AND, le(alu(Ops::NEG, lambd), x), le(x, lambd));
}

UOpPtr shrink_backward(const Call& c) {
  const UOpPtr& g = c.in.count("grad_out") ? c["grad_out"] : c["grad_output"];
  return where(within_lambd(c, c["self"]), c.constant(0.0), g);
}

// softshrink moves the rest toward zero by lambd; NaN stays NaN. Within lambd +0.0, as the CPU's vector loop gives
// (its scalar loop, a tensor's last n % lanes elements, computes x * 0: -0.0 for a negative x).
UOpPtr softshrink(const Call& c) {
  const UOpPtr& x = c["self"];
  UOpPtr lambd = c.scalar("lambd");
  UOpPtr inner = where(alu(Ops::CMPNE, x, x), x, c.constant(0.0));
  return where(lt(lambd, x), sub(x, lambd), where(lt(x, alu(Ops::NEG, lambd)), add(x, lambd), inner));
}

void check_softshrink(const Call& c) {
  TORCH_CHECK(c.number("lambd") >= 0, "lambda must be greater or equal to 0, but found to be ", c.number("lambd"), ".");
}

const std::unordered_map<std::string, Activation>& table() {
  using K = Kind;
  static const std::unordered_map<std::string, Activation> t = {
      {"gelu", {K::Unary, "GeluKernelImpl", false, gelu, check_gelu_approximate}},
      {"gelu_backward", {K::Binary, "GeluBackwardKernelImpl", false, gelu_backward, check_gelu_approximate}},
      {"silu", {K::Unary, "silu_cpu", false, [](const Call& c) { return mul(c["self"], sigmoid(c, c["self"])); }}},
      {"silu_backward", {K::Binary, "silu_backward_cpu", false, silu_backward}},
      {"mish", {K::Unary, "mish_cpu", false, mish}},
      {"mish_backward", {K::Binary, "mish_backward_cpu", false, mish_backward}},
      {"leaky_relu",
       {K::Unary, "leaky_relu_cpu", false,
        [](const Call& c) {
          const UOpPtr& x = c["self"];
          return where(lt(c.constant(0.0), x), x, mul(x, c.scalar("negative_slope")));
        }}},
      {"leaky_relu_backward",
       {K::Binary, "leaky_relu_backward_cpu", false,
        [](const Call& c) {
          const UOpPtr &g = c["grad_output"], &x = c["self"];
          return where(lt(c.constant(0.0), x), g, mul(g, c.scalar("negative_slope")));
        },
        check_leaky_relu_backward}},
      {"elu", {K::Unary, "elu_cpu", false, elu}},
      {"elu_backward", {K::Binary, "elu_backward_cpu", false, elu_backward, check_elu_backward}},
      {"hardtanh", {K::Unary, "hardtanh_cpu", true, hardtanh, check_hardtanh, /*like_self=*/true}},
      {"hardtanh_backward", {K::Binary, "hardshrink_backward_cpu", false, hardtanh_backward}},
      {"hardshrink",
       {K::Unary, "hardshrink_cpu", false,
        [](const Call& c) { return where(within_lambd(c, c["self"]), c.constant(0.0), c["self"]); }}},
      {"hardshrink_backward", {K::Binary, "hardshrink_backward_cpu", false, shrink_backward}},
      {"softshrink", {K::Unary, "softshrink_cpu", false, softshrink, check_softshrink}},
      {"softshrink_backward", {K::Binary, "softshrink_backward_cpu", false, shrink_backward}},
      {"hardswish",
       {K::Unary, "hardswish_cpu", false,
        [](const Call& c) { return div(mul(c["self"], relu6_of(c, c["self"])), c.constant(6.0)); }}},
      {"hardswish_backward", {K::Binary, "hardswish_backward_cpu", false, hardswish_backward}},
      {"hardsigmoid",
       {K::Unary, "hardsigmoid_cpu", false,
        [](const Call& c) { return div(relu6_of(c, c["self"]), c.constant(6.0)); }}},
      {"hardsigmoid_backward", {K::Binary, "hardsigmoid_backward_cpu", false, hardsigmoid_backward}},
      {"softplus",
       {K::Unary, "softplus_cpu", false,
        [](const Call& c) { return softplus(c["self"], c.scalar("beta"), c.scalar("threshold")); }}},
      {"softplus_backward", {K::Binary, "softplus_backward_cpu", false, softplus_backward}},
      {"threshold",
       {K::Binary, "threshold_cpu", true,
        [](const Call& c) {
          const UOpPtr& x = c["self"];
          return where(le(x, c.scalar("threshold")), c.scalar("value"), x);
        }}},
      {"threshold_backward",
       {K::Binary, "threshold_cpu", true,
        [](const Call& c) { return where(le(c["self"], c.scalar("threshold")), c.constant(0.0), c["grad_output"]); }}},
      {"sigmoid_backward",
       {K::Binary, "sigmoid_backward_cpu", false,
        [](const Call& c) {
          const UOpPtr& y = c["output"];
          return mul(mul(c["grad_output"], sub(c.constant(1.0), y)), y);
        }}},
      {"tanh_backward",
       {K::Binary, "tanh_backward_cpu", false,
        [](const Call& c) {
          const UOpPtr& y = c["output"];
          return mul(c["grad_output"], sub(c.constant(1.0), mul(y, y)));
        }}},
      {"log_sigmoid_backward", {K::Same, "log_sigmoid_backward_cpu", false, log_sigmoid_backward}},
      // prelu's weight arrives already shaped to broadcast against self; both in one dtype, as the CPU asks
      {"_prelu_kernel",
       {K::Same, "prelu_cpu", false,
        [](const Call& c) {
          const UOpPtr& x = c["self"];
          return where(lt(c.constant(0.0), x), x, mul(c["weight"], x));
        }}},
  };
  return t;
}

// The op family of a schema name: aten::gelu_ and aten::gelu.out are both "gelu".
std::string family(const c10::FunctionSchema& s) {
  std::string n = s.name().substr(s.name().find("::") + 2);
  if (n.back() == '_') n.pop_back();
  return n;
}

at::TensorIterator make_iterator(Kind kind, const at::Tensor& out, const std::vector<at::Tensor>& ins) {
  at::TensorIteratorConfig cfg;
  cfg.set_check_mem_overlap(true).add_output(out);
  for (const at::Tensor& t : ins)
    cfg.add_const_input(t);
  if (kind == Kind::Binary)
    cfg.allow_cpu_scalars(true)
        .promote_inputs_to_common_dtype(true)
        .cast_common_dtype_to_outputs(true)
        .enforce_safe_casting_to_output(true);
  return cfg.build();
}

UOpPtr operand(const at::Tensor& t, DType compute, const Shape& shape) {
  TORCH_CHECK(t.is_privateuseone(), "Expected all tensors to be on the same device, but found at least two devices, ",
              t.device(), " and tiny:0!");
  UOpPtr v = cast(read(t), compute);
  Shape padded(shape.size() - v->shape.size(), 1);
  padded.insert(padded.end(), v->shape.begin(), v->shape.end());
  return expand(reshape(v, padded), shape);
}

void activation_kernel(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = handle.schema();
  const Activation& op = table().at(family(schema));
  size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);

  Call call;
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  at::Tensor out;
  bool inplace = false;
  for (size_t i = 0; i < nargs; i++) {
    const c10::Argument& arg = schema.arguments()[i];
    const c10::IValue& v = args[i];
    if (arg.alias_info() && arg.alias_info()->isWrite()) {
      out = v.toTensor();
      inplace = arg.name() == "self";
      if (!inplace) continue;
    }
    if (v.isTensor()) {
      names.push_back(arg.name());
      tensors.push_back(v.toTensor());
    } else {
      call.params[arg.name()] = v;
    }
  }

  if (op.like_self && !out.defined()) out = at::empty_like(tensors.at(0));
  auto iter = make_iterator(op.kind, out, tensors);
  at::Tensor result = iter.output();
  at::ScalarType dtype = op.kind == Kind::Binary ? iter.common_dtype() : tensors.at(0).scalar_type();
  std::string name = family(schema);
  bool complex = dtype == at::kComplexFloat || dtype == at::kComplexDouble;
  if ((name == "sigmoid_backward" || name == "tanh_backward" || name == "silu") && complex) {
    // torch's complex gradients of sigmoid and tanh: the derivative conjugated; its complex silu:
    // x / (1 + exp(-x)); from native complex ops
    if (result.numel() > 0) {
      if (name == "silu") {
        const at::Tensor& x = tensors.at(0);
        result.copy_(x.div(x.neg().exp().add(1)));
      } else {
        const at::Tensor &grad = tensors.at(0), &y = tensors.at(1);
        at::Tensor d = name == "sigmoid_backward" ? at::rsub(y, 1).mul(y) : at::rsub(y.mul(y), 1);
        result.copy_(grad.mul(d.conj()));
      }
    }
    torch::jit::drop(*stack, nargs);
    torch::jit::push(*stack, inplace ? tensors.at(0) : out.defined() ? out : result);
    return;
  }
  call.compute = opmath(to_tiny_dtype(dtype));
  if (op.check) op.check(call);
  bool supported = at::isFloatingType(dtype) || (op.integers && at::isIntegralType(dtype, /*includeBool=*/false));
  TORCH_CHECK_NOT_IMPLEMENTED(supported, "\"", op.cpu_name, "\" not implemented for '", c10::toString(dtype), "'");
  call.shape = to_shape(result.sizes());
  call.onednn = name == "gelu" && call.str("approximate") == "none" && cpu_gelu_uses_onednn(tensors.at(0));
  for (size_t i = 0; i < tensors.size(); i++)
    call.in[names[i]] = operand(tensors[i], call.compute, call.shape);
  if (result.numel() > 0) write(result, cast(op.build(call), to_tiny_dtype(result.scalar_type())));

  torch::jit::drop(*stack, nargs);
  torch::jit::push(*stack, inplace ? tensors.at(0) : out.defined() ? out : result);
}

// log_sigmoid_forward returns the CPU kernel's buffer too: exp(-|x|), which its backward reads.
void write_log_sigmoid(const at::Tensor& self, const at::Tensor& output, const at::Tensor& buffer) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"log_sigmoid_cpu\" not implemented for '",
                              self.scalar_type(), "'");
  if (self.numel() == 0) return;
  UOpPtr x = read(self);
  x = cast(x, opmath(x->dtype));
  UOpPtr zero = expand(reshape(const_float(x->dtype, 0.0), Shape(x->shape.size(), 1)), x->shape);
  UOpPtr z = exp(alu(Ops::NEG, alu(Ops::ABS, x)));
  UOpPtr y = sub(alu(Ops::MIN, x, zero), alu(Ops::LOG1P, z));
  write(output, cast(y, to_tiny_dtype(output.scalar_type())));
  write(buffer, cast(z, to_tiny_dtype(buffer.scalar_type())));
}

// Both contiguous whatever self's layout, as the CPU kernel allocates them (not TensorIterator's layout of self).
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor output = at::empty_like(self, at::MemoryFormat::Contiguous);
  at::Tensor buffer = at::empty_like(self, at::MemoryFormat::Contiguous);
  write_log_sigmoid(self, output, buffer);
  return {output, buffer};
}

std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output,
                                                             at::Tensor& buffer) {
  TORCH_CHECK(output.scalar_type() == self.scalar_type() && buffer.scalar_type() == self.scalar_type(),
              "Expected out tensor to have dtype ", self.scalar_type(), ", but got ", output.scalar_type(), " instead");
  at::native::resize_output(output, self.sizes());
  at::native::resize_output(buffer, self.sizes());
  write_log_sigmoid(self, output, buffer);
  return {output, buffer};
}

// glu: a * sigmoid(b) for the halves a, b of dim; its backward (g * s, g * a * s * (1 - s)) along dim.
// Built from tiny's own ops (one fused kernel each), in float32 for float16/bfloat16.
std::pair<at::Tensor, at::Tensor> glu_halves(const at::Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(self.size(dim) % 2 == 0, "Halving dimension must be even, but dimension ", dim, " is size ",
              self.size(dim));
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"glu_cpu\" not implemented for '",
                              self.scalar_type(), "'");
  at::Tensor x = at::isReducedFloatingType(self.scalar_type()) ? self.to(at::kFloat) : self;
  auto halves = x.chunk(2, dim);
  return {halves[0], halves[1]};
}

at::Tensor glu_of(const at::Tensor& self, int64_t dim) {
  auto [a, b] = glu_halves(self, dim);
  return (a * b.sigmoid()).to(self.scalar_type());
}

at::Tensor& glu_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  at::Tensor r = glu_of(self, dim);
  TORCH_CHECK(at::canCast(r.scalar_type(), out.scalar_type()), "result type ", r.scalar_type(),
              " can't be cast to the desired output type ", out.scalar_type());
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

at::Tensor glu_backward_of(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim) {
  auto [a, b] = glu_halves(self, dim);
  at::Tensor g = grad_output.to(a.scalar_type()), s = b.sigmoid();
  at::Tensor grad_a = g * s, grad_b = g * a * s * (1 - s);
  return at::cat({grad_a, grad_b}, at::maybe_wrap_dim(dim, self.dim())).to(self.scalar_type());
}

at::Tensor& glu_backward_out(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim,
                             at::Tensor& grad_input) {
  at::Tensor r = glu_backward_of(grad_output, self, dim);
  at::native::resize_output(grad_input, r.sizes());
  return grad_input.copy_(r);
}

// _prelu_kernel_backward: both gradients of the broadcast shape, as the CPU's two-output TensorIterator
// gives them (autograd sums the weight's down to its shape): x > 0 ? (g, 0) : (w * g, x * g).
std::tuple<at::Tensor, at::Tensor> prelu_kernel_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                         const at::Tensor& weight) {
  at::Tensor grad_self, grad_weight;
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(grad_self)
                                .add_output(grad_weight)
                                .add_const_input(self)
                                .add_const_input(weight)
                                .add_const_input(grad_output)
                                .build();
  at::ScalarType st = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st), "\"prelu_backward_cpu\" not implemented for '", st, "'");
  grad_self = iter.output(0);
  grad_weight = iter.output(1);
  if (grad_self.numel() == 0) return {grad_self, grad_weight};
  DType dt = to_tiny_dtype(st), ct = opmath(dt);
  Shape shape = to_shape(grad_self.sizes());
  UOpPtr x = operand(self, ct, shape), w = operand(weight, ct, shape), g = operand(grad_output, ct, shape);
  UOpPtr positive = lt(fixed(ct, 0, shape), x);
  write(grad_self, cast(where(positive, g, mul(w, g)), dt));
  write(grad_weight, cast(where(positive, fixed(ct, 0, shape), mul(x, g)), dt));
  return {grad_self, grad_weight};
}

// rrelu_with_noise: in training, each x <= 0 is scaled by a slope drawn uniformly from [lower, upper] on the
// device (noise keeps the slopes, 1 where x > 0); in evaluation it is leaky_relu with the mean slope, computed
// in double as the CPU's (lower + upper) / 2 is, and noise is left alone.
at::Tensor& rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                 const at::Scalar& upper, bool training, std::optional<at::Generator> generator,
                                 at::Tensor& output) {
  TORCH_CHECK(self.sizes() == noise.sizes(),
              "noise tensor shape must match self tensor shape. Got self.shape = ", self.sizes(),
              " noise.shape = ", noise.sizes());
  if (!training) return at::leaky_relu_out(output, self, (lower.toDouble() + upper.toDouble()) / 2);
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"rrelu_with_noise_out_cpu\" not implemented ",
                              "for '", self.scalar_type(), "'");
  check_same_device({self, noise, output});
  at::native::resize_output(output, self.sizes());
  if (self.numel() == 0) return output;
  at::Tensor slopes = at::empty_like(self).uniform_(lower.toDouble(), upper.toDouble(), generator);
  DType dt = to_tiny_dtype(self.scalar_type()), ct = opmath(dt);
  UOpPtr x = cast(read(self), ct), s = cast(read(slopes), ct);
  UOpPtr r = where(le(x, fixed(ct, 0, x->shape)), s, fixed(ct, 1, x->shape));
  UOpPtr y = mul(x, r); // read before noise is written: noise may be self's storage
  write(output, cast(y, to_tiny_dtype(output.scalar_type())));
  write(noise, cast(r, to_tiny_dtype(noise.scalar_type())));
  return output;
}

at::Tensor rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower, const at::Scalar& upper,
                            bool training, std::optional<at::Generator> generator) {
  at::Tensor output = at::empty_like(self, at::MemoryFormat::Contiguous);
  return rrelu_with_noise_out(self, noise, lower, upper, training, generator, output);
}

at::Tensor& rrelu_with_noise_inplace(at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                     const at::Scalar& upper, bool training, std::optional<at::Generator> generator) {
  return rrelu_with_noise_out(self, noise, lower, upper, training, generator, self);
}

constexpr const char* kOverloads[] = {
    "gelu",
    "gelu_",
    "gelu.out",
    "gelu_backward",
    "gelu_backward.grad_input",
    "silu",
    "silu_",
    "silu.out",
    "silu_backward",
    "silu_backward.grad_input",
    "mish",
    "mish_",
    "mish.out",
    "mish_backward",
    "leaky_relu",
    "leaky_relu_",
    "leaky_relu.out",
    "leaky_relu_backward",
    "leaky_relu_backward.grad_input",
    "elu",
    "elu_",
    "elu.out",
    "elu_backward",
    "elu_backward.grad_input",
    "hardtanh",
    "hardtanh_",
    "hardtanh.out",
    "hardtanh_backward",
    "hardtanh_backward.grad_input",
    "hardshrink",
    "hardshrink.out",
    "hardshrink_backward",
    "hardshrink_backward.grad_input",
    "softshrink",
    "softshrink.out",
    "softshrink_backward",
    "softshrink_backward.grad_input",
    "hardswish",
    "hardswish_",
    "hardswish.out",
    "hardswish_backward",
    "hardswish_backward.out",
    "hardsigmoid",
    "hardsigmoid_",
    "hardsigmoid.out",
    "hardsigmoid_backward",
    "hardsigmoid_backward.grad_input",
    "softplus",
    "softplus.out",
    "softplus_backward",
    "softplus_backward.grad_input",
    "threshold",
    "threshold_",
    "threshold.out",
    "threshold_backward",
    "threshold_backward.grad_input",
    "sigmoid_backward",
    "sigmoid_backward.grad_input",
    "tanh_backward",
    "tanh_backward.grad_input",
    "log_sigmoid_backward",
    "log_sigmoid_backward.grad_input",
    "_prelu_kernel",
};

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  for (const char* name : kOverloads)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&native_or_cpu<&activation_kernel>>());
  m.impl("log_sigmoid_forward", TORCH_FN(log_sigmoid_forward));
  m.impl("log_sigmoid_forward.output", TORCH_FN(log_sigmoid_forward_out));
  m.impl("_prelu_kernel_backward", TORCH_FN(prelu_kernel_backward));
  m.impl("rrelu_with_noise", TORCH_FN(rrelu_with_noise));
  m.impl("rrelu_with_noise.out", TORCH_FN(rrelu_with_noise_out));
  m.impl("rrelu_with_noise_", TORCH_FN(rrelu_with_noise_inplace));
  m.impl("glu", TORCH_FN(glu_of));
  m.impl("glu.out", TORCH_FN(glu_out));
  m.impl("glu_backward", TORCH_FN(glu_backward_of));
  m.impl("glu_backward.grad_input", TORCH_FN(glu_backward_out));
}

} // namespace tiny::aten_ops
