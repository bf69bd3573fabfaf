"""Complex tensors on tiny (issue #16): complex64 and complex128 (and complex32 where torch's CPU has the
op) held as storages of interleaved real and imaginary parts, against PyTorch CPU. Factories, copies,
views (view_as_real, view_as_complex, real, imag, conj with its lazy bit) and the native complex ops run
with the fallback disabled (TINY_FALLBACK=0); ops tiny has no complex kernel for go through the CPU
fallback and come back right."""

import pytest
import torch
from conftest import DEVICE, assert_same, by_dtype, check, counting

COMPLEX = (torch.complex64, torch.complex128)


def crand(*shape, dtype=torch.complex64, seed=0):
    """Seeded complex CPU values, both parts normal."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


# ---- holding complex values ----


@by_dtype(COMPLEX + (torch.complex32,))
def test_round_trip_keeps_values_and_layout(dtype, native):
    x = crand(3, 4, dtype=torch.complex64).to(dtype)
    t = x.to(DEVICE)
    assert t.dtype == dtype and t.device.type == DEVICE

    def same(a, b):  # through the real parts: the CPU has no complex32 comparison
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(torch.view_as_real(a.contiguous()), torch.view_as_real(b.contiguous()))

    same(t.cpu(), x)
    # a strided view of a tiny tensor comes back with the CPU's values
    same(t.t().cpu(), x.t())
    same(t[1:, ::2].cpu(), x[1:, ::2])


@by_dtype(COMPLEX)
def test_factories_match_cpu(dtype, native):
    for fn in (
        lambda dev: torch.zeros(2, 3, dtype=dtype, device=dev),
        lambda dev: torch.ones(2, 3, dtype=dtype, device=dev),
        lambda dev: torch.full((2, 3), 1.5 - 2j, dtype=dtype, device=dev),
        lambda dev: torch.full((4,), -0.0 - 0.0j, dtype=dtype, device=dev),
        lambda dev: torch.empty(2, 3, dtype=dtype, device=dev).fill_(3j),
        lambda dev: torch.zeros_like(crand(5, dtype=dtype).to(dev)),
        lambda dev: torch.tensor([1 + 2j, -3.5j], dtype=dtype, device=dev),
    ):
        assert_same(fn(DEVICE), fn("cpu"))


def test_fill_with_a_tiny_complex_tensor_stays_lazy_and_matches_cpu(native):
    v = torch.tensor(2 - 1j)
    check(lambda x, v: x.fill_(v), torch.zeros(3, dtype=torch.complex64), v)
    check(lambda x: x[::2].fill_(1j), torch.zeros(5, dtype=torch.complex128))


def test_complex_randn_draws_both_parts_with_half_the_variance(native):
    torch.tiny.manual_seed(0)
    z = torch.randn(20000, dtype=torch.complex64, device=DEVICE).cpu()
    assert z.dtype == torch.complex64
    assert abs(z.real.mean()) < 0.03 and abs(z.imag.mean()) < 0.03
    assert abs(z.real.var() - 0.5) < 0.03 and abs(z.imag.var() - 0.5) < 0.03
    assert abs(torch.corrcoef(torch.stack([z.real, z.imag]))[0, 1]) < 0.05


@by_dtype(COMPLEX)
def test_copies_between_dtypes_match_cpu(dtype, native):
    x = crand(3, 4, dtype=dtype)
    check(lambda x: x.to(torch.complex128), x)
    check(lambda x: x.to(torch.complex64), x)
    check(lambda x: torch.empty(4, 3, dtype=dtype, device=x.device).copy_(x.t()), x)
    check(lambda r: r.to(dtype), torch.randn(3, 2))
    check(lambda r: r.to(dtype), torch.arange(6).reshape(2, 3))
    check(lambda x, r: x.copy_(r), x, torch.randn(4))  # broadcast, imaginary parts become 0
    check(lambda x: x.clone(memory_format=torch.contiguous_format), x.t())
    check(lambda x: x.contiguous(), x.t())


def test_copy_of_complex_into_real_keeps_the_real_part_and_warns_as_cpu(native):
    x = crand(5)
    for dev in ("cpu", DEVICE):
        with pytest.warns(UserWarning, match="discards the imaginary part"):
            r = torch.empty(5, device=dev).copy_(x.to(dev))
        assert torch.equal(r.cpu(), x.real)


def test_item_and_tolist(native):
    x = crand(3, dtype=torch.complex128)
    t = x.to(DEVICE)
    assert t[1].item() == x[1].item() and isinstance(t[1].item(), complex)
    assert t.tolist() == x.tolist()
    assert t.conj()[2].item() == x.conj()[2].item()


# ---- views ----


@by_dtype(COMPLEX)
def test_view_as_real_and_view_as_complex_alias_the_storage(dtype, native):
    x = crand(3, 4, dtype=dtype)
    check(lambda x: torch.view_as_real(x), x)
    check(lambda x: torch.view_as_real(x[:, 1:3]), x)
    check(lambda r: torch.view_as_complex(r), torch.view_as_real(x).clone())
    check(lambda x: torch.view_as_real(x).mul_(2), x)  # writes through the view into x
    check(lambda x: torch.view_as_complex(torch.view_as_real(x)), x)
    check(lambda x: torch.view_as_real(x.conj()), x)  # the CPU's RuntimeError
    check(lambda r: torch.view_as_complex(r), torch.randn(3, 3))  # last dim not 2: the CPU's error


@by_dtype(COMPLEX)
def test_real_and_imag_are_views_and_writable(dtype, native):
    x = crand(4, 3, dtype=dtype)
    check(lambda x: (x.real, x.imag), x)
    check(lambda x: x.real.mul_(3), x)
    check(lambda x: x.imag.zero_(), x)
    check(lambda x: x.conj().imag, x)  # a negative view of the imaginary parts
    check(lambda x: x.conj().imag.clone(), x)


@by_dtype(COMPLEX)
def test_conj_is_lazy_and_resolves_as_on_cpu(dtype, native):
    x = crand(3, 5, dtype=dtype)
    check(lambda x: x.conj().is_conj(), x)
    check(lambda x: x.conj().resolve_conj(), x)
    check(lambda x: x.conj().t().contiguous(), x)
    check(lambda x: x.conj().clone(), x)
    check(lambda x: torch.empty_like(x).conj().copy_(x), x)  # a conjugate destination
    check(lambda x: x.conj().conj().resolve_conj(), x)
    check(lambda x: x.conj().fill_(1 + 2j), x)


def test_printing_shows_the_cpu_values(native):
    def squeezed(text):  # without the device and the line breaks it moves
        return "".join(text.replace("device='tiny:0'", "").split()).replace(",,", ",").replace(",)", ")")

    for x in (crand(3), crand(2, 2, dtype=torch.complex128), crand(3).conj()):
        assert "device='tiny:0'" in str(x.to(DEVICE))
        assert squeezed(str(x.to(DEVICE))) == squeezed(str(x))


# ---- through the fallback ----


def test_ops_without_a_native_complex_kernel_run_on_the_cpu():
    x, y = crand(4, 3), crand(4, 3, seed=1)
    for fn in (
        lambda x, y: x.index_add(0, torch.tensor([1, 0, 3, 2], device=x.device), y),
        lambda x, y: x.take(torch.tensor([5, 0], device=x.device)),
        lambda x, y: x.scatter(0, torch.tensor([[1, 0, 2]], device=x.device), y, reduce="multiply"),
        # complex scalars: the integral-input check of addr's beta and alpha did not know complex results
        lambda x, y: torch.addr(x, x[:, 0], y[0], beta=0.2 + 0.6j, alpha=0.2 - 0.6j),
        # the real linear algebra kernels refused complex inputs with NotImplementedError
        lambda x, y: torch.cholesky_inverse(torch.linalg.cholesky(x.mH @ x + torch.eye(3, device=x.device))),
        lambda x, y: torch.linalg.inv(x[:3] + 2 * torch.eye(3, device=x.device)),
        lambda x, y: torch.linalg.lu_factor(x[:3]),
        lambda x, y: torch.lu_unpack(*torch.linalg.lu_factor(x[:3])),
        lambda x, y: torch.linalg.matrix_exp(x[:3] / 4),
        lambda x, y: torch.linalg.slogdet(x[:3]),
        lambda x, y: x.index_fill(0, torch.tensor([1, 3], device=x.device), 1 + 2j),
    ):
        check(fn, x, y, allow_fallback=True, rtol=1e-5, atol=1e-5)


def test_a_native_kernel_hands_complex_tensors_to_the_fallback_and_refuses_under_tiny_fallback_0(monkeypatch):
    # scatter_reduce's native kernel scatters complex values by adding only: a product goes to the CPU
    x, src, index = crand(3, 3), crand(1, 3), torch.tensor([[1, 0, 2]])
    with counting() as c:
        s = x.to(DEVICE).scatter_reduce(0, index.to(DEVICE), src.to(DEVICE), "prod").cpu()
    assert c["fallbacks"] >= 1
    assert torch.allclose(s, x.scatter_reduce(0, index, src, "prod"), rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("TINY_FALLBACK", "0")
    with pytest.raises(RuntimeError, match="scatter_reduce"):
        x.to(DEVICE).scatter_reduce(0, index.to(DEVICE), src.to(DEVICE), "prod")


# ---- native complex arithmetic ----


def special_values(dtype):
    """Complex values with zeros of both signs, infinities and NaN in either part."""
    parts = [0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan")]
    re, im = torch.meshgrid(torch.tensor(parts), torch.tensor(parts), indexing="ij")
    return torch.complex(re, im).flatten().to(dtype)


@by_dtype(COMPLEX)
@pytest.mark.parametrize(
    "name",
    ["add", "sub", "mul", "div", "rsub", "pow"],
)
def test_binary_ops_match_cpu(name, dtype, native):
    fn = getattr(torch, name)
    x, y = crand(4, 3, dtype=dtype), crand(4, 3, dtype=dtype, seed=1)
    real = torch.randn(3, dtype=c10_real(dtype))
    check(fn, x, y, rtol=1e-4, atol=1e-5)
    check(fn, x, real, rtol=1e-4, atol=1e-5)  # a real operand promotes
    check(fn, real, x, rtol=1e-4, atol=1e-5)
    check(lambda x: fn(x, 2 - 0.5j), x, rtol=1e-4, atol=1e-5)  # a Python complex scalar
    check(lambda x: fn(x, 3), x, rtol=1e-4, atol=1e-5)
    check(lambda x, y: fn(x.t(), y.t()[:, :1]), x, y, rtol=1e-4, atol=1e-5)  # strided, broadcast


def c10_real(dtype):
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}[dtype]


def test_real_tensors_with_complex_scalars_promote_as_on_cpu(native):
    x = torch.randn(5)
    check(lambda x: x * 1j, x)
    check(lambda x: x + (2 + 1j), x)
    check(lambda x: torch.arange(4, device=x.device) * 1j, x)
    check(lambda x: x.add_(1j), x)  # the CPU's RuntimeError: complex can't be cast to float


@by_dtype(COMPLEX)
def test_add_and_sub_with_alpha_and_in_place_and_out(dtype, native):
    x, y = crand(6, dtype=dtype), crand(6, dtype=dtype, seed=1)
    check(lambda x, y: torch.add(x, y, alpha=2 - 1j), x, y, rtol=1e-5, atol=1e-6)
    check(lambda x, y: x.sub_(y, alpha=3), x, y)
    check(lambda x, y: x.mul_(y), x, y, rtol=1e-5, atol=1e-6)
    check(lambda x, y: torch.mul(x, y, out=torch.empty(6, dtype=dtype, device=x.device)), x, y, rtol=1e-5, atol=1e-6)
    check(lambda x, y: x.conj() * y, x, y, rtol=1e-5, atol=1e-6)  # a conjugate operand
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), x, y)  # the CPU's error


@by_dtype(COMPLEX)
@pytest.mark.parametrize(
    "name",
    ["neg", "conj_physical", "sgn", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "abs", "angle", "isnan"]
    + ["tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "sigmoid"]
    + ["log2", "log10", "log1p", "expm1", "rsqrt", "square", "isinf", "isfinite", "isreal"],
)
def test_unary_ops_match_cpu(name, dtype, native):
    fn = getattr(torch, name)
    check(fn, crand(5, 4, dtype=dtype), rtol=1e-4, atol=1e-5)
    check(fn, crand(5, 4, dtype=dtype).t(), rtol=1e-4, atol=1e-5)
    check(lambda x: fn(x.conj()), crand(7, dtype=dtype), rtol=1e-4, atol=1e-5)


@by_dtype(COMPLEX)
@pytest.mark.parametrize("name", ["neg", "conj_physical", "sgn", "abs", "angle", "isnan", "sqrt", "reciprocal"])
def test_unary_ops_at_zeros_infinities_and_nan_match_cpu(name, dtype, native):
    check(getattr(torch, name), special_values(dtype), rtol=1e-5, atol=1e-6)


def branch_cut_values(dtype):
    """Values on the cuts of the inverse functions (the real axis past +-1, the imaginary axis past +-i) with
    both signs of zero, values near 0 and large ones."""
    re = [2.0, 2.0, -2.0, -2.0, 0.0, -0.0, 0.0, -0.0, 1e-4, 0.5, -0.3, 30.0, -25.0, 0.0, 1.0]
    im = [0.0, -0.0, 0.0, -0.0, 2.0, 2.0, -2.0, -2.0, -1e-4, 0.25, 1e-6, 1.0, -3.0, 0.0, 0.0]
    return torch.complex(torch.tensor(re), torch.tensor(im)).to(dtype)


@by_dtype(COMPLEX)
@pytest.mark.parametrize(
    "name", ["asin", "acos", "atan", "asinh", "acosh", "atanh", "tanh", "tan", "log1p", "expm1", "log2", "sigmoid"]
)
def test_inverse_and_hyperbolic_functions_on_their_branch_cuts_match_cpu(name, dtype, native):
    check(getattr(torch, name), branch_cut_values(dtype), rtol=1e-5, atol=1e-6)


@by_dtype(COMPLEX)
def test_division_by_zero_and_huge_values_match_cpu(dtype, native):
    x = torch.tensor([1 + 1j, 0j, -2 + 0j, 1e30 + 1e30j, 3 - 4j], dtype=dtype)
    y = torch.tensor([0j, 0j, 1e-30 + 0j, 1e30 - 1e30j, 1e-3 + 1e3j], dtype=dtype)
    check(torch.div, x, y, rtol=1e-5, atol=0)
    check(torch.abs, torch.tensor([3e30 + 4e30j, 3e-30 - 4e-30j], dtype=dtype), rtol=1e-6, atol=0)


@by_dtype(COMPLEX)
def test_comparisons_match_cpu(dtype, native):
    x = crand(8, dtype=dtype)
    y = x.clone()
    y[::2] += 1j
    check(torch.eq, x, y)
    check(torch.ne, x, y)
    check(lambda x: x == (x[0].item()), x)
    check(torch.isfinite, special_values(dtype))
    check(lambda x: torch.eq(x, x, out=torch.empty(8, dtype=torch.float32, device=x.device)), x)


@by_dtype((torch.float32, torch.float64))
def test_complex_and_polar_build_complex_tensors(dtype, native):
    a, b = torch.randn(3, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    check(torch.complex, a, b)
    check(torch.polar, a.abs(), b, rtol=1e-5, atol=1e-6)
    check(lambda a, b: torch.complex(a, b.to(torch.float16)), a, b)  # the CPU's dtype error


@by_dtype((torch.float32, torch.float64))
def test_angle_of_real_values_matches_cpu(dtype, native):
    check(torch.angle, torch.tensor([-1.0, 0.0, -0.0, 2.0, float("nan"), -float("inf")], dtype=dtype))


@by_dtype(COMPLEX)
def test_sum_and_mean_match_cpu(dtype, native):
    x = crand(4, 5, 3, dtype=dtype)
    check(lambda x: x.sum(), x, rtol=1e-5, atol=1e-5)
    check(lambda x: x.sum(dim=(0, 2)), x, rtol=1e-5, atol=1e-5)
    check(lambda x: x.mean(dim=1, keepdim=True), x, rtol=1e-5, atol=1e-5)
    check(lambda x: x.conj().sum(dim=-1), x, rtol=1e-5, atol=1e-5)
    check(lambda x: x[0, 0, 0].sum(), x)
    check(lambda r: r.sum(dtype=dtype), torch.randn(4, 3), rtol=1e-5, atol=1e-5)


@by_dtype(COMPLEX)
def test_matrix_products_match_cpu(dtype, native):
    a, b = crand(4, 5, dtype=dtype), crand(5, 3, dtype=dtype, seed=1)
    check(torch.mm, a, b, rtol=1e-4, atol=1e-5)
    check(lambda a, b: a.conj() @ b.t().conj().t(), a, b, rtol=1e-4, atol=1e-5)
    check(lambda a, b: a.mT.conj() @ a, a, b, rtol=1e-4, atol=1e-5)
    check(torch.bmm, crand(2, 3, 4, dtype=dtype), crand(2, 4, 2, dtype=dtype, seed=1), rtol=1e-4, atol=1e-5)
    check(torch.matmul, crand(2, 3, 4, dtype=dtype), crand(4, 2, dtype=dtype, seed=1), rtol=1e-4, atol=1e-5)
    check(torch.mm, a, torch.randn(5, 3, dtype=c10_real(dtype)))  # the CPU's dtype error


@by_dtype(COMPLEX)
def test_matrix_vector_products_conjugate_as_torch_does(dtype, native):
    a, v, w = crand(4, 5, dtype=dtype), crand(5, dtype=dtype, seed=1), crand(4, dtype=dtype, seed=2)
    tol = dict(rtol=1e-4, atol=1e-5)
    check(torch.mv, a, v, **tol)
    check(lambda a, v: a @ v, a, v, **tol)
    check(lambda w, a, v: torch.addmv(w, a, v, beta=2 - 1j, alpha=0.5j), w, a, v, **tol)
    check(lambda w, a, v: w.addmv_(a.conj(), v), w, a, v, **tol)
    check(lambda a, v: torch.addmm(a[:, :3], a, a.mT[:, :3], beta=0), a, v, **tol)
    check(lambda a, v: torch.addmm(a[:1, :4], a, a.mT.conj(), alpha=2j), a, v, **tol)
    check(lambda v: torch.dot(v, v.flip(0)), v, **tol)
    check(lambda v: torch.vdot(v, v.flip(0)), v, **tol)
    check(lambda v: torch.vdot(v.conj(), v), v, **tol)
    check(lambda w, v: torch.dot(w, v), w, v)  # the CPU's size error
    check(lambda v: torch.dot(v, v.real), v)  # the CPU's dtype error


@by_dtype(COMPLEX)
def test_where_and_masked_fill_select_pairs(dtype, native):
    x, y = crand(4, 3, dtype=dtype), crand(4, 3, dtype=dtype, seed=1)
    check(lambda x, y: torch.where(x.real > 0, x, y), x, y)
    check(lambda x, y: torch.where(x.real > 0, x.conj(), 2j), x, y)
    check(lambda x, y: torch.where(x.real > 0, x, y.real), x, y)  # a real value promotes
    check(lambda x, y: torch.where(x.real > 0, x.real, 1 + 1j), x, y)
    check(lambda x, y: torch.where(x.real > 0, x, y, out=torch.empty(0, dtype=torch.float32)), x, y)  # out dtype
    check(lambda x: x.masked_fill(x.imag > 0, 3 - 1j), x)
    check(lambda x: x.masked_fill(x.imag[0] > 0, 2.5), x)
    check(lambda x, y: x.masked_fill(x.imag > 0, y[0, 0]), x, y)
    check(lambda x, y: x.t().masked_fill_(x.t().imag > 0, -0.0 - 0.0j), x, y)
    check(lambda x, y: x.masked_scatter(x.real > 0, y), x, y)


@by_dtype(COMPLEX)
def test_movement_ops_move_pairs(dtype, native):
    x, y = crand(4, 3, dtype=dtype), crand(2, 3, dtype=dtype, seed=1)
    check(lambda x, y: torch.cat([x, y]), x, y)
    check(lambda x, y: torch.cat([x.conj(), y.real]), x, y)  # a real part promotes
    check(lambda x, y: torch.stack([x[:2], y], dim=1), x, y)
    check(lambda x: x.flip(0, 1), x)
    check(lambda x: x.conj().flip(1), x)
    check(lambda x: x.roll(2), x)
    check(lambda x: x.roll((1, -1), (0, 1)), x)
    check(lambda x: torch.constant_pad_nd(x, (1, 2, 0, 1), 1 - 2j), x)
    check(lambda x: torch.nn.functional.pad(x, (1, 0, -1, 2)), x)
    check(lambda x: x.repeat(2, 1), x)
    for mode in ("reflect", "replicate", "circular"):
        check(lambda x, mode=mode: torch.nn.functional.pad(x[None], (2, 1), mode=mode), x)
        check(lambda x, mode=mode: torch.nn.functional.pad(x[None, None], (1, 1, 2, 0), mode=mode), x)


@by_dtype(COMPLEX)
def test_indexing_gathers_and_scatters_pairs(dtype, native):
    x, y = crand(5, 4, dtype=dtype), crand(5, 4, dtype=dtype, seed=1)
    i = torch.tensor([3, 0, 3, -1])
    check(lambda x, i: x[i], x, i)
    check(lambda x, i: x.conj()[:, i.abs()], x, i)
    check(lambda x, i: x.t()[i.abs(), 1:], x, i)
    check(lambda x: x[x.real > 0], x)
    check(lambda x, i: x.index_select(1, i.abs()), x, i)
    check(lambda x, i: torch.gather(x, 0, i.abs().expand(2, 4)), x, i)
    check(lambda x, y: x.index_put_((torch.tensor([0, 2]),), y[:2]), x, y)
    check(lambda x, y: x.index_put_((torch.tensor([1, 1]),), y[:2], accumulate=True), x, y, rtol=1e-5, atol=1e-6)
    check(lambda x, y: x.conj().index_put_((torch.tensor([4]),), y[:1]), x, y)
    check(lambda x: x.__setitem__(x.real > 0, 2j) or x, x)
    check(lambda x, y: x.__setitem__(x.real > 0, y[x.real > 0]) or x, x, y)
    idx = torch.tensor([[1, 0, 4, 2], [3, 3, 0, 1]])
    check(lambda x, y, idx: x.scatter(0, idx, y), x, y, idx)
    check(lambda x, idx: x.scatter(0, idx, 1.5 - 1j), x, idx)
    check(lambda x, y, idx: x.scatter_add(0, idx, y), x, y, idx, rtol=1e-5, atol=1e-6)
    check(lambda x, y, idx: x.scatter(0, idx, y, reduce="add"), x, y, idx, rtol=1e-5, atol=1e-6)


@by_dtype(COMPLEX)
def test_products_running_sums_and_norms_match_cpu(dtype, native):
    x = crand(3, 7, 2, dtype=dtype) * 0.8
    tol = dict(rtol=1e-4, atol=1e-5)
    check(lambda x: x.prod(), x, **tol)
    check(lambda x: x.prod(1), x, **tol)
    check(lambda x: x.conj().prod(0, keepdim=True), x, **tol)
    check(lambda x: x[:, :0].prod(1), x)
    check(lambda x: x.cumsum(1), x, **tol)
    check(lambda x: x.cumprod(1), x, **tol)
    check(lambda x: x.conj().cumprod(0), x, **tol)
    check(lambda x: torch.cumsum(x.real, 0, dtype=dtype), x, **tol)
    for ord in (2, 1, 3, 0, float("inf"), -float("inf")):
        check(lambda x, ord=ord: torch.linalg.vector_norm(x, ord, dim=(0, 2)), x, **tol)
    check(lambda x: torch.linalg.vector_norm(x), x, **tol)
    check(lambda x: torch.norm(x, dim=1), x, **tol)
    check(lambda x: x.mean(dim=(0, 1)), x, **tol)


def grads(fn, *inputs):
    """fn's result and the gradients of its inputs for a seeded complex upstream gradient, CPU then tiny."""
    results = []
    for dev in ("cpu", DEVICE):
        leaves = [x.detach().to(dev).requires_grad_() for x in inputs]
        out = fn(*leaves)
        seeded = torch.Generator().manual_seed(9)
        g = crand(*out.shape, dtype=out.dtype, seed=9) if out.is_complex() else torch.randn(out.shape, generator=seeded)
        results.append((out, torch.autograd.grad(out, leaves, g.to(dev))))
    return results


@by_dtype(COMPLEX)
@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: x * y,
        lambda x, y: x / y,
        lambda x, y: (x * y.conj()).exp(),
        lambda x, y: (x @ y.mT).sum(dim=0),
        lambda x, y: torch.view_as_real(x * y),
        lambda x, y: x.sqrt() + y.reciprocal(),
        lambda x, y: torch.cat([x, y]).flip(0)[torch.tensor([0, 4, 5])].prod(0),
        lambda x, y: torch.linalg.vector_norm(x.tanh() * y.sigmoid(), dim=1),
        lambda x, y: torch.where(x.real > 0, x.asinh(), y).cumsum(1),
        lambda x, y: torch.nn.functional.pad(x[None], (2, 1), mode="reflect") * y.sum(),
    ],
    ids=[
        "mul",
        "div",
        "exp_conj",
        "matmul_sum",
        "view_as_real",
        "sqrt_reciprocal",
        "index_prod",
        "norm",
        "where",
        "pad",
    ],
)
def test_gradients_match_cpu(fn, dtype, native):
    x, y = crand(3, 4, dtype=dtype), crand(3, 4, dtype=dtype, seed=1)
    (expected, expected_grads), (actual, actual_grads) = grads(fn, x, y)
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)
    assert_same(actual_grads, expected_grads, rtol=1e-4, atol=1e-5)


@by_dtype(COMPLEX)
def test_gradients_of_abs_and_angle_match_cpu(dtype, native):
    # their formulas select with where
    x, y = crand(3, 4, dtype=dtype), crand(3, 4, dtype=dtype, seed=1)
    (expected, expected_grads), (actual, actual_grads) = grads(lambda x, y: x.abs() * y.angle(), x, y)
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)
    assert_same(actual_grads, expected_grads, rtol=1e-4, atol=1e-5)
