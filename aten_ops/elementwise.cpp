// Elementwise ATen ops: one boxed kernel serves the functional, in-place and out= forms of every
// op in the table below. torch's own TensorIterator checks the call (broadcasting, type promotion,
// devices, out= resizing with its warning, overlap) and allocates the result, except for the common
// functional or in-place call on contiguous operands, whose result plain_result allocates (or checks) by
// torch's same rules without building an iterator (recording cost); the table says how the value is
// built from UOps.

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/mvlgamma_native.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "aten_ops/bessel.h"
#include "aten_ops/builders.h"
#include "aten_ops/complex_math.h"
#include "aten_ops/elementwise.h"
#include "aten_ops/igamma.h"
#include "aten_ops/polynomials.h"
#include "aten_ops/special_math.h"
#include "aten_ops/window_read.h"
#include "csrc/fallback.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny {
namespace {

// How torch computes the result dtype and checks out=, per op.
enum class Kind {
  Unary,       // result dtype = input dtype; out= must match
  UnaryFloat,  // ints promote to the default float
  UnaryBool,   // result is bool (isnan); out= any dtype
  Binary,      // common dtype of the inputs; result must cast safely to out=
  BinaryFloat, // as Binary, ints promote to the default float (true division)
  Comparison,  // compares in the common dtype; result bool unless out= says otherwise
  Where,       // where(cond, a, b)
};

// The tensor operands of a call: the caller's borrowed, the few made here (wrapped scalars) owned. Copying a
// tensor that only Python holds takes the GIL twice (torch increfs its PyObject when a second C++ reference
// appears and decrefs it when that one goes): 6 of the 16 mutex locks of recording `y.mul_(1.5)` boxed.
class Operands {
public:
  Operands() = default;
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
  ~Operands() {
    for (size_t i = 0; i < list_.size(); i++)
      if (!owned_[i]) c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(list_[i]);
  }
  // `t` must outlive the call.
  void borrow(const at::Tensor& t) {
    list_.push_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(t));
    owned_.push_back(false);
  }
  void own(at::Tensor t) {
    list_.push_back(std::move(t));
    owned_.push_back(true);
  }
  void replace(size_t i, at::Tensor t) {
    if (!owned_.at(i)) c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(list_[i]);
    list_[i] = std::move(t);
    owned_[i] = true;
  }
  c10::ArrayRef<at::Tensor> all() const { return list_; }
  const at::Tensor& at(size_t i) const { return list_.at(i); }
  const at::Tensor& operator[](size_t i) const { return list_[i]; }
  size_t size() const { return list_.size(); }
  const at::Tensor* begin() const { return list_.begin(); }
  const at::Tensor* end() const { return list_.end(); }

private:
  c10::SmallVector<at::Tensor, 4> list_;
  c10::SmallVector<bool, 4> owned_;
};

// Its lists hold up to 4 entries inline (an op has at most 4 operands and parameters but for a few): a call
// allocates none of them (recording cost).
struct Call {
  const c10::FunctionSchema& schema;
  Operands tensors; // operands, scalars wrapped as 0-dim CPU tensors
  // by argument name (the schema's strings); the values are the caller's and outlive the call
  c10::SmallVector<std::pair<std::string_view, const c10::IValue*>, 4> params;
  c10::SmallVector<UOpPtr, 4> in; // operands read, cast to the compute dtype, broadcast to the result shape
  DType common = DType::Float32;  // torch's common dtype: tensor operands are rounded to it first
  DType compute = DType::Float32; // opmath(common): what the formula computes in
  Shape shape;

  const UOpPtr& a() const { return in.at(0); }
  const UOpPtr& b() const { return in.at(1); }
  // A scalar the user passed (alpha, ...): a runtime argument.
  UOpPtr constant(const at::Scalar& s) const { return scalar_constant(s, compute, shape); }
  // A number of the formula itself (the 1 in sigmoid): a literal the compiler can fold.
  UOpPtr constant(double v) const {
    UOpPtr c = is_float(compute) ? const_float(compute, v) : const_int(compute, static_cast<int64_t>(v));
    return expand(reshape(c, Shape(shape.size(), 1)), shape);
  }
  UOpPtr zero() const { return constant(0.0); }
  const c10::IValue* find(std::string_view n) const {
    for (const auto& [name, value] : params)
      if (name == n) return value;
    return nullptr;
  }
  bool has(std::string_view n) const {
    const c10::IValue* v = find(n);
    return v && !v->isNone();
  }
  const c10::IValue& param(std::string_view n) const {
    const c10::IValue* v = find(n);
    TORCH_CHECK(v, "tiny internal error: ", schema.name(), " has no argument ", n);
    return *v;
  }
  std::string str(std::string_view n) const { return has(n) ? param(n).toStringRef() : ""; }
  // The tiny device the call runs on (an operand may be a CPU scalar).
  c10::Device device() const {
    for (const at::Tensor& t : tensors)
      if (t.is_privateuseone()) return t.device();
    return tensors.at(0).device();
  }
};

using Build = std::function<UOpPtr(const Call&)>;

// How the CPU lays out a functional call's result, where its operands do not all lead: `Tensors`, by an iterator over
// the tensor operands alone (pow, clamp and lerp keep the Python numbers they take outside their TensorIterator:
// pow(x, 2) is a unary op over x); `Self`, as empty_like(self) (nan_to_num computes into one: the input's strides, a
// size-1 dim's included).
enum class Layout { Operands, Tensors, Self };

// What a number among the operands is to a float16 or bfloat16 computation: TensorIterator converts it to the
// common dtype like any operand (x > 0.3 compares with bfloat16's 0.30078125), but the CPU's mul, true and floor
// division read the number as given (original_scalar_value) and lerp takes its weight outside the iterator.
enum class Numbers { Rounded, Original };

struct Op {
  Kind kind;
  Build build;
  std::function<void(const Call&)> check = nullptr; // torch's op-specific argument checks
  const char* bool_out_only = nullptr;              // the op's name, when out= must be bool
  Layout layout = Layout::Operands;                 // the functional result's layout
  Numbers numbers = Numbers::Rounded;
};

// ---- value builders ----

UOpPtr un(Ops op, const UOpPtr& a) { return alu(op, a); }
UOpPtr bin(Ops op, const UOpPtr& a, const UOpPtr& b) { return checked_division(op, a, b); }
UOpPtr to_bool(const UOpPtr& x, const Call& c) { return x->dtype == DType::Bool ? x : bin(Ops::CMPNE, x, c.zero()); }

Build unary(Ops op) {
  return [op](const Call& c) { return un(op, c.a()); };
}
Build binary(Ops op) {
  return [op](const Call& c) { return bin(op, c.a(), c.b()); };
}

// a + alpha * b (add, sub, rsub)
Build with_alpha(Ops op, bool swap = false) {
  return [op, swap](const Call& c) {
    UOpPtr x = swap ? c.b() : c.a(), y = swap ? c.a() : c.b();
    if (c.has("alpha")) {
      at::Scalar alpha = c.param("alpha").toScalar();
      bool one = alpha.isBoolean()         ? alpha.toBool()
                 : alpha.isIntegral(false) ? alpha.toLong() == 1
                                           : alpha.toDouble() == 1.0;
      if (!one) y = bin(Ops::MUL, y, c.constant(alpha));
    }
    return bin(op, x, y);
  };
}

// torch's remainder: the sign of the divisor, (a fmod b) + b when the signs differ.
UOpPtr remainder(const Call& c) {
  UOpPtr mod = bin(Ops::MOD, c.a(), c.b());
  UOpPtr z = c.zero();
  UOpPtr fix =
      bin(Ops::AND, bin(Ops::CMPNE, mod, z), bin(Ops::CMPNE, bin(Ops::CMPLT, c.b(), z), bin(Ops::CMPLT, mod, z)));
  return where(fix, bin(Ops::ADD, mod, c.b()), mod);
}

UOpPtr sign_bit(const UOpPtr& x, const Call& c);

// torch's floor division: for floats it derives the quotient from fmod so it agrees with remainder.
UOpPtr floor_divide(const Call& c) {
  const UOpPtr &a = c.a(), &b = c.b();
  UOpPtr z = c.zero();
  if (!is_float(c.compute)) {
    UOpPtr q = bin(Ops::IDIV, a, b), r = bin(Ops::MOD, a, b);
    UOpPtr fix = bin(Ops::AND, bin(Ops::CMPNE, r, z), bin(Ops::CMPNE, bin(Ops::CMPLT, r, z), bin(Ops::CMPLT, b, z)));
    return where(fix, bin(Ops::SUB, q, c.constant(1.0)), q);
  }
  UOpPtr mod = bin(Ops::MOD, a, b);
  UOpPtr div = bin(Ops::FDIV, bin(Ops::SUB, a, mod), b);
  UOpPtr fix = bin(Ops::AND, bin(Ops::CMPNE, mod, z), bin(Ops::CMPNE, bin(Ops::CMPLT, b, z), bin(Ops::CMPLT, mod, z)));
  div = where(fix, bin(Ops::SUB, div, c.constant(1.0)), div);
  UOpPtr fl = un(Ops::FLOOR, div);
  fl = where(bin(Ops::CMPLT, c.constant(0.5), bin(Ops::SUB, div, fl)), bin(Ops::ADD, fl, c.constant(1.0)), fl);
  // a zero quotient takes the sign of a / b, as torch's (-1 // -3 is 0.0, -0.0 // 2 is -0.0; fuzzer seed 62608):
  // |div| is that zero, +0.0
  UOpPtr quotient = bin(Ops::FDIV, a, b), zero = un(Ops::ABS, div);
  fl = where(bin(Ops::CMPEQ, div, z), where(sign_bit(quotient, c), un(Ops::NEG, zero), zero), fl);
  return where(bin(Ops::CMPEQ, b, z), quotient, fl);
}

void check_rounding_mode(const Call& c) {
  std::string mode = c.str("rounding_mode");
  TORCH_CHECK(!c.has("rounding_mode") || mode == "trunc" || mode == "floor",
              "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", mode, "'");
}

UOpPtr divide(const Call& c) {
  std::string mode = c.str("rounding_mode");
  if (mode == "trunc")
    return is_float(c.compute) ? un(Ops::TRUNC, bin(Ops::FDIV, c.a(), c.b())) : bin(Ops::IDIV, c.a(), c.b());
  if (mode == "floor") return floor_divide(c);
  return bin(Ops::FDIV, c.a(), c.b());
}

UOpPtr sign(const Call& c) {
  if (c.compute == DType::Bool) return c.a();
  UOpPtr z = c.zero();
  return bin(Ops::SUB, cast(bin(Ops::CMPLT, z, c.a()), c.compute), cast(bin(Ops::CMPLT, c.a(), z), c.compute));
}

// floor, ceil, round, trunc leave integers as they are.
Build rounding(Ops op) {
  return [op](const Call& c) {
    if (!is_float(c.compute)) return c.a();
    if (op == Ops::RINT && c.has("decimals")) {
      int64_t d = c.param("decimals").toInt();
      UOpPtr scale = c.constant(std::pow(10.0, static_cast<double>(std::llabs(d))));
      // torch: round(x * 10^d) / 10^d, and round(x / 10^-d) * 10^-d for negative d
      if (d >= 0) return bin(Ops::FDIV, un(Ops::RINT, bin(Ops::MUL, c.a(), scale)), scale);
      return bin(Ops::MUL, un(Ops::RINT, bin(Ops::FDIV, c.a(), scale)), scale);
    }
    return un(op, c.a());
  };
}

// torch's logit: log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given and not negative
// (a NaN stays NaN). Like torch, eps and 1 - eps are rounded to the input's float dtype.
UOpPtr logit(const Call& c) {
  UOpPtr z = c.a();
  if (c.has("eps") && c.param("eps").toDouble() >= 0) {
    DType input = to_tiny_dtype(c.tensors.at(0).scalar_type());
    auto rounded = [&](const UOpPtr& v) { return is_float(input) ? cast(cast(v, input), c.compute) : v; };
    UOpPtr lo = rounded(c.constant(c.param("eps").toScalar()));
    UOpPtr hi = rounded(bin(Ops::SUB, c.constant(1.0), lo));
    z = where(bin(Ops::CMPLT, z, lo), lo, where(bin(Ops::CMPLT, hi, z), hi, z));
  }
  return un(Ops::LOG, bin(Ops::FDIV, z, bin(Ops::SUB, c.constant(1.0), z)));
}

// torch's CPU pow of floats to a Scalar exponent copies the base for 1 and computes 0.5, 2, 3, -0.5, -1 and -2 as sqrt,
// products and reciprocals (so pow(-inf, 0.5) is sqrt's NaN, not C's inf); other exponents by pow. float16 takes
// 0.5 and -0.5 by pow (its pow(-inf, 0.5) is inf, pow(-0.0, 0.5) +0.0; bfloat16's are sqrt's; fuzzer seed 16599).
// (The gradient of x ** 2 is 2 * x.pow(1): with 1 a kernel argument, it ran a call of C's powf an element, 5 ns each.)
UOpPtr power(const Call& c) {
  const c10::IValue* e = c.find("exponent");
  if (is_float(c.compute) && e && e->isScalar()) {
    double p = e->toScalar().toDouble();
    const UOpPtr& x = c.a();
    UOpPtr x2 = p == 2 || p == 3 || p == -2 ? bin(Ops::MUL, x, x) : nullptr;
    if (p == 1) return x;
    const bool half = c.common == DType::Float16;
    if (p == 0.5 && !half) return un(Ops::SQRT, x);
    if (p == 2) return x2;
    if (p == 3) return bin(Ops::MUL, x2, x);
    if (p == -0.5 && !half) return un(Ops::RECIP, un(Ops::SQRT, x));
    if (p == -1) return un(Ops::RECIP, x);
    if (p == -2) return un(Ops::RECIP, x2);
  }
  return bin(Ops::POW, c.a(), c.b());
}

UOpPtr clamp(const Call& c) {
  // operands: self, then min and max when given (torch's NaN-propagating max/min)
  UOpPtr x = c.a();
  size_t i = 1;
  if (c.has("min")) x = bin(Ops::MAX, x, c.in.at(i++));
  if (c.has("max")) x = bin(Ops::MIN, x, c.in.at(i++));
  return x;
}

// self + value * t1 * t2 and self + value * t1 / t2, in torch's order of operations.
Build pointwise_combine(Ops op) {
  return [op](const Call& c) {
    UOpPtr t1 = c.in.at(1);
    if (c.has("value")) t1 = bin(Ops::MUL, c.constant(c.param("value").toScalar()), t1);
    return bin(Ops::ADD, c.a(), op == Ops::MUL ? bin(Ops::MUL, t1, c.in.at(2)) : bin(Ops::FDIV, t1, c.in.at(2)));
  };
}

// torch's lerp: from whichever end is nearer, so that weight 1 gives `end` exactly.
UOpPtr lerp(const Call& c) {
  const UOpPtr &self = c.a(), &end = c.b(), &w = c.in.at(2);
  UOpPtr diff = bin(Ops::SUB, end, self);
  UOpPtr near_self = bin(Ops::CMPLT, un(Ops::ABS, w), c.constant(0.5));
  return where(near_self, bin(Ops::ADD, self, bin(Ops::MUL, w, diff)),
               bin(Ops::SUB, end, bin(Ops::MUL, diff, bin(Ops::SUB, c.constant(1.0), w))));
}

UOpPtr logical(Ops op, const Call& c) { return bin(op, to_bool(c.a(), c), to_bool(c.b(), c)); }

void check_not_float(const Call& c, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(!is_float(c.compute), "\"", name, "_cpu\" not implemented for '",
                              to_scalar_type(c.compute), "'");
}

void check_sub(const Call& c) {
  at::native::sub_check(c.tensors.at(0), c.tensors.at(1));
  if (c.has("alpha")) at::native::alpha_check(to_scalar_type(c.compute), c.param("alpha").toScalar());
}

void check_alpha(const Call& c) {
  if (c.has("alpha")) at::native::alpha_check(to_scalar_type(c.compute), c.param("alpha").toScalar());
}

void check_float(const Call& c, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(is_float(c.compute), "\"", name, "_cpu\" not implemented for '",
                              to_scalar_type(c.compute), "'");
}

UOpPtr is_nan(const UOpPtr& x) { return bin(Ops::CMPNE, x, x); }

// The sign bit (so -0.0 and -NaN count as negative), for floats through the bits.
UOpPtr sign_bit(const UOpPtr& x, const Call& c) {
  if (x->dtype == DType::Bool) return bin(Ops::CMPNE, x, x);
  if (!is_float(x->dtype)) return bin(Ops::CMPLT, x, c.zero());
  DType bits = x->dtype == DType::Float64 ? DType::Int64 : DType::Int32;
  UOpPtr i = bitcast(x, bits);
  return bin(Ops::CMPLT, i, expand(reshape(const_int(bits, 0), Shape(c.shape.size(), 1)), c.shape));
}

// torch's nextafter: the float of the common dtype next to a in the direction of b, by stepping a's bits (a
// float's magnitude grows with its bits as an integer); from zero the smallest subnormal of b's sign.
UOpPtr next_after(const Call& c) {
  DType dt = c.common, bits = itemsize(dt) == 8 ? DType::Int64 : itemsize(dt) == 4 ? DType::Int32 : DType::Int16;
  UOpPtr a = cast(c.a(), dt), b = cast(c.b(), dt);
  auto int_const = [&](int64_t v) { return expand(reshape(const_int(bits, v), Shape(c.shape.size(), 1)), c.shape); };
  auto float_const = [&](double v) { return expand(reshape(const_float(dt, v), Shape(c.shape.size(), 1)), c.shape); };
  UOpPtr zero = float_const(0.0), ia = bitcast(a, bits);
  UOpPtr away_from_zero = bin(Ops::CMPEQ, bin(Ops::CMPLT, a, b), bin(Ops::CMPLT, zero, a));
  UOpPtr stepped = bitcast(bin(Ops::ADD, ia, where(away_from_zero, int_const(1), int_const(-1))), dt);
  // the smallest subnormal of dt (its bits are 1), a literal: a bitcast of a constant renders as an int literal
  // OpenCL cannot reinterpret as a double
  const double denorm_min = dt == DType::Float64    ? std::numeric_limits<double>::denorm_min()
                            : dt == DType::Float16  ? 0x1p-24
                            : dt == DType::BFloat16 ? 0x1p-133
                                                    : std::numeric_limits<float>::denorm_min();
  UOpPtr smallest = float_const(denorm_min);
  UOpPtr from_zero = where(bin(Ops::CMPLT, zero, b), smallest, un(Ops::NEG, smallest));
  UOpPtr v = where(bin(Ops::CMPEQ, a, zero), from_zero, stepped);
  v = where(bin(Ops::CMPEQ, a, b), b, v);
  return where(bin(Ops::OR, is_nan(a), is_nan(b)), bin(Ops::ADD, a, b), v);
}

// torch's logaddexp (base e) and logaddexp2: max + log1p(exp(-|a - b|)), equal infinities as they are.
Build log_add_exp(bool base2) {
  return [base2](const Call& c) {
    const UOpPtr &a = c.a(), &b = c.b();
    UOpPtr d = un(Ops::NEG, un(Ops::ABS, bin(Ops::SUB, a, b)));
    UOpPtr tail = un(Ops::LOG1P, un(base2 ? Ops::EXP2 : Ops::EXP, d));
    if (base2) tail = bin(Ops::MUL, tail, c.constant(1.0 / std::log(2.0)));
    UOpPtr m = where(bin(Ops::CMPLT, a, b), b, a);
    UOpPtr same_inf = bin(Ops::AND, bin(Ops::CMPEQ, a, b), bin(Ops::CMPEQ, un(Ops::ABS, a), c.constant(INFINITY)));
    return where(same_inf, a, bin(Ops::ADD, m, tail));
  };
}

// fmax/fmin: a NaN loses to a number.
Build nan_ignoring(Ops op) {
  return [op](const Call& c) {
    UOpPtr m = bin(op, c.a(), c.b());
    if (!is_float(c.compute)) return m;
    return where(is_nan(c.a()), c.b(), where(is_nan(c.b()), c.a(), m));
  };
}

// xlogy and xlog1py: x * log(y) with 0 where x is 0, NaN where y is.
Build x_log(Ops log) {
  return [log](const Call& c) {
    UOpPtr v = where(bin(Ops::CMPEQ, c.a(), c.zero()), c.zero(), bin(Ops::MUL, c.a(), un(log, c.b())));
    return where(is_nan(c.b()), c.constant(NAN), v);
  };
}

// sqrt(a^2 + b^2) without overflow, as C's hypot.
UOpPtr hypot(const Call& c) { return complex_math::hypot(c.a(), c.b()); }

// sin(pi x) / (pi x), 1 at 0.
UOpPtr sinc(const Call& c) {
  UOpPtr px = bin(Ops::MUL, c.a(), c.constant(M_PI));
  return where(bin(Ops::CMPEQ, c.a(), c.zero()), c.constant(1.0), bin(Ops::FDIV, un(Ops::SIN, px), px));
}

// -x log x: 0 at 0, -inf below, NaN stays.
UOpPtr entr(const Call& c) {
  const UOpPtr& x = c.a();
  UOpPtr v = un(Ops::NEG, bin(Ops::MUL, x, un(Ops::LOG, x)));
  v = where(bin(Ops::CMPEQ, x, c.zero()), c.zero(), v);
  v = where(bin(Ops::CMPLT, x, c.zero()), c.constant(-INFINITY), v);
  return where(is_nan(x), x, v);
}

// torch's nan_to_num: NaN to `nan` (0), +-inf to `posinf`/`neginf` (the result dtype's largest and
// lowest finite values); integers and bools are left as they are.
UOpPtr nan_to_num(const Call& c) {
  const UOpPtr& x = c.a();
  if (!is_float(c.compute)) return x;
  double largest = c.common == DType::Float16    ? 65504.0
                   : c.common == DType::BFloat16 ? 3.38953138925153547590e38
                   : c.common == DType::Float32  ? static_cast<double>(std::numeric_limits<float>::max())
                                                 : std::numeric_limits<double>::max();
  // torch converts the replacements with a plain cast (1e300 becomes inf in float32), not a checked one
  auto value = [&](std::string_view name, double otherwise) {
    if (!c.has(name)) return c.constant(otherwise);
    UOpPtr v = var_float(c.compute, c.param(name).toDouble());
    return expand(reshape(v, Shape(c.shape.size(), 1)), c.shape);
  };
  UOpPtr v = where(is_nan(x), value("nan", 0.0), x);
  v = where(bin(Ops::CMPEQ, x, c.constant(INFINITY)), value("posinf", largest), v);
  return where(bin(Ops::CMPEQ, x, c.constant(-INFINITY)), value("neginf", -largest), v);
}

// polygamma(n, x): digamma and trigamma for n = 0 and 1, the Hurwitz zeta series above (torch refuses n < 0).
UOpPtr polygamma(const Call& c) {
  int64_t n = c.param("n").toInt();
  if (n == 0) return aten_ops::special::digamma(c.a());
  if (n == 1) return aten_ops::special::trigamma(c.a());
  return aten_ops::special::polygamma_high(n, c.a());
}

Build special_fn(UOpPtr (*f)(const UOpPtr&)) {
  return [f](const Call& c) { return f(c.a()); };
}
Build bessel(UOpPtr (*f)(const UOpPtr&, bool), bool scaled) {
  return [f, scaled](const Call& c) { return f(c.a(), scaled); };
}

// erfcx and log_ndtr pick their fit's coefficients from a table: it goes to the call's device each call (5.6 kB).
Build with_erfcx_table(UOpPtr (*f)(const UOpPtr&, const UOpPtr&)) {
  return [f](const Call& c) {
    const auto& rows = aten_ops::special::kErfcxChebyshev;
    at::Tensor table = at::tensor(c10::ArrayRef<double>(&rows[0][0], std::size(rows) * std::size(rows[0])),
                                  at::TensorOptions().dtype(at::kDouble));
    return f(c.a(), read(table.to(c.device())));
  };
}
Build bessel_k(int order, bool scaled) {
  return [order, scaled](const Call& c) { return aten_ops::special::bessel_k(c.a(), order, scaled); };
}

// igamma (lower) and igammac: their series run on until each element converges, the host reading between kernels.
Build incomplete_gamma(bool lower) {
  return [lower](const Call& c) { return aten_ops::special::incomplete_gamma(c.a(), c.b(), lower, c.device()); };
}

// logit's gradient dy / (x (1 - x)) as the CPU's vectorized loop computes it: without eps NaN outside [0, 1]
// (+-inf at its ends, by the division); with eps 0 outside [eps, 1 - eps] (NaN x too), eps in the dtype.
UOpPtr logit_backward(const Call& c) {
  const UOpPtr &dy = c.a(), &x = c.b();
  UOpPtr grad = bin(Ops::FDIV, dy, bin(Ops::MUL, x, bin(Ops::SUB, c.constant(1.0), x)));
  double eps = c.has("eps") ? c.param("eps").toDouble() : -1.0;
  if (eps < 0) {
    UOpPtr inside = bin(Ops::AND, bin(Ops::CMPLE, c.zero(), x), bin(Ops::CMPLE, x, c.constant(1.0)));
    return where(inside, grad, c.constant(NAN));
  }
  UOpPtr lo = cast(c.constant(at::Scalar(eps)), c.common), hi = bin(Ops::SUB, cast(c.constant(1.0), c.common), lo);
  UOpPtr xc = cast(x, c.common);
  UOpPtr inside = bin(Ops::AND, bin(Ops::CMPLE, lo, xc), bin(Ops::CMPLE, xc, hi));
  return where(inside, grad, c.zero());
}

// An orthogonal polynomial of x (first operand) and degree n (second); its recurrence reads n's largest value on
// the device of the call.
Build orthogonal(const std::function<UOpPtr(const aten_ops::polynomials::Args&)>& f) {
  return [f](const Call& c) { return f(aten_ops::polynomials::args(c.a(), c.b(), c.device())); };
}

// zeta(x, q): its direct sum's length depends on q (longer for q <= 0): the longest is read to the host.
UOpPtr zeta(const Call& c) {
  UOpPtr terms = aten_ops::special::zeta_terms(cast(c.a(), DType::Float64), cast(c.b(), DType::Float64));
  int64_t steps = aten_ops::max_on_host(terms, c.device());
  TORCH_CHECK(steps <= aten_ops::polynomials::kMaxRecurrenceSteps, "special_zeta on tiny: a q of ", 9 - steps + 1,
              " or less needs ", steps, " terms of the direct sum; tiny builds at most ",
              aten_ops::polynomials::kMaxRecurrenceSteps);
  return aten_ops::special::zeta(c.a(), c.b(), steps);
}

Build shifted_chebyshev(char kind) {
  return orthogonal(
      [kind](const aten_ops::polynomials::Args& a) { return aten_ops::polynomials::shifted_chebyshev(a, kind); });
}

// torch's gcd (calc_gcd): Euclid's loop on |a| and |b| in the dtype, `while (a != 0) { c = a; a = b % a; b = c; }`,
// unrolled: after a reaches 0 a step leaves both as they are (TINY_IMOD gives 0 for a zero divisor). Lame's bound
// (consecutive Fibonacci numbers are the worst case) caps the steps for magnitudes up to the dtype's |MIN|, checked
// by brute force for 8 bits. abs(MIN) stays MIN as in C, and the loop then gives torch's signed result
// (gcd(INT64_MIN, 5) is -1).
int64_t euclid_steps(DType dt) {
  switch (dt) {
  case DType::Int8:
    return 10;
  case DType::UInt8:
    return 12;
  case DType::Int16:
    return 22;
  case DType::Int32:
    return 45;
  default:
    return 91;
  }
}

// Both values are realized every 4 steps. Left to the scheduler, `a` (read three times a step) is realized every
// two steps or so and `b` hardly ever, so each kernel re-read every earlier `a` through b's chain of selects
// (int64 on 1M elements: 51 kernels of up to 15 buffers, 167 ms; every 4 steps: 45 kernels of 3 buffers, 128 ms;
// every 2 or 3: 91 or 61 kernels, slower).
constexpr int64_t kEuclidStepsPerKernel = 4;

// The same bits computed in the unsigned dtype of x's width, where wrapping is defined: a kernel compiled without
// -fwrapv (OpenCL) may take a signed negation or product as free of overflow (gcd(INT64_MIN, 5) came out 1 on PoCL).
UOpPtr as_unsigned(const UOpPtr& x, const std::function<UOpPtr(const UOpPtr&)>& f) {
  DType u = itemsize(x->dtype) == 1   ? DType::UInt8
            : itemsize(x->dtype) == 2 ? DType::UInt16
            : itemsize(x->dtype) == 4 ? DType::UInt32
                                      : DType::UInt64;
  return bitcast(f(bitcast(x, u)), x->dtype);
}

// C's abs on two's complement machines: abs(MIN) is MIN.
UOpPtr wrapping_abs(const UOpPtr& x) {
  if (is_unsigned(x->dtype)) return x;
  UOpPtr negative = alu(Ops::CMPLT, x, aten_ops::like(x, 0));
  return as_unsigned(x, [&](const UOpPtr& u) { return where(negative, alu(Ops::SUB, aten_ops::like(u, 0), u), u); });
}

UOpPtr gcd(const UOpPtr& x, const UOpPtr& y, DType dt) {
  UOpPtr a = wrapping_abs(x), b = wrapping_abs(y);
  UOpPtr zero = aten_ops::like(a, 0);
  for (int64_t i = 0, n = euclid_steps(dt); i < n; i++) {
    UOpPtr rem = alu(Ops::MOD, b, a);
    b = where(alu(Ops::CMPEQ, a, zero), b, a);
    a = rem;
    if ((i + 1) % kEuclidStepsPerKernel == 0 && i + 1 < n) {
      a = contiguous(a);
      b = contiguous(b);
    }
  }
  return b;
}

// torch's lcm: 0 where the gcd is, else |a / g * b|, computed as C computes it: int8, int16 and uint8 in int (abs
// of the product, then wrapped to the dtype), int32 and int64 wrapping in the dtype.
UOpPtr lcm(const Call& c) {
  DType wide = itemsize(c.compute) < 4 ? DType::Int32 : c.compute;
  UOpPtr g = cast(gcd(c.a(), c.b(), c.compute), wide), a = cast(c.a(), wide), b = cast(c.b(), wide);
  UOpPtr zero = aten_ops::like(g, 0);
  UOpPtr quotient = alu(Ops::IDIV, a, g);
  UOpPtr v =
      wrapping_abs(as_unsigned(quotient, [&](const UOpPtr& q) { return alu(Ops::MUL, q, bitcast(b, q->dtype)); }));
  return cast(where(alu(Ops::CMPEQ, g, zero), zero, v), c.compute);
}

const std::unordered_map<std::string, Op>& table() {
  using K = Kind;
  static const std::unordered_map<std::string, Op> t = {
      {"add", {K::Binary, with_alpha(Ops::ADD), check_alpha}},
      {"sub", {K::Binary, with_alpha(Ops::SUB), check_sub}},
      {"rsub",
       {K::Binary, with_alpha(Ops::SUB, true),
        [](const Call& c) {
          at::native::sub_check(c.tensors.at(1), c.tensors.at(0));
          check_alpha(c);
        }}},
      {"mul", {K::Binary, binary(Ops::MUL), nullptr, nullptr, Layout::Operands, Numbers::Original}},
      {"div", {K::BinaryFloat, divide, check_rounding_mode, nullptr, Layout::Operands, Numbers::Original}},
      {"floor_divide", {K::Binary, floor_divide, nullptr, nullptr, Layout::Operands, Numbers::Original}},
      {"remainder", {K::Binary, remainder}},
      {"fmod", {K::Binary, binary(Ops::MOD)}},
      {"pow",
       {K::Binary, power,
        [](const Call& c) {
          const c10::IValue* exponent = c.find("exponent"); // a Scalar in pow.Tensor_Scalar and pow_.Scalar
          if (exponent && exponent->isScalar() && !is_float(c.compute)) {
            at::Scalar e = exponent->toScalar();
            TORCH_CHECK(!(e.isIntegral(false) && e.toLong() < 0),
                        "Integers to negative integer powers are not allowed.");
          }
        },
        nullptr, Layout::Tensors}},
      {"maximum", {K::Binary, binary(Ops::MAX)}},
      {"minimum", {K::Binary, binary(Ops::MIN)}},
      {"clamp",
       {K::Binary, clamp,
        [](const Call& c) {
          TORCH_CHECK(c.has("min") || c.has("max"), "torch.clamp: At least one of 'min' or 'max' must not be None");
        },
        nullptr, Layout::Tensors}},
      {"clamp_min", {K::Binary, binary(Ops::MAX), nullptr, nullptr, Layout::Tensors}},
      {"clamp_max", {K::Binary, binary(Ops::MIN), nullptr, nullptr, Layout::Tensors}},
      {"relu",
       {K::Unary, [](const Call& c) { return bin(Ops::MAX, c.a(), c.zero()); },
        [](const Call& c) { TORCH_CHECK(c.compute != DType::Bool, "Boolean inputs not supported for relu"); }}},
      {"neg",
       {K::Unary, unary(Ops::NEG),
        [](const Call& c) {
          TORCH_CHECK_NOT_IMPLEMENTED(
              c.compute != DType::Bool,
              "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert "
              "a mask, use the `~` or `logical_not()` operator instead.");
        }}},
      {"abs", {K::Unary, [](const Call& c) { return c.compute == DType::Bool ? c.a() : un(Ops::ABS, c.a()); }}},
      {"sign", {K::Unary, sign}},
      {"sgn", {K::Unary, sign}}, // sign for real dtypes
      {"conj_physical", {K::Unary, [](const Call& c) { return c.a(); }}},
      // torch's angle of a real number: pi below 0, else 0; NaN stays
      {"angle",
       {K::UnaryFloat,
        [](const Call& c) {
          return where(is_nan(c.a()), c.a(), where(bin(Ops::CMPLT, c.a(), c.zero()), c.constant(M_PI), c.zero()));
        }}},
      {"logit", {K::UnaryFloat, logit}},
      {"floor", {K::Unary, rounding(Ops::FLOOR)}},
      {"ceil", {K::Unary, rounding(Ops::CEIL)}},
      {"round", {K::Unary, rounding(Ops::RINT)}},
      {"trunc", {K::Unary, rounding(Ops::TRUNC)}},
      {"exp", {K::UnaryFloat, unary(Ops::EXP)}},
      {"exp2", {K::UnaryFloat, unary(Ops::EXP2)}},
      {"log", {K::UnaryFloat, unary(Ops::LOG)}},
      {"log2", {K::UnaryFloat, unary(Ops::LOG2)}},
      {"log10",
       {K::UnaryFloat, [](const Call& c) { return bin(Ops::MUL, un(Ops::LOG, c.a()), c.constant(1.0 / M_LN10)); }}},
      {"nan_to_num", {K::Unary, nan_to_num, nullptr, nullptr, Layout::Self}},
      {"digamma", {K::UnaryFloat, special_fn(aten_ops::special::digamma)}},
      {"polygamma",
       {K::UnaryFloat, polygamma,
        [](const Call& c) {
          // the CPU's probe is remembered per dtype, not per n: torch's check, here
          TORCH_CHECK(c.param("n").toInt() >= 0, "polygamma(n, x) does not support negative n.");
        }}},
      {"erfinv", {K::UnaryFloat, special_fn(aten_ops::special::erfinv)}},
      {"i0", {K::UnaryFloat, bessel(aten_ops::special::bessel_i0, false)}},
      {"special_i0e", {K::UnaryFloat, bessel(aten_ops::special::bessel_i0, true)}},
      {"special_i1", {K::UnaryFloat, bessel(aten_ops::special::bessel_i1, false)}},
      {"special_i1e", {K::UnaryFloat, bessel(aten_ops::special::bessel_i1, true)}},
      {"special_erfcx", {K::UnaryFloat, with_erfcx_table(aten_ops::special::erfcx)}},
      {"special_log_ndtr", {K::UnaryFloat, with_erfcx_table(aten_ops::special::log_ndtr)}},
      {"special_ndtri", {K::UnaryFloat, special_fn(aten_ops::special::ndtri)}},
      {"special_bessel_j0", {K::UnaryFloat, special_fn(aten_ops::special::bessel_j0)}},
      {"special_bessel_j1", {K::UnaryFloat, special_fn(aten_ops::special::bessel_j1)}},
      {"special_bessel_y0", {K::UnaryFloat, special_fn(aten_ops::special::bessel_y0)}},
      {"special_bessel_y1", {K::UnaryFloat, special_fn(aten_ops::special::bessel_y1)}},
      {"special_modified_bessel_i0", {K::UnaryFloat, bessel(aten_ops::special::bessel_i0, false)}},
      {"special_modified_bessel_i1", {K::UnaryFloat, special_fn(aten_ops::special::modified_bessel_i1)}},
      {"special_modified_bessel_k0", {K::UnaryFloat, bessel_k(0, false)}},
      {"special_modified_bessel_k1", {K::UnaryFloat, bessel_k(1, false)}},
      {"special_scaled_modified_bessel_k0", {K::UnaryFloat, bessel_k(0, true)}},
      {"special_scaled_modified_bessel_k1", {K::UnaryFloat, bessel_k(1, true)}},
      {"special_spherical_bessel_j0", {K::UnaryFloat, special_fn(aten_ops::special::spherical_bessel_j0)}},
      {"special_airy_ai", {K::UnaryFloat, special_fn(aten_ops::special::airy_ai)}},
      {"logit_backward", {K::Binary, logit_backward}},
      {"igamma", {K::Binary, incomplete_gamma(true)}},
      {"igammac", {K::Binary, incomplete_gamma(false)}},
      {"log1p", {K::UnaryFloat, unary(Ops::LOG1P)}},
      {"expm1", {K::UnaryFloat, unary(Ops::EXPM1)}},
      {"sqrt", {K::UnaryFloat, unary(Ops::SQRT)}},
      {"rsqrt", {K::UnaryFloat, [](const Call& c) { return un(Ops::RECIP, un(Ops::SQRT, c.a())); }}},
      {"reciprocal", {K::UnaryFloat, unary(Ops::RECIP)}},
      {"sin", {K::UnaryFloat, unary(Ops::SIN)}},
      {"cos", {K::UnaryFloat, unary(Ops::COS)}},
      {"tan", {K::UnaryFloat, unary(Ops::TAN)}},
      {"tanh", {K::UnaryFloat, unary(Ops::TANH)}},
      {"erf", {K::UnaryFloat, unary(Ops::ERF)}},
      {"erfc", {K::UnaryFloat, unary(Ops::ERFC)}},
      {"lgamma", {K::UnaryFloat, unary(Ops::LGAMMA)}},
      {"asin", {K::UnaryFloat, unary(Ops::ASIN)}},
      {"acos", {K::UnaryFloat, unary(Ops::ACOS)}},
      {"atan", {K::UnaryFloat, unary(Ops::ATAN)}},
      {"sinh", {K::UnaryFloat, unary(Ops::SINH)}},
      {"cosh", {K::UnaryFloat, unary(Ops::COSH)}},
      {"asinh", {K::UnaryFloat, unary(Ops::ASINH)}},
      {"acosh", {K::UnaryFloat, unary(Ops::ACOSH)}},
      {"atanh", {K::UnaryFloat, unary(Ops::ATANH)}},
      {"atan2", {K::BinaryFloat, binary(Ops::ATAN2)}},
      {"sigmoid",
       {K::UnaryFloat,
        [](const Call& c) {
          return un(Ops::RECIP, bin(Ops::ADD, c.constant(1.0), un(Ops::EXP, un(Ops::NEG, c.a()))));
        }}},
      {"isnan", {K::UnaryBool, [](const Call& c) { return bin(Ops::CMPNE, c.a(), c.a()); }}},
      {"eq", {K::Comparison, binary(Ops::CMPEQ)}},
      {"ne", {K::Comparison, binary(Ops::CMPNE)}},
      {"lt", {K::Comparison, binary(Ops::CMPLT)}},
      {"le", {K::Comparison, binary(Ops::CMPLE)}},
      {"gt", {K::Comparison, [](const Call& c) { return bin(Ops::CMPLT, c.b(), c.a()); }}},
      {"ge", {K::Comparison, [](const Call& c) { return bin(Ops::CMPLE, c.b(), c.a()); }}},
      {"logical_and", {K::Comparison, [](const Call& c) { return logical(Ops::AND, c); }}},
      {"logical_or", {K::Comparison, [](const Call& c) { return logical(Ops::OR, c); }}},
      {"logical_xor", {K::Comparison, [](const Call& c) { return logical(Ops::XOR, c); }}},
      {"logical_not", {K::UnaryBool, [](const Call& c) { return un(Ops::NOT, to_bool(c.a(), c)); }}},
      {"bitwise_and", {K::Binary, binary(Ops::AND), [](const Call& c) { check_not_float(c, "bitwise_and"); }}},
      {"bitwise_or", {K::Binary, binary(Ops::OR), [](const Call& c) { check_not_float(c, "bitwise_or"); }}},
      {"bitwise_xor", {K::Binary, binary(Ops::XOR), [](const Call& c) { check_not_float(c, "bitwise_xor"); }}},
      {"bitwise_not",
       {K::Unary, [](const Call& c) { return un(Ops::BITNOT, c.a()); },
        [](const Call& c) { check_not_float(c, "bitwise_not"); }}},
      {"gcd", {K::Binary, [](const Call& c) { return gcd(c.a(), c.b(), c.compute); }}},
      {"lcm", {K::Binary, lcm}},
      {"bitwise_left_shift", {K::Binary, binary(Ops::SHL), [](const Call& c) { check_not_float(c, "lshift"); }}},
      {"bitwise_right_shift", {K::Binary, binary(Ops::SHR), [](const Call& c) { check_not_float(c, "rshift"); }}},
      {"__lshift__", {K::Binary, binary(Ops::SHL), [](const Call& c) { check_not_float(c, "lshift"); }}},
      {"__rshift__", {K::Binary, binary(Ops::SHR), [](const Call& c) { check_not_float(c, "rshift"); }}},
      {"addcmul", {K::Binary, pointwise_combine(Ops::MUL)}},
      {"addcdiv",
       {K::Binary, pointwise_combine(Ops::FDIV),
        [](const Call& c) {
          TORCH_CHECK(!(at::isIntegralType(c.tensors.at(1).scalar_type(), true) &&
                        at::isIntegralType(c.tensors.at(2).scalar_type(), true)),
                      "Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
                      "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                      "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                      "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                      "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                      "for all dtypes.");
        }}},
      {"lerp", {K::Binary, lerp, nullptr, nullptr, Layout::Tensors, Numbers::Original}},
      {"where", {K::Where, [](const Call& c) { return where(c.in.at(0), c.in.at(1), c.in.at(2)); }}},
      {"copysign",
       {K::BinaryFloat,
        [](const Call& c) {
          UOpPtr m = un(Ops::ABS, c.a());
          return where(sign_bit(c.b(), c), un(Ops::NEG, m), m);
        }}},
      {"logaddexp", {K::Binary, log_add_exp(false), [](const Call& c) { check_float(c, "logaddexp"); }}},
      {"logaddexp2", {K::Binary, log_add_exp(true), [](const Call& c) { check_float(c, "logaddexp2"); }}},
      {"fmax", {K::Binary, nan_ignoring(Ops::MAX)}},
      {"fmin", {K::Binary, nan_ignoring(Ops::MIN)}},
      {"xlogy", {K::BinaryFloat, x_log(Ops::LOG)}},
      {"special_xlog1py", {K::BinaryFloat, x_log(Ops::LOG1P)}},
      {"hypot", {K::Binary, hypot, [](const Call& c) { check_float(c, "hypot"); }}},
      {"special_chebyshev_polynomial_t", {K::BinaryFloat, orthogonal(aten_ops::polynomials::chebyshev_t)}},
      {"special_chebyshev_polynomial_u", {K::BinaryFloat, orthogonal(aten_ops::polynomials::chebyshev_u)}},
      {"special_zeta", {K::BinaryFloat, zeta}},
      {"special_chebyshev_polynomial_v", {K::BinaryFloat, orthogonal(aten_ops::polynomials::chebyshev_v)}},
      {"special_chebyshev_polynomial_w", {K::BinaryFloat, orthogonal(aten_ops::polynomials::chebyshev_w)}},
      {"special_shifted_chebyshev_polynomial_t", {K::BinaryFloat, shifted_chebyshev('t')}},
      {"special_shifted_chebyshev_polynomial_u", {K::BinaryFloat, shifted_chebyshev('u')}},
      {"special_shifted_chebyshev_polynomial_v", {K::BinaryFloat, shifted_chebyshev('v')}},
      {"special_shifted_chebyshev_polynomial_w", {K::BinaryFloat, shifted_chebyshev('w')}},
      {"special_hermite_polynomial_h",
       {K::BinaryFloat, orthogonal([](const auto& a) { return aten_ops::polynomials::hermite(a, true); })}},
      {"special_hermite_polynomial_he",
       {K::BinaryFloat, orthogonal([](const auto& a) { return aten_ops::polynomials::hermite(a, false); })}},
      {"special_laguerre_polynomial_l", {K::BinaryFloat, orthogonal(aten_ops::polynomials::laguerre_l)}},
      {"special_legendre_polynomial_p", {K::BinaryFloat, orthogonal(aten_ops::polynomials::legendre_p)}},
      {"nextafter", {K::Binary, next_after, [](const Call& c) { check_float(c, "nextafter"); }}},
      {"heaviside",
       {K::Binary,
        [](const Call& c) {
          return where(bin(Ops::CMPEQ, c.a(), c.zero()), c.b(), cast(bin(Ops::CMPLT, c.zero(), c.a()), c.compute));
        },
        [](const Call& c) {
          TORCH_CHECK(c.tensors.at(0).scalar_type() == c.tensors.at(1).scalar_type(),
                      "heaviside is not yet implemented for tensors with different dtypes.");
        }}},
      {"frac",
       {K::Unary, [](const Call& c) { return bin(Ops::SUB, c.a(), un(Ops::TRUNC, c.a())); },
        [](const Call& c) { check_float(c, "frac"); }}},
      {"sinc", {K::UnaryFloat, sinc}},
      {"special_entr", {K::UnaryFloat, entr}},
      {"isposinf",
       {K::UnaryBool,
        [](const Call& c) {
          return is_float(c.compute) ? bin(Ops::CMPEQ, c.a(), c.constant(INFINITY)) : bin(Ops::CMPNE, c.a(), c.a());
        },
        nullptr, "isposinf"}},
      {"isneginf",
       {K::UnaryBool,
        [](const Call& c) {
          return is_float(c.compute) ? bin(Ops::CMPEQ, c.a(), c.constant(-INFINITY)) : bin(Ops::CMPNE, c.a(), c.a());
        },
        nullptr, "isneginf"}},
      {"signbit", {K::UnaryBool, [](const Call& c) { return sign_bit(c.a(), c); }, nullptr, "signbit"}},
  };
  return t;
}

// The op family of a schema name: aten::add_ and aten::add.out are both "add"; __ilshift__ is __lshift__.
std::string family(const c10::FunctionSchema& s) {
  std::string n = s.name().substr(s.name().find("::") + 2);
  if (n == "__ilshift__") return "__lshift__";
  if (n == "__irshift__") return "__rshift__";
  if (n.size() > 1 && n.back() == '_' && n[n.size() - 2] != '_') n.pop_back();
  return n;
}

// The special polynomials' x and n are operands; polygamma's n (an int) is a parameter.
bool is_operand(const c10::Argument& arg) {
  const std::string& name = arg.name();
  return name == "self" || name == "other" || name == "exponent" || name == "min" || name == "max" ||
         name == "condition" || name == "tensor1" || name == "tensor2" || name == "end" || name == "weight" ||
         name == "values" || name == "x" || name == "grad_output" ||
         (name == "n" && arg.type()->kind() == c10::TypeKind::TensorType);
}

at::Tensor wrap_scalar(const at::Scalar& s) {
  at::Tensor t = at::scalar_to_tensor(s);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// TensorIterator with torch's configuration for the kind; it allocates the result when `out` is
// undefined and resizes (with torch's warning) a given out=.
at::TensorIterator make_iterator(Kind kind, const at::Tensor& out, c10::ArrayRef<at::Tensor> ins) {
  at::TensorIteratorConfig cfg;
  cfg.set_check_mem_overlap(true).allow_cpu_scalars(true);
  cfg.add_output(out);
  for (const at::Tensor& t : ins)
    cfg.add_const_input(t);
  switch (kind) {
  case Kind::Unary:
    cfg.check_all_same_dtype(true);
    break;
  case Kind::UnaryBool:
    cfg.check_all_same_dtype(false);
    break;
  case Kind::UnaryFloat:
  case Kind::BinaryFloat:
  case Kind::Binary:
    cfg.promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true).enforce_safe_casting_to_output(true);
    if (kind != Kind::Binary) cfg.promote_integer_inputs_to_float(true);
    break;
  case Kind::Comparison:
    cfg.promote_inputs_to_common_dtype(true);
    if (!out.defined()) cfg.declare_static_dtype(at::kBool);
    if (out.defined() && out.scalar_type() != at::kBool) cfg.cast_common_dtype_to_outputs(true);
    break;
  case Kind::Where:
    cfg.check_all_same_dtype(false);
    break;
  }
  return cfg.build();
}

// The value of a 0-dim CPU operand, read without a dispatch for the dtypes Python numbers wrap as.
at::Scalar host_scalar(const at::Tensor& t) {
  if (t.is_neg() || !t.has_storage()) return t.item();
  switch (t.scalar_type()) {
  case at::kDouble:
    return *t.const_data_ptr<double>();
  case at::kFloat:
    return *t.const_data_ptr<float>();
  case at::kLong:
    return *t.const_data_ptr<int64_t>();
  case at::kInt:
    return *t.const_data_ptr<int32_t>();
  case at::kBool:
    return *t.const_data_ptr<bool>();
  default:
    return t.item();
  }
}

// An integer or bool Scalar in the integer dtype dt as TensorIterator converts a CPU scalar operand to the
// common dtype: a static_cast, so that int8 == 300 compares with 44 and uint16 & -1 is 65535 (a fill checks
// for overflow instead).
at::Scalar wrapped_integer(const at::Scalar& s, DType dt) {
  uint64_t bits = s.isUnsigned() ? s.toUInt64() : static_cast<uint64_t>(s.toLong());
  switch (dt) {
  case DType::Int8:
    return static_cast<int8_t>(bits);
  case DType::Int16:
    return static_cast<int16_t>(bits);
  case DType::Int32:
    return static_cast<int32_t>(bits);
  case DType::UInt8:
    return static_cast<uint8_t>(bits);
  case DType::UInt16:
    return static_cast<uint16_t>(bits);
  case DType::UInt32:
    return static_cast<uint32_t>(bits);
  case DType::UInt64:
    return bits;
  default:
    return static_cast<int64_t>(bits);
  }
}

// A floating number among an op's operands as TensorIterator converts it: unchecked, so that a float32 tensor plus
// 1e39 is inf, as on the CPU; to a float16 or bfloat16 common dtype first unless the op reads it as given (Numbers).
// A number the op keeps outside its iterator (pow's exponent, clamp's bounds, lerp's weight: Layout::Tensors) or takes
// as a parameter (alpha) is converted with torch's overflow check instead.
at::Scalar iterator_number(const at::Scalar& s, const Op& op, DType common, DType compute) {
  if (!s.isFloatingPoint() || compute != DType::Float32) return s;
  if (op.layout == Layout::Tensors) (void)s.to<float>(); // torch's overflow error
  auto f = static_cast<float>(s.toDouble());
  if (op.numbers == Numbers::Rounded && common == DType::BFloat16) return static_cast<float>(c10::BFloat16(f));
  if (op.numbers == Numbers::Rounded && common == DType::Float16) return static_cast<float>(c10::Half(f));
  return f;
}

// A tensor operand as a UOp of the result shape in the compute dtype; a CPU scalar (a wrapped number, or a 0-dim
// tensor) converted as `op`'s CPU kernel converts it (iterator_number).
UOpPtr operand(const at::Tensor& t, DType common, DType compute, const Shape& shape, const Op* op = nullptr) {
  if (!t.is_privateuseone()) {
    TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, ",
                t.device(), " and tiny:0!");
    at::Scalar s = host_scalar(t);
    if (is_int(common) && s.isIntegral(/*includeBool=*/true)) s = wrapped_integer(s, common);
    return scalar_constant(op ? iterator_number(s, *op, common, compute) : s, compute, shape);
  }
  // A broadcast operand is read as the one view of its storage it is (aten_ops/window_read.h).
  bool same_shape = c10::IntArrayRef(shape) == t.sizes();
  UOpPtr v = same_shape || t.numel() == 0 || prod(shape) == 0 ? read(t) : aten_ops::read_broadcast(t, shape);
  // TensorIterator casts a tensor of another dtype to the common one (a float32 0-d tensor compared
  // with float16 rounds to float16), then the kernel computes in opmath
  if (v->dtype != common) v = cast(v, common);
  v = cast(v, compute);
  if (v->shape == shape) return v;
  Shape padded(shape.size() - v->shape.size(), 1);
  padded.insert(padded.end(), v->shape.begin(), v->shape.end());
  return view(v, ShapeTracker::from_shape(v->shape).reshape(padded).expand(shape)); // one view node
}

// torch.complex(real, imag) and torch.polar(abs, angle): two real tensors of one float dtype, broadcast,
// into a complex out= (resized as TensorIterator resizes it).
template <bool Polar> at::Tensor& complex_from_parts_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  using CpuOp = std::conditional_t<Polar, at::_ops::polar_out, at::_ops::complex_out>;
  check_cpu_accepts<CpuOp>(a, b, out); // the CPU's dtype checks
  check_same_device({a, b, out});
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(out)
                                .add_const_input(a)
                                .add_const_input(b)
                                .check_all_same_dtype(false)
                                .build();
  Shape shape = to_shape(out.sizes());
  DType dt = element_dtype(out.scalar_type()), compute = opmath(dt);
  UOpPtr x = operand(a, dt, compute, shape), y = operand(b, dt, compute, shape);
  UOpPtr re = Polar ? alu(Ops::MUL, x, alu(Ops::COS, y)) : x, im = Polar ? alu(Ops::MUL, x, alu(Ops::SIN, y)) : y;
  if (out.numel() > 0) write_complex(out, join_complex(cast(re, dt), cast(im, dt)));
  return out;
}

// What each argument of an overload is to the kernel.
enum class Role : uint8_t {
  Out,         // out=: written, not read
  InPlaceSelf, // the self of an in-place op: read and written
  Operand,     // a tensor or Scalar operand
  Param,       // any other argument, by name
};

struct Overload {
  const Op* op;
  std::vector<Role> roles; // one per argument
};

// The table entry and argument roles of an overload, found by name once per schema and thread (not per
// call: recording cost).
const Overload& overload_of(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, Overload> by_schema;
  auto [it, fresh] = by_schema.try_emplace(&schema);
  if (fresh) {
    it->second.op = &table().at(family(schema));
    for (const c10::Argument& arg : schema.arguments()) {
      bool writes = arg.alias_info() && arg.alias_info()->isWrite();
      it->second.roles.push_back(writes && arg.name() != "self" ? Role::Out
                                 : writes                       ? Role::InPlaceSelf
                                 : is_operand(arg)              ? Role::Operand
                                                                : Role::Param);
    }
  }
  return it->second;
}

// What TensorIterator allocates for a functional call whose tiny operands are all contiguous, the
// others 0-dim (the common case: a fresh contiguous result of the broadcast shape, its dtype by
// torch's promotion), found without building an iterator. Returns the result and the common dtype,
// or nothing when the call needs TensorIterator's general rules (strided operands, out=).
// `self` (defined for an in-place call: ins[0]) is the result instead when the iterator would accept it
// as it is: the operands broadcast to its shape, the common dtype casts safely to its dtype, and no other
// operand shares its storage (the iterator's overlap checks); otherwise the iterator raises its error.
std::optional<std::pair<c10::MaybeOwned<at::Tensor>, at::ScalarType>>
plain_result(Kind kind, c10::ArrayRef<at::Tensor> ins, const at::Tensor& self = {}) {
  if (kind == Kind::UnaryBool || kind == Kind::Where) return std::nullopt;
  if (self.defined()) {
    if (kind == Kind::Comparison || !self.is_privateuseone() || !self.is_same(ins.at(0))) return std::nullopt;
    for (size_t i = 1; i < ins.size(); i++)
      if (ins[i].is_privateuseone() && ins[i].storage().is_alias_of(self.storage())) return std::nullopt;
  }
  at::DimVector sizes;
  const at::Tensor* on_tiny = nullptr;
  for (const at::Tensor& t : ins) {
    if (at::isComplexType(t.scalar_type())) return std::nullopt;
    if (!t.is_privateuseone()) {
      if (t.dim() != 0) return std::nullopt;
      continue;
    }
    if (on_tiny && t.device() != on_tiny->device()) return std::nullopt;
    on_tiny = &t;
    if (t.dim() == 0) continue;
    // strictly contiguous: TensorIterator orders the result's dims by every operand stride, size-1 dims
    // included ((5, 1) with strides (1, 5) gives a result with strides (1, 5)). An expanded dim (stride 0,
    // size 2 or more) orders nothing (TensorIterator passes over a pair of dims that an operand broadcasts),
    // so an operand contiguous in its other dims (z.expand(4, 16), a mask expand_as(x)) keeps the result
    // row-major too (`y + z.expand(4, 16)` on (4, 16): 1.96-2.00 -> 1.48 us, eager's 1.20).
    // An in-place op's self expanded is TensorIterator's internal-overlap error: not this path.
    const bool input = !self.defined() || !t.is_same(self);
    int64_t expect = 1;
    for (int64_t d = t.dim(); d-- > 0;) {
      if (input && t.stride(d) == 0 && t.size(d) > 1) continue;
      if (t.stride(d) != expect) return std::nullopt;
      expect *= std::max<int64_t>(t.size(d), 1);
    }
    sizes = at::infer_size_dimvector(sizes, t.sizes());
  }
  if (!on_tiny) return std::nullopt;
  at::ScalarType common = kind == Kind::Unary ? ins.at(0).scalar_type() : at::native::result_type(ins);
  if ((kind == Kind::UnaryFloat || kind == Kind::BinaryFloat) && at::isIntegralType(common, /*includeBool=*/true))
    common = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (self.defined()) {
    if (self.sizes() != c10::IntArrayRef(sizes) || !at::canCast(common, self.scalar_type())) return std::nullopt;
    return std::make_pair(c10::MaybeOwned<at::Tensor>::borrowed(self), common);
  }
  at::ScalarType dtype = kind == Kind::Comparison ? at::kBool : common;
  return std::make_pair(c10::MaybeOwned<at::Tensor>::owned(empty_tiny(sizes, dtype, on_tiny->device())), common);
}

// Whether a call of an op laid out by its tensors (Layout::Tensors) has a number among its operands: an overload
// that takes Python numbers (pow.Tensor_Scalar, pow.Scalar, clamp, lerp.Scalar; not clamp.Tensor or lerp.Tensor,
// whose tensors are all the CPU iterator's operands).
bool has_number_operands(const Call& call) {
  const std::string& overload = call.schema.overload_name();
  if (overload != "" && overload != "Scalar" && overload != "Tensor_Scalar") return false;
  for (const at::Tensor& t : call.tensors)
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return true;
  return false;
}

// A functional result (`allocated` by the iterator over every operand) laid out as the CPU's iterator over the tensor
// operands alone lays it out: with the numbers among its operands, an input of shape (2, 1) and strides (1, 2) gave
// the result strides (1, 2), where the CPU's iterator, seeing one operand contiguous, takes its fast path and gives
// (1, 1) (fuzzer seed 49578: a view of another element size then needs the last stride 1).
at::Tensor laid_out_by_tensors(const Call& call, const at::Tensor& allocated) {
  at::TensorIteratorConfig cfg;
  at::Tensor result;
  cfg.add_output(result).allow_cpu_scalars(true).check_all_same_dtype(false).declare_static_dtype_and_device(
      allocated.scalar_type(), allocated.device());
  for (const at::Tensor& t : call.tensors)
    if (!t.unsafeGetTensorImpl()->is_wrapped_number()) cfg.add_const_input(t);
  return cfg.build().output();
}

// Whether the CPU kernel raised in its dispatch on dtypes ("... not implemented for 'Bool'").
bool refused_in_dispatch(const std::exception_ptr& refused) {
  try {
    std::rethrow_exception(refused);
  } catch (const c10::Error& e) {
    return std::string_view(e.what()).find("not implemented for") != std::string_view::npos;
  }
}

bool is_dtype_error(const c10::Error& e) {
  std::string_view m = e.what();
  return m.find("can't be cast") != std::string_view::npos || m.find("dtype") != std::string_view::npos;
}

// ---- complex operands (aten_ops/complex_math.h) ----

namespace cm = complex_math;

// A complex op: how torch types the call (the kind of the real op of the same name) and its value from
// the operands as (real, imaginary) pairs in the compute dtype. A `real_result` op (abs, angle) gives a
// real value of the input's real dtype, a comparison or UnaryBool op a bool: both in `re`.
struct ComplexOp {
  Kind kind;
  std::function<cm::Cx(const std::vector<cm::Cx>&, const Call&)> build;
  bool real_result = false;
};

// z rounded to the common dtype where the formula computes in a wider one: complex32's CPU kernels compute each
// complex operation of c10::complex<Half> in float and round its result to half (a + alpha * b rounds alpha * b,
// then the sum), so a formula of several operations rounds after each, as they do.
cm::Cx rounded(const cm::Cx& z, const Call& c) {
  if (c.common == c.compute) return z;
  return {cast(cast(z.re, c.common), c.compute), cast(cast(z.im, c.common), c.compute)};
}

// A Scalar argument (alpha) as a complex constant of the compute dtype, rounded to the common dtype first as
// the CPU's kernels convert it to theirs.
cm::Cx complex_constant(const at::Scalar& s, const Call& c) {
  c10::complex<double> z = s.toComplexDouble();
  return rounded({scalar_constant(z.real(), c.compute, c.shape), scalar_constant(z.imag(), c.compute, c.shape)}, c);
}

// a + alpha * b (add, sub, rsub). The CPU's kernels multiply by alpha even when it is 1, which makes an infinite part
// of b a NaN in the other part ((1, 0) * (inf, 0) = (inf, nan)): so does this.
std::function<cm::Cx(const std::vector<cm::Cx>&, const Call&)> complex_with_alpha(bool subtract, bool swap = false) {
  return [subtract, swap](const std::vector<cm::Cx>& in, const Call& c) {
    cm::Cx x = in.at(swap ? 1 : 0), y = in.at(swap ? 0 : 1);
    at::Scalar alpha = c.has("alpha") ? c.param("alpha").toScalar() : at::Scalar(1);
    y = rounded(cm::mul(y, complex_constant(alpha, c)), c);
    return subtract ? cm::sub(x, y) : cm::add(x, y);
  };
}

// logical_and/or/xor: each operand's truth (either part nonzero), combined.
std::function<cm::Cx(const std::vector<cm::Cx>&, const Call&)> complex_logical(Ops op) {
  return [op](const std::vector<cm::Cx>& in, const Call&) {
    return cm::Cx{alu(op, cm::nonzero(in.at(0)), cm::nonzero(in.at(1))), nullptr};
  };
}

// addcmul and addcdiv: self + (value * t1) * t2 or self + (value * t1) / t2.
std::function<cm::Cx(const std::vector<cm::Cx>&, const Call&)> complex_pointwise_combine(bool divide) {
  return [divide](const std::vector<cm::Cx>& in, const Call& c) {
    cm::Cx t1 = in.at(1);
    if (c.has("value")) t1 = rounded(cm::mul(complex_constant(c.param("value").toScalar(), c), t1), c);
    return cm::add(in.at(0), rounded(divide ? cm::div(t1, in.at(2)) : cm::mul(t1, in.at(2)), c));
  };
}

// torch's lerp of complex values: from whichever end is nearer (|weight| < 0.5: from self), so that weight 1
// gives `end` exactly.
cm::Cx complex_lerp(const std::vector<cm::Cx>& in, const Call&) {
  const cm::Cx &self = in.at(0), &end = in.at(1), &w = in.at(2);
  cm::Cx diff = cm::sub(end, self);
  UOpPtr near_self = alu(Ops::CMPLT, cm::abs(w), cm::like(w.re, 0.5));
  cm::Cx from_self = cm::add(self, cm::mul(w, diff));
  cm::Cx from_end = cm::sub(end, cm::mul(diff, cm::sub({cm::like(w.re, 1.0), cm::like(w.re, 0.0)}, w)));
  return {where(near_self, from_self.re, from_end.re), where(near_self, from_self.im, from_end.im)};
}

// torch's logaddexp of complex values (complex_math.h).
cm::Cx complex_log_add_exp(const std::vector<cm::Cx>& in, const Call&) { return cm::log_add_exp(in.at(0), in.at(1)); }

// torch's CPU pow of complex tensors to a Scalar exponent computes 2 and 3 as products, 0.5 as sqrt and -1,
// -2 as reciprocals (as for floats); other exponents as exp(w log z).
cm::Cx complex_power(const std::vector<cm::Cx>& in, const Call& c) {
  const c10::IValue* e = c.find("exponent");
  if (e && e->isScalar() && !e->toScalar().isComplex()) {
    double p = e->toScalar().toDouble();
    const cm::Cx& z = in.at(0);
    if (p == 2) return cm::mul(z, z);
    if (p == 3) return cm::mul(cm::mul(z, z), z);
    if (p == 0.5) return cm::sqrt(z);
    if (p == -1) return cm::reciprocal(z);
    if (p == -2) return cm::reciprocal(cm::mul(z, z));
  }
  return cm::pow(in.at(0), in.at(1));
}

const std::unordered_map<std::string, ComplexOp>& complex_table() {
  using K = Kind;
  using In = const std::vector<cm::Cx>&;
  static const std::unordered_map<std::string, ComplexOp> t = {
      {"add", {K::Binary, complex_with_alpha(false)}},
      {"sub", {K::Binary, complex_with_alpha(true)}},
      {"rsub", {K::Binary, complex_with_alpha(true, true)}},
      {"mul", {K::Binary, [](In in, const Call&) { return cm::mul(in.at(0), in.at(1)); }}},
      {"div", {K::BinaryFloat, [](In in, const Call&) { return cm::div(in.at(0), in.at(1)); }}},
      {"pow", {K::Binary, complex_power}},
      {"neg", {K::Unary, [](In in, const Call&) { return cm::neg(in.at(0)); }}},
      {"conj_physical", {K::Unary, [](In in, const Call&) { return cm::conj(in.at(0)); }}},
      {"sgn", {K::Unary, [](In in, const Call&) { return cm::sgn(in.at(0)); }}},
      {"exp", {K::UnaryFloat, [](In in, const Call&) { return cm::exp(in.at(0)); }}},
      {"log", {K::UnaryFloat, [](In in, const Call&) { return cm::log(in.at(0)); }}},
      {"sqrt", {K::UnaryFloat, [](In in, const Call&) { return cm::sqrt(in.at(0)); }}},
      {"reciprocal", {K::UnaryFloat, [](In in, const Call&) { return cm::reciprocal(in.at(0)); }}},
      {"sin", {K::UnaryFloat, [](In in, const Call&) { return cm::sin(in.at(0)); }}},
      {"cos", {K::UnaryFloat, [](In in, const Call&) { return cm::cos(in.at(0)); }}},
      {"tan", {K::UnaryFloat, [](In in, const Call&) { return cm::tan(in.at(0)); }}},
      {"sinh", {K::UnaryFloat, [](In in, const Call&) { return cm::sinh(in.at(0)); }}},
      {"cosh", {K::UnaryFloat, [](In in, const Call&) { return cm::cosh(in.at(0)); }}},
      {"tanh", {K::UnaryFloat, [](In in, const Call&) { return cm::tanh(in.at(0)); }}},
      {"asin", {K::UnaryFloat, [](In in, const Call&) { return cm::asin(in.at(0)); }}},
      {"acos", {K::UnaryFloat, [](In in, const Call&) { return cm::acos(in.at(0)); }}},
      {"atan", {K::UnaryFloat, [](In in, const Call&) { return cm::atan(in.at(0)); }}},
      {"asinh", {K::UnaryFloat, [](In in, const Call&) { return cm::asinh(in.at(0)); }}},
      {"acosh", {K::UnaryFloat, [](In in, const Call&) { return cm::acosh(in.at(0)); }}},
      {"atanh", {K::UnaryFloat, [](In in, const Call&) { return cm::atanh(in.at(0)); }}},
      {"log2", {K::UnaryFloat, [](In in, const Call&) { return cm::log_base(in.at(0), 2.0); }}},
      {"log10", {K::UnaryFloat, [](In in, const Call&) { return cm::log_base(in.at(0), 10.0); }}},
      {"log1p", {K::UnaryFloat, [](In in, const Call&) { return cm::log1p(in.at(0)); }}},
      {"expm1", {K::UnaryFloat, [](In in, const Call&) { return cm::expm1(in.at(0)); }}},
      {"rsqrt", {K::UnaryFloat, [](In in, const Call&) { return cm::reciprocal(cm::sqrt(in.at(0))); }}},
      {"sigmoid", {K::UnaryFloat, [](In in, const Call&) { return cm::sigmoid(in.at(0)); }}},
      // the condition reads as (0 or 1, 0) pairs
      {"where",
       {K::Where,
        [](In in, const Call&) {
          UOpPtr c = alu(Ops::CMPNE, in.at(0).re, cm::like(in.at(0).re, 0.0));
          return cm::Cx{where(c, in.at(1).re, in.at(2).re), where(c, in.at(1).im, in.at(2).im)};
        }}},
      {"abs",
       {K::Unary,
        [](In in, const Call& c) {
          // complex32: half parts square exactly in float and cannot overflow it, so sqrt(re^2 + im^2) is the
          // CPU's hypotf of them, rounded to half
          const cm::Cx& z = in.at(0);
          if (c.common != c.compute)
            return cm::Cx{alu(Ops::SQRT, alu(Ops::ADD, alu(Ops::MUL, z.re, z.re), alu(Ops::MUL, z.im, z.im))), nullptr};
          return cm::Cx{cm::abs(z), nullptr};
        },
        true}},
      {"angle",
       {K::Unary,
        [](In in, const Call&) {
          return cm::Cx{cm::angle(in.at(0)), nullptr};
        },
        true}},
      {"eq",
       {K::Comparison,
        [](In in, const Call&) {
          return cm::Cx{cm::eq(in.at(0), in.at(1)), nullptr};
        }}},
      {"ne",
       {K::Comparison,
        [](In in, const Call&) {
          return cm::Cx{alu(Ops::NOT, cm::eq(in.at(0), in.at(1))), nullptr};
        }}},
      {"isnan",
       {K::UnaryBool,
        [](In in, const Call&) {
          return cm::Cx{cm::isnan(in.at(0)), nullptr};
        }}},
      {"logical_and", {K::Comparison, complex_logical(Ops::AND)}},
      {"logical_or", {K::Comparison, complex_logical(Ops::OR)}},
      {"logical_xor", {K::Comparison, complex_logical(Ops::XOR)}},
      {"logical_not",
       {K::UnaryBool,
        [](In in, const Call&) {
          return cm::Cx{alu(Ops::NOT, cm::nonzero(in.at(0))), nullptr};
        }}},
      // self + value * t1 * t2 and self + value * t1 / t2, in the CPU's order
      {"addcmul", {K::Binary, complex_pointwise_combine(false)}},
      {"addcdiv", {K::Binary, complex_pointwise_combine(true)}},
      {"lerp", {K::Binary, complex_lerp}},
      {"logaddexp", {K::Binary, complex_log_add_exp}},
      // 2^z = exp(ln 2 z), a real factor (c10's exp2 of a complex value)
      {"exp2",
       {K::UnaryFloat, [](In in, const Call&) { return cm::exp(cm::scale(in.at(0), cm::like(in.at(0).re, M_LN2))); }}},
      // sin(pi z) / (pi z), 1 at 0
      {"sinc",
       {K::UnaryFloat,
        [](In in, const Call&) {
          const cm::Cx& z = in.at(0);
          cm::Cx pz = cm::scale(z, cm::like(z.re, M_PI)), v = cm::div(cm::sin(pz), pz);
          UOpPtr at_zero = alu(Ops::NOT, cm::nonzero(z));
          return cm::Cx{where(at_zero, cm::like(z.re, 1.0), v.re), where(at_zero, cm::like(z.re, 0.0), v.im)};
        }}},
  };
  return t;
}

// An operand of a complex call as pairs of the result shape in the compute dtype: a tiny tensor (complex
// or real) rounded to the common dtype first, as TensorIterator casts it; a CPU scalar as constants.
cm::Cx complex_operand(const at::Tensor& t, at::ScalarType common, DType compute, const Shape& shape) {
  if (!t.is_privateuseone()) {
    TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, ",
                t.device(), " and tiny:0!");
    // rounded to the common dtype first, as TensorIterator casts it (complex32: to half)
    c10::complex<double> z = t.item().toComplexDouble();
    DType rounded = element_dtype(common);
    UOpPtr re = scalar_constant(z.real(), compute, shape), im = scalar_constant(z.imag(), compute, shape);
    if (rounded == compute) return {re, im};
    return {cast(cast(re, rounded), compute), cast(cast(im, rounded), compute)};
  }
  UOpPtr pairs = read_complex(t);
  DType rounded = element_dtype(common);
  if (pairs->dtype != rounded) pairs = cast(pairs, rounded);
  if (pairs->dtype != compute) pairs = cast(pairs, compute);
  Shape padded(shape.size() - t.dim(), 1), full = shape;
  padded.insert(padded.end(), pairs->shape.begin(), pairs->shape.end());
  full.push_back(2);
  return cm::parts_of(expand(reshape(pairs, padded), full));
}

// The complex path of elementwise_kernel: ops of complex_table natively, every other op on the CPU.
void complex_elementwise(const c10::OperatorHandle& handle, torch::jit::Stack* stack, Call& call, at::Tensor out,
                         bool inplace) {
  auto found = complex_table().find(family(handle.schema()));
  if (found == complex_table().end()) return fallback(handle, stack);
  const ComplexOp& op = found->second;
  size_t nargs = handle.schema().arguments().size();
  check_cpu_accepts(handle, torch::jit::last(*stack, nargs)); // the CPU's errors for these dtypes
  const at::Tensor& self = call.tensors.at(0);
  c10::Device device = self.is_privateuseone() ? self.device()
                       : out.defined()         ? out.device()
                                               : call.tensors.at(1).device();
  Kind kind = op.kind;
  if (op.real_result) {
    // abs and angle of a complex tensor are real (torch's unary_op_impl_with_complex_to_float)
    if (!out.defined()) out = empty_tiny(self.sizes(), c10::toRealValueType(self.scalar_type()), device);
    kind = Kind::UnaryBool; // the iterator may not insist on one dtype
  }
  if (kind == Kind::UnaryBool && !out.defined()) out = empty_tiny({0}, at::kBool, device);
  std::optional<at::ScalarType> where_type;
  if (kind == Kind::Where) {
    // as the real path: where's result type is that of its two values, the condition bool
    const at::Tensor &cond = call.tensors.at(0), &a = call.tensors.at(1), &b = call.tensors.at(2);
    TORCH_CHECK(cond.scalar_type() == at::kBool,
                "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
    where_type = at::result_type(a, b);
    if (out.defined()) {
      TORCH_CHECK(out.scalar_type() == *where_type, "Expected out type to be ", *where_type, " but got ",
                  out.scalar_type());
    } else {
      out = empty_tiny({0}, *where_type, device);
    }
  }
  auto iter = make_iterator(kind, out, call.tensors.all());
  at::Tensor result = iter.output();
  at::ScalarType common = where_type                                       ? *where_type
                          : kind == Kind::Unary || kind == Kind::UnaryBool ? self.scalar_type()
                                                                           : iter.common_dtype();
  call.common = element_dtype(common);
  call.compute = opmath(call.common);
  call.shape = to_shape(result.sizes());
  std::vector<cm::Cx> in;
  for (const at::Tensor& t : call.tensors)
    in.push_back(complex_operand(t, common, call.compute, call.shape));
  if (result.numel() > 0) {
    cm::Cx v = op.build(in, call);
    if (result.is_complex()) {
      DType dt = element_dtype(result.scalar_type());
      UOpPtr re = cast(v.re, dt); // a real value (a comparison's) into a complex out= has no imaginary part
      write_complex(result, join_complex(re, v.im ? cast(v.im, dt) : cm::like(re, 0.0)));
    } else {
      // a real result: abs, angle, comparisons; a complex value into a real out= keeps its real part
      write(result, cast(v.re, to_tiny_dtype(result.scalar_type())));
    }
  }
  torch::jit::drop(*stack, nargs);
  torch::jit::push(*stack, inplace || out.defined() ? (inplace ? call.tensors.at(0) : out) : result);
}

// The part of a call common to its boxed and unboxed forms, once its arguments are in `call` (real dtypes):
// checks it as the CPU does, finds or allocates its result, and writes the value there. `out` is the out=
// tensor or the in-place self (borrowed), else undefined; `check_cpu` asks the CPU about the call's dtypes
// (check_cpu_accepts). Returns the tensor the op returns.
template <class CheckCpu>
c10::MaybeOwned<at::Tensor> record(const Op& op, Call& call, c10::MaybeOwned<at::Tensor> out, bool inplace,
                                   const CheckCpu& check_cpu) {
  // TensorIterator takes one CPU scalar; further scalar operands (clamp(x, lo, hi)) ride along as
  // wrapped numbers on tiny, holding a constant.
  int cpu_scalars = 0;
  for (size_t i = 0; i < call.tensors.size(); i++) {
    const at::Tensor& t = call.tensors[i];
    if (t.is_privateuseone() || t.dim() != 0 || cpu_scalars++ == 0) continue;
    c10::Device dev = call.tensors.at(0).is_privateuseone() ? call.tensors.at(0).device() : out->device();
    at::Tensor w = empty_tiny({}, t.scalar_type(), dev);
    write(w, scalar_constant(t.item(), to_tiny_dtype(t.scalar_type())));
    w.unsafeGetTensorImpl()->set_wrapped_number(t.unsafeGetTensorImpl()->is_wrapped_number());
    call.tensors.replace(i, std::move(w));
  }
  // torch's div promotes ints to float only without a rounding mode
  Kind kind = op.kind == Kind::BinaryFloat && call.has("rounding_mode") ? Kind::Binary : op.kind;
  if (!out->defined() && op.layout == Layout::Self && call.tensors.at(0).is_privateuseone())
    out = c10::MaybeOwned<at::Tensor>::owned(at::empty_like(call.tensors.at(0)));

  // The CPU kernel's answer for these dtypes (size-1 stand-ins: it cannot see shapes or overlap).
  std::exception_ptr refused;
  try {
    check_cpu();
  } catch (const c10::Error&) {
    refused = std::current_exception();
  }
  // A check of the CPU's meta function (before it builds its TensorIterator, which may resize out=)
  if (refused && !refused_in_dispatch(refused)) std::rethrow_exception(refused);
  c10::MaybeOwned<at::Tensor> result;
  try {
    if (kind == Kind::Where) {
      const at::Tensor &cond = call.tensors.at(0), &a = call.tensors.at(1), &b = call.tensors.at(2);
      TORCH_CHECK(cond.scalar_type() == at::kBool,
                  "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
      at::ScalarType rt = at::result_type(a, b);
      if (out->defined()) {
        TORCH_CHECK(out->scalar_type() == rt, "Expected out type to be ", rt, " but got ", out->scalar_type());
      } else {
        out = c10::MaybeOwned<at::Tensor>::owned(empty_tiny({0}, rt,
                                                            cond.is_privateuseone() ? cond.device()
                                                            : a.is_privateuseone()  ? a.device()
                                                                                    : b.device()));
      }
      auto iter = make_iterator(kind, *out, call.tensors.all());
      result = c10::MaybeOwned<at::Tensor>::owned(at::Tensor(iter.output()));
      call.common = to_tiny_dtype(rt);
      call.compute = opmath(call.common);
    } else if (auto plain = out->defined() && !inplace ? std::nullopt : plain_result(kind, call.tensors.all(), *out)) {
      result = std::move(plain->first);
      call.common = to_tiny_dtype(plain->second);
      call.compute = opmath(call.common);
    } else {
      if (kind == Kind::UnaryBool && !out->defined())
        out = c10::MaybeOwned<at::Tensor>::owned(empty_tiny({0}, at::kBool, call.tensors.at(0).device()));
      const bool functional = !out->defined();
      auto iter = make_iterator(kind, *out, call.tensors.all());
      result = c10::MaybeOwned<at::Tensor>::owned(at::Tensor(iter.output()));
      if (functional && op.layout == Layout::Tensors && has_number_operands(call))
        result = c10::MaybeOwned<at::Tensor>::owned(laid_out_by_tensors(call, *result));
      at::ScalarType common =
          kind == Kind::Unary || kind == Kind::UnaryBool ? call.tensors.at(0).scalar_type() : iter.common_dtype();
      call.common = to_tiny_dtype(common);
      call.compute = opmath(call.common);
    }
  } catch (const c10::Error& e) {
    // The CPU's meta function (its checks, then TensorIterator's) runs before its kernel's dispatch on
    // dtypes. A refusal in that dispatch means the meta function passed these dtypes: then only a shape
    // or overlap error of tiny's iterator is the CPU's too (lerp_'s weight, a cast error here, is no
    // operand of the CPU's iterator).
    if (refused && is_dtype_error(e)) std::rethrow_exception(refused);
    throw;
  }
  if (refused) std::rethrow_exception(refused);
  if (op.check) op.check(call);
  call.shape = to_shape(result->sizes());
  for (size_t i = 0; i < call.tensors.size(); i++) {
    // where's condition stays bool; every other operand is read in the compute dtype
    DType dt = kind == Kind::Where && i == 0 ? DType::Bool : call.compute;
    call.in.push_back(operand(call.tensors[i], dt == DType::Bool ? dt : call.common, dt, call.shape, &op));
  }
  if (result->numel() > 0) write(*result, cast(op.build(call), to_tiny_dtype(result->scalar_type())));
  if (inplace) return c10::MaybeOwned<at::Tensor>::borrowed(call.tensors.at(0));
  return out->defined() ? std::move(out) : std::move(result);
}

bool any_complex(const Call& call, const at::Tensor& out) {
  bool complex = out.defined() && out.is_complex();
  for (const at::Tensor& t : call.tensors)
    complex = complex || t.is_complex();
  return complex;
}

void elementwise_kernel(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = handle.schema();
  const Overload& overload = overload_of(schema);
  const Op& op = *overload.op;
  size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);

  Call call{schema, {}, {}, {}, DType::Float32, DType::Float32, {}};
  c10::MaybeOwned<at::Tensor> out;
  bool inplace = false;
  for (size_t i = 0; i < nargs; i++) {
    const c10::IValue& v = args[i];
    std::string_view name = schema.arguments()[i].name();
    switch (overload.roles[i]) {
    case Role::Out:
      out = c10::MaybeOwned<at::Tensor>::borrowed(v.toTensor());
      TORCH_CHECK(!op.bool_out_only || out->scalar_type() == at::kBool, op.bool_out_only,
                  " does not support non-boolean outputs.");
      continue;
    case Role::InPlaceSelf:
      out = c10::MaybeOwned<at::Tensor>::borrowed(v.toTensor());
      inplace = true;
      [[fallthrough]];
    case Role::Operand:
      call.params.emplace_back(name, &v);
      if (v.isTensor())
        call.tensors.borrow(v.toTensor());
      else if (v.isScalar() || v.isUnsigned()) // a Python int above INT64_MAX is no isScalar()
        call.tensors.own(wrap_scalar(v.toScalar()));
      break;
    case Role::Param:
      call.params.emplace_back(name, &v);
      break;
    }
  }
  if (any_complex(call, *out)) return complex_elementwise(handle, stack, call, *out, inplace);

  at::Tensor returned = *record(op, call, std::move(out), inplace, [&] { check_cpu_accepts(handle, args); });
  torch::jit::drop(*stack, nargs);
  torch::jit::push(*stack, std::move(returned));
}

// The unboxed kernel of an overload whose arguments are tensors, Scalars and optional strings: records the call
// as elementwise_kernel does, without boxing it. Boxing copies each tensor into the stack, and a copy of a tensor
// that only Python holds takes the GIL twice; a complex call is boxed for elementwise_kernel's complex path.
template <class AtenOp, class Signature = typename AtenOp::schema> struct Unboxed;
template <class AtenOp, class Return, class... Args> struct Unboxed<AtenOp, Return(Args...)> {
  static Return kernel(Args... args) {
    static const c10::OperatorHandle handle =
        c10::Dispatcher::singleton().findSchemaOrThrow(AtenOp::name, AtenOp::overload_name);
    static const Overload overload = overload_of(handle.schema());
    const c10::FunctionSchema& schema = handle.schema();
    const Op& op = *overload.op;
    Call call{schema, {}, {}, {}, DType::Float32, DType::Float32, {}};
    c10::MaybeOwned<at::Tensor> out;
    bool inplace = false;
    std::array<c10::IValue, sizeof...(Args)> values; // the parameters' values, for call.params
    size_t i = 0;
    auto take = [&]<class A>(const A& arg) {
      size_t k = i++;
      std::string_view name = schema.arguments()[k].name();
      if constexpr (std::is_same_v<A, at::Tensor>) {
        switch (overload.roles[k]) {
        case Role::Out:
          out = c10::MaybeOwned<at::Tensor>::borrowed(arg);
          TORCH_CHECK(!op.bool_out_only || arg.scalar_type() == at::kBool, op.bool_out_only,
                      " does not support non-boolean outputs.");
          return;
        case Role::InPlaceSelf:
          out = c10::MaybeOwned<at::Tensor>::borrowed(arg);
          inplace = true;
          [[fallthrough]];
        case Role::Operand:
          call.tensors.borrow(arg);
          return;
        case Role::Param:
          break;
        }
        TORCH_CHECK(false, "tiny internal error: ", schema.name(), "'s tensor ", name, " is no operand");
      } else {
        static_assert(std::is_same_v<A, at::Scalar> || std::is_same_v<A, std::optional<c10::string_view>>);
        values[k] = c10::IValue(arg);
        if (overload.roles[k] == Role::Operand) {
          if constexpr (std::is_same_v<A, at::Scalar>) call.tensors.own(wrap_scalar(arg));
        }
        call.params.emplace_back(name, &values[k]);
      }
    };
    (take(args), ...);
    if (any_complex(call, *out))
      return c10::impl::BoxedKernelWrapper<Return(Args...)>::call(
          c10::BoxedKernel::makeFromFunction<&native_or_cpu<&elementwise_kernel, UnsignedPolicy::Native>>(), handle,
          c10::DispatchKeySet(), args...);
    c10::MaybeOwned<at::Tensor> result =
        record(op, call, std::move(out), inplace, [&] { check_cpu_accepts_unboxed(handle, args...); });
    if constexpr (std::is_same_v<Return, at::Tensor&>) {
      // the in-place self or out= itself: the one argument the op writes
      at::Tensor* written = nullptr;
      auto note = [&]<class A>(A&& arg) {
        if constexpr (std::is_same_v<A, at::Tensor&>) written = &arg;
      };
      (note(std::forward<Args>(args)), ...);
      return *written;
    } else {
      static_assert(std::is_same_v<Return, at::Tensor>);
      return *std::move(result);
    }
  }
};

// Registers each at::_ops overload's Unboxed kernel under its schema name ("aten::add" and "Tensor": "add.Tensor").
template <class... AtenOps> void impl_unboxed(KernelLibrary& m) {
  auto name = []<class AtenOp>() {
    std::string n = std::string(AtenOp::name).substr(std::string_view("aten::").size());
    return *AtenOp::overload_name ? n + "." + AtenOp::overload_name : n;
  };
  (m.impl(name.template operator()<AtenOps>().c_str(), TORCH_FN(Unboxed<AtenOps>::kernel), UnsignedPolicy::Native),
   ...);
}

// Every overload registered here (and the unboxed ones, at the end) reaches elementwise_kernel; ops torch implements as
// CompositeExplicitAutograd on top of these (add.Scalar, abs, logical_and, ...) need no entry.
constexpr const char* kOverloads[] = {
    "floor_divide",
    "floor_divide_.Tensor",
    "floor_divide.out",
    "remainder.Tensor",
    "remainder_.Tensor",
    "remainder.Tensor_out",
    "remainder.Scalar_Tensor",
    "fmod.Tensor",
    "fmod_.Tensor",
    "fmod.Tensor_out",
    "pow.Scalar",
    "pow.Tensor_Tensor_out",
    "pow.Scalar_out",
    "pow.Tensor_Scalar_out",
    "pow_.Tensor",
    "maximum.out",
    "minimum.out",
    "clamp",
    "clamp.Tensor",
    "clamp.out",
    "clamp.Tensor_out",
    "clamp_",
    "clamp_.Tensor",
    "clamp_min",
    "clamp_min.Tensor",
    "clamp_min.out",
    "clamp_min.Tensor_out",
    "clamp_min_",
    "clamp_min_.Tensor",
    "clamp_max",
    "clamp_max.Tensor",
    "clamp_max.out",
    "clamp_max.Tensor_out",
    "clamp_max_",
    "clamp_max_.Tensor",
    "abs.out",
    "sign",
    "sign.out",
    "sign_",
    "sgn",
    "angle",
    "angle.out",
    "conj_physical.out",
    "sgn.out",
    "sgn_",
    "logit",
    "logit.out",
    "logit_",
    "floor",
    "floor.out",
    "floor_",
    "ceil",
    "ceil.out",
    "ceil_",
    "round",
    "round.out",
    "round_",
    "round.decimals",
    "round.decimals_out",
    "round_.decimals",
    "trunc",
    "trunc.out",
    "trunc_",
    "exp2",
    "exp2.out",
    "exp2_",
    "log.out",
    "log2",
    "log2.out",
    "log2_",
    "log10",
    "log10.out",
    "log10_",
    "nan_to_num",
    "nan_to_num.out",
    "nan_to_num_",
    "digamma",
    "digamma.out",
    "digamma_",
    "polygamma",
    "polygamma.out",
    "polygamma_",
    "erfinv",
    "erfinv.out",
    "erfinv_",
    "i0",
    "i0.out",
    "i0_",
    "special_i0e",
    "special_i0e.out",
    "special_i1",
    "special_i1.out",
    "special_i1e",
    "special_i1e.out",
    "special_erfcx",
    "special_erfcx.out",
    "special_log_ndtr",
    "special_log_ndtr.out",
    "special_ndtri",
    "special_ndtri.out",
    "special_bessel_j0",
    "special_bessel_j0.out",
    "special_bessel_j1",
    "special_bessel_j1.out",
    "special_bessel_y0",
    "special_bessel_y0.out",
    "special_bessel_y1",
    "special_bessel_y1.out",
    "special_modified_bessel_i0",
    "special_modified_bessel_i0.out",
    "special_modified_bessel_i1",
    "special_modified_bessel_i1.out",
    "special_modified_bessel_k0",
    "special_modified_bessel_k0.out",
    "special_modified_bessel_k1",
    "special_modified_bessel_k1.out",
    "special_scaled_modified_bessel_k0",
    "special_scaled_modified_bessel_k0.out",
    "special_scaled_modified_bessel_k1",
    "special_scaled_modified_bessel_k1.out",
    "special_spherical_bessel_j0",
    "special_spherical_bessel_j0.out",
    "special_airy_ai",
    "special_airy_ai.out",
    "logit_backward",
    "logit_backward.grad_input",
    "igamma",
    "igamma.out",
    "igamma_",
    "igammac",
    "igammac.out",
    "igammac_",
    "log1p",
    "log1p.out",
    "log1p_",
    "expm1",
    "expm1.out",
    "expm1_",
    "sqrt.out",
    "rsqrt.out",
    "reciprocal",
    "reciprocal.out",
    "reciprocal_",
    "sin",
    "sin.out",
    "sin_",
    "cos",
    "cos.out",
    "cos_",
    "tan",
    "tan.out",
    "tan_",
    "tanh.out",
    "erf",
    "erf.out",
    "erf_",
    "erfc",
    "erfc.out",
    "erfc_",
    "lgamma",
    "lgamma.out",
    "lgamma_",
    "asin",
    "asin.out",
    "asin_",
    "acos",
    "acos.out",
    "acos_",
    "atan",
    "atan.out",
    "atan_",
    "sinh",
    "sinh.out",
    "sinh_",
    "cosh",
    "cosh.out",
    "cosh_",
    "asinh",
    "asinh.out",
    "asinh_",
    "acosh",
    "acosh.out",
    "acosh_",
    "atanh",
    "atanh.out",
    "atanh_",
    "atan2",
    "atan2.out",
    "atan2_",
    "sigmoid.out",
    "isnan",
    "eq.Tensor_out",
    "eq.Scalar_out",
    "eq_.Tensor",
    "eq_.Scalar",
    "ne.Tensor_out",
    "ne.Scalar_out",
    "ne_.Tensor",
    "ne_.Scalar",
    "lt.Tensor_out",
    "lt.Scalar_out",
    "lt_.Tensor",
    "lt_.Scalar",
    "le.Tensor_out",
    "le.Scalar_out",
    "le_.Tensor",
    "le_.Scalar",
    "gt.Tensor_out",
    "gt.Scalar_out",
    "gt_.Tensor",
    "gt_.Scalar",
    "ge.Tensor_out",
    "ge.Scalar_out",
    "ge_.Tensor",
    "ge_.Scalar",
    "logical_and.out",
    "logical_or.out",
    "logical_xor.out",
    "logical_not.out",
    "bitwise_and.Tensor",
    "bitwise_and.Tensor_out",
    "bitwise_and_.Tensor",
    "bitwise_or.Tensor",
    "bitwise_or.Tensor_out",
    "bitwise_or_.Tensor",
    "bitwise_xor.Tensor",
    "bitwise_xor.Tensor_out",
    "bitwise_xor_.Tensor",
    "bitwise_not",
    "bitwise_not.out",
    "bitwise_not_",
    "gcd",
    "gcd_",
    "gcd.out",
    "lcm",
    "lcm_",
    "lcm.out",
    "bitwise_left_shift.Tensor",
    "bitwise_left_shift.Tensor_out",
    "bitwise_left_shift_.Tensor",
    "bitwise_right_shift.Tensor",
    "bitwise_right_shift.Tensor_out",
    "bitwise_right_shift_.Tensor",
    "__lshift__.Tensor",
    "__lshift__.Scalar",
    "__rshift__.Tensor",
    "__rshift__.Scalar",
    "__ilshift__.Tensor",
    "__ilshift__.Scalar",
    "__irshift__.Tensor",
    "__irshift__.Scalar",
    "where.self_out",
    "copysign.Tensor",
    "copysign.out",
    "copysign_.Tensor",
    "logaddexp",
    "logaddexp.out",
    "logaddexp2",
    "logaddexp2.out",
    "fmax",
    "fmax.out",
    "fmin",
    "fmin.out",
    "xlogy.Tensor",
    "xlogy.OutTensor",
    "xlogy_.Tensor",
    "special_xlog1py",
    "special_xlog1py.out",
    "hypot",
    "hypot.out",
    "nextafter",
    "nextafter.out",
    "special_chebyshev_polynomial_t",
    "special_chebyshev_polynomial_t.out",
    "special_chebyshev_polynomial_u",
    "special_chebyshev_polynomial_u.out",
    "special_zeta",
    "special_zeta.out",
    "special_chebyshev_polynomial_v",
    "special_chebyshev_polynomial_v.out",
    "special_chebyshev_polynomial_w",
    "special_chebyshev_polynomial_w.out",
    "special_shifted_chebyshev_polynomial_t",
    "special_shifted_chebyshev_polynomial_t.out",
    "special_shifted_chebyshev_polynomial_u",
    "special_shifted_chebyshev_polynomial_u.out",
    "special_shifted_chebyshev_polynomial_v",
    "special_shifted_chebyshev_polynomial_v.out",
    "special_shifted_chebyshev_polynomial_w",
    "special_shifted_chebyshev_polynomial_w.out",
    "special_hermite_polynomial_h",
    "special_hermite_polynomial_h.out",
    "special_hermite_polynomial_he",
    "special_hermite_polynomial_he.out",
    "special_laguerre_polynomial_l",
    "special_laguerre_polynomial_l.out",
    "special_legendre_polynomial_p",
    "special_legendre_polynomial_p.out",
    "nextafter_",
    "hypot_",
    "heaviside",
    "heaviside.out",
    "heaviside_",
    "frac",
    "frac.out",
    "frac_",
    "sinc",
    "sinc.out",
    "sinc_",
    "special_entr",
    "special_entr.out",
    "isposinf",
    "isposinf.out",
    "isneginf",
    "isneginf.out",
    "signbit",
    "signbit.out",
    "addcmul",
    "addcmul_",
    "addcmul.out",
    "addcdiv",
    "addcdiv_",
    "addcdiv.out",
    "lerp.Scalar",
    "lerp_.Scalar",
    "lerp.Scalar_out",
    "lerp.Tensor",
    "lerp_.Tensor",
    "lerp.Tensor_out",
};

// frexp: x = mantissa * 2^exponent with 0.5 <= |mantissa| < 1, from x's bits: the exponent field gives the
// exponent, and the mantissa is x with its exponent field set to that of 0.5. A subnormal is scaled by 2^64
// first. Zero, inf and NaN keep x with exponent 0 (glibc's frexp). float16/bfloat16 take float32's bits (the
// mantissa has no more bits than theirs, so rounding back is exact), as the CPU computes them in float.
std::tuple<UOpPtr, UOpPtr> float_parts(const UOpPtr& x) {
  const bool wide = x->dtype == DType::Float64;
  const DType bits = wide ? DType::Int64 : DType::Int32;
  const int64_t mantissa_bits = wide ? 52 : 23, field_mask = wide ? 0x7ff : 0xff, half_field = wide ? 1022 : 126;
  auto int_const = [&](int64_t v) { return expand(reshape(const_int(bits, v), Shape(x->shape.size(), 1)), x->shape); };
  auto float_const = [&](double v) {
    return expand(reshape(const_float(x->dtype, v), Shape(x->shape.size(), 1)), x->shape);
  };
  auto field_of = [&](const UOpPtr& b) {
    return bin(Ops::AND, bin(Ops::SHR, b, int_const(mantissa_bits)), int_const(field_mask));
  };
  UOpPtr field = field_of(bitcast(x, bits)), zero = float_const(0.0);
  UOpPtr subnormal = bin(Ops::AND, bin(Ops::CMPEQ, field, int_const(0)), bin(Ops::CMPNE, x, zero));
  UOpPtr y = where(subnormal, bin(Ops::MUL, x, float_const(0x1p64)), x), ybits = bitcast(y, bits);
  UOpPtr exponent = bin(Ops::SUB, bin(Ops::SUB, field_of(ybits), int_const(half_field)),
                        where(subnormal, int_const(64), int_const(0)));
  UOpPtr cleared = bin(Ops::AND, ybits, un(Ops::BITNOT, int_const(field_mask << mantissa_bits)));
  UOpPtr mantissa = bitcast(bin(Ops::OR, cleared, int_const(half_field << mantissa_bits)), x->dtype);
  UOpPtr special = bin(Ops::OR, bin(Ops::CMPEQ, x, zero), bin(Ops::CMPEQ, field, int_const(field_mask)));
  return {where(special, x, mantissa), cast(where(special, int_const(0), exponent), DType::Int32)};
}

std::tuple<at::Tensor&, at::Tensor&> frexp_out(const at::Tensor& self, at::Tensor& mantissa, at::Tensor& exponent) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "torch.frexp() only supports floating-point dtypes");
  TORCH_CHECK(mantissa.dtype() == self.dtype(), "torch.frexp() expects mantissa to have dtype ", self.dtype(),
              " but got ", mantissa.dtype());
  TORCH_CHECK(exponent.dtype() == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              exponent.dtype());
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(mantissa)
                                .add_output(exponent)
                                .add_const_input(self)
                                .check_all_same_dtype(false)
                                .set_check_mem_overlap(true)
                                .build();
  if (self.numel() == 0) return {mantissa, exponent};
  DType dt = to_tiny_dtype(self.scalar_type());
  auto [m, e] = float_parts(cast(read(self), opmath(dt)));
  write(iter.output(0), cast(m, dt));
  write(iter.output(1), e);
  return {mantissa, exponent};
}

} // namespace

UOpPtr aten_ops::uniform_elementwise(const c10::FunctionSchema& schema, const at::Tensor& like,
                                     c10::ArrayRef<aten_ops::ElementwiseOperand> operands,
                                     c10::ArrayRef<aten_ops::ElementwiseParam> params) {
  const Op& op = *overload_of(schema).op;
  Call call{schema, {}, {}, {}, DType::Float32, DType::Float32, {}};
  call.common = to_tiny_dtype(like.scalar_type());
  call.compute = opmath(call.common);
  call.shape = to_shape(like.sizes());
  for (const aten_ops::ElementwiseParam& p : params)
    call.params.push_back(p);
  for (const aten_ops::ElementwiseOperand& o : operands) {
    if (const at::Scalar* s = std::get_if<at::Scalar>(&o)) {
      call.in.push_back(call.constant(iterator_number(*s, op, call.common, call.compute)));
      continue;
    }
    const at::Tensor& t = *std::get<const at::Tensor*>(o);
    call.tensors.borrow(t);
    call.in.push_back(operand(t, call.common, call.compute, call.shape, &op));
  }
  return cast(op.build(call), call.common);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  for (const char* name : kOverloads)
    m.impl(name,
           torch::CppFunction::makeFromBoxedFunction<&native_or_cpu<&elementwise_kernel, UnsignedPolicy::Native>>());
  // Python's arithmetic on tiny tensors, the unary ops, comparisons, maximum/minimum, where and pow most used from
  // Python, unboxed (recording cost: the boxed call took 6 of the 16 mutex locks of `y.mul_(1.5)`; the other
  // overloads of the table keep the boxed kernel)
  impl_unboxed<at::_ops::add_Tensor, at::_ops::add__Tensor, at::_ops::add_out, at::_ops::sub_Tensor,
               at::_ops::sub__Tensor, at::_ops::sub_out, at::_ops::mul_Tensor, at::_ops::mul__Tensor, at::_ops::mul_out,
               at::_ops::div_Tensor, at::_ops::div__Tensor, at::_ops::div_out, at::_ops::div_Tensor_mode,
               at::_ops::div__Tensor_mode, at::_ops::div_out_mode, at::_ops::neg, at::_ops::neg_, at::_ops::neg_out,
               at::_ops::exp, at::_ops::exp_, at::_ops::exp_out, at::_ops::log, at::_ops::log_, at::_ops::sqrt,
               at::_ops::sqrt_, at::_ops::rsqrt, at::_ops::rsqrt_, at::_ops::sigmoid, at::_ops::sigmoid_,
               at::_ops::tanh, at::_ops::tanh_, at::_ops::relu, at::_ops::relu_, at::_ops::eq_Tensor,
               at::_ops::eq_Scalar, at::_ops::ne_Tensor, at::_ops::ne_Scalar, at::_ops::lt_Tensor, at::_ops::lt_Scalar,
               at::_ops::le_Tensor, at::_ops::le_Scalar, at::_ops::gt_Tensor, at::_ops::gt_Scalar, at::_ops::ge_Tensor,
               at::_ops::ge_Scalar, at::_ops::maximum, at::_ops::minimum, at::_ops::where_self,
               at::_ops::pow_Tensor_Scalar, at::_ops::pow_Tensor_Tensor, at::_ops::pow__Scalar, at::_ops::rsub_Tensor>(
      m);
  m.impl("complex.out", TORCH_FN(complex_from_parts_out<false>));
  m.impl("polar.out", TORCH_FN(complex_from_parts_out<true>));
  m.impl("frexp.Tensor_out", TORCH_FN(frexp_out));
  m.impl("mvlgamma.out", TORCH_FN(at::native::mvlgamma_out)); // torch's own: mvlgamma (tiny ops) copied into out
}

} // namespace tiny
