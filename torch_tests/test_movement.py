"""Movement ops that make new tensors (cat, stack, pads, flip, roll, repeat, tril/triu, clone,
masked_fill), against CPU torch: values, dtype, shape, strides, errors; and the kernel counts that
show each folds into the index math of the kernel that consumes it.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import ALL_DTYPES, DEVICE, FLOAT_DTYPES, check, check_devices, counting, dtype_name, recorded_warnings


def sample(shape, dtype=torch.float32, *, seed=0):
    """Distinct values of dtype (wrapping is fine: only movement happens)."""
    n = 1
    for s in shape:
        n *= s
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randperm(max(n, 1), generator=g)[:n].reshape(shape).to(dtype)


def transposed(shape, dtype=torch.float32):
    """A non-contiguous tensor of shape (the transpose of a contiguous one)."""
    return sample(shape[::-1], dtype).t() if len(shape) == 2 else sample(shape[::-1], dtype).permute(2, 1, 0)


# ---------------------------------------------------------------------------------------------
# cat, stack and what torch builds from them


def test_cat_of_every_dtype_along_each_dim():
    for dtype in ALL_DTYPES:
        check(lambda x, y: torch.cat([x, y], -1), sample((2, 3), dtype), sample((2, 3), dtype, seed=1))
    check(lambda x, y: (torch.cat([x, y]), torch.cat([x, y], 1)), sample((2, 3)), sample((2, 3), seed=1))


@pytest.mark.parametrize("channels", [24, 7])
def test_concatenated_parts_of_computed_values_and_their_gradients_match_cpu(channels):
    # a kernel reads a computed value through a concatenation's mask (its index narrowed to where the mask holds,
    # unflatten_given): ShuffleNet's channel shuffle of a concatenation, a flipped and a cropped part beside it
    def program(dev):
        g = torch.Generator().manual_seed(0)
        x, y = (torch.randn(3, 2 * channels, 5, 6, generator=g).to(dev).requires_grad_() for _ in range(2))
        z = torch.randn(3, channels, 5, 6, generator=g).to(dev)
        s = (x * y).view(3, 2, channels, 5, 6).transpose(1, 2).reshape(3, 2 * channels, 5, 6)
        parts = [
            torch.cat([s[:, channels:], z], 1),
            torch.cat([z, (x + 1).flip(1)[:, 1 : channels + 1]], 1),
            torch.cat([F.pad(x.relu(), (-1, 2, 0, -2)), y[:, :, :3] * 2], 3),
        ]
        out = sum(p.sum() * (i + 1) + (p * p).mean() for i, p in enumerate(parts))
        return parts, torch.autograd.grad(out, (x, y))

    check_devices(program)


def test_cat_promotes_mixed_dtypes():
    check(
        lambda x, y, z: torch.cat([x, y, z]),
        sample((1, 3), torch.int32),
        sample((2, 3), torch.float16),
        sample((1, 3), torch.bool),
    )


def test_cat_of_non_contiguous_and_unequal_inputs():
    check(lambda x, y: torch.cat([x, y], 1), transposed((3, 2)), sample((3, 4)))
    check(lambda x, y: torch.cat([x, x, y], 0), sample((2, 4))[:, ::2], transposed((1, 2)))


def test_cat_skips_legacy_empty_and_keeps_zero_size():
    check(lambda x, y: torch.cat([x, y]), sample((0,)), sample((2, 3)))
    check(lambda x, y: torch.cat([x, y], 1), sample((2, 0)), sample((2, 3)))
    check(lambda x, y: torch.cat([x, y]), sample((0, 3)), sample((0, 3)))
    check(lambda x: torch.cat([x]), sample((1,)))


def test_cat_out_resizes_with_torchs_warning_and_checks_dtype():
    def cat_into(x, y, out):
        _, warned = recorded_warnings(lambda: torch.cat([x, y], out=out))
        return out, len(warned)

    check(cat_into, sample((2, 3)), sample((1, 3)), torch.empty(3, 3))
    check(cat_into, sample((2, 3)), sample((1, 3)), torch.empty(2, 2))
    check(cat_into, sample((2, 3)), sample((1, 3)), torch.empty(0))
    check(
        lambda x, y, out: torch.cat([x, y], out=out),
        sample((2, 3)),
        sample((1, 3)),
        torch.empty(3, 3, dtype=torch.int64),
    )


def test_cat_errors_match_torch():
    check(lambda x, y: torch.cat([x, y]), sample((2, 3)), sample((2, 4)))
    check(lambda x, y: torch.cat([x, y], 2), sample((2, 3)), sample((2, 3)))
    check(lambda x: torch.cat([x, x]), torch.tensor(1.0))
    check(lambda: torch.cat([], 0))
    check(lambda x: torch.cat([x[:2], x[2:]], out=x), sample((4, 3)))


def test_stack_hstack_vstack_and_split():
    for dtype in (torch.float32, torch.int64, torch.bool):
        check(lambda x, y: torch.stack([x, y], 1), sample((2, 3), dtype), sample((2, 3), dtype, seed=1))
    a, b = sample((2, 3)), sample((2, 3), seed=1)
    check(
        lambda x, y: (torch.stack([x, y], -1), torch.hstack([x, y]), torch.vstack([x, y]), torch.dstack([x, y])), a, b
    )
    check(lambda x: torch.cat(torch.split(x, [1, 3], 1)[::-1], 1), sample((2, 4)))
    check(lambda x: torch.cat(x.chunk(3)[::-1]), sample((5, 2)))
    check(lambda x, y: torch.stack([x, y]), sample((2, 3)), sample((3, 2)))


# ---------------------------------------------------------------------------------------------
# Padding


def test_constant_pad_of_every_dtype():
    for dtype in ALL_DTYPES:
        value = True if dtype is torch.bool else 3
        check(lambda x, v=value: F.pad(x, (1, 2, 0, 1), value=v), sample((2, 3), dtype))


def test_constant_pad_negative_mixed_and_zero_value():
    x = sample((2, 3, 4))
    check(lambda t: F.pad(t, (1, 1)), x)
    check(lambda t: F.pad(t, (-1, 2, 1, -1), value=-1.5), x)
    check(lambda t: F.pad(t, (-1, -1, 0, -1)), x)
    check(lambda t: F.pad(t, (1, 1, 1, 1, 1, 1), value=float("-inf")), x)
    check(lambda t: F.pad(t, (0, 0, 2, 0), value=-0.0), x)
    check(lambda t: F.pad(t, (2, 1)), transposed((3, 2)))
    check(lambda t: F.pad(t, (1, 1, 1, 1)), sample((2, 3, 4, 5)).to(memory_format=torch.channels_last))
    check(lambda t: F.pad(t, (1, 1)), sample((2, 0)))


def test_constant_pad_errors_match_torch():
    x = sample((2, 3))
    check(lambda t: F.pad(t, (1, 1, 1)), x)
    check(lambda t: torch.constant_pad_nd(t, (1, 1, 1, 1, 1, 1)), x)
    check(lambda t: F.pad(t, (-2, -2)), x)
    check(lambda t: F.pad(t, (1, 1), value=300), sample((2, 3), torch.int8))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_reflection_and_replication_pads(mode):
    cases = [
        ((2, 3, 5), (0, 3) if mode == "replicate" else (0, 2)),
        ((2, 5), (-1, 2)),
        ((2, 3, 4, 5), (2, 0, 1, 3)),
        ((2, 3, 4, 5), (-1, 1, 1, -2)),
        ((2, 3, 3, 4), (1, 1, 2, 1, 1, 2)),
        ((1, 2, 3, 3, 4), (1, 1, 0, 2, 2, 0)),
    ]
    for shape, pad in cases:
        check(lambda t, p=pad: F.pad(t, p, mode=mode), sample(shape))
    check(lambda t: F.pad(t, (1, 2), mode=mode), sample((3, 4), torch.float64))
    check(lambda t: F.pad(t, (1, 2, 2, 1), mode=mode), sample((2, 3, 4, 5)).to(memory_format=torch.channels_last))
    check(
        lambda t: F.pad(t, (1, 1, 1, 1, 1, 1), mode=mode),
        sample((1, 2, 3, 3, 4)).to(memory_format=torch.channels_last_3d),
    )
    check(lambda t: F.pad(t, (2, 1), mode=mode), sample((0, 3, 4)))
    check(lambda t: F.pad(t, (1, 2), mode=mode), transposed((3, 4)))


def test_reflection_and_replication_pads_of_half_and_ints():
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.uint8):
        check(lambda t: F.pad(t, (1, 2), mode="reflect"), sample((2, 4), dtype))
        check(lambda t: F.pad(t, (1, 2, 1, 0), mode="replicate"), sample((2, 3, 4), dtype))


def test_pad_errors_match_torch():
    check(lambda t: F.pad(t, (3, 1), mode="reflect"), sample((2, 3)))
    check(lambda t: F.pad(t, (1, 1, 3, 0), mode="reflect"), sample((2, 3, 3)))
    check(lambda t: F.pad(t, (1, 1, 0, 3, 0, 0), mode="reflect"), sample((1, 2, 3, 3)))
    check(lambda t: torch.ops.aten.reflection_pad1d(t, (1, 1)), sample((2, 0)))
    check(lambda t: torch.ops.aten.replication_pad2d(t, (1, 1)), sample((2, 3, 3)))
    check(lambda t: torch.ops.aten.reflection_pad2d(t, (1, 1, 1, 1)), sample((3,)))
    check(lambda t: torch.ops.aten.replication_pad1d(t, (-3, -3)), sample((2, 4)))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_reflection_and_replication_pad_gradients(mode):
    cases = [
        ((2, 3, 5), (-1, 2)),
        ((1, 2, 4, 5), (2, 1, 0, 3)),
        ((1, 2, 3, 4, 5), (1, 2, 2, 1, 1, 1)),
        ((2, 3, 4, 5), (1, -1, -2, 2)),
    ]
    for shape, pad in cases:

        def run(dev, shape=shape, pad=pad):
            x = sample(shape, torch.float64).to(dev).requires_grad_()
            y = F.pad(x, pad, mode=mode)
            y.backward(sample(tuple(y.shape), torch.float64, seed=3).to(dev))
            return y.detach(), x.grad

        check_devices(run)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=dtype_name)
def test_unfold_gradient_sums_overlapping_windows(dtype):
    # (input shape, dim, size, step): overlapping, spread out, a negative dim, a 0-dim input
    cases = [((7,), 0, 3, 1), ((2, 9, 3), 1, 3, 2), ((4, 5), -1, 2, 3), ((3, 4), 0, 3, 1), ((6,), 0, 1, 4)]
    cases.append(((), 0, 1, 1))
    for shape, dim, size, step in cases:

        def run(dev, shape=shape, dim=dim, size=size, step=step):
            x = sample(shape, dtype).to(dev).requires_grad_()
            y = x.unfold(dim, size, step)
            y.backward(sample(tuple(y.shape), dtype, seed=3).to(dev))
            return x.grad

        check_devices(run)
    check(lambda g: torch.ops.aten.unfold_backward(g, [2, 9], 1, 4, 2), sample((2, 3, 4)))


# ---------------------------------------------------------------------------------------------
# flip, roll, repeat


def test_flip_of_every_dtype_and_layout():
    for dtype in ALL_DTYPES:
        check(lambda t: torch.flip(t, [0, -1]), sample((2, 3, 4), dtype))
    check(lambda t: torch.flip(t, [1]), transposed((3, 4, 2)))
    check(lambda t: (t.fliplr(), t.flipud(), t.rot90(1, [0, 1])), sample((3, 4)))
    check(lambda t: torch.flip(t, []), sample((2, 3)))
    check(lambda t: torch.flip(t, [0]), sample((0, 3)))
    check(lambda t: torch.flip(t, [0]), sample((1,)))


def test_flip_errors_match_torch():
    check(lambda t: torch.flip(t, [0, 0]), sample((2, 3)))
    check(lambda t: torch.flip(t, [0, -2]), sample((2, 3)))
    check(lambda t: torch.flip(t, [2]), sample((2, 3)))


def test_roll_of_dims_shifts_and_flattened():
    x = sample((3, 4, 5))
    check(lambda t: torch.roll(t, 1, 0), x)
    check(lambda t: torch.roll(t, -7, 2), x)
    check(lambda t: torch.roll(t, (2, -1), (1, 2)), x)
    check(lambda t: torch.roll(t, (1, 1), (0, 0)), x)
    check(lambda t: torch.roll(t, 7), x)
    check(lambda t: torch.roll(t, 2), transposed((3, 4)))
    check(lambda t: torch.roll(t, 1, 1), transposed((3, 4)))
    check(lambda t: torch.roll(t, 1, 1), sample((2, 3, 4, 5)).to(memory_format=torch.channels_last))
    check(lambda t: torch.roll(t, 1, 0), sample((0, 3)))
    for dtype in ALL_DTYPES:
        check(lambda t: torch.roll(t, (1, 2), (0, 1)), sample((2, 3), dtype))


def test_roll_errors_match_torch():
    check(lambda t: torch.roll(t, (1, 2), (0,)), sample((2, 3)))
    check(lambda t: torch.roll(t, 1, 2), sample((2, 3)))
    check(lambda t: torch.roll(t, (), ()), sample((2, 3)))


def test_repeat_and_tile():
    for dtype in (torch.float32, torch.int16, torch.bool):
        check(lambda t: t.repeat(2, 1, 3), sample((2, 3), dtype))
    check(lambda t: t.repeat(1, 2), transposed((3, 2)))
    check(lambda t: t.repeat(2, 0), sample((2, 3)))
    check(lambda t: t.repeat(3), torch.tensor(5.0))
    check(lambda t: t.tile(2, 2), sample((2, 3)))
    check(lambda t: t.repeat(2), sample((2, 3)))
    check(lambda t: t.repeat(2, -1), sample((2, 3)))


# ---------------------------------------------------------------------------------------------
# tril, triu


def test_tril_and_triu_of_every_dtype_and_diagonal():
    for dtype in ALL_DTYPES:
        check(lambda t: torch.tril(t, 1), sample((3, 4), dtype))
    x = sample((3, 4))
    for k in (-5, -1, 0, 2, 9):
        check(lambda t, k=k: (torch.tril(t, k), torch.triu(t, k)), x)
    check(lambda t: (t.tril(), t.triu(-1)), transposed((2, 3, 4)))
    check(lambda t: (t.tril(), t.triu()), sample((2, 0, 3)))


def test_tril_and_triu_in_place_and_out():
    def in_place(t):
        t.tril_(1)
        t[0].triu_()
        return t

    check(in_place, sample((2, 3, 3)))
    check(lambda t, out: torch.triu(t, out=out), sample((3, 3)), torch.empty(3, 3))
    check(lambda t, out: torch.tril(t, out=out), sample((3, 3)), torch.empty(0))
    check(lambda t: torch.tril(t), sample((3,)))


# ---------------------------------------------------------------------------------------------
# clone, contiguous, masked_fill


def test_clone_and_contiguous_of_views():
    for dtype in (torch.float16, torch.int64, torch.bool):
        check(lambda t: t.t().contiguous(), sample((3, 4), dtype))
    check(lambda t: (t.clone(), t.clone(memory_format=torch.contiguous_format)), transposed((2, 3, 4)))
    check(lambda t: t[:, 1::2].contiguous(), sample((3, 5)))
    check(lambda t: t.expand(3, 4).contiguous(), sample((1, 4)))
    check(lambda t: t.contiguous(memory_format=torch.channels_last), sample((2, 3, 4, 5)))


def test_masked_fill_with_scalars_and_tensors():
    for dtype in ALL_DTYPES:
        x, mask = sample((3, 4), dtype), sample((3, 4), torch.bool, seed=2)
        value = False if dtype is torch.bool else 7
        check(lambda t, m, v=value: t.masked_fill(m, v), x, mask)
    x = sample((3, 4))
    check(lambda t, m: t.masked_fill(m, float("nan")), x, sample((4,), torch.bool))
    check(lambda t, m, v: t.masked_fill(m, v), x, sample((3, 1), torch.bool), torch.tensor(2.5))
    check(lambda t, m: t.masked_fill(m, torch.tensor(-1)), transposed((4, 3)), sample((4, 3), torch.bool))

    def on_view(t, m):
        t[1:].masked_fill_(m, 0.0)
        return t

    check(on_view, x, sample((2, 4), torch.bool))

    def tiny_value(dev):
        t = sample((3, 4)).to(dev)
        return t.masked_fill(t > 0, t[0, 0] * 0 + 4.0)

    check_devices(tiny_value)


def test_masked_fill_errors_match_torch():
    x = sample((3, 4))
    check(lambda t, m: t.masked_fill(m, 1.0), x, sample((3, 4), torch.int64))
    check(lambda t, m: t.masked_fill(m, torch.ones(2)), x, sample((3, 4), torch.bool))
    check(lambda t, m: t.masked_fill_(m, 1.0), sample((4,)), sample((3, 4), torch.bool))
    check(lambda t, m: t.masked_fill(m, 1000), sample((3, 4), torch.int8), sample((3, 4), torch.bool))


def with_special_values(shape, dtype):
    """sample() with a quiet and a signaling NaN, -0.0, infinities and a subnormal among the values."""
    x = sample(shape, dtype)
    flat = x.view(-1)
    flat[:6] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 0.0, 1e-40]).to(dtype)
    if dtype is torch.float32:
        flat.view(torch.int32)[6] = 0x7F800001
    else:
        flat.view(torch.int16)[6] = 0x7C01 if dtype is torch.float16 else 0x7F81
    return x


def into_a_slice(x):
    out = torch.zeros(3, *x.t().shape, dtype=x.dtype, device=x.device)
    out[1].copy_(x.t())
    return out


# A permuted tensor made contiguous is a copy whose read and write walk different dims innermost; on AVX-512 the
# CPU device copies float32 and bfloat16 blocks of 16 x 8 transposed in registers (compiler/lower.cpp,
# lower_transposed_copy), other shapes and dtypes element by element.
TRANSPOSING_COPIES = {
    "t": (lambda x: x.t().contiguous(), (48, 256)),
    "t of odd sizes": (lambda x: x.t().contiguous(), (37, 45)),
    "t into a slice": (into_a_slice, (48, 256)),
    "channels last": (lambda x: x.permute(0, 2, 3, 1).contiguous(), (2, 32, 4, 8)),
    "padded channels last": (lambda x: F.pad(x, (1, 1, 1, 1)).permute(0, 2, 3, 1).contiguous(), (2, 16, 14, 14)),
    "padded channels last, 28": (lambda x: F.pad(x, (1, 1, 1, 1)).permute(0, 2, 3, 1).contiguous(), (2, 8, 28, 28)),
    "3-d permute": (lambda x: x.permute(2, 0, 1).contiguous(), (64, 16, 24)),
    # positions that do not fill whole vectors (196, 25, 20): the last vector overlaps the one before
    "channels last, 14": (lambda x: x.permute(0, 2, 3, 1).contiguous(), (2, 16, 14, 14)),
    "channels last, 5": (lambda x: x.permute(0, 2, 3, 1).contiguous(), (3, 8, 5, 5)),
    "paired panel": (lambda x: x.reshape(2, 2, 2, 2, 32, 20).permute(0, 3, 5, 1, 4, 2).contiguous(), (8, 64, 20)),
    # rows shorter than the lanes (9 taps, 9 padded positions): masked lanes
    "3 x 3 weight panels": (lambda x: x.reshape(2, 32, 24, 3, 3).permute(0, 3, 4, 2, 1).contiguous(), (64, 24, 3, 3)),
    "padded channels last, 7": (lambda x: F.pad(x, (1, 1, 1, 1)).permute(0, 2, 3, 1).contiguous(), (2, 16, 7, 7)),
    # a bfloat16 x @ w.t()'s panels of w: 32 rows of pairs (2 elements 4 bytes apart in the read) a panel
    "panels of pairs": (lambda x: x.reshape(3, 32, 24, 2).permute(0, 2, 1, 3).contiguous(), (96, 48)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=dtype_name)
@pytest.mark.parametrize("case", TRANSPOSING_COPIES)
def test_a_permuted_tensor_made_contiguous_has_the_cpus_bits(case, dtype):
    fn, shape = TRANSPOSING_COPIES[case]
    x = with_special_values(shape, dtype)
    want, got = fn(x), fn(x.to(DEVICE)).cpu()
    assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
    ints = torch.int32 if dtype is torch.float32 else torch.int16
    assert torch.equal(got.view(ints), want.view(ints))


# ---------------------------------------------------------------------------------------------
# Folding: no copy kernel where none is needed


def kernels_of(fn, *inputs):
    """Kernels launched by fn on already realized tiny copies of inputs, up to .cpu()."""
    xs = [t.to("tiny") for t in inputs]
    with counting() as c:
        fn(*xs).cpu()
    return c["kernels"]


def test_cat_folds_into_its_consumer():
    assert kernels_of(lambda x, y: torch.cat([x, y]) * 3, sample((4, 5)), sample((2, 5))) == 1


def test_contiguous_of_a_transpose_folds_into_its_consumer():
    assert kernels_of(lambda x: x.t().contiguous() + 1, sample((4, 5))) == 1


def test_flip_folds_into_its_consumer():
    assert kernels_of(lambda x: torch.flip(x, [0]) + 1, sample((4, 5))) == 1


@pytest.mark.parametrize(
    "name,fn",
    [
        ("stack", lambda x: torch.stack([x, x * 2], 1) - 1),
        ("constant_pad", lambda x: F.pad(x, (1, 2, 0, 1), value=5.0) * 2),
        ("reflection_pad", lambda x: F.pad(x[None], (2, 2, 1, 1), mode="reflect") * 2),
        ("replication_pad", lambda x: F.pad(x[None], (2, 2, 1, 1), mode="replicate") * 2),
        ("roll", lambda x: torch.roll(x, (1, 2), (0, 1)) * 2),
        ("repeat", lambda x: x.repeat(2, 3) * 2),
        ("tril", lambda x: torch.tril(x, 1) * 2),
        ("masked_fill", lambda x: x.masked_fill(x > 0, 0.5) * 2),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_movement_folds_into_one_kernel(name, fn):
    assert kernels_of(fn, sample((4, 5))) == 1, name


def test_every_float_dtype_cat_and_pad_values():
    for dtype in FLOAT_DTYPES:
        specials = torch.tensor([[float("nan"), float("inf")], [-0.0, -float("inf")]], dtype=dtype)
        check(lambda t: (torch.cat([t, -t]), F.pad(t, (1, 1), value=-0.0), torch.flip(t, [1])), specials)
    assert dtype_name(torch.float16) == "float16"


def test_movement_gradients_through_autograd():
    def run(dev):
        x = sample((3, 4), torch.float64).to(dev).requires_grad_()
        y = sample((2, 4), torch.float64, seed=1).to(dev).requires_grad_()
        parts = [
            torch.cat([x, y]) * 2,
            torch.stack([x, x * 3]).flip(0, 2),
            torch.roll(x, (1, -1), (0, 1)) * torch.tril(x, -1),
            x.repeat(2, 1),
            F.pad(x, (1, -1, 2, 0), value=3.0),
            x.masked_fill(x > 0, 0.5),
        ]
        total = sum((p * (i + 1)).sum() for i, p in enumerate(parts))
        total.backward()
        return total.detach(), x.grad, y.grad

    check_devices(run)
