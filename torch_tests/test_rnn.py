"""Recurrent layers on tiny against PyTorch CPU: nn.LSTM, nn.GRU and nn.RNN (layers, directions,
batch_first, proj_size, with and without an initial state, packed sequences), the cells, the fused cell
ops torch calls for them, and training steps of an LSTM model. Each compares outputs, final states and
the gradients of the input, the initial state and every parameter, and runs with the CPU fallback
disabled (TINY_FALLBACK=0): every op they reach has a tiny kernel."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same, rand, tol
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence, pad_sequence

# A sequence of a few steps sums several float32 products per gate: the CPU's matmul and tiny's sum in
# different orders.
TOL = {"rtol": 1e-4, "atol": 1e-5}
SEQ, BATCH, FEATURES, HIDDEN = 5, 3, 4, 6


def seeded(make, seed=0):
    torch.manual_seed(seed)
    return make()


def run(module, inputs, device, loss_of=None):
    """The module's outputs on device, and the gradients of every float input and parameter after
    backward of a weighted sum of the outputs (weights fixed by a seed, so every output counts)."""
    module = copy.deepcopy(module).to(device)
    leaves = [x.detach().to(device).requires_grad_(x.is_floating_point()) if x is not None else None for x in inputs]
    out = module(*leaves)
    tensors = [t for t in _flat(out) if t.is_floating_point()]
    if loss_of is not None:
        tensors = loss_of(out)
    g = torch.Generator().manual_seed(1)
    loss = sum((t * torch.randn(t.shape, generator=g, dtype=t.dtype).to(device)).sum() for t in tensors)
    loss.backward()
    grads = [x.grad for x in leaves if x is not None and x.requires_grad]
    grads += [p.grad for p in module.parameters()]
    return out, grads, [n for n, _ in module.named_parameters()]


def _flat(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _flat(v)


def check_module(make, *inputs, dtype=torch.float32, loss_of=None, tolerance=TOL):
    module = seeded(make).to(dtype)
    inputs = [x.to(dtype) if x is not None and x.is_floating_point() else x for x in inputs]
    expected, expected_grads, names = run(module, inputs, "cpu", loss_of)
    actual, actual_grads, _ = run(module, inputs, DEVICE, loss_of)
    assert_same(actual, expected, path="output", **tolerance)
    assert len(actual_grads) == len(expected_grads)
    labels = [f"input {i}" for i in range(len(actual_grads) - len(names))] + names
    for label, a, e in zip(labels, actual_grads, expected_grads, strict=True):
        assert (a is None) == (e is None), f"gradient of {label}: tiny {a is not None}, CPU {e is not None}"
        if e is not None:
            assert_same(a, e, path=f"gradient of {label}", **tolerance)


def sequence(batch_first, seed=0, features=FEATURES):
    return rand(BATCH, SEQ, features, seed=seed) if batch_first else rand(SEQ, BATCH, features, seed=seed)


def state(layers, bidirectional, size=HIDDEN, seed=1):
    return rand(layers * (2 if bidirectional else 1), BATCH, size, seed=seed)


LSTM_CASES = [
    # (num_layers, bidirectional, batch_first, bias, proj_size)
    (1, False, False, True, 0),
    (2, False, False, True, 0),
    (1, True, False, True, 0),
    (2, True, True, True, 0),
    (1, False, True, False, 0),
    (2, True, False, False, 0),
    (1, False, False, True, 3),
    (2, True, True, True, 3),
]


def case_id(case):
    layers, bidirectional, batch_first, bias, *proj = case
    parts = [f"{layers}layer", "bi" if bidirectional else "uni"]
    parts += ["batch_first"] if batch_first else []
    parts += [] if bias else ["nobias"]
    parts += [f"proj{proj[0]}"] if proj and proj[0] else []
    return "-".join(parts)


@pytest.mark.parametrize("with_state", [False, True], ids=["no_h0", "h0"])
@pytest.mark.parametrize("case", LSTM_CASES, ids=case_id)
def test_lstm_outputs_states_and_gradients_match_cpu(native, case, with_state):
    layers, bidirectional, batch_first, bias, proj = case
    make = lambda: nn.LSTM(  # noqa: E731
        FEATURES, HIDDEN, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional, proj_size=proj
    )
    x = sequence(batch_first)
    if not with_state:
        check_module(make, x)
        return
    h0 = state(layers, bidirectional, size=proj or HIDDEN, seed=1)
    c0 = state(layers, bidirectional, seed=2)
    check_module(lambda: _WithState(make()), x, h0, c0)


GRU_CASES = [
    # (num_layers, bidirectional, batch_first, bias)
    (1, False, False, True),
    (2, False, True, True),
    (1, True, False, True),
    (2, True, True, True),
    (2, True, False, False),
]


@pytest.mark.parametrize("with_state", [False, True], ids=["no_h0", "h0"])
@pytest.mark.parametrize("case", GRU_CASES, ids=case_id)
def test_gru_outputs_states_and_gradients_match_cpu(native, case, with_state):
    layers, bidirectional, batch_first, bias = case
    make = lambda: nn.GRU(  # noqa: E731
        FEATURES, HIDDEN, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional
    )
    x = sequence(batch_first)
    check_module(make, x, *([state(layers, bidirectional)] if with_state else []))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("case", [(1, False, False, True), (2, True, True, False)], ids=case_id)
def test_rnn_outputs_states_and_gradients_match_cpu(native, case, nonlinearity):
    layers, bidirectional, batch_first, bias = case
    make = lambda: nn.RNN(  # noqa: E731
        FEATURES, HIDDEN, layers, nonlinearity, bias=bias, batch_first=batch_first, bidirectional=bidirectional
    )
    check_module(make, sequence(batch_first), state(layers, bidirectional))


@pytest.mark.parametrize("dtype", [torch.float64], ids=["float64"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_float64_recurrent_layers_match_cpu(native, kind, dtype):
    layer = nn.LSTM if kind == "lstm" else nn.GRU
    check_module(lambda: layer(FEATURES, HIDDEN, 2, bidirectional=True), sequence(False), dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_half_precision_recurrent_layers_match_cpu(native, kind, dtype):
    """float16/bfloat16 cells compute in float32 and round once; the CPU rounds its gates to the half type."""
    layer = nn.LSTM if kind == "lstm" else nn.GRU
    check_module(lambda: layer(FEATURES, HIDDEN, 2), sequence(False), dtype=dtype, tolerance=tol(dtype))


class _WithState(nn.Module):
    """An LSTM called with (h0, c0) as separate module inputs, so both get gradients."""

    def __init__(self, lstm):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, h0, c0):
        return self.lstm(x, (h0, c0))


class _Cell(nn.Module):
    """A cell unrolled over a sequence, as a user writes a loop of LSTMCell/GRUCell/RNNCell steps."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, *state):
        outputs = []
        for step in x:
            if isinstance(self.cell, nn.LSTMCell):
                state = self.cell(step, state if state else None)
                outputs.append(state[0])
            else:
                state = (self.cell(step, state[0] if state else None),)
                outputs.append(state[0])
        return torch.stack(outputs), state


CELLS = {
    "lstm": lambda bias: nn.LSTMCell(FEATURES, HIDDEN, bias=bias),
    "gru": lambda bias: nn.GRUCell(FEATURES, HIDDEN, bias=bias),
    "rnn_tanh": lambda bias: nn.RNNCell(FEATURES, HIDDEN, bias=bias),
    "rnn_relu": lambda bias: nn.RNNCell(FEATURES, HIDDEN, bias=bias, nonlinearity="relu"),
}


@pytest.mark.parametrize("with_state", [False, True], ids=["no_hx", "hx"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("kind", list(CELLS))
def test_cells_unrolled_over_a_sequence_match_cpu(native, kind, bias, with_state):
    x = sequence(False)
    states = []
    if with_state:
        states = [rand(BATCH, HIDDEN, seed=1)] + ([rand(BATCH, HIDDEN, seed=2)] if kind == "lstm" else [])
    check_module(lambda: _Cell(CELLS[kind](bias)), x, *states)


def test_cell_on_an_unbatched_input_matches_cpu(native):
    check_module(lambda: nn.LSTMCell(FEATURES, HIDDEN), rand(FEATURES))
    check_module(lambda: nn.GRUCell(FEATURES, HIDDEN), rand(FEATURES), rand(HIDDEN, seed=1))


class _LstmStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(FEATURES, HIDDEN)

    def forward(self, x, h, c):
        return self.cell(x, (h, c))


@pytest.mark.parametrize("used", ["h", "c"])
def test_lstm_cell_gradient_through_one_state_only_matches_cpu(native, used):
    """A loss of h (or c) alone: the fused backward gets no gradient for the other state."""
    index = 0 if used == "h" else 1
    x, h, c = rand(BATCH, FEATURES), rand(BATCH, HIDDEN, seed=1), rand(BATCH, HIDDEN, seed=2)
    check_module(_LstmStep, x, h, c, loss_of=lambda out: [out[index]])


def test_lstm_final_cell_state_alone_gives_gradients_as_cpu(native):
    check_module(lambda: nn.LSTM(FEATURES, HIDDEN, 2), sequence(False), loss_of=lambda out: [out[1][1]])


class _Packed(nn.Module):
    """pack_padded_sequence -> recurrent layer -> pad_packed_sequence, as a user handles a padded batch."""

    def __init__(self, layer, lengths, enforce_sorted, batch_first):
        super().__init__()
        self.layer, self.lengths = layer, lengths
        self.enforce_sorted, self.batch_first = enforce_sorted, batch_first

    def forward(self, x):
        packed = pack_padded_sequence(x, self.lengths, self.batch_first, self.enforce_sorted)
        out, state = self.layer(packed)
        padded, _ = pad_packed_sequence(out, self.batch_first, total_length=SEQ)
        return padded, state, packed.data, out.data


@pytest.mark.parametrize("batch_first", [False, True], ids=["seq_first", "batch_first"])
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_packed_sequences_match_cpu(native, kind, enforce_sorted, batch_first):
    lengths = torch.tensor([5, 3, 2]) if enforce_sorted else torch.tensor([2, 5, 3])
    layer = nn.LSTM if kind == "lstm" else nn.GRU
    make = lambda: _Packed(  # noqa: E731
        layer(FEATURES, HIDDEN, 2, bidirectional=True, batch_first=batch_first), lengths, enforce_sorted, batch_first
    )
    check_module(make, sequence(batch_first))


def test_packed_sequence_keeps_cpu_lengths_and_indices(native):
    x = sequence(False).to(DEVICE)
    packed = pack_padded_sequence(x, torch.tensor([2, 5, 3]), enforce_sorted=False)
    expected = pack_padded_sequence(sequence(False), torch.tensor([2, 5, 3]), enforce_sorted=False)
    assert packed.batch_sizes.device.type == "cpu"
    assert torch.equal(packed.batch_sizes, expected.batch_sizes)
    assert packed.sorted_indices.device.type == DEVICE
    assert torch.equal(packed.sorted_indices.cpu(), expected.sorted_indices)
    assert torch.equal(packed.unsorted_indices.cpu(), expected.unsorted_indices)
    assert_same(packed.data, expected.data)
    padded, lengths = pad_packed_sequence(packed)
    assert lengths.device.type == "cpu" and torch.equal(lengths, torch.tensor([2, 5, 3]))
    assert_same(padded, pad_packed_sequence(expected)[0])


class _Sequences(nn.Module):
    """Sequences of different lengths: pad_sequence, and pack_sequence into a GRU."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(FEATURES, HIDDEN)

    def forward(self, a, b, c):
        out, h = self.gru(pack_sequence([a, b, c], enforce_sorted=False))
        return pad_sequence([a, b, c], padding_value=-1.0), pad_packed_sequence(out)[0], h


def test_pack_sequence_and_pad_sequence_match_cpu(native):
    check_module(_Sequences, rand(2, FEATURES), rand(5, FEATURES, seed=1), rand(3, FEATURES, seed=2))


def test_lstm_dropout_between_layers_runs_natively(native):
    """Dropout draws different numbers on tiny: in training the outputs differ from eval mode's, which
    match the CPU's, and the gradients have the CPU's shapes."""
    torch.manual_seed(0)
    lstm = nn.LSTM(FEATURES, HIDDEN, 2, dropout=0.5)
    check_module(lambda: copy.deepcopy(lstm).eval(), sequence(False))
    tiny_lstm = copy.deepcopy(lstm).to(DEVICE)
    x = sequence(False).to(DEVICE).requires_grad_()
    out, _ = tiny_lstm(x)
    out.sum().backward()
    eval_out, _ = copy.deepcopy(lstm).eval()(sequence(False))
    assert not torch.allclose(out.detach().cpu(), eval_out)
    assert x.grad.shape == x.shape and all(p.grad.shape == p.shape for p in tiny_lstm.parameters())
    assert torch.isfinite(x.grad.cpu()).all()


# ---------------------------------------------------------------------------------------------
# The fused cell ops themselves. torch's CPU has no kernel for them; its references are the cell
# functions (lstm_cell, gru_cell: the same gate math from the weights) and the composite backward ops
# autograd uses when it records a graph of the backward (_thnn_differentiable_*_cell_backward).


def lstm_operands(bias):
    x, hx, cx = rand(BATCH, FEATURES), rand(BATCH, HIDDEN, seed=1), rand(BATCH, HIDDEN, seed=2)
    w_ih, w_hh = rand(4 * HIDDEN, FEATURES, seed=3), rand(4 * HIDDEN, HIDDEN, seed=4)
    b_ih, b_hh = (rand(4 * HIDDEN, seed=5), rand(4 * HIDDEN, seed=6)) if bias else (None, None)
    return x, hx, cx, w_ih, w_hh, b_ih, b_hh


def tiny(t):
    return None if t is None else t.to(DEVICE)


@pytest.mark.parametrize("grads", ["hy_and_cy", "hy_only", "cy_only"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_fused_lstm_cell_and_its_backward_match_cpu(native, bias, grads):
    x, hx, cx, w_ih, w_hh, b_ih, b_hh = lstm_operands(bias)
    input_gates, hidden_gates = x @ w_ih.T, hx @ w_hh.T
    hy, cy, workspace = torch.ops.aten._thnn_fused_lstm_cell(
        tiny(input_gates), tiny(hidden_gates), tiny(cx), tiny(b_ih), tiny(b_hh)
    )
    expected_hy, expected_cy = torch.lstm_cell(x, (hx, cx), w_ih, w_hh, b_ih, b_hh)
    assert_same((hy, cy), (expected_hy, expected_cy), **TOL)
    assert (workspace.shape, workspace.dtype) == (input_gates.shape, input_gates.dtype)

    grad_hy = rand(BATCH, HIDDEN, seed=7) if grads != "cy_only" else None
    grad_cy = rand(BATCH, HIDDEN, seed=8) if grads != "hy_only" else None
    actual = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
        tiny(grad_hy), tiny(grad_cy), tiny(cx), cy, workspace, bias
    )
    grad_gates, _, grad_cx, grad_bias, _ = torch.ops.aten._thnn_differentiable_lstm_cell_backward(
        grad_hy, grad_cy, input_gates, hidden_gates, b_ih, b_hh, cx, expected_cy
    )
    assert_same(actual, (grad_gates, grad_cx, grad_bias if bias else None), **TOL)


def test_fused_lstm_cell_backward_without_gradients_returns_nothing(native):
    x, hx, cx, w_ih, w_hh, b_ih, b_hh = lstm_operands(True)
    _, cy, workspace = torch.ops.aten._thnn_fused_lstm_cell(tiny(x @ w_ih.T), tiny(hx @ w_hh.T), tiny(cx))
    assert torch.ops.aten._thnn_fused_lstm_cell_backward_impl(None, None, tiny(cx), cy, workspace, True) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_fused_gru_cell_and_its_backward_match_cpu(native, bias):
    x, hx = rand(BATCH, FEATURES), rand(BATCH, HIDDEN, seed=1)
    w_ih, w_hh = rand(3 * HIDDEN, FEATURES, seed=3), rand(3 * HIDDEN, HIDDEN, seed=4)
    b_ih, b_hh = (rand(3 * HIDDEN, seed=5), rand(3 * HIDDEN, seed=6)) if bias else (None, None)
    input_gates, hidden_gates = x @ w_ih.T, hx @ w_hh.T
    hy, workspace = torch.ops.aten._thnn_fused_gru_cell(
        tiny(input_gates), tiny(hidden_gates), tiny(hx), tiny(b_ih), tiny(b_hh)
    )
    assert_same(hy, torch.gru_cell(x, hx, w_ih, w_hh, b_ih, b_hh), **TOL)
    assert (workspace.shape, workspace.dtype) == ((BATCH, 5 * HIDDEN), hx.dtype)

    grad_hy = rand(BATCH, HIDDEN, seed=7)
    actual = torch.ops.aten._thnn_fused_gru_cell_backward(tiny(grad_hy), workspace, bias)
    expected = torch.ops.aten._thnn_differentiable_gru_cell_backward(grad_hy, input_gates, hidden_gates, hx, b_ih, b_hh)
    if not bias:
        expected = (*expected[:3], None, None)
    assert_same(actual, expected, **TOL)


def test_fused_cell_with_mismatched_gates_raises_at_the_call(native):
    gates, cx = torch.zeros(BATCH, 4 * HIDDEN, device=DEVICE), torch.zeros(BATCH, HIDDEN, device=DEVICE)
    with pytest.raises(RuntimeError, match="hidden_gates"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates[:, :-1], cx)
    with pytest.raises(RuntimeError, match="prev_hidden"):
        torch.ops.aten._thnn_fused_gru_cell(gates[:, :-6], gates[:, :-6], cx[:, :-1])


def test_lstm_gradient_of_gradient_matches_cpu(native):
    """create_graph=True: autograd records the backward with the composite cell backward op."""

    def second_order(device):
        torch.manual_seed(0)
        cell = nn.LSTMCell(FEATURES, HIDDEN).to(device)
        x = rand(BATCH, FEATURES).to(device).requires_grad_()
        h, c = cell(x)
        (gx,) = torch.autograd.grad((h * c).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        return [gx, x.grad] + [p.grad for p in cell.parameters()]

    assert_same(second_order(DEVICE), second_order("cpu"), **TOL)


# ---------------------------------------------------------------------------------------------
# Training


class SequenceClassifier(nn.Module):
    """Tokens -> embedding -> 2-layer LSTM -> the last step's output -> classes."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out[:, -1])


def train(model, device, batches):
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for tokens, labels in batches:
        loss = F.cross_entropy(model(tokens.to(device)), labels.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_lstm_model_training_steps_match_cpu(native):
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randint(0, 20, (4, 7), generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(5)]
    model = seeded(SequenceClassifier)
    cpu_losses, cpu_params = train(copy.deepcopy(model), "cpu", batches)
    tiny_losses, tiny_params = train(copy.deepcopy(model), DEVICE, batches)
    torch.testing.assert_close(tiny_losses, cpu_losses, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(tiny_params, cpu_params, rtol=1e-4, atol=1e-5)
    assert cpu_losses[-1] < cpu_losses[0]
