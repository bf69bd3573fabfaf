"""Complex tensors on tiny (issue #16), the long tail: factories, data-dependent shapes, indexing,
statistics and unpacking that run natively for complex64 and complex128 (TINY_FALLBACK=0), against
PyTorch CPU."""

import pytest
import torch
from conftest import DEVICE, assert_same, by_dtype, check, check_devices, recorded_warnings

COMPLEX = (torch.complex64, torch.complex128)
TOL = dict(rtol=1e-4, atol=1e-5)


def crand(*shape, dtype=torch.complex64, seed=0):
    """Seeded complex CPU values, both parts normal."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def with_zeros(*shape, dtype):
    """Seeded values with exact zeros, purely real and purely imaginary elements among them."""
    x = crand(*shape, dtype=dtype)
    flat = x.view(-1)
    flat[::3] = 0
    flat[1::5] = flat[1::5].real.clone()
    flat[2::7] = flat[2::7].imag * 1j
    return x


# ---- factories ----


@by_dtype(COMPLEX)
def test_eye_of_a_complex_dtype_matches_cpu(dtype, native):
    check_devices(lambda dev: torch.eye(3, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.eye(2, 5, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.eye(0, 3, dtype=dtype, device=dev))
    check(lambda out: torch.eye(4, 3, out=out), torch.empty(2, dtype=dtype))
    check(lambda out: torch.eye(3, out=out[:, ::2]), torch.empty(3, 6, dtype=dtype))
    check_devices(lambda dev: torch.eye(-1, dtype=dtype, device=dev))


@by_dtype(COMPLEX)
@pytest.mark.parametrize(
    "start,end,steps,base",
    [(0, 1, 5, 10.0), (2, 4.3, 4, 2.0), (-2.0, 1.2, 7, 1.1), (1, 3, 1, 2.0), (4.3, -3, 2, 5.0), (1 + 2j, -1j, 6, 3.0)],
)
def test_logspace_of_a_complex_dtype_matches_cpu(dtype, start, end, steps, base, native):
    check_devices(lambda dev: torch.logspace(start, end, steps, base, dtype=dtype, device=dev), **TOL)


@by_dtype(COMPLEX)
def test_logspace_into_complex_out_matches_cpu(dtype, native):
    check(lambda out: torch.logspace(0, 2, 5, out=out), torch.empty(5, dtype=dtype), **TOL)
    check(lambda out: torch.logspace(1j, 2, 3, base=2, out=out), torch.empty(0, dtype=dtype), **TOL)
    check(lambda out: torch.logspace(0, 2, 4, out=out[::2]), torch.empty(8, dtype=dtype), **TOL)
    check(lambda out: torch.logspace(0, 1, 0, out=out), torch.empty(2, dtype=dtype))
    check_devices(lambda dev: torch.logspace(0, 1, -1, dtype=dtype, device=dev))


def test_logspace_of_a_complex_dtype_at_base_zero_goes_to_the_cpu():
    check_devices(lambda dev: torch.logspace(1, 2, 3, base=0.0, dtype=torch.complex64, device=dev), allow_fallback=True)


# ---- data-dependent shapes ----


@by_dtype(COMPLEX)
def test_nonzero_of_complex_values_counts_either_part(dtype, native):
    x = with_zeros(4, 5, dtype=dtype)
    check(torch.nonzero, x)
    check(lambda x: torch.nonzero(x, as_tuple=True), x)
    check(torch.argwhere, x.t())
    check(lambda x: torch.nonzero(x.conj()), x)
    check(torch.nonzero, torch.zeros(3, dtype=dtype))
    check(lambda x, out: torch.nonzero(x, out=out), x, torch.empty(0, dtype=torch.long))
    check(lambda x: torch.nonzero(x, out=torch.empty(0, dtype=torch.int32, device=x.device)), x)


@by_dtype(COMPLEX)
def test_count_nonzero_of_complex_values_matches_cpu(dtype, native):
    x = with_zeros(3, 4, 5, dtype=dtype)
    check(torch.count_nonzero, x)
    check(lambda x: torch.count_nonzero(x, 1), x)
    check(lambda x: torch.count_nonzero(x, (0, 2)), x.transpose(0, 2))
    check(lambda x: torch.count_nonzero(x), torch.tensor(1j, dtype=dtype))
    check(lambda x: torch.count_nonzero(x, 0), torch.tensor([float("nan"), 0, 1j], dtype=dtype))


# ---- take and put_ ----


@by_dtype(COMPLEX)
def test_take_and_put_of_complex_values_match_cpu(dtype, native):
    x, src = crand(3, 4, dtype=dtype), crand(5, dtype=dtype, seed=1)
    index = torch.tensor([0, -1, 7, 2, 11])
    check(torch.take, x, index.reshape(5, 1))
    check(torch.take, x.t(), index)
    check(lambda x, i: torch.take(x.conj(), i), x, index)
    check(lambda x, i, out: torch.take(x, i, out=out), x, index, torch.empty(0, dtype=dtype))
    check(lambda x, i, s: x.put_(i, s), x, index, src)
    check(lambda x, i, s: x.t().put_(i, s), x, index, src)
    check(lambda x, i, s: x.put_(i, s.conj()), x, index, src)
    check(lambda x, i, s: x.conj().put_(i, s), x, index, src)
    repeated = torch.tensor([1, 1, -11, 3, 1])
    check(lambda x, i, s: x.put_(i, s, accumulate=True), x, repeated, src, **TOL)
    check(lambda x, i, s: torch.put(x, i, s[:4], accumulate=True), x, repeated[:4], src, **TOL)


@by_dtype(COMPLEX)
def test_take_and_put_of_complex_values_raise_as_cpu(dtype, native):
    x, src = crand(3, 4, dtype=dtype), crand(2, dtype=dtype)
    check(lambda x, s: x.put_(torch.tensor([12, -13], device=x.device), s), x, src)
    check(lambda x, s: x.put_(torch.tensor([0], device=x.device), s), x, src)
    check(lambda x, s: x.put_(torch.tensor([0, 1], device=x.device), s.real), x, src)
    check(lambda x: torch.take(x, torch.tensor([-13], device=x.device)), x)


# ---- var, std, var_mean, std_mean ----


@by_dtype(COMPLEX)
def test_var_and_std_of_complex_values_are_real_and_match_cpu(dtype, native):
    x = crand(4, 5, 3, dtype=dtype)
    for fn in (torch.var, torch.std):
        check(fn, x, **TOL)
        check(lambda x, fn=fn: fn(x, 1), x, **TOL)
        check(lambda x, fn=fn: fn(x, (0, 2), keepdim=True, correction=0), x, **TOL)
        check(lambda x, fn=fn: fn(x.transpose(0, 2), 1, correction=2.5), x, **TOL)
        check(lambda x, fn=fn: fn(x.conj(), -1), x, **TOL)
        check(lambda x, fn=fn: fn(x, 0), torch.tensor(1 + 2j, dtype=dtype))


@by_dtype(COMPLEX)
def test_var_mean_and_std_mean_of_complex_values_match_cpu(dtype, native):
    x = crand(4, 5, dtype=dtype)
    for fn in (torch.var_mean, torch.std_mean):
        check(fn, x, **TOL)
        check(lambda x, fn=fn: fn(x, 0, correction=0), x, **TOL)
        check(lambda x, fn=fn: fn(x.t(), 1, keepdim=True), x, **TOL)
        check(lambda x, fn=fn: fn(x, [], unbiased=False), x, **TOL)


@by_dtype(COMPLEX)
def test_var_and_std_of_complex_values_into_out_match_cpu(dtype, native):
    x = crand(4, 5, dtype=dtype)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    for fn in (torch.var, torch.std):
        check(lambda x, out, fn=fn: fn(x, 1, out=out), x, torch.empty(0, dtype=real), **TOL)
        check(lambda x, out, fn=fn: fn(x, 1, out=out), x, torch.empty(5, dtype=real), **TOL)  # resized, warns
        check(lambda x, out, fn=fn: fn(x, 0, out=out), x, torch.empty(5, dtype=dtype), **TOL)
        check(lambda x, out, fn=fn: fn(x, 0, out=out), x, torch.empty(5, dtype=torch.float64), **TOL)
        check(lambda x, out, fn=fn: fn(x, 1, out=out), x, torch.empty(4, dtype=torch.float16), rtol=1e-3, atol=1e-3)
        check(lambda x, out, fn=fn: fn(x, 1, out=out), x, torch.empty(4, dtype=torch.int32))


@by_dtype(COMPLEX)
def test_var_of_complex_values_warns_as_cpu_when_the_correction_uses_every_element(dtype, native):
    x = crand(3, dtype=dtype)
    expected, cpu_warnings = recorded_warnings(lambda: torch.var(x, correction=3))
    actual, tiny_warnings = recorded_warnings(lambda: torch.var(x.to(DEVICE), correction=3))
    assert_same(actual, expected)
    assert any("degrees of freedom" in w for w in cpu_warnings)
    assert any("degrees of freedom" in w for w in tiny_warnings)


# ---- lu_unpack ----


@by_dtype(COMPLEX)
def test_lu_unpack_of_complex_factors_matches_cpu(dtype, native):
    for shape in ((4, 4), (2, 5, 3), (3, 2, 6)):
        A = crand(*shape, dtype=dtype)
        LU, pivots = torch.linalg.lu_factor(A)
        check(torch.lu_unpack, LU, pivots)
        check(lambda LU, p: torch.lu_unpack(LU, p, unpack_pivots=False), LU, pivots)
        check(lambda LU, p: torch.lu_unpack(LU, p, unpack_data=False), LU, pivots)
        check(lambda LU, p: torch.lu_unpack(LU.conj(), p), LU, pivots)
    A = crand(4, 4, dtype=dtype)
    LU, pivots = torch.linalg.lu_factor(A)
    check(lambda LU, p: torch.lu_unpack(LU.mT, p), LU, pivots)
    outs = [torch.empty(0, dtype=dtype) for _ in range(3)]
    check(lambda LU, p, P, L, U: torch.lu_unpack(LU, p, out=(P, L, U)), LU, pivots, *outs)
    check(lambda LU, p: torch.lu_unpack(LU, p + 4), LU, pivots)


# ---- more factories and folds ----


@by_dtype(COMPLEX)
def test_linspace_of_a_complex_dtype_matches_cpu(dtype, native):
    for start, end, steps in ((0, 1, 5), (-2.0, 4.3, 8), (1 + 2j, -3j, 7), (2j, 2j, 3), (1, 2, 1)):
        check_devices(lambda dev, s=start, e=end, n=steps: torch.linspace(s, e, n, dtype=dtype, device=dev), **TOL)
    check(lambda out: torch.linspace(0, 1 + 1j, 4, out=out), torch.empty(2, dtype=dtype), **TOL)
    check(lambda out: torch.linspace(0, 1j, 3, out=out[1::2]), torch.empty(6, dtype=dtype), **TOL)


@by_dtype(COMPLEX)
def test_tril_and_triu_of_complex_matrices_match_cpu(dtype, native):
    x = crand(2, 4, 5, dtype=dtype)
    for fn in (torch.tril, torch.triu):
        check(fn, x)
        check(lambda x, fn=fn: fn(x, 1), x)
        check(lambda x, fn=fn: fn(x.mT, -2), x)
        check(lambda x, fn=fn: fn(x.conj(), 0), x)
        check(lambda x, out, fn=fn: fn(x, -1, out=out), x, torch.empty(0, dtype=dtype))
        check(lambda x, fn=fn: fn(x.clone(), 2), x)
    check(lambda x: x.tril_(1), x)
    check(lambda x: x.triu_(-1), x)


@by_dtype(COMPLEX)
def test_all_and_any_of_complex_values_count_either_part(dtype, native):
    x = with_zeros(3, 4, dtype=dtype)
    ones = crand(3, 4, dtype=dtype) + 5
    for fn in (torch.all, torch.any):
        check(fn, x)
        check(fn, ones)
        check(lambda x, fn=fn: fn(x, 1), x)
        check(lambda x, fn=fn: fn(x.t(), 0, keepdim=True), x)
        check(lambda x, fn=fn: fn(x, (0, 1)), ones)
        check(lambda x, out, fn=fn: fn(x, 0, out=out), x, torch.empty(0, dtype=torch.bool))
        check(fn, torch.zeros(0, 3, dtype=dtype))
        check(fn, torch.tensor([0j, 1j], dtype=dtype))


# ---- elementwise ----


@by_dtype(COMPLEX)
def test_logical_ops_of_complex_values_count_either_part(dtype, native):
    x, y = with_zeros(4, 5, dtype=dtype), with_zeros(5, dtype=dtype).flip(0)
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        check(fn, x, y)
        check(fn, x, y.real)
        check(lambda x, y, fn=fn: fn(x.t(), y[:4]), x, y)
        check(lambda x, y, out, fn=fn: fn(x, y, out=out), x, y, torch.empty(0, dtype=torch.bool))
        check(lambda x, y, out, fn=fn: fn(x, y, out=out), x, y, torch.empty(4, 5, dtype=dtype))
    check(torch.logical_not, x)
    check(lambda x, out: torch.logical_not(x, out=out), x, torch.empty(4, 5, dtype=dtype))
    check(lambda x, out: torch.logical_not(x, out=out), x, torch.empty(4, 5, dtype=torch.float32))


@by_dtype(COMPLEX)
def test_addcmul_addcdiv_and_lerp_of_complex_values_match_cpu(dtype, native):
    x, a, b = crand(3, 4, dtype=dtype), crand(3, 4, dtype=dtype, seed=1), crand(4, dtype=dtype, seed=2)
    check(torch.addcmul, x, a, b, **TOL)
    check(lambda x, a, b: torch.addcmul(x, a, b, value=2 - 1j), x, a, b, **TOL)
    check(lambda x, a, b: torch.addcdiv(x.t(), a.t(), b[:3], value=0.5), x, a, b, **TOL)
    check(lambda x, a, b: x.addcdiv_(a, b), x, a, b, **TOL)
    check(lambda x, a, b, out: torch.addcmul(x, a, b, out=out), x, a, b, torch.empty(0, dtype=dtype), **TOL)
    for w in (0.25, 0.75, 1.0, 0.3 + 0.5j):
        check(lambda x, a, w=w: torch.lerp(x, a, w), x, a, **TOL)
    weight = crand(3, 4, dtype=dtype, seed=3)
    check(torch.lerp, x, a, weight, **TOL)
    check(lambda x, a, w: x.lerp_(a.conj(), w.t()[:, 0]), x, a, crand(4, 3, dtype=dtype), **TOL)


@by_dtype(COMPLEX)
def test_exp2_and_sinc_of_complex_values_match_cpu(dtype, native):
    x = crand(4, 5, dtype=dtype)
    x[0, 0] = 0
    x[0, 1] = 2j
    check(torch.exp2, x, **TOL)
    check(torch.sinc, x, **TOL)
    check(lambda x: torch.sinc(x.t().conj()), x, **TOL)
    check(lambda x, out: torch.exp2(x, out=out), x, torch.empty(0, dtype=dtype), **TOL)
    check(lambda x: x.sinc_(), x, **TOL)


# ---- index_add, index_copy, index_fill, masked_select ----


@by_dtype(COMPLEX)
def test_index_add_copy_and_fill_of_complex_values_match_cpu(dtype, native):
    x, src = crand(5, 3, dtype=dtype), crand(4, 3, dtype=dtype, seed=1)
    index = torch.tensor([4, 0, 4, 2])
    check(lambda x, i, s: x.index_add(0, i, s), x, index, src, **TOL)
    check(lambda x, i, s: x.index_add(0, i, s, alpha=2 - 1j), x, index, src, **TOL)
    check(lambda x, i, s: x.t().index_add_(1, i, s.t().conj()), x, index, src, **TOL)
    check(lambda x, i, s, out: torch.index_add(x, 0, i, s, out=out), x, index, src, torch.empty(0, dtype=dtype), **TOL)
    distinct = torch.tensor([3, 0, 1, 4])
    check(lambda x, i, s: x.index_copy(0, i, s), x, distinct, src)
    check(lambda x, i, s: x.t().index_copy_(1, i, s.t()), x, distinct, src)
    check(lambda x, i: x.index_fill(1, i, 2 - 3j), x, torch.tensor([0, 2]))
    check(lambda x, i: x.index_fill(0, i, -1.5), x, torch.tensor([-1, 1]))
    check(lambda x, i, v: x.index_fill(0, i, v), x, torch.tensor([2]), torch.tensor(1j, dtype=dtype))
    check(lambda x, i, v: x.t().index_fill_(0, i, v), x, torch.tensor([2]), torch.tensor(0.5))
    check(lambda x, i: x.real.index_fill(0, i, 1j), x, torch.tensor([2]))
    check(lambda x, i, s: x.index_add(0, i, s), x, torch.tensor([0, 5, 1, 2]), src)


@by_dtype(COMPLEX)
def test_masked_select_of_complex_values_matches_cpu(dtype, native):
    x = crand(4, 5, dtype=dtype)
    mask = x.real > 0
    check(torch.masked_select, x, mask)
    check(torch.masked_select, x.t(), mask.t())
    check(lambda x, m: torch.masked_select(x.conj(), m[0]), x, mask)
    check(lambda x, m, out: torch.masked_select(x, m, out=out), x, mask, torch.empty(0, dtype=dtype))
    check(lambda x: x[x.imag < 0], x)


# ---- batched products ----


@by_dtype(COMPLEX)
def test_baddbmm_and_addbmm_of_complex_values_match_cpu(dtype, native):
    a, b = crand(3, 4, 5, dtype=dtype), crand(3, 5, 2, dtype=dtype, seed=1)
    self3, self2 = crand(3, 4, 2, dtype=dtype, seed=2), crand(4, 2, dtype=dtype, seed=3)
    check(torch.baddbmm, self3, a, b, **TOL)
    check(lambda s, a, b: torch.baddbmm(s[0, 0], a, b, beta=0.5, alpha=1 - 2j), self3, a, b, **TOL)
    check(lambda s, a, b: s.baddbmm_(a.conj(), b, beta=0), self3, a, b, **TOL)
    check(torch.addbmm, self2, a, b, **TOL)
    check(lambda s, a, b: torch.addbmm(s, a.transpose(1, 2).conj().transpose(1, 2), b, alpha=2j), self2, a, b, **TOL)
    check(lambda s, a, b: s.addbmm_(a, b, beta=2), self2, a, b, **TOL)
    check(lambda s, a, b, out: torch.addbmm(s, a, b, out=out), self2, a, b, torch.empty(0, dtype=dtype), **TOL)
    check(lambda s, a, b, out: torch.baddbmm(s, a, b, out=out), self3, a, b, torch.empty(0, dtype=dtype), **TOL)
    check(lambda s, a, b: torch.baddbmm(s[:2], a, b), self3, a, b)
    check(lambda s, a, b: torch.addbmm(s, a, b[:2]), self2, a, b)


# ---- LU factorisations and solves ----

LINALG_TOL = {torch.complex64: dict(rtol=2e-4, atol=2e-4), torch.complex128: dict(rtol=1e-9, atol=1e-9)}


@by_dtype(COMPLEX)
def test_lu_factor_of_complex_matrices_gives_the_cpus_factors_and_pivots(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (4, 4), (2, 6, 6), (3, 5), (2, 5, 3), (17, 17)):
        check(torch.linalg.lu_factor_ex, crand(*shape, dtype=dtype, seed=shape[-1]), **tol)
    check(torch.linalg.lu_factor, crand(5, 5, dtype=dtype).mT, **tol)
    check(lambda a: torch.linalg.lu_factor(a.conj()), crand(5, 5, dtype=dtype), **tol)
    check(torch.linalg.lu, crand(2, 4, 6, dtype=dtype), **tol)
    check(torch.linalg.lu, crand(6, 4, dtype=dtype), **tol)
    outs = (torch.empty(0, dtype=dtype), torch.empty(0, dtype=torch.int32), torch.empty(0, dtype=torch.int32))
    check(lambda a, *o: torch.linalg.lu_factor_ex(a, out=o), crand(3, 3, dtype=dtype), *outs, **tol)


@by_dtype(COMPLEX)
def test_lu_factor_of_singular_complex_matrices_reports_info_as_the_cpu(dtype, native):
    a = crand(3, 4, 4, dtype=dtype)
    a[1, :, 2] = 0
    a[2] = 0
    check(torch.linalg.lu_factor_ex, a)
    check(torch.linalg.lu_factor, a)  # raises: the CPU's error
    check(torch.linalg.inv, a)


@by_dtype(COMPLEX)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_of_complex_factors_matches_cpu(dtype, left, adjoint, native):
    lu, piv = torch.linalg.lu_factor(crand(3, 5, 5, dtype=dtype, seed=5))
    b = crand(*((2, 1, 5, 4) if left else (2, 1, 4, 5)), dtype=dtype, seed=6)
    check(lambda lu, p, b: torch.linalg.lu_solve(lu, p, b, left=left, adjoint=adjoint), lu, piv, b, **LINALG_TOL[dtype])


@by_dtype(COMPLEX)
def test_solve_and_inv_of_complex_matrices_match_cpu(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (4, 4), (2, 9, 9)):
        a, b = crand(*shape, dtype=dtype, seed=shape[-1]), crand(*shape[:-1], 3, dtype=dtype, seed=9)
        check(torch.linalg.solve, a, b, **tol)
        check(torch.linalg.solve_ex, a, b, **tol)
        check(lambda a, b: torch.linalg.solve(a, b.mT, left=False), a, b, **tol)
        check(torch.linalg.inv, a, **tol)
        check(lambda a: torch.linalg.inv_ex(a.mT.conj()), a, **tol)
    a = crand(4, 4, dtype=dtype)
    check(torch.linalg.solve, a, crand(4, dtype=dtype, seed=1), **tol)  # a vector
    check(lambda a, out: torch.linalg.inv(a, out=out), a, torch.empty(0, dtype=dtype), **tol)
    check(torch.linalg.solve, a, crand(4, 2, dtype=torch.complex64 if dtype == torch.complex128 else torch.complex128))


@by_dtype(COMPLEX)
@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
def test_solve_triangular_of_complex_matrices_matches_cpu(dtype, upper, left, native):
    tol = LINALG_TOL[dtype]
    a = crand(2, 5, 5, dtype=dtype) + 3 * torch.eye(5, dtype=dtype)
    b = crand(2, 5, 3, dtype=dtype, seed=1) if left else crand(2, 3, 5, dtype=dtype, seed=1)
    for unit in (False, True):
        check(
            lambda a, b, u=unit: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=u),
            a,
            b,
            **tol,
        )
    check(lambda a, b: torch.linalg.solve_triangular(a.conj(), b.mT.mT, upper=upper, left=left), a, b, **tol)
    # the conjugate transpose of a contiguous A: the CPU's result is row-major then
    check(lambda a, b: torch.linalg.solve_triangular(a.mH, b, upper=not upper, left=left), a, b, **tol)
    check(lambda a, b, out: torch.linalg.solve_triangular(a, b, upper=upper, left=left, out=out), a, b, b[:0], **tol)
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, out=b.real[:0].clone()), a, b)
    if left:
        for transpose in (False, True):
            check(lambda b, a, t=transpose: torch.triangular_solve(b, a, upper=upper, transpose=t), b, a, **tol)


@by_dtype(COMPLEX)
def test_det_and_slogdet_of_complex_matrices_match_cpu(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (4, 4), (2, 9, 9), (0, 0), (2, 0, 0)):
        a = crand(*shape, dtype=dtype, seed=shape[-1])
        check(torch.linalg.det, a, rtol=tol["rtol"] * 10, atol=tol["atol"])
        check(torch.linalg.slogdet, a, **tol)
        check(torch.logdet, a, **tol)
    singular = crand(3, 3, dtype=dtype)
    singular[:, 1] = 0
    check(torch.linalg.det, singular)
    check(torch.linalg.slogdet, singular)
    a = crand(4, 4, dtype=dtype)
    check(lambda a: torch.linalg.det(a.mT), a, **tol)
    outs = (torch.empty(0, dtype=dtype), torch.empty(0, dtype=a.real.dtype))
    check(lambda a, s, logabs: torch.linalg.slogdet(a, out=(s, logabs)), a, *outs, **tol)
    check(lambda a: torch.linalg.slogdet(a, out=(torch.empty(0, dtype=dtype, device=a.device),) * 2), a)


# ---- Cholesky ----


def hpd(*shape, dtype, seed=0):
    """A Hermitian positive-definite matrix (batch)."""
    a = crand(*shape, dtype=dtype, seed=seed)
    return a @ a.mH + shape[-1] * torch.eye(shape[-1], dtype=dtype)


@by_dtype(COMPLEX)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_of_hermitian_matrices_matches_cpu(dtype, upper, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (4, 4), (2, 9, 9)):
        a = hpd(*shape, dtype=dtype, seed=shape[-1])
        check(lambda a: torch.linalg.cholesky(a, upper=upper), a, **tol)
        check(lambda a: torch.linalg.cholesky_ex(a.mT, upper=upper), a, **tol)
        factor = torch.linalg.cholesky(a, upper=upper)
        b = crand(*shape[:-1], 3, dtype=dtype, seed=1)
        check(lambda b, f: torch.cholesky_solve(b, f, upper=upper), b, factor, **tol)
        check(lambda f: torch.cholesky_inverse(f, upper=upper), factor, **tol)
    # only the triangle named is read; the diagonal's imaginary part is ignored
    a = hpd(4, 4, dtype=dtype)
    noise = crand(4, 4, dtype=dtype, seed=3)
    junk = a + (noise.tril(-1) if upper else noise.triu(1))
    junk.diagonal().imag.fill_(0.5)
    check(lambda a: torch.linalg.cholesky_ex(a, upper=upper), junk, **tol)


@by_dtype(COMPLEX)
def test_cholesky_of_a_complex_matrix_that_is_not_positive_definite_reports_as_the_cpu(dtype, native):
    a = hpd(3, 4, 4, dtype=dtype)
    a[1, 2, 2] = -50
    check(torch.linalg.cholesky_ex, a, **LINALG_TOL[dtype])
    check(torch.linalg.cholesky, a)
    singular = torch.linalg.cholesky(hpd(3, 3, dtype=dtype))
    singular[1, 1] = 0
    check(torch.cholesky_inverse, singular)


def test_solve_triangular_of_mixed_complex_dtypes_goes_to_the_cpu():
    a = crand(4, 4, dtype=torch.complex64).triu() + 3 * torch.eye(4)
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), a, torch.randn(4, 2), allow_fallback=True)
    check(
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        a,
        crand(4, 2, dtype=torch.complex128),
        allow_fallback=True,
        rtol=1e-5,
        atol=1e-5,
    )


@by_dtype(COMPLEX)
def test_logaddexp_of_complex_values_matches_cpu_at_infinities_and_nans_too(dtype, native):
    parts = [0.0, -1.5, 2.0, 30.0, -30.0, float("inf"), -float("inf"), float("nan")]
    values = torch.tensor([complex(r, i) for r in parts for i in parts], dtype=dtype)
    a, b = torch.meshgrid(values, values, indexing="ij")
    check(torch.logaddexp, a, b, **TOL)
    x, y = crand(3, 4, dtype=dtype), crand(4, dtype=dtype, seed=1)
    check(torch.logaddexp, x, y, **TOL)
    check(lambda x, y, out: torch.logaddexp(x.t(), y[:3], out=out), x, y, torch.empty(0, dtype=dtype), **TOL)


@by_dtype(COMPLEX)
def test_addr_of_complex_vectors_matches_cpu(dtype, native):
    x, a, b = crand(3, 4, dtype=dtype), crand(3, dtype=dtype, seed=1), crand(4, dtype=dtype, seed=2)
    check(torch.addr, x, a, b, **TOL)
    check(lambda x, a, b: torch.addr(x[0], a, b, beta=2 - 1j, alpha=0.5j), x, a, b, **TOL)
    check(lambda x, a, b: torch.addr(x * float("nan"), a.conj(), b, beta=0), x, a, b, **TOL)
    check(lambda x, a, b: torch.addr(x, a.real, b.real), x, a, b, **TOL)
    check(lambda x, a, b: torch.addr(x.real, a, b.real, alpha=2), x, a, b, **TOL)
    check(lambda x, a, b: x.addr_(a, b, alpha=1 + 1j), x, a, b, **TOL)
    check(lambda x, a, b, out: torch.addr(x, a, b, out=out), x, a, b, torch.empty(0, dtype=dtype), **TOL)
    check(lambda x, a, b: torch.addr(x, a, b, out=torch.empty(0, device=x.device)), x, a, b)


@by_dtype(COMPLEX)
def test_renorm_of_complex_values_matches_cpu(dtype, native):
    x = crand(3, 4, 5, dtype=dtype) * 3
    for p in (1, 2, 3.5, float("inf")):
        check(lambda x, p=p: torch.renorm(x, p, 1, 2.0), x, **TOL)
    check(lambda x: x.transpose(0, 2).renorm_(2, 0, 1.5), x, **TOL)
    check(lambda x, out: torch.renorm(x, 2, -1, 0.5, out=out), x, torch.empty(0, dtype=dtype), **TOL)


@by_dtype(COMPLEX)
def test_unfold_backward_of_complex_gradients_matches_cpu(dtype, native):
    g = crand(2, 3, 4, dtype=dtype)  # 3 windows of 4 elements from a dim of 8, step 2
    check(lambda g: torch.ops.aten.unfold_backward(g, [2, 8], 1, 4, 2), g, **TOL)
    check(lambda g: torch.ops.aten.unfold_backward(g.conj(), [2, 9], 1, 4, 2), g, **TOL)
    check(lambda g: torch.ops.aten.unfold_backward(g[:, :2, :3], [2, 9], 1, 3, 4), g, **TOL)
    x = crand(2, 9, dtype=dtype).requires_grad_()
    y = x.to(DEVICE).unfold(1, 4, 2)
    (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
    (expected,) = torch.autograd.grad(x.unfold(1, 4, 2), x, torch.ones(2, 3, 4, dtype=dtype))
    assert_same(grad.to(DEVICE), expected)


@by_dtype(COMPLEX)
def test_silu_of_complex_values_matches_cpu(dtype, native):
    x = crand(3, 4, dtype=dtype) * 2
    check(torch.nn.functional.silu, x, **TOL)
    check(lambda x: torch.nn.functional.silu(x.t().conj()), x, **TOL)
    check(lambda x: torch.nn.functional.silu(x, inplace=True), x, **TOL)
    check(lambda x, out: torch.ops.aten.silu.out(x, out=out), x, torch.empty(0, dtype=dtype), **TOL)


# ---- LDL of complex symmetric matrices ----


@by_dtype(COMPLEX)
def test_ldl_factor_and_solve_of_complex_symmetric_matrices_match_cpu(dtype, native):
    tol = LINALG_TOL[dtype]
    for shape in ((1, 1), (5, 5), (2, 6, 6)):
        a = crand(*shape, dtype=dtype, seed=shape[-1])
        sym = a + a.mT  # symmetric, not Hermitian, indefinite: 2 x 2 pivots too
        check(torch.linalg.ldl_factor_ex, sym, **tol)
        check(lambda a: torch.linalg.ldl_factor(a), sym.tril(), **tol)  # only the lower triangle is read
        LD, pivots = torch.linalg.ldl_factor(sym)
        b = crand(*shape[:-1], 3, dtype=dtype, seed=1)
        check(torch.linalg.ldl_solve, LD, pivots, b, **tol)
    check(torch.linalg.ldl_factor_ex, torch.zeros(0, 2, 2, dtype=dtype))
    singular = torch.zeros(3, 3, dtype=dtype)
    check(torch.linalg.ldl_factor_ex, singular)


def test_ldl_of_complex_hermitian_matrices_runs_natively():
    a = crand(4, 4)
    h = a @ a.mH + 4 * torch.eye(4)
    check(lambda h: torch.linalg.ldl_factor(h, hermitian=True), h, **TOL)
    LD, pivots = torch.linalg.ldl_factor(h, hermitian=True)
    check(lambda *x: torch.linalg.ldl_solve(*x, hermitian=True), LD, pivots, crand(4, 2), **TOL)


@by_dtype(COMPLEX)
def test_cross_of_complex_vectors_matches_cpu(dtype, native):
    a, b = crand(4, 3, dtype=dtype), crand(4, 3, dtype=dtype, seed=1)
    check(torch.linalg.cross, a, b, **TOL)
    check(lambda a, b: torch.linalg.cross(a.t(), b.t().conj(), dim=0), a, b, **TOL)
    check(lambda a, b: torch.linalg.cross(a, b[:1]), a, b, **TOL)
    check(lambda a, b, out: torch.linalg.cross(a, b, out=out), a, b, torch.empty(0, dtype=dtype), **TOL)
    check(torch.linalg.cross, a, b.to(torch.complex128 if dtype == torch.complex64 else torch.complex64))


@by_dtype(COMPLEX + (torch.float32,))
def test_linalg_lu_into_out_tensors_runs_natively(dtype, native):
    outs = [torch.empty(0, dtype=dtype) for _ in range(3)]
    a = crand(2, 4, 3, dtype=dtype) if dtype.is_complex else torch.randn(2, 4, 3)
    check(lambda a, P, L, U: torch.linalg.lu(a, out=(P, L, U)), a, *outs)
