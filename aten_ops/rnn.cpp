// Recurrent cells: the fused LSTM and GRU gate ops torch's RNN code calls for a PrivateUse1 tensor
// (aten/src/ATen/native/RNN.cpp sends CUDA, XPU and PrivateUse1 inputs to them, and they have no CPU
// kernel the fallback could run): _thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backward ops
// _thnn_fused_lstm_cell_backward_impl and _thnn_fused_gru_cell_backward. nn.LSTM, nn.GRU, nn.LSTMCell
// and nn.GRUCell reach them; the matmuls that make the gates are the matmul family's.
//
// The math is torch's CUDA kernels' (aten/src/ATen/native/cuda/RNN.cu), one elementwise expression
// per output over the gate columns, so a cell's outputs fuse with the gate sums:
// - LSTM, gates i, f, g, o: i, f, o = sigmoid(input_gates + hidden_gates + input_bias + hidden_bias),
//   g = tanh(...); cy = f * cx + i * g; hy = o * tanh(cy). The workspace (batch, 4 * hidden) holds the
//   activated gates i, f, g, o for the backward op, which also reads cx and cy.
// - GRU, gates r, z, n: r, z = sigmoid(input + hidden + biases), n = tanh(input_n + input_bias_n +
//   r * (hidden_n + hidden_bias_n)); hy = n + z * (hx - n). The workspace (batch, 5 * hidden) holds r, z,
//   n, hx and hidden_n + hidden_bias_n.
// The biases are both given or both absent. Backward ops return the gradient of the gates (one tensor
// for both gate inputs of an LSTM, whose autograd formula duplicates it), of cx or hx, and, with
// has_bias, the gate gradients summed over the batch. An LSTM backward without grad_hy or grad_cy
// treats the missing one as zeros; without both it returns undefined tensors, as torch does.
// float16/bfloat16 compute in float32 and round each output once (torch's accscalar_t).

#include <ATen/ATen.h>
#include <ATen/TensorUtils.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using at::Tensor;
using OptionalTensor = std::optional<Tensor>;

const Tensor& value_or_undefined(const OptionalTensor& t) {
  static const Tensor undefined;
  return t.has_value() ? *t : undefined;
}

// The gate columns of a (batch, k * hidden) value.
struct Gates {
  UOpPtr value;
  int64_t hidden;

  UOpPtr operator[](int64_t k) const { return shrink(value, {{0, value->shape[0]}, {k * hidden, (k + 1) * hidden}}); }
};

// Values of one batch placed side by side along the columns: each padded to the whole width (a masked
// view) and selected by a where on its columns, so a concatenation is index math, not a copy.
UOpPtr columns(const std::vector<UOpPtr>& parts) {
  int64_t width = 0;
  for (const UOpPtr& p : parts)
    width += p->shape[1];
  UOpPtr out;
  int64_t at = 0;
  for (const UOpPtr& p : parts) {
    const int64_t w = p->shape[1];
    const std::vector<std::pair<int64_t, int64_t>> pads{{0, 0}, {at, width - at - w}};
    UOpPtr placed = pad(p, pads);
    out = out ? where(pad(fixed(DType::Bool, 1, p->shape), pads), placed, out) : placed;
    at += w;
  }
  return out;
}

UOpPtr sigmoid(const UOpPtr& x) { return alu(Ops::RECIP, add(like(x, 1), exp(alu(Ops::NEG, x)))); }
UOpPtr tanh(const UOpPtr& x) { return alu(Ops::TANH, x); }
UOpPtr one_minus(const UOpPtr& x) { return sub(like(x, 1), x); }

// float16/bfloat16 compute in float32, as torch's kernels do in their accumulate type.
DType compute_dtype(at::ScalarType st) {
  return st == at::kHalf || st == at::kBFloat16 ? DType::Float32 : to_tiny_dtype(st);
}

void check_operand(const Tensor& t, at::ScalarType st, const char* op) {
  TORCH_CHECK(t.is_privateuseone(), "Expected all tensors to be on the same device, but found at least two devices, ",
              t.device(), " and tiny!");
  TORCH_CHECK(t.scalar_type() == st, op, ": expected scalar type ", st, " but found ", t.scalar_type());
}

void check_floating(at::ScalarType st, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st), "\"", op, "\" not implemented for '", c10::toString(st), "'");
}

// The checks of torch's CUDA kernels: 2-d gates of equal sizes, 1-d biases of the gates' width, and
// batch * hidden elements of the previous state (factor: 4 gates for an LSTM, 3 for a GRU).
void check_cell(const char* op, const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& input_bias,
                const Tensor& hidden_bias, int64_t factor, const Tensor& prev) {
  const at::TensorArg ig{input_gates, "input_gates", 1}, hg{hidden_gates, "hidden_gates", 2},
      ib{input_bias, "input_bias", 3}, hb{hidden_bias, "hidden_bias", 4}, px{prev, "prev_hidden", 5};
  at::checkDim(op, ig, 2);
  at::checkSameSize(op, ig, hg);
  const int64_t gates_size = input_gates.size(1);
  if (input_bias.defined()) {
    at::checkDim(op, ib, 1);
    at::checkNumel(op, ib, gates_size);
    at::checkSameSize(op, ib, hb);
  }
  at::checkDim(op, px, 2);
  at::checkNumel(op, px, input_gates.size(0) * gates_size / factor);
  const at::ScalarType st = input_gates.scalar_type();
  check_floating(st, op);
  for (const Tensor* t : {&input_gates, &hidden_gates, &input_bias, &hidden_bias, &prev})
    if (t->defined()) check_operand(*t, st, op);
}

// A (batch, width) operand in the compute dtype; a previous state may be any 2-d shape of that many
// elements (torch's kernels index it linearly).
UOpPtr rows(const Tensor& t, DType dt, int64_t batch, int64_t width) {
  return reshape(cast(read(t), dt), {batch, width});
}

// The sum of the gate inputs and the biases (broadcast over the batch), in torch's order.
UOpPtr gate_sum(const UOpPtr& input, const UOpPtr& hidden, const Tensor& input_bias, const Tensor& hidden_bias,
                DType dt) {
  UOpPtr s = add(input, hidden);
  if (!input_bias.defined()) return s;
  for (const Tensor* b : {&input_bias, &hidden_bias})
    s = add(s, expand(reshape(cast(read(*b), dt), {1, b->numel()}), s->shape));
  return s;
}

// A new tiny tensor of `like`'s dtype and device holding `value` (reshaped to `sizes`).
Tensor result(const UOpPtr& value, c10::IntArrayRef sizes, const Tensor& like) {
  Tensor out = empty_tiny(sizes, like.scalar_type(), like.device());
  if (out.numel() > 0) write(out, reshape(cast(value, to_tiny_dtype(like.scalar_type())), to_shape(sizes)));
  return out;
}

// The gate gradients summed over the batch (a bias gradient), as torch sums the rounded gate gradients.
Tensor batch_sum(const UOpPtr& grad, DType dt, const Tensor& like) {
  const DType rounded = to_tiny_dtype(like.scalar_type());
  return result(sum_keep(cast(cast(grad, rounded), dt), {0}), {grad->shape[1]}, like);
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                                   const Tensor& cx, const OptionalTensor& input_bias_opt,
                                                   const OptionalTensor& hidden_bias_opt) {
  const Tensor& input_bias = value_or_undefined(input_bias_opt);
  const Tensor& hidden_bias = value_or_undefined(hidden_bias_opt);
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4, cx);
  const DType dt = compute_dtype(input_gates.scalar_type());
  const int64_t batch = input_gates.size(0), hidden = input_gates.size(1) / 4;
  const Gates g{gate_sum(cast(read(input_gates), dt), cast(read(hidden_gates), dt), input_bias, hidden_bias, dt),
                hidden};
  const UOpPtr i = sigmoid(g[0]), f = sigmoid(g[1]), c = tanh(g[2]), o = sigmoid(g[3]);
  const UOpPtr cy = add(mul(f, rows(cx, dt, batch, hidden)), mul(i, c));
  const UOpPtr hy = mul(o, tanh(cy));
  return {result(hy, cx.sizes(), input_gates), result(cy, cx.sizes(), input_gates),
          result(columns({i, f, c, o}), input_gates.sizes(), input_gates)};
}

std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward(const OptionalTensor& grad_hy_opt,
                                                            const OptionalTensor& grad_cy_opt, const Tensor& cx,
                                                            const Tensor& cy, const Tensor& workspace, bool has_bias) {
  const Tensor& grad_hy = value_or_undefined(grad_hy_opt);
  const Tensor& grad_cy = value_or_undefined(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) return {};
  const char* op = "fused_lstm_cell_backward";
  const at::TensorArg ghy{grad_hy, "grad_hy", 1}, gcy{grad_cy, "grad_cy", 2}, cxa{cx, "cx", 3}, cya{cy, "cy", 4},
      ws{workspace, "workspace", 5};
  const at::TensorArg& defined_grad = grad_hy.defined() ? ghy : gcy;
  at::checkDim(op, defined_grad, 2);
  const c10::IntArrayRef sizes = defined_grad->sizes();
  if (grad_hy.defined()) at::checkSize(op, ghy, sizes);
  if (grad_cy.defined()) at::checkSize(op, gcy, sizes);
  at::checkSize(op, cxa, sizes);
  at::checkSize(op, cya, sizes);
  at::checkDim(op, ws, 2);
  at::checkNumel(op, ws, sizes[0] * sizes[1] * 4);
  const at::ScalarType st = workspace.scalar_type();
  check_floating(st, op);
  for (const Tensor* t : {&grad_hy, &grad_cy, &cx, &cy, &workspace})
    if (t->defined()) check_operand(*t, st, op);

  const DType dt = compute_dtype(st);
  const int64_t batch = sizes[0], hidden = sizes[1];
  const Gates w{rows(workspace, dt, batch, 4 * hidden), hidden};
  const UOpPtr i = w[0], f = w[1], c = w[2], o = w[3];
  const UOpPtr tanh_cy = tanh(cast(read(cy), dt));
  // d(cy): through hy = o * tanh(cy), plus grad_cy.
  UOpPtr grad_c;
  UOpPtr grad_o = like(o, 0);
  if (grad_hy.defined()) {
    const UOpPtr go = cast(read(grad_hy), dt);
    grad_o = mul(go, tanh_cy);
    grad_c = mul(mul(go, o), one_minus(mul(tanh_cy, tanh_cy)));
  }
  if (grad_cy.defined()) {
    const UOpPtr gc = cast(read(grad_cy), dt);
    grad_c = grad_c ? add(grad_c, gc) : gc;
  }
  const UOpPtr grad_i = mul(mul(mul(grad_c, c), one_minus(i)), i);
  const UOpPtr grad_f = mul(mul(mul(grad_c, cast(read(cx), dt)), one_minus(f)), f);
  const UOpPtr grad_g = mul(mul(grad_c, i), one_minus(mul(c, c)));
  const UOpPtr grad_gates = columns({grad_i, grad_f, grad_g, mul(mul(grad_o, one_minus(o)), o)});
  return {result(grad_gates, workspace.sizes(), workspace), result(mul(grad_c, f), cx.sizes(), workspace),
          has_bias ? batch_sum(grad_gates, dt, workspace) : Tensor()};
}

constexpr int64_t kGruWorkspaceGates = 5;

std::tuple<Tensor, Tensor> fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                          const OptionalTensor& input_bias_opt, const OptionalTensor& hidden_bias_opt) {
  const Tensor& input_bias = value_or_undefined(input_bias_opt);
  const Tensor& hidden_bias = value_or_undefined(hidden_bias_opt);
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx);
  const DType dt = compute_dtype(input_gates.scalar_type());
  const int64_t batch = input_gates.size(0), hidden = input_gates.size(1) / 3;
  const Gates in{cast(read(input_gates), dt), hidden}, hid{cast(read(hidden_gates), dt), hidden};
  // r and z sum all four terms; n adds the input bias to the input part and the hidden bias to the
  // hidden part, which r gates.
  const auto bias = [&](const Tensor& b, int64_t k) {
    return expand(reshape(shrink(cast(read(b), dt), {{k * hidden, (k + 1) * hidden}}), {1, hidden}), {batch, hidden});
  };
  const auto gate = [&](int64_t k) {
    UOpPtr s = add(in[k], hid[k]);
    return input_bias.defined() ? add(add(s, bias(input_bias, k)), bias(hidden_bias, k)) : s;
  };
  const UOpPtr r = sigmoid(gate(0)), z = sigmoid(gate(1));
  const UOpPtr in_n = input_bias.defined() ? add(in[2], bias(input_bias, 2)) : in[2];
  const UOpPtr hid_n = input_bias.defined() ? add(hid[2], bias(hidden_bias, 2)) : hid[2];
  const UOpPtr n = tanh(add(in_n, mul(r, hid_n)));
  const UOpPtr h = rows(hx, dt, batch, hidden);
  const UOpPtr hy = add(n, mul(z, sub(h, n)));
  return {result(hy, hx.sizes(), input_gates),
          result(columns({r, z, n, h, hid_n}), {batch, hidden * kGruWorkspaceGates}, input_gates)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward(const Tensor& grad_hy,
                                                                           const Tensor& workspace, bool has_bias) {
  const char* op = "fused_gru_cell_backward";
  const at::TensorArg ghy{grad_hy, "grad_hy", 1}, ws{workspace, "workspace", 2};
  at::checkDim(op, ghy, 2);
  at::checkSize(op, ws, {grad_hy.size(0), grad_hy.size(1) * kGruWorkspaceGates});
  const at::ScalarType st = grad_hy.scalar_type();
  check_floating(st, op);
  check_operand(grad_hy, st, op);
  check_operand(workspace, st, op);

  const DType dt = compute_dtype(st);
  const int64_t batch = grad_hy.size(0), hidden = grad_hy.size(1);
  const Gates w{cast(read(workspace), dt), hidden};
  const UOpPtr r = w[0], z = w[1], n = w[2], h = w[3], hid_n = w[4];
  const UOpPtr go = cast(read(grad_hy), dt);
  const UOpPtr grad_z = mul(mul(mul(go, sub(h, n)), one_minus(z)), z);
  const UOpPtr grad_in_n = mul(mul(go, one_minus(z)), one_minus(mul(n, n)));
  const UOpPtr grad_r = mul(mul(mul(grad_in_n, hid_n), one_minus(r)), r);
  const UOpPtr grad_input_gates = columns({grad_r, grad_z, grad_in_n});
  const UOpPtr grad_hidden_gates = columns({grad_r, grad_z, mul(grad_in_n, r)});
  const std::vector<int64_t> gate_sizes{batch, 3 * hidden};
  Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = batch_sum(grad_input_gates, dt, workspace);
    grad_hidden_bias = batch_sum(grad_hidden_gates, dt, workspace);
  }
  return {result(grad_input_gates, gate_sizes, workspace), result(grad_hidden_gates, gate_sizes, workspace),
          result(mul(go, z), grad_hy.sizes(), workspace), grad_input_bias, grad_hidden_bias};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

} // namespace tiny::aten_ops
