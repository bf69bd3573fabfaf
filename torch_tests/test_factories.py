"""Factories on tiny give what the same factory gives on the CPU."""

import pytest
import torch
from conftest import (
    ALL_DTYPES,
    DEVICE,
    FLOAT_DTYPES,
    by_dtype,
    check_devices,
    dtype_name,
)

NUMERIC_DTYPES = tuple(d for d in ALL_DTYPES if d is not torch.bool)
SIGNED_DTYPES = tuple(d for d in NUMERIC_DTYPES if d is not torch.uint8)


def fill_value(dtype):
    if dtype.is_floating_point:
        return -1.25
    if dtype is torch.bool:
        return True
    return 200 if dtype is torch.uint8 else -7


def sample_data(dtype):
    """A nested Python list with negatives where the dtype has them."""
    if dtype is torch.bool:
        return [[True, False, True], [False, False, True]]
    if dtype is torch.uint8:
        return [[0, 1, 2], [7, 200, 255]]
    if dtype.is_floating_point:
        return [[-2.5, 0.0, 1.5], [3.0, -1.0, 100.0]]
    return [[-3, 0, 1], [7, -1, 100]]


def layout(t):
    """What an uninitialized tensor promises: everything but its values."""
    return (
        t.device.type,
        t.dtype,
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        t.is_contiguous(),
    )


def assert_layout_like_cpu(make):
    tiny = make(DEVICE)
    cpu = make("cpu")
    assert tiny.device.type == DEVICE
    assert layout(tiny)[1:] == layout(cpu)[1:]


@by_dtype()
def test_empty_has_the_requested_shape_and_dtype(dtype):
    assert_layout_like_cpu(lambda dev: torch.empty(2, 3, dtype=dtype, device=dev))
    assert_layout_like_cpu(lambda dev: torch.empty(0, 4, dtype=dtype, device=dev))


def test_empty_strided_honors_the_strides():
    assert_layout_like_cpu(lambda dev: torch.empty_strided((2, 3), (1, 2), device=dev))
    assert_layout_like_cpu(lambda dev: torch.empty_strided((2, 3, 4), (1, 8, 2), dtype=torch.int16, device=dev))
    assert_layout_like_cpu(lambda dev: torch.empty_strided((3, 2), (0, 1), device=dev))


def test_values_written_into_empty_strided_read_back_in_order():
    def fn(dev):
        t = torch.empty_strided((2, 3), (1, 2), device=dev)
        t.copy_(torch.arange(6.0).reshape(2, 3))
        return t

    check_devices(fn)


@by_dtype()
def test_zeros_ones_and_full_match_cpu(dtype):
    check_devices(lambda dev: torch.zeros(2, 3, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.ones(4, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.full((2, 2), fill_value(dtype), dtype=dtype, device=dev))
    check_devices(lambda dev: torch.zeros((), dtype=dtype, device=dev))


def test_full_infers_the_dtype_from_the_fill_value():
    for value in (7, -1.5, True):
        check_devices(lambda dev, value=value: torch.full((3,), value, device=dev))


@by_dtype(NUMERIC_DTYPES)
def test_arange_matches_cpu(dtype):
    check_devices(lambda dev: torch.arange(10, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.arange(1, 11, 3, dtype=dtype, device=dev))
    if dtype in SIGNED_DTYPES:
        check_devices(lambda dev: torch.arange(-3, 7, 2, dtype=dtype, device=dev))
        check_devices(lambda dev: torch.arange(9, -4, -3, dtype=dtype, device=dev))


def test_arange_with_fractional_steps_has_torchs_length_and_values():
    check_devices(lambda dev: torch.arange(0, 1, 0.1, device=dev))
    check_devices(lambda dev: torch.arange(-1.5, 2.25, 0.25, device=dev))
    check_devices(lambda dev: torch.arange(0, 1, 0.1, dtype=torch.float64, device=dev))
    check_devices(lambda dev: torch.arange(5, device=dev))  # int64 by default


@by_dtype(NUMERIC_DTYPES)
def test_linspace_matches_cpu(dtype):
    start = 0 if dtype is torch.uint8 else -3
    check_devices(lambda dev: torch.linspace(start, 9, 7, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.linspace(start, 9, 1, dtype=dtype, device=dev))


def test_linspace_with_many_points_matches_cpu():
    check_devices(lambda dev: torch.linspace(-1.0, 1.0, 101, device=dev))
    check_devices(lambda dev: torch.linspace(2.0, -2.0, 50, dtype=torch.float64, device=dev))


@by_dtype()
def test_logspace_matches_cpu(dtype):
    # bool takes zero or one step (torch's NotImplementedError for more); integers truncate base ** x
    start = 0 if dtype is torch.uint8 else -1.5
    for steps in (0, 1, 2, 7):
        check_devices(lambda dev, s=steps: torch.logspace(start, 3.7, s, base=3.0, dtype=dtype, device=dev))
    if dtype is not torch.uint8:  # -3 wraps around in uint8, and base ** 250 has no uint8 value
        check_devices(lambda dev: torch.logspace(2, -3, 9, base=2.5, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.logspace(0, 2, -1, dtype=dtype, device=dev))  # torch's error


@by_dtype()
def test_eye_matches_cpu(dtype):
    check_devices(lambda dev: torch.eye(3, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.eye(2, 4, dtype=dtype, device=dev))


@by_dtype()
def test_tensor_from_python_data_matches_cpu(dtype):
    data = sample_data(dtype)
    check_devices(lambda dev: torch.tensor(data, dtype=dtype, device=dev))
    check_devices(lambda dev: torch.tensor(data[0][1], dtype=dtype, device=dev))


def test_tensor_infers_dtype_like_cpu():
    for data in ([1, 2, 3], [1.5, -2.0], [True, False], 3.25, 7, [[1, 2], [3, 4]], []):
        check_devices(lambda dev, data=data: torch.tensor(data, device=dev))


@by_dtype()
def test_like_factories_keep_dtype_shape_and_layout(dtype):
    def source(dev):
        cpu = torch.tensor(sample_data(dtype), dtype=dtype).t()  # (3, 2), non-contiguous
        return cpu.to(dev, copy=True)

    check_devices(lambda dev: torch.zeros_like(source(dev)))
    check_devices(lambda dev: torch.ones_like(source(dev)))
    check_devices(lambda dev: torch.full_like(source(dev), fill_value(dtype)))
    assert_layout_like_cpu(lambda dev: torch.empty_like(source(dev)))


def test_like_factories_can_change_device_and_dtype():
    cpu = torch.arange(6.0).reshape(2, 3)
    tiny = torch.zeros_like(cpu, device=DEVICE)
    assert tiny.device.type == DEVICE
    check_devices(lambda dev: torch.ones_like(cpu, device=dev, dtype=torch.int16))
    check_devices(lambda dev: torch.full_like(cpu, 2.5, device=dev, dtype=torch.float16))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_tensor_from_python_floats_keeps_special_values(dtype):
    data = [float("nan"), float("inf"), float("-inf"), -0.0, 65504.0, 1e-3]
    check_devices(lambda dev: torch.tensor(data, dtype=dtype, device=dev))
