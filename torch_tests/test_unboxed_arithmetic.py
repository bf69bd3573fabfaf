"""add, sub, mul and div run as unboxed kernels on tiny (recording cost): every form of them behaves as on the CPU."""

import pytest
import torch

ALPHA_OPS = ["add", "sub"]
OPS = ["add", "sub", "mul", "div"]


def operands(dtype, device):
    gen = torch.Generator().manual_seed(0)
    if dtype.is_floating_point or dtype.is_complex:
        a = torch.randn(3, 4, generator=gen, dtype=dtype)
        b = torch.randn(4, generator=gen, dtype=dtype) + 2
    else:
        a = torch.randint(-9, 9, (3, 4), generator=gen, dtype=dtype)
        b = torch.randint(1, 5, (4,), generator=gen, dtype=dtype)
    return a.to(device), b.to(device)


def same(tiny, cpu):
    assert tiny.device.type == "tiny"
    assert tiny.dtype == cpu.dtype and tiny.shape == cpu.shape and tiny.stride() == cpu.stride()
    torch.testing.assert_close(tiny.cpu(), cpu, equal_nan=True)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.complex64])
def test_functional_tensor_and_number_operands_match_cpu(op, dtype):
    a, b = operands(dtype, "cpu")
    f = getattr(torch, op)
    same(f(a.to("tiny"), b.to("tiny")), f(a, b))
    same(f(a.to("tiny"), 3), f(a, 3))
    same(f(a.to("tiny"), 2.5), f(a, 2.5))
    same(f(a[0, 0].to("tiny"), b.to("tiny")), f(a[0, 0], b))


@pytest.mark.parametrize("op", ALPHA_OPS)
def test_alpha_scales_the_other_operand_as_on_cpu(op):
    a, b = operands(torch.float32, "cpu")
    same(getattr(torch, op)(a.to("tiny"), b.to("tiny"), alpha=-1.5), getattr(torch, op)(a, b, alpha=-1.5))
    ai, bi = operands(torch.int32, "cpu")
    same(getattr(torch, op)(ai.to("tiny"), bi.to("tiny"), alpha=3), getattr(torch, op)(ai, bi, alpha=3))
    with pytest.raises(RuntimeError, match="alpha"):
        getattr(torch, op)(ai.to("tiny"), bi.to("tiny"), alpha=1.5)


@pytest.mark.parametrize("op", OPS)
def test_in_place_returns_self_and_writes_through_views(op):
    a, b = operands(torch.float32, "cpu")
    ta, tb = a.to("tiny"), b.to("tiny")
    before = ta.data_ptr()
    r = getattr(ta, op + "_")(tb)
    assert r is ta and ta.data_ptr() == before
    same(ta, getattr(a, op + "_")(b))
    getattr(ta[1], op + "_")(2.0)  # a view of ta: the base sees it
    getattr(a[1], op + "_")(2.0)
    same(ta, a)


def test_in_place_refuses_what_cpu_refuses():
    ti = torch.ones(3, dtype=torch.int32, device="tiny")
    with pytest.raises(RuntimeError, match="can't be cast"):
        ti.add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        ti.div_(2)
    with pytest.raises(RuntimeError):
        torch.ones(3, device="tiny").mul_(torch.ones(2, 3, device="tiny"))  # self cannot broadcast
    with pytest.raises(NotImplementedError, match="bool tensor is not supported"):
        torch.ones(2, device="tiny").sub(torch.ones(2, dtype=torch.bool, device="tiny"))


def test_in_place_self_partly_overlapping_the_other_operand_raises_as_on_cpu():
    for device in ("cpu", "tiny"):
        t = torch.arange(8.0, device=device)
        with pytest.raises(RuntimeError, match="single memory location"):
            t[1:].add_(t[:-1])
        t.mul_(t)  # the same tensor both ways is allowed
        same_values = torch.arange(8.0) ** 2
        torch.testing.assert_close(t.cpu(), same_values)


@pytest.mark.parametrize("op", OPS)
def test_out_writes_and_resizes_out_as_on_cpu(op):
    a, b = operands(torch.float32, "cpu")
    out_cpu, out_tiny = torch.empty(0), torch.empty(0, device="tiny")
    r = getattr(torch, op)(a.to("tiny"), b.to("tiny"), out=out_tiny)
    assert r is out_tiny
    same(out_tiny, getattr(torch, op)(a, b, out=out_cpu))
    base_cpu, base_tiny = torch.zeros(3, 8), torch.zeros(3, 8, device="tiny")
    getattr(torch, op)(a.to("tiny"), b.to("tiny"), out=base_tiny[:, ::2])
    getattr(torch, op)(a, b, out=base_cpu[:, ::2])
    same(base_tiny, base_cpu)
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(torch, op)(a.to("tiny"), b.to("tiny"), out=torch.empty(3, 4, dtype=torch.int64, device="tiny"))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_modes_in_every_form_match_cpu(mode):
    a, b = operands(torch.int64, "cpu")
    same(torch.div(a.to("tiny"), b.to("tiny"), rounding_mode=mode), torch.div(a, b, rounding_mode=mode))
    af, bf = operands(torch.float32, "cpu")
    same(torch.div(af.to("tiny"), -bf.to("tiny"), rounding_mode=mode), torch.div(af, -bf, rounding_mode=mode))
    t = af.to("tiny")
    t.div_(bf.to("tiny"), rounding_mode=mode)
    same(t, af.clone().div_(bf, rounding_mode=mode))
    out = torch.empty(3, 4, device="tiny")
    torch.div(af.to("tiny"), bf.to("tiny"), rounding_mode=mode, out=out)
    same(out, torch.div(af, bf, rounding_mode=mode))
    with pytest.raises(RuntimeError, match="rounding_mode"):
        torch.div(af.to("tiny"), bf.to("tiny"), rounding_mode="nearest")


def test_complex_in_place_and_out_match_cpu():
    a, b = operands(torch.complex64, "cpu")
    t = a.to("tiny")
    t.mul_(b.to("tiny"))
    same(t, a * b)
    out = torch.empty(3, 4, dtype=torch.complex64, device="tiny")
    torch.sub(a.to("tiny"), b.to("tiny"), alpha=2, out=out)
    same(out, torch.sub(a, b, alpha=2))
    real = torch.ones(3, 4, device="tiny")
    with pytest.raises(RuntimeError, match="can't be cast"):
        real.add_(b.to("tiny"))


def test_operands_on_two_devices_raise_as_on_cpu():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="tiny") + torch.ones(3)


def test_autograd_through_the_unboxed_ops_matches_cpu():
    a, b = operands(torch.float64, "cpu")
    grads = []
    for device in ("cpu", "tiny"):
        x = a.detach().to(device).requires_grad_()
        y = b.detach().to(device).requires_grad_()
        ((x + y) * (x - 2 * y) / (y + 3)).sum().backward()
        grads.append((x.grad.cpu(), y.grad.cpu()))
    torch.testing.assert_close(grads[0], grads[1])


UNARY = ["neg", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu"]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_unary_functional_and_in_place_match_cpu(op, dtype):
    a, _ = operands(dtype, "cpu")
    a = a.abs() + 1 if op in ("log", "sqrt", "rsqrt") else a
    same(getattr(torch, op)(a.to("tiny")), getattr(torch, op)(a))
    t, c = a.to("tiny"), a.clone()
    if dtype.is_floating_point or op in ("neg", "relu"):
        assert getattr(t, op + "_")() is t
        same(t, getattr(c, op + "_")())
    else:  # an int tensor cannot hold the float result: the CPU's error
        with pytest.raises(RuntimeError) as cpu_error:
            getattr(c, op + "_")()
        with pytest.raises(RuntimeError, match=str(cpu_error.value).split("\n")[0][:30]):
            getattr(t, op + "_")()


def test_neg_and_exp_out_resize_as_on_cpu():
    a, _ = operands(torch.float32, "cpu")
    for op in ("neg", "exp"):
        out = torch.empty(0, device="tiny")
        assert getattr(torch, op)(a.to("tiny"), out=out) is out
        same(out, getattr(torch, op)(a))


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_with_tensors_and_numbers_match_cpu(op):
    a, b = operands(torch.float32, "cpu")
    b = b.round()
    f = getattr(torch, op)
    same(f(a.round().to("tiny"), b.to("tiny")), f(a.round(), b))
    same(f(a.to("tiny"), 0.5), f(a, 0.5))
    ai, _ = operands(torch.int32, "cpu")
    same(f(ai.to("tiny"), 2), f(ai, 2))
    same(f(ai.to("tiny"), 2.5), f(ai, 2.5))


def test_maximum_minimum_where_pow_rsub_match_cpu():
    a, b = operands(torch.float32, "cpu")
    ta, tb = a.to("tiny"), b.to("tiny")
    same(torch.maximum(ta, tb), torch.maximum(a, b))
    same(torch.minimum(ta, tb.to(torch.float64)), torch.minimum(a, b.double()))
    same(torch.where(ta > 0, ta, tb), torch.where(a > 0, a, b))
    same(torch.where(ta > 0, ta, 0.0), torch.where(a > 0, a, 0.0))
    same(ta.pow(2), a.pow(2))
    same(tb.pow(tb), b.pow(b))
    same(1.5 - ta, 1.5 - a)
    same(torch.rsub(ta, tb, alpha=2), torch.rsub(a, b, alpha=2))
    t = tb.clone()
    t.pow_(0.5)
    same(t, b.clone().pow_(0.5))
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        torch.where(ta, ta, tb)
