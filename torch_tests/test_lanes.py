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
