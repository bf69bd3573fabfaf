"""Orthogonal factorizations on tiny against CPU torch: linalg.qr (every mode), geqrf, householder_product,
ormqr; linalg.eigh and eigvalsh; linalg.svd, svdvals and torch.svd; linalg.lstsq; linalg.polar and
linalg.matrix_sqrth. Values (eigenvectors and
singular vectors up to sign, through reconstructions), shapes, strides, dtypes, errors, gradients, and
kernel reuse across the steps of a factorization.
"""

import pytest
import torch
from conftest import DEVICE, check

FLOATS = (torch.float32, torch.float64)
SHAPES = ((4, 4), (5, 3), (3, 5), (2, 5, 3), (2, 1, 3, 5), (1, 1))


def sample(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-9}


def eye_like(x, n):
    return torch.eye(n, dtype=x.dtype).expand(*x.shape[:-2], n, n)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_qr_matches_cpu_for_every_mode_and_shape(native, dtype):
    for shape in SHAPES:
        for mode in ("reduced", "complete", "r"):
            check(lambda a, mode=mode: torch.linalg.qr(a, mode=mode), sample(*shape, dtype=dtype), **tolerance(dtype))


def test_qr_of_noncontiguous_and_empty_inputs(native):
    check(lambda a: torch.linalg.qr(a.mT), sample(2, 3, 5), **tolerance(torch.float32))
    check(lambda a: torch.linalg.qr(a[:, ::2]), sample(4, 6), **tolerance(torch.float32))
    for shape in ((0, 3, 3), (3, 0), (0, 4)):
        check(lambda a: torch.linalg.qr(a, mode="complete"), sample(*shape))


def test_qr_gives_orthonormal_q_and_reproduces_a(native):
    a = sample(3, 7, 4, dtype=torch.float64)
    q, r = torch.linalg.qr(a.to(DEVICE), mode="complete")
    q, r = q.cpu(), r.cpu()
    torch.testing.assert_close(q.mT @ q, eye_like(q, 7))
    torch.testing.assert_close(q @ r, a)
    assert (r.tril(-1) == 0).all()


def test_qr_of_rank_deficient_and_zero_columns_matches_cpu(native):
    a = sample(5, 3)
    a[:, 1] = 0
    check(torch.linalg.qr, a, **tolerance(torch.float32))
    # the columns of Q past the rank are rounding noise made orthonormal: compare what is determined
    b = sample(4, 2, dtype=torch.float64)
    x = torch.cat([b, b], 1)
    q, r = (t.cpu() for t in torch.linalg.qr(x.to(DEVICE)))
    torch.testing.assert_close(q.mT @ q, torch.eye(4, dtype=x.dtype))
    torch.testing.assert_close(q @ r, x)
    torch.testing.assert_close(r[:2], torch.linalg.qr(x)[1][:2])


def test_qr_out_form_matches_cpu(native):
    def fn(a):
        q, r = torch.empty(0), torch.empty(0)
        q, r = q.to(a.device), r.to(a.device)
        return torch.linalg.qr(a, out=(q, r))

    check(fn, sample(5, 3))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_geqrf_householder_product_and_ormqr_match_cpu(native, dtype):
    tol = tolerance(dtype)
    for shape in SHAPES:
        check(torch.geqrf, sample(*shape, dtype=dtype), **tol)
    for shape in ((5, 3), (2, 4, 4), (6, 2)):
        a, tau = torch.geqrf(sample(*shape, dtype=dtype))
        check(torch.linalg.householder_product, a, tau, **tol)
        check(torch.linalg.householder_product, a, tau[..., :1], **tol)
    a, tau = torch.geqrf(sample(2, 5, 3, dtype=dtype))
    for left in (True, False):
        for transpose in (True, False):
            c = sample(2, 5, 4, dtype=dtype, seed=1) if left else sample(2, 4, 5, dtype=dtype, seed=1)
            check(lambda a, t, c, left=left, tr=transpose: torch.ormqr(a, t, c, left, tr), a, tau, c, **tol)


def test_qr_family_errors_match_cpu(native):
    r = sample
    cases = [
        (torch.linalg.qr, (r(3, 3).int(),)),
        (torch.linalg.qr, (r(3, 3).half(),)),
        (torch.linalg.qr, (r(3),)),
        (lambda a: torch.linalg.qr(a, mode="x"), (r(3, 3),)),
        (torch.geqrf, (r(3),)),
        (torch.geqrf, (r(3, 3).int(),)),
        (torch.linalg.householder_product, (r(3), r(1))),
        (torch.linalg.householder_product, (r(2, 3), r(2))),
        (torch.linalg.householder_product, (r(3, 2), r(3))),
        (torch.linalg.householder_product, (r(2, 3, 2), r(3, 2))),
        (torch.linalg.householder_product, (r(3, 2), r(2).double())),
        (torch.linalg.householder_product, (r(3, 2).half(), r(2).half())),
        (torch.ormqr, (r(3), r(1), r(3, 3))),
        (torch.ormqr, (r(3, 2), r(2), r(3))),
        (torch.ormqr, (r(4, 2), r(2), r(3, 2))),
        (torch.ormqr, (r(3, 2), r(2), r(1, 3, 3))),
        (torch.ormqr, (r(2, 3, 2), r(2, 2), r(3, 3, 3))),
        (torch.ormqr, (r(3, 2), r(2).double(), r(3, 3))),
        (torch.ormqr, (r(3, 2).half(), r(2).half(), r(3, 3).half())),
    ]
    for fn, args in cases:
        check(fn, *args)


def test_qr_steps_reuse_their_kernels(native):
    """The step index is a kernel argument: a bigger matrix compiles no more kernels than a smaller one. (Counted
    as compiles and disk-cache loads: `loaded_programs` is the number held, which stops growing once the
    process holds TINY_MAX_PROGRAMS; shapes no other test uses, whose kernels no earlier test made.)"""

    def made():
        s = torch.tiny.stats()
        return s["compiles"] + s["disk_hits"]

    programs = []
    for n in (13, 23):
        a = sample(7, n, n).to(DEVICE)
        before = made()
        torch.linalg.qr(a)[0].cpu()
        programs.append(made() - before)
    assert 0 < programs[1] <= programs[0]


# ---------------------------------------------------------------------------------------------
# eigh


def symmetric(*shape, dtype=torch.float64, seed=0):
    x = sample(*shape, dtype=dtype, seed=seed)
    return x + x.mT


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_eigvalsh_matches_cpu(native, dtype):
    for shape in ((1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 1, 6, 6)):
        for uplo in ("L", "U"):
            # a nonsymmetric input: only the named triangle counts
            x = sample(*shape, dtype=dtype)
            check(lambda a, uplo=uplo: torch.linalg.eigvalsh(a, UPLO=uplo), x, **tolerance(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_eigh_vectors_reconstruct_the_matrix(native, dtype):
    for shape in ((5, 5), (3, 4, 4), (7, 7)):
        for uplo in ("L", "U"):
            x = sample(*shape, dtype=dtype)
            w, v = torch.linalg.eigh(x.to(DEVICE), UPLO=uplo)
            w_cpu, v_cpu = torch.linalg.eigh(x, UPLO=uplo)
            assert (w.dtype, w.shape, w.stride(), v.shape, v.stride()) == (
                w_cpu.dtype,
                w_cpu.shape,
                w_cpu.stride(),
                v_cpu.shape,
                v_cpu.stride(),
            )
            w, v = w.cpu(), v.cpu()
            sym = x.tril() + x.tril(-1).mT if uplo == "L" else x.triu() + x.triu(1).mT
            torch.testing.assert_close(w, w_cpu, **tolerance(dtype))
            torch.testing.assert_close(v.mT @ v, eye_like(v, shape[-1]), **tolerance(dtype))
            torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, sym, **tolerance(dtype))
            # each eigenvector is the CPU's up to its sign
            torch.testing.assert_close((v * v_cpu).sum(-2).abs(), torch.ones_like(w), **tolerance(dtype))


def test_eigh_of_repeated_and_diagonal_eigenvalues(native):
    check(torch.linalg.eigvalsh, torch.diag(torch.tensor([3.0, -1.0, 3.0, 0.0])))
    check(torch.linalg.eigvalsh, torch.ones(4, 4, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    check(torch.linalg.eigvalsh, torch.zeros(0, 3, 3))


def test_eigh_errors_match_cpu(native):
    for args in ((sample(3, 3).int(),), (sample(3, 3).half(),), (sample(3),), (sample(3, 4),)):
        check(torch.linalg.eigh, *args)
    check(lambda a: torch.linalg.eigh(a, UPLO="X"), sample(3, 3))


def test_eigh_gradients_match_cpu(native):
    x = symmetric(4, 4)

    def fn(a):
        a = a.clone().requires_grad_()
        w, v = torch.linalg.eigh(a)
        # sign-invariant: the eigenvalues and the projections onto each eigenvector
        loss = (w * torch.arange(4.0, dtype=a.dtype, device=a.device)).sum() + (v**2)[0].sum() * 0.5
        (g,) = torch.autograd.grad(loss, a)
        return g

    check(fn, x, rtol=1e-7, atol=1e-7)
    check(lambda a: torch.autograd.grad(torch.linalg.eigvalsh(a.requires_grad_()).pow(2).sum(), a)[0], x.clone())


# ---------------------------------------------------------------------------------------------
# SVD


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_svdvals_match_cpu(native, dtype):
    for shape in SHAPES + ((6, 6), (3, 7, 4)):
        check(torch.linalg.svdvals, sample(*shape, dtype=dtype), **tolerance(dtype))
        check(lambda a: torch._linalg_svd(a, compute_uv=False), sample(*shape, dtype=dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_svd_vectors_are_orthonormal_and_reconstruct(native, dtype):
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
            torch.testing.assert_close(u.mT @ u, eye_like(u, u.shape[-1]), **tol)
            torch.testing.assert_close(vh @ vh.mT, eye_like(vh, vh.shape[-2]), **tol)
            k = s.shape[-1]
            torch.testing.assert_close(u[..., :k] * s.unsqueeze(-2) @ vh[..., :k, :], x, **tol)


def test_svd_of_nearly_orthogonal_columns_matches_cpu(native):
    # the upstream OpInfo's lstsq sample: columns orthogonal up to ~1e-4, two singular values within 1e-5,
    # so the Jacobi sweeps' dot products end as rounding noise (tested against zero, and divided by)
    rows = (
        ("-0x1.eb9178p-3", "0x1.f09a84p-1", "0x1.4e493p-5"),
        ("0x1.d4a158p-1", "0x1.ed3dc4p-3", "-0x1.183024p-2"),
        ("0x1.284e08p-2", "0x1.614a2cp-5", "0x1.dde5c2p-2"),
        ("0x1.31abc8p-3", "0x1.c63fp-8", "0x1.aeba3cp-1"),
    )
    a = torch.tensor([[float.fromhex(v) for v in row] for row in rows])
    tol = tolerance(torch.float32)
    check(torch.linalg.svdvals, a, **tol)
    check(lambda a, b: torch.linalg.lstsq(a, b, driver="gels").solution, a, sample(4, 3), **tol)
    # and a batch of such matrices: orthonormal columns, scaled by 1 + 1e-3 noise
    q = torch.linalg.qr(sample(64, 6, 4, dtype=torch.float64)).Q
    x = (q * (1 + 1e-3 * sample(64, 1, 4, dtype=torch.float64, seed=1))).float()
    check(torch.linalg.svdvals, x, **tol)
    u, s, vh = (t.cpu() for t in torch.linalg.svd(x.to(DEVICE), full_matrices=False))
    torch.testing.assert_close(u * s.unsqueeze(-2) @ vh, x, **tol)


def test_svd_of_rank_deficient_input_has_orthonormal_vectors(native):
    b = sample(5, 1, dtype=torch.float64)
    x = torch.cat([b, b, torch.zeros(5, 1, dtype=torch.float64)], 1)
    u, s, vh = (t.cpu() for t in torch.linalg.svd(x.to(DEVICE)))
    torch.testing.assert_close(s, torch.linalg.svdvals(x), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(u.mT @ u, torch.eye(5, dtype=x.dtype))
    torch.testing.assert_close(vh @ vh.mT, torch.eye(3, dtype=x.dtype))
    torch.testing.assert_close(u[:, :3] * s @ vh, x)


def test_torch_svd_and_errors_match_cpu(native):
    check(lambda a: torch.svd(a, compute_uv=False), sample(4, 3), **tolerance(torch.float32))
    check(lambda a: torch.svd(a)[1], sample(3, 4), **tolerance(torch.float32))
    for args in ((sample(3, 3).int(),), (sample(3, 3).half(),), (sample(3),)):
        check(torch.linalg.svd, *args)
    check(lambda a: torch.linalg.svd(a, driver="gesvd"), sample(3, 3))


def test_svd_gradients_match_cpu(native):
    x = sample(5, 3, dtype=torch.float64)
    check(lambda a: torch.autograd.grad(torch.linalg.svdvals(a.requires_grad_()).sum(), a)[0], x.clone())

    def fn(a):
        a = a.clone().requires_grad_()
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        # sign-invariant: the reconstruction and the projector onto the left singular vectors
        loss = (u * s.unsqueeze(-2) @ vh).pow(2).sum() + (u @ u.mT).diagonal().sum()
        return torch.autograd.grad(loss, a)[0]

    check(fn, x, rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# lstsq


@pytest.mark.parametrize("driver", ("gelsy", "gelsd", "gelss", "gels"))
def test_lstsq_matches_cpu_for_each_driver(native, driver):
    for a_shape, b_shape in (
        ((5, 3), (5, 2)),
        ((2, 6, 4), (2, 6, 1)),
        ((4, 4), (4,)),
        ((2, 5, 3), (1, 5, 2)),
        ((2, 5, 3), (2, 5)),
        ((3, 5), (3,)),
    ):
        a, b = sample(*a_shape, dtype=torch.float64), sample(*b_shape, dtype=torch.float64, seed=1)
        check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), a, b, rtol=1e-8, atol=1e-8)


def test_lstsq_of_wide_input_gives_the_minimum_norm_solution(native):
    a, b = sample(3, 5), sample(3, 2, seed=1)
    check(torch.linalg.lstsq, a, b, rtol=1e-4, atol=1e-4)


def test_lstsq_errors_match_cpu(native):
    r = sample
    for args, kwargs in (
        ((r(3), r(3)), {}),
        ((r(3, 2), r(4, 1)), {}),
        ((r(3, 2), r(3, 1)), {"driver": "foo"}),
        ((r(3, 2).int(), r(3, 1).int()), {}),
        ((r(3, 2), r(3, 1).double()), {}),
        ((r(3, 2), r(1, 1, 3, 1)), {}),
    ):
        check(lambda a, b, kwargs=kwargs: torch.linalg.lstsq(a, b, **kwargs), *args)


def test_pinv_and_matrix_rank_through_svd_and_eigh_match_cpu(native):
    x = sample(5, 3, dtype=torch.float64)
    check(torch.linalg.pinv, x, rtol=1e-8, atol=1e-8)
    check(torch.linalg.matrix_rank, torch.cat([x, x], 1))
    check(lambda a: torch.linalg.matrix_norm(a, "nuc"), x, rtol=1e-8, atol=1e-8)
    check(lambda a: torch.linalg.matrix_norm(a, 2), x, rtol=1e-8, atol=1e-8)
    check(lambda a: torch.linalg.pinv(a, hermitian=True), symmetric(4, 4), rtol=1e-8, atol=1e-8)


def test_qr_gradients_match_cpu(native):
    x = sample(5, 3, dtype=torch.float64)

    def fn(a, mode):
        a = a.clone().requires_grad_()
        q, r = torch.linalg.qr(a, mode=mode)
        return torch.autograd.grad((q.sum(0) * 2 + r.sum()).sum(), a)[0]

    check(lambda a: fn(a, "reduced"), x, rtol=1e-8, atol=1e-8)
    check(lambda a: fn(a, "complete"), sample(3, 3, dtype=torch.float64), rtol=1e-8, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# matrix_exp, cross


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_matrix_exp_matches_cpu(native, dtype):
    for shape, scale in (((3, 3), 1.0), ((2, 4, 4), 0.1), ((5, 5), 6.0), ((3, 1, 1), 1.0), ((0, 2, 2), 1.0)):
        check(torch.linalg.matrix_exp, sample(*shape, dtype=dtype) * scale, **tolerance(dtype))
    check(lambda a: torch.linalg.matrix_exp(a.mT), sample(2, 3, 3, dtype=dtype), **tolerance(dtype))


def test_matrix_exp_errors_and_gradient_match_cpu(native):
    for x in (sample(2, 3), sample(3), sample(3, 3).int()):
        check(torch.linalg.matrix_exp, x)
    x = sample(3, 3, dtype=torch.float64)
    check(
        lambda a: torch.autograd.grad(torch.linalg.matrix_exp(a.requires_grad_()).sum(), a)[0], x, rtol=1e-8, atol=1e-8
    )


def test_cross_matches_cpu(native):
    check(torch.linalg.cross, sample(4, 3), sample(4, 3, seed=1))
    check(lambda a, b: torch.linalg.cross(a, b, dim=0), sample(3, 2), sample(3, 1, seed=1))
    check(torch.linalg.cross, sample(2, 1, 3, dtype=torch.float64), sample(1, 5, 3, dtype=torch.float64, seed=1))
    check(torch.linalg.cross, torch.arange(6).reshape(2, 3), torch.arange(6).flip(0).reshape(2, 3))
    check(lambda a, b: torch.cross(a, b, dim=1), sample(2, 3), sample(2, 3, seed=1))
    check(lambda a, b: torch.linalg.cross(a.mT, b.mT, dim=0), sample(4, 3), sample(4, 3, seed=1))
    for a, b in ((sample(4), sample(4)), (sample(3).int(), sample(3)), (sample(2, 3), sample(4, 3))):
        check(torch.linalg.cross, a, b)
    check(torch.linalg.cross, torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))


def test_cross_gradient_matches_cpu(native):
    def fn(a, b):
        a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
        return torch.autograd.grad(torch.linalg.cross(a, b).pow(2).sum(), (a, b))

    check(fn, sample(4, 3), sample(4, 3, seed=1))


def test_out_forms_match_cpu(native):
    def outs(device, *dtypes):
        return tuple(torch.empty(0, dtype=d, device=device) for d in dtypes)

    f32, i64 = torch.float32, torch.int64
    # |eigenvectors|: a column's sign is free
    check(
        lambda a: [t.abs() for t in torch.linalg.eigh(a, out=outs(a.device, f32, f32))],
        sample(2, 4, 4),
        **tolerance(f32),
    )
    check(lambda a: torch.linalg.eigvalsh(a, out=outs(a.device, f32)[0]), sample(4, 4), **tolerance(f32))
    check(lambda a: torch.linalg.svdvals(a, out=outs(a.device, f32)[0]), sample(2, 5, 3), **tolerance(f32))
    check(lambda a: torch.geqrf(a, out=outs(a.device, f32, f32)), sample(5, 3), **tolerance(f32))
    a, tau = torch.geqrf(sample(5, 3))
    check(lambda a, t: torch.linalg.householder_product(a, t, out=outs(a.device, f32)[0]), a, tau, **tolerance(f32))
    check(lambda a, t, c: torch.ormqr(a, t, c, out=outs(a.device, f32)[0]), a, tau, sample(5, 2), **tolerance(f32))
    check(
        lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd", out=outs(a.device, f32, f32, i64, f32)),
        sample(5, 3),
        sample(5, 2, seed=1),
        **tolerance(f32),
    )
    # an out= of the right size keeps its strides
    check(lambda a: torch.linalg.householder_product(a, tau.to(a.device), out=torch.empty_like(a)), a)


def test_noncontiguous_eigh_and_svd_inputs_match_cpu(native):
    x = sample(6, 6, dtype=torch.float64)
    check(lambda a: torch.linalg.eigvalsh(a[::2, ::2]), x, rtol=1e-9, atol=1e-9)
    check(lambda a: torch.linalg.svdvals(a.mT[1:, :4]), x, rtol=1e-9, atol=1e-9)


def test_eigh_and_svd_of_huge_tiny_and_non_finite_inputs_match_cpu(native):
    for scale in (1e30, 1e-30):
        x = sample(3, 4, 4) * scale
        check(lambda a: torch.linalg.eigvalsh(a + a.mT), x, rtol=1e-4, atol=0)
        check(torch.linalg.svdvals, x, rtol=1e-4, atol=0)
    x = sample(3, 3)
    x[1, 2] = float("nan")
    check(torch.linalg.eigvalsh, x)
    check(torch.linalg.svdvals, x)
    check(torch.linalg.eigvalsh, x + x.mT)


# ---------------------------------------------------------------------------------------------
# polar and matrix_sqrth: torch's CPU builds them on the SVD and eigh, as tiny does


def spd_sample(*shape, dtype=torch.float64, seed=0):
    x = sample(*shape, dtype=dtype, seed=seed)
    return x @ x.mT + 0.5 * eye_like(x, shape[-1])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_polar_matches_cpu(native, dtype):
    for shape in ((5, 5), (5, 3), (2, 2), (2, 6, 4), (2, 1, 3, 3), (1, 1), (7, 1)):
        check(torch.linalg.polar, sample(*shape, dtype=dtype), **tolerance(dtype))


def test_polar_factors_reproduce_a(native):
    a = sample(3, 7, 4, dtype=torch.float64)
    u, h = (t.cpu() for t in torch.linalg.polar(a.to(DEVICE)))
    torch.testing.assert_close(u @ h, a)
    torch.testing.assert_close(u.mT @ u, eye_like(a, 4))
    assert torch.equal(h, h.mT)
    assert (torch.linalg.eigvalsh(h) > 0).all()


def test_polar_of_noncontiguous_and_empty_inputs(native):
    check(lambda a: torch.linalg.polar(a.mT), sample(2, 3, 5), **tolerance(torch.float32))
    check(lambda a: torch.linalg.polar(a[::2]), sample(8, 3), **tolerance(torch.float32))
    for shape in ((0, 3, 3), (3, 0), (0, 0), (2, 0, 0)):
        check(torch.linalg.polar, sample(*shape))


def test_polar_errors_match_cpu(native):
    for a in (sample(3, 5), sample(3), sample(3, 3).int(), sample(3, 3).bfloat16(), sample(3, 3).half()):
        check(torch.linalg.polar, a)


def test_polar_out_form_matches_cpu(native):
    def fn(a):
        u, h = torch.empty(0, device=a.device), torch.empty(0, device=a.device)
        return torch.linalg.polar(a, out=(u, h))

    check(fn, sample(2, 5, 3), **tolerance(torch.float32))
    check(lambda a: torch.linalg.polar(a, out=(torch.empty_like(a), torch.empty_like(a))), sample(4, 4))


def test_polar_gradients_match_cpu(native):
    def fn(a):
        a = a.clone().requires_grad_()
        u, h = torch.linalg.polar(a)
        w = torch.arange(a.numel(), dtype=a.dtype, device=a.device).reshape(a.shape)
        loss = (u * w).sum() + (h * w[..., : a.shape[-1], :]).sum() * 0.5
        return torch.autograd.grad(loss, a)[0]

    check(fn, sample(2, 5, 3, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    check(fn, sample(4, 4, dtype=torch.float64, seed=1), rtol=1e-9, atol=1e-9)


def test_polar_of_complex_input_runs_natively(native):
    z = torch.complex(sample(4, 3), sample(4, 3, seed=1))
    check(torch.linalg.polar, z, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_matrix_sqrth_matches_cpu(native, dtype):
    for shape in ((1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 1, 6, 6)):
        check(torch.linalg.matrix_sqrth, spd_sample(*shape, dtype=dtype), **tolerance(dtype))


def test_matrix_sqrth_squares_to_a_and_reads_the_lower_triangle(native):
    a = spd_sample(2, 5, 5)
    x = torch.linalg.matrix_sqrth(a.to(DEVICE)).cpu()
    torch.testing.assert_close(x @ x, a)
    # only the lower triangle is read, as eigh's default
    check(torch.linalg.matrix_sqrth, a + torch.ones(5, 5, dtype=a.dtype).triu(1) * 3, rtol=1e-9, atol=1e-9)
    # negative eigenvalues of an indefinite input count as zero
    check(torch.linalg.matrix_sqrth, symmetric(4, 4), rtol=1e-9, atol=1e-9)


def test_matrix_sqrth_of_noncontiguous_empty_and_out_inputs(native):
    check(lambda a: torch.linalg.matrix_sqrth(a.mT), spd_sample(2, 4, 4), rtol=1e-9, atol=1e-9)
    for shape in ((0, 3, 3), (0, 0), (2, 0, 0)):
        check(torch.linalg.matrix_sqrth, sample(*shape))
    check(
        lambda a: torch.linalg.matrix_sqrth(a, out=torch.empty(0, device=a.device)),
        spd_sample(3, 3, dtype=torch.float32),
    )


def test_matrix_sqrth_errors_match_cpu(native):
    for a in (sample(3, 4), sample(3), sample(3, 3).int(), sample(3, 3).half(), sample(3, 3).bfloat16()):
        check(torch.linalg.matrix_sqrth, a)


def test_matrix_sqrth_gradients_match_cpu(native):
    def fn(a):
        a = a.clone().requires_grad_()
        x = torch.linalg.matrix_sqrth(a)
        w = torch.arange(a.numel(), dtype=a.dtype, device=a.device).reshape(a.shape)
        return torch.autograd.grad((x * w).sum(), a)[0]

    check(fn, spd_sample(4, 4), rtol=1e-9, atol=1e-9)
    check(fn, spd_sample(2, 3, 3, seed=2), rtol=1e-9, atol=1e-9)
