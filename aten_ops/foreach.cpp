// torch's _foreach_* ops (the optimizers' default foreach steps): add, sub, mul, div, addcmul, addcdiv, lerp, sqrt
// and neg over lists of tensors. Without a kernel for the device, torch runs its slow path, one call of the per-tensor
// op through the dispatcher for each tensor (self[i].add_(other[i], alpha)), each paying the dispatch and the
// elementwise kernel's checks: a foreach Adam step over ShuffleNet's 170 parameters made ~1,200 of them.
// Here, where every tensor's call is one TensorIterator takes as it is (plain below), each tensor's value is built
// by the per-tensor op's own formula (uniform_elementwise) and written at once; any other call runs torch's slow
// path itself, whose per-tensor calls give the per-tensor op's results and errors.

#include <ATen/ATen.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <torch/library.h>

#include <array>
#include <type_traits>
#include <vector>

#include "aten_ops/elementwise.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

bool real_floating(at::ScalarType st) {
  return st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16;
}

// Whether TensorIterator takes self's call with these operands as it is: every tensor on self's tiny device, of
// its dtype (a real floating one: a real number does not promote it) and shape; an in-place self dense without
// overlapping itself and sharing no storage with another operand; a functional call's tensors contiguous (its
// result is then contiguous too).
bool plain(const at::Tensor& self, c10::ArrayRef<ElementwiseOperand> operands, bool inplace) {
  if (!self.defined() || !self.is_privateuseone() || !real_floating(self.scalar_type()) || self.is_neg()) return false;
  if (inplace ? !self.is_non_overlapping_and_dense() : !self.is_contiguous()) return false;
  for (const ElementwiseOperand& o : operands) {
    if (const at::Scalar* s = std::get_if<at::Scalar>(&o)) {
      if (s->isComplex()) return false;
      continue;
    }
    const at::Tensor& t = *std::get<const at::Tensor*>(o);
    if (&t == &self) continue;
    if (!t.defined() || !t.is_privateuseone() || t.device() != self.device() || t.scalar_type() != self.scalar_type() ||
        t.sizes() != self.sizes() || t.is_neg())
      return false;
    if (inplace ? t.storage().is_alias_of(self.storage()) : !t.is_contiguous()) return false;
  }
  return true;
}

// A per-tensor op of the elementwise table whose formula a foreach op records: its schema's name and overload.
struct PerTensorOp {
  const char* name;
  const char* overload;
};
constexpr PerTensorOp kAdd{"aten::add", "Tensor"}, kSub{"aten::sub", "Tensor"}, kMul{"aten::mul", "Tensor"},
    kDiv{"aten::div", "Tensor"}, kAddcmul{"aten::addcmul", ""}, kAddcdiv{"aten::addcdiv", ""},
    kLerpScalar{"aten::lerp", "Scalar"}, kLerpTensor{"aten::lerp", "Tensor"}, kSqrt{"aten::sqrt", ""},
    kNeg{"aten::neg", ""};

template <const PerTensorOp& Op> const c10::FunctionSchema& schema_of() {
  static const c10::FunctionSchema& schema =
      c10::Dispatcher::singleton().findSchemaOrThrow(Op.name, Op.overload).schema();
  return schema;
}

// A call's argument that is no operand (alpha, value), by name; none where name is null.
struct Named {
  const char* name = nullptr;
  at::Scalar value;
};

// Records each tensor's call of Op: operands_of(i) are its operands, named_of(i) its other argument. Returns false,
// having recorded nothing, unless every call is plain (torch's slow path must run then); a functional call's results
// are returned in `out`.
template <const PerTensorOp& Op, class OperandsOf, class NamedOf>
bool record_each(at::TensorList self, bool inplace, const OperandsOf& operands_of, const NamedOf& named_of,
                 std::vector<at::Tensor>* out = nullptr) {
  if (self.empty()) return false;
  for (size_t i = 0; i < self.size(); i++) {
    Named named = named_of(i);
    if ((named.name && named.value.isComplex()) || !plain(self[i], operands_of(i), inplace)) return false;
  }
  if (out) out->reserve(self.size());
  for (size_t i = 0; i < self.size(); i++) {
    at::Tensor result = inplace ? self[i] : empty_tiny(self[i].sizes(), self[i].scalar_type(), self[i].device());
    if (result.numel() > 0) {
      Named named = named_of(i);
      c10::IValue value(named.value);
      std::array<ElementwiseParam, 1> param{ElementwiseParam{named.name ? named.name : "", &value}};
      c10::ArrayRef<ElementwiseParam> params =
          named.name ? c10::ArrayRef<ElementwiseParam>(param) : c10::ArrayRef<ElementwiseParam>();
      write(result, uniform_elementwise(schema_of<Op>(), self[i], operands_of(i), params));
    }
    if (out) out->push_back(std::move(result));
  }
  return true;
}

Named none(size_t) { return {}; }

template <class... Lists> bool same_lengths(at::TensorList self, const Lists&... lists) {
  return ((lists.size() == self.size()) && ...);
}

// The kernels of each signature, in place (InPlace: they return nothing) and functional (the results): Op's formula
// where the lists' lengths agree (`fits`) and every call is plain, else `slow`, torch's slow kernel for the same
// overload (which raises torch's errors for lists of different lengths).
template <bool InPlace> using Returns = std::conditional_t<InPlace, void, std::vector<at::Tensor>>;
using Operands1 = std::array<ElementwiseOperand, 1>;
using Operands2 = std::array<ElementwiseOperand, 2>;
using Operands3 = std::array<ElementwiseOperand, 3>;

template <const PerTensorOp& Op, bool InPlace, class OperandsOf, class NamedOf, class Slow>
Returns<InPlace> each(at::TensorList self, bool fits, const OperandsOf& operands_of, const NamedOf& named_of,
                      const Slow& slow) {
  std::vector<at::Tensor> out;
  if (!fits || !record_each<Op>(self, InPlace, operands_of, named_of, InPlace ? nullptr : &out)) return slow();
  if constexpr (!InPlace) return out;
}

// self[i].op()
template <const PerTensorOp& Op, auto Slow, bool InPlace> Returns<InPlace> unary(at::TensorList self) {
  return each<Op, InPlace>(
      self, true, [&](size_t i) { return Operands1{&self[i]}; }, none, [&] { return Slow(self); });
}

// self[i].op(scalar)
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> scalar(at::TensorList self, const at::Scalar& s) {
  return each<Op, InPlace>(
      self, true,
      [&](size_t i) {
        return Operands2{&self[i], s};
      },
      none, [&] { return Slow(self, s); });
}

// self[i].op(scalars[i])
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> scalar_list(at::TensorList self, at::ArrayRef<at::Scalar> s) {
  return each<Op, InPlace>(
      self, s.size() == self.size(),
      [&](size_t i) {
        return Operands2{&self[i], s[i]};
      },
      none, [&] { return Slow(self, s); });
}

// self[i].op(other[i])
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> list(at::TensorList self, at::TensorList other) {
  return each<Op, InPlace>(
      self, same_lengths(self, other),
      [&](size_t i) {
        return Operands2{&self[i], &other[i]};
      },
      none, [&] { return Slow(self, other); });
}

// self[i].op(other[i], alpha=alpha)
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> list_alpha(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
  return each<Op, InPlace>(
      self, same_lengths(self, other),
      [&](size_t i) {
        return Operands2{&self[i], &other[i]};
      },
      [&](size_t) {
        return Named{"alpha", alpha};
      },
      [&] { return Slow(self, other, alpha); });
}

// self[i].op(a[i], b[i]): lerp with a list of weights
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> lists(at::TensorList self, at::TensorList a, at::TensorList b) {
  return each<Op, InPlace>(
      self, same_lengths(self, a, b),
      [&](size_t i) {
        return Operands3{&self[i], &a[i], &b[i]};
      },
      none, [&] { return Slow(self, a, b); });
}

// self[i].op(end[i], weight), and with weights[i]: lerp
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> list_scalar(at::TensorList self, at::TensorList end, const at::Scalar& w) {
  return each<Op, InPlace>(
      self, same_lengths(self, end),
      [&](size_t i) {
        return Operands3{&self[i], &end[i], w};
      },
      none, [&] { return Slow(self, end, w); });
}
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> list_scalar_list(at::TensorList self, at::TensorList end, at::ArrayRef<at::Scalar> w) {
  return each<Op, InPlace>(
      self, same_lengths(self, end) && w.size() == self.size(),
      [&](size_t i) {
        return Operands3{&self[i], &end[i], w[i]};
      },
      none, [&] { return Slow(self, end, w); });
}

// self[i].op(tensor1[i], tensor2[i], value=value), and value=scalars[i]: addcmul, addcdiv
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> pointwise(at::TensorList self, at::TensorList t1, at::TensorList t2, const at::Scalar& value) {
  return each<Op, InPlace>(
      self, same_lengths(self, t1, t2),
      [&](size_t i) {
        return Operands3{&self[i], &t1[i], &t2[i]};
      },
      [&](size_t) {
        return Named{"value", value};
      },
      [&] { return Slow(self, t1, t2, value); });
}
template <const PerTensorOp& Op, auto Slow, bool InPlace>
Returns<InPlace> pointwise_list(at::TensorList self, at::TensorList t1, at::TensorList t2,
                                at::ArrayRef<at::Scalar> values) {
  return each<Op, InPlace>(
      self, same_lengths(self, t1, t2) && values.size() == self.size(),
      [&](size_t i) {
        return Operands3{&self[i], &t1[i], &t2[i]};
      },
      [&](size_t i) {
        return Named{"value", values[i]};
      },
      [&] { return Slow(self, t1, t2, values); });
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  namespace n = at::native;
  KernelLibrary m(library);
  // tensors of any dtype reach the per-tensor kernels through the slow path, which meet uint16/32/64 as they do
  constexpr auto any = UnsignedPolicy::Native;
  m.impl("_foreach_add_.Scalar", TORCH_FN((scalar<kAdd, n::foreach_tensor_add_scalar_kernel_slow_, true>)), any);
  m.impl("_foreach_add.Scalar", TORCH_FN((scalar<kAdd, n::foreach_tensor_add_scalar_kernel_slow, false>)), any);
  m.impl("_foreach_sub_.Scalar", TORCH_FN((scalar<kSub, n::foreach_tensor_sub_scalar_kernel_slow_, true>)), any);
  m.impl("_foreach_sub.Scalar", TORCH_FN((scalar<kSub, n::foreach_tensor_sub_scalar_kernel_slow, false>)), any);
  m.impl("_foreach_mul_.Scalar", TORCH_FN((scalar<kMul, n::foreach_tensor_mul_scalar_kernel_slow_, true>)), any);
  m.impl("_foreach_mul.Scalar", TORCH_FN((scalar<kMul, n::foreach_tensor_mul_scalar_kernel_slow, false>)), any);
  m.impl("_foreach_div_.Scalar", TORCH_FN((scalar<kDiv, n::foreach_tensor_div_scalar_kernel_slow_, true>)), any);
  m.impl("_foreach_div.Scalar", TORCH_FN((scalar<kDiv, n::foreach_tensor_div_scalar_kernel_slow, false>)), any);

  m.impl("_foreach_add_.ScalarList", TORCH_FN((scalar_list<kAdd, n::foreach_tensor_add_scalarlist_kernel_slow_, true>)),
         any);
  m.impl("_foreach_add.ScalarList", TORCH_FN((scalar_list<kAdd, n::foreach_tensor_add_scalarlist_kernel_slow, false>)),
         any);
  m.impl("_foreach_sub_.ScalarList", TORCH_FN((scalar_list<kSub, n::foreach_tensor_sub_scalarlist_kernel_slow_, true>)),
         any);
  m.impl("_foreach_sub.ScalarList", TORCH_FN((scalar_list<kSub, n::foreach_tensor_sub_scalarlist_kernel_slow, false>)),
         any);
  m.impl("_foreach_mul_.ScalarList", TORCH_FN((scalar_list<kMul, n::foreach_tensor_mul_scalarlist_kernel_slow_, true>)),
         any);
  m.impl("_foreach_mul.ScalarList", TORCH_FN((scalar_list<kMul, n::foreach_tensor_mul_scalarlist_kernel_slow, false>)),
         any);
  m.impl("_foreach_div_.ScalarList", TORCH_FN((scalar_list<kDiv, n::foreach_tensor_div_scalarlist_kernel_slow_, true>)),
         any);
  m.impl("_foreach_div.ScalarList", TORCH_FN((scalar_list<kDiv, n::foreach_tensor_div_scalarlist_kernel_slow, false>)),
         any);

  m.impl("_foreach_add_.List", TORCH_FN((list_alpha<kAdd, n::foreach_tensor_add_list_kernel_slow_, true>)), any);
  m.impl("_foreach_add.List", TORCH_FN((list_alpha<kAdd, n::foreach_tensor_add_list_kernel_slow, false>)), any);
  m.impl("_foreach_sub_.List", TORCH_FN((list_alpha<kSub, n::foreach_tensor_sub_list_kernel_slow_, true>)), any);
  m.impl("_foreach_sub.List", TORCH_FN((list_alpha<kSub, n::foreach_tensor_sub_list_kernel_slow, false>)), any);
  m.impl("_foreach_mul_.List", TORCH_FN((list<kMul, n::foreach_tensor_mul_list_kernel_slow_, true>)), any);
  m.impl("_foreach_mul.List", TORCH_FN((list<kMul, n::foreach_tensor_mul_list_kernel_slow, false>)), any);
  m.impl("_foreach_div_.List", TORCH_FN((list<kDiv, n::foreach_tensor_div_list_kernel_slow_, true>)), any);
  m.impl("_foreach_div.List", TORCH_FN((list<kDiv, n::foreach_tensor_div_list_kernel_slow, false>)), any);

  m.impl("_foreach_addcmul_.Scalar", TORCH_FN((pointwise<kAddcmul, n::foreach_tensor_addcmul_scalar_slow_, true>)),
         any);
  m.impl("_foreach_addcmul.Scalar", TORCH_FN((pointwise<kAddcmul, n::foreach_tensor_addcmul_scalar_slow, false>)), any);
  m.impl("_foreach_addcdiv_.Scalar", TORCH_FN((pointwise<kAddcdiv, n::foreach_tensor_addcdiv_scalar_slow_, true>)),
         any);
  m.impl("_foreach_addcdiv.Scalar", TORCH_FN((pointwise<kAddcdiv, n::foreach_tensor_addcdiv_scalar_slow, false>)), any);
  m.impl("_foreach_addcmul_.ScalarList",
         TORCH_FN((pointwise_list<kAddcmul, n::foreach_tensor_addcmul_scalarlist_slow_, true>)), any);
  m.impl("_foreach_addcmul.ScalarList",
         TORCH_FN((pointwise_list<kAddcmul, n::foreach_tensor_addcmul_scalarlist_slow, false>)), any);
  m.impl("_foreach_addcdiv_.ScalarList",
         TORCH_FN((pointwise_list<kAddcdiv, n::foreach_tensor_addcdiv_scalarlist_slow_, true>)), any);
  m.impl("_foreach_addcdiv.ScalarList",
         TORCH_FN((pointwise_list<kAddcdiv, n::foreach_tensor_addcdiv_scalarlist_slow, false>)), any);

  m.impl("_foreach_lerp_.Scalar", TORCH_FN((list_scalar<kLerpScalar, n::foreach_tensor_lerp_list_kernel_slow_, true>)),
         any);
  m.impl("_foreach_lerp.Scalar", TORCH_FN((list_scalar<kLerpScalar, n::foreach_tensor_lerp_list_kernel_slow, false>)),
         any);
  m.impl("_foreach_lerp_.ScalarList",
         TORCH_FN((list_scalar_list<kLerpScalar, n::foreach_tensor_lerp_scalarlist_kernel_slow_, true>)), any);
  m.impl("_foreach_lerp.ScalarList",
         TORCH_FN((list_scalar_list<kLerpScalar, n::foreach_tensor_lerp_scalarlist_kernel_slow, false>)), any);
  m.impl("_foreach_lerp_.List", TORCH_FN((lists<kLerpTensor, n::foreach_tensor_ternary_lerp_slow_, true>)), any);
  m.impl("_foreach_lerp.List", TORCH_FN((lists<kLerpTensor, n::foreach_tensor_ternary_lerp_slow, false>)), any);

  m.impl("_foreach_sqrt_", TORCH_FN((unary<kSqrt, n::foreach_tensor_sqrt_slow_, true>)), any);
  m.impl("_foreach_sqrt", TORCH_FN((unary<kSqrt, n::foreach_tensor_sqrt_slow, false>)), any);
  m.impl("_foreach_neg_", TORCH_FN((unary<kNeg, n::foreach_tensor_neg_slow_, true>)), any);
  m.impl("_foreach_neg", TORCH_FN((unary<kNeg, n::foreach_tensor_neg_slow, false>)), any);
}

} // namespace tiny::aten_ops
