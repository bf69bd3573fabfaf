"""Moving data in and out of tiny, casting, reading scalars and lists, printing."""

import pytest
import torch
from conftest import (
    ALL_DTYPES,
    DEVICE,
    FLOAT_DTYPES,
    assert_same,
    by_dtype,
    check,
    check_devices,
    dtype_name,
)


def sample(dtype, *, for_dtype=None):
    """A (2, 3) CPU tensor with values every dtype conversion defines (no float -> uint8 negatives)."""
    if dtype is torch.bool:
        data = [[True, False, True], [False, True, True]]
    elif dtype is torch.uint8:
        data = [[0, 1, 7], [100, 200, 255]]
    elif dtype.is_floating_point:
        data = [[-2.75, -0.5, 0.0], [1.0048828125, 2.5, 100.0]]
        if for_dtype is torch.uint8:
            data = [[0.75, 0.5, 0.0], [1.0048828125, 2.5, 100.0]]
    else:
        data = [[-3, -1, 0], [1, 7, 100]]
    return torch.tensor(data, dtype=dtype)


def special_floats(dtype):
    """Values where casts must follow IEEE: nan, infinities, signed zero, overflow, and rounding
    halfway points of float16 (1 + 2**-11 + 2**-13) and bfloat16 (1 + 2**-8 + 2**-10)."""
    data = [
        float("nan"),
        float("inf"),
        float("-inf"),
        -0.0,
        1e5,
        1.0006103515625,
        1.0048828125,
        -3.5,
    ]
    return torch.tensor(data, dtype=dtype)


EXACT = {"rtol": 0, "atol": 0}
PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES]
PAIR_IDS = [f"{dtype_name(s)}-to-{dtype_name(d)}" for s, d in PAIRS]
by_pair = pytest.mark.parametrize(("src", "dst"), PAIRS, ids=PAIR_IDS)


def assert_cpu_tensor_same(actual, expected, path="result"):
    """A tensor that came back to the CPU matches the CPU-only computation."""
    assert actual.device.type == "cpu", f"{path}: on {actual.device}"
    assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} vs {expected.dtype}"
    assert actual.shape == expected.shape, f"{path}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
    assert actual.stride() == expected.stride(), f"{path}: strides {actual.stride()} vs {expected.stride()}"
    torch.testing.assert_close(actual, expected, equal_nan=True, rtol=0, atol=0)


@by_dtype()
def test_to_tiny_and_back_round_trips_every_dtype(dtype):
    cpu = sample(dtype)
    tiny = cpu.to(DEVICE)
    assert_same(tiny, cpu.clone(), **EXACT)
    assert_cpu_tensor_same(tiny.cpu(), cpu)
    assert_cpu_tensor_same(tiny.to("cpu"), cpu)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.t(),
        lambda t: t[:, ::2],
        lambda t: t[1:],
        lambda t: t[:, 1:2].expand(2, 4),
        lambda t: t.unsqueeze(1),
    ],
    ids=["transposed", "strided", "offset", "expanded", "unsqueezed"],
)
@by_dtype((torch.float32, torch.int16, torch.bool))
def test_noncontiguous_tensors_cross_devices_with_torchs_layout(view, dtype):
    cpu = sample(dtype)
    # CPU -> tiny: same layout as a CPU clone (preserve_format)
    assert_same(view(cpu).to(DEVICE), view(cpu).clone(), **EXACT)
    # tiny -> CPU
    tiny_view = view(cpu.to(DEVICE))
    assert_cpu_tensor_same(tiny_view.cpu(), view(cpu).clone())


@by_pair
def test_to_dtype_on_tiny_casts_like_cpu(src, dst):
    check(lambda t: t.to(dst), sample(src, for_dtype=dst), **EXACT)


@pytest.mark.parametrize(
    ("src", "dst"),
    [(s, d) for s in FLOAT_DTYPES for d in FLOAT_DTYPES + (torch.bool,) if s is not d],
    ids=lambda d: dtype_name(d),
)
def test_float_casts_keep_ieee_special_values_and_round_to_nearest_even(src, dst):
    check(lambda t: t.to(dst), special_floats(src), **EXACT)


@by_pair
def test_copy_from_cpu_into_tiny_converts_dtype(src, dst):
    source = sample(src, for_dtype=dst)
    check_devices(lambda dev: torch.zeros(2, 3, dtype=dst, device=dev).copy_(source), **EXACT)


@by_pair
def test_copy_from_tiny_into_cpu_converts_dtype(src, dst):
    source = sample(src, for_dtype=dst)
    dst_cpu = torch.zeros(2, 3, dtype=dst)
    returned = dst_cpu.copy_(source.to(DEVICE))
    assert returned is dst_cpu
    assert_cpu_tensor_same(dst_cpu, torch.zeros(2, 3, dtype=dst).copy_(source))


@by_pair
def test_copy_between_tiny_tensors_converts_dtype(src, dst):
    check(
        lambda d, s: d.copy_(s),
        torch.zeros(2, 3, dtype=dst),
        sample(src, for_dtype=dst),
        **EXACT,
    )


def test_copy_broadcasts_the_source():
    check(lambda d, s: d.copy_(s), torch.zeros(4, 3), torch.tensor([1.5, -2.0, 3.0]))
    check_devices(lambda dev: torch.zeros(2, 3, device=dev).copy_(torch.tensor([7, 8, 9])))


def test_copy_into_a_noncontiguous_tiny_view_from_cpu():
    def fn(dev):
        base = torch.zeros(3, 4, device=dev)
        base.t()[1:3].copy_(torch.arange(6.0).reshape(2, 3))
        return base

    check_devices(fn)


def test_copy_from_a_noncontiguous_tiny_view_into_a_cpu_view():
    src_cpu = torch.arange(12.0).reshape(3, 4)
    dst_tiny_src = torch.zeros(4, 3)
    dst_cpu_src = torch.zeros(4, 3)
    dst_tiny_src[::2].copy_(src_cpu.to(DEVICE).t()[1::2])
    dst_cpu_src[::2].copy_(src_cpu.t()[1::2])
    assert_cpu_tensor_same(dst_tiny_src, dst_cpu_src)


@by_dtype()
def test_item_returns_the_same_python_scalar(dtype):
    cpu = sample(dtype)
    tiny = cpu.to(DEVICE)
    for index in ((0, 0), (1, 2), (0, 1)):
        assert_same(tiny[index].item(), cpu[index].item(), path=f"item{index}")
    assert_same(
        torch.tensor(cpu[1, 1].item(), dtype=dtype, device=DEVICE).item(),
        cpu[1, 1].item(),
    )


@by_dtype()
def test_tolist_returns_the_same_nested_lists(dtype):
    cpu = sample(dtype)
    tiny = cpu.to(DEVICE)
    assert_same(tiny.tolist(), cpu.tolist())
    assert_same(tiny.t().tolist(), cpu.t().tolist())
    assert_same(tiny[1, 2].tolist(), cpu[1, 2].tolist())


def test_item_and_tolist_of_special_floats():
    cpu = special_floats(torch.float32)
    tiny = cpu.to(DEVICE)
    assert_same(tiny.tolist(), cpu.tolist())
    assert_same(tiny[0].item(), cpu[0].item())
    assert_same(tiny[2].item(), cpu[2].item())


def same_text_as_cpu(tiny_text, cpu_text):
    """Printed text equal but for the device suffix (which can move line breaks)."""
    assert "device='tiny:0'" in tiny_text

    def squeeze(text):
        return "".join(text.split()).replace(",device='tiny:0'", "")

    assert squeeze(tiny_text) == squeeze(cpu_text), f"tiny:\n{tiny_text}\ncpu:\n{cpu_text}"


@by_dtype()
def test_print_shows_what_cpu_shows(dtype, capsys):
    cpu = sample(dtype)
    tiny = cpu.to(DEVICE)
    same_text_as_cpu(repr(tiny), repr(cpu))
    same_text_as_cpu(str(tiny.t()), str(cpu.t()))
    same_text_as_cpu(repr(tiny[0, 1]), repr(cpu[0, 1]))
    print(tiny)
    same_text_as_cpu(capsys.readouterr().out, str(cpu))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_print_of_special_and_large_values_matches_cpu(dtype):
    cpu = special_floats(dtype)
    same_text_as_cpu(repr(cpu.to(DEVICE)), repr(cpu))
    big = torch.linspace(-1000, 1000, 2000, dtype=dtype)  # summarized with "..."
    same_text_as_cpu(repr(big.to(DEVICE)), repr(big))
    same_text_as_cpu(repr((big.to(DEVICE) * 2)[::3]), repr((big * 2)[::3]))


def test_print_of_empty_tensors_matches_cpu():
    for cpu in (
        torch.zeros(0),
        torch.zeros(0, 3, dtype=torch.int8),
        torch.zeros(2, 0, dtype=torch.bool),
    ):
        same_text_as_cpu(repr(cpu.to(DEVICE)), repr(cpu))
