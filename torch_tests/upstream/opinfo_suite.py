"""PyTorch's own operator database (op_db) against tiny, sample by sample, with CPU as the reference.

For every OpInfo, through torch.testing._internal's device-generic machinery (`instantiate_device_type_tests`
with `only_for=("tiny",)` and `@ops(op_db)`):

    forward        each sample on tiny against the same sample on the CPU (values, dtype, shape), for each
                   dtype the op supports on the CPU among FORWARD_DTYPES
    backward       torch.autograd.grad of each sample (same upstream gradient) against the CPU, float32
    out            out=: the result is the given out tensor, its data_ptr unchanged, its values right
                   (one dtype, float32 when the op has it, as upstream's test_out)
    noncontiguous  sample.noncontiguous() on tiny against the same on the CPU, values and gradients
                   (float32 and int64, as upstream's test_noncontiguous_samples; the CPU gives the contiguous
                   sample's values wherever the op does not see layouts)

Where the CPU raises, tiny must raise the same exception type. Indices of equal elements (sort, argsort,
topk, kthvalue and mode without stable=True) pass when they name elements equal to the CPU's (TIES). Random ops
run with the same seed on both devices; a sample that draws random numbers on the CPU (an ATen op tagged
nondeterministic_seeded runs), and an op that returns uninitialized memory (empty), has its dtype and
shape compared, not its values (tiny's own random kernels draw on the device, with their own algorithm).
A float16 or bfloat16 result that differs from the CPU's passes when it is no further than the CPU's from
the op computed in float32 (as_accurate_as_cpu).

Run it with run.py (chunks in subprocesses, crash recovery, the summary); `pytest` on this file works too,
e.g. `pytest torch_tests/upstream/opinfo_suite.py -k "forward and _add_"`. Environment:
    TINY_FALLBACK=0            native mode: a sample that needs the CPU fallback counts as no_kernel
    TINY_UPSTREAM_OPS          comma-separated OpInfo names (name or name.variant) to instantiate
    TINY_UPSTREAM_KINDS        comma-separated kinds (default: all four)
    TINY_UPSTREAM_DTYPES       comma-separated dtypes (default: all of FORWARD_DTYPES; complex64 and
                               complex128 and complex32 only when named)
    TINY_UPSTREAM_RESULTS      a JSON-lines file each test appends its outcome to
    TINY_UPSTREAM_MAX_SAMPLES  check only the first N samples of each test
    TINY_UPSTREAM_RUN_KNOWN_CRASHES=1   run the known failures that crash or hang too
"""

import math
import os
import unittest

import pytest
import torch

import torch_tiny  # noqa: F401  (tiny must be registered before common_device_type is imported)

# Failures name their sample themselves; upstream's repro note would name the last sample generated.
os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")

from opinfo_record import (  # noqa: E402
    KINDS,
    SampleSkip,
    Tally,
    Timer,
    dtype_name,
    known_failure,
    max_samples,
    missing_kernel,
    mode,
    not_to_run,
    op_id,
    outcome,
    write_result,
)
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase, noncontiguous_like  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

DEVICE = "tiny"
FORWARD_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
)
# (rtol, atol) against the CPU: a few ulps for the half types, room for another summation order in float32,
# tight enough in float64 to catch a computation done in float32. Integers and bool compare exactly.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.complex64: (1e-4, 1e-4),
    torch.complex128: (1e-7, 1e-7),
    torch.complex32: (2e-3, 1e-3),
}
# Dtypes that run only when TINY_UPSTREAM_DTYPES names them (run.py's full slice does; the ci slice when
# --dtypes names them).
OPT_IN_DTYPES = (torch.complex64, torch.complex128, torch.complex32)
SEED = 1234
# OpInfos whose results are uninitialized memory: dtype and shape are compared, not values (as upstream's
# test_compare_cpu skips them).
UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
# Arguments an op takes on the CPU whatever the device of its input (torch requires them there): the sample
# keeps them on the CPU. op name -> positions in the sample's args.
CPU_ARGS = {"tensor_split": (0,)}


# Ops whose index results may name any of several equal elements (ties): torch documents the order of equal
# elements as unspecified unless stable=True, and its CPU kernels pick by algorithm (std::sort,
# quickselect), so an index that differs from the CPU's passes when it names an element equal to the one
# the CPU's index names (and, for sort and topk, no element twice). op name -> the sample's (dim, stable).
TIES = {
    "sort": lambda input, dim=-1, descending=False, stable=False, **kw: (dim, stable),
    "argsort": lambda input, dim=-1, descending=False, stable=False, **kw: (dim, stable),
    "topk": lambda input, k, dim=-1, largest=True, sorted=True, **kw: (dim, False),
    "kthvalue": lambda input, k, dim=-1, keepdim=False, **kw: (dim, False),
    # which of the positions holding the mode value: the CPU's sort of a long slice leaves it open
    "mode": lambda input, dim=-1, keepdim=False, **kw: (dim, False),
}


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name, "").strip()
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


_op_filter = _env_list("TINY_UPSTREAM_OPS")
SELECTED_OPS = [op for op in op_db if _op_filter is None or op_id(op) in _op_filter]
SELECTED_KINDS = _env_list("TINY_UPSTREAM_KINDS") or list(KINDS)
_dtype_filter = _env_list("TINY_UPSTREAM_DTYPES")
SELECTED_DTYPES = tuple(d for d in FORWARD_DTYPES if _dtype_filter is None or dtype_name(d) in _dtype_filter) + tuple(
    d for d in OPT_IN_DTYPES if _dtype_filter is not None and dtype_name(d) in _dtype_filter
)


# ---------------------------------------------------------------------------------------------
# Moving samples between devices


def _copy_tensor(t: torch.Tensor, device: str) -> torch.Tensor:
    """A copy of t on device with the same sizes, strides and storage offset (a fresh storage of t's size),
    a leaf that requires grad when t does."""
    with torch.no_grad():
        # a sparse tensor has no storage of its own: .to() moves its indices and values
        storage_elems = t.untyped_storage().nbytes() // t.element_size() if t.layout == torch.strided else 0
        if t.layout != torch.strided or t.numel() == 0:
            copy = t.detach().to(device)
        elif t.is_contiguous() and t.storage_offset() == 0 and t.numel() == storage_elems:
            copy = t.detach().to(device, copy=True)
        else:
            flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (storage_elems,), (1,))
            copy = flat.to(device, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())
            # the storage holds what a conjugate (negative) view shows conjugated (negated): keep the bits
            if t.is_conj():
                copy = copy.conj()
            if t.is_neg():
                copy = copy._neg_view()
    return copy.detach().requires_grad_(t.requires_grad)


def to_device(x, device: str = DEVICE, memo: dict | None = None):
    """x with every tensor copied to device (through lists, tuples, dicts); a tensor met twice is copied once.
    The CPU device, as a torch.device or "cpu" (samples of factories and of Tensor.to carry it), becomes device."""
    memo = {} if memo is None else memo
    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            memo[id(x)] = _copy_tensor(x, device)
        return memo[id(x)]
    if (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu"):
        return torch.device(device) if isinstance(x, torch.device) else device
    if isinstance(x, list):
        return [to_device(v, device, memo) for v in x]
    if isinstance(x, tuple):
        items = [to_device(v, device, memo) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return {k: to_device(v, device, memo) for k, v in x.items()}
    return x


class Sample:
    """A SampleInput's call: input, args and kwargs, on one device."""

    def __init__(self, sample, device: str | None = None, op=None):
        parts = (sample.input, sample.args, sample.kwargs)
        if device is not None:
            parts = to_device(parts, device)
        self.input, self.args, self.kwargs = parts
        keep = CPU_ARGS.get(op.name, ()) if op is not None else ()
        if keep:
            self.args = tuple(sample.args[i] if i in keep else a for i, a in enumerate(self.args))
        self.process = sample.output_process_fn_grad
        self.device = device

    def __call__(self, op, **extra):
        torch.manual_seed(SEED)  # seeds the CPU and tiny generators alike
        if self.device is None:
            return op(self.input, *self.args, **self.kwargs, **extra)
        with torch.device(self.device):  # factories in the sample (torch.arange(2)) make tiny tensors
            return op(self.input, *self.args, **self.kwargs, **extra)

    def grad_inputs(self) -> list[torch.Tensor]:
        return [t for t in flatten((self.input, self.args, self.kwargs)) if t.requires_grad]


def flatten(x):
    """The tensors in x, depth first."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from flatten(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from flatten(v)


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        items = [to_cpu(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------------------------------------
# Comparing


class Tolerance:
    def __init__(self, test: TestCase):
        # An OpInfo's toleranceOverride/precisionOverride (set on the test for its dtype) loosens ours.
        self.atol_floor = getattr(test, "precision", 0) or 0
        self.rtol_floor = getattr(test, "rel_tol", 0) or 0

    def __call__(self, dtype) -> tuple[float, float]:
        if dtype not in TOLERANCES:
            return (0.0, 0.0) if not (dtype.is_floating_point or dtype.is_complex) else (1e-4, 1e-4)
        rtol, atol = TOLERANCES[dtype]
        return max(rtol, self.rtol_floor), max(atol, self.atol_floor)


def assert_same(actual, expected, tol: Tolerance, *, values: bool = True, on_tiny: bool = True, path="result"):
    """actual matches expected (a CPU result): tensors by dtype, shape and values (actual on tiny when
    on_tiny), containers element by element, Python scalars by type and value."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: a {type(actual).__name__}, CPU gives a tensor"
        if on_tiny and expected.device.type == "cpu":
            assert actual.device.type == DEVICE, f"{path}: on {actual.device}, expected a tiny tensor"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype}, CPU gives {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {tuple(actual.shape)}, CPU gives {tuple(expected.shape)}"
        if not values:
            return
        rtol, atol = tol(expected.dtype)
        torch.testing.assert_close(
            actual.detach().cpu(),
            expected.detach(),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            check_device=False,
            check_stride=False,
            msg=lambda m: f"{path} ({dtype_name(expected.dtype)}): {' '.join(m.split())}",
        )
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)), f"{path}: a {type(actual).__name__}, CPU gives a sequence"
        assert len(actual) == len(expected), f"{path}: {len(actual)} items, CPU gives {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, tol, values=values, on_tiny=on_tiny, path=f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), f"{path}: keys differ"
        for k in expected:
            assert_same(actual[k], expected[k], tol, values=values, on_tiny=on_tiny, path=f"{path}[{k!r}]")
    elif expected is None:
        assert actual is None, f"{path}: {type(actual).__name__}, CPU gives None"
    elif isinstance(expected, (float, complex)) and not isinstance(expected, bool):
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__}, CPU gives {type(expected).__name__}"
        if values and not (math.isnan(abs(expected)) and math.isnan(abs(actual))):
            rtol, atol = tol(torch.float64)
            assert abs(actual - expected) <= atol + rtol * abs(expected), f"{path}: {actual!r}, CPU gives {expected!r}"
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__}, CPU gives {type(expected).__name__}"
        assert not values or actual == expected, f"{path}: {actual!r}, CPU gives {expected!r}"


def run_both(cpu_call, tiny_call):
    """(expected, actual). Where the CPU raises, tiny must raise the same exception type, and None is
    returned: the sample passes. An error of tiny's own (a CPU success) propagates. tiny runs first:
    natively, a sample that needs a kernel tiny lacks ends there, without the CPU's work."""
    actual = tiny_error = None
    try:
        actual = tiny_call()
    except SampleSkip:
        raise
    except Exception as e:
        if missing_kernel(e) is not None:
            raise
        tiny_error = e
    try:
        expected = cpu_call()
    except SampleSkip:
        raise
    except Exception as cpu_error:
        cpu_said = f"CPU raises {type(cpu_error).__name__} ({str(cpu_error).strip()[:150]})"
        if tiny_error is None:
            raise AssertionError(f"{cpu_said}; tiny does not") from None
        if type(tiny_error) is type(cpu_error):
            return None
        raise AssertionError(
            f"{cpu_said}; tiny raises {type(tiny_error).__name__} ({str(tiny_error).strip()[:150]})"
        ) from tiny_error
    if tiny_error is not None:
        raise tiny_error
    return expected, actual


class _SeededOps(TorchDispatchMode):
    """Notes whether an ATen op tagged nondeterministic_seeded (a random op) runs."""

    seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen = self.seen or torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


def random_on_cpu(op, sample: Sample) -> bool:
    """Whether the op draws random numbers on the CPU (its ATen ops say so, even when the OpInfo seeds the
    generator itself, as wrapper_set_seed does)."""
    mode = _SeededOps()
    try:
        with mode:
            sample(op)
    except Exception:
        return False
    return mode.seen


def check_values(tally: Tally, op, cpu: Sample, actual, expected, tol: Tolerance, path="result", process=True):
    """actual (tiny) against expected (CPU); for a random op or uninitialized memory, dtype and shape only
    (the gradients of a random op too: they depend on what it drew)."""
    if op.name in UNINITIALIZED:
        assert_same(actual, expected, tol, values=False, path=path)
        tally.values_not_compared += 1
        return
    try:
        assert_same(actual, expected, tol, path=path)
    except AssertionError:
        if op.name in TIES and path.endswith("result") and same_up_to_ties(op, cpu, actual, expected, tol):
            return
        if not random_on_cpu(op, cpu):
            if path.endswith("result") and as_accurate_as_cpu(op, cpu, actual, expected, tol):
                return
            # output_process_fn_grad settles results that are right up to a choice (signs of singular vectors)
            if not process:
                raise
            try:
                assert_same(cpu.process(actual), cpu.process(expected), tol, path=path)
                return
            except Exception:
                pass
            raise
        assert_same(actual, expected, tol, values=False, path=path)
        tally.values_not_compared += 1


def _upcast(x, dtype):
    """x with every tensor of dtype made float32 (detached)."""
    if isinstance(x, torch.Tensor):
        return x.detach().float() if x.dtype == dtype else x
    if isinstance(x, (list, tuple)):
        items = [_upcast(v, dtype) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return {k: _upcast(v, dtype) for k, v in x.items()}
    return x


def as_accurate_as_cpu(op, cpu: Sample, actual, expected, tol: Tolerance) -> bool:
    """For float16 and bfloat16 results: tiny is no further than the CPU from the op computed in float32 on
    the same inputs (up to the dtype's tolerance). torch's CPU kernels round some intermediates to the
    half type (a product before the sum, one interpolated dimension before the next) where tiny keeps
    float32 and rounds once; both are a few ulps from the float32 result, on different sides."""
    reduced = [t for t in flatten(expected) if t.dtype in (torch.float16, torch.bfloat16)]
    if not reduced:
        return False
    dtype = reduced[0].dtype
    upcast = Sample.__new__(Sample)
    upcast.__dict__.update(cpu.__dict__)
    upcast.input, upcast.args, upcast.kwargs = _upcast((cpu.input, cpu.args, cpu.kwargs), dtype)
    try:
        reference = upcast(op)
    except Exception:
        return False
    actual, expected, reference = list(flatten(actual)), list(flatten(expected)), list(flatten(reference))
    if not len(actual) == len(expected) == len(reference):
        return False
    for a, e, r in zip(actual, expected, reference, strict=True):
        if e.dtype not in (torch.float16, torch.bfloat16):
            assert_same(a, e, tol)
            continue
        if a.dtype != e.dtype or a.shape != e.shape or r.shape != e.shape or r.dtype != torch.float32:
            return False
        rtol, atol = tol(e.dtype)
        rounded = r.detach().to(e.dtype).double()
        a, e, r = a.detach().cpu().double(), e.detach().double(), r.detach().double()
        ok = ((a - r).abs() <= (e - r).abs() + atol + rtol * r.abs()) | (a == e) | (a.isnan() & e.isnan())
        # a NaN of the CPU's where the float32 result is a number (its half-type intermediates overflowed, as
        # matrix_exp's Pade terms do): tiny passes with that number, rounded
        ok |= e.isnan() & ~r.isnan() & (((a - r).abs() <= atol + rtol * r.abs()) | (a == rounded))
        if not bool(ok.all()):
            return False
    return True


def same_up_to_ties(op, cpu: Sample, actual, expected, tol: Tolerance) -> bool:
    """For an op of TIES (not asked to be stable): tiny's values match the CPU's, and its indices name
    elements equal to the ones the CPU's indices name (a permutation along dim for sort and argsort,
    distinct elements for topk). Raises the mismatch it finds."""
    dim, stable = TIES[op.name](cpu.input, *cpu.args, **cpu.kwargs)
    if stable:
        return False
    if op.name == "argsort":
        actual_indices, expected_indices = actual, expected
    else:
        assert_same(actual[0], expected[0], tol, path="result[0]")
        actual_indices, expected_indices = actual[1], expected[1]
    assert_same(actual_indices, expected_indices, tol, values=False, path="indices")
    indices = actual_indices.cpu()
    source = cpu.input.detach()
    if indices.dim() < source.dim():  # kthvalue and mode without keepdim
        indices, expected_indices = indices.unsqueeze(dim), expected_indices.unsqueeze(dim)
    torch.testing.assert_close(
        source.gather(dim, indices),
        source.gather(dim, expected_indices),
        rtol=0,
        atol=0,
        equal_nan=True,
        msg=lambda m: f"indices name other values than the CPU's: {' '.join(m.split())}",
    )
    if op.name not in ("kthvalue", "mode") and indices.dim() > 0 and indices.shape[dim] > 1:
        ordered = indices.sort(dim).values
        assert bool((ordered.diff(dim=dim) != 0).all()), "indices name an element twice"
    return True


def cpu_samples(tally: Tally, op, dtype, requires_grad=False) -> list:
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
    cap = max_samples()
    if cap is not None and len(samples) > cap:
        tally.not_run = len(samples) - cap
        samples = samples[:cap]
    return samples


def differentiable(outputs) -> list[torch.Tensor]:
    return [t for t in flatten(outputs) if t.requires_grad]


def grads(op, sample: Sample, upstream: list | None = None):
    """(outputs that require grad, upstream gradients, gradients of the sample's inputs that require grad)."""
    outputs = differentiable(sample.process(sample(op)))
    inputs = sample.grad_inputs()
    if not outputs or not inputs:
        raise SampleSkip("no differentiable output or no input that requires grad")
    if upstream is None:  # drawn on the CPU, so that both devices get the same whatever draws random numbers
        gen = torch.Generator().manual_seed(SEED + 7)
        upstream = [torch.randn(o.shape, dtype=o.dtype, generator=gen).to(o.device) for o in outputs]
    return outputs, upstream, torch.autograd.grad(outputs, inputs, upstream, allow_unused=True)


# ---------------------------------------------------------------------------------------------
# The four kinds


def check_forward(tally: Tally, op, dtype, tol: Tolerance):
    for i, s in enumerate(cpu_samples(tally, op, dtype)):
        with tally.sample(i):
            cpu, tiny = Sample(s), Sample(s, DEVICE, op)
            both = run_both(lambda cpu=cpu: cpu(op), lambda tiny=tiny: tiny(op))
            if both is not None:
                check_values(tally, op, cpu, both[1], both[0], tol)


def check_backward(tally: Tally, op, dtype, tol: Tolerance):
    for i, s in enumerate(cpu_samples(tally, op, dtype, requires_grad=True)):
        with tally.sample(i):
            cpu, tiny = Sample(s), Sample(s, DEVICE, op)
            both = run_both(lambda cpu=cpu: grads(op, cpu)[2], lambda tiny=tiny: grads(op, tiny)[2])
            if both is not None:
                check_values(tally, op, cpu, list(both[1]), list(both[0]), tol, path="grads", process=False)


def check_out(tally: Tally, op, dtype, tol: Tolerance):
    for i, s in enumerate(cpu_samples(tally, op, dtype)):
        with tally.sample(i):
            cpu, tiny = Sample(s), Sample(s, DEVICE, op)
            try:
                expected = cpu(op)
            except Exception as e:
                raise SampleSkip("the CPU raises without out=") from e
            single = isinstance(expected, torch.Tensor)
            if not single and not (
                isinstance(expected, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in expected)
            ):
                raise SampleSkip("the result is not a tensor or a sequence of tensors")
            cpu_out = torch.empty_like(expected) if single else type(expected)(torch.empty_like(t) for t in expected)
            tiny_out = to_device(cpu_out)
            pointers = [t.data_ptr() for t in flatten(tiny_out)]
            both = run_both(
                lambda cpu=cpu, out=cpu_out: cpu(op, out=out), lambda tiny=tiny, out=tiny_out: tiny(op, out=out)
            )
            if both is None:
                continue
            result = both[1]
            if both[0] is None:  # the out= overload returns nothing (split_with_sizes_copy): so must tiny's
                assert result is None, f"the result is a {type(result).__name__}, CPU's out= call returns None"
            elif single:
                assert result is tiny_out, "the result is not the out= tensor"
            else:
                assert len(result) == len(tiny_out) and all(r is o for r, o in zip(result, tiny_out, strict=True)), (
                    "the results are not the out= tensors"
                )
            assert [t.data_ptr() for t in flatten(tiny_out)] == pointers, "out= tensors moved (data_ptr changed)"
            check_values(tally, op, cpu, tiny_out, cpu_out, tol, path="out")


def check_noncontiguous(tally: Tally, op, dtype, tol: Tolerance):
    """sample.noncontiguous() on tiny against the same on the CPU: the contiguous sample's values wherever
    the op does not see layouts (an op that does, as_strided, gives the CPU's values for that layout)."""
    test_grad = dtype in op.supported_backward_dtypes("cpu")
    for i, s in enumerate(cpu_samples(tally, op, dtype, requires_grad=test_grad)):
        with tally.sample(i):
            n = s.noncontiguous()
            cpu, tiny = Sample(n), Sample(n, DEVICE, op)
            both = run_both(lambda cpu=cpu: cpu(op), lambda tiny=tiny: tiny(op))
            if both is None:
                continue
            check_values(tally, op, cpu, both[1], both[0], tol, path="noncontiguous result")
            if not test_grad:
                continue
            try:
                outputs, upstream, expected_grads = grads(op, cpu)
            except SampleSkip:
                continue  # the forward was checked: the sample counts
            upstream = [noncontiguous_like(g) for g in upstream]
            expected_grads = grads(op, cpu, upstream)[2]
            actual_grads = grads(op, tiny, [to_device(g) for g in upstream])[2]
            check_values(
                tally, op, cpu, list(actual_grads), list(expected_grads), tol, path="noncontiguous grads", process=False
            )


CHECKS = {
    "forward": check_forward,
    "backward": check_backward,
    "out": check_out,
    "noncontiguous": check_noncontiguous,
}


# ---------------------------------------------------------------------------------------------
# The test class


def run_kind(test: TestCase, kind: str, op, dtype):
    key = {"op": op_id(op), "kind": kind, "dtype": dtype_name(dtype), "mode": mode()}
    nodeid = f"{type(test).__name__}::{test._testMethodName}"
    write_result({"event": "start", "nodeid": nodeid, **key})
    tally, timer = Tally(key["op"], kind, key["dtype"]), Timer()
    fallback_before = dict(torch.tiny.stats()["fallback_ops"])
    known = known_failure(key["op"], kind, key["dtype"], key["mode"])
    error = None
    if not_to_run(known):
        result, reason = "xfail", "not run: " + known.reason
    else:
        try:
            CHECKS[kind](tally, op, dtype, Tolerance(test))
        except Exception as e:  # the test as a whole (sample generation, ...): recorded as its outcome
            error = e
        result, reason = outcome(tally, error)
    if known is not None and result == "fail":
        result = "xfail"
    elif known is not None and result == "pass":
        # With samples left out, the ones that fail may be among them.
        result = "xfail" if tally.not_run else "xpass"
    fallback_after = torch.tiny.stats()["fallback_ops"]
    fallback_ops = {
        k: v - fallback_before.get(k, 0) for k, v in fallback_after.items() if v != fallback_before.get(k, 0)
    }
    write_result(
        {
            "event": "end",
            "nodeid": nodeid,
            **key,
            "outcome": result,
            "reason": reason,
            "known_reason": known.reason if known else None,
            "samples": tally.counts,
            "values_not_compared": tally.values_not_compared,
            "not_run": tally.not_run,
            "missing": tally.missing,
            "fallback_ops": fallback_ops,
            "seconds": timer.seconds(),
        }
    )
    samples = sum(tally.counts.values())
    if result == "fail":
        test.fail(f"{tally.counts['fail']} of {samples} samples fail: {reason}")
    elif result == "xpass":
        test.fail(
            f"passes, but known_failures.txt lists {key['op']} {kind} {key['dtype']} ({known.reason}): remove the line"
        )
    elif result == "xfail":
        pytest.xfail(f"known failure: {known.reason}")
    elif result in ("skip", "no_kernel"):
        raise unittest.SkipTest(reason)


class TestTinyOpInfo(TestCase):
    if "forward" in SELECTED_KINDS and SELECTED_DTYPES:

        @ops(SELECTED_OPS, allowed_dtypes=SELECTED_DTYPES)
        def test_forward(self, device, dtype, op):
            run_kind(self, "forward", op, dtype)

    _autograd_ops = [op for op in SELECTED_OPS if op.supports_autograd]
    if "backward" in SELECTED_KINDS and torch.float32 in SELECTED_DTYPES and _autograd_ops:

        @ops(_autograd_ops, dtypes=OpDTypes.supported_backward, allowed_dtypes=(torch.float32,))
        def test_backward(self, device, dtype, op):
            run_kind(self, "backward", op, dtype)

    _out_ops = [op for op in SELECTED_OPS if op.supports_out]
    if "out" in SELECTED_KINDS and SELECTED_DTYPES and _out_ops:

        @ops(_out_ops, dtypes=OpDTypes.any_one, allowed_dtypes=SELECTED_DTYPES)
        def test_out(self, device, dtype, op):
            run_kind(self, "out", op, dtype)

    _noncontiguous_dtypes = tuple(d for d in (torch.float32, torch.int64) if d in SELECTED_DTYPES)
    if "noncontiguous" in SELECTED_KINDS and _noncontiguous_dtypes and SELECTED_OPS:

        @ops(SELECTED_OPS, allowed_dtypes=_noncontiguous_dtypes)
        def test_noncontiguous(self, device, dtype, op):
            run_kind(self, "noncontiguous", op, dtype)


instantiate_device_type_tests(TestTinyOpInfo, globals(), only_for=("tiny",))
