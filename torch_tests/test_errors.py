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

INT = torch.arange(6).reshape(2, 3)
BOOL = torch.tensor([[True, False, True], [False, False, True]])
# Ops whose CPU kernel lacks a dtype (NotImplementedError) or refuses it (RuntimeError): tiny asks the
# CPU kernel once per dtype combination, so its answer is torch's (issue #14's list, and more of each).
CPU_REFUSED_DTYPES = {
    "softmax_int": (lambda a: a.softmax(1), INT),
    "softmax_bool": (lambda a: torch.softmax(a, 0), BOOL),
    "log_softmax_int": (lambda a: a.log_softmax(0), INT),
    "trunc_bool": (torch.trunc, BOOL),
    "ceil_bool": (torch.ceil, BOOL),
    "floor_bool": (torch.floor, BOOL),
    "abs_bool": (torch.abs, BOOL),
    "round_decimals_int": (lambda a: a.round(decimals=1), INT),
    "round_decimals_bool": (lambda a: a.round(decimals=2), BOOL),
    "fmod_bool": (torch.fmod, BOOL, BOOL),
    "pow_bool": (torch.pow, BOOL, BOOL),
    "lshift_bool": (lambda a, b: a << b, BOOL, BOOL),
    "addcmul_bool": (lambda a: a.addcmul_(a, a), BOOL.clone()),
    "searchsorted_bool": (torch.searchsorted, torch.tensor([False, True]), BOOL),
    "relu_bool": (torch.relu, BOOL),
    "sub_bool_inplace": (lambda a: a.sub_(BOOL.to(a.device)), BOOL.clone()),
    "lerp_int_inplace": (lambda a: a.lerp_(a, 0.5), INT.clone()),
    "inplace_int_pow_negative": (lambda a: a.pow_(-2), torch.arange(1, 4)),
    "mv_bool": (torch.mv, BOOL.repeat(1, 1)[:, :2], torch.tensor([True, False])),
    "remainder_bool_empty": (lambda a: a % a, torch.zeros(2, 0, 2, dtype=torch.bool)),
    "lerp_bool_uint8": (lambda a, b: torch.lerp(a, b, 0.25), torch.tensor(True), torch.ones(3, dtype=torch.uint8)),
    "cumsum_out_overlapping": (lambda a: torch.cumsum(a, -1, out=a), torch.tensor([-4.0]).as_strided((5,), (0,))),
    "cumsum_out_bool": (lambda a, o: torch.cumsum(a, 0, out=o), torch.arange(3.0), torch.zeros(3, dtype=torch.bool)),
    "bmm_bool_before_dtype_mismatch": (torch.bmm, torch.zeros(1, 1, 1, dtype=torch.bool), torch.ones(1, 1, 3)),
    "pad_crop_past_empty_input": (lambda a: torch.nn.functional.pad(a, (2, -1, -1, 0)), torch.zeros(1, 0)),
}


@pytest.mark.parametrize("case", CPU_REFUSED_DTYPES.values(), ids=CPU_REFUSED_DTYPES.keys())
def test_an_op_the_cpu_refuses_raises_the_same_error(case):
    fn, *args = case
    check(fn, *args)


CPU_ACCEPTED_EDGES = {
    "topk_of_0d_with_k_0": (lambda a: torch.topk(a, 0), torch.tensor(3.0)),
    "topk_of_0d_with_k_1": (lambda a: torch.topk(a, 1), torch.tensor(3.0)),
    "mm_of_empty_bool": (torch.mm, torch.zeros(0, 1, dtype=torch.bool), torch.zeros(1, 1, dtype=torch.bool)),
    "bmm_of_bool_over_no_elements": (
        torch.bmm,
        torch.zeros(4, 2, 0, dtype=torch.bool),
        torch.zeros(4, 0, 4, dtype=torch.bool),
    ),
    "kthvalue_of_0d_bool": (lambda a: a.kthvalue(1, 0).values, torch.tensor(False)),
    "index_add_into_an_empty_tensor": (
        lambda a, v: a.index_add(-2, torch.tensor([0]).to(a.device), v),
        torch.zeros(1, 0, 1, dtype=torch.float64),
        -torch.ones(1, 1, 1, dtype=torch.float64),
    ),
    "mv_of_bool_with_no_rows": (torch.mv, torch.ones(0, 2, dtype=torch.bool), torch.ones(2, dtype=torch.bool)),
    "addmv_of_bool_over_no_elements": (
        torch.addmv,
        torch.ones(2, dtype=torch.bool),
        torch.ones(2, 0, dtype=torch.bool),
        torch.ones(0, dtype=torch.bool),
    ),
    "mm_of_bool_over_no_elements": (torch.mm, torch.ones(2, 0, dtype=torch.bool), torch.ones(0, 2, dtype=torch.bool)),
    "addmm_of_ints_over_no_elements_with_an_int_beta": (
        lambda s, a, b: torch.addmm(s, a, b, beta=2, alpha=0.5),
        torch.tensor(3, dtype=torch.int32),
        torch.ones(2, 0, dtype=torch.int32),
        torch.ones(0, 1, dtype=torch.int32),
    ),
    "scatter_of_an_out_of_range_value_at_no_index": (
        lambda a: a.scatter(2, torch.zeros(0, dtype=torch.int64).to(a.device), -3.0),
        torch.zeros(0, 3, 2, dtype=torch.uint8),
    ),
    "mask_put_of_an_overlapping_element": (
        lambda a: a.__setitem__(torch.tensor([True, False, False, False]).to(a.device), a[-3:4:3]) or a,
        torch.arange(4.0),
    ),
}


# Calls wrong twice: the CPU's first check wins (TensorIterator's shapes and overlap before the kernel's
# dtypes; an indexing error before a dtype mismatch), and tiny raises that one.
TWICE_WRONG = {
    "bitwise_or_of_float_with_mismatched_sizes": (torch.bitwise_or, torch.ones(2, 3), torch.ones(2, 2)),
    "inplace_bitwise_or_of_float_not_broadcastable": (lambda a, b: a.bitwise_or_(b), torch.ones(3, 2), torch.ones(2)),
    "hypot_of_int_with_mismatched_sizes": (
        torch.hypot,
        torch.ones(2, 5, dtype=torch.int32),
        torch.ones(2, 2, dtype=torch.int32),
    ),
    "lerp_of_int_into_an_overlapping_self": (
        lambda a: a[1:].lerp_(a[:-1], 0.5),
        torch.arange(6),
    ),
    "neg_of_bool_into_an_out_of_another_dtype": (
        lambda a, o: torch.neg(a, out=o),
        torch.tensor(True),
        torch.zeros(3, dtype=torch.uint8),
    ),
    "mm_of_bool_into_an_out_of_another_dtype": (
        lambda a, o: torch.mm(a, a, out=o),
        torch.ones(2, 2, dtype=torch.bool),
        torch.zeros(2, 2, dtype=torch.int16),
    ),
    "addmm_of_bool_with_a_self_that_does_not_broadcast": (
        lambda s, a: torch.addmm(s, a, a[:, :1]),
        torch.ones(2, dtype=torch.bool),
        torch.ones(2, 2, dtype=torch.bool),
    ),
    "mm_into_an_out_with_internal_overlap": (
        lambda a, o: torch.mm(a, a, out=o.as_strided((2, 2), (1, 0))),
        torch.ones(2, 2),
        torch.zeros(4),
    ),
    "index_put_into_an_empty_dim_with_another_dtype": (
        lambda a, v: a.index_put((torch.tensor([0, 0, 0]).to(a.device),), v, accumulate=True),
        torch.zeros(0, 3, dtype=torch.int64),
        torch.ones(3, 3, dtype=torch.bool),
    ),
}


TWICE_WRONG["addmm_of_ints_over_no_elements_with_a_float_beta"] = (
    lambda s, a, b: torch.addmm(s, a, b, beta=0.5),
    torch.tensor(3, dtype=torch.int32),
    torch.ones(2, 0, dtype=torch.int32),
    torch.ones(0, 1, dtype=torch.int32),
)


@pytest.mark.parametrize("case", TWICE_WRONG.values(), ids=TWICE_WRONG.keys())
def test_a_call_wrong_twice_raises_the_cpus_first_error(case):
    fn, *args = case
    check(fn, *args)


def test_an_empty_tensor_the_cpu_accepts_does_not_vouch_for_a_full_one():
    # the CPU returns before its dtype check when there is nothing to compute; the answer it gives for
    # an empty int tensor says nothing about a full one
    for shape in [(0, 3), (2, 3)]:
        check(lambda a: a.softmax(1), torch.ones(shape, dtype=torch.int8))
    check(lambda a: a.topk(1, 0), torch.zeros((), dtype=torch.bool))


@pytest.mark.parametrize("case", CPU_ACCEPTED_EDGES.values(), ids=CPU_ACCEPTED_EDGES.keys())
def test_edge_cases_the_cpu_accepts_work(case):
    fn, *args = case
    check(fn, *args)


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a // b,
        lambda a, b: a % b,
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: torch.fmod(a, b),
        lambda a, b: a.floor_divide_(b),
    ],
    ids=["floor_divide", "remainder", "div_trunc", "fmod", "floor_divide_"],
)
def test_integer_division_by_zero_raises_at_the_sync_that_computes_it(op):
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(torch.arange(4), torch.tensor([1, 2, 0, 3]))
    keep = torch.arange(4, device=DEVICE) * 5
    x = torch.arange(4, device=DEVICE)
    y = op(x, torch.tensor([1, 2, 0, 3], device=DEVICE))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        y.cpu()
    # the error is raised once; other tensors and later work are intact
    assert_same(keep, torch.arange(4) * 5)
    fresh = torch.arange(4, device=DEVICE)
    assert_same(op(fresh, torch.tensor([1, 2, 1, 3], device=DEVICE)), op(torch.arange(4), torch.tensor([1, 2, 1, 3])))
    assert_device_still_works()


@pytest.mark.parametrize("case", CPU_REFERENCE_ERRORS.values(), ids=CPU_REFERENCE_ERRORS.keys())
def test_bad_input_raises_the_cpu_error_type_and_changes_nothing(case):
    fn, *args = case
    check(fn, *args)


def assert_device_still_works():
    x = torch.arange(5.0, device=DEVICE)
    assert_same(x * 2 - 1, torch.arange(5.0) * 2 - 1)


def test_a_dtype_tiny_cannot_hold_is_refused_at_the_call():
    keep = torch.arange(4.0, device=DEVICE) * 3
    for make in (
        lambda: torch.zeros(2, dtype=torch.float8_e5m2, device=DEVICE),
        lambda: torch.ones(2).to(torch.float8_e4m3fn).to(DEVICE),
        lambda: torch.arange(3.0, device=DEVICE).to(torch.float8_e5m2),
    ):
        with pytest.raises(TypeError) as info:
            make()
        assert "does not support dtype torch." in str(info.value), f"unclear message: {info.value}"
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
