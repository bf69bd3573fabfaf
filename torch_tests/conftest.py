"""Shared helpers: run the same code on PyTorch's CPU and on tiny, and compare what a user sees.

Every check in this suite is relative to PyTorch on the CPU: values (within float tolerance),
dtype, shape, strides, storage offset, aliasing, and the type of any exception. Nothing is compared
against numbers copied from tiny's own output.
"""

import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torch_tiny  # noqa: F401  (registers torch.device("tiny") and torch.tiny)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import conv_block  # noqa: E402, F401  (the demo's block, for tests that build small CNNs)

DEVICE = "tiny"


def _cpu_lowering():
    try:
        return torch.tiny.get_device_name().startswith("tiny CPU")
    except RuntimeError:  # the device cannot run here: every test skips (see below)
        return True


# The CPU device's lowering (TINY_DEVICE unset); a GPU device's (TINY_DEVICE=CL) realizes row reductions in kernels
# of their own and reads operands as they are stored.
CPU_LOWERING = _cpu_lowering()

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool,)


def rand(*shape, dtype=torch.float32, seed=0):
    """Seeded CPU values: normal floats, small ints in [-5, 5)."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(-5, 5, shape, generator=g, dtype=dtype)


def tol(dtype):
    """float16/bfloat16 results round differently from torch's float32-then-round: a looser check."""
    return {"rtol": 2e-2, "atol": 2e-2} if dtype in (torch.float16, torch.bfloat16) else {}


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def by_dtype(dtypes=ALL_DTYPES):
    """pytest.mark.parametrize over dtypes, with readable ids."""
    return pytest.mark.parametrize("dtype", dtypes, ids=dtype_name)


class CpuUnsupported(Exception):
    """PyTorch's CPU backend has no kernel for this op and dtype, so there is nothing to match."""


# ---------------------------------------------------------------------------------------------
# Moving test inputs to a device without changing their layout


def on_device(x, device):
    """A copy of x on device with the same sizes, strides and storage offset.

    Works through lists, tuples and dicts. The copy owns a fresh storage of the same size as x's,
    so a non-contiguous input stays non-contiguous (outputs inherit layout from inputs in torch).
    """
    if isinstance(x, torch.Tensor):
        return _copy_with_layout(x, device)
    if isinstance(x, (list, tuple)):
        return type(x)(on_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: on_device(v, device) for k, v in x.items()}
    return x


def _copy_with_layout(t, device):
    storage_elems = t.untyped_storage().nbytes() // t.element_size()
    simple = t.is_contiguous() and t.storage_offset() == 0 and t.numel() == storage_elems
    if simple:
        return t.detach().to(device, copy=True)
    flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (storage_elems,), (1,))
    return flat.to(device, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())


# ---------------------------------------------------------------------------------------------
# Comparing a tiny result with the CPU result


def assert_optimizer_steps_match_cpu(make):
    """Three training steps of a small MLP with the optimizer make(parameters) on the CPU and on tiny: the losses and
    the final parameters agree."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x, y = torch.randn(6, 5), torch.randn(6, 2)
    results = []
    for dev in ("cpu", DEVICE):
        m = copy.deepcopy(model).to(dev)
        opt = make(m.parameters())
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results.append((losses, [p.detach() for p in m.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for a, e in zip(results[1][1], results[0][1], strict=True):
        assert_same(a, e, rtol=1e-5, atol=1e-6)


def assert_same(actual, expected, *, path="result", rtol=None, atol=None):
    """actual (from tiny) matches expected (from CPU): tensors by metadata and values, containers
    element by element, Python scalars by type and value."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, tiny gave {type(actual).__name__}"
        assert actual.device.type == DEVICE, f"{path}: on {actual.device}, expected a {DEVICE} tensor"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype}, CPU gives {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {tuple(actual.shape)}, CPU gives {tuple(expected.shape)}"
        assert actual.stride() == expected.stride(), f"{path}: strides {actual.stride()}, CPU gives {expected.stride()}"
        assert actual.storage_offset() == expected.storage_offset(), (
            f"{path}: storage_offset {actual.storage_offset()}, CPU gives {expected.storage_offset()}"
        )
        torch.testing.assert_close(
            actual.cpu(),
            expected,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m: f"{path} ({dtype_name(expected.dtype)}): {m}",
        )
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)), f"{path}: expected a sequence, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)}, CPU gives {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, path=f"{path}[{i}]", rtol=rtol, atol=atol)
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), f"{path}: keys differ"
        for k in expected:
            assert_same(actual[k], expected[k], path=f"{path}[{k!r}]", rtol=rtol, atol=atol)
    elif isinstance(expected, float):
        assert type(actual) is float, f"{path}: {type(actual).__name__}, CPU gives float"
        if math.isnan(expected):
            assert math.isnan(actual), f"{path}: {actual}, CPU gives nan"
        else:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{path}: {m}")
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__}, CPU gives {type(expected).__name__}"
        assert actual == expected, f"{path}: {actual!r}, CPU gives {expected!r}"


def _aliasing(result, inputs):
    """Which inputs each output tensor is (identity) or shares storage with, by position."""
    flat_in = [t for t in _tensors(inputs)]
    facts = []
    for out in _tensors(result):
        same = [i for i, t in enumerate(flat_in) if out is t]
        ptr = out.untyped_storage().data_ptr()
        shared = [i for i, t in enumerate(flat_in) if ptr != 0 and t.untyped_storage().data_ptr() == ptr]
        facts.append((same, shared))
    return facts


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)


def _run(fn, args, device):
    inputs = on_device(args, device)
    try:
        return fn(*inputs), None, inputs
    except Exception as e:  # compared with the other device's outcome by the caller
        return None, e, inputs


def _is_cpu_unsupported(error):
    # CPU kernels raise NotImplementedError for dtypes they lack ("abs_cpu" not implemented for 'Bool').
    return isinstance(error, NotImplementedError)


def _fallback_count():
    # Kept apart from the stats tests: a broken stats() must not fail every value comparison.
    try:
        return torch.tiny.stats()["fallbacks"]
    except Exception:
        return None


def check(fn, *args, rtol=None, atol=None, allow_fallback=False, allow_cpu_unsupported=False):
    """Run fn(*args) on CPU copies and on tiny copies of args, and compare.

    If the CPU raises, tiny must raise the same exception type at the call, and every input keeps
    its value. Otherwise results match (values, dtype, shape, strides, storage offset, which input
    an output is or aliases), and inputs match afterwards (in-place and out= effects).
    With allow_cpu_unsupported, a NotImplementedError on the CPU raises CpuUnsupported instead.
    """
    return _compare(
        lambda dev: _run(fn, args, dev),
        rtol,
        atol,
        allow_fallback,
        allow_cpu_unsupported,
    )


def check_devices(fn, *, rtol=None, atol=None, allow_fallback=False, allow_cpu_unsupported=False):
    """Like check, for code that builds its own tensors: fn(device) runs once per device."""

    def run(dev):
        try:
            return fn(dev), None, ()
        except Exception as e:  # compared by the caller
            return None, e, ()

    return _compare(run, rtol, atol, allow_fallback, allow_cpu_unsupported)


def _compare(run, rtol, atol, allow_fallback, allow_cpu_unsupported):
    expected, cpu_error, cpu_inputs = run("cpu")
    if cpu_error is not None and allow_cpu_unsupported and _is_cpu_unsupported(cpu_error):
        raise CpuUnsupported(str(cpu_error).splitlines()[0])
    before = _fallback_count()
    actual, tiny_error, tiny_inputs = run(DEVICE)
    after = _fallback_count()
    used_fallback = after - before if None not in (before, after) else 0
    if cpu_error is not None:
        cpu_kind = type(cpu_error).__name__
        if tiny_error is None:
            pytest.fail(f"CPU raises {cpu_kind} ({_first_line(cpu_error)}) at the call; tiny did not raise")
        assert type(tiny_error) is type(cpu_error), (
            f"CPU raises {cpu_kind} ({_first_line(cpu_error)}); "
            f"tiny raises {type(tiny_error).__name__} ({_first_line(tiny_error)})"
        )
        assert_same(tiny_inputs, cpu_inputs, path="inputs after the error", rtol=rtol, atol=atol)
        return
    if tiny_error is not None:
        raise AssertionError(
            f"tiny raises {type(tiny_error).__name__}: {_first_line(tiny_error)} (CPU succeeds)"
        ) from tiny_error
    assert _aliasing(actual, tiny_inputs) == _aliasing(expected, cpu_inputs), (
        "outputs alias inputs differently from CPU: "
        f"tiny {_aliasing(actual, tiny_inputs)}, CPU {_aliasing(expected, cpu_inputs)}"
    )
    assert_same(actual, expected, rtol=rtol, atol=atol)
    assert_same(tiny_inputs, cpu_inputs, path="inputs afterwards", rtol=rtol, atol=atol)
    if not allow_fallback:
        assert used_fallback == 0, f"tiny ran {used_fallback} op(s) through the CPU fallback"


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else "(no message)"


# ---------------------------------------------------------------------------------------------
# Counting what tiny runs


class counting:
    """Counters of torch.tiny.stats() over a with-block, starting from nothing pending:

    with counting() as c:
        ...
    assert c["kernels"] == 1
    """

    def __enter__(self):
        torch.tiny.synchronize()
        torch.tiny.reset_stats()
        self.stats = None
        return self

    def __exit__(self, *exc):
        self.stats = torch.tiny.stats()
        return False

    def __getitem__(self, key):
        return (self.stats if self.stats is not None else torch.tiny.stats())[key]


def run_with(tmp_path, script, **env_vars):
    """Runs script (which prints "ok" at its end) in a fresh process with these environment variables and an empty
    kernel cache, torch_tests/ on its path; its stderr."""
    env = dict(os.environ, TINY_CACHE_DIR=str(tmp_path), **env_vars)
    here = Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent), str(here), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]
    return proc.stderr


def conv2d_gradient_kernels(x, w, gy, wanted, **options):
    """The kernels tiny runs for the gradients of F.conv2d(x, w, **options) at grad_output gy (CPU tensors): the
    input's alone (wanted=1) or the input's and the weight's (2); and those gradients."""
    x, w = x.to("tiny").requires_grad_(), w.to("tiny").requires_grad_()
    y = torch.nn.functional.conv2d(x, w, **options)
    torch.tiny.synchronize()
    with counting() as c:
        grads = torch.autograd.grad(y, [x, w][:wanted], gy.to("tiny"))
        torch.tiny.synchronize()
    return c["kernels"], grads


def recorded_warnings(fn):
    """Run fn, return (result, [warning messages])."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught]


def with_grads(fn, *inputs, grad_seed=5, wrt=None):
    """fn's result and the gradients of its float inputs (the first `wrt` inputs when given) for a random
    upstream gradient, on the CPU and on tiny: ((result, grads) on CPU, (result, grads) on tiny)."""
    results = []
    for dev in ("cpu", DEVICE):
        leaves = [
            x.detach().to(dev).requires_grad_()
            if isinstance(x, torch.Tensor) and x.is_floating_point() and (wrt is None or i < wrt)
            else x
            for i, x in enumerate(inputs)
        ]
        moved = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in leaves]
        out = fn(*moved)
        g = rand(out.numel() + 1, dtype=out.dtype, seed=grad_seed)[: out.numel()].reshape(out.shape).to(dev)
        wanted = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = torch.autograd.grad(out, wanted, g, allow_unused=True)
        results.append((out, grads))
    return results[0], results[1]


def check_half_against_float32(fn, *args, rtol, atol):
    """For float16/bfloat16 kernels whose CPU version rounds intermediates to the half type (which ones
    depends on the CPU's instruction set: conv_transpose differs between AVX2 and AVX-512 machines),
    while tiny computes in float32 and rounds once: tiny's result has the CPU's dtype, shape and strides,
    and is as close to the float32 computation as the CPU's is, or within rtol/atol of it."""
    expected = fn(*args)
    exact = fn(*[a.float() if isinstance(a, torch.Tensor) else a for a in args])
    actual = fn(*on_device(args, DEVICE))
    assert (actual.dtype, actual.shape, actual.stride()) == (expected.dtype, expected.shape, expected.stride())
    tiny_error = (actual.cpu().float() - exact).abs()
    cpu_error = (expected.float() - exact).abs()
    allowed = torch.maximum(cpu_error, atol + rtol * exact.abs())
    worst = (tiny_error - allowed).argmax()
    assert (tiny_error <= allowed).all(), (
        f"tiny is {tiny_error.flatten()[worst]:.4g} from the float32 result at flat index {worst}, "
        f"the CPU {cpu_error.flatten()[worst]:.4g}"
    )


def pytest_collection_modifyitems(config, items):
    """With TINY_DEVICE=CL (make test's CL_TESTS, make test-cl) every test skips, saying why, where the
    CL device cannot run here (no libOpenCL.so.1, no OpenCL platform with a device)."""
    try:
        torch.tiny.get_device_name()
    except RuntimeError as e:
        skip = pytest.mark.skip(reason=str(e))
        for item in items:
            item.add_marker(skip)


@pytest.fixture
def native(monkeypatch):
    """No op may run through the CPU fallback: it raises, and the fallback counter stays put."""
    monkeypatch.setenv("TINY_FALLBACK", "0")
    torch.tiny.synchronize()
    before = torch.tiny.stats()["fallbacks"]
    yield
    torch.tiny.synchronize()
    assert torch.tiny.stats()["fallbacks"] == before


def kernel_sources(code, tmp_path):
    """The C source of each kernel that `code` (a script importing torch_tiny) compiles, from TINY_DEBUG=3 in a fresh
    process with its own kernel cache, without the prelude of functions every source starts with."""
    env = dict(os.environ, TINY_DEBUG="3", TINY_CACHE_DIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = [
        s[s.index("\nvoid ") :] for s in re.split(r"^tiny: kernel .*$", proc.stderr, flags=re.M) if "\nvoid " in s
    ]
    assert kernels, proc.stderr[-3000:]
    return kernels
