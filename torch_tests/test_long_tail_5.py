"""The long tail of ATen ops (issue #16), part 5, natively on tiny, against PyTorch CPU with the fallback
disabled (TINY_FALLBACK=0), so a silent fallback fails the test: gcd and lcm (every form, every integer dtype,
edge values down to the dtype's minimum), repeat_interleave with a tensor of repeats (with and without
output_size), _unique (torch._unique, and index_fill's backward, which uses it), and the antialiased bilinear
and bicubic resize of uint8 images (torch's fixed-point weights and rounding); values, dtypes, shapes,
broadcasting, out=, in-place, non-contiguous inputs and bad input raising the CPU's kind of error."""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, by_dtype, check

pytestmark = pytest.mark.usefixtures("native")

INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def ints(*shape, dtype, seed=0):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(info.min, info.max, shape, dtype=dtype, generator=g)


# ---- gcd, lcm ----


@by_dtype(INTS)
def test_gcd_and_lcm_of_random_values_match_cpu(dtype):
    x, y = ints(7, 9, dtype=dtype), ints(7, 9, dtype=dtype, seed=1)
    y[0] = 0
    x[1, :3] = torch.iinfo(dtype).min
    check(torch.gcd, x, y)
    if dtype in (torch.int32, torch.int64):  # gcd(MIN, y) can be -1, and MIN / -1 traps on the CPU
        x[1, :3] += 1
    check(torch.lcm, x, y)
    check(torch.lcm, x.abs() % 1000, y.abs() % 1000)


@by_dtype(INTS)
def test_gcd_and_lcm_of_small_values_match_cpu(dtype):
    lo = 0 if dtype == torch.uint8 else -12
    v = torch.arange(lo, 13).to(dtype)
    x, y = v.repeat_interleave(len(v)), v.repeat(len(v))  # every pair
    check(torch.gcd, x, y)
    check(torch.lcm, x, y)


@pytest.mark.parametrize("dtype", (torch.int8, torch.uint8), ids=str)
def test_gcd_and_lcm_of_every_8_bit_pair_match_cpu(dtype):
    info = torch.iinfo(dtype)
    v = torch.arange(info.min, info.max + 1).to(dtype)
    x, y = v.repeat_interleave(len(v)), v.repeat(len(v))
    check(torch.gcd, x, y)
    check(torch.lcm, x, y)  # the product is taken in int and wraps back to the dtype, as in C


def fibonacci_below(limit):
    f = [1, 2]
    while f[-1] + f[-2] < limit:
        f.append(f[-1] + f[-2])
    return f


@pytest.mark.parametrize("dtype", (torch.int16, torch.int32, torch.int64), ids=str)
def test_gcd_of_consecutive_fibonacci_numbers_takes_euclids_longest_path_and_matches_cpu(dtype):
    f = torch.tensor(fibonacci_below(2 ** (torch.iinfo(dtype).bits - 1)), dtype=dtype)
    check(torch.gcd, f[1:], f[:-1])
    check(torch.gcd, f[:-1], -f[1:])
    check(torch.lcm, f[1:], f[:-1])


def test_gcd_at_int64_edge_values_matches_cpu():
    m = -(2**63)
    x = torch.tensor([m, m, m, m, 3, 0, 0, m + 1, 2**62, 12, -18, 7, -7])
    y = torch.tensor([m, 0, 5, 3, m, 0, -7, 7, 3 * 2**61, -18, 12, 0, -7])
    check(torch.gcd, x, y)  # gcd(MIN, 5) is -1 and gcd(MIN, 0) is MIN on the CPU
    keep = torch.ones(len(x), dtype=torch.bool)
    keep[2] = False  # lcm(MIN, 5) divides MIN by -1: a trap on the CPU
    check(torch.lcm, x[keep], y[keep])


@by_dtype((torch.int32, torch.int64))
def test_gcd_and_lcm_broadcast_and_mix_dtypes_like_cpu(dtype):
    x, y = ints(4, 1, 5, dtype=dtype) % 100, ints(3, 1, dtype=dtype, seed=1) % 100
    check(torch.gcd, x, y)
    check(torch.lcm, x, y)
    check(torch.gcd, x, torch.tensor(12))
    check(torch.gcd, x, (ints(5, dtype=torch.int8, seed=2) % 50))  # promotes to the wider dtype
    check(torch.lcm, ints(5, dtype=torch.uint8, seed=3) % 20, ints(5, dtype=torch.int8, seed=4) % 20)


def test_gcd_and_lcm_out_in_place_and_non_contiguous_match_cpu():
    x, y = ints(6, 8, dtype=torch.int64) % 1000, ints(8, 6, dtype=torch.int64, seed=1).t() % 1000
    check(torch.gcd, x, y)  # y transposed
    check(torch.lcm, x[:, ::2], y[:, 1::2])
    check(lambda a, b, o: torch.gcd(a, b, out=o), x, y, torch.empty(6, 8, dtype=torch.int64))
    check(lambda a, b, o: torch.lcm(a, b, out=o), x, y, torch.empty(0, dtype=torch.int64))  # resized
    check(lambda a, b: a.gcd_(b), x.clone(), y)
    check(lambda a, b: a.lcm_(b), x.clone(), y)
    check(lambda a, b: a[:, 1:3].gcd_(b[:, :2]), x.clone(), y)  # through a view
    check(torch.gcd, torch.empty(0, 3, dtype=torch.int32), torch.empty(0, 3, dtype=torch.int32))
    check(torch.gcd, torch.tensor(12), torch.tensor(-18))


def test_gcd_fuses_into_what_reads_it():
    x, y = ints(64, dtype=torch.int32) % 1000, ints(64, dtype=torch.int32, seed=1) % 1000
    check(lambda a, b: (torch.gcd(a, b) * 2 + 1).sum(), x, y)


@pytest.mark.parametrize(
    "fn, args",
    [
        (torch.gcd, (torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))),  # floats: no kernel, as on the CPU
        (torch.lcm, (torch.tensor([True]), torch.tensor([False]))),
        (torch.gcd, (torch.tensor([4, 6]), torch.tensor([1, 2, 3]))),  # shapes do not broadcast
        (lambda a, o: torch.gcd(a, a, out=o), (torch.tensor([4, 6]), torch.empty(2, dtype=torch.int8))),
        (lambda a, b: a.gcd_(b), (torch.tensor([4, 6], dtype=torch.int8), torch.tensor([4, 6]))),  # int64 into int8
        (lambda a, b: a.lcm_(b), (torch.tensor([4]), torch.tensor([4, 6]))),  # in-place cannot grow
        (torch.gcd, (torch.tensor([4, 6], dtype=torch.uint16), torch.tensor([2, 3], dtype=torch.uint16))),
    ],
)
def test_gcd_and_lcm_bad_input_raises_like_cpu(fn, args):
    check(fn, *args)


# ---- repeat_interleave with a tensor of repeats ----


@by_dtype((torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8))
def test_repeat_interleave_of_repeats_matches_cpu(dtype):
    check(torch.repeat_interleave, torch.tensor([2, 0, 3, 1, 0], dtype=dtype))
    check(torch.repeat_interleave, torch.tensor([0, 0, 4], dtype=dtype))
    check(torch.repeat_interleave, torch.tensor([0, 0], dtype=dtype))
    check(torch.repeat_interleave, torch.tensor([], dtype=dtype))
    check(torch.repeat_interleave, torch.arange(12, dtype=dtype)[::3])  # non-contiguous


def test_repeat_interleave_with_output_size_matches_cpu():
    r = torch.tensor([1, 3, 0, 2])
    check(lambda t: torch.repeat_interleave(t, output_size=6), r)
    check(lambda t: torch.repeat_interleave(t, output_size=0), torch.tensor([0, 0]))


def test_repeat_interleave_with_output_size_runs_nothing_until_its_result_is_read():
    r = torch.tensor([1, 3, 0, 2], device=DEVICE) * 1
    torch.tiny.synchronize()
    before = torch.tiny.stats()["kernels"]
    out = torch.repeat_interleave(r, output_size=6)
    assert torch.tiny.stats()["kernels"] == before  # no read of the total
    assert torch.equal(out.cpu(), torch.repeat_interleave(r.cpu()))


def test_repeat_interleave_of_many_values_matches_cpu():
    r = torch.randint(0, 5, (300,), generator=torch.Generator().manual_seed(0))
    check(torch.repeat_interleave, r)
    check(torch.repeat_interleave, r.to(torch.int8))  # indices above 127 wrap in int8, as on the CPU


def test_repeat_interleave_of_a_tensor_by_a_tensor_of_repeats_matches_cpu():
    x = torch.arange(12.0).reshape(3, 4)
    check(lambda t, r: t.repeat_interleave(r, dim=0), x, torch.tensor([1, 0, 2]))
    check(lambda t, r: t.repeat_interleave(r, dim=1), x, torch.tensor([2, 1, 0, 1]))
    check(lambda t, r: t.repeat_interleave(r), torch.arange(3), torch.tensor([3, 1, 2]))
    check(lambda t, r: t.repeat_interleave(r, dim=0, output_size=3), x, torch.tensor([1, 0, 2]))
    check(lambda t, r: t.repeat_interleave(r, dim=0), x, torch.tensor(2))  # one repeat for every row


@pytest.mark.parametrize(
    "repeats",
    [
        torch.tensor([2, -1, 3]),  # negative
        torch.tensor([[1, 2]]),  # not 1-D
        torch.tensor([1.0, 2.0]),  # not an integer dtype
        torch.tensor([1, 2], dtype=torch.bool),
        torch.tensor([1, 2], dtype=torch.uint16),
        torch.tensor([[1.0, 2.0]]),  # the dtype is checked first
    ],
)
def test_repeat_interleave_bad_repeats_raise_like_cpu(repeats):
    check(torch.repeat_interleave, repeats)


# ---- _unique ----


@by_dtype((torch.float32, torch.int64, torch.int8, torch.uint8, torch.bool))
def test_underscore_unique_matches_cpu(dtype):
    x = (torch.randint(0, 6, (4, 5), generator=torch.Generator().manual_seed(0)) - 2).to(dtype)
    check(torch._unique, x)
    check(lambda t: torch._unique(t, return_inverse=True), x)
    check(lambda t: torch._unique(t, sorted=False, return_inverse=True), x)
    check(lambda t: torch._unique(t, return_inverse=True), x.t())  # non-contiguous
    check(lambda t: torch._unique(t, return_inverse=True), x[:0])


def test_underscore_unique_keeps_every_nan_as_on_the_cpu():
    x = torch.tensor([1.0, float("nan"), 0.5, float("nan"), 1.0])
    check(lambda t: torch._unique(t, return_inverse=True), x)


def test_index_fill_backward_matches_cpu():
    def fn(x, index):
        x = x.detach().requires_grad_()
        y = x.index_fill(1, index, 2.0)
        (y * torch.arange(1.0, 1.0 + y.numel(), device=y.device).reshape(y.shape)).sum().backward()
        return x.grad

    check(fn, torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), torch.tensor([3, 0, 3]))


# ---- antialiased resize of uint8 images ----


def image(*shape, seed=0, low=0, high=256):
    return torch.randint(low, high, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
@pytest.mark.parametrize("size", [(5, 7), (16, 9), (3, 10), (12, 20), (1, 3), (2, 1), (8, 4)], ids=str)
def test_antialiased_resize_of_uint8_images_matches_cpu(mode, size):
    x = image(2, 3, 8, 10)
    check(lambda t: F.interpolate(t, size=size, mode=mode, antialias=True), x)
    check(lambda t: F.interpolate(t, size=size, mode=mode, antialias=True, align_corners=True), x)


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
def test_antialiased_resize_of_uint8_images_in_every_layout_matches_cpu(mode):
    x = image(1, 6, 9, 11, seed=1)  # more than 4 channels: the CPU's generic loops
    check(lambda t: F.interpolate(t, size=(4, 5), mode=mode, antialias=True), x)
    check(lambda t: F.interpolate(t, scale_factor=0.37, mode=mode, antialias=True), x)
    check(
        lambda t: F.interpolate(t, size=(4, 5), mode=mode, antialias=True),
        x.contiguous(memory_format=torch.channels_last),
    )
    check(lambda t: F.interpolate(t, size=(4, 11), mode=mode, antialias=True), x.transpose(2, 3))
    check(lambda t: F.interpolate(t, size=(9, 11), mode=mode, antialias=True), x)  # same size: a copy


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
def test_antialiased_resize_of_saturated_uint8_images_clamps_like_cpu(mode):
    x = image(1, 3, 12, 12, seed=2, low=0, high=2) * 255  # black and white: bicubic overshoots both ways
    check(lambda t: F.interpolate(t, size=(5, 17), mode=mode, antialias=True), x)
    check(
        lambda t: F.interpolate(t, size=(30, 7), mode=mode, antialias=True),
        torch.full((1, 1, 12, 12), 255, dtype=torch.uint8),
    )


def test_a_tiny_result_stays_on_tiny():
    r = torch.repeat_interleave(torch.tensor([2, 1], device=DEVICE))
    assert r.device.type == DEVICE


# ---- bincount ----


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
def test_bincount_counts_and_sums_weights_as_the_cpu(native, dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 9, (50,), generator=g).to(dtype)
    check(torch.bincount, x)
    check(lambda t: torch.bincount(t, minlength=20), x)
    for wdtype in (torch.float32, torch.float64, torch.int32):
        check(lambda t, w: torch.bincount(t, w), x, (torch.randn(50, generator=g) * 4).to(wdtype))
    check(lambda t: torch.bincount(t, minlength=3), torch.tensor([], dtype=dtype))


def test_bincount_refuses_what_the_cpu_refuses(native):
    x = torch.tensor([1, 2])
    check(torch.bincount, torch.tensor([-1, 2]))
    check(lambda t, w: torch.bincount(t, w), x, torch.ones(3))
    check(lambda t: torch.bincount(t, minlength=-1), x)
    check(torch.bincount, torch.ones(2, 2, dtype=torch.long))
    check(torch.bincount, torch.ones(2))
