"""Mixed precision and activation checkpointing on tiny, against PyTorch CPU.

torch.autocast("tiny") casts as CUDA autocast does (torch's shared op lists): where CPU autocast uses the
same policy, tiny's dtypes and values match CPU autocast; where the lists differ (softmax, log_softmax,
pointwise exp/log/pow, sums, norms run in float32 on CUDA-like devices), tiny matches the float32 op on the
CPU. torch.amp.GradScaler("tiny") unscales, skips and updates the scale on the device, with no CPU
fallback, step for step as GradScaler("cpu") does. torch.utils.checkpoint recomputes the forward in
backward with the same autocast state and the same tiny random numbers (dropout masks)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, check, counting, dtype_name, on_device, rand, tol
from torch import nn
from torch.utils.checkpoint import checkpoint

AUTOCAST_DTYPES = pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_name)


def run_autocast(fn, args, device, dtype):
    with torch.autocast(device, dtype=dtype):
        return fn(*on_device(args, device))


def assert_matches_cpu_autocast(fn, *args, dtype):
    expected = run_autocast(fn, args, "cpu", dtype)
    with counting() as c:
        actual = run_autocast(fn, args, DEVICE, dtype)
        torch.tiny.synchronize()
    assert c["fallbacks"] == 0, f"{c['fallbacks']} op(s) ran through the CPU fallback: {c['fallback_ops']}"
    assert actual.device.type == DEVICE
    assert actual.dtype == expected.dtype, f"tiny autocast gives {actual.dtype}, CPU autocast {expected.dtype}"
    torch.testing.assert_close(actual.cpu(), expected, **tol(dtype))


# ---------------------------------------------------------------------------------------------
# The autocast context


def test_autocast_is_available_and_defaults_to_float16_like_cuda():
    assert torch.amp.is_autocast_available(DEVICE)
    assert torch.get_autocast_dtype(DEVICE) == torch.float16
    assert torch.tiny.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    with torch.autocast(DEVICE):
        assert torch.is_autocast_enabled(DEVICE)
        out = torch.mm(rand(2, 3).to(DEVICE), rand(3, 4).to(DEVICE))
    assert out.dtype == torch.float16
    assert not torch.is_autocast_enabled(DEVICE)


def test_autocast_with_an_unsupported_dtype_warns_and_stays_off():
    with pytest.warns(UserWarning, match="In tiny autocast, but the target dtype is not supported"):
        with torch.autocast(DEVICE, dtype=torch.float64):
            out = torch.mm(rand(2, 3).to(DEVICE), rand(3, 4).to(DEVICE))
    assert out.dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# Ops CPU autocast treats the same way: same dtypes, close values


LOWER_PRECISION_OPS = {
    "mm": (lambda a, b: torch.mm(a, b), (rand(5, 7), rand(7, 3, seed=1))),
    "matmul": (lambda a, b: a @ b, (rand(2, 5, 7), rand(7, 3, seed=1))),
    "linear": (F.linear, (rand(5, 7), rand(4, 7, seed=1), rand(4, seed=2))),
    "addmm": (torch.addmm, (rand(5, 3), rand(5, 7, seed=1), rand(7, 3, seed=2))),
    "bmm": (torch.bmm, (rand(2, 5, 7), rand(2, 7, 3, seed=1))),
    "baddbmm": (torch.baddbmm, (rand(2, 5, 3), rand(2, 5, 7, seed=1), rand(2, 7, 3, seed=2))),
    "conv1d": (F.conv1d, (rand(2, 3, 9), rand(4, 3, 3, seed=1), rand(4, seed=2))),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), (rand(2, 3, 6, 6), rand(4, 3, 3, 3, seed=1))),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2), (rand(1, 3, 4, 4), rand(3, 2, 3, 3, seed=1))),
    "conv3d": (F.conv3d, (rand(1, 2, 4, 4, 4), rand(3, 2, 2, 2, 2, seed=1))),
}


@AUTOCAST_DTYPES
@pytest.mark.parametrize("op", list(LOWER_PRECISION_OPS))
def test_matmuls_and_convolutions_run_in_the_autocast_dtype_as_on_cpu(op, dtype):
    fn, args = LOWER_PRECISION_OPS[op]
    assert_matches_cpu_autocast(fn, *args, dtype=dtype)
    assert run_autocast(fn, args, DEVICE, dtype).dtype == dtype


FLOAT32_OPS = {
    "mse_loss": (F.mse_loss, (rand(4, 5), rand(4, 5, seed=1))),
    "l1_loss": (F.l1_loss, (rand(4, 5), rand(4, 5, seed=1))),
    "smooth_l1_loss": (F.smooth_l1_loss, (rand(4, 5), rand(4, 5, seed=1))),
    "huber_loss": (F.huber_loss, (rand(4, 5), rand(4, 5, seed=1))),
    "nll_loss": (lambda x, t: F.nll_loss(x, t), (rand(4, 5), torch.tensor([0, 2, 4, 1]))),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), (rand(4, 5), torch.tensor([0, 2, 4, 1]))),
    "kl_div": (lambda x, t: F.kl_div(x, t, reduction="batchmean"), (rand(4, 5), rand(4, 5, seed=1).softmax(1))),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, (rand(4, 5), rand(4, 5, seed=1).sigmoid())),
}


@AUTOCAST_DTYPES
@pytest.mark.parametrize("op", list(FLOAT32_OPS))
def test_losses_of_low_precision_inputs_run_in_float32_as_on_cpu(op, dtype):
    fn, args = FLOAT32_OPS[op]
    # the inputs come in the autocast dtype, as a linear layer's output would
    low = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
    assert_matches_cpu_autocast(fn, *low, dtype=dtype)
    assert run_autocast(fn, low, DEVICE, dtype).dtype == torch.float32


@AUTOCAST_DTYPES
def test_ops_outside_the_lists_keep_their_input_dtype_as_on_cpu(dtype):
    def block(x, w):
        h = F.relu(F.linear(x, w))  # linear: autocast dtype; relu, add, mul: whatever comes in
        return h * 2 + h.max()

    assert_matches_cpu_autocast(block, rand(3, 4), rand(5, 4, seed=1), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Ops whose policy follows CUDA's list (CPU autocast leaves them in the input dtype): float32, with the
# value of the float32 op on the upcast inputs


CUDA_FLOAT32_OPS = {
    "softmax": lambda x: torch.softmax(x, 1),
    "log_softmax": lambda x: F.log_softmax(x, 1),
    "exp": torch.exp,
    "log": torch.log,
    "pow": lambda x: torch.pow(x, 2),
    "rsqrt": torch.rsqrt,
    "sum": torch.sum,
    "sum_dim": lambda x: x.sum(1),
    "cumsum": lambda x: torch.cumsum(x, 1),
    "layer_norm": lambda x: F.layer_norm(x, (6,)),
    "group_norm": lambda x: F.group_norm(x.reshape(2, 6, 2), 3),
    "logsumexp": lambda x: torch.logsumexp(x, 1),
    "norm": lambda x: torch.norm(x),
}


@AUTOCAST_DTYPES
@pytest.mark.parametrize("op", list(CUDA_FLOAT32_OPS))
def test_softmax_norms_sums_and_pointwise_exp_log_run_in_float32_like_cuda(op, dtype):
    fn = CUDA_FLOAT32_OPS[op]
    x = (rand(4, 6).abs() + 0.5).to(dtype)  # positive, for log and rsqrt
    with torch.autocast(DEVICE, dtype=dtype):
        actual = fn(x.to(DEVICE))
    expected = fn(x.float())
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-5)


@AUTOCAST_DTYPES
def test_binary_ops_of_mixed_inputs_take_the_widest_type_like_cuda(dtype):
    a, b = rand(6).to(dtype), rand(6, seed=1)
    with torch.autocast(DEVICE, dtype=dtype):
        dot = torch.dot(a.to(DEVICE), b.to(DEVICE))  # no autocast: dot refuses mixed dtypes
        addcmul = torch.addcmul(b.to(DEVICE), a.to(DEVICE), a.to(DEVICE))
    assert (dot.dtype, addcmul.dtype) == (torch.float32, torch.float32)
    torch.testing.assert_close(dot.cpu(), torch.dot(a.float(), b))
    torch.testing.assert_close(addcmul.cpu(), torch.addcmul(b, a.float(), a.float()))


def test_binary_cross_entropy_refuses_autocast_like_cuda():
    p, t = rand(4, 5).sigmoid().to(DEVICE), rand(4, 5, seed=1).sigmoid().to(DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, t)
        with torch.autocast(DEVICE, enabled=False):
            loss = F.binary_cross_entropy(p, t)
    torch.testing.assert_close(loss.cpu(), F.binary_cross_entropy(p.cpu(), t.cpu()))


# ---------------------------------------------------------------------------------------------
# Nesting, disabling, other devices, and backward


def test_nested_autocast_and_enabled_false_restore_the_outer_state():
    a, b = rand(3, 4).to(DEVICE), rand(4, 2, seed=1).to(DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        assert torch.mm(a, b).dtype == torch.bfloat16
        with torch.autocast(DEVICE, enabled=False):
            assert torch.mm(a, b).dtype == torch.float32
        with torch.autocast(DEVICE, dtype=torch.float16):
            assert torch.mm(a, b).dtype == torch.float16
        assert torch.mm(a, b).dtype == torch.bfloat16
    assert torch.mm(a, b).dtype == torch.float32


def test_autocast_of_one_device_leaves_the_other_devices_tensors_alone():
    a, b = rand(3, 4), rand(4, 2, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(a.to(DEVICE), b.to(DEVICE)).dtype == torch.float32
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        assert torch.mm(a, b).dtype == torch.float32


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


@AUTOCAST_DTYPES
def test_autocast_backward_gives_float32_gradients_close_to_cpu_autocast(dtype):
    model = mlp()
    x, y = rand(6, 8), rand(6, 4, seed=1)
    grads = {}
    for device in ("cpu", DEVICE):
        m = copy.deepcopy(model).to(device)
        with torch.autocast(device, dtype=dtype):
            out = m(x.to(device))
            loss = F.mse_loss(out, y.to(device))
        assert (out.dtype, loss.dtype) == (dtype, torch.float32)
        loss.backward()
        grads[device] = [p.grad for p in m.parameters()]
    for t, c in zip(grads[DEVICE], grads["cpu"], strict=True):
        assert t.dtype == c.dtype == torch.float32
        torch.testing.assert_close(t.cpu(), c, rtol=3e-2, atol=3e-2)


# ---------------------------------------------------------------------------------------------
# GradScaler's kernels against the CPU's


def unscale(grads, found_inf, inv_scale):
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)


GRADS = {
    "finite": lambda dt: [rand(3, 4).to(dt), rand(5, seed=1).to(dt)],
    "inf": lambda dt: [rand(3, 4).to(dt), torch.tensor([1.0, float("inf"), 2.0]).to(dt)],
    "nan": lambda dt: [torch.tensor([[float("nan"), 1.0]]).to(dt), rand(5, seed=1).to(dt)],
    "noncontiguous": lambda dt: [rand(4, 6).to(dt).t(), rand(2, 3, seed=1).to(dt)[:, ::2]],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=dtype_name)
@pytest.mark.parametrize("case", list(GRADS))
def test_unscale_multiplies_gradients_and_flags_non_finite_values_as_on_cpu(case, dtype):
    check(unscale, GRADS[case](dtype), torch.zeros(()), torch.full((), 0.125))


def test_unscale_keeps_a_raised_flag_and_accepts_one_element_shapes():
    check(unscale, GRADS["finite"](torch.float32), torch.ones(1), torch.full((1,), 0.5))
    check(unscale, [], torch.zeros(()), torch.full((), 0.5))


def test_unscale_errors_match_cpu():
    check(unscale, GRADS["finite"](torch.float32), torch.zeros(()), torch.full((), 0.5, dtype=torch.float64))
    check(unscale, GRADS["finite"](torch.float32), torch.zeros(2), torch.full((), 0.5))
    check(unscale, [torch.arange(4)], torch.zeros(()), torch.full((), 0.5))


UPDATES = {
    "counts_a_good_step": (4.0, 0, 0.0, 2.0, 0.5, 3),
    "grows_after_the_interval": (4.0, 2, 0.0, 2.0, 0.5, 3),
    "backs_off_on_inf": (4.0, 2, 1.0, 2.0, 0.5, 3),
    "backs_off_on_nan": (4.0, 1, float("nan"), 2.0, 0.5, 3),
    "never_grows_to_inf": (3e38, 0, 0.0, 2.0, 0.5, 1),
    "rounds_odd_factors_as_the_cpu": (3.0, 0, 0.0, 1.1, 0.3, 1),
    "backs_off_by_an_odd_factor": (3.0, 0, 1.0, 1.1, 0.3, 1),
}


@pytest.mark.parametrize("case", list(UPDATES))
def test_update_scale_as_on_cpu(case):
    scale, tracker, found, growth, backoff, interval = UPDATES[case]

    def update(s, t, f):
        return torch._amp_update_scale_(s, t, f, growth, backoff, interval)

    check(
        update,
        torch.full((), scale),
        torch.full((), tracker, dtype=torch.int32),
        torch.full((), found),
    )


def test_update_scale_errors_match_cpu():
    def update(s, t, f):
        return torch._amp_update_scale_(s, t, f, 2.0, 0.5, 3)

    check(update, torch.full((), 4.0), torch.zeros((), dtype=torch.int64), torch.zeros(()))
    check(update, torch.full((2,), 4.0), torch.zeros((), dtype=torch.int32), torch.zeros(()))
    check(update, torch.full((), 4.0, dtype=torch.float64), torch.zeros((), dtype=torch.int32), torch.zeros(()))


# ---------------------------------------------------------------------------------------------
# Training with autocast and GradScaler


def cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 5)
    )


def train_amp(model, device, steps, dtype):
    """SGD with momentum under autocast and a GradScaler whose first scale overflows float16 gradients
    (the first steps are skipped and the scale backs off) and that grows every 3 good steps."""
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**24, growth_interval=3)
    g = torch.Generator().manual_seed(1)
    losses, scales = [], []
    for _ in range(steps):
        x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g)
        with torch.autocast(device, dtype=dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, [p.detach().cpu() for p in model.parameters()]


@AUTOCAST_DTYPES
def test_autocast_and_grad_scaler_training_matches_cpu_without_fallbacks(dtype, monkeypatch):
    model = cnn()
    cpu_losses, cpu_scales, cpu_params = train_amp(model, "cpu", 12, dtype)
    monkeypatch.setenv("TINY_FALLBACK", "0")
    with counting() as c:
        tiny_losses, tiny_scales, tiny_params = train_amp(model, DEVICE, 12, dtype)
    assert c["fallbacks"] == 0, f"{c['fallbacks']} op(s) ran through the CPU fallback: {c['fallback_ops']}"
    assert tiny_scales == cpu_scales
    if dtype == torch.float16:
        assert cpu_scales[0] < 2.0**24, "the first steps should overflow float16 and back off"
    assert max(cpu_scales) > min(cpu_scales[3:]), "the scale should grow after good steps"
    # bfloat16 keeps 8 bits: over 12 steps the weights of either device drift from the float32 run by up to
    # 0.007 (tiny 0.0071, the CPU 0.0066 on a weight of 0.2) in different last bits, so they are compared at
    # a few bfloat16 steps; float16 runs agree to 6e-5.
    close = {"rtol": 2e-2, "atol": 1.5e-2} if dtype == torch.bfloat16 else {"rtol": 1e-2, "atol": 1e-3}
    torch.testing.assert_close(torch.tensor(tiny_losses), torch.tensor(cpu_losses), **close)
    for t, p in zip(tiny_params, cpu_params, strict=True):
        torch.testing.assert_close(t, p, **close)


# ---------------------------------------------------------------------------------------------
# Activation checkpointing


def block(x, w1, w2):
    return torch.tanh(x @ w1).sin() @ w2


def gradients(fn, args, *, use_checkpoint, use_reentrant=False, autocast_dtype=None):
    """fn's output and the gradients of its squared sum, the forward (under autocast when autocast_dtype is
    given) checkpointed or not, the backward outside autocast."""
    leaves = [a.detach().to(DEVICE).requires_grad_() for a in args]
    with torch.autocast(DEVICE, dtype=autocast_dtype or torch.float16, enabled=autocast_dtype is not None):
        out = checkpoint(fn, *leaves, use_reentrant=use_reentrant) if use_checkpoint else fn(*leaves)
    out.float().square().sum().backward()
    return out.detach().cpu(), [leaf.grad.cpu() for leaf in leaves]


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_gradients_equal_the_plain_run_and_the_cpu(use_reentrant):
    args = (rand(5, 6), rand(6, 7, seed=1), rand(7, 3, seed=2))
    out, grads = gradients(block, args, use_checkpoint=True, use_reentrant=use_reentrant)
    plain_out, plain_grads = gradients(block, args, use_checkpoint=False)
    torch.testing.assert_close(out, plain_out)
    for g, p in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(g, p)
    cpu_args = [a.clone().requires_grad_() for a in args]
    block(*cpu_args).square().sum().backward()
    for g, c in zip(grads, cpu_args, strict=True):
        torch.testing.assert_close(g, c.grad)


def dropout_block(x, w):
    return F.dropout(torch.tanh(x @ w), p=0.5, training=True) * 3


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_recomputes_dropout_with_the_same_tiny_random_numbers(use_reentrant):
    args = (rand(16, 8), rand(8, 32, seed=1))
    torch.manual_seed(7)
    plain_out, plain_grads = gradients(dropout_block, args, use_checkpoint=False)
    torch.manual_seed(7)
    out, grads = gradients(dropout_block, args, use_checkpoint=True, use_reentrant=use_reentrant)
    dropped = (plain_out == 0).float().mean().item()
    assert 0.3 < dropped < 0.7, f"dropout zeroed {dropped:.0%} of the outputs"
    assert torch.equal(out, plain_out)
    for g, p in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(g, p)
    # the recomputation left the generator where the plain run left it
    after = torch.rand(4, device=DEVICE).cpu()
    torch.manual_seed(7)
    gradients(dropout_block, args, use_checkpoint=False)
    assert torch.equal(after, torch.rand(4, device=DEVICE).cpu())


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_recomputes_under_the_forward_autocast_state(use_reentrant):
    args = (rand(5, 6), rand(6, 7, seed=1), rand(7, 3, seed=2))
    plain_out, plain_grads = gradients(block, args, use_checkpoint=False, autocast_dtype=torch.bfloat16)
    out, grads = gradients(block, args, use_checkpoint=True, use_reentrant=use_reentrant, autocast_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, plain_out)
    for g, p in zip(grads, plain_grads, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, p)
