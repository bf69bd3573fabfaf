"""The CPU fallback: an ATen op tiny has no kernel for runs on PyTorch's CPU kernel, and a user sees what the
CPU gives (values, in-place and out= writes through views, autograd), one warning per op, the calls counted
in torch.tiny.stats(); TINY_FALLBACK=0 turns it into an error naming the op; view ops never run through it.

The ops used here are ones tiny has no kernel for today (special functions, rarely used random
distributions, median); each test picks the first of its candidates that still has none, so that a new kernel does
not silently turn a fallback test into a test of that kernel.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DEVICE, assert_same, check, check_devices, recorded_warnings


def without_kernel(candidates):
    """The first (function, ATen names) candidate none of whose ATen ops has a tiny kernel."""
    for fn, names in candidates:
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(n, "PrivateUse1") for n in names):
            return fn
    pytest.skip(f"every candidate op now has a tiny kernel: {[names for _, names in candidates]}")


def unary_op():
    return without_kernel(
        [
            (torch.special.i0e, ["aten::special_i0e", "aten::special_i0e.out"]),
            (torch.special.bessel_j0, ["aten::special_bessel_j0", "aten::special_bessel_j0.out"]),
            (lambda t, **kw: torch.renorm(t, 2, 0, 1.0, **kw), ["aten::renorm", "aten::renorm.out"]),
            # relu(t + t): an op kept for the JIT's fusions, with no tiny kernel
            (lambda t, **kw: torch._add_relu(t, t, **kw), ["aten::_add_relu.Tensor", "aten::_add_relu.out"]),
        ]
    )


def inplace_op():
    return without_kernel(
        [
            (torch.Tensor.i0_, ["aten::i0_", "aten::i0.out"]),
            (torch.Tensor.digamma_, ["aten::digamma_", "aten::digamma.out"]),
            (lambda t: torch._add_relu_(t, t), ["aten::_add_relu_.Tensor", "aten::_add_relu.out"]),
        ]
    )


def random_op():
    """A random op of a tensor of positive rates, with an optional generator."""
    return without_kernel(
        [
            (lambda t, **kw: torch.poisson(t, **kw), ["aten::poisson"]),
            (lambda t, **kw: torch._standard_gamma(t, **kw), ["aten::_standard_gamma"]),
            (lambda t, **kw: torch.binomial(t * 4, t / 8, **kw), ["aten::binomial"]),
            (lambda t, **kw: t.clone().cauchy_(**kw), ["aten::cauchy_"]),
        ]
    )


def rates(dev, n=50):
    return torch.full((n,), 3.0, device=dev)


def two_output_op():
    """(values, indices) along a dim, with an optional out=."""
    return without_kernel(
        [
            (lambda x, dim, **kw: torch.median(x, dim, **kw), ["aten::median.dim_values"]),
            (lambda x, dim, **kw: torch.nanmedian(x, dim, **kw), ["aten::nanmedian.dim_values"]),
            (lambda x, dim, **kw: torch.kthvalue(x, 2, dim, **kw), ["aten::kthvalue.values"]),
        ]
    )


def data(dev, shape=(4, 5)):
    return (torch.arange(20, dtype=torch.float32).reshape(4, 5) / 7 - 1).reshape(shape).to(dev)


def fallback_delta(fn):
    """(fn's result, the fallback_ops counts fn added)."""
    torch.tiny.synchronize()
    before = torch.tiny.stats()["fallback_ops"]
    result = fn()
    after = torch.tiny.stats()["fallback_ops"]
    return result, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_op_without_kernel_gives_the_cpu_result():
    op = unary_op()
    check(op, data("cpu"), allow_fallback=True)


def test_noncontiguous_input_gives_the_cpu_result():
    op = unary_op()
    check(lambda x: op(x.t()[1:, ::2]), data("cpu"), allow_fallback=True)


def test_result_is_a_new_tiny_tensor_that_later_ops_read():
    op = unary_op()
    check_devices(lambda dev: (op(data(dev)) * 2 + 1).sum(0), allow_fallback=True)


def test_inplace_through_a_view_updates_the_base():
    op = inplace_op()

    def scenario(dev):
        a = data(dev)
        view = a[1:3, ::2]
        op(view)
        return a, view

    check_devices(scenario, allow_fallback=True)


def test_inplace_result_is_the_input_tensor():
    op = inplace_op()
    a = data(DEVICE)
    pointer = a.data_ptr()
    assert op(a) is a
    assert a.data_ptr() == pointer


def test_read_taken_before_an_inplace_fallback_keeps_the_old_value():
    op = inplace_op()

    def scenario(dev):
        a = data(dev)
        before = a * 2  # lazy on tiny: must still see a's old values
        op(a[1:])
        return before, a

    check_devices(scenario, allow_fallback=True)


def test_out_into_a_view_writes_the_base_and_keeps_its_data_ptr():
    op = unary_op()

    def scenario(dev):
        a = torch.zeros(4, 6, device=dev)
        out = a[:, 1:6:2]
        pointer = out.data_ptr()
        result = op(data(dev, (4, 5))[:, :3], out=out)
        assert result is out and out.data_ptr() == pointer
        return a

    check_devices(scenario, allow_fallback=True)


def test_out_of_the_wrong_size_is_resized_with_torchs_warning():
    op = unary_op()

    def scenario(dev):
        out = torch.zeros(3, device=dev)
        (result, caught) = recorded_warnings(lambda: op(data(dev), out=out))
        resize_warnings = [m for m in caught if "resized" in m]
        return result, out, len(resize_warnings)

    check_devices(scenario, allow_fallback=True)


def test_several_outputs_and_out_tuple():
    op = two_output_op()

    def scenario(dev):
        x = data(dev)
        values, indices = op(x, 1)
        out = (torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev))
        result = op(x, 0, out=out)
        assert result[0] is out[0] and result[1] is out[1]
        return values, indices, out

    check_devices(scenario, allow_fallback=True)


def test_gradients_flow_through_a_fallback_op():
    op = unary_op()

    def scenario(dev):
        x = data(dev).requires_grad_()
        (op(x) * torch.arange(5.0, device=dev)).sum().backward()
        return x.grad

    check_devices(scenario, allow_fallback=True)


def test_cpu_kernel_sees_the_tiny_layout():
    # The CPU's det factors the transpose of a contiguous input, and its gradient formula decides the same
    # way from the tiny tensor: the CPU copy of a strided view must stay a strided view.
    det = without_kernel([(torch.linalg.det, ["aten::_linalg_det", "aten::_linalg_det.result"])])

    def scenario(dev):
        torch.manual_seed(0)
        base = torch.randn(5, 10).to(dev).requires_grad_()
        det(base[:, ::2]).backward()
        return base.grad

    check_devices(scenario, allow_fallback=True)


def test_out_resized_by_the_fallback_takes_the_cpu_strides():
    lu_factor = without_kernel([(torch.linalg.lu_factor, ["aten::linalg_lu_factor_ex.out"])])

    def scenario(dev):
        torch.manual_seed(0)
        out = (torch.empty(0, device=dev), torch.empty(0, dtype=torch.int32, device=dev))
        lu_factor(torch.randn(4, 4).to(dev), out=out)
        return out  # the factors are column-major on the CPU

    check_devices(scenario, allow_fallback=True)


def test_out_list_is_written_and_nothing_returned():
    unbind_copy = without_kernel([(torch.unbind_copy, ["aten::unbind_copy.int_out"])])

    def scenario(dev):
        out = [torch.empty(5, device=dev) for _ in range(4)]
        assert unbind_copy(data(dev), 0, out=out) is None
        return out

    check_devices(scenario, allow_fallback=True)


def test_stats_count_fallback_calls_per_op():
    op = unary_op()
    x = data(DEVICE)
    torch.tiny.synchronize()
    torch.tiny.reset_stats()
    op(x)
    op(x)
    stats = torch.tiny.stats()
    assert stats["fallbacks"] == 2
    assert len(stats["fallback_ops"]) == 1
    ((name, count),) = stats["fallback_ops"].items()
    assert name.startswith("aten::") and count == 2
    torch.tiny.reset_stats()
    assert torch.tiny.stats()["fallbacks"] == 0 and torch.tiny.stats()["fallback_ops"] == {}


def test_native_ops_do_not_count_as_fallbacks():
    x = data(DEVICE)
    (_, used) = fallback_delta(lambda: ((x + 1) * 2).cpu())
    assert used == {}


def test_fallback_warns_once_per_op():
    # A fresh process: the warning is once per op for the life of the process.
    script = textwrap.dedent(
        """
        import warnings
        import torch
        import torch_tiny
        x = torch.linspace(-1, 1, 10, device="tiny").reshape(2, 5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch._add_relu(x, x); torch._add_relu(x * 2, x); torch.poisson(x.abs())
        print("\\n".join(str(w.message) for w in caught if "tiny:" in str(w.message)))
        """
    )
    if any(
        torch._C._dispatch_has_kernel_for_dispatch_key(n, "PrivateUse1")
        for n in ("aten::_add_relu.out", "aten::poisson")
    ):
        pytest.skip("_add_relu or poisson now has a tiny kernel")
    env = {k: v for k, v in os.environ.items() if k != "TINY_FALLBACK"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, lines
    assert "_add_relu" in lines[0] and "poisson" in lines[1]
    assert all("has no tiny kernel; it runs on the CPU" in line for line in lines)


def test_disabled_fallback_raises_an_error_naming_the_op(monkeypatch):
    op = unary_op()
    x = data(DEVICE)
    torch.tiny.synchronize()
    before = torch.tiny.stats()["fallbacks"]
    monkeypatch.setenv("TINY_FALLBACK", "0")
    with pytest.raises(RuntimeError, match=r"tiny: aten::\S+ has no tiny kernel and the CPU fallback is disabled"):
        op(x)
    assert torch.tiny.stats()["fallbacks"] == before
    monkeypatch.delenv("TINY_FALLBACK")
    assert_same(op(x), op(x.cpu()))


def test_disabled_fallback_leaves_an_inplace_target_unchanged(monkeypatch):
    op = inplace_op()
    a = data(DEVICE)
    monkeypatch.setenv("TINY_FALLBACK", "0")
    with pytest.raises(RuntimeError, match="TINY_FALLBACK=0"):
        op(a[1:])
    assert_same(a, data("cpu"))


def test_view_op_without_kernel_is_refused_not_copied():
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::view_as_complex", "PrivateUse1"):
        pytest.skip("view_as_complex now has a tiny kernel")
    x = torch.zeros(3, 2, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"tiny: aten::view_as_complex is a view op with no tiny kernel"):
        torch.view_as_complex(x)


def test_random_op_draws_from_the_tiny_generator_like_the_cpu():
    op = random_op()
    torch.manual_seed(7)
    expected = op(rates("cpu"))
    torch.tiny.manual_seed(7)
    state = torch.tiny.get_rng_state()
    actual = op(rates(DEVICE))
    assert_same(actual, expected)
    assert not torch.equal(torch.tiny.get_rng_state(), state), "the tiny generator did not advance"
    again = op(rates(DEVICE))
    assert not torch.equal(again.cpu(), actual.cpu())


def test_random_op_accepts_a_tiny_generator():
    op = random_op()
    g = torch.Generator(device=DEVICE)
    g.manual_seed(3)
    first = op(rates(DEVICE), generator=g)
    g.manual_seed(3)
    assert_same(op(rates(DEVICE), generator=g), first.cpu())
    cpu = torch.Generator()
    cpu.manual_seed(3)
    assert_same(first, op(rates("cpu"), generator=cpu))
