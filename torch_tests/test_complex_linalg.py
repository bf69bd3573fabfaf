"""Complex linear algebra on tiny against CPU torch, natively (no CPU fallback): linalg.qr, geqrf,
householder_product and ormqr (LAPACK's reflectors, so the CPU's Q and R); linalg.solve_triangular and
triangular_solve; linalg.svd, svdvals and torch.svd; linalg.eigh and eigvalsh; and what torch composes from
them (pinv, matrix_rank, matrix_norm, cond, polar, matrix_sqrth, lstsq, svd_lowrank), gradients included.
Singular vectors and eigenvectors are unique only up to a phase per column, so they are compared through what
does not depend on it (their magnitudes, U Vh, reconstructions), as the upstream OpInfos do.
"""

import pytest
import torch
from conftest import DEVICE, check

COMPLEX = (torch.complex64, torch.complex128)
SHAPES = ((4, 4), (5, 3), (3, 5), (2, 6, 4), (2, 1, 3, 5), (1, 1), (7, 7))


def sample(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.complex64 else {"rtol": 1e-9, "atol": 1e-9}


def eye_like(x, n):
    return torch.eye(n, dtype=x.dtype).expand(*x.shape[:-2], n, n)


def hermitian(x, uplo="L"):
    """The Hermitian matrix eigh reads from x: the named triangle, its conjugate mirror, a real diagonal."""
    tri = x.tril() if uplo == "L" else x.triu()
    off = x.tril(-1) if uplo == "L" else x.triu(1)
    return tri + off.mH - 1j * torch.diag_embed(x.diagonal(dim1=-2, dim2=-1).imag)


def gauge_free_svd(a, full_matrices=False):
    """What a complex SVD determines: |U|, S, |Vh| of the first k singular vectors, and U Vh."""
    u, s, vh = torch.linalg.svd(a, full_matrices=full_matrices)
    k = s.shape[-1]
    u, vh = u[..., :k], vh[..., :k, :]
    return u.abs(), s, vh.abs(), u @ vh


def grad_of(loss_fn):
    def fn(a):
        a = a.clone().requires_grad_()
        return torch.autograd.grad(loss_fn(a), a)[0]

    return fn


# ---------------------------------------------------------------------------------------------
# QR


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_qr_is_the_cpus_for_every_mode_and_shape(native, dtype):
    for shape in SHAPES + ((1, 3), (3, 1), (0, 3, 2), (3, 0)):
        for mode in ("reduced", "complete", "r"):
            check(lambda a, mode=mode: torch.linalg.qr(a, mode=mode), sample(*shape, dtype=dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_geqrf_householder_product_and_ormqr_match_cpu(native, dtype):
    tol = tolerance(dtype)
    for shape in ((5, 3), (4, 4), (3, 5), (2, 6, 4)):
        a = sample(*shape, dtype=dtype)
        check(torch.geqrf, a, **tol)
        reflectors, tau = torch.geqrf(a)
        if shape[-2] >= shape[-1]:
            check(torch.linalg.householder_product, reflectors, tau, **tol)
        on_left = sample(*shape[:-1], 3, dtype=dtype, seed=1)
        on_right = sample(*shape[:-2], 3, shape[-2], dtype=dtype, seed=2)
        for left, other in ((True, on_left), (False, on_right)):
            for transpose in (False, True):
                check(
                    lambda r, t, c, left=left, transpose=transpose: torch.ormqr(r, t, c, left, transpose),
                    reflectors,
                    tau,
                    other,
                    **tol,
                )


def test_complex_qr_of_rank_deficient_and_conjugate_views_match_cpu(native):
    tol = tolerance(torch.complex128)
    b = sample(5, 2, dtype=torch.complex128)
    # past the rank, Q's columns and R's rows are rounding noise made orthonormal: compare what is determined
    x = torch.cat([b, 1j * b, torch.zeros(5, 1, dtype=b.dtype)], 1)
    check(lambda a: (torch.linalg.qr(a)[0][:, :2], torch.linalg.qr(a)[1][:2]), x, **tol)
    q, r = (t.cpu() for t in torch.linalg.qr(x.to(DEVICE), mode="complete"))
    torch.testing.assert_close(q.mH @ q, torch.eye(5, dtype=x.dtype), **tol)
    torch.testing.assert_close(q @ r, x, **tol)
    check(lambda a: torch.linalg.qr(a.conj()), b, **tol)
    check(lambda a: torch.linalg.qr(a.mH, mode="complete"), b, **tol)
    # a real diagonal with nothing below it is left as it is; a complex one is turned real
    check(torch.linalg.qr, torch.tensor([[2.0 + 0j, 1j], [0, -3]]), **tol)
    check(torch.linalg.qr, torch.tensor([[1j, 2.0], [0, 1 + 1j]], dtype=torch.complex128), **tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_solve_triangular_matches_cpu(native, dtype):
    tol = tolerance(dtype)
    a = sample(2, 4, 4, dtype=dtype) + 4 * torch.eye(4)
    for upper, left, unit in ((True, True, False), (False, True, False), (True, False, False), (False, False, True)):
        b = sample(2, 4, 3, dtype=dtype, seed=1) if left else sample(2, 3, 4, dtype=dtype, seed=1)
        kwargs = {"upper": upper, "left": left, "unitriangular": unit}
        check(lambda a, b, kwargs=kwargs: torch.linalg.solve_triangular(a, b, **kwargs), a, b, **tol)
        check(lambda a, b, kwargs=kwargs: torch.linalg.solve_triangular(a.conj(), b[:1], **kwargs), a, b, **tol)
    # a conjugate-transposed A gives a row-major result, as on the CPU
    check(lambda a, b: torch.linalg.solve_triangular(a.mH, b, upper=True), a[0], sample(4, 2, dtype=dtype), **tol)
    check(
        lambda a, b: torch.linalg.solve_triangular(a.mH, b, upper=False, left=False),
        a[0],
        sample(2, 4, dtype=dtype),
        **tol,
    )

    def out_form(a, b):
        out = torch.empty(0, dtype=a.dtype, device=a.device)
        return torch.linalg.solve_triangular(a, b, upper=True, out=out)

    check(out_form, a, sample(2, 4, 3, dtype=dtype, seed=1), **tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_triangular_solve_transposes_without_conjugating_as_on_the_cpu(native, dtype):
    tol = tolerance(dtype)
    a = sample(2, 4, 4, dtype=dtype) + 4 * torch.eye(4)
    b = sample(2, 4, 3, dtype=dtype, seed=1)
    for upper, transpose, unit in ((True, False, False), (False, True, False), (True, True, True)):
        check(lambda b, a, u=upper, t=transpose, n=unit: torch.triangular_solve(b, a, u, t, n), b, a, **tol)
    check(lambda b, a: torch.triangular_solve(b, a.conj(), upper=False), b[:1], a, **tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_qr_gradients_match_cpu(native, dtype):
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.complex64 else {"rtol": 1e-8, "atol": 1e-8}

    def loss(a):
        q, r = torch.linalg.qr(a)
        return (q.abs() * torch.arange(q.shape[-1], dtype=q.real.dtype, device=q.device)).sum() + r.real.sum()

    for shape in ((5, 3), (4, 4)):
        check(grad_of(loss), sample(*shape, dtype=dtype), **tol)


# ---------------------------------------------------------------------------------------------
# SVD


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_svdvals_match_cpu(native, dtype):
    for shape in SHAPES:
        check(torch.linalg.svdvals, sample(*shape, dtype=dtype), **tolerance(dtype))
        check(lambda a: torch._linalg_svd(a, compute_uv=False), sample(*shape, dtype=dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_svd_vectors_match_cpu_up_to_their_phases(native, dtype):
    for shape in SHAPES:
        for full in (True, False):
            check(lambda a, full=full: gauge_free_svd(a, full), sample(*shape, dtype=dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_svd_vectors_are_unitary_and_reconstruct(native, dtype):
    tol = tolerance(dtype)
    for shape in ((4, 4), (6, 3), (3, 6), (2, 5, 3), (2, 3, 5)):
        for full in (True, False):
            x = sample(*shape, dtype=dtype)
            u, s, vh = torch.linalg.svd(x.to(DEVICE), full_matrices=full)
            ue, se, vhe = torch.linalg.svd(x, full_matrices=full)
            for t, e in ((u, ue), (s, se), (vh, vhe)):
                assert (t.dtype, t.shape, t.stride()) == (e.dtype, e.shape, e.stride())
            u, s, vh = u.cpu(), s.cpu(), vh.cpu()
            torch.testing.assert_close(s, se, **tol)
            torch.testing.assert_close(u.mH @ u, eye_like(u, u.shape[-1]), **tol)
            torch.testing.assert_close(vh @ vh.mH, eye_like(vh, vh.shape[-2]), **tol)
            k = s.shape[-1]
            torch.testing.assert_close(u[..., :k] * s.unsqueeze(-2).to(dtype) @ vh[..., :k, :], x, **tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_svd_of_rank_deficient_input_has_unitary_vectors(native, dtype):
    tol = tolerance(dtype)
    b = sample(6, 2, dtype=dtype)
    for x in (torch.cat([b, 1j * b, torch.zeros(6, 1, dtype=dtype)], 1), torch.cat([b, b], 1).mT):
        u, s, vh = (t.cpu() for t in torch.linalg.svd(x.to(DEVICE)))
        torch.testing.assert_close(s, torch.linalg.svdvals(x), **tol)
        torch.testing.assert_close(u.mH @ u, eye_like(u, u.shape[-1]), **tol)
        torch.testing.assert_close(vh @ vh.mH, eye_like(vh, vh.shape[-1]), **tol)
        k = s.shape[-1]
        torch.testing.assert_close(u[:, :k] * s.to(dtype) @ vh[:k], x, **tol)
    check(torch.linalg.svdvals, torch.zeros(3, 4, dtype=dtype))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_svd_of_matrices_with_orthogonal_columns_matches_cpu(native, dtype):
    # the columns' inner products are rounding noise from the start: their phases must not make the
    # rotations non-unitary
    q = torch.linalg.qr(sample(2, 6, 6, dtype=dtype))[0]
    for x in (q, q[..., :4], q[..., :4, :] * 3, torch.eye(5, dtype=dtype) * (1 - 2j)):
        check(torch.linalg.svdvals, x, **tolerance(dtype))
        check(gauge_free_svd, x[..., :1, :], **tolerance(dtype))
        u, s, vh = (t.cpu() for t in torch.linalg.svd(x.to(DEVICE), full_matrices=False))
        torch.testing.assert_close(u * s.unsqueeze(-2).to(dtype) @ vh, x, **tolerance(dtype))
        torch.testing.assert_close(u.mH @ u, eye_like(u, u.shape[-1]), **tolerance(dtype))


def test_complex_svd_of_views_empty_and_out_forms_match_cpu(native):
    x = sample(2, 5, 3)
    check(lambda a: gauge_free_svd(a.mH), x, **tolerance(torch.complex64))
    check(lambda a: gauge_free_svd(a.conj()), x, **tolerance(torch.complex64))
    check(lambda a: torch.linalg.svdvals(a[:, ::2]), sample(4, 6), **tolerance(torch.complex64))
    for shape in ((0, 3, 3), (3, 0), (0, 4)):
        check(lambda a: torch.linalg.svd(a, full_matrices=True), sample(*shape))
        check(lambda a: torch.linalg.svd(a, full_matrices=False), sample(*shape))

    def out_form(a):
        u, s, vh = (torch.empty(0, dtype=t, device=a.device) for t in (a.dtype, a.real.dtype, a.dtype))
        torch.linalg.svd(a, full_matrices=False, out=(u, s, vh))
        return u.abs(), s, vh.abs(), u @ vh

    check(out_form, sample(5, 3, dtype=torch.complex128), **tolerance(torch.complex128))


def test_torch_svd_of_complex_input_matches_cpu(native):
    def fn(a, some):
        u, s, v = torch.svd(a, some=some)
        k = s.shape[-1]
        return u[..., :k].abs(), s, v[..., :k].abs(), u[..., :k] @ v[..., :k].mH

    for some in (True, False):
        check(lambda a, some=some: fn(a, some), sample(5, 3, dtype=torch.complex128), **tolerance(torch.complex128))
        check(lambda a, some=some: fn(a, some), sample(2, 3, 4), **tolerance(torch.complex64))
    check(lambda a: torch.svd(a, compute_uv=False)[1], sample(4, 3), **tolerance(torch.complex64))


def test_complex_svd_of_non_finite_input_raises_as_on_the_cpu(native):
    x = sample(3, 3)
    x[1, 1] = float("nan")
    check(torch.linalg.svd, x)


# ---------------------------------------------------------------------------------------------
# eigh


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_eigvalsh_reads_the_named_triangle_and_matches_cpu(native, dtype):
    for shape in ((1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 1, 6, 6)):
        for uplo in ("L", "U"):
            # neither Hermitian nor with a real diagonal: only the named triangle's values count
            x = sample(*shape, dtype=dtype)
            check(lambda a, uplo=uplo: torch.linalg.eigvalsh(a, UPLO=uplo), x, **tolerance(dtype))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_eigh_vectors_are_the_cpus_up_to_their_phases(native, dtype):
    tol = tolerance(dtype)
    for shape in ((5, 5), (3, 4, 4), (7, 7), (1, 1)):
        for uplo in ("L", "U"):
            x = sample(*shape, dtype=dtype)
            w, v = torch.linalg.eigh(x.to(DEVICE), UPLO=uplo)
            w_cpu, v_cpu = torch.linalg.eigh(x, UPLO=uplo)
            for t, e in ((w, w_cpu), (v, v_cpu)):
                assert (t.dtype, t.shape, t.stride()) == (e.dtype, e.shape, e.stride())
            w, v = w.cpu(), v.cpu()
            torch.testing.assert_close(w, w_cpu, **tol)
            torch.testing.assert_close(v.mH @ v, eye_like(v, shape[-1]), **tol)
            torch.testing.assert_close(v @ torch.diag_embed(w).to(dtype) @ v.mH, hermitian(x, uplo), **tol)
            # each eigenvector is the CPU's times a unit complex number
            torch.testing.assert_close((v.conj() * v_cpu).sum(-2).abs(), torch.ones_like(w), **tol)
            check(lambda a, uplo=uplo: torch.linalg.eigh(a, UPLO=uplo)[1].abs(), x, **tol)


def test_complex_eigh_of_repeated_eigenvalues_views_empty_and_out_forms(native):
    check(torch.linalg.eigvalsh, torch.diag(torch.tensor([3.0, -1.0, 3.0, 0.0])).to(torch.complex64))
    check(torch.linalg.eigvalsh, torch.full((4, 4), 1 + 1j, dtype=torch.complex128), rtol=1e-9, atol=1e-9)
    check(torch.linalg.eigvalsh, torch.zeros(0, 3, 3, dtype=torch.complex64))
    check(lambda a: torch.linalg.eigh(a)[1], torch.zeros(0, 3, 3, dtype=torch.complex64))
    x = sample(2, 4, 4, dtype=torch.complex128)
    check(lambda a: torch.linalg.eigvalsh(a.mH), x, rtol=1e-9, atol=1e-9)
    check(lambda a: torch.linalg.eigvalsh(a.conj(), UPLO="U"), x, rtol=1e-9, atol=1e-9)

    def out_form(a):
        w, v = torch.empty(0, dtype=a.real.dtype, device=a.device), torch.empty(0, dtype=a.dtype, device=a.device)
        torch.linalg.eigh(a, out=(w, v))
        return w, v.abs()

    check(out_form, x, rtol=1e-9, atol=1e-9)


def test_complex_eigh_of_non_finite_input_raises_as_on_the_cpu(native):
    x = sample(3, 3)
    x[2, 0] = float("inf")
    check(torch.linalg.eigh, x)


# ---------------------------------------------------------------------------------------------
# what torch composes from them


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_pinv_rank_norms_and_cond_match_cpu(native, dtype):
    tol = tolerance(dtype)
    x = sample(5, 3, dtype=dtype)
    h = hermitian(sample(4, 4, dtype=dtype, seed=2))
    check(torch.linalg.pinv, x, **tol)
    check(torch.linalg.pinv, sample(2, 3, 5, dtype=dtype), **tol)
    check(torch.pinverse, x, **tol)
    check(lambda a: torch.linalg.pinv(a, hermitian=True), h, **tol)
    check(torch.linalg.matrix_rank, torch.cat([x, 1j * x], 1))
    check(lambda a: torch.linalg.matrix_rank(a, hermitian=True), h)
    for ord in ("nuc", 2, -2):
        check(lambda a, ord=ord: torch.linalg.matrix_norm(a, ord), x, **tol)
        check(lambda a, ord=ord: torch.linalg.norm(a, ord), sample(2, 4, 3, dtype=dtype), **tol)
    check(lambda a: torch.norm(a, p="nuc"), x, **tol)
    for ord in (None, 2, -2, "nuc"):
        check(lambda a, ord=ord: torch.linalg.cond(a, ord), sample(3, 4, 4, dtype=dtype), **tol)


@pytest.mark.parametrize("driver", ("gelsy", "gelsd", "gelss", "gels"))
def test_complex_lstsq_matches_cpu_for_each_driver(native, driver):
    for dtype in COMPLEX:
        for a_shape, b_shape in (((5, 3), (5, 2)), ((2, 6, 4), (2, 6, 1)), ((4, 4), (4,)), ((3, 5), (3,))):
            a, b = sample(*a_shape, dtype=dtype), sample(*b_shape, dtype=dtype, seed=1)
            check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), a, b, **tolerance(dtype))
    # rank-deficient: the minimum-norm solution, the rank, and no residuals from gelsd and gelss
    x = sample(6, 2, dtype=torch.complex128)
    a, b = torch.cat([x, 1j * x], 1), sample(6, 2, dtype=torch.complex128, seed=1)
    if driver != "gels":
        check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), a, b, **tolerance(torch.complex128))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_polar_and_matrix_sqrth_match_cpu(native, dtype):
    tol = tolerance(dtype)
    for shape in ((4, 3), (3, 3), (2, 5, 5)):
        check(torch.linalg.polar, sample(*shape, dtype=dtype), **tol)
    a = sample(2, 4, 4, dtype=dtype)
    spd = a @ a.mH + torch.eye(4)
    check(torch.linalg.matrix_sqrth, spd, **tol)
    check(torch.linalg.matrix_sqrth, sample(4, 4, dtype=dtype), **tol)
    u, h = (t.cpu() for t in torch.linalg.polar(a.to(DEVICE)))
    torch.testing.assert_close(u @ h, a, **tol)
    torch.testing.assert_close(h, h.mH, **tol)


# ---------------------------------------------------------------------------------------------
# gradients (torch's svd and eigh backward formulas on the native forward)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_svd_gradients_match_cpu(native, dtype):
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.complex64 else {"rtol": 1e-8, "atol": 1e-8}

    def through_vectors(a):
        # phase-invariant: U Vh, the singular values and |U|
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        return (u @ vh).abs().pow(2).sum() * 0.5 + (u @ vh).real.sum() + s.pow(2).sum() + u.abs()[0].sum()

    for shape in ((5, 3), (3, 5), (2, 4, 4)):
        x = sample(*shape, dtype=dtype)
        check(grad_of(lambda a: torch.linalg.svdvals(a).sum()), x, **tol)
        check(grad_of(through_vectors), x, **tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_eigh_gradients_match_cpu(native, dtype):
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.complex64 else {"rtol": 1e-8, "atol": 1e-8}
    x = hermitian(sample(2, 4, 4, dtype=dtype))

    def through_vectors(a):
        w, v = torch.linalg.eigh(a)
        return (w * torch.arange(4.0, dtype=w.dtype, device=w.device)).sum() + v.abs().pow(2)[..., 0, :].sum()

    check(grad_of(through_vectors), x, **tol)
    check(grad_of(lambda a: torch.linalg.eigvalsh(a).pow(2).sum()), x, **tol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_polar_pinv_and_sqrth_gradients_match_cpu(native, dtype):
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.complex64 else {"rtol": 1e-8, "atol": 1e-8}
    x = sample(4, 3, dtype=dtype)

    def polar_loss(a):
        u, h = torch.linalg.polar(a)
        return u.real.sum() + h.abs().sum()

    check(grad_of(polar_loss), x, **tol)
    check(grad_of(lambda a: torch.linalg.pinv(a).abs().sum()), x, **tol)
    a = sample(4, 4, dtype=dtype)
    spd = a @ a.mH + torch.eye(4)
    check(grad_of(lambda a: torch.linalg.matrix_sqrth(a).real.sum()), spd, **tol)


def test_complex_low_rank_svd_runs_natively_and_reconstructs(native):
    # svd_lowrank draws its random projection on the input's device: compare what does not depend on it
    a = sample(2, 8, 3, dtype=torch.complex128) @ sample(2, 3, 6, dtype=torch.complex128, seed=1)
    u, s, v = (t.cpu() for t in torch.svd_lowrank(a.to(DEVICE), q=3))
    torch.testing.assert_close(s, torch.linalg.svdvals(a)[..., :3], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(u * s.unsqueeze(-2).to(a.dtype) @ v.mH, a, rtol=1e-9, atol=1e-9)
