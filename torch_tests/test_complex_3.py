"""Complex tensors on tiny (issue #16), the long tail continued: im2col/col2im (F.unfold, F.fold),
logcumsumexp, Hermitian LDL and complex32 (ComplexHalf), natively for complex64 and complex128
(TINY_FALLBACK=0), against PyTorch CPU."""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same, by_dtype, check

COMPLEX = (torch.complex64, torch.complex128)
TOL = dict(rtol=1e-4, atol=1e-5)


def crand(*shape, dtype=torch.complex64, seed=0):
    """Seeded complex CPU values, both parts normal."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


# ---- im2col, col2im (F.unfold, F.fold) ----


@by_dtype(COMPLEX)
def test_unfold_of_complex_images_matches_cpu(dtype, native):
    x = crand(2, 3, 5, 6, dtype=dtype)
    check(lambda x: F.unfold(x, 2), x)
    check(lambda x: F.unfold(x, (2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 3)), x)
    check(lambda x: F.unfold(x[0], 3, padding=1), x)  # unbatched
    check(lambda x: F.unfold(x.conj().transpose(2, 3), 2, stride=2), x)
    check(lambda x: F.unfold(x, 7), x)  # no sliding block fits: the CPU's error
    check(lambda x: F.unfold(x[:0], 2), x)


@by_dtype(COMPLEX)
def test_fold_of_complex_columns_matches_cpu(dtype, native):
    cols = crand(2, 3 * 2 * 2, 12, dtype=dtype)  # 3 channels, 2 x 2 kernel, (3, 4) blocks of a 4 x 5 image
    check(lambda c: F.fold(c, (4, 5), 2), cols, **TOL)
    check(lambda c: F.fold(c[0].conj(), (4, 5), 2), cols, **TOL)
    check(lambda c: F.fold(c[:, :, :6], (5, 7), 2, dilation=(2, 1), padding=1, stride=(3, 2)), cols, **TOL)
    check(lambda c: F.fold(c, (4, 6), 2), cols)  # the wrong number of blocks: the CPU's error


@by_dtype(COMPLEX)
def test_unfold_and_fold_of_complex_values_into_out_match_cpu(dtype, native):
    x = crand(1, 2, 4, 4, dtype=dtype)
    check(
        lambda x, out: torch._C._nn.im2col(x, (2, 2), (1, 1), (0, 0), (1, 1), out=out), x, torch.empty(0, dtype=dtype)
    )
    cols = crand(1, 8, 9, dtype=dtype)
    check(
        lambda c, out: torch._C._nn.col2im(c, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), out=out),
        cols,
        torch.empty(0, dtype=dtype),
        **TOL,
    )


@by_dtype(COMPLEX)
def test_unfold_backward_of_complex_images_matches_cpu(dtype, native):
    x = crand(2, 2, 4, 5, dtype=dtype)
    g = crand(2, 2 * 2 * 3, 6, dtype=dtype, seed=1)
    xc = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(F.unfold(xc, (2, 3), stride=(2, 1)), xc, g)
    xt = x.to(DEVICE).requires_grad_()
    (grad,) = torch.autograd.grad(F.unfold(xt, (2, 3), stride=(2, 1)), xt, g.to(DEVICE))
    assert_same(grad, expected, **TOL)


@pytest.mark.parametrize("op", ["im2col", "col2im"])
def test_im2col_and_col2im_of_complex32_raise_as_cpu(op):
    if op == "im2col":
        check(lambda x: F.unfold(x, 2), crand(1, 1, 3, 3).to(torch.complex32), allow_fallback=True)
    else:
        check(lambda c: F.fold(c, (3, 3), 2), crand(1, 4, 4).to(torch.complex32), allow_fallback=True)


# ---- LDL of complex Hermitian matrices (hetrf, hetrs) ----

LINALG_TOL = {torch.complex64: dict(rtol=1e-3, atol=1e-4), torch.complex128: dict(rtol=1e-9, atol=1e-10)}


def hermitian(*shape, dtype, seed, definite=False):
    """A seeded Hermitian matrix (batch) whose diagonal has imaginary parts too (LAPACK ignores them)."""
    a = crand(*shape, dtype=dtype, seed=seed)
    h = a @ a.mH + shape[-1] * torch.eye(shape[-1], dtype=dtype) if definite else a + a.mH
    h.diagonal(dim1=-2, dim2=-1).imag.copy_(crand(*shape[:-1], dtype=dtype, seed=seed + 1).real)
    return h


@by_dtype(COMPLEX)
def test_ldl_factor_of_complex_hermitian_matrices_gives_the_cpus_factors_and_pivots(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (2, 2), (5, 5), (4, 7, 7), (2, 12, 12)):
        for seed in range(3):
            h = hermitian(*shape, dtype=dtype, seed=seed)  # indefinite: 2 x 2 pivots and interchanges too
            check(lambda h: torch.linalg.ldl_factor_ex(h, hermitian=True), h, **tol)
        check(
            lambda h: torch.linalg.ldl_factor(h, hermitian=True),
            hermitian(*shape, dtype=dtype, seed=5, definite=True),
            **tol,
        )
    h = hermitian(6, 6, dtype=dtype, seed=7)
    check(lambda h: torch.linalg.ldl_factor_ex(h.tril(), hermitian=True), h, **tol)  # only the lower triangle is read
    check(lambda h: torch.linalg.ldl_factor_ex(h.mT, hermitian=True), h, **tol)
    check(lambda h: torch.linalg.ldl_factor_ex(h, hermitian=True), torch.zeros(3, 3, dtype=dtype))  # info
    check(lambda h: torch.linalg.ldl_factor_ex(h, hermitian=True), torch.zeros(0, 2, 2, dtype=dtype))


@by_dtype(COMPLEX)
def test_ldl_solve_of_complex_hermitian_factors_matches_cpu(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (5, 5), (3, 8, 8)):
        for seed in range(3):
            LD, pivots = torch.linalg.ldl_factor(hermitian(*shape, dtype=dtype, seed=seed), hermitian=True)
            b = crand(*shape[:-1], 3, dtype=dtype, seed=seed + 10)
            check(lambda *x: torch.linalg.ldl_solve(*x, hermitian=True), LD, pivots, b, **tol)
    LD, pivots = torch.linalg.ldl_factor(hermitian(4, 4, dtype=dtype, seed=3), hermitian=True)
    b = crand(4, 2, dtype=dtype, seed=4)
    check(
        lambda *x, out: torch.linalg.ldl_solve(*x, hermitian=True, out=out),
        LD,
        pivots,
        b,
        torch.empty(0, dtype=dtype),
        **tol,
    )


# ---- complex32 (ComplexHalf) ----

EXACT = dict(rtol=0, atol=0)


def chalf(*shape, seed=0, scale=3.0):
    """Seeded complex32 values (the CPU draws no complex32 numbers itself)."""
    return (crand(*shape, seed=seed) * scale).to(torch.complex32)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize(
    "name,fn",
    [
        ("add", lambda a, b: a + b),
        ("add_alpha", lambda a, b: torch.add(a, b, alpha=1.3)),
        ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=0.7)),
        ("rsub_alpha", lambda a, b: torch.rsub(a, b, alpha=0.3)),
        ("mul", lambda a, b: a * b),
        ("mul_python_scalar", lambda a, b: a * 0.3),
        ("mul_complex_scalar", lambda a, b: a * (0.3 + 0.7j)),
        ("add_complex_scalar", lambda a, b: a + 0.3j),
        ("mul_half_tensor", lambda a, b: a * b.real),
        ("addcmul", lambda a, b: torch.addcmul(a, a, b)),
        ("addcmul_value", lambda a, b: torch.addcmul(a, a, b, value=0.3)),
        ("abs", lambda a, b: a.abs()),
        ("sgn", lambda a, b: a.sgn()),
        ("neg_conj", lambda a, b: -a.conj()),
        ("eq", lambda a, b: a == b),
        ("where", lambda a, b: torch.where(a.real > 0, a, b)),
        ("inplace_add", lambda a, b: a.add_(b, alpha=0.3)),
    ],
)
def test_complex32_arithmetic_rounds_as_the_cpu(name, fn, native):
    # the CPU computes each complex operation in complex64 and rounds its result to complex32
    check(fn, chalf(30, 40), chalf(30, 40, seed=1, scale=1.0), **EXACT)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_complex32_scalars_round_to_half_first_and_overflow_to_infinity_as_the_cpu(native):
    x = chalf(5)
    check(lambda x: x * 1e5, x, **EXACT)
    check(lambda x: x * 1e5j, x, **EXACT)
    check(lambda x: x * 0.1, x, **EXACT)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_complex32_statistics_the_cpu_has_match_it(native):
    x = chalf(20, 30)
    check(torch.var, x)
    check(lambda x: torch.std(x, 1), x)
    check(lambda x: torch.linalg.vector_norm(x, dim=0), x)
    check(lambda x: x.all(), x)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize(
    "name,fn",
    [
        ("sum", lambda x: x.sum()),
        ("sum_dim", lambda x: x.sum(1)),
        ("mean", lambda x: x.mean()),
        ("prod", lambda x: x.prod()),
        ("cumsum", lambda x: x.cumsum(0)),
        ("cumprod", lambda x: x.cumprod(1)),
        ("logcumsumexp", lambda x: x.logcumsumexp(0)),
        ("sum_into_complex32", lambda x: x.to(torch.complex64).sum(dtype=torch.complex32)),
        ("exp", lambda x: x.exp()),
        ("div", lambda x: x / x),
        ("addcdiv", lambda x: torch.addcdiv(x, x, x)),
        ("gather", lambda x: torch.gather(x, 1, torch.tensor([[0, 1]] * 3, device=x.device))),
        ("scatter", lambda x: x.scatter(1, torch.tensor([[0, 1]] * 3, device=x.device), x[:, :2])),
        ("scatter_value", lambda x: x.scatter(1, torch.tensor([[0, 1]] * 3, device=x.device), 2.0)),
        ("scatter_add", lambda x: x.scatter_add(1, torch.tensor([[0, 1]] * 3, device=x.device), x[:, :2])),
        ("take", lambda x: torch.take(x, torch.tensor([0, 5], device=x.device))),
        ("put_", lambda x: x.clone().put_(torch.tensor([0, 5], device=x.device), x[0, :2])),
        ("masked_scatter", lambda x: x.masked_scatter(x.real > 0, x)),
        ("unique", lambda x: torch.unique(x)),
        ("unique_consecutive", lambda x: torch.unique_consecutive(x)),
        ("eye", lambda x: torch.eye(3, dtype=x.dtype, device=x.device)),
        ("linspace", lambda x: torch.linspace(0, 1, 5, dtype=x.dtype, device=x.device)),
    ],
)
def test_complex32_ops_the_cpu_refuses_raise_its_error(name, fn):
    check(fn, chalf(3, 4), allow_fallback=True)


# ---- logcumsumexp ----


def uniform_complex(*shape, dtype, seed, bound=9.0):
    """Seeded complex values with both parts uniform in [-bound, bound] (imaginary parts past pi: the branch the
    CPU's running logaddexp keeps shows)."""
    g = torch.Generator().manual_seed(seed)
    real = torch.empty(shape, dtype=torch.float64).uniform_(-bound, bound, generator=g)
    imag = torch.empty(shape, dtype=torch.float64).uniform_(-bound, bound, generator=g)
    return torch.complex(real, imag).to(dtype)


@by_dtype(COMPLEX)
def test_logcumsumexp_of_complex_values_follows_the_cpus_running_branch(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape, dim in (((7,), 0), ((5, 5, 5), 0), ((5, 5, 5), 1), ((4, 6), -1), ((), 0), ((3, 40), 1), ((0, 4), 1)):
        x = uniform_complex(*shape, dtype=dtype, seed=len(shape) + dim)
        check(lambda x, dim=dim: torch.logcumsumexp(x, dim), x, **tol)
    x = uniform_complex(5, 5, dtype=dtype, seed=3)
    x[:, 0] = 10000  # exp overflows: the running value shifts by the larger real part
    check(lambda x: torch.logcumsumexp(x, 1), x, **tol)
    check(lambda x: torch.logcumsumexp(x.conj().t(), 1), x, **tol)
    check(lambda x, out: torch.logcumsumexp(x, 0, out=out), x, torch.empty(0, dtype=dtype), **tol)


@by_dtype(COMPLEX)
def test_logcumsumexp_of_complex_infinities_and_nans_matches_cpu(dtype, native):
    inf, nan = float("inf"), float("nan")
    values = [
        complex(-inf, 1),
        complex(1, 2),
        complex(inf, 1),
        complex(2, 9),
        complex(inf, 2),
        0j,
        complex(nan, 0),
        1 + 1j,
    ]
    x = torch.tensor(values, dtype=dtype)
    check(lambda x: torch.logcumsumexp(x, 0), x)
    check(lambda x: torch.logcumsumexp(x[1:5], 0), x)
    check(lambda x: torch.logcumsumexp(x, 0), torch.tensor([complex(-inf, 3), complex(-inf, 1), 2j], dtype=dtype))


@by_dtype(COMPLEX)
def test_logcumsumexp_gradient_of_complex_values_matches_cpu(dtype, native):
    x = uniform_complex(3, 6, dtype=dtype, seed=9, bound=2.0)
    g = crand(3, 6, dtype=dtype, seed=10)
    xc = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(torch.logcumsumexp(xc, 1), xc, g)
    xt = x.to(DEVICE).requires_grad_()
    (grad,) = torch.autograd.grad(torch.logcumsumexp(xt, 1), xt, g.to(DEVICE))
    assert_same(grad, expected, **LINALG_TOL[dtype])


# ---- add and sub multiply by alpha, 1 too ----


@by_dtype(COMPLEX)
def test_complex_add_and_sub_of_infinite_parts_give_the_cpus_nans(dtype, native):
    inf = float("inf")
    a = torch.tensor([1 + 1j, 2 + 0j, 3 - 1j], dtype=dtype)
    b = torch.tensor([complex(inf, 0), complex(0, inf), complex(-inf, 2)], dtype=dtype)
    check(torch.add, a, b)
    check(torch.sub, a, b)
    check(lambda a, b: torch.rsub(a, b), a, b)
    check(lambda a, b: torch.add(a, b, alpha=2), a, b)
    check(lambda a, b: a + b.real, a, b)  # a real infinity promoted to (inf, 0) first
    check(lambda a, b: a.add_(b), a, b)


# ---- det, slogdet: the LU their backward reads ----


@by_dtype(COMPLEX)
def test_det_and_slogdet_of_complex_matrices_keep_the_cpus_lu_and_gradient(dtype, native):
    # torch factors A^T for a contiguous real A only; the backward solves with the factors it was given
    a = crand(5, 5, dtype=dtype, seed=2)
    tol = LINALG_TOL[dtype]
    check(torch.ops.aten._linalg_det, a, **tol)
    check(torch.ops.aten._linalg_slogdet, a, **tol)
    g = torch.tensor(0.3 + 0.2j, dtype=dtype)
    for fn, grad_out in ((torch.linalg.det, g), (lambda a: torch.linalg.slogdet(a)[1], g.real), (torch.logdet, g)):
        ac = a.clone().requires_grad_()
        (expected,) = torch.autograd.grad(fn(ac), ac, grad_out)
        at = a.to(DEVICE).requires_grad_()
        (grad,) = torch.autograd.grad(fn(at), at, grad_out.to(DEVICE))
        assert_same(grad, expected, **tol)
