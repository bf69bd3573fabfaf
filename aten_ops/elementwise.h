#pragma once
// What the elementwise kernels (elementwise.cpp) give kernels that record an elementwise op tensor by tensor
// (foreach.cpp): an op's value by the elementwise table's formula, without the per-call checks.

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string_view>
#include <utility>
#include <variant>

#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

// An operand of an elementwise call: a tensor or a number.
using ElementwiseOperand = std::variant<const at::Tensor*, at::Scalar>;
// An argument that is no operand (alpha, value), by name.
using ElementwiseParam = std::pair<std::string_view, const c10::IValue*>;

// The value of `schema`'s op (an op of the elementwise table: aten::add.Tensor, aten::addcmul, aten::sqrt, ...) for
// operands in the schema's order that TensorIterator takes as they are: tiny tensors of `like`'s dtype (a real
// floating one) and shape, and real numbers. Computed in the dtype's opmath type as the op's kernel computes it,
// rounded to the dtype. The caller has made TensorIterator's checks (devices, dtypes, shapes, overlap) and the op's
// own; the op's formula reads only the operands' values and `params`.
UOpPtr uniform_elementwise(const c10::FunctionSchema& schema, const at::Tensor& like,
                           c10::ArrayRef<ElementwiseOperand> operands, c10::ArrayRef<ElementwiseParam> params = {});

} // namespace tiny::aten_ops
