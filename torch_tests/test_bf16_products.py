"""bfloat16 matmuls and convolutions against the CPU, at shapes where tiny's CPU kernels read the right
operand from a lane panel: on a CPU with AVX512_BF16 that panel is interleaved by pairs of the reduced
axis and each step is a pair dot product (vdpbf16ps, which reads bfloat16 denormals as zero); elsewhere,
or where the C compiler does not target AVX512_BF16, the same loop widens each pair and multiply-adds.
On a CPU with AMX-BF16 tiles, blocks of 16 or 32 rows accumulate in tiles (tdpbf16ps, the same
rounding), 32 of the reduced axis a step, the rest by pair dot products.
Either way the sums accumulate in float32 and round to bfloat16 once, as torch's do."""

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import check, conv2d_gradient_kernels, rand, run_with, tol

import torch_tiny

BF16 = tol(torch.bfloat16)


def conv_backward(x, w, gy):
    """The input and weight gradients of conv2d(x, w, padding=1) for the output gradient gy."""
    return torch.ops.aten.convolution_backward(
        gy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False]
    )[:2]


def bf16(*shape, seed=0):
    return rand(*shape, dtype=torch.bfloat16, seed=seed)


def rounded_once(fn):
    """fn, computed on the CPU in float32 from the same bfloat16 values and rounded to bfloat16 at the end.

    The reference for convolution gradients: a CPU with AVX512_BF16 or AMX gives these values, as tiny
    does everywhere; without them torch's bfloat16 convolution gradients round partial sums to bfloat16
    (Zen 3: 2 ulp off at ~4.6% of the elements, four times tiny's distance from a float64 reference).
    """

    def run(*args):
        if args[0].device.type != "cpu":
            return fn(*args)
        out = fn(*(a.float() for a in args))
        return tuple(o.bfloat16() for o in out) if isinstance(out, tuple) else out.bfloat16()

    return run


@pytest.mark.parametrize("k", [96, 97], ids=["even_k", "odd_k"])
def test_mm_and_bmm_match_cpu(k):
    check(torch.mm, bf16(64, k), bf16(k, 512, seed=1), **BF16)
    check(torch.bmm, bf16(2, 64, k, seed=2), bf16(2, k, 512, seed=3), **BF16)


# (M, K, N): rows that fill no tile or part of one (1, 15, 17, 33, 100), tiles of 16 and 32 rows (64, 80),
# reduced axes shorter than a tile step (17), one step and a remainder (34, 100), columns fewer than a panel.
ODD_SIZES = [
    (1, 64, 512),
    (15, 100, 512),
    (17, 17, 512),
    (33, 34, 1024),
    (100, 100, 512),
    (64, 100, 512),
    (80, 1000, 512),
    (128, 32, 1024),
    (64, 33, 100),
]


@pytest.mark.parametrize("m,k,n", ODD_SIZES, ids=lambda v: str(v))
def test_mm_at_odd_sizes_matches_cpu(m, k, n):
    check(torch.mm, bf16(m, k), bf16(k, n, seed=1), **BF16)


def test_batched_and_transposed_operands_at_odd_sizes_match_cpu():
    check(torch.bmm, bf16(3, 80, 100), bf16(3, 100, 512, seed=1), **BF16)
    check(torch.bmm, bf16(2, 17, 64, seed=2), bf16(2, 64, 1024, seed=3), **BF16)
    check(lambda a, b: a.t() @ b, bf16(100, 64), bf16(100, 512, seed=1), **BF16)
    check(lambda a, b: a @ b.t(), bf16(64, 100), bf16(512, 100, seed=1), **BF16)
    check(lambda a, b: a.t() @ b.t(), bf16(1000, 80), bf16(512, 1000, seed=1), **BF16)
    check(F.linear, bf16(96, 1000), bf16(512, 1000, seed=1), bf16(512, seed=2), **BF16)
    # a linear layer's weight gradient, tokens-major: a's rows 256 B apart (copied with the tokens innermost where the
    # products pair), b's 128 B apart (a paired panel whatever the stride); 24 rows of output, no tiles
    check(lambda a, b: a.t() @ b, bf16(520, 128, seed=4), bf16(520, 64, seed=5), **BF16)
    check(lambda a, b: a.t() @ b, bf16(256, 24, seed=6), bf16(256, 512, seed=7), **BF16)


@pytest.mark.parametrize(
    "m,k,n", [(16, 1024, 1024), (32, 512, 512), (32, 64, 272), (16, 96, 400), (64, 768, 768)], ids=str
)
def test_mm_of_few_rows_reading_w_in_place_matches_cpu(m, k, n):
    """x @ w of 16, 32 or 64 rows by 256 columns or more: on an AMX host each step's tiles interleave w's pairs of rows
    as they load (no panel copied first), two tiles' columns at a time (n a multiple of 32) or one's; w also a slice of
    a wider matrix at an offset (its rows further apart than its columns), and batched (the rows not the outermost
    loop)."""
    check(torch.mm, bf16(m, k), bf16(k, n, seed=1), **BF16)
    check(lambda a, b: a @ b[3 : 3 + k, 8 : 8 + n], bf16(m, k, seed=2), bf16(k + 5, n + 24, seed=3), **BF16)
    check(torch.bmm, bf16(2, m, k, seed=4), bf16(2, k, n, seed=5), **BF16)


def test_linear_matches_cpu():
    check(F.linear, bf16(256, 64), bf16(32, 64, seed=1), **BF16)
    check(F.linear, bf16(256, 64, seed=2), bf16(64, 64, seed=3), bf16(64, seed=4), **BF16)


@pytest.mark.parametrize("m,n", [(16, 1), (16, 4), (16, 8), (32, 2), (48, 3)], ids=str)
def test_products_of_one_pair_match_cpu(m, n):
    """A reduced axis of 2, one bfloat16 pair: both operands' pairs sat at index 0 and one loaded word served both
    (fuzzer seed 24162: F.linear of (4, 4, 2) by (4, 2) gave 22 for -3)."""
    check(lambda a, b: a @ b.t(), bf16(m, 2), bf16(n, 2, seed=1), **BF16)
    check(F.linear, bf16(m, 2, seed=2), bf16(n, 2, seed=3), bf16(n, seed=4), **BF16)
    check(torch.mm, bf16(m, 2, seed=5), bf16(2, n, seed=6), **BF16)


def test_matmul_of_a_transposed_and_an_offset_operand_matches_cpu():
    a = bf16(96, 64)
    b = bf16(600, 96, seed=1)[40:, :].t()
    check(lambda a, b: a.t() @ b, a, b, **BF16)


def test_conv2d_forward_and_backward_match_cpu():
    x, w = bf16(16, 32, 14, 14), bf16(64, 32, 3, 3, seed=1)
    check(lambda x, w: F.conv2d(x, w, padding=1), x, w, **BF16)
    check(rounded_once(conv_backward), x, w, bf16(16, 64, 14, 14, seed=2), **BF16)


def to_bf16_and_back(t):
    """The activations of rounded_once's float32 reference rounded where bfloat16's are."""
    return t.bfloat16().to(t.dtype)


def test_autograd_through_linear_and_conv_matches_cpu():
    def step(x, w1, w2):
        x, w1, w2 = (t.detach().requires_grad_() for t in (x, w1, w2))
        h = to_bf16_and_back(F.conv2d(x, w1, padding=1).relu())
        out = to_bf16_and_back(F.linear(h.flatten(1), w2))
        out.float().square().sum().backward()
        return out, x.grad, w1.grad, w2.grad

    args = bf16(4, 32, 8, 8), bf16(32, 32, 3, 3, seed=1), bf16(32, 32 * 8 * 8, seed=2)
    check(rounded_once(step), *args, rtol=3e-2, atol=3e-2)


PLAIN_PATH = """
import torch, torch_tiny
import torch.nn.functional as F
g = torch.Generator().manual_seed(0)
a, b = torch.randn(64, 96, generator=g).bfloat16(), torch.randn(96, 512, generator=g).bfloat16()
x, w = torch.randn(8, 32, 14, 14, generator=g).bfloat16(), torch.randn(64, 32, 3, 3, generator=g).bfloat16()
for got, want in ((a.to("tiny") @ b.to("tiny"), a @ b),
                  (F.conv2d(x.to("tiny"), w.to("tiny"), padding=1), F.conv2d(x, w, padding=1))):
    torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=2e-2)
print("ok")
"""


def has_pair_dots():
    """Whether this CPU has AVX512_BF16's pair dot products (which tiny uses where they pay: TINY_PAIR_DOTS)."""
    return platform.machine() == "x86_64" and "avx512_bf16" in Path("/proc/cpuinfo").read_text()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="-mno-avx512bf16 is an x86 flag")
def test_plain_path_without_avx512_bf16_matches_cpu(tmp_path):
    """The kernels lowered for pair dot products (TINY_PAIR_DOTS=1) but compiled for a CPU without AVX512_BF16
    (-mno-avx512bf16), and without AMX tiles, take the pair loop's plain path."""
    run_with(tmp_path, PLAIN_PATH, TINY_CFLAGS="-mno-avx512bf16", TINY_AMX="0", TINY_PAIR_DOTS="1")


@pytest.mark.skipif(not has_pair_dots(), reason="this CPU has no AVX512_BF16")
def test_pair_dots_without_amx_tiles_match_cpu(tmp_path):
    """With AMX tiles kept off (TINY_AMX=0, or a CPU without them) and pair dots asked for, the same matmuls step
    by vdpbf16ps."""
    assert "_mm512_dpbf16_ps(" in run_with(tmp_path, PLAIN_PATH, TINY_AMX="0", TINY_PAIR_DOTS="1", TINY_DEBUG="3")


def test_widened_products_match_cpu(tmp_path):
    """Without pair dots or tiles (TINY_PAIR_DOTS=0, TINY_AMX=0: a CPU whose vdpbf16ps costs more than two
    multiply-adds, or has none) each bfloat16 widens and multiply-adds."""
    assert "dpbf16" not in run_with(tmp_path, PLAIN_PATH, TINY_AMX="0", TINY_PAIR_DOTS="0", TINY_DEBUG="3")


def amx_bf16():
    """Whether tiny multiplies bfloat16 in AMX tiles here, as torch's CPU does (TINY_AMX=0 keeps them off)."""
    if os.environ.get("TINY_AMX") == "0":
        return False
    try:
        return "amx_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not amx_bf16(), reason="torch's CPU multiplies in AMX tiles only on a CPU with AMX-BF16")
@pytest.mark.parametrize("op", [torch.mm, F.linear], ids=["mm", "linear"])
def test_1024_cubed_products_equal_cpu_bit_for_bit(op):
    """tdpbf16ps sums each 32-element step as oneDNN's AMX kernels do: the same bits at 1024³, whatever
    the panels' and rows' blocking and the copies' loop order."""
    a, b = bf16(1024, 1024), bf16(1024, 1024, seed=1)
    assert torch.equal(op(a.to("tiny"), b.to("tiny")).cpu(), op(a, b))


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_half_layout_copies_keep_nan_payloads(dt):
    """A transposing copy of float16/bfloat16 moves bits, as torch's copy does: signaling NaNs stay
    signaling, payloads and denormals intact."""
    bits = torch.arange(-32768, 32768, 37, dtype=torch.int32).to(torch.int16)
    special = torch.tensor([0x7F81, -0x7F, 0x7C01, 1, -0x8000], dtype=torch.int32).to(torch.int16)
    x = torch.cat([special, bits])[: 32 * 55].view(dt).reshape(32, 55)
    got = x.to("tiny").t().contiguous().cpu()
    assert torch.equal(got.view(torch.int16), x.t().contiguous().view(torch.int16))


@pytest.mark.skipif(not amx_bf16(), reason="torch's CPU multiplies in AMX tiles only on a CPU with AMX-BF16")
@pytest.mark.parametrize(
    "x_shape,w_shape",
    [((64, 32, 14, 14), (64, 32, 3, 3)), ((64, 32, 7, 7), (32, 32, 3, 3)), ((96, 64, 5, 5), (64, 64, 3, 3))],
    ids=str,
)
def test_conv2d_forward_equals_cpu_bit_for_bit(x_shape, w_shape):
    """The NCHW output strides along the tiles' columns (the channels): blocks of 16 rows (batch
    elements) keep their stores in L1; the sums are oneDNN's, bit for bit."""
    x, w = bf16(*x_shape), bf16(*w_shape, seed=1)
    got = F.conv2d(x.to("tiny"), w.to("tiny"), padding=1).cpu()
    assert torch.equal(got, F.conv2d(x, w, padding=1))


def conv_grads(stride=1, padding=1, dilation=1, groups=1, transposed=False):
    """The input and weight gradients of a convolution of any dims for the output gradient gy."""

    def grads(x, w, gy):
        nd = x.dim() - 2
        return torch.ops.aten.convolution_backward(
            gy,
            x,
            w,
            None,
            [stride] * nd,
            [padding] * nd,
            [dilation] * nd,
            transposed,
            [0] * nd,
            groups,
            [True, True, False],
        )[:2]

    return grads


@pytest.mark.parametrize(
    "x_shape,w_shape,args",
    [
        ((32, 32, 14, 14), (64, 32, 3, 3), {}),
        ((128, 32, 8, 8), (64, 32, 3, 3), {}),
        ((34, 32, 9, 9), (32, 32, 3, 3), {}),
        ((33, 32, 9, 9), (32, 32, 3, 3), {}),
        ((64, 32, 9, 9), (32, 16, 3, 3), {"groups": 2}),
        ((32, 16, 11, 11), (32, 16, 3, 3), {"stride": 2, "dilation": 2, "padding": 2}),
        ((32, 32, 20), (48, 32, 5), {"padding": 2}),
        ((32, 16, 5, 6, 6), (32, 16, 3, 3, 3), {}),
        ((32, 32, 7, 7), (32, 16, 3, 3), {"transposed": True}),
    ],
    ids=[
        "batch_32",
        "batch_128_in_chunks",
        "batch_34",
        "odd_batch",
        "groups",
        "strided_dilated",
        "conv1d",
        "conv3d",
        "transposed",
    ],
)
def test_conv_weight_gradient_over_a_batch_of_32_or_more_matches_cpu(x_shape, w_shape, args):
    """A bfloat16 weight gradient whose batch pairs (even, 32 or more) sums the batch innermost, in pairs
    and (with AMX) in tiles of 32 images a step, a batch of a multiple of 32 in chunks of 32 whose sums are
    added after; an odd batch keeps the batch outermost."""
    x, w = bf16(*x_shape), bf16(*w_shape, seed=1)
    gy = torch.ops.aten.convolution(
        x,
        w,
        None,
        [args.get("stride", 1)] * (x.dim() - 2),
        [args.get("padding", 1)] * (x.dim() - 2),
        [args.get("dilation", 1)] * (x.dim() - 2),
        args.get("transposed", False),
        [0] * (x.dim() - 2),
        args.get("groups", 1),
    )
    check(rounded_once(conv_grads(**args)), x, w, bf16(*gy.shape, seed=2), **BF16)


def pairs_the_batch():
    """Whether tiny sums a bfloat16 weight gradient's batch in pairs here: AMX-BF16 tiles, or AVX512_BF16 pair dots
    where they pay on this CPU."""
    return torch_tiny._C.bf16_pairs(0)


@pytest.mark.skipif(not pairs_the_batch(), reason="the batch is summed in pairs with AMX-BF16 tiles or pair dots")
def test_conv_weight_gradient_beside_its_input_gradient_keeps_its_paired_copies():
    """A bfloat16 weight gradient next to its input gradient still sums the batch innermost in pairs (in tiles with
    AMX): its input copied batch-innermost, grad_output's paired panels, the chunks' sums and their total (4 kernels
    more than the input gradient alone); float32's shared padded grad_output (test_conv_pool.py) is not taken."""

    def kernels(wanted):
        return conv2d_gradient_kernels(
            bf16(64, 32, 14, 14), bf16(32, 32, 3, 3, seed=1), bf16(64, 32, 14, 14, seed=2), wanted, padding=1
        )

    (alone, _), (both, (gx, gw)) = kernels(1), kernels(2)
    assert both - alone == 4
    x, w = bf16(64, 32, 14, 14).requires_grad_(), bf16(32, 32, 3, 3, seed=1).requires_grad_()
    want = torch.autograd.grad(F.conv2d(x, w, padding=1), [x, w], bf16(64, 32, 14, 14, seed=2))
    torch.testing.assert_close(gx.cpu(), want[0], **BF16)
    torch.testing.assert_close(gw.cpu(), want[1], **BF16)


WEIGHT_GRADIENT = """
import torch, torch_tiny
import torch.nn.functional as F
g = torch.Generator().manual_seed(0)
x = torch.randn(64, 32, 14, 14, generator=g).bfloat16().to("tiny")
w = torch.randn(32, 32, 3, 3, generator=g).bfloat16().to("tiny").requires_grad_()
gy = torch.randn(64, 32, 14, 14, generator=g).bfloat16().to("tiny")
torch.autograd.grad(F.conv2d(x, w, padding=1), [w], gy)[0].cpu()
print("ok")
"""


@pytest.mark.skipif(not (amx_bf16() or has_pair_dots()), reason="this CPU has neither AMX-BF16 nor AVX512_BF16")
def test_conv_weight_gradient_steps_by_pair_dots(tmp_path):
    """The weight gradient alone (no input gradient) sums the batch in pairs where pair dots are asked for
    (TINY_PAIR_DOTS=1) or tiles used: its kernel steps by pair dot products (vdpbf16ps, or tdpbf16ps in tiles),
    where with the batch outermost it widened each bfloat16 and multiply-added."""
    stderr = run_with(tmp_path, WEIGHT_GRADIENT, TINY_DEBUG="3", TINY_PAIR_DOTS="1")
    sources = re.split(r"^tiny: kernel .*$", stderr, flags=re.M)
    assert any("dpbf16" in s for s in sources), stderr[-3000:]


FRESH_AND_OUT = """
import sys
import torch
import torch_tiny
g = torch.Generator().manual_seed(0)
a = torch.randn(1024, 1024, generator=g).bfloat16().to("tiny")
b = torch.randn(1024, 1024, generator=g).bfloat16().to("tiny")
fresh = a @ b
torch.tiny.synchronize()
print("=== out=", file=sys.stderr, flush=True)
out = torch.empty(1024, 1024, dtype=torch.bfloat16, device="tiny")
torch.mm(a, b, out=out)
torch.tiny.synchronize()
assert torch.equal(fresh.cpu(), out.cpu())
torch.testing.assert_close(fresh.cpu(), a.cpu() @ b.cpu(), rtol=2e-2, atol=2e-1)
"""


def test_a_fresh_matmul_lowers_as_the_same_matmul_into_out(tmp_path):
    """mm's fresh result takes its product through the same (M, N) view as mm.out's: the same kernels (a content
    composed straight from the (1, M, N, 1) reduce once made the AMX lowering plan one block on one thread)."""
    env = dict(os.environ, TINY_DEBUG="2", TINY_CACHE_DIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", FRESH_AND_OUT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh, out = (re.findall(r"tiny: kernel (\S+)", part) for part in proc.stderr.split("=== out="))
    assert fresh and fresh == out
