"""Normalization, losses and activations on tiny, forward and backward, against PyTorch CPU.

Gradients are compared by running the same function on both devices with requires_grad inputs and
the same upstream gradient, then comparing outputs and every input's .grad.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import CPU_LOWERING, check, check_devices, counting, rand

A = torch.ops.aten


def _seeded(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def run_with_grads(fn, *leaves):
    """fn(*leaves) and the leaves' gradients for a fixed upstream gradient, as fn(device) for
    check_devices. Floating leaves require grad; fn may view them (transpose, slice) first."""

    def run(device):
        xs = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in leaves]
        out = fn(*xs)
        outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
        diff = [o for o in outs if o.requires_grad]
        ups = [_seeded(o.shape, 100 + i, o.dtype).to(device) for i, o in enumerate(diff)]
        torch.autograd.backward(diff, ups)
        return [o.detach() for o in outs], [x.grad for x in xs if x.requires_grad]

    return run


def check_grads(fn, *leaves, rtol=None, atol=None, allow_fallback=False):
    check_devices(run_with_grads(fn, *leaves), rtol=rtol, atol=atol, allow_fallback=allow_fallback)


REDUCED = (torch.float16, torch.bfloat16)


def tol(dtype):
    return {"rtol": 2e-2, "atol": 2e-2} if dtype in REDUCED else {"rtol": 1e-5, "atol": 1e-5}


# ---------------------------------------------------------------------------------------------
# Activations

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": lambda x: F.elu(x, 0.7),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 1.3),
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.8),
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=1.5),
    "logsigmoid": F.logsigmoid,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "threshold": lambda x: F.threshold(x, 0.1, -2.0),
}


def activation_input(dtype=torch.float32):
    # values on both sides of every kink (+-3, 0, the thresholds above), none exactly on one
    return (_seeded((6, 7), 0) * 3).to(dtype)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_forward_and_gradient_match_cpu(name):
    check_grads(ACTIVATIONS[name], activation_input())


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_gradients_exactly_on_their_kinks_match_cpu(name):
    # where the two one-sided slopes differ, the CPU kernel picks one by its own comparisons (hardswish: 0 at -3, the
    # gradient itself at 3; tiny gave -g/2 and 3g/2 there, found by shapes.py in bfloat16, which holds -3 exactly)
    kinks = torch.tensor([-3.0, 3.0, 0.0, -0.5, 0.8, 0.1, 1.5 / 2, 6.0, -6.0, 1.0, -1.0, -0.0])
    x = torch.cat([kinks, kinks.nextafter(torch.tensor(10.0)), kinks.nextafter(torch.tensor(-10.0))])
    for dtype in (torch.float32, torch.bfloat16):
        check_grads(ACTIVATIONS[name], x.to(dtype), **tol(dtype))


@pytest.mark.parametrize("name", ["gelu", "hardswish", "elu"])
def test_activation_on_a_transposed_input(name):
    check_grads(lambda x: ACTIVATIONS[name](x.t()), activation_input())


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("name", ["gelu", "mish", "softplus"])
def test_activation_in_reduced_precision(name, dtype):
    check_grads(ACTIVATIONS[name], activation_input(dtype), **tol(dtype))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.leaky_relu(x, 0.1, inplace=True),
        lambda x: F.elu(x, inplace=True),
        lambda x: F.hardtanh(x, -1.0, 2.0, inplace=True),
        lambda x: F.silu(x, inplace=True),
        lambda x: F.hardswish(x, inplace=True),
        lambda x: F.hardsigmoid(x, inplace=True),
        lambda x: F.mish(x, inplace=True),
        lambda x: F.threshold(x, 0.5, 1.5, inplace=True),
        lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    ],
    ids=["leaky_relu", "elu", "hardtanh", "silu", "hardswish", "hardsigmoid", "mish", "threshold", "gelu"],
)
def test_inplace_activation_writes_its_input(fn):
    check(fn, activation_input())
    # through autograd: the in-place op on a non-leaf, backward from its result
    check_grads(lambda x: fn(x * 1.0), activation_input())


def test_activation_out_forms_match_cpu():
    x, out = activation_input(), torch.empty(6, 7)
    check(lambda x, o: torch._C._nn.gelu(x, out=o), x, out)
    check(lambda x, o: torch._C._nn.softplus(x, 2.0, 3.0, out=o), x, out)
    check(lambda x, o: torch._C._nn.hardtanh(x, -1.0, 1.0, out=o), x, torch.empty(0))
    g = _seeded((6, 7), 1)
    check(lambda g, x, o: A.gelu_backward.grad_input(g, x, approximate="none", grad_input=o), g, x, out)
    check(lambda g, x, o: A.threshold_backward.grad_input(g, x, 0.0, grad_input=o), g, x, out)


def test_activation_backward_ops_broadcast_and_promote_like_cpu():
    x, g = activation_input(), _seeded((7,), 2, torch.float64)
    check(A.silu_backward, g.float(), x)
    check(A.tanh_backward, g, x)
    check(lambda g, x: A.threshold_backward(g, x, 0.5), g, x)
    check(lambda g, x: A.hardtanh_backward(g, x, -1.0, 1.0), g, x)


def test_activation_integer_inputs_behave_like_cpu():
    i = torch.tensor([-3, -1, 0, 2, 5])
    check(lambda x: F.hardtanh(x, -1.5, 2.5), i)
    check(lambda x: F.threshold(x, 1, 7), i)
    check(lambda x: A.threshold_backward(x, x, 0), i)
    for fn in (F.gelu, F.silu, F.leaky_relu, F.elu, F.hardswish, F.hardsigmoid, F.softplus, F.mish, F.logsigmoid):
        check(fn, i)  # CPU raises NotImplementedError
    check(lambda x: F.hardtanh(x), torch.tensor([True, False]))
    check(lambda x: F.hardtanh(x, -1.0, 1.0), torch.tensor([1, 2], dtype=torch.uint8))


def test_activation_errors_match_cpu():
    x = activation_input()
    check(lambda x: F.gelu(x, approximate="exact"), x)
    check(lambda g, x: A.leaky_relu_backward(g, x, -0.1, True), x, x)
    check(lambda g, x: A.elu_backward(g, -1.0, 1.0, 1.0, True, x), x, x)


def test_log_sigmoid_forward_returns_the_cpu_buffer():
    check(A.log_sigmoid_forward, activation_input())


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("op", [A.silu_backward, A.mish_backward], ids=["silu", "mish"])
def test_silu_and_mish_gradients_in_reduced_precision_round_once_as_the_cpu(op, dtype):
    # near the derivative's zero (x about -1.2-1.3) two terms cancel: computed op by op in the input's dtype (torch's
    # composite form) they lost 10-25x the CPU's accuracy; in float32 and rounded once they match it (shapes.py)
    x = torch.linspace(-1.4, -1.1, 256).to(dtype)
    g = _seeded((256,), 3, dtype)
    ref = op(g.double(), x.double())
    cpu = (op(g, x).double() - ref).abs().max().item()
    tiny = op(g.to("tiny"), x.to("tiny")).cpu()
    assert tiny.dtype == dtype
    assert (tiny.double() - ref).abs().max().item() <= 1.5 * cpu
    check(op, g, x)


def test_log_sigmoid_results_are_contiguous_whatever_the_input_layout():
    # the CPU kernel allocates its result and buffer contiguous, not in the input's layout (found by shapes.py)
    x = activation_input()
    check(A.log_sigmoid_forward, x.t())
    check(F.logsigmoid, x.t())
    check(F.logsigmoid, torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last))
    check_grads(F.logsigmoid, x.t().contiguous().t())


def test_activation_scalars_are_runtime_arguments():
    x = torch.randn(4, 5, device="tiny")
    torch.tiny.synchronize()
    F.leaky_relu(x, 0.01).cpu()
    with counting() as c:
        for slope in (0.02, 0.3, 0.7):
            F.leaky_relu(x, slope).cpu()
    assert c["compiles"] == 0


# ---------------------------------------------------------------------------------------------
# Batch norm


def bn_inputs(c=3, dtype=torch.float32):
    x = _seeded((4, c, 5, 6), 10).to(dtype) * 2 + 1
    w, b = _seeded((c,), 11) + 1, _seeded((c,), 12)
    return x, w, b


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_norm_training_forward_and_gradients(affine):
    x, w, b = bn_inputs()

    def fn(x, w, b):
        rm, rv = torch.zeros(3, device=x.device), torch.ones(3, device=x.device)
        y = F.batch_norm(x, rm, rv, w if affine else None, b if affine else None, training=True, momentum=0.3)
        return y, rm, rv

    check_grads(fn, x, w, b, rtol=1e-5, atol=1e-5)


def test_batch_norm_over_a_large_batch_computes_its_per_channel_factors_once_and_matches_cpu():
    # 131072 elements: the per-channel factors of the forward and backward kernels (w / sqrt(var + eps) and such) are
    # computed once per channel in a kernel of their own (realize_broadcast_factors), not at every element
    x = _seeded((32, 4, 32, 32), 16) * 3 + 2
    w, b = _seeded((4,), 17) + 1, _seeded((4,), 18)
    rm, rv = _seeded((4,), 19), _seeded((4,), 20).abs() + 0.5

    def fn(x, w, b, train):
        y = F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=train, eps=1e-3)
        return F.relu(y) / (rv.to(x.device).view(1, 4, 1, 1) + 0.25).sqrt()

    # (the bias and weight gradients sum 32768 terms each, in another order than the CPU's)
    for train in (True, False):
        check_grads(lambda x, w, b, t=train: fn(x, w, b, t), x, w, b, rtol=1e-4, atol=1e-4)


def test_batch_norm_eval_forward_and_gradients():
    x, w, b = bn_inputs()
    rm, rv = _seeded((3,), 13), _seeded((3,), 14).abs() + 0.5

    def fn(x, w, b, rm, rv):
        return F.batch_norm(x, rm.detach(), rv.detach(), w, b, training=False, eps=1e-3)

    check_grads(fn, x, w, b, rm, rv)


def test_batch_norm_saved_statistics_match_cpu():
    x, w, b = bn_inputs()
    rm, rv = torch.zeros(3), torch.ones(3)
    check(lambda *a: A.native_batch_norm(*a, True, 0.1, 1e-5), x, w, b, rm, rv)
    check(lambda *a: A.native_batch_norm(*a, False, 0.1, 1e-5), x, w, b, rm, rv)
    check(lambda x: A.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5), x[:, :, 0])
    check(lambda *a: A._native_batch_norm_legit(*a, True, 0.1, 1e-5), x, w, b, rm, rv)
    check(lambda x, w, b: A._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), x, w, b)
    check(lambda *a: A._native_batch_norm_legit_no_training(*a, 0.1, 1e-5), x, w, b, rm, rv)
    check(lambda *a: A._batch_norm_with_update(*a, 0.1, 1e-5), x, w, b, rm, rv)
    check(lambda *a: A._batch_norm_no_update(*a, 0.1, 1e-5), x, w, b, rm, rv)


def test_batch_norm_backward_ops_match_cpu():
    x, w, _ = bn_inputs()
    g = _seeded(x.shape, 15)
    mean, invstd = x.mean((0, 2, 3)), 1 / (x.var((0, 2, 3), unbiased=False) + 1e-5).sqrt()
    rm, rv = _seeded((3,), 13), _seeded((3,), 14).abs() + 0.5
    for train in (True, False):
        check(lambda *a, t=train: A.native_batch_norm_backward(*a, t, 1e-5, [True] * 3), g, x, w, rm, rv, mean, invstd)
    check(lambda *a: A.native_batch_norm_backward(*a, True, 1e-5, [True, False, True]), g, x, w, rm, rv, mean, invstd)
    reserve = torch.empty(0, dtype=torch.uint8)
    check(
        lambda *a: A.batch_norm_backward(*a[:-1], True, 1e-5, [True] * 3, a[-1]), g, x, w, rm, rv, mean, invstd, reserve
    )


def test_batch_norm_channels_last_keeps_its_memory_format():
    x, w, b = bn_inputs()
    x = x.to(memory_format=torch.channels_last)
    check(lambda *a: A.native_batch_norm(*a, True, 0.1, 1e-5), x, w, b, torch.zeros(3), torch.ones(3))
    check_grads(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)


def test_batch_norm_mixed_half_input_with_float_parameters():
    x, w, b = bn_inputs(dtype=torch.bfloat16)
    check(lambda *a: A.native_batch_norm(*a, True, 0.1, 1e-5), x, w, b, torch.zeros(3), torch.ones(3), **tol(x.dtype))
    check(lambda *a: A.native_batch_norm(*a, True, 0.1, 1e-5), x.double(), w, b, torch.zeros(3), torch.ones(3))


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_batch_norm_in_reduced_precision(dtype):
    x, w, b = bn_inputs(dtype=dtype)
    check_grads(
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w.to(dtype), b.to(dtype), **tol(dtype)
    )


def test_batch_norm_errors_match_cpu():
    x, w, b = bn_inputs()
    check(lambda x: A.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5), x[:0])
    check(lambda x: A.native_batch_norm(x.long(), None, None, None, None, True, 0.1, 1e-5), x)


def test_batchnorm_module_running_stats_after_training_steps():
    def train(device, momentum):
        torch.manual_seed(0)
        m = torch.nn.BatchNorm2d(3, momentum=momentum).to(device)
        for step in range(3):
            x = (_seeded((4, 3, 5, 5), 20 + step) * (step + 1)).to(device)
            m(x).sum().backward()
        m.eval()
        y = m(_seeded((2, 3, 5, 5), 30).to(device))
        return y, m.running_mean, m.running_var, m.num_batches_tracked, m.weight.grad, m.bias.grad

    check_devices(lambda d: train(d, 0.1), rtol=1e-5, atol=1e-5)
    check_devices(lambda d: train(d, None), rtol=1e-5, atol=1e-5)


def test_batchnorm2d_train_step_runs_without_fallback():
    m = torch.nn.BatchNorm2d(3).to("tiny")
    x = _seeded((4, 3, 5, 5), 40).to("tiny").requires_grad_()
    before = torch.tiny.stats()["fallbacks"]
    m(x).square().sum().backward()
    torch.tiny.synchronize()
    assert torch.tiny.stats()["fallbacks"] == before
    assert x.grad is not None and m.weight.grad is not None


# ---------------------------------------------------------------------------------------------
# Layer norm and group norm


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("shape", [(5,), (4, 5)], ids=["last", "last2"])
def test_layer_norm_forward_and_gradients(shape, affine):
    x = _seeded((3, 4, 5), 50) * 3 + 1
    w, b = _seeded(shape, 51) + 1, _seeded(shape, 52)
    check_grads(lambda x, w, b: F.layer_norm(x, shape, w if affine else None, b if affine else None, 1e-4), x, w, b)


def test_layer_norm_transposed_input_and_saved_statistics():
    x = _seeded((5, 4, 3), 53)
    w, b = _seeded((5,), 54), _seeded((5,), 55)
    check_grads(lambda x, w, b: F.layer_norm(x.transpose(0, 2), (5,), w, b), x, w, b)
    check(lambda x, w, b: A.native_layer_norm(x, [5], w, b, 1e-5), x.transpose(0, 2), w, b)
    check(lambda x, w: A.native_layer_norm(x, [5], w, w, 1e-5), x.transpose(0, 2).bfloat16(), w, **tol(torch.bfloat16))


def test_layer_norm_in_reduced_precision():
    x = _seeded((3, 8), 56, torch.float16)
    w = _seeded((8,), 57, torch.float16)
    check_grads(lambda x, w: F.layer_norm(x, (8,), w, w), x, w, **tol(torch.float16))


def test_layer_norm_errors_match_cpu():
    x = _seeded((3, 4), 58)
    check(lambda x: F.layer_norm(x, (5,)), x)
    check(lambda x: F.layer_norm(x, (4,), torch.ones(3, device=x.device)), x)


def test_layer_norm_over_the_last_dim_is_at_most_three_kernels():
    x = torch.randn(16, 64, device="tiny")
    w, b = torch.randn(64, device="tiny"), torch.randn(64, device="tiny")
    torch.tiny.synchronize()
    with counting() as c:
        y = F.layer_norm(x, (64,), w, b)
        torch.tiny.synchronize()
    assert c["kernels"] <= 3
    torch.testing.assert_close(y.cpu(), F.layer_norm(x.cpu(), (64,), w.cpu(), b.cpu()))


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_group_norm_forward_and_gradients(affine):
    x = _seeded((2, 6, 3, 4), 60) * 2 - 1
    w, b = _seeded((6,), 61) + 1, _seeded((6,), 62)
    check_grads(lambda x, w, b: F.group_norm(x, 3, w if affine else None, b if affine else None), x, w, b)


def test_group_norm_of_a_strided_input_matches_cpu():
    x = _seeded((2, 6, 4, 3), 66).transpose(2, 3)  # torch's native_group_norm reads any layout
    w, b = _seeded((6,), 67), _seeded((6,), 68)
    check_grads(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b)
    check(lambda x: torch.ops.aten.native_group_norm(x, None, None, 2, 6, 12, 2, 1e-5), x)


def test_group_norm_in_reduced_precision():
    x, w = _seeded((2, 4, 3), 69, torch.bfloat16), _seeded((4,), 69, torch.bfloat16)
    check_grads(lambda x, w: F.group_norm(x, 2, w, w), x, w, **tol(torch.bfloat16))


def test_group_norm_ops_match_cpu():
    x = _seeded((2, 6, 3, 4), 63)
    w, b = _seeded((6,), 64), _seeded((6,), 65)
    check(lambda x, w, b: A.native_group_norm(x, w, b, 2, 6, 12, 2, 1e-5), x, w, b)
    check(
        lambda x, w, b: A.native_group_norm(x, w, b, 2, 6, 12, 2, 1e-5), x.to(memory_format=torch.channels_last), w, b
    )
    g, mean, rstd = _seeded(x.shape, 66), _seeded((2, 2), 67), _seeded((2, 2), 68).abs()
    check(lambda *a: A.native_group_norm_backward(*a, 2, 6, 12, 2, [True, True, True]), g, x, mean, rstd, w)
    check(lambda *a: A.native_group_norm_backward(*a, None, 2, 6, 12, 2, [True, True, True]), g, x, mean, rstd)
    check(lambda x: F.group_norm(x, 4), x)  # 6 channels in 4 groups: CPU raises


# ---------------------------------------------------------------------------------------------
# Losses

REDUCTIONS = ["none", "mean", "sum"]


def logits_and_target(n=6, c=5, seed=70):
    x = _seeded((n, c), seed) * 2
    t = torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(seed))
    return x, t


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_with_class_weights_and_ignore_index(reduction):
    x, t = logits_and_target()
    t[2] = -100
    w = _seeded((5,), 71).abs() + 0.1
    check_grads(lambda x, t, w: F.cross_entropy(x, t, weight=w.detach(), reduction=reduction), x, t, w)
    t[1] = 3
    check_grads(lambda x, t: F.cross_entropy(x, t, ignore_index=3, reduction=reduction), x, t)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_label_smoothing_and_probability_targets(reduction):
    x, t = logits_and_target()
    w = _seeded((5,), 72).abs() + 0.1
    p = torch.softmax(_seeded((6, 5), 73), 1)
    check_grads(lambda x, t, w: F.cross_entropy(x, t, w.detach(), label_smoothing=0.2, reduction=reduction), x, t, w)
    check_grads(lambda x, p: F.cross_entropy(x, p.detach(), reduction=reduction), x, p)
    check_grads(lambda x, p: F.cross_entropy(x, p.detach(), label_smoothing=0.1, reduction=reduction), x, p)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_spatial_targets(reduction):
    x = _seeded((2, 4, 3, 3), 74)
    t = torch.randint(0, 4, (2, 3, 3), generator=torch.Generator().manual_seed(75))
    t[0, 1, 1] = -100
    w = _seeded((4,), 76).abs()
    check_grads(lambda x, t, w: F.cross_entropy(x, t, w.detach(), reduction=reduction), x, t, w)
    check_grads(lambda x, t: F.cross_entropy(x, t, reduction=reduction), x[:, :, 0], t[:, 0])  # (N, C, L)


def test_nll_loss_ops_match_cpu():
    x, t = logits_and_target()
    w = _seeded((5,), 77).abs()
    for r in range(3):
        check(lambda *a, r=r: A.nll_loss_forward(*a, r, -100), x, t, w)
        check(lambda x, t, r=r: A.nll_loss_forward(x, t, None, r, 1), x[0], t[0])  # no batch dim
        check(lambda x, t, r=r: A.nll_loss2d_forward(x, t, None, r, 2), x.reshape(1, 5, 2, 3), t.reshape(1, 2, 3))
    check(lambda x, t: A.nll_loss_forward(x, t, None, 1, -100), x, t.to(torch.uint8))
    check(lambda x, t: A.nll_loss_forward(x[:0], t[:0], None, 1, -100), x, t)  # mean of nothing: nan
    g, g6, tw = torch.tensor(2.0), torch.ones(6), torch.tensor(4.0)
    check(lambda g, x, t, w, tw: A.nll_loss_backward(g, x, t, w, 1, -100, tw), g, x, t, w, tw)
    check(lambda g, x, t, tw: A.nll_loss_backward(g, x, t, None, 0, 1, tw), g6, x, t, tw)
    check(
        lambda g, x, t, tw: A.nll_loss2d_backward(g, x, t, None, 1, -100, tw),
        g,
        x.reshape(1, 5, 2, 3),
        t.reshape(1, 2, 3),
        tw,
    )


def test_nll_loss_in_reduced_precision():
    x, t = logits_and_target()
    check_grads(lambda x, t: F.cross_entropy(x, t), x.bfloat16(), t, **tol(torch.bfloat16))


def test_out_of_range_targets_raise_at_the_call():
    x, t = logits_and_target()
    for bad in (5, 12, -3):
        t2 = t.clone()
        t2[4] = bad
        check(lambda x, t: F.cross_entropy(x, t), x, t2)
        check(lambda x, t: F.nll_loss(x, t, reduction="none"), x, t2)
    check(lambda x, t: F.cross_entropy(x, t), x.reshape(1, 5, 2, 3), torch.full((1, 2, 3), 7))
    check(lambda x, t: F.nll_loss(x, t.int()), x, t)  # int32 targets: CPU raises
    check(lambda x, t: F.nll_loss(x, t), x, t[:3])  # size mismatch


def test_target_checks_leave_the_pending_work_lazy():
    """nll_loss and binary_cross_entropy check their targets at the call: class targets in host memory already
    (copied to the device) are read there, without a kernel; computed ones, and binary_cross_entropy's, with a
    small kernel of their own. The forward pending around the call is not realized there, so a training step
    stays one schedule. A target written in place (a pending ASSIGN) is checked after a sync, as before."""
    x, t = logits_and_target()
    p, q = torch.rand(6, 3), torch.rand(6, 3)
    for loss, args, target, checks in (
        (lambda h, t: F.cross_entropy(h, t), (x, t), lambda b: b, 0),
        (lambda h, t: F.cross_entropy(h, t), (x, t), lambda b: b.flip(0) * 1, 1),
        (lambda h, t: F.binary_cross_entropy(h, t), (p, q), lambda b: b, 1),
    ):
        a, b = (v.to("tiny") for v in args)
        with counting() as c:
            h = (a * 0.5).sigmoid()  # pending
            out = loss(h, target(b))
            assert c["kernels"] == checks, "the check alone runs"
            expected = loss((args[0] * 0.5).sigmoid(), target(args[1]))
            assert out.cpu().allclose(expected, atol=1e-6)
    bad = t.to("tiny")
    bad[0] = 7  # pending in-place write
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(x.to("tiny") * 2, bad)


def test_target_and_index_bounds_read_from_host_memory_or_computed():
    """Class targets and indices are checked at the call from host memory where a copy to the device put them
    (a strided view of one too), else computed on the device: both name the same offender, as the CPU does."""
    x, t = logits_and_target()
    w = rand(5, 3)
    for realized in (True, False):

        def on_tiny(v, realized=realized):
            v = v.to("tiny")
            return v if realized else v * 1

        for bad in (-2, 9):
            t2 = t.clone()
            t2[3] = bad
            with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
                F.cross_entropy(x.to("tiny"), on_tiny(t2))
            wide = torch.stack([t, t2], 1)  # the bad target in column 1: a strided view's element
            with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
                F.cross_entropy(x.to("tiny"), on_tiny(wide)[:, 1])
            assert F.cross_entropy(x.to("tiny"), on_tiny(wide)[:, 0]).cpu().allclose(F.cross_entropy(x, t))
            with pytest.raises(IndexError, match="index out of range in self"):
                F.embedding(on_tiny(t2), w.to("tiny"))
            with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds for dimension 0 with size 5"):
                torch.gather(w.to("tiny"), 0, on_tiny(t2.reshape(6, 1)))
        ignored = torch.full((6,), -100)  # every target ignored: no bound to check, a NaN mean
        assert F.cross_entropy(x.to("tiny"), on_tiny(ignored)).cpu().isnan()
        ignored[2] = 5
        with pytest.raises(IndexError, match="Target 5 is out of bounds"):
            F.cross_entropy(x.to("tiny"), on_tiny(ignored))
        small = torch.tensor([0, 3, 1], dtype=torch.int32)  # int32 indices
        assert F.embedding(on_tiny(small), w.to("tiny")).cpu().equal(F.embedding(small, w))
        counts = torch.tensor([1, 4, 4, 0], dtype=torch.uint8)
        assert torch.bincount(on_tiny(counts)).cpu().equal(torch.bincount(counts))
        with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative integral inputs"):
            torch.bincount(on_tiny(torch.tensor([2, -1])))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses_forward_and_gradients(reduction):
    x, y = _seeded((4, 5), 80), _seeded((4, 5), 81)
    check_grads(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)
    check_grads(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5), x, y)
    check_grads(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=0.7), x, y)
    check_grads(lambda x, y: F.l1_loss(x, y, reduction=reduction), x, y, allow_fallback=True)


def test_regression_losses_special_cases():
    x, y = _seeded((4, 5), 82), _seeded((4, 5), 83)
    y[0] = x[0]  # zero differences: the gradient's kink
    check_grads(lambda x, y: A.smooth_l1_loss(x, y, 1, 0.0), x, y)  # (F.smooth_l1_loss calls l1_loss for beta=0)
    check_grads(lambda x, y: F.mse_loss(x.t(), y.t()), x, y)
    check_grads(lambda x, y: F.mse_loss(x, y), x.half(), y.half(), **tol(torch.float16))
    check(lambda x, y: A.mse_loss(x, y, 1), x, y[:1].double())  # broadcast and promote
    check(lambda x, y: A.smooth_l1_loss(x, y, 1, -1.0), x, y)
    check(lambda x, y: A.huber_loss(x, y, 1, 0.0), x, y)
    check(lambda x, y: A.mse_loss(x, y, 1), x.long(), y.long())
    out = torch.empty(3)
    check(lambda x, y, o: A.mse_loss.out(x, y, 1, out=o), x, y, out)
    check(lambda x, y, o: A.huber_loss.out(x, y, 0, 1.0, out=o), x, y, out)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_forward_and_gradients(reduction):
    p, y = torch.sigmoid(_seeded((4, 5), 90)), torch.rand(4, 5, generator=torch.Generator().manual_seed(91))
    w = _seeded((5,), 92).abs()
    check_grads(lambda p, y: F.binary_cross_entropy(p, y.detach(), reduction=reduction), p, y)
    check_grads(lambda p, y, w: F.binary_cross_entropy(p, y.detach(), w.detach(), reduction=reduction), p, y, w)
    logits, pw = _seeded((4, 5), 93) * 3, _seeded((5,), 94).abs()
    check_grads(lambda x, y: F.binary_cross_entropy_with_logits(x, y.detach(), reduction=reduction), logits, y)
    check_grads(
        lambda x, y, w, pw: F.binary_cross_entropy_with_logits(
            x, y.detach(), w.detach(), pos_weight=pw.detach(), reduction=reduction
        ),
        logits,
        y,
        w,
        pw,
    )


def test_binary_cross_entropy_edges_match_cpu():
    p, y = torch.tensor([0.0, 1.0, 0.5, 1e-30]), torch.tensor([0.0, 1.0, 1.0, 1.0])
    check_grads(lambda p, y: F.binary_cross_entropy(p, y.detach()), p, y)
    check(lambda p, y: F.binary_cross_entropy(p, y), torch.tensor([0.5, 1.5]), torch.tensor([0.5, 0.5]))
    check(lambda p, y: F.binary_cross_entropy(p, y), torch.tensor([0.5, float("nan")]), torch.tensor([0.5, 0.5]))
    check(lambda p, y: F.binary_cross_entropy(p, y), torch.tensor([0.5, 0.5]), torch.tensor([0.5, -0.5]))


def test_glu_and_its_gradient():
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
        tol = {"rtol": 1e-2, "atol": 1e-2} if dtype in (torch.float16, torch.bfloat16) else {}
        check(lambda t: (F.glu(t), F.glu(t, 0)), x, **tol)

    def scenario(dev):
        x = torch.randn(3, 8, 2, generator=torch.Generator().manual_seed(1)).to(dev).requires_grad_()
        (F.glu(x, 1) * torch.arange(8.0, device=dev).reshape(1, 4, 2)).sum().backward()
        return x.grad

    check_devices(scenario)
    check(F.glu, torch.ones(3, 3))  # odd halving dim: torch's error
    check(F.glu, torch.tensor(1.0))  # scalar
    check(F.glu, torch.ones(4, dtype=torch.int32))  # integers: torch's NotImplementedError
    check(lambda t, o: torch._C._nn.glu(t, -1, out=o), torch.ones(2, 4), torch.empty(0))


def test_multi_head_attention_sequence_first_and_its_gradients():
    """nn.MultiheadAttention's sequence-first layout (a ViT's encoder): 65 tokens, batch 8, 4 heads of 16. Its key and
    query gradients read the packed projection sequence-first; their register blocks run along the tokens, whose rows
    share a load, not along the batch."""
    x = _seeded((65, 8, 64), 1)
    in_w, in_b = _seeded((192, 64), 2) * 0.1, _seeded((192,), 3) * 0.1
    out_w, out_b = _seeded((64, 64), 4) * 0.1, _seeded((64,), 5) * 0.1

    def mha(x, in_w, in_b, out_w, out_b):
        y, _ = F.multi_head_attention_forward(
            x, x, x, 64, 4, in_w, in_b, None, None, False, 0.0, out_w, out_b, need_weights=False
        )
        return y

    check_grads(mha, x, in_w, in_b, out_w, out_b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_attention_of_a_sequence_not_a_multiple_of_the_lanes_and_its_gradients(causal):
    """scaled_dot_product_attention over 65 positions (a ViT's 64 patches and its class token), heads of 32: torch's
    math path scales the key by a Python float, whose broadcast the query's gradient reads through two views (it was
    copied into a buffer of its own, and the gradient's kernel ran without vector lanes)."""
    q, k, v = (_seeded((2, 3, 65, 32), s) for s in (1, 2, 3))
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_attention_in_a_reduced_dtype_matches_cpu(dtype):
    """scaled_dot_product_attention in bfloat16 and float16 over 65 positions, and its gradients: torch's math path
    widens q, k and v and scales the transposed key, a computed value the scores reuse, which is realized in the
    key's own order (it was written transposed, copied back, and the scores ran without vector lanes)."""
    q, k, v = (_seeded((2, 3, 65, 32), s, dtype) for s in (4, 5, 6))
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v, **tol(dtype))
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, **tol(dtype))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_a_scale_of_a_products_operands_multiplies_its_sums(dtype):
    """sdpa's math path scales q and k by the square root of the scale before q @ k.transpose(-2, -1): the scale, one
    value everywhere, multiplies each sum once instead (hoist_factors), so that the scores read the query as it is
    stored, not from a scaled copy. sdpa's value, already laid out as the panels of its 32 features, is read in place
    too (its copy changed nothing)."""
    a, b = rand(64, 48, dtype=dtype, seed=1), rand(48, 40, dtype=dtype, seed=2)
    check(lambda a, b: (a * 0.125) @ (b * 3.0), a, b, **tol(dtype))
    check(lambda a, b: ((0.5 * a) * -2.0) @ (b * b), a, b, **tol(dtype))
    check(lambda a, b: ((a * 0.25).t() @ (a * 4)).sum(0), a, b, **tol(dtype))
    q, k, v = (_seeded((32, 4, 65, 32), s, dtype) for s in (7, 8, 9))
    check(F.scaled_dot_product_attention, q, k, v, **tol(dtype))
    if not CPU_LOWERING:
        return
    q, k, v = (t.to("tiny") for t in (q, k, v))
    with counting() as c:
        F.scaled_dot_product_attention(q, k, v).cpu()
    # the keys' transposed copy, the scores, the softmax, the product by the value (and the query widened to float32)
    assert c["kernels"] == (4 if dtype == torch.float32 else 5)


def _heads_last(x):
    """x (batch, heads, sequence, features) laid out as (batch, sequence, heads, features): a projection's heads."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


_SDPA_LAYOUTS = {
    # torch's CPU runs its flash kernel, whose result is laid out like the query
    "query heads-last": ({}, {}),
    "query permuted": ({"q": lambda q: q.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)}, {}),
    "float mask": ({"mask": torch.randn(5, 5)}, {}),
    "causal": ({}, {"is_causal": True}),
    "unbatched": ({"q": lambda q: q[0], "k": lambda k: k[0], "v": lambda v: v[0]}, {}),
    "unbatched heads-last": (
        {"q": lambda q: q[0].transpose(0, 1).contiguous().transpose(0, 1), "k": lambda k: k[0], "v": lambda v: v[0]},
        {},
    ),
    "grouped heads": ({"k": lambda k: k[:, :1], "v": lambda v: v[:, :1]}, {"enable_gqa": True}),
    "bfloat16": ({"q": torch.Tensor.bfloat16, "k": torch.Tensor.bfloat16, "v": torch.Tensor.bfloat16}, {}),
    # and its math path, whose result is contiguous
    "value features strided": ({"v": lambda v: v.transpose(-1, -2).contiguous().transpose(-1, -2)}, {}),
    "value of other features": ({"v": lambda v: torch.cat([v, v], -1)}, {}),
    "query broadcast": ({"q": lambda q: q[:1].expand(2, 3, 5, 4)}, {}),
    "mask needing its gradient": ({"mask": torch.randn(5, 5).requires_grad_()}, {}),
}


@pytest.mark.parametrize("case", list(_SDPA_LAYOUTS))
def test_attention_result_laid_out_as_cpu_lays_it_out(case):
    """scaled_dot_product_attention's result has the CPU's strides: torch's CPU flash kernel lays its result out like
    the query, so a query transposed from (batch, sequence, heads, features) gives a result whose transpose back views
    as (batch, sequence, width); tiny ran the math path and returned it contiguous, where that view raised."""
    inputs, options = _SDPA_LAYOUTS[case]
    seeded = (_heads_last(_seeded((2, 3, 5, 4), s)) for s in (1, 2, 3))
    q, k, v = (inputs.get(n, lambda x: x)(x) for n, x in zip("qkv", seeded, strict=True))
    tol = {"rtol": 2e-2, "atol": 2e-2} if q.dtype == torch.bfloat16 else {}
    if "mask" in inputs:
        check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, inputs["mask"])
    else:
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **options), q, k, v, **tol)
    if case == "query heads-last":
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v).transpose(1, 2).view(2, 5, 12), q, k, v)
    if case.startswith("unbatched"):  # a view of the result with a batch dim of 1, as on the CPU
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)._base is not None, q, k, v)
