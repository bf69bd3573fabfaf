"""LU, Cholesky, LDL and triangular solves on tiny against the CPU: linalg.lu_factor(_ex), lu, lu_unpack,
lu_solve, solve(_ex), inv(_ex), det, slogdet, logdet, cholesky(_ex), cholesky_solve, cholesky_inverse,
triangular_solve, solve_triangular, ldl_factor(_ex), ldl_solve; values, pivots, info, strides, errors and
gradients, all without the CPU fallback."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

DTYPES = [torch.float32, torch.float64]


def close(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)


def random(shape, dtype, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def spd(shape, dtype, seed=0):
    a = random(shape, dtype, seed)
    n = shape[-1]
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


def noncontiguous(a):
    """The same values through a view with other strides (every other column of a wider tensor)."""
    wide = torch.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def on_tiny(x):
    return x.to("tiny") if isinstance(x, torch.Tensor) else x


def assert_same(tiny, cpu, **tol):
    if isinstance(cpu, (tuple, list)):
        for t, c in zip(tiny, cpu, strict=True):
            assert_same(t, c, **tol)
        return
    assert tiny.device.type == "tiny"
    assert tiny.dtype == cpu.dtype and tiny.shape == cpu.shape
    assert tiny.stride() == cpu.stride(), (tiny.stride(), cpu.stride())
    if cpu.dtype in (torch.int32, torch.int64):
        assert torch.equal(tiny.cpu(), cpu)
    else:
        torch.testing.assert_close(tiny.cpu(), cpu, equal_nan=True, **tol)


def both(f, *args, **kwargs):
    return f(*[on_tiny(a) for a in args], **kwargs), f(*args, **kwargs)


SHAPES = [(1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 3, 7, 7), (17, 17), (2, 33, 33)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_lu_factor_ex_gives_the_cpus_factors_pivots_and_info(native, shape, dtype):
    a = random(shape, dtype, seed=len(shape) * 100 + shape[-1])
    tiny, cpu = both(torch.linalg.lu_factor_ex, a)
    assert_same(tiny, cpu, **close(dtype))


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 6), (2, 6, 4), (0, 3, 3), (3, 0), (0, 0)])
def test_lu_factor_of_rectangular_and_empty_matrices_matches_cpu(native, shape):
    a = random(shape, torch.float64, seed=1)
    assert_same(*both(torch.linalg.lu_factor_ex, a), **close(torch.float64))
    assert_same(*both(torch.linalg.lu, a), **close(torch.float64))


def test_lu_factor_reads_a_noncontiguous_input(native):
    a = noncontiguous(random((3, 6, 6), torch.float32, seed=2))
    assert not a.is_contiguous()
    assert_same(*both(torch.linalg.lu_factor, a), **close(torch.float32))


def test_singular_matrices_give_the_cpus_info_and_errors(native):
    a = torch.tensor(
        [[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64
    )
    tiny, cpu = both(torch.linalg.lu_factor_ex, a)
    assert_same(tiny, cpu)
    assert tiny.info.cpu().tolist() == [2, 1, 0]
    zero_column = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]])
    assert_same(*both(torch.linalg.lu_factor_ex, zero_column), **close(torch.float32))
    for f in (torch.linalg.lu_factor, torch.linalg.inv):
        with pytest.raises(Exception) as cpu_error:
            f(a)
        with pytest.raises(type(cpu_error.value), match=r"\(Batch element 0\)"):
            f(a.to("tiny"))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.solve(a[0].to("tiny"), torch.ones(2, dtype=torch.float64, device="tiny"))
    with pytest.raises(torch.linalg.LinAlgError, match="The diagonal element 2 is zero"):
        torch.linalg.inv_ex(a[0].to("tiny"), check_errors=True)
    assert both(torch.linalg.det, a)[0].cpu().tolist() == [0.0, 0.0, 1.0]
    tiny, cpu = both(torch.linalg.slogdet, a)
    assert_same(tiny, cpu)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_and_lu_unpack_match_cpu(native, dtype):
    a = random((2, 6, 6), dtype, seed=3)
    assert_same(*both(torch.linalg.lu, a), **close(dtype))
    lu, piv = torch.linalg.lu_factor(a)
    assert_same(*both(torch.lu_unpack, lu, piv), **close(dtype))
    assert_same(*both(torch.lu_unpack, lu, piv, unpack_data=False), **close(dtype))
    assert_same(*both(torch.lu_unpack, lu, piv, unpack_pivots=False), **close(dtype))


def test_lu_unpack_and_lu_solve_refuse_pivots_out_of_range_as_the_cpu(native):
    a = random((4, 4), torch.float64, seed=4)
    lu, piv = torch.linalg.lu_factor(a)
    b = random((4, 2), torch.float64)
    for bad in (piv + 10, torch.zeros_like(piv)):
        for f, args in ((torch.lu_unpack, (lu, bad)), (torch.linalg.lu_solve, (lu, bad, b))):
            with pytest.raises(RuntimeError) as cpu_error:
                f(*args)
            with pytest.raises(RuntimeError, match=str(cpu_error.value)[:40]):
                f(*[on_tiny(x) for x in args])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_matches_cpu(native, dtype, left, adjoint):
    a = random((3, 5, 5), dtype, seed=5)
    lu, piv = torch.linalg.lu_factor(a)
    b = random((2, 1, 5, 4) if left else (2, 1, 4, 5), dtype, seed=6)  # batch dims broadcast
    tiny, cpu = both(torch.linalg.lu_solve, lu, piv, b, left=left, adjoint=adjoint)
    assert_same(tiny, cpu, **close(dtype))


def test_deprecated_lu_solve_matches_cpu(native):
    a, b = random((4, 4), torch.float64, seed=7), random((4, 3), torch.float64, seed=8)
    lu, piv = torch.linalg.lu_factor(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns once that it is deprecated
        assert_same(*both(torch.lu_solve, b, lu, piv), **close(torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 9, 9), (33, 33)])
def test_solve_inv_det_slogdet_match_cpu(native, dtype, shape):
    a = random(shape, dtype, seed=shape[-1])
    b = random(shape[:-1] + (3,), dtype, seed=9)
    tol = close(dtype)
    assert_same(*both(torch.linalg.solve, a, b), **tol)
    assert_same(*both(torch.linalg.solve_ex, a, b), **tol)
    assert_same(*both(torch.linalg.solve, a, b.mT, left=False), **tol)
    assert_same(*both(torch.linalg.inv, a), **tol)
    assert_same(*both(torch.linalg.inv_ex, noncontiguous(a)), **tol)
    det_tol = dict(rtol=tol["rtol"] * 10, atol=tol["atol"])
    assert_same(*both(torch.linalg.det, a), **det_tol)
    assert_same(*both(torch.linalg.slogdet, a), **tol)
    assert_same(*both(torch.logdet, a), **tol)
    assert_same(*both(torch.ops.aten._linalg_det, a), **det_tol)  # det with the LU and pivots it keeps


def test_solve_with_a_vector_and_broadcast_batches_matches_cpu(native):
    a = random((2, 1, 4, 4), torch.float64, seed=10)
    tol = close(torch.float64)
    assert_same(*both(torch.linalg.solve, a[0, 0], random((4,), torch.float64)), **tol)
    assert_same(*both(torch.linalg.solve, a, random((3, 4, 2), torch.float64)), **tol)
    assert_same(*both(torch.ops.aten._linalg_solve_ex, a, random((3, 4, 2), torch.float64)), **tol)
    assert_same(*both(torch.ops.aten._linalg_solve_ex, noncontiguous(a[0, 0]), random((4, 2), torch.float64)), **tol)


def test_out_variants_match_cpu(native):
    a = random((2, 4, 4), torch.float64, seed=11)
    tol = close(torch.float64)
    outs = [torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.int32), torch.empty(0, dtype=torch.int32)]
    tiny_outs = [o.to("tiny") for o in outs]
    torch.linalg.lu_factor_ex(a, out=outs)
    torch.linalg.lu_factor_ex(a.to("tiny"), out=tiny_outs)
    assert_same(tiny_outs, outs, **tol)
    out, tiny_out = torch.empty(2, 4, 4, dtype=torch.float64), torch.empty(2, 4, 4, dtype=torch.float64, device="tiny")
    torch.linalg.inv(a, out=out)
    torch.linalg.inv(a.to("tiny"), out=tiny_out)
    assert_same(tiny_out, out, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 6, 6), (33, 33)])
def test_cholesky_matches_cpu(native, dtype, upper, shape):
    a = spd(shape, dtype, seed=shape[-1])
    tol = close(dtype)
    assert_same(*both(torch.linalg.cholesky, a, upper=upper), **tol)
    assert_same(*both(torch.linalg.cholesky_ex, noncontiguous(a), upper=upper), **tol)
    factor = torch.linalg.cholesky(a, upper=upper)
    b = random(shape[:-1] + (2,), dtype, seed=12)
    assert_same(*both(torch.cholesky_solve, b, factor, upper=upper), **tol)
    assert_same(*both(torch.cholesky_inverse, factor, upper=upper), **dict(rtol=tol["rtol"] * 10, atol=tol["atol"]))


def test_cholesky_reads_one_triangle_only(native):
    a = spd((4, 4), torch.float64, seed=13)
    lower_only, upper_only = a.tril() + 100 * torch.ones(4, 4).triu(1), a.triu() - 100 * torch.ones(4, 4).tril(-1)
    assert_same(*both(torch.linalg.cholesky, lower_only), **close(torch.float64))
    assert_same(*both(torch.linalg.cholesky, upper_only, upper=True), **close(torch.float64))


def test_a_matrix_that_is_not_positive_definite_gives_the_cpus_info_values_and_error(native):
    a = torch.tensor([[[1.0, 2.0], [2.0, 1.0]], [[4.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    assert_same(*both(torch.linalg.cholesky_ex, a))
    three = torch.tensor([[4.0, 2.0, 1.0], [2.0, 1.0, 1.0], [1.0, 1.0, 3.0]])
    assert_same(*both(torch.linalg.cholesky_ex, three))
    nan = torch.tensor([[float("nan"), 2.0], [2.0, 1.0]])
    assert_same(*both(torch.linalg.cholesky_ex, nan))
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 0\).*leading minor of order 2"):
        torch.linalg.cholesky(a.to("tiny"))
    with pytest.raises(torch.linalg.LinAlgError, match="The diagonal element 1 is zero"):
        torch.cholesky_inverse(torch.zeros(3, 3, device="tiny"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_solve_triangular_matches_cpu(native, dtype, upper, left, unitriangular):
    a = random((2, 6, 6), dtype, seed=14) + 6 * torch.eye(6, dtype=dtype)  # the other triangle is not read
    b = random((3, 1, 6, 4) if left else (3, 1, 4, 6), dtype, seed=15)
    kw = dict(upper=upper, left=left, unitriangular=unitriangular)
    assert_same(*both(torch.linalg.solve_triangular, a, b, **kw), **close(dtype))
    assert_same(*both(torch.linalg.solve_triangular, noncontiguous(a), noncontiguous(b), **kw), **close(dtype))


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_triangular_solve_matches_cpu(native, upper, transpose, unitriangular):
    a = random((2, 5, 5), torch.float64, seed=16) + 5 * torch.eye(5, dtype=torch.float64)
    b = random((2, 5, 3), torch.float64, seed=17)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns once that it is deprecated
        cpu = torch.triangular_solve(b, a, upper=upper, transpose=transpose, unitriangular=unitriangular)
    tiny = torch.triangular_solve(
        b.to("tiny"), a.to("tiny"), upper=upper, transpose=transpose, unitriangular=unitriangular
    )
    assert_same(tiny, cpu, **close(torch.float64))


@pytest.mark.parametrize(
    "f",
    [
        lambda a, b: torch.linalg.lu_factor(a),
        lambda a, b: torch.linalg.cholesky(a),
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        lambda a, b: torch.linalg.solve(a, b),
        lambda a, b: torch.linalg.inv(a),
        lambda a, b: torch.linalg.det(a),
        lambda a, b: torch.cholesky_inverse(a),
        lambda a, b: torch.linalg.inv(a[..., :3]),
        lambda a, b: torch.linalg.solve(a, b[:1, :3]),
        lambda a, b: torch.linalg.solve(a, b.float()),
    ],
)
def test_errors_are_the_cpus(native, f):
    a, b = spd((4, 4), torch.float64), random((4, 2), torch.float64)
    for args in ((a.half(), b.half()), (a.int(), b.int()), (a, b)):
        try:
            f(*args)
        except Exception as e:  # noqa: BLE001 - whatever the CPU raises, tiny raises
            with pytest.raises(type(e), match=str(e).split("\n")[0][:60].replace("(", r"\(").replace(")", r"\)")):
                f(*[x.to("tiny") for x in args])
        else:
            f(*[x.to("tiny") for x in args])


def positive_definite(a):
    return a @ a.mT + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)


def grads(f, *inputs):
    """torch.autograd.grad of the sum of f's outputs (weighted, so that no gradient is trivially zero)."""

    def run(xs):
        xs = [x.detach().requires_grad_() for x in xs]
        out = f(*xs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        total = sum(
            (o * torch.linspace(0.5, 1.5, o.numel(), dtype=o.dtype, device=o.device).view(o.shape)).sum()
            for o in outs
            if o.is_floating_point()
        )
        return torch.autograd.grad(total, xs, allow_unused=True)

    cpu = run(inputs)
    tiny = run([x.to("tiny") for x in inputs])
    for t, c in zip(tiny, cpu, strict=True):
        assert (t is None) == (c is None)
        if c is not None:
            torch.testing.assert_close(t.cpu(), c, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize(
    "name,f",
    [
        ("solve", lambda a, b: torch.linalg.solve(a, b)),
        ("solve_left_false", lambda a, b: torch.linalg.solve(a, b.mT, left=False)),
        ("inv", lambda a, b: torch.linalg.inv(a)),
        ("det", lambda a, b: torch.linalg.det(a)),
        ("slogdet", lambda a, b: torch.linalg.slogdet(a)),
        ("logdet", lambda a, b: torch.logdet(a @ a.mT)),
        (
            "cholesky",
            lambda a, b: torch.linalg.cholesky(positive_definite(a)),
        ),
        ("lu_factor_lu_solve", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b)),
        ("lu", lambda a, b: torch.linalg.lu(a)),
        ("solve_triangular", lambda a, b: torch.linalg.solve_triangular(a, b, upper=False)),
        (
            "cholesky_solve",
            lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(positive_definite(a))),
        ),
    ],
)
def test_gradients_match_cpu(native, name, f):
    a = random((2, 4, 4), torch.float64, seed=18) + 3 * torch.eye(4, dtype=torch.float64)
    b = random((2, 4, 3), torch.float64, seed=19)
    grads(f, a, b)


def test_steps_reuse_their_kernels_so_compiles_do_not_grow_with_n(native):
    def programs(n):
        a = random((5, n, n), torch.float32, seed=n).to("tiny")  # a batch of 5: shapes no other test makes
        torch.tiny.synchronize()
        before = torch.tiny.stats()  # not reset: the native fixture compares the fallback count across the test
        torch.linalg.solve(a, a[..., :1]).cpu()
        s = torch.tiny.stats()
        return s["compiles"] - before["compiles"] + s["disk_hits"] - before["disk_hits"]

    # the schedule's choices may differ a little with the size, the number of steps does not count
    small, large = programs(11), programs(29)
    assert abs(small - large) <= 4 and large <= 24 < 29


def test_inputs_written_in_place_just_before_are_read_as_written(native):
    a, b = random((2, 4, 4), torch.float64, seed=20), random((2, 4, 2), torch.float64, seed=21)
    ta, tb = a.to("tiny"), b.to("tiny")
    a[0, 1] += 3.0
    ta[0, 1] += 3.0  # pending: an in-place write into a region of the storage
    b[:, 0] = 1.0
    tb[:, 0] = 1.0
    assert_same(torch.linalg.solve(ta, tb), torch.linalg.solve(a, b), **close(torch.float64))
    assert_same(torch.linalg.cholesky(ta @ ta.mT), torch.linalg.cholesky(a @ a.mT), **close(torch.float64))
    assert_same(ta, a)


TWO_DEVICES = """
import torch
a, b = torch.eye(3, device="tiny:0"), torch.ones(3, 2, device="tiny:1")
lu, pivots = torch.linalg.lu_factor(a)
calls = [
    lambda: torch.linalg.solve(a, b),
    lambda: torch.linalg.solve_triangular(a, b, upper=True),
    lambda: torch.triangular_solve(b, a),
    lambda: torch.linalg.lu_solve(lu, pivots, b),
    lambda: torch.cholesky_solve(b, a),
]
for call in calls:
    try:
        call()
        print("no error")
    except RuntimeError as e:
        print("same device" in str(e))
"""


def test_tensors_of_two_devices_raise_torchs_error_at_the_call():
    env = {**os.environ, "TINY_CPU_DEVICES": "2", "TINY_DEVICE": "CPU"}
    out = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 5, out.stdout


# ---------------------------------------------------------------------------------------------
# LDL^T with Bunch-Kaufman pivoting (LAPACK's sytrf: its factors, pivot format and info)


def symmetric(shape, dtype, seed=0):
    a = random(shape, dtype, seed)
    return a + a.mT


def two_by_two_pivots():
    """A symmetric matrix whose zero diagonal forces 2 x 2 pivots."""
    a = symmetric((2, 6, 6), torch.float64, seed=7)
    return a - torch.diag_embed(torch.diagonal(a, dim1=-2, dim2=-1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (3, 4, 4), (2, 3, 7, 7), (17, 17)])
def test_ldl_factor_gives_the_cpus_factors_pivots_and_info(native, shape, dtype):
    for a in (symmetric(shape, dtype, seed=shape[-1]), spd(shape, dtype, seed=shape[-1])):
        assert_same(*both(torch.linalg.ldl_factor_ex, a), **close(dtype))


def test_ldl_factor_with_2x2_pivots_matches_cpu(native):
    a = two_by_two_pivots()
    pivots = torch.linalg.ldl_factor_ex(a).pivots
    assert (pivots < 0).any()
    assert_same(*both(torch.linalg.ldl_factor_ex, a), **close(torch.float64))
    for seed in range(6):
        assert_same(*both(torch.linalg.ldl_factor_ex, symmetric((8, 8), torch.float32, seed)), **close(torch.float32))


def test_ldl_factor_reads_the_lower_triangle_and_ignores_hermitian_for_real_input(native):
    a = symmetric((3, 5, 5), torch.float64, seed=3) + torch.ones(5, 5, dtype=torch.float64).triu(1) * 9
    assert_same(*both(torch.linalg.ldl_factor_ex, a), **close(torch.float64))
    assert_same(*both(lambda x: torch.linalg.ldl_factor_ex(x, hermitian=True), a), **close(torch.float64))
    assert_same(*both(torch.linalg.ldl_factor, noncontiguous(a)), **close(torch.float64))


def test_ldl_factor_of_singular_and_empty_matrices_matches_cpu(native):
    a = symmetric((3, 4, 4), torch.float64, seed=4)
    a[1, :, 2] = 0
    a[1, 2, :] = 0
    a[2] = 0
    assert_same(*both(torch.linalg.ldl_factor_ex, a), **close(torch.float64))
    for shape in [(0, 0), (0, 3, 3), (2, 0, 0)]:
        assert_same(*both(torch.linalg.ldl_factor_ex, random(shape, torch.float32)))
    # torch's check of ldl_factor's info: its own internal error, naming the info of the first failed matrix
    with pytest.raises(RuntimeError) as cpu_error:
        torch.linalg.ldl_factor(a)
    with pytest.raises(RuntimeError) as tiny_error:
        torch.linalg.ldl_factor(a.to("tiny"))
    assert str(tiny_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


def test_ldl_factor_errors_match_cpu(native):
    cases = [
        (random((3, 4), torch.float32), RuntimeError, "square"),
        (random((3,), torch.float32), RuntimeError, "at least 2 dimensions"),
        (torch.ones(3, 3, dtype=torch.int32), RuntimeError, "floating point or complex"),
        (torch.eye(3, dtype=torch.half), NotImplementedError, "ldl_factor_kernel_cpu"),
    ]
    for a, error, message in cases:
        for device in ("cpu", "tiny"):
            with pytest.raises(error, match=message):
                torch.linalg.ldl_factor_ex(a.to(device))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ldl_solve_matches_cpu(native, dtype):
    for a in (symmetric((2, 6, 6), dtype, seed=1), spd((6, 6), dtype, seed=2), two_by_two_pivots().to(dtype)):
        LD, pivots, _ = torch.linalg.ldl_factor_ex(a)
        # the CPU broadcasts b's batch to LD's, not LD's to a larger one of b (it reads past LD: a crash)
        for b_shape in [(6, 3), (3, 6, 2)] if a.dim() == 2 else [(2, 6, 1), (1, 6, 2)]:
            b = random(b_shape, dtype, seed=len(b_shape))
            assert_same(*both(torch.linalg.ldl_solve, LD, pivots, b), **close(dtype))
        # the solution solves the system, also for a batch of b larger than LD's
        eye = torch.eye(6, dtype=dtype).expand(3, *a.shape)
        x = torch.linalg.ldl_solve(LD.to("tiny"), pivots.to("tiny"), eye.to("tiny")).cpu()
        torch.testing.assert_close(a @ x, eye, **close(dtype))


def test_ldl_solve_of_tiny_factors_out_form_and_errors_match_cpu(native):
    a = two_by_two_pivots()
    LD, pivots, _ = torch.linalg.ldl_factor_ex(a.to("tiny"))
    b = random((2, 6, 2), torch.float64, seed=5)
    x = torch.linalg.ldl_solve(LD, pivots, b.to("tiny"))
    assert_same(x, torch.linalg.ldl_solve(*torch.linalg.ldl_factor_ex(a)[:2], b), **close(torch.float64))
    out = torch.empty(0, dtype=torch.float64, device="tiny")
    assert torch.linalg.ldl_solve(LD, pivots, b.to("tiny"), out=out) is out
    assert_same(out, x.cpu(), **close(torch.float64))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.ldl_solve(LD, pivots, b.float().to("tiny"))
    assert_same(
        *both(
            torch.linalg.ldl_solve,
            *torch.linalg.ldl_factor(random((0, 3, 3), torch.float32) + 0),
            random((0, 3, 2), torch.float32),
        )
    )
