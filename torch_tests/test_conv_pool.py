"""Convolution, pooling and interpolation against PyTorch CPU: values, gradients, options, layouts,
dtypes, errors, and the kernels a fused forward launches."""

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import (
    check,
    check_devices,
    check_half_against_float32,
    conv_block,
    counting,
    on_device,
    rand,
    run_with,
    tol,
)
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_tiny

HALF = (torch.float16, torch.bfloat16)


def check_grads(fn, *args, rtol=None, atol=None):
    """fn(*args) and the gradients of its float inputs for the same upstream gradient, tiny vs CPU.

    Gradients compare by value (torch lays out a leaf's .grad like the leaf, whatever the backward
    kernel returned)."""

    def run(device):
        inputs = [on_device(a, device) for a in args]
        wants = [a for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point()]
        for a in wants:
            a.requires_grad_()
        y = fn(*inputs)
        upstream = rand(*y.shape, dtype=y.dtype, seed=99).to(device)
        grads = torch.autograd.grad(y, wants, upstream)
        return (y.detach(), *(g.contiguous() for g in grads))

    check_devices(run, rtol=rtol, atol=atol)


# ---- convolution ----


@pytest.mark.parametrize(
    "conv, x_shape, w_shape, options",
    [
        (F.conv2d, (4, 3, 64, 64), (24, 3, 3, 3), {"stride": 2, "padding": 1}),  # ShuffleNet's first
        (F.conv2d, (2, 3, 45, 64), (8, 3, 3, 3), {"stride": 2, "padding": 1}),
        (F.conv2d, (2, 3, 50, 96), (5, 3, 5, 5), {"stride": 3, "padding": 2}),
        (F.conv2d, (2, 3, 40, 64), (6, 3, 3, 3), {"stride": 2, "padding": 2, "dilation": 2}),
        (F.conv2d, (2, 4, 40, 64), (6, 2, 3, 3), {"stride": 2, "padding": 1, "groups": 2}),
        (F.conv2d, (2, 3, 33, 36), (4, 3, 3, 3), {"stride": (1, 2), "padding": (0, 1)}),
        (F.conv1d, (2, 3, 64), (5, 3, 3), {"stride": 2, "padding": 1}),
        (F.conv3d, (1, 2, 9, 36, 64), (3, 2, 3, 3, 3), {"stride": 2, "padding": 1}),
    ],
)
def test_strided_convolutions_to_few_channels_and_their_gradients_match_cpu(conv, x_shape, w_shape, options):
    # no dim but the output columns divides into vectors: the input's windows are read from a copy unfolded along
    # them (unfolded_window), the weight gradient sums over them in vectors. The weight gradient sums up to 16K
    # products (values to ~200) in another order than torch's: against float64, tiny's error is at most torch's
    # (7e-5 against 3.5e-4 in the first case, 4.7e-5 against 2.5e-5 in the third).
    check_grads(lambda x, w: conv(x, w, **options), rand(*x_shape), rand(*w_shape, seed=1), rtol=1e-5, atol=1e-3)


CONV2D_OPTIONS = [
    {},
    {"stride": 2, "padding": 1},
    {"stride": 3, "padding": 2, "dilation": 2},  # stride larger than the kernel
    {"padding": 4},  # padding larger than the kernel
    {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)},
    {"padding": "same", "dilation": 2},
    {"padding": "valid"},
]


@pytest.mark.parametrize("options", CONV2D_OPTIONS, ids=str)
def test_conv2d_values_and_gradients_match_cpu(options):
    check_grads(
        lambda x, w, b: F.conv2d(x, w, b, **options), rand(2, 3, 9, 7), rand(4, 3, 3, 2, seed=1), rand(4, seed=2)
    )


def test_grouped_depthwise_and_pointwise_conv2d():
    x = rand(2, 4, 6, 6)
    check_grads(lambda x, w: F.conv2d(x, w, groups=2, padding=1), x, rand(6, 2, 3, 3, seed=1))
    check_grads(lambda x, w, b: F.conv2d(x, w, b, groups=4, stride=2), x, rand(8, 1, 3, 3, seed=1), rand(8, seed=2))
    check_grads(lambda x, w: F.conv2d(x, w), x, rand(5, 4, 1, 1, seed=1))


def test_conv1d_and_conv3d_match_cpu():
    check_grads(
        lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
        rand(2, 3, 11),
        rand(4, 3, 3, seed=1),
        rand(4, seed=2),
    )
    check_grads(lambda x, w: F.conv1d(x, w, groups=3, padding="same"), rand(2, 3, 8), rand(6, 1, 4, seed=1))
    check_grads(
        lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1),
        rand(1, 2, 4, 5, 3),
        rand(3, 2, 2, 3, 2, seed=1),
        rand(3, seed=2),
    )


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"stride": 2, "padding": 1, "output_padding": 1},
        {"stride": 3, "padding": 2, "dilation": 2, "groups": 2},
        {"stride": (1, 2), "output_padding": (0, 1)},
    ],
    ids=str,
)
def test_conv_transpose2d_values_and_gradients_match_cpu(options):
    check_grads(
        lambda x, w, b: F.conv_transpose2d(x, w, b, **options),
        rand(2, 4, 5, 4),
        rand(4, 3, 3, 2, seed=1),
        rand(3 * options.get("groups", 1), seed=2),
    )


def test_conv_transpose1d_and_3d_match_cpu():
    check_grads(
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1),
        rand(2, 3, 6),
        rand(3, 4, 3, seed=1),
        rand(4, seed=2),
    )
    check_grads(lambda x, w: F.conv_transpose3d(x, w, stride=2), rand(1, 2, 3, 2, 3), rand(2, 3, 2, 2, 2, seed=1))


# Strided input gradients (and strided transposed convolutions) are computed phase by phase: the input positions
# p, p + stride, ... of each dim take a fixed subset of the kernel's taps (none at all for a 1 x 1 kernel's odd
# positions, or where the dilation skips them), each phase a stride-1 convolution written into strided positions.
@pytest.mark.parametrize(
    "options",
    [
        {"stride": 2},
        {"stride": 2, "padding": 1, "dilation": 3},
        {"stride": (3, 2), "padding": (2, 0), "dilation": (2, 2)},  # dilation and stride share a factor: skipped taps
        {"stride": 4, "padding": 3},  # stride past the kernel: positions no tap reaches
        {"stride": (2, 3), "padding": (1, 2), "groups": 2},
    ],
    ids=str,
)
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (4, 2)], ids=str)
def test_strided_input_gradients_and_transposed_convolutions_match_cpu(options, kernel):
    groups = options.get("groups", 1)
    check_grads(lambda x, w: F.conv2d(x, w, **options), rand(2, 4, 11, 10), rand(6, 4 // groups, *kernel, seed=1))
    transposed = {**options, "output_padding": 1}
    check_grads(
        lambda x, w, b: F.conv_transpose2d(x, w, b, **transposed),
        rand(2, 4, 4, 5),
        rand(4, 6 // groups, *kernel, seed=1),
        rand(6, seed=2),
    )


def test_strided_input_gradient_runs_one_kernel_a_phase():
    # 3 x 3 stride 2: each of the 2 x 2 phases sums its taps (2 x 2, 2 x 1, 1 x 2, 1 x 1) over the output channels,
    # no division by the stride in its index math; a 1 x 1 kernel's three odd phases are zeros, not sums
    def kernels(k):
        x, w = rand(2, 8, 9, 8).to("tiny").requires_grad_(), rand(16, 8, k, k, seed=1).to("tiny")
        y = F.conv2d(x, w, stride=2, padding=k // 2)
        torch.tiny.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
            (got,) = torch.autograd.grad(y, [x], rand(*y.shape, seed=2).to("tiny"))
            got = got.cpu()
        xc = x.detach().cpu().requires_grad_()
        (want,) = torch.autograd.grad(F.conv2d(xc, w.cpu(), stride=2, padding=k // 2), [xc], rand(*y.shape, seed=2))
        torch.testing.assert_close(got, want)
        return [e.name for e in prof.events() if e.name[:2] == "R_"]

    assert len(kernels(3)) == 4, kernels(3)
    assert len(kernels(1)) == 1, kernels(1)


def test_the_phases_of_a_strided_input_gradient_read_one_padded_copy_of_grad_output():
    # each phase's windows are an offset into one grad_output padded for all of them, so the lowering copies it
    # (padded, channels-last) once, not once a phase: 10 kernels, that copy, a weight panel and a sum a phase, and the
    # fresh storage's first write
    x, w = rand(2, 32, 16, 16).to("tiny").requires_grad_(), rand(64, 32, 3, 3, seed=1).to("tiny")
    y = F.conv2d(x, w, stride=2, padding=1)
    torch.tiny.synchronize()
    with counting() as c:
        (got,) = torch.autograd.grad(y, [x], rand(*y.shape, seed=2).to("tiny"))
        torch.tiny.synchronize()
    assert c["kernels"] == 10
    xc = x.detach().cpu().requires_grad_()
    (want,) = torch.autograd.grad(F.conv2d(xc, w.cpu(), stride=2, padding=1), [xc], rand(*y.shape, seed=2))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)  # 32 x 9 products: the sums' order differs


def test_a_transposed_convolutions_weight_gradient_runs_in_vector_lanes():
    # a DCGAN generator's first layer: (32, 100, 1, 1) noise to (32, 256, 4, 4). Its weight gradient's output channels
    # and taps coalesce into one loop, which its grad_output's panel copy (lanes along the channels) walks only through
    # divisions: the kernel unmerges them and takes lanes along the channels (it was a scalar block, 3.6 ms on one
    # thread; 0.5 now)
    z, w, gy = rand(32, 100, 1, 1), rand(100, 256, 4, 4, seed=1), rand(32, 256, 4, 4, seed=2)
    wt = w.to("tiny").requires_grad_()
    y = F.conv_transpose2d(z.to("tiny"), wt)
    torch.tiny.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        (got,) = torch.autograd.grad(y, [wt], gy.to("tiny"))
        got = got.cpu()
    sums = [e.name for e in prof.events() if e.name.startswith("R_")]
    assert sums and all("_v" in k for k in sums), sums
    wc = w.clone().requires_grad_()
    (want,) = torch.autograd.grad(F.conv_transpose2d(z, wc), [wc], gy)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("groups", [1, 2])
def test_a_transposed_convolution_of_single_positions_is_a_matmul(groups):
    # a generator's first layer, noise (N, C, 1, 1) to (N, O, k, k): each output position takes one tap of the
    # weight (with padding, dilation or output padding it goes through the adjoint windows, checked alike)
    x, w, b = rand(4, 6, 1, 1), rand(6, 10 // groups, 4, 3, seed=1), rand(10, seed=2)
    check_grads(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, groups=groups), x, w, b)
    check_grads(lambda x, w: F.conv_transpose2d(x, w, padding=1, groups=groups), x, w)
    check_grads(lambda x, w: F.conv_transpose1d(x, w, dilation=2, groups=groups), rand(4, 6, 1), rand(6, 5, 3, seed=3))


def test_transposed_convolution_to_an_empty_output_matches_cpu():
    # (in - 1) * stride - 2 * padding + kernel + output_padding = 0: torch gives an empty result, not an error
    check(lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=3, output_padding=1), rand(2, 1, 3), rand(1, 3, 1))
    check(lambda x, w: F.conv_transpose1d(x, w, padding=2), rand(2, 4, 2), rand(4, 2, 3, seed=1))


def test_conv_reads_non_contiguous_inputs_and_keeps_channels_last():
    x = rand(2, 3, 8, 8)
    w = rand(4, 3, 3, 3, seed=1)
    check(lambda x, w: F.conv2d(x, w, padding=1), x.to(memory_format=torch.channels_last), w)
    check(lambda x, w: F.conv2d(x, w), x, w.to(memory_format=torch.channels_last))
    check_grads(lambda x, w: F.conv2d(x[:, :, ::2, 1:], w.transpose(2, 3)), rand(2, 3, 12, 9), w)
    check_grads(lambda x, w: F.conv2d(x.transpose(1, 3), w, stride=2), rand(2, 9, 7, 3), w)


@pytest.mark.parametrize("dtype", (torch.float64,) + HALF, ids=str)
def test_conv_float64_and_half_precision(dtype):
    x, w, b = rand(2, 3, 6, 6, dtype=dtype), rand(4, 3, 3, 3, dtype=dtype, seed=1), rand(4, dtype=dtype, seed=2)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, **tol(dtype))
    transposed = lambda x, w, b: F.conv_transpose2d(x, w.transpose(0, 1), b, stride=2)  # noqa: E731
    if dtype in (torch.float16, torch.bfloat16):
        check_half_against_float32(transposed, x, w, b, **tol(dtype))
    else:
        check(transposed, x, w, b, **tol(dtype))
    check_grads(lambda x, w, b: F.conv2d(x, w, b, stride=2), x, w, b, **tol(dtype))


def test_integer_convolution_wraps_like_cpu():
    x, w = rand(2, 3, 6, 6, dtype=torch.int64), rand(4, 3, 3, 3, dtype=torch.int64, seed=1)
    check(lambda x, w: F.conv2d(x, w, padding=1, dilation=2), x, w)
    check(lambda x, w: F.conv2d(x, w, stride=2), x.to(torch.int32), w.to(torch.int32))
    check(lambda x, w: F.conv2d(x, w, dilation=2), x.to(torch.int32), w.to(torch.int32))  # CPU: not implemented


def test_empty_batch_convolution():
    check_grads(
        lambda x, w, b: F.conv2d(x, w, b, padding=1), rand(0, 3, 5, 5), rand(4, 3, 3, 3, seed=1), rand(4, seed=2)
    )


def test_bad_convolutions_raise_like_cpu():
    x, w = rand(2, 3, 6, 6), rand(4, 3, 3, 3, seed=1)
    check(lambda x, w: F.conv2d(x, w), rand(2, 2, 6, 6), w)  # channels
    check(lambda x, w: F.conv2d(x, w), x, w.double())  # dtypes
    check(lambda x, w, b: F.conv2d(x, w, b), x, w, rand(4, dtype=torch.float64))
    check(lambda x, w: F.conv2d(x, w), rand(2, 3, 2, 2), w)  # input smaller than the kernel
    check(lambda x, w: F.conv2d(x, w, stride=0), x, w)
    check(lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2), rand(2, 4, 3, 3), w)


# Stride 1: the weight gradient sums the input over grad_output's adjoint windows (conv_weight_grad_adjoint), big
# enough that the lowering copies grad_output padded and channels-last; a batch of 16 sums in two chunks.
STRIDE_ONE_OPTIONS = [
    {"padding": 1},
    {},
    {"padding": (2, 0), "dilation": (2, 1)},
    {"padding": "same", "dilation": 2},
    {"padding": 3},  # beyond the kernel's reach: the windows of the padded input instead
    {"padding": 1, "groups": 2},
]


@pytest.mark.parametrize("options", STRIDE_ONE_OPTIONS, ids=str)
def test_stride_one_conv2d_gradients_match_cpu(options):
    w = rand(12, 16 // options.get("groups", 1), 3, 3, seed=1)
    x, b = rand(16, 16, 10, 9), rand(12, seed=2)
    check_grads(lambda x, w, b: F.conv2d(x, w, b, **options), x, w, b, rtol=1e-5, atol=1e-4)  # sums of 1440 products


def test_stride_one_conv1d_conv3d_and_float64_gradients_match_cpu():
    loose = {"rtol": 1e-5, "atol": 1e-4}
    conv1d = lambda x, w: F.conv1d(x, w, padding=2, dilation=2)  # noqa: E731
    check_grads(conv1d, rand(16, 16, 40), rand(16, 16, 3, seed=1), **loose)
    check_grads(lambda x, w: F.conv3d(x, w, padding=1), rand(8, 16, 6, 6, 5), rand(16, 16, 3, 3, 3, seed=1), **loose)
    x, w = rand(16, 16, 10, 9, dtype=torch.float64), rand(12, 16, 3, 3, dtype=torch.float64, seed=1)
    check_grads(lambda x, w: F.conv2d(x, w, padding=1), x, w)


WEIGHT_GRADIENT_READS_THE_COPY = """
import torch, torch.nn.functional as F
from conftest import conv2d_gradient_kernels, rand


def kernels(wanted):
    return conv2d_gradient_kernels(
        rand(16, 16, 10, 10), rand(16, 16, 3, 3, seed=1), rand(16, 16, 10, 10, seed=2), wanted, padding=1
    )


(alone, _), (both, (gx, gw)) = kernels(1), kernels(2)
# the sum over the whole batch (its input and gradient, 200 KiB, fit in L2: no chunks' partial sums to add) and
# the total in the weight's layout
assert both - alone == 2, (alone, both)
x, w = rand(16, 16, 10, 10).requires_grad_(), rand(16, 16, 3, 3, seed=1).requires_grad_()
want = torch.autograd.grad(F.conv2d(x, w, padding=1), [x, w], rand(16, 16, 10, 10, seed=2))
torch.testing.assert_close(gx.cpu(), want[0])
torch.testing.assert_close(gw.cpu(), want[1], rtol=1e-5, atol=1e-4)
print("ok")
"""


def test_conv_weight_gradient_reads_the_input_gradients_copy_of_grad_output(tmp_path):
    """The weight gradient adds its sums to the input gradient's kernels, no layout copy of its own: the direct
    kernels' (TINY_WINOGRAD=0; a Winograd input gradient reads a padded copy of its own)."""
    run_with(tmp_path, WEIGHT_GRADIENT_READS_THE_COPY, TINY_WINOGRAD="0")


def test_conv_bias_relu_forward_is_one_kernel():
    x, w, b = rand(2, 3, 8, 8).to("tiny"), rand(4, 3, 3, 3, seed=1).to("tiny"), rand(4, seed=2).to("tiny")
    with counting() as c:
        y = F.relu(F.conv2d(x, w, b, padding=1))
        torch.tiny.synchronize()
    assert c["kernels"] == 1
    torch.testing.assert_close(y.cpu(), F.relu(F.conv2d(x.cpu(), w.cpu(), b.cpu(), padding=1)))


# float32 3 x 3 convolutions of stride 1, channels and filters by 16s, outputs of 16 tiles or more, run as Winograd
# kernels on a CPU with AVX-512F (compiler/winograd.h): forward and both gradients, odd sizes, several blocks of tiles a
# row, paddings 0 to 2, a bias, a channels-last input, a computed one. Sums of up to 576 products of values of about 1:
# Winograd's transforms round a few ulp of the sums' magnitudes (about 1e-5 here).
WINOGRAD_CASES = [
    ((2, 32, 12, 12), (32, 32, 3, 3), {"padding": 1}),
    ((2, 16, 7, 33), (48, 16, 3, 3), {"padding": 1}),
    ((3, 32, 11, 10), (16, 32, 3, 3), {"padding": 0}),
    ((1, 16, 7, 6), (32, 16, 3, 3), {"padding": 2}),
    ((2, 16, 8, 8), (16, 16, 3, 3), {"padding": (1, 2)}),
]


def winograd_kernels(prof):
    return [e.name for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and e.name.startswith("W_")]


@pytest.mark.parametrize("x_shape, w_shape, options", WINOGRAD_CASES, ids=str)
def test_winograd_convolutions_and_input_gradients_match_cpu(x_shape, w_shape, options):
    x, w, b = rand(*x_shape), rand(*w_shape, seed=1), rand(w_shape[0], seed=2)
    check_grads(lambda x, w, b: F.conv2d(x, w, b, **options), x, w, b, rtol=1e-4, atol=1e-4)
    check_grads(
        lambda x, w: F.conv2d(F.relu(x), w, **options),
        x.contiguous(memory_format=torch.channels_last),
        w,
        rtol=1e-4,
        atol=1e-4,
    )


def test_a_stride_one_3x3_convolution_and_its_input_gradient_run_winograd_kernels():
    if not torch_tiny._C._winograd(0):
        pytest.skip("tiny:0 has no Winograd kernels (not a CPU with AVX-512F, or TINY_WINOGRAD=0)")
    x = rand(2, 32, 12, 12).to("tiny").requires_grad_()
    w = rand(32, 32, 3, 3, seed=1).to("tiny").requires_grad_()
    torch.tiny.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = F.conv2d(x, w, padding=1)
        grads = torch.autograd.grad(y, [x, w], torch.ones_like(y))  # held: a value nothing holds is not computed
        torch.tiny.synchronize()
    # the forward, the input gradient, the filter gradient's chunks of images (one a thread)
    names = winograd_kernels(prof)
    assert names[:2] == ["W_2_32_32_12_12"] * 2 and len(names) == 3, names
    assert re.fullmatch(r"W_[12]_16_32_32_2", names[2]), names
    xc, wc = x.detach().cpu().requires_grad_(), w.detach().cpu().requires_grad_()
    want = torch.autograd.grad(F.conv2d(xc, wc, padding=1), [xc, wc], torch.ones(2, 32, 12, 12))
    for got, expected in zip(grads, want, strict=True):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        F.conv2d(x, w[:12], padding=1).cpu()  # 12 filters
        F.conv2d(x[:, :, :7, :7], w, padding=1).cpu()  # an output of 7 x 7: 16 tiles, Winograd
        F.conv2d(x[:, :, :6, :7], w, padding=1).cpu()  # of 6 x 7: 12 tiles, direct
    assert winograd_kernels(prof) == ["W_2_32_32_7_7"]


# A convolution of a computed input (a ReLU's, a GELU's, an affine map's) reads a copy that computes the input once,
# not the input's formula at every tap of every window (compiler/lower.cpp, copied_window).
COMPUTED_INPUTS = {"relu": F.relu, "gelu": F.gelu, "affine": lambda x: x * 2 + 1, "exp": torch.exp}


@pytest.mark.parametrize("groups", [1, 4, 8])
@pytest.mark.parametrize("options", [{"padding": 1}, {}, {"stride": 2, "padding": 1}], ids=str)
@pytest.mark.parametrize("computed", COMPUTED_INPUTS)
def test_a_convolution_of_a_computed_input_matches_cpu(computed, options, groups):
    f = COMPUTED_INPUTS[computed]
    x, w = rand(2, 8, 10, 10), rand(16, 8 // groups, 3, 3, seed=1)
    check_grads(lambda x, w: F.conv2d(f(x), w, groups=groups, **options), x, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups", [1, 8])
def test_a_convolution_of_a_relu_launches_the_kernels_of_one_of_a_tensor(groups):
    """The padded window of relu(x) (a pad does not commute with the ReLU) is copied as a tensor's window is, the copy
    computing the ReLU: before, one kernel computed the ReLU at every tap (133 ms against 4.5 at (128, 32, 14, 14) x
    (64, 32, 3, 3)), a depthwise one too (23 ms against 1.9)."""
    x, w = rand(2, 8, 10, 10).to("tiny"), rand(16, 8 // groups, 3, 3, seed=1).to("tiny")
    torch.tiny.synchronize()
    launched = []
    for make_input in (lambda: x, lambda: x.relu()):
        with counting() as c:
            y = F.conv2d(make_input(), w, padding=1, groups=groups)
            torch.tiny.synchronize()
        launched.append(c["kernels"])
    assert launched[1] == launched[0] + (groups > 1)  # a depthwise convolution reads x itself: no copy of x
    torch.testing.assert_close(y.cpu(), F.conv2d(x.cpu().relu(), w.cpu(), padding=1, groups=groups))


# ---- max pooling ----

MAX_POOL_OPTIONS = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": (1, 2), "dilation": (2, 1), "padding": (1, 0)},
    {"kernel_size": 2, "stride": 3, "ceil_mode": True},
]


@pytest.mark.parametrize("options", MAX_POOL_OPTIONS, ids=str)
def test_max_pool2d_values_indices_and_gradients_match_cpu(options):
    x = rand(2, 3, 9, 8)
    check(lambda x: F.max_pool2d(x, return_indices=True, **options), x)
    check_grads(lambda x: F.max_pool2d(x, **options), x)


def test_max_pool2d_picks_torchs_index_for_ties_infinities_and_nans():
    x = torch.tensor(
        [[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 2.0], [-float("inf")] * 4, [0.0, float("nan"), 3.0, float("nan")]]]]
    )
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x)
    check(lambda x: F.max_pool2d(x, 3, stride=1, padding=1, return_indices=True), x)
    check(lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), x)  # from unfolded windows
    check(lambda x: F.max_pool2d(x, 2, stride=1, return_indices=True), torch.full((1, 1, 3, 3), -float("inf")))
    ties = torch.randint(0, 3, (2, 2, 7, 7), generator=torch.Generator().manual_seed(0)).float()
    check_grads(lambda x: F.max_pool2d(x, 3, stride=2, padding=1), ties)  # overlapping windows


def test_max_pool2d_layouts_unbatched_and_integers():
    x = rand(2, 3, 8, 8)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x.to(memory_format=torch.channels_last))
    check_grads(lambda x: F.max_pool2d(x[:, :, 1:, ::2], 2), rand(2, 3, 9, 16))
    check_grads(lambda x: F.max_pool2d(x, 2), rand(3, 8, 8))
    check_grads(lambda x: F.max_pool1d(x, 3, stride=2), rand(2, 3, 9))
    for dtype in (torch.int64, torch.int32, torch.uint8):
        check(lambda x: F.max_pool2d(x, 2, return_indices=True), rand(2, 3, 8, 8, dtype=torch.int64).abs().to(dtype))


def special_values(*shape, seed=0):
    """Small integers (many ties in a window) with NaNs and infinities sprinkled in."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 3, shape, generator=g).float()
    pick = torch.rand(shape, generator=g)
    x[pick < 0.05] = float("nan")
    x[(pick >= 0.05) & (pick < 0.15)] = -float("inf")
    x[(pick >= 0.15) & (pick < 0.2)] = float("inf")
    return x


POOL_GRADIENT_CASES = [
    (F.max_pool2d, (2, 3, 8, 8), {"kernel_size": 2}),
    (F.max_pool2d, (2, 3, 9, 7), {"kernel_size": 2}),  # odd sizes: the last row and column are in no window
    (F.max_pool2d, (2, 3, 9, 7), {"kernel_size": 2, "ceil_mode": True}),
    (F.max_pool2d, (2, 3, 8, 9), {"kernel_size": (2, 3), "padding": (1, 1)}),  # tiled, padded, not square
    (F.max_pool2d, (2, 3, 9, 8), {"kernel_size": 2, "padding": 1}),
    (F.max_pool2d, (2, 3, 7, 8), {"kernel_size": 2, "stride": 1}),  # overlapping 2x2 windows
    (F.max_pool2d, (2, 3, 7, 8), {"kernel_size": (1, 3), "stride": (1, 2), "dilation": (1, 2)}),
    (F.max_pool2d, (2, 3, 9, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),  # overlapping windows
    (F.max_pool2d, (2, 3, 9, 8), {"kernel_size": (3, 2), "stride": (1, 2), "dilation": (2, 1)}),
    (F.max_pool1d, (2, 3, 11), {"kernel_size": 2}),
    (F.max_pool1d, (2, 3, 11), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    (F.max_pool3d, (2, 2, 4, 6, 5), {"kernel_size": 2}),
    (F.max_pool3d, (2, 2, 5, 6, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (F.adaptive_max_pool2d, (2, 3, 8, 6), {"output_size": (4, 3)}),  # even windows: max pooling's
]


@pytest.mark.parametrize("pool,shape,options", POOL_GRADIENT_CASES, ids=str)
def test_max_pool_gradient_goes_to_torchs_position_for_ties_nans_and_infinities(pool, shape, options):
    check_grads(lambda x: pool(x, **options), special_values(*shape))
    check_grads(lambda x: pool(x, **options), rand(*shape))


def test_max_pool_of_windows_of_minus_infinity_picks_the_first_position_inside_the_input():
    x = torch.full((1, 2, 4, 5), -float("inf"))
    for options in (
        {"kernel_size": 2},
        {"kernel_size": 2, "padding": 1},
        {"kernel_size": 2, "ceil_mode": True},
        {"kernel_size": 3, "stride": 2, "padding": 1},  # ResNet's stem pool, elementwise too
    ):
        check(lambda x, options=options: F.max_pool2d(x, return_indices=True, **options), x)
        check_grads(lambda x, options=options: F.max_pool2d(x, **options), x)


def test_max_pool2d_gradient_of_a_batch_norm_block_channels_last_matches_cpu():
    def block(x, w):
        y = F.batch_norm(F.relu(F.conv2d(x, w, padding=1)), None, None, training=True)
        return F.max_pool2d(y, 2)

    x = rand(4, 3, 10, 10).to(memory_format=torch.channels_last)
    check_grads(block, x, rand(8, 3, 3, 3, seed=1))
    check_grads(block, rand(4, 3, 10, 10), rand(8, 3, 3, 3, seed=1))


def test_max_pool2d_backward_reads_indices_the_user_passes():
    backward = torch.ops.aten.max_pool2d_with_indices_backward
    x, other = special_values(2, 3, 8, 8), special_values(2, 3, 8, 8, seed=1)

    def run(device, change):
        a, b = x.to(device), other.to(device)
        _, indices = F.max_pool2d(b, 2, return_indices=True)  # another input's
        if change == "in place":
            _, indices = F.max_pool2d(a, 2, return_indices=True)
            indices.add_(1).sub_(1)  # the same values, no longer the forward's graph
            indices[0, 0, 0, 0] = 1
        elif change == "realized":
            _, indices = F.max_pool2d(a, 2, return_indices=True)
            indices.cpu()
        elif change == "other geometry":  # the forward's indices, read by a backward of other windows
            _, indices = F.max_pool2d(a, 2, return_indices=True)
            return backward(rand(2, 3, 4, 4).to(device), a, [3, 3], [2, 2], [1, 1], [1, 1], False, indices)
        return backward(rand(2, 3, 4, 4).to(device), a, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)

    for change in ("another input", "in place", "realized", "other geometry"):
        check_devices(lambda device, change=change: run(device, change))


MAX_POOL3D_OPTIONS = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (3, 2, 2), "stride": (1, 2, 1), "dilation": (2, 1, 1), "padding": (1, 0, 1)},
]


@pytest.mark.parametrize("options", MAX_POOL3D_OPTIONS, ids=str)
def test_max_pool3d_values_indices_and_gradients_match_cpu(options):
    x = rand(2, 3, 6, 7, 5)
    check(lambda x: F.max_pool3d(x, return_indices=True, **options), x)
    check_grads(lambda x: F.max_pool3d(x, **options), x)
    check_grads(lambda x: F.max_pool3d(x, **options), rand(3, 6, 7, 5))  # unbatched


def test_max_pool3d_layouts_integers_and_errors():
    x = rand(2, 3, 4, 6, 6)
    check(lambda x: F.max_pool3d(x, 2, return_indices=True), x.to(memory_format=torch.channels_last_3d))
    check(lambda x: F.max_pool3d(x, 2, return_indices=True), (x * 10).to(torch.int64))
    check(lambda x: F.max_pool3d(x, 2), x > 0)  # bool: torch's NotImplementedError
    check(lambda x: F.max_pool3d(x, 2, padding=2), x)  # padding over half the kernel
    check(lambda x: F.max_pool3d(x, 7), x)  # output too small
    check(lambda x: F.max_pool3d(x, 2), rand(6, 6))  # not 4-d or 5-d


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_pooling_half_precision(dtype):
    x = rand(2, 3, 8, 8, dtype=dtype)
    check_grads(lambda x: F.max_pool2d(x, 3, stride=2, padding=1), x, **tol(dtype))
    check_grads(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), x, **tol(dtype))
    check_grads(lambda x: F.adaptive_avg_pool2d(x, 3), x, **tol(dtype))


def test_max_pool2d_of_a_product_is_one_kernel():
    x = rand(2, 3, 8, 8).to("tiny")
    with counting() as c:
        y = F.max_pool2d(x * 2, 2)
        torch.tiny.synchronize()
    assert c["kernels"] == 1
    torch.testing.assert_close(y.cpu(), F.max_pool2d(x.cpu() * 2, 2))


@pytest.mark.parametrize("sync_between", [False, True], ids=["one graph", "forward synced"])
def test_max_pool_gradient_through_overlapping_strided_windows_is_written_phase_by_phase(sync_between):
    # ResNet's stem pool: each of the 2 x 2 phases of the input (even and odd rows and columns) takes a fixed set
    # of the windows' taps; its gradient is one kernel of shifted reads (no sum over the windows, no division by the
    # stride), written into its strided positions, with the forward's window offsets or with the flat indices a
    # synced forward leaves
    x = special_values(2, 3, 9, 8)
    xt = x.to("tiny").requires_grad_()
    yt = F.max_pool2d(xt, 3, stride=2, padding=1)
    gy = rand(*yt.shape, seed=3)
    if sync_between:
        torch.tiny.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        (got,) = torch.autograd.grad(yt, [xt], gy.to("tiny"))
        got = got.cpu()
    kernels = [e.name for e in prof.events() if e.name[:2] in ("E_", "R_")]
    assert not [k for k in kernels if k.startswith("R_")], kernels
    xc = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(F.max_pool2d(xc, 3, stride=2, padding=1), [xc], gy)
    assert torch.equal(got, want)


def test_bad_pooling_raises_like_cpu():
    x = rand(2, 3, 8, 8)
    check(lambda x: F.max_pool2d(x, 2, padding=2), x)  # padding over half the kernel
    check(lambda x: F.max_pool2d(x, 0), x)
    check(lambda x: F.max_pool2d(x, 9), x)  # output too small
    check(lambda x: F.avg_pool2d(x, 2, padding=3), x)
    check(lambda x: F.adaptive_avg_pool2d(x, (2, 2, 2)), x)
    check(lambda x: F.max_pool2d(x, 2), x > 0)  # bool


# ---- average pooling ----

AVG_POOL_OPTIONS = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
    {"kernel_size": (3, 2), "stride": (2, 3), "divisor_override": 5},
]


@pytest.mark.parametrize("options", AVG_POOL_OPTIONS, ids=str)
def test_avg_pool2d_values_and_gradients_match_cpu(options):
    check_grads(lambda x: F.avg_pool2d(x, **options), rand(2, 3, 9, 8))


def test_avg_pool_1d_3d_integers_and_layouts():
    check_grads(lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True), rand(2, 3, 10))
    check_grads(lambda x: F.avg_pool3d(x, 2, stride=(1, 2, 2), padding=1, count_include_pad=False), rand(1, 2, 4, 5, 6))
    check(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), rand(2, 3, 8, 8, dtype=torch.int64))
    check(lambda x: F.avg_pool2d(x, 2), rand(2, 3, 8, 8).to(memory_format=torch.channels_last))
    check(lambda x: F.avg_pool2d(x, 2), rand(2, 3, 8, 8, dtype=torch.int32))  # CPU: not implemented


# ---- adaptive average pooling ----


@pytest.mark.parametrize("size", [1, 3, (4, 5), (7, 9), (2, 1)], ids=str)
def test_adaptive_avg_pool2d_values_and_gradients_match_cpu(size):
    check_grads(lambda x: F.adaptive_avg_pool2d(x, size), rand(2, 3, 6, 8))


def test_adaptive_avg_pool_3d_unbatched_and_layouts():
    check_grads(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), rand(1, 2, 5, 6, 7))
    check_grads(lambda x: F.adaptive_avg_pool2d(x, (3, 5)), rand(3, 7, 7))
    check(lambda x: F.adaptive_avg_pool2d(x, 3), rand(2, 3, 7, 7).to(memory_format=torch.channels_last))


# ---- interpolation ----

SIZES = [{"scale_factor": 2}, {"size": (9, 4)}, {"scale_factor": 1.7}, {"scale_factor": 0.5}, {"size": (5, 7)}]


@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bicubic"])
def test_interpolate2d_values_and_gradients_match_cpu(mode, size):
    aligns = [False, True] if mode in ("bilinear", "bicubic") else [None]
    for align in aligns:
        check_grads(lambda x, a=align: F.interpolate(x, mode=mode, align_corners=a, **size), rand(2, 3, 5, 7))


def test_interpolate_1d_3d_and_layouts():
    check_grads(lambda x: F.interpolate(x, size=11, mode="linear"), rand(2, 3, 5))
    check_grads(lambda x: F.interpolate(x, scale_factor=3, mode="nearest"), rand(2, 3, 5))
    check_grads(lambda x: F.interpolate(x, size=(3, 6, 9), mode="trilinear", align_corners=True), rand(1, 2, 4, 5, 6))
    check_grads(lambda x: F.interpolate(x, scale_factor=(1, 2, 1.5), mode="nearest"), rand(1, 2, 2, 3, 4))
    x = rand(2, 3, 5, 7).to(memory_format=torch.channels_last)
    check(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), x)
    check(lambda x: F.interpolate(x, size=(6, 6), mode="nearest"), (rand(1, 2, 4, 4) * 50).to(torch.uint8))


@pytest.mark.parametrize("dtype", (torch.float64,) + HALF, ids=str)
def test_interpolate_float64_and_half_precision(dtype):
    x = rand(2, 3, 5, 7, dtype=dtype)
    for mode in ("nearest", "bilinear", "bicubic"):
        check_grads(lambda x, m=mode: F.interpolate(x, size=(8, 9), mode=m), x, **tol(dtype))


AA_SIZES = [{"size": (4, 5)}, {"size": (3, 11)}, {"scale_factor": 0.3}, {"size": (13, 9)}, {"size": (5, 7)}]


@pytest.mark.parametrize("size", AA_SIZES, ids=str)
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_interpolation_values_and_gradients_match_cpu(mode, size):
    """antialias=True: each output's window widens with the downscale factor (torch's separable passes)."""
    for align in (False, True):
        check_grads(
            lambda x, a=align: F.interpolate(x, mode=mode, align_corners=a, antialias=True, **size), rand(2, 3, 17, 23)
        )
    check_grads(
        lambda x: F.interpolate(x, size=(4, 6), mode=mode, antialias=True), rand(1, 2, 40, 9, dtype=torch.float64)
    )


def test_antialiased_interpolation_keeps_an_inf_outside_a_window_out_and_refuses_half():
    x = rand(1, 1, 12, 12)
    x[0, 0, 0, 11] = float("inf")
    x[0, 0, 11, 0] = float("nan")
    check(lambda x: F.interpolate(x, size=(5, 5), mode="bicubic", antialias=True), x)
    g = rand(1, 1, 5, 5)
    g[0, 0, 0, 4] = float("inf")
    check(lambda g: torch.ops.aten._upsample_bilinear2d_aa_backward(g, [5, 5], [1, 1, 12, 12], False), g)
    for dtype in HALF:  # torch computes the weights in the input's dtype: float and double only
        check(lambda x: F.interpolate(x, size=(2, 2), mode="bilinear", antialias=True), rand(1, 1, 4, 4, dtype=dtype))


def test_integer_factor_nearest_upsampling_fuses_into_its_consumer():
    x = rand(2, 3, 4, 4).to("tiny")
    with counting() as c:
        y = F.interpolate(x, scale_factor=2) + 1
        torch.tiny.synchronize()
    assert c["kernels"] == 1
    torch.testing.assert_close(y.cpu(), F.interpolate(x.cpu(), scale_factor=2) + 1)


def test_stacked_conv_block_values_and_gradients_match_cpu():
    """conv-relu-conv-relu-batchnorm-maxpool: each conv reads the previous one's realized output."""

    def run(dev):
        torch.manual_seed(0)
        block = nn.Sequential(*conv_block(1, 4)).to(dev)
        x = rand(3, 1, 10, 10).to(dev)
        y = block(x)
        y.square().sum().backward()
        return y.detach(), [p.grad for p in block.parameters()]

    check_devices(run, rtol=1e-3, atol=1e-3)
