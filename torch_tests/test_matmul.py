"""The matmul family against PyTorch CPU: values, dtypes, shapes, errors, and fused epilogues."""

import pytest
import torch
import torch.nn.functional as F
from conftest import CPU_LOWERING, DEVICE, check, counting, rand, tol

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPES = FLOATS + (torch.int32, torch.int64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mm_bmm_mv_dot_match_cpu(dtype):
    a, b, v = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype, seed=1), rand(7, dtype=dtype, seed=2)
    x, y = rand(4, 5, 7, dtype=dtype, seed=3), rand(4, 7, 3, dtype=dtype, seed=4)
    check(torch.mm, a, b, **tol(dtype))
    check(torch.mv, a, v, **tol(dtype))
    check(torch.dot, v, v, **tol(dtype))
    check(torch.bmm, x, y, **tol(dtype))
    check(torch.matmul, x, b, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_add_forms_scale_and_fuse_self(dtype):
    a, b = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype, seed=1)
    x, y = rand(4, 5, 7, dtype=dtype, seed=3), rand(4, 7, 3, dtype=dtype, seed=4)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), rand(3, dtype=dtype, seed=5), a, b, **tol(dtype))
    check(
        lambda c, a, v: torch.addmv(c, a, v, alpha=3),
        rand(5, dtype=dtype, seed=6),
        a,
        rand(7, dtype=dtype),
        **tol(dtype),
    )
    check(lambda c, x, y: torch.baddbmm(c, x, y, beta=2), rand(4, 5, 3, dtype=dtype, seed=7), x, y, **tol(dtype))
    check(lambda c, x, y: torch.addbmm(c, x, y), rand(5, 3, dtype=dtype, seed=8), x, y, **tol(dtype))
    check(lambda c, a, b: c.addmm_(a, b), rand(5, 3, dtype=dtype, seed=9), a, b, **tol(dtype))


def test_beta_zero_ignores_nan_in_self():
    c = torch.full((5, 3), float("nan"))
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0), c, rand(5, 7), rand(7, 3, seed=1))


def test_out_forms_write_the_given_tensor():
    a, b = rand(5, 7), rand(7, 3, seed=1)
    check(lambda a, b, o: torch.mm(a, b, out=o), a, b, torch.empty(5, 3))
    check(lambda a, b, o: torch.mm(a, b, out=o), a, b, torch.empty(0))
    check(lambda a, b, o: torch.mm(a, b, out=o[:, :3]), a, b, torch.empty(5, 6))


def test_noncontiguous_and_broadcast_operands():
    a, b = rand(7, 5).t(), rand(3, 7, seed=1).t()
    check(torch.mm, a, b)
    check(torch.matmul, rand(2, 1, 4, 6), rand(3, 6, 2, seed=1))
    check(lambda x, y: torch.einsum("bij,bkj->bik", x, y), rand(2, 3, 4), rand(2, 5, 4, seed=1))
    check(lambda x, w, b: F.linear(x, w, b), rand(2, 3, 8), rand(6, 8, seed=1), rand(6, seed=2))


def test_empty_and_zero_k_products():
    check(torch.mm, rand(0, 4), rand(4, 3))
    check(torch.mm, rand(3, 0), rand(0, 2))
    check(torch.bmm, rand(2, 3, 0), rand(2, 0, 4))


def test_bad_shapes_and_dtypes_raise_like_cpu():
    check(torch.mm, rand(5, 7), rand(6, 3))
    check(torch.mm, rand(5), rand(5, 3))
    check(torch.mm, rand(5, 7), rand(7, 3, dtype=torch.float64))
    check(torch.bmm, rand(2, 5, 7), rand(3, 7, 3))
    check(torch.dot, rand(3), rand(4))
    check(torch.mm, rand(3, 3) > 0, rand(3, 3) > 0)


def test_addr_is_one_kernel_at_opmath_precision():
    for dtype in DTYPES:
        check(
            lambda c, x, y: torch.addr(c, x, y, beta=0.6, alpha=2),
            rand(5, 4, dtype=dtype),
            rand(5, dtype=dtype, seed=1),
            rand(4, dtype=dtype, seed=2),
            **tol(dtype),
        )
    x, y = rand(6, seed=1), rand(3, seed=2)
    check(lambda c, x, y: torch.addr(c, x, y), rand(3, dtype=torch.float64), x, y)  # self broadcast, promoted
    check(lambda c, x, y: torch.addr(c, x, y, beta=0), torch.full((6, 3), float("nan")), x, y)
    check(lambda c, x, y: c.addr_(x, y, alpha=0.5), rand(6, 3), x, y)
    check(lambda c, x, y, o: torch.addr(c, x, y, out=o), rand(6, 3), x, y, torch.empty(0))
    b = rand(4) > 0.5
    check(lambda c, x, y: torch.addr(c, x, y, beta=False), b, b, b)
    check(lambda c, x, y: torch.addr(c, x, y), b, b, b)
    # float16 computed in float32 and rounded once (torch's CPU kernel rounds each step)
    c, v, w = (
        rand(40, 30, dtype=torch.float16),
        rand(40, dtype=torch.float16, seed=1),
        rand(30, dtype=torch.float16, seed=2),
    )
    once = (0.6 * c.float() + 0.2 * torch.outer(v.float(), w.float())).half()
    tiny = torch.addr(c.to("tiny"), v.to("tiny"), w.to("tiny"), beta=0.6, alpha=0.2).cpu()
    torch.testing.assert_close(tiny, once, rtol=0, atol=0)
    c, x, y = (t.to("tiny") for t in (rand(6, 3), x, y))
    torch.tiny.synchronize()
    with counting() as count:
        torch.addr(c, x, y).cpu()
    assert count["kernels"] == 1


def test_addr_errors_like_cpu():
    x, y = rand(6, seed=1), rand(3, seed=2)
    check(torch.addr, rand(6, 3), rand(6, 1), y)  # vec1 not 1-D
    check(torch.addr, rand(4, 3), x, y)  # self does not expand to (6, 3)
    check(lambda c, x, y: c.addr_(x, y), rand(3), x, y)  # in place: self must be (6, 3)
    i = torch.arange(6)
    check(lambda c, x, y: torch.addr(c, x, y, beta=0.5), i, i, i)  # float beta for integers
    check(lambda c, x, y: torch.addr(c, x, y, alpha=True), rand(6, 6), x, x)  # bool alpha for floats


def test_linear_relu_is_one_kernel():
    x, w, b = (t.to("tiny") for t in (rand(16, 32), rand(32, 8, seed=1), rand(8, seed=2)))
    torch.tiny.synchronize()
    with counting() as c:
        out = torch.relu(x @ w + b).cpu()
    assert c["kernels"] == 1
    torch.testing.assert_close(out, torch.relu(x.cpu() @ w.cpu() + b.cpu()))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16), ids=str)
def test_a_few_rows_times_a_large_row_major_weight_match_cpu(dtype):
    """x @ w of 16 to 48 rows with w large and row-major sums in parts of 256 of the reduced axis (their partial
    results, then their sum), epilogues after the sum; 16-bit x is read from a float32 copy (where bfloat16 does not
    step by pair dots), as is a 16-bit convolution's padded input."""
    close = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else tol(dtype)
    w = rand(1024, 1024, dtype=dtype, seed=1)
    check(torch.mm, rand(32, 1024, dtype=dtype), w, **close)
    x, b = rand(48, 1024, dtype=dtype), rand(1024, dtype=dtype, seed=2)
    check(lambda x, w, b: torch.relu(x @ w + b), x, w, b, **close)
    check(torch.mm, rand(16, 2048, dtype=dtype, seed=3), rand(2048, 512, dtype=dtype, seed=4), **close)
    if dtype != torch.float32:
        x, w = rand(8, 32, 14, 14, dtype=dtype, seed=5), rand(64, 32, 3, 3, dtype=dtype, seed=6)
        check(lambda x, w: F.conv2d(x, w, padding=1), x, w, **close)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16), ids=str)
@pytest.mark.parametrize("m", (16, 32, 128))
def test_a_linear_layer_of_a_small_batch_matches_cpu(dtype, m):
    """x @ w.t() of 16 to 128 rows: the lanes take x's rows (a copy of x with them innermost), w's rows the outermost
    loop where the lanes' is one iteration (16 rows), the tiles (bfloat16 on an AMX host) 16 or 32 of w's rows whose
    outputs lie next to one another, the lanes apart."""
    close = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else tol(dtype)
    x, w, b = rand(m, 1024, dtype=dtype), rand(512, 1024, dtype=dtype, seed=1), rand(512, dtype=dtype, seed=2)
    check(F.linear, x, w, **close)
    check(F.linear, x, w, b, **close)


@pytest.mark.skipif(not CPU_LOWERING, reason="the CPU lowering's copy (a GPU device reads a as stored; 18 s on PoCL)")
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
def test_a_transposed_left_operand_matches_cpu(dtype):
    """a.t() @ b with a's rows 512 B or more apart, 1 MiB or more of them walked, reads a from a copy in panels of a
    cache line along a's columns (the reduced axis between: each step reads its rows' elements from one line), or with
    the reduced axis innermost where a's columns do not divide into lines (500 of them), where b has 512 columns or
    more, else sums runs of 256 rows into partial results (a's copy would cost a third of the product): with an
    epilogue, batched, and as a linear layer's weight gradient (grad_output stored tokens-major), and over 2080 rows
    (runs of 260)."""
    close = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else tol(dtype)
    a, b = rand(1024, 512, dtype=dtype), rand(1024, 128, dtype=dtype, seed=1)
    check(lambda a, b: a.t() @ b, a, b, **close)
    check(lambda a, b: a.t() @ b, a, rand(1024, 512, dtype=dtype, seed=7), **close)
    check(lambda a, b: a.t() @ b, rand(1024, 500, dtype=dtype, seed=9), rand(1024, 512, dtype=dtype, seed=7), **close)
    check(lambda a, b: (a.t() @ b).relu(), rand(2080, 512, dtype=dtype, seed=8), rand(2080, 128, dtype=dtype), **close)
    check(lambda c, a, b: torch.addmm(c, a.t(), b, beta=0.5), rand(512, 128, dtype=dtype, seed=2), a, b, **close)
    x, y = rand(2, 1024, 256, dtype=dtype, seed=3), rand(2, 1024, 64, dtype=dtype, seed=4)
    check(lambda x, y: torch.bmm(x.transpose(1, 2), y), x, y, **close)

    def weight_grad(x, w, g):
        w = w.clone().requires_grad_()
        F.linear(x, w).backward(g)
        return w.grad

    x, w, g = rand(2048, 256, dtype=dtype, seed=5), rand(128, 256, dtype=dtype, seed=6), rand(2048, 128, dtype=dtype)
    check(weight_grad, x, w, g, **close)


@pytest.mark.parametrize("length", (65, 17, 100, 64), ids=str)
def test_scores_over_a_short_contiguous_sum_match_cpu(length):
    """q @ k.transpose(-2, -1) over heads of 64 features or fewer (a sum each of whose reads walks contiguously) has
    lanes along the keys, k read from a copy laid out keys-innermost; a key count that does not divide into vectors
    (65, 17, 100) ends on a vector overlapping the one before; with an epilogue, batched, and where the result is
    stored transposed (no lanes then)."""
    close = dict(rtol=1e-4, atol=1e-4)
    q, k = rand(2, 3, length, 32), rand(2, 3, length, 32, seed=1)
    check(lambda q, k: q @ k.transpose(-2, -1), q, k, **close)
    mask = rand(length, length, seed=2)
    check(lambda q, k, m: (q @ k.transpose(-2, -1) * 0.125 + m).softmax(-1), q, k, mask, **close)
    check(lambda q, k: (q @ k.transpose(-2, -1)).transpose(-2, -1).contiguous(), q, k, **close)
    check(lambda q, k: q[..., :16] @ k[..., :16].transpose(-2, -1), q, k, **close)
    x, y = rand(length, 64, dtype=torch.float64, seed=3), rand(length, 64, dtype=torch.float64, seed=4)
    check(lambda x, y: x @ y.t(), x, y)
    # in place: outputs the overlapping vectors store twice must not be read back (write_in_place keeps c's buffer
    # apart: the second computation read the first's result, adding q @ k.t() twice)
    check(
        lambda c, q, k: c.view(6, length, length).baddbmm_(q.view(6, length, 32), k.view(6, length, 32).mT),
        rand(2, 3, length, length, seed=5),
        q,
        k,
        **close,
    )


@pytest.mark.parametrize("shapes", [((1, 0, 3), (1, 3, 1)), ((1, 2, 0), (1, 0, 1)), ((1, 2, 3), (1, 3, 0))])
def test_bmm_of_an_empty_or_zero_filled_result_skips_the_dtype_check_as_cpu(shapes):
    """torch.bmm returns an empty or zero-filled result (batch2's dtype) before it checks the dtypes: a bool batch1
    with an int32 batch2 gives int32 there (fuzzer seed 11005); with products to compute, it raises."""
    a, b = torch.zeros(shapes[0], dtype=torch.bool), torch.ones(shapes[1], dtype=torch.int32)
    check(torch.bmm, a, b)
    check(torch.bmm, a.float(), b.double())
    check(torch.bmm, torch.zeros(1, 2, 3, dtype=torch.bool), torch.ones(1, 3, 1, dtype=torch.int32))
    check(torch.bmm, torch.zeros(1, 2, 3), torch.ones(1, 3, 1, dtype=torch.float64))


@pytest.mark.parametrize("length", (65, 17, 64), ids=str)
def test_a_computed_factor_that_the_lanes_broadcast_matches_cpu(length):
    """(q * s) @ (k * s).transpose(-2, -1), sdpa's math: the scaled query, read alike by every lane of a block, is
    computed once into a copy first; its gradients (the query's a reduction written through a reshape, lowered at the
    reduction's own shape); other computed left operands (a ReLU of an affine map, a cast) and one computed in place."""
    close = dict(rtol=1e-4, atol=1e-4)
    q, k = rand(2, 3, length, 32), rand(2, 3, length, 32, seed=1)
    s = 32**-0.25
    check(lambda q, k: (q * s) @ (k * s).transpose(-2, -1), q, k, **close)
    check(lambda q, k: ((q * 0.5 + 1).relu() @ k.transpose(-2, -1)).softmax(-1), q, k, **close)
    check(lambda q, k: (q.double() * s) @ k.double().transpose(-2, -1), q, k)
    check(lambda q, k: q.mul_(s) @ k.transpose(-2, -1), q, k, **close)

    def grads(q, k, g):
        q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
        ((q * s) @ (k * s).transpose(-2, -1)).backward(g)
        return q.grad, k.grad

    check(grads, q, k, rand(2, 3, length, length, seed=2), **close)


@pytest.mark.parametrize(
    "name,shapes",
    [
        ("mm", ((4, 2), (2, 3))),
        ("bmm", ((2, 4, 2), (2, 2, 3))),
        ("addmm", ((4, 3), (4, 2), (2, 3))),
        ("baddbmm", ((2, 4, 3), (2, 4, 2), (2, 2, 3))),
        ("addmv", ((4,), (4, 2), (2,))),
        ("matmul", ((4, 2), (2, 3))),
        ("mv", ((4, 2), (2,))),
    ],
)
def test_a_structured_out_form_is_resized_before_its_dtype_error(name, shapes):
    """torch's structured out= kernels run their meta function (shape checks, out= resized) before the CPU kernel's
    dtype dispatch raises for bool products: out= keeps the result's shape though the call raises (fuzzer seed
    14494)."""
    fn = getattr(torch, name)

    def call(*ts):
        out = torch.zeros(2, 1, dtype=torch.bool, device=ts[0].device)
        try:
            fn(*ts, out=out)
        except NotImplementedError:
            return out.shape
        raise AssertionError("no error")

    shapes_seen = [call(*[torch.ones(s, dtype=torch.bool, device=dev) for s in shapes]) for dev in ("cpu", DEVICE)]
    assert shapes_seen[0] == shapes_seen[1], shapes_seen


def test_an_out_form_whose_out_is_an_input_reads_it_as_it_was():
    """mm(t, u, out=t): torch's meta function resizes t before the CPU kernel's dtype error for bools; tiny reads t as
    it was before that resize, so the call raises the CPU's error (not a shape mismatch) and leaves t resized
    (fuzzer seed 15245)."""

    def call(dev):
        t = torch.ones(3, 2, dtype=torch.bool, device=dev)
        with pytest.raises(NotImplementedError):
            torch.mm(t, torch.ones(2, 1, dtype=torch.bool, device=dev), out=t)
        return t.shape

    assert call("cpu") == call(DEVICE)
