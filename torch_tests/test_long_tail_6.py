"""The long tail of ATen ops (issue #16), part 6, natively on tiny, against PyTorch CPU with the fallback
disabled (TINY_FALLBACK=0), so a silent fallback fails the test: tril_indices and triu_indices (factories on
tiny, every offset from far below to far past the matrix, int32 and int64), mvlgamma's and narrow_copy's out=
forms, and bilinear and bicubic resizing of uint8 images without antialiasing (torch's fixed-point weights,
folded at the borders, and rounding); values, dtypes, shapes, strides and bad input raising the CPU's kind of
error."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, check, check_devices

pytestmark = pytest.mark.usefixtures("native")


# ---- tril_indices, triu_indices ----


@pytest.mark.parametrize("fn", (torch.tril_indices, torch.triu_indices), ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", (torch.int64, torch.int32), ids=str)
def test_triangle_indices_of_every_shape_and_offset_match_cpu(fn, dtype):
    for rows, cols in itertools.product((0, 1, 2, 5, 8), (0, 1, 3, 9)):
        for offset in sorted({-40, -rows - 1, -rows, -2, -1, 0, 1, 3, cols - 1, cols, cols + 1, 40}):
            check_devices(lambda d, r=rows, c=cols, o=offset: fn(r, c, o, dtype=dtype, device=d))


@pytest.mark.parametrize("fn", (torch.tril_indices, torch.triu_indices), ids=lambda f: f.__name__)
def test_triangle_indices_of_a_large_matrix_match_cpu(fn):
    check_devices(lambda d: fn(700, 1000, 13, device=d))
    check_devices(lambda d: fn(1001, 300, -17, device=d))


@pytest.mark.parametrize("fn", (torch.tril_indices, torch.triu_indices), ids=lambda f: f.__name__)
def test_triangle_indices_refuse_what_the_cpu_refuses(fn):
    check_devices(lambda d: fn(-1, 3, device=d))
    check_devices(lambda d: fn(3, -1, device=d))
    check_devices(lambda d: fn(3, 3, dtype=torch.float32, device=d))
    check_devices(lambda d: fn(3, 3, dtype=torch.int16, device=d))


def test_triangle_indices_index_the_triangle_of_a_tiny_matrix():
    x = torch.arange(20.0).reshape(4, 5)
    for fn, tri in ((torch.tril_indices, torch.tril), (torch.triu_indices, torch.triu)):
        i = fn(4, 5, 1, device=DEVICE)
        values = x.to(DEVICE)[i[0], i[1]]
        nonzero = tri(x + 1, 1)
        torch.testing.assert_close(values.cpu(), nonzero[nonzero != 0] - 1)


# ---- mvlgamma.out ----


@pytest.mark.parametrize("p", (1, 3, 5))
def test_mvlgamma_out_matches_cpu(p):
    x = torch.linspace(3.0, 9.0, 12).reshape(3, 4)
    check(lambda t, out: torch.mvlgamma(t, p, out=out), x, torch.empty(0))
    # computed in float32, then widened: float32's tolerance
    check(lambda t, out: torch.mvlgamma(t, p, out=out), x, torch.empty(0, dtype=torch.float64), rtol=1.3e-6, atol=1e-5)
    check(lambda t, out: torch.mvlgamma(t, p, out=out), x.t(), torch.empty(3, 4).t())
    check(lambda t, out: torch.mvlgamma(t, p, out=out), torch.arange(3, 9), torch.empty(0))


def test_mvlgamma_out_refuses_an_out_it_cannot_cast_to():
    check(lambda t, out: torch.mvlgamma(t, 2, out=out), torch.linspace(3.0, 9.0, 6), torch.empty(0, dtype=torch.int64))


# ---- narrow_copy.out ----


@pytest.mark.parametrize("dtype", (torch.float32, torch.int64, torch.bool, torch.complex64), ids=str)
def test_narrow_copy_out_matches_cpu(dtype):
    x = torch.arange(24).reshape(2, 3, 4).to(dtype)
    for dim, start, length in ((0, 1, 1), (1, 0, 2), (2, 1, 3), (-1, -3, 2), (2, 4, 0), (1, -3, 3)):
        check(lambda t, out, a=(dim, start, length): torch.narrow_copy(t, *a, out=out), x, torch.empty(0, dtype=dtype))
    check(lambda t, out: torch.narrow_copy(t, 0, 1, 3, out=out), x.transpose(0, 2), torch.empty(7, dtype=dtype))


def test_narrow_copy_into_a_strided_out_writes_each_value_at_its_place():
    # the CPU kernel copies into out's memory in row-major order whatever out's strides (values land in the
    # wrong elements): tiny writes through the strides, and matches the CPU's narrow_copy without out=
    x = torch.arange(24.0).reshape(2, 3, 4)
    out = torch.empty(2, 4, 2, device=DEVICE).transpose(1, 2)
    result = torch.narrow_copy(x.to(DEVICE), 1, 1, 2, out=out)
    assert result is out and out.stride() == (8, 1, 2)
    torch.testing.assert_close(out.cpu(), torch.narrow_copy(x, 1, 1, 2), rtol=0, atol=0)


def test_narrow_copy_out_refuses_what_the_cpu_refuses():
    x = torch.arange(12.0).reshape(3, 4)
    out = torch.empty(0)
    check(lambda t, o: torch.narrow_copy(t, 1, 3, 2, out=o), x, out)  # past the end
    check(lambda t, o: torch.narrow_copy(t, 1, 5, 0, out=o), x, out)  # start out of range: IndexError
    check(lambda t, o: torch.narrow_copy(t, 1, -5, 1, out=o), x, out)
    check(lambda t, o: torch.narrow_copy(t, 0, 0, -1, out=o), x, out)  # negative length
    check(lambda t, o: torch.narrow_copy(t, 2, 0, 1, out=o), x, out)  # dim past the last
    check(lambda t, o: torch.narrow_copy(t, -3, 0, 1, out=o), x, out)  # negative dim out of range: IndexError
    check(lambda t, o: torch.narrow_copy(t, 0, 0, 1, out=o), torch.tensor(1.0), out)  # 0-dim
    check(lambda t, o: torch.narrow_copy(t, 0, 0, 1, out=o), x, torch.empty(0, dtype=torch.float64))  # dtype


# ---- bilinear and bicubic resize of uint8 images ----


def image(*shape, seed=0, low=0, high=256):
    return torch.randint(low, high, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


SIZES = [(12, 20), (5, 7), (3, 11), (8, 4), (32, 17), (1, 2), (8, 10)]


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("channels", (1, 3, 5))  # up to 4: the CPU's vectorized kernel; more: its generic loops
def test_resize_of_uint8_images_matches_cpu(mode, size, channels):
    x = image(2, channels, 8, 10)
    check(lambda t: F.interpolate(t, size=size, mode=mode), x)
    check(lambda t: F.interpolate(t, size=size, mode=mode, align_corners=True), x)


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
def test_resize_of_uint8_images_in_every_layout_and_scale_matches_cpu(mode):
    x = image(1, 4, 7, 9, seed=1)
    check(lambda t: F.interpolate(t, size=(11, 5), mode=mode), x.contiguous(memory_format=torch.channels_last))
    check(lambda t: F.interpolate(t, size=(4, 13), mode=mode), x.transpose(2, 3))
    for factor, recompute in itertools.product((1.7, 0.6, 2.0), (False, True)):
        check(lambda t, f=factor, r=recompute: F.interpolate(t, scale_factor=f, mode=mode, recompute_scale_factor=r), x)
    check(lambda t: F.interpolate(t, size=(1, 9), mode=mode), image(1, 3, 1, 4, seed=3))  # a one-row image
    check(lambda t: F.interpolate(t, size=(7, 9), mode=mode), x)  # same size: a copy


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
def test_resize_of_saturated_uint8_images_clamps_like_cpu(mode):
    x = image(1, 3, 6, 6, seed=2, low=0, high=2) * 255  # black and white: bicubic overshoots both ways
    check(lambda t: F.interpolate(t, size=(17, 13), mode=mode), x)
    check(lambda t: F.interpolate(t, size=(3, 20), mode=mode), torch.full((1, 1, 6, 6), 255, dtype=torch.uint8))


def test_uint8_linear_and_trilinear_and_backward_still_refuse_like_cpu():
    check(lambda t: F.interpolate(t, size=9, mode="linear"), image(1, 2, 5))
    check(lambda t: F.interpolate(t, size=(3, 4, 5), mode="trilinear"), image(1, 2, 2, 3, 4))


# ---- _efficientzerotensor: torch's immutable zero tensor ----


def test_an_efficient_zero_tensor_behaves_as_the_cpus():
    z, zc = torch._efficientzerotensor((2, 3), device=DEVICE), torch._efficientzerotensor((2, 3))
    assert z._is_zerotensor() and zc._is_zerotensor()
    assert z.device.type == DEVICE and z.dtype == zc.dtype and z.shape == zc.shape
    assert torch.equal(z.cpu(), zc)
    x = torch.randn(2, 3)
    assert torch.equal((x.to(DEVICE) + z).cpu(), x + zc)
    assert (x.to(DEVICE) * z)._is_zerotensor() == (x * zc)._is_zerotensor()
    assert torch.equal(z.exp().cpu(), zc.exp())
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        z.add_(1)


@pytest.mark.parametrize("dtype", (torch.float32, torch.complex64), ids=str)
def test_sgn_gradient_matches_cpu(dtype):
    # a real input's sgn has a zero gradient: torch's formula returns an efficient zero tensor (no storage)
    a, g = torch.randn(4, 5, dtype=dtype), torch.randn(4, 5, dtype=dtype)
    a[0, :2] = 0
    ac = a.clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.sgn(ac), ac, g)
    at = a.to(DEVICE).requires_grad_()
    (got,) = torch.autograd.grad(torch.sgn(at), at, g.to(DEVICE))
    assert got._is_zerotensor() == want._is_zerotensor() and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
