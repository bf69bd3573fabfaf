"""In-place ops and out= through views, lazy reads taken before writes, out= resizing, overlap."""

import pytest
import torch
from conftest import (
    DEVICE,
    assert_same,
    by_dtype,
    check,
    check_devices,
    recorded_warnings,
)


def grid(dev, dtype=torch.float32):
    """A fresh (4, 5) tensor with distinct values."""
    return torch.arange(20).reshape(4, 5).to(dev, dtype=dtype, copy=True)


def scenario(fn):
    """fn(a, dev) mutates a (4, 5) grid and returns the tensors a user would look at next."""
    return lambda dev: fn(grid(dev), dev)


def mul_rows(a, dev):
    a[1:3].mul_(2)
    return a


def add_transposed(a, dev):
    r = a.t().add_(1)
    return a, r


def set_column(a, dev):
    a[:, 0] = 5
    return a


def zero_every_other(a, dev):
    a.view(-1)[::2].zero_()
    return a


def add_out_slice(a, dev):
    x = torch.full((2, 5), 1.5, device=dev)
    y = torch.arange(5.0, device=dev)
    r = torch.add(x, y, out=a[2:])
    return a, r


def fill_detached(a, dev):
    a.detach().fill_(3)
    return a


def set_row_from_cpu(a, dev):
    a[0] = torch.tensor([9.0, 8.0, 7.0, 6.0, 5.0])  # a CPU tensor copied into a tiny view
    return a


def set_block_from_computation(a, dev):
    a[1:3, 1:4] = a[0:2, 0:3] * 10
    return a


def iadd_strided(a, dev):
    a[::2, ::2] += 1
    return a


def view_sees_base_and_base_sees_view(a, dev):
    v = a[1]
    a.add_(1)
    first = v.clone()
    v.mul_(2)
    return a, v, first


def overlapping_views(a, dev):
    u, w = a[0:2], a[1:3]
    u.add_(1)
    w.mul_(3)
    return a, u, w


def copy_other_dtype_into_view(a, dev):
    a.view(-1)[3:7].copy_(torch.arange(4, dtype=torch.float64, device=dev) - 1.5)
    return a


def out_into_transposed_view(a, dev):
    x = torch.arange(8.0, device=dev).reshape(2, 4)
    torch.mul(x, -2, out=a.t()[:2])
    return a


def sub_row_from_rows(a, dev):
    a[1:].sub_(a[0])
    return a


def self_aliasing_inplace(a, dev):
    a.add_(a)
    torch.mul(a, a, out=a)
    return a


def unsqueezed_write(a, dev):
    a.unsqueeze(0)[:, 1:3, ::2].clamp_(0, 9)
    return a


def diagonal_write(a, dev):
    a.diagonal().fill_(-1)
    a.diagonal(1).mul_(100)
    return a


SCENARIOS = [
    mul_rows,
    add_transposed,
    set_column,
    zero_every_other,
    add_out_slice,
    fill_detached,
    set_row_from_cpu,
    set_block_from_computation,
    iadd_strided,
    view_sees_base_and_base_sees_view,
    overlapping_views,
    copy_other_dtype_into_view,
    out_into_transposed_view,
    sub_row_from_rows,
    self_aliasing_inplace,
    unsqueezed_write,
    diagonal_write,
]


@pytest.mark.parametrize("fn", SCENARIOS, ids=lambda f: f.__name__)
def test_writes_through_views_are_visible_through_base_and_views(fn):
    check_devices(scenario(fn))


@pytest.mark.parametrize("fn", SCENARIOS, ids=lambda f: f.__name__)
def test_writes_through_views_stay_correct_when_realized_in_between(fn):
    def fn_with_syncs(a, dev):
        if a.device.type == DEVICE:
            torch.tiny.synchronize()
        out = fn(a, dev)
        if a.device.type == DEVICE:
            torch.tiny.synchronize()
        return out

    check_devices(scenario(fn_with_syncs))


@by_dtype()
def test_inplace_on_slice_updates_base_for_every_dtype(dtype):
    def fn(dev):
        a = grid(dev, dtype)
        a[1:3, ::2].fill_(1)
        a.t()[0].copy_(torch.ones(5, dtype=dtype))
        return a

    check_devices(fn)


def test_lazy_read_before_inplace_write_keeps_old_values():
    def fn(dev):
        a = grid(dev)
        b = a * 2
        a.add_(1)
        return a, b

    check_devices(fn)


def test_lazy_reads_of_views_before_writes_keep_old_values():
    def fn(dev):
        a = grid(dev)
        b = a[1:3] * 2
        c = a.clone()
        t = a.t()
        d = t + 0
        a[1:3].zero_()
        a.mul_(-1)
        e = a + 1
        a.copy_(torch.full((4, 5), 7.0))
        return a, b, c, d, e, t

    check_devices(fn)


def test_reads_between_many_inplace_writes_see_each_version():
    def fn(dev):
        a = grid(dev)
        versions = []
        for k in range(4):
            a.add_(k)
            versions.append(a * 1)
            a[k].neg_()
        return a, versions

    check_devices(fn)


def test_out_with_the_right_size_keeps_its_storage():
    def fn(dev):
        out = torch.empty(3, 4, device=dev)
        ptr = out.data_ptr()
        r = torch.add(torch.ones(3, 4, device=dev), 2.5, out=out)
        return out, r is out, out.data_ptr() == ptr

    check_devices(fn)


def resize_warnings(messages):
    return [m for m in messages if "was resized" in m]


def test_out_of_the_wrong_size_is_resized_with_torchs_warning():
    def fn(dev):
        out = torch.empty(5, device=dev)
        r, messages = recorded_warnings(lambda: torch.add(torch.ones(3, device=dev), 2.0, out=out))
        return out, r is out, len(resize_warnings(messages))

    cpu_warns = fn("cpu")[2]
    assert cpu_warns == 1
    check_devices(fn)


def test_empty_out_is_resized_without_a_warning():
    def fn(dev):
        out = torch.empty(0, dtype=torch.int64, device=dev)
        r, messages = recorded_warnings(lambda: torch.mul(torch.arange(6, device=dev).reshape(2, 3), 3, out=out))
        return out, r is out, len(resize_warnings(messages))

    assert fn("cpu")[2] == 0
    check_devices(fn)


def test_out_may_have_a_wider_dtype_than_the_result():
    def fn(dev):
        out = torch.empty(4, dtype=torch.float64, device=dev)
        torch.add(torch.arange(4, device=dev), 1, out=out)
        cmp = torch.empty(4, dtype=torch.float32, device=dev)
        torch.lt(torch.arange(4, device=dev), 2, out=cmp)
        return out, cmp

    check_devices(fn)


OVERLAP_ERRORS = {
    "out_partially_overlaps_input": lambda a: torch.add(a[:4], 1, out=a[2:6]),
    "unary_out_partially_overlaps_input": lambda a: torch.neg(a[:6], out=a[2:]),
    "inplace_reads_a_shifted_self": lambda a: a[1:].add_(a[:-1]),
    "inplace_into_expanded": lambda a: a[:1].expand(4).add_(1),
    "inplace_into_zeros_expand": lambda a: torch.zeros(1, device=a.device).expand(4).add_(1),
    "copy_into_expanded": lambda a: a[:1].expand(3).copy_(a[3:6]),
    "out_is_expanded": lambda a: torch.mul(a[:3], 2, out=a[6:7].expand(3)),
}


@pytest.mark.parametrize("fn", OVERLAP_ERRORS.values(), ids=OVERLAP_ERRORS.keys())
def test_overlapping_writes_raise_torchs_error_and_change_nothing(fn):
    check(fn, torch.arange(8.0))


INPLACE_REFUSALS = {
    "float_result_into_ints": lambda a: a.long().add_(1.5),
    "true_division_of_ints": lambda a: a.long().div_(2),
    "ints_into_bools": lambda a: (a > 2).add_(1),
    "operand_broadcasts_beyond_self": lambda a: a[:4].clone().add_(a.reshape(2, 4).clone()),
    "wider_float_operand_kept": lambda a: a.half().mul_(a.double()[:1]),
}


@pytest.mark.parametrize("fn", INPLACE_REFUSALS.values(), ids=INPLACE_REFUSALS.keys())
def test_inplace_calls_refuse_and_accept_what_torch_does(fn):
    check(fn, torch.arange(8.0))


def test_full_overlap_is_allowed_for_out_and_inplace():
    check(lambda a: torch.neg(a, out=a), torch.arange(8.0))
    check(lambda a: a.mul_(a), torch.arange(8.0))
    check(lambda a: a[2:].add_(a[2:]), torch.arange(8.0))


def test_fill_of_expanded_tensor_is_allowed():
    check(lambda a: a[:1].expand(4).zero_(), torch.arange(8.0) + 1)
    check(lambda a: a[:1].expand(4).fill_(3), torch.arange(8.0) + 1)


def test_process_survives_an_overlap_error_and_keeps_computing():
    a = torch.arange(8.0, device=DEVICE)
    b = a * 3
    with pytest.raises(RuntimeError):
        torch.add(a[:4], 1, out=a[2:6])
    c = b + a
    assert_same(c, torch.arange(8.0) * 4)


def _sync(dev):
    if torch.device(dev).type == "tiny":
        torch.tiny.synchronize()


def realized_then_updated_in_place(dev):
    """Realized tensors updated in place (tiny writes a buffer only the update reads into that buffer) while
    other tensors hold the old buffer or read it: a copy, a view, a pending result, the same tensor flipped."""
    x = torch.arange(4096.0).reshape(64, 64).to(dev)
    g = torch.linspace(-1, 1, 4096).reshape(64, 64).to(dev)
    m, v = torch.zeros(64, 64, device=dev), torch.zeros(64, 64, device=dev)
    _sync(dev)
    copy = x.clone()  # may share x's buffer until one of them changes
    row = x[3]
    pending = x * 1  # reads x's old buffer in the same sync as the update
    x.mul_(0.5).add_(g)
    flipped = g.clone()
    _sync(dev)
    flipped.add_(flipped.flip(0))  # reads other elements than it writes
    for _ in range(3):  # Adam's updates of its states and the parameter, synced each step
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        x.addcdiv_(m, v.sqrt().add_(1e-8), value=-0.01)
        _sync(dev)
    return x, copy, row, pending, flipped, m, v


def test_tensors_updated_in_place_after_a_sync_keep_the_values_others_hold():
    check_devices(realized_then_updated_in_place)
