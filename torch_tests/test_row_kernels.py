"""Row kernels (softmax, log_softmax, layer_norm, cross-entropy) against PyTorch CPU, forward and backward.

On the CPU device a row's reductions are computed in the kernel that writes the row: its reduce loops
step by 16 vector lanes with a scalar tail for the elements a row leaves over, and softmax's exp(x - max)
is computed once per element, held in the output between the sum and the row's write. These shapes
reach each part: rows that are multiples of 16 and rows with tails, rows of length 1, many short rows,
few long rows, non-contiguous inputs and dims other than the last, in every float dtype.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import CPU_LOWERING, by_dtype, check_devices, kernel_sources, rand
from test_device import run_python

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# (rows, row length): multiples of 16, tails after whole vectors, rows of 1, many short, few long
SHAPES = [(64, 1024), (33, 100), (7, 1000), (5, 1), (2000, 3), (3, 5000), (2, 17), (4, 64)]


def tol(dtype):
    # half gradients: torch rounds each backward op's result to the dtype, as tiny does, but the sums
    # under them round differently (a bfloat16 ulp at 4 is 0.03)
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 5e-2}
    # float32: a row of one normalizes to exactly 0 in torch; tiny's fused multiply-adds leave ~1e-5
    return {"rtol": 1e-4, "atol": 5e-5} if dtype == torch.float32 else {}


def with_grads(fn, *leaves):
    """fn(device): fn's outputs and the leaves' gradients for a fixed upstream gradient."""

    def run(device):
        xs = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in leaves]
        out = fn(*xs)
        up = torch.randn(out.shape, generator=torch.Generator().manual_seed(100)).to(out.dtype).to(device)
        grads = torch.autograd.grad(out, [x for x in xs if x.requires_grad], up)
        return out.detach(), *grads

    return run


ROW_FNS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
}


@by_dtype(FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ROW_FNS)
def test_row_ops_forward_and_backward_match_cpu(name, shape, dtype):
    check_devices(with_grads(ROW_FNS[name], rand(*shape, dtype=dtype)), **tol(dtype))


@by_dtype(FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(64, 1024), (33, 100), (5, 1), (2000, 3)], ids=lambda s: "x".join(map(str, s)))
def test_layer_norm_with_affine_and_cross_entropy_match_cpu(shape, dtype):
    rows, n = shape
    x, w, b = rand(rows, n, dtype=dtype), rand(n, dtype=dtype, seed=1), rand(n, dtype=dtype, seed=2)
    affine = lambda x, w, b: F.layer_norm(x, (n,), w, b)  # noqa: E731
    if dtype.itemsize == 2:
        # the weight and bias gradients sum over rows in half: results ~16, one ulp 0.125 apart
        check_devices(lambda dev: affine(*(t.to(dev) for t in (x, w, b))), **tol(dtype))
    else:
        check_devices(with_grads(affine, x, w, b), **tol(dtype))
    target = torch.arange(rows) * 7 % n
    check_devices(with_grads(lambda x, t: F.cross_entropy(x, t), x, target), **tol(dtype))
    check_devices(with_grads(lambda x, t: F.nll_loss(x.log_softmax(-1), t), x, target), **tol(dtype))


@by_dtype((torch.float32, torch.float64, torch.bfloat16))
def test_row_ops_on_non_contiguous_inputs_and_other_dims(dtype):
    x = rand(40, 3, 100, dtype=dtype)
    for fn in (
        lambda t: torch.softmax(t.transpose(0, 2), -1),  # rows strided in memory
        lambda t: torch.softmax(t, 0),  # a dim other than the last
        lambda t: torch.log_softmax(t, 1),
        lambda t: torch.log_softmax(t[:, :, ::3], -1),  # a stepped slice, a row of 34
        lambda t: F.layer_norm(t.permute(2, 0, 1), (40, 3)),  # two normalized dims, permuted
        lambda t: F.cross_entropy(t.permute(0, 2, 1), torch.arange(40).remainder(3).repeat(100, 1).t()),
    ):
        check_devices(with_grads(fn, x), **tol(dtype))


def test_row_ops_propagate_nan_and_inf_through_vector_lanes_and_tails():
    x = rand(6, 100)
    x[0, 5] = float("nan")  # in the vector part
    x[1, 99] = float("nan")  # in the tail
    x[2, 97] = float("inf")
    x[3, 10] = float("-inf")
    x[4] = float("-inf")
    for fn in ROW_FNS.values():
        check_devices(lambda dev, fn=fn: fn(x.to(dev)))


@pytest.mark.parametrize("rows", [20, 22, 21], ids=lambda r: f"{r}_rows")
def test_short_rows_in_blocks_keep_each_rows_statistics(rows):
    """Rows of 128 elements or fewer are computed 4 at a time (2 where the count is not a multiple of 4, one where it
    is odd): each row of a block keeps its own max, sum and normalization, an all -inf row at each position of a block
    included (a plain softmax gives NaN there, attention's zeroes it)."""
    x = rand(rows, 65)
    for r in (1, 6, 11, rows - 1):
        x[r] = float("-inf")
    x[3, 64] = float("nan")
    for fn in ROW_FNS.values():
        check_devices(lambda dev, fn=fn: fn(x.to(dev)))
    check_devices(with_grads(ROW_FNS["log_softmax"], rand(rows, 65, seed=1)), **tol(torch.float32))
    mask = torch.ones(rows, 65, dtype=torch.bool)
    mask[[1, 6, 11, rows - 1]] = False
    q, k, v = rand(1, 1, rows, 32, seed=2), rand(1, 1, 65, 32, seed=3), rand(1, 1, 65, 32, seed=4)
    check_devices(
        lambda dev: F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), attn_mask=mask.to(dev)),
        **tol(torch.float32),
    )


@pytest.mark.skipif(not CPU_LOWERING, reason="the CPU lowering's row blocks")
def test_a_softmax_of_short_rows_blocks_four_rows(tmp_path):
    """8320 rows of 65 (sdpa's scores over a ViT's 65 tokens): one kernel over 2080 blocks of 4 rows."""
    code = "import torch, torch_tiny\nprint(torch.randn(8320, 65, device='tiny').softmax(-1).cpu().sum().item())"
    names = [re.match(r"\nvoid (\w+)\(", k).group(1) for k in kernel_sources(code, tmp_path)]
    assert any(n.startswith("R_2080_65") for n in names), names


SOFTMAX_SOURCE = """
import torch
import torch_tiny
x = torch.randn(64, 1024, device="tiny")
print(x.softmax(-1).cpu().sum().item())
print(torch.randn(8, 1000, device="tiny").softmax(-1).cpu().sum().item())
"""


def test_float32_softmax_computes_exp_once_per_element_over_vector_lanes_with_tails(tmp_path):
    """The row kernel's exp(x - max) is a vector of lanes (tv_float), computed once per element: in the
    sum's loop only, the row's write reading it back from the output and multiplying it by the reciprocal
    of the sum. A row that is not a multiple of 16
    reduces over lanes too, with a scalar tail."""
    if not torch.tiny.get_device_name().startswith("tiny CPU"):
        pytest.skip("the C renderer's lanes: CPU device only")
    out = run_python(SOFTMAX_SOURCE, with_stderr=True, TINY_DEBUG="3", TINY_CACHE_DIR=str(tmp_path))
    sources = re.findall(r"\nvoid (R_64_1024\w*)\(.*?\n}\n", out, re.S)
    assert sources, "no row kernel of the softmax's shape in the generated sources"
    body = re.search(r"\nvoid R_64_1024\w*\(.*?\n}\n", out, re.S).group(0)
    # the sum's loop runs two accumulators, even and odd steps, its body once for each
    exp_lines = [line for line in body.splitlines() if "tiny_expf(" in line]
    assert len(exp_lines) == 2, f"exp computed in {len(exp_lines)} places:\n{body}"
    assert all(line.strip().startswith("const tv_float") for line in exp_lines), f"exp not over vector lanes:\n{body}"
    pair_loop = r"for \(int64_t (r\d+_) = 0; \1 < 64; \1 \+= 2\) \{.*?\n    \}\n"
    loops = [m.group(0) for m in re.finditer(pair_loop, body, re.S)]
    assert any(all(line in loop for line in exp_lines) for loop in loops), f"exp outside the sum's loop:\n{body}"
    assert re.search(r"memcpy\(b0 \+", body), f"exp not held in the output for the row's write:\n{body}"
    # the row's write multiplies by the sum's reciprocal, computed once per row, as torch's CPU kernel does:
    # no division per element
    write_loop = body[body.rindex("for (") :]
    assert "/" not in write_loop and "*" in write_loop, f"the row's write divides per element:\n{body}"
    # a row of 1000: 62 steps of 16 lanes (two accumulators of 31), then a scalar tail of 8, in both of the
    # softmax's reductions
    tail = re.search(r"\nvoid R_8_1000\w*\(.*?\n}\n", out, re.S)
    assert tail, "no row kernel of the (8, 1000) softmax in the generated sources"
    assert len(re.findall(r"< 62; r\d+_ \+= 2\) \{", tail.group(0))) == 2, tail.group(0)
    assert len(re.findall(r"< 8; r\d+\+\+\) \{", tail.group(0))) == 2, tail.group(0)
