"""torch.special's functions of the normal distribution, the Bessel family and the Airy function (issue #16),
natively on tiny, against PyTorch CPU with the fallback disabled (TINY_FALLBACK=0): erfcx, log_ndtr, ndtri,
bessel_j0/j1/y0/y1, modified_bessel_i0/i1/k0/k1, scaled_modified_bessel_k0/k1, spherical_bessel_j0, airy_ai,
logit's backward, and igamma/igammac (gammainc/gammaincc). Each on a grid crossing every branch of the CPU's
algorithm (its thresholds from both sides, zero, signed zero, huge values, +-inf, NaN), in float32 and float64,
integer inputs promoting as the CPU, the out= and in-place forms, and the gradients torch defines."""

from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same, by_dtype, check, rand, tol, with_grads

NAN, INF = float("nan"), float("inf")

pytestmark = pytest.mark.usefixtures("native")

REAL = (torch.float32, torch.float64)


def grid(*points):
    """The points, their negatives, and a few between each pair of neighbours (each branch seen inside)."""
    values = sorted({float(p) for p in points} | {-float(p) for p in points})
    between = [a + (b - a) * f for a, b in pairwise(values) for f in (0.25, 0.5, 0.9)]
    return torch.tensor(values + between + [NAN, INF, -INF, 0.0, -0.0], dtype=torch.float64)


# The edges of each algorithm's branches (and far beyond them).
EDGES = {
    torch.special.erfcx: (0, 1e-8, 0.3, 1, 3.9, 4, 6.1, 10, 26.7, 30, 49.9, 50, 51, 1e3, 4e7, 5e7, 6e7, 1e20),
    torch.special.log_ndtr: (0, 0.5, 0.99, 1, 1.01, 3, 5, 8.6, 9, 12, 37, 38.5, 40, 1e3, 1e10),
    torch.special.bessel_j0: (0, 1e-6, 1e-5, 2e-5, 1, 2.4048, 4.99, 5, 5.01, 8, 20, 1e3, 1e8),
    torch.special.bessel_j1: (0, 1e-6, 1, 3.8317, 4.99, 5, 5.01, 8, 20, 1e3, 1e8),
    torch.special.bessel_y0: (0, 1e-300, 1e-6, 0.8936, 1, 4.99, 5, 5.01, 8, 20, 1e3, 1e8),
    torch.special.bessel_y1: (0, 1e-300, 1e-6, 1, 2.1971, 4.99, 5, 5.01, 8, 20, 1e3, 1e8),
    torch.special.modified_bessel_i0: (0, 1e-6, 1, 7.99, 8, 8.01, 20, 88, 89, 700, 710, 1e3),
    torch.special.modified_bessel_i1: (0, 1e-6, 1, 7.99, 8, 8.01, 20, 88, 89, 700, 710, 1e3),
    torch.special.modified_bessel_k0: (0, 1e-300, 1e-6, 1, 1.99, 2, 2.01, 20, 88, 104, 700, 746, 1e3),
    torch.special.modified_bessel_k1: (0, 1e-300, 1e-30, 1e-6, 1, 1.99, 2, 2.01, 20, 88, 104, 700, 1e3),
    torch.special.scaled_modified_bessel_k0: (0, 1e-300, 1e-6, 1, 1.99, 2, 2.01, 20, 88, 1e3, 1e30),
    torch.special.scaled_modified_bessel_k1: (0, 1e-300, 1e-30, 1e-6, 1, 1.99, 2, 2.01, 20, 88, 1e3, 1e30),
    torch.special.spherical_bessel_j0: (0, 1e-4, 0.25, 0.49, 0.5, 0.51, 3.14159, 10, 1e3, 1e30),
    torch.special.airy_ai: (0, 0.5, 1, 1.986, 2.08, 2.09, 2.1, 5, 8.32, 8.33, 20, 103.8, 103.9, 104, 1e3),
}


def slack(dtype):
    """Where the CPU's answer is a difference of nearly equal terms (y0 and y1 next to their zeros, Ai between
    its oscillations), an ulp of exp or sin is a large relative error: compare those absolutely."""
    return {"atol": 1e-5 if dtype == torch.float32 else 1e-12, "rtol": 1e-5 if dtype == torch.float32 else 1e-9}


@pytest.mark.parametrize("fn", list(EDGES), ids=lambda f: f.__name__)
@by_dtype(REAL)
def test_special_function_matches_cpu_on_every_branch(fn, dtype):
    x = grid(*EDGES[fn]).to(dtype)
    check(fn, x, **slack(dtype))


@pytest.mark.parametrize("fn", list(EDGES), ids=lambda f: f.__name__)
def test_special_function_of_random_values_matches_cpu(fn):
    for dtype in REAL:
        x = rand(6, 40, dtype=dtype) * 6
        check(fn, x, **slack(dtype))
        check(fn, x.t())  # non-contiguous


@pytest.mark.parametrize("fn", list(EDGES), ids=lambda f: f.__name__)
def test_special_function_promotes_integers_and_refuses_half_like_cpu(fn):
    check(fn, torch.arange(-3, 12))
    check(fn, torch.tensor([True, False]))
    check(fn, rand(5, dtype=torch.float16))  # the CPU has no half kernel: the same error


def test_special_function_out_and_in_place_forms_match_cpu():
    x = rand(4, 5) * 3
    check(lambda t, o: torch.special.erfcx(t, out=o), x, torch.empty(0))
    check(lambda t, o: torch.special.bessel_j1(t, out=o), x, torch.empty(4, 5, dtype=torch.float64))
    check(lambda t, o: torch.special.modified_bessel_k1(t, out=o), x.abs(), torch.empty(20))  # resized, warns
    check(lambda t, o: torch.special.airy_ai(t, out=o), x, torch.empty(0, dtype=torch.int64))  # can't cast


def test_ndtri_matches_cpu_on_every_branch():
    e2 = 0.1353352832366127  # the central fit's edge exp(-2), from both sides and for 1 - y
    points = [0, 1e-300, 1e-100, 1.2e-14, 1.3e-14, 1e-5, 0.1, e2 * 0.999, e2, e2 * 1.001, 0.3, 0.5, 0.7]
    points += [1 - p for p in points] + [-0.0, -1e-10, 1 + 1e-10, 2, -1, NAN, INF, -INF]
    for dtype in REAL:
        precise = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
        check(torch.special.ndtri, torch.tensor(points, dtype=dtype), **precise)
        check(torch.special.ndtri, torch.rand(200, dtype=dtype, generator=torch.Generator().manual_seed(3)))


@pytest.mark.parametrize("fn", [torch.special.erfcx, torch.special.log_ndtr, torch.special.ndtri])
@by_dtype(REAL)
def test_normal_distribution_gradients_match_cpu(fn, dtype):
    x = torch.rand(30, dtype=dtype, generator=torch.Generator().manual_seed(1)) * 0.98 + 0.01
    if fn is not torch.special.ndtri:
        x = (x - 0.5) * 20
    expected, actual = with_grads(fn, x)
    assert_same(actual, expected, **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}))


def test_bessel_functions_and_airy_have_no_gradient_like_cpu():
    x = rand(3).requires_grad_()
    for fn in (torch.special.bessel_j0, torch.special.modified_bessel_k1, torch.special.airy_ai):
        assert not fn(x.to(DEVICE)).requires_grad and not fn(x).requires_grad


# ---- logit's backward ----


@pytest.mark.parametrize("eps", [None, 0.0, 1e-6, 0.2, 0.6])
@by_dtype(REAL + (torch.bfloat16,))
def test_logit_backward_matches_cpu(eps, dtype):
    x = torch.tensor([0.0, 1.0, 1e-7, 0.1, 0.2, 0.5, 0.8, 0.9, 1 - 1e-7, -0.5, 1.5, INF, -INF], dtype=dtype)
    dy = torch.linspace(-2, 3, x.numel(), dtype=dtype)
    # the CPU rounds bfloat16 after each operation, tiny once
    check(lambda g, t: torch.ops.aten.logit_backward(g, t, eps), dy, x, **tol(dtype))
    out = torch.empty(0, dtype=dtype)
    check(lambda g, t, o: torch.ops.aten.logit_backward.grad_input(g, t, eps, grad_input=o), dy, x, out, **tol(dtype))


def test_logit_gradient_matches_cpu():
    x = torch.rand(5, 6, generator=torch.Generator().manual_seed(2))
    for eps in (None, 0.25):
        expected, actual = with_grads(lambda t, eps=eps: torch.logit(t, eps), x)
        assert_same(actual, expected)
    check(lambda g, t: torch.ops.aten.logit_backward(g, t), rand(3, dtype=torch.float64), rand(3))  # promotes
    check(lambda g, t: torch.ops.aten.logit_backward(g, t), torch.arange(3), torch.arange(3))  # ints refused
    check(lambda t: F.binary_cross_entropy(torch.sigmoid(t), torch.sigmoid(t.detach() * 2)), rand(4))


# ---- igamma and igammac ----


def gamma_grid():
    """(a, x) pairs taking every algorithm of the CPU: each series, the continued fraction, Temme's expansion
    for a ~ x (20 < a < 200 within 30%, a > 200 within 4.5 / sqrt(a)) from both sides of its edges, and the
    boundary values (0, inf, NaN, negative)."""
    values = [0.0, 1e-30, 1e-5, 0.1, 0.5, 0.7, 1.0, 1.05, 1.1, 1.5, 3, 10, 19.5, 20, 21, 50, 100, 150, 199, 200]
    values += [201, 1e3, 1e4, 1e6, INF, NAN, -1.0, -0.0]
    pairs = [(a, x) for a in values for x in values]
    pairs += [(a, a * f) for a in (25.0, 60.0, 150.0, 250.0, 1e3, 1e4, 1e5) for f in (0.71, 0.8, 0.95, 0.99, 1.0)]
    pairs += [(a, a * f) for a in (25.0, 60.0, 150.0, 250.0, 1e3, 1e4, 1e5) for f in (1.01, 1.2, 1.29, 1.31)]
    a, x = zip(*pairs, strict=True)
    return torch.tensor(a, dtype=torch.float64), torch.tensor(x, dtype=torch.float64)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac, torch.special.gammainc, torch.special.gammaincc])
@by_dtype(REAL)
def test_incomplete_gamma_matches_cpu_on_every_branch(fn, dtype):
    a, x = gamma_grid()
    precise = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    check(fn, a.to(dtype), x.to(dtype), **precise)


def test_incomplete_gamma_broadcasts_promotes_and_has_out_and_in_place_forms_like_cpu():
    a = rand(3, 1).abs() * 4
    x = rand(1, 5, seed=1).abs() * 4
    check(torch.igamma, a, x)
    check(torch.igammac, a, x.double())  # promotes to float64
    check(torch.igamma, a, 2.5)
    check(lambda s, t: s.igammac_(t), a.expand(3, 5).contiguous(), x)
    check(lambda s, t, o: torch.igamma(s, t, out=o), a, x, torch.empty(0))
    check(torch.igamma, torch.arange(4), torch.arange(4))  # integers: refused, as on the CPU
    check(torch.igamma, a.half(), x.half(), rtol=2e-3, atol=1e-3)  # float16 computes in float


@by_dtype(REAL)
def test_incomplete_gamma_gradient_in_x_matches_cpu(dtype):
    a = torch.tensor([0.5, 1.0, 2.5, 30.0, 7.0], dtype=dtype)
    x = torch.tensor([0.3, 2.0, 1.0, 29.0, 12.0], dtype=dtype)
    for fn in (torch.igamma, torch.igammac):
        expected, actual = with_grads(lambda t, fn=fn: fn(a.to(t.device), t), x)
        assert_same(actual, expected, **({"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}))
