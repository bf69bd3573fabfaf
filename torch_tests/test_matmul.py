"""The matmul family against PyTorch CPU: values, dtypes, shapes, errors, and fused epilogues."""

import pytest
import torch
import torch.nn.functional as F
from conftest import check, counting, rand, tol

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


def test_linear_relu_is_one_kernel():
    x, w, b = (t.to("tiny") for t in (rand(16, 32), rand(32, 8, seed=1), rand(8, seed=2)))
    torch.tiny.synchronize()
    with counting() as c:
        out = torch.relu(x @ w + b).cpu()
    assert c["kernels"] == 1
    torch.testing.assert_close(out, torch.relu(x.cpu() @ w.cpu() + b.cpu()))
