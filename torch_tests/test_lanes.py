"""Reductions whose outputs the compiler computes 16 at a time as vector lanes, against the CPU.

A reduction gets lanes along an output dim of 16 or more that every read walks contiguously or not at
all (x @ w with w row-major, a convolution along its output channels once the filters are copied
channel-innermost). These shapes reach that path, with each kind of lane value: contiguous vector
loads, broadcast scalars, strided and masked loads built lane by lane, whole-vector and lane-by-lane
ops (max, comparisons, casts, half-precision rounding), and stores to contiguous and strided places.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import by_dtype, check, rand, tol

MATMUL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32)


@by_dtype(MATMUL_DTYPES)
@pytest.mark.parametrize("m,k,n", [(16, 24, 32), (40, 7, 64), (130, 33, 48), (3, 5, 16)])
def test_matmul_lanes(dtype, m, k, n):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype, seed=1)
    check(lambda x, y: x @ y, a, b, **tol(dtype))


@pytest.mark.parametrize("n", [32, 48])
def test_matmul_lanes_epilogue_and_views(n):
    a, b, bias = rand(64, 20), rand(20, n, seed=1), rand(n, seed=2)
    check(lambda x, y, z: torch.relu(x @ y + z), a, b, bias)
    check(lambda x, y: x[::2] @ y[:, :n], rand(128, 20), rand(20, n + 16, seed=1))
    check(lambda x, y: torch.bmm(x, y), rand(3, 17, 9), rand(3, 9, n, seed=1))
    check(lambda x, y: torch.sigmoid(x @ y).sum(0), a, b)


@by_dtype((torch.float32, torch.float64, torch.int32, torch.bool, torch.float16))
def test_reductions_across_lanes(dtype):
    x = rand(24, 40, 32, dtype=dtype) if dtype != torch.bool else rand(24, 40, 32) > 0
    check(lambda t: t.sum(1), x, **tol(dtype))
    if dtype != torch.bool:
        check(lambda t: t.amax(1), x)
        check(lambda t: t.argmax(1), x)
        check(lambda t: t.prod(0), x[:3], **tol(dtype))
    else:
        check(lambda t: (t.any(1), t.all(0)), x)


def test_masked_and_strided_lane_reads():
    x = rand(20, 30, 32)
    check(lambda t: F.pad(t, (0, 0, 2, 3)).sum(1), x)
    check(lambda t: F.pad(t, (3, 1)).sum(1), x[..., :28])
    check(lambda t: t.transpose(0, 2).sum(1), x)
    check(lambda t: t[:, :, ::2].repeat(1, 1, 2).mean(1), x)


@pytest.mark.parametrize(
    "cin,cout,kw",
    [
        (16, 32, {"padding": 1}),
        (8, 48, {"padding": 2, "dilation": 2}),
        (32, 16, {"stride": 2, "padding": 1}),
        (32, 32, {"groups": 2, "padding": 1}),
        (3, 16, {}),
    ],
)
def test_conv2d_lanes_forward_and_backward(cin, cout, kw):
    g = kw.get("groups", 1)
    x, w, b = rand(4, cin, 9, 10), rand(cout, cin // g, 3, 3, seed=1), rand(cout, seed=2)

    def run(x, w, b):
        x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
        y = F.conv2d(x, w, b, **kw)
        grads = torch.autograd.grad((y * y.detach().cos()).sum(), (x, w, b))
        return (y, *grads)

    check(run, x, w, b, rtol=1e-4, atol=1e-3)


def test_conv2d_lanes_batch_chunks():
    """A batch of 16 or more sums the weight gradient in chunks of 8."""
    x, w = rand(24, 16, 6, 6), rand(16, 16, 3, 3, seed=1)

    def run(x, w):
        x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
        return torch.autograd.grad(F.conv2d(x, w, padding=1).square().sum(), (x, w))

    check(run, x, w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16, torch.float64), ids=str)
def test_conv2d_lanes_dtypes(dtype):
    x, w = rand(2, 16, 7, 7, dtype=dtype), rand(32, 16, 3, 3, dtype=dtype, seed=1)
    check(lambda a, b: F.conv2d(a, b, padding=1), x, w, **tol(dtype))


# Reductions along a contiguous axis of 64 or more (a multiple of 16) step their loop by 16 lanes and
# combine the lanes after it.

REDUCE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8)


@by_dtype(REDUCE_DTYPES)
def test_row_reductions_over_lanes(dtype):
    x = rand(12, 256, dtype=dtype)
    check(lambda t: (t.sum(-1), t.amax(-1), t.amin(-1), t.max(-1)), x, **tol(dtype))
    check(lambda t: (t.argmax(-1), t.argmin(-1)), x)
    check(lambda t: t.sum(), rand(4096, dtype=dtype), **tol(dtype))
    if dtype.is_floating_point:
        check(lambda t: (t.mean(-1), t.var(-1), t.std(1)), x, **tol(dtype))
        check(lambda t: (t.softmax(-1), t.log_softmax(-1), t.logsumexp(-1)), x, **tol(dtype))


def test_row_reductions_over_lanes_propagate_nan_and_inf():
    x = rand(6, 128)
    x[0, 5] = float("nan")
    x[1, 127] = float("nan")
    x[2, 64] = float("inf")
    x[3, 17] = float("-inf")
    x[4] = float("-inf")
    check(lambda t: (t.amax(-1), t.amin(-1), t.sum(-1), t.max(-1).values), x)


def test_bool_and_prod_rows_over_lanes():
    b = rand(5, 192) > 1.5
    check(lambda t: (t.any(-1), t.all(-1), t.sum(-1)), b)
    check(lambda t: t.prod(-1), 1 + rand(5, 64) * 0.01)


def test_layer_norm_and_cross_entropy_rows_over_lanes():
    x, w, b = rand(8, 7, 320), rand(320, seed=1), rand(320, seed=2)
    check(lambda t, w, b: F.layer_norm(t, (320,), w, b), x, w, b, rtol=1e-4, atol=1e-5)
    logits, target = rand(32, 64), torch.arange(32) % 64
    check(lambda t, y: F.cross_entropy(t, y), logits, target)
