"""torch's _foreach_* ops on tiny (aten_ops/foreach.cpp) against PyTorch CPU: add, sub, mul, div, addcmul, addcdiv,
lerp, sqrt and neg in place and functional, over every overload the optimizers use; lists whose calls TensorIterator
takes as they are record each update directly, the rest (other dtypes, aliasing, overlap) run torch's per-tensor slow
path, with its results and errors. The optimizers' default (foreach) steps against the CPU's."""

import pytest
import torch
from conftest import DEVICE, FLOAT_DTYPES, assert_optimizer_steps_match_cpu, assert_same, dtype_name, rand, tol

pytestmark = pytest.mark.usefixtures("native")

SHAPES = [(3, 4), (5,), (2, 3, 4), (), (0, 3)]


def lists(dtype, seed, positive=False):
    """A list of tensors of SHAPES' shapes, seeded; `positive` in [0.5, ...) (divisors, square roots)."""
    out = [rand(*s, seed=seed + i) if s else rand(1, seed=seed + i)[0] for i, s in enumerate(SHAPES)]
    return [(x.abs() + 0.5 if positive else x).to(dtype) for x in out]


def every_overload(dev, dtype):
    """Each foreach overload in turn on fresh lists, in place and functional: what every call returned or updated."""
    a, b, c, w = (lists(dtype, s, positive=s == 10) for s in (0, 10, 20, 30))
    a, b, c, w = ([x.to(dev) for x in t] for t in (a, b, c, w))
    n = len(SHAPES)
    scalars = [0.1 * (i + 1) for i in range(n)]
    torch._foreach_add_(a, 0.3)
    torch._foreach_sub_(a, 2)
    torch._foreach_mul_(a, 1.7)
    torch._foreach_div_(a, 3.0)
    torch._foreach_add_(a, scalars)
    torch._foreach_sub_(a, scalars)
    torch._foreach_mul_(a, scalars)
    torch._foreach_div_(a, scalars)
    torch._foreach_add_(a, b, alpha=-0.7)
    torch._foreach_sub_(a, c, alpha=2)
    torch._foreach_mul_(a, b)
    torch._foreach_div_(a, b)
    torch._foreach_addcmul_(a, b, c, value=0.01)
    torch._foreach_addcdiv_(a, c, b, value=-0.3)
    torch._foreach_addcmul_(a, b, c, scalars)
    torch._foreach_addcdiv_(a, c, b, scalars)
    torch._foreach_lerp_(a, c, 0.1)
    torch._foreach_lerp_(a, c, 0.9)
    torch._foreach_lerp_(a, b, scalars)
    torch._foreach_lerp_(a, b, w)
    torch._foreach_neg_(c)
    torch._foreach_sqrt_(w)  # negative entries give nan, as on the CPU
    functional = [
        torch._foreach_add(a, 0.5),
        torch._foreach_sub(a, scalars),
        torch._foreach_mul(a, b),
        torch._foreach_div(a, 4),
        torch._foreach_add(a, b, alpha=3),
        torch._foreach_sub(a, b),
        torch._foreach_addcmul(a, b, c, value=2),
        torch._foreach_addcdiv(a, c, b, scalars),
        torch._foreach_lerp(a, b, 0.3),
        torch._foreach_lerp(a, b, scalars),
        torch._foreach_lerp(a, b, c),
        torch._foreach_sqrt(b),
        torch._foreach_neg(a),
    ]
    return [a, c, w, *functional]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_every_foreach_overload_matches_cpu_in_place_and_functional(dtype):
    assert_same(every_overload(DEVICE, dtype), every_overload("cpu", dtype), **tol(dtype))


def test_a_foreach_update_is_recorded_without_a_per_tensor_call():
    # torch's slow path would call aten::add_ (and aten::addcmul_) once per tensor under the foreach op
    params, grads = ([torch.ones(s, device=DEVICE) for s in SHAPES] for _ in range(2))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch._foreach_add_(params, 1.0)
        torch._foreach_addcmul_(params, grads, grads, value=0.5)
    names = {e.name for e in prof.events()}
    assert "aten::_foreach_add_" in names
    assert not names & {"aten::add_", "aten::addcmul_"}, names


def test_lists_the_direct_path_does_not_take_give_the_per_tensor_results():
    def calls(dev):
        ints = [torch.arange(6, device=dev).reshape(2, 3), torch.arange(3, device=dev)]
        torch._foreach_add_(ints, 2)
        torch._foreach_mul_(ints, [3, -1])
        mixed = [torch.ones(3, device=dev), torch.ones(2, dtype=torch.float64, device=dev)]
        torch._foreach_add_(mixed, [torch.full((3,), 0.5, device=dev), torch.ones(2, device=dev)], alpha=2)
        x = torch.arange(4.0, device=dev)
        torch._foreach_add_([x, x], [x, x])  # the same tensor twice: updated twice, as the per-tensor calls do
        t = torch.arange(12.0, device=dev).reshape(3, 4).t()  # transposed: in place as it is, functional laid out
        torch._foreach_mul_([t], 2)
        return ints, mixed, x, t, torch._foreach_mul([t], 0.5), torch._foreach_sqrt(ints)

    assert_same(calls(DEVICE), calls("cpu"))


@pytest.mark.parametrize(
    "call",
    [
        lambda d: torch._foreach_add_([torch.ones(3, device=d), torch.ones(4, device=d)], [torch.ones(3, device=d)]),
        lambda d: torch._foreach_add_([], 1.0),
        lambda d: torch._foreach_mul_([torch.ones(3, device=d), torch.ones(4, device=d)], [1.0]),
        lambda d: torch._foreach_mul_([torch.ones(3, dtype=torch.int64, device=d)], 0.5),
        lambda d: torch._foreach_add_([torch.ones(3, device=d)], 1j),
        lambda d: torch._foreach_add_([torch.ones(3, device=d)], [torch.ones(4, device=d)]),
        lambda d: torch._foreach_mul_([torch.ones(2, 1, device=d).expand(2, 3)], 2.0),
        lambda d: torch._foreach_addcdiv_([torch.ones(3, device=d)] * 2, [torch.ones(3, device=d)] * 2, [], 1.0),
        lambda d: torch._foreach_add_([torch.ones(3, device=d)], [torch.ones(3, device=d)], alpha=1e39),
    ],
    ids=[
        "lengths",
        "empty",
        "scalar_list_length",
        "int_in_place_by_float",
        "complex_scalar",
        "shapes",
        "overlapping_self",
        "third_list_length",
        "alpha_overflow",
    ],
)
def test_bad_foreach_calls_raise_the_cpus_error(call):
    with pytest.raises(RuntimeError) as cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as tiny:
        call(DEVICE)
    assert str(tiny.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_a_number_past_float32s_range_is_inf_as_an_operand_as_on_the_cpu():
    def calls(dev):
        x = torch.ones(3, device=dev)
        return (
            x + 1e39,
            x * -1e39,
            x.bfloat16() + 1e39,
            x + torch.tensor(1e39, dtype=torch.float64),
            torch._foreach_add([x], 1e39),
            torch._foreach_mul([x], [-1e39]),
        )

    assert_same(calls(DEVICE), calls("cpu"))
    with pytest.raises(RuntimeError, match="without overflow"):  # a parameter, as lerp's weight: the CPU's check
        torch.ones(3, device=DEVICE).lerp_(torch.ones(3, device=DEVICE), 1e39)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
        lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5),
        lambda p: torch.optim.Adagrad(p, lr=0.1),
    ],
    ids=["adam", "adamw_amsgrad", "sgd_nesterov", "rmsprop", "adagrad"],
)
def test_default_foreach_optimizer_steps_match_cpu(make):
    assert_optimizer_steps_match_cpu(make)
