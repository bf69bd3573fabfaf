"""Bad input raises torch's kind of error at the call; the process survives and every other tensor
keeps its value."""

import pytest
import torch
from conftest import DEVICE, assert_same, check

A = torch.arange(6.0).reshape(2, 3)
B4 = torch.arange(4.0)

CPU_REFERENCE_ERRORS = {
    "broadcast_mismatch": (torch.add, A, B4),
    "broadcast_mismatch_comparison": (torch.lt, A, B4),
    "broadcast_mismatch_where": (lambda a, b: torch.where(a > 1, a, b), A, B4),
    "inplace_cannot_grow_self": (lambda a, b: a[0].add_(b), A, torch.ones(2, 3)),
    "out_of_refused_dtype": (
        lambda a, o: torch.add(a, 1.5, out=o),
        A,
        torch.zeros(2, 3, dtype=torch.int64),
    ),
    "out_of_refused_dtype_true_div": (
        lambda a, o: torch.div(a, 2, out=o),
        torch.arange(6).reshape(2, 3),
        torch.zeros(2, 3, dtype=torch.int32),
    ),
    "out_of_refused_dtype_bool": (
        lambda a, o: torch.mul(a, a, out=o),
        A,
        torch.zeros(2, 3, dtype=torch.bool),
    ),
    "inplace_refused_dtype": (lambda a: a.mul_(0.5), torch.arange(6)),
    "bad_rounding_mode": (lambda a: torch.div(a, 2, rounding_mode="nearest"), A),
    "copy_shape_mismatch": (lambda a, b: a.copy_(b), A, B4),
    "view_wrong_numel": (lambda a: a.view(5), A),
    "view_of_transposed": (lambda a: a.t().view(-1), A),
    "index_out_of_range": (lambda a: a[5], A),
    "item_of_many_elements": (lambda a: a.item(), A),
    "bool_of_many_elements": (lambda a: bool(a), A),
    "bool_sub": (torch.sub, torch.tensor([True, False]), torch.tensor([True, True])),
    "bool_neg": (torch.neg, torch.tensor([True, False])),
    "int_pow_negative_scalar": (lambda a: a.pow(-1), torch.arange(1, 4)),
    "shift_of_float": (lambda a: a << 1, A),
    "integral_alpha_float": (
        lambda a, b: torch.add(a, b, alpha=0.5),
        torch.arange(3),
        torch.arange(3),
    ),
}


@pytest.mark.parametrize("case", CPU_REFERENCE_ERRORS.values(), ids=CPU_REFERENCE_ERRORS.keys())
def test_bad_input_raises_the_cpu_error_type_and_changes_nothing(case):
    fn, *args = case
    check(fn, *args)


def assert_device_still_works():
    x = torch.arange(5.0, device=DEVICE)
    assert_same(x * 2 - 1, torch.arange(5.0) * 2 - 1)


def test_complex_dtype_is_refused_at_the_call():
    keep = torch.arange(4.0, device=DEVICE) * 3
    for make in (
        lambda: torch.zeros(2, dtype=torch.complex64, device=DEVICE),
        lambda: torch.ones(2, dtype=torch.complex128).to(DEVICE),
        lambda: torch.arange(3.0, device=DEVICE).to(torch.complex64),
        lambda: torch.tensor([1 + 2j], device=DEVICE),
    ):
        with pytest.raises((RuntimeError, TypeError)) as info:
            make()
        assert "omplex" in str(info.value), f"unclear message: {info.value}"
    assert_same(keep, torch.arange(4.0) * 3)
    assert_device_still_works()


MIXED_DEVICES = {
    "binary": lambda t, c: t + c,
    "binary_cpu_first": lambda t, c: c * t,
    "inplace_tiny_self": lambda t, c: t.add_(c),
    "inplace_cpu_self": lambda t, c: c.add_(t),
    "out_on_cpu": lambda t, c: torch.add(t, t, out=c),
    "where": lambda t, c: torch.where(t > 0, t, c),
    "clamp": lambda t, c: torch.clamp(t, min=c),
}


@pytest.mark.parametrize("fn", MIXED_DEVICES.values(), ids=MIXED_DEVICES.keys())
def test_cpu_tensor_mixed_with_tiny_raises_and_changes_nothing(fn):
    t = torch.arange(3.0, device=DEVICE) - 1
    c = torch.arange(3.0) + 10
    with pytest.raises(RuntimeError) as info:
        fn(t, c)
    assert "device" in str(info.value), f"unclear message: {info.value}"
    assert_same(t, torch.arange(3.0) - 1)
    torch.testing.assert_close(c, torch.arange(3.0) + 10)
    assert_device_still_works()


def test_device_index_beyond_device_count_is_refused():
    # CUDA raises a RuntimeError subclass here; an IndexError says the same thing as clearly.
    with pytest.raises((RuntimeError, IndexError)):
        torch.zeros(2, device=f"tiny:{torch.tiny.device_count()}")
    assert_device_still_works()


def test_pending_work_survives_an_error_in_between():
    a = torch.arange(6.0, device=DEVICE).reshape(2, 3)
    b = a * 2  # pending
    with pytest.raises(RuntimeError):
        a + torch.ones(4, device=DEVICE)
    a.add_(1)  # pending in-place write after the failed call
    assert_same(b, torch.arange(6.0).reshape(2, 3) * 2)
    assert_same(a, torch.arange(6.0).reshape(2, 3) + 1)
