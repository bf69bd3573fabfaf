"""Compares the logs of one program run on two devices and names the first point where they differ.

Compared at every point: the exception type of a record that raised (messages may differ), the
metadata of every tensor a record defined (dtype, shape, strides, storage offset, requires_grad, which
named tensors share its storage, which one is its `_base`), and at observations and at the end also
values. Floats compare within a tolerance scaled by the tensor's largest finite magnitude, NaN equal to
NaN and infinities exactly; float16 and bfloat16 looser, since torch's CPU kernels round intermediates
to the half type where a fused kernel keeps float32. Integers and bools compare exactly.
"""

import os

import torch

# (rtol, atol relative to max(1, largest finite |value|))
TOLERANCE = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 2e-3),
    "bfloat16": (4e-2, 1e-2),
}


def loosest(*dtypes):
    """The float dtype of least precision among dtypes (TOLERANCE lists them tightest first); None
    entries are ignored, and None when there are none."""
    given = [d for d in dtypes if d is not None]
    return max(given, key=list(TOLERANCE).index) if given else None


TENSOR_FIELDS = ("dtype", "shape", "stride", "offset", "requires_grad", "base", "shares")
# The stride of a size-1 dim, and every stride of an empty tensor, address nothing: torch's own checks
# (is_contiguous, view) ignore them, and TensorIterator fills them from whichever input it looks at.
# They are compared only with --strict-strides (FUZZ_STRICT_STRIDES=1).
STRICT_STRIDES = os.environ.get("FUZZ_STRICT_STRIDES") == "1"


def _layout(s):
    if STRICT_STRIDES:
        return s["stride"]
    if 0 in s["shape"]:
        return ()
    return tuple(st if n > 1 else None for n, st in zip(s["shape"], s["stride"], strict=True))


def compare(cpu_log, tiny_log, program_len):
    """None when the logs agree, else a dict naming the first difference."""
    for i, (a, b) in enumerate(zip(cpu_log, tiny_log, strict=False)):
        where = f"record {i}" if i < program_len else _end_where(a)
        if a[0] != b[0]:
            if "raise" in (a[0], b[0]):
                return _mismatch(i, where, "raise", _outcome(a), _outcome(b))
            return _mismatch(i, where, "flow", a[0], b[0])
        if a[0] == "raise":
            if a[1] != b[1]:
                return _mismatch(i, where, "raise", _outcome(a), _outcome(b))
            continue
        if a[0] in ("def", "obs"):
            diff = _compare_summary(a[1], b[1], "", a[2] if a[0] == "obs" else None)
        elif a[0] in ("end", "grad"):
            if a[1] != b[1]:
                return _mismatch(i, where, "flow", a[1], b[1])
            diff = _compare_summary(a[2], b[2], "", a[3])
        else:
            continue
        if diff:
            category, path, ca, cb = diff
            return _mismatch(i, where + path, category, ca, cb, name=a[1] if a[0] in ("end", "grad") else None)
    if len(cpu_log) != len(tiny_log):
        i = min(len(cpu_log), len(tiny_log))
        return _mismatch(i, "end", "flow", f"{len(cpu_log)} entries", f"{len(tiny_log)} entries")
    return None


def _end_where(entry):
    if entry[0] == "end":
        return f"end {entry[1]}"
    if entry[0] == "grad":
        return f"end {entry[1]}.grad"
    return "end"


def _outcome(entry):
    if entry[0] == "raise":
        return f"raises {entry[1]}: {entry[2]}"
    return "no error"


def _mismatch(index, where, category, cpu, tiny, name=None):
    return {"index": index, "where": where, "category": category, "cpu": str(cpu), "tiny": str(tiny), "name": name}


def _compare_summary(a, b, path, dtype=None):
    if isinstance(a, dict) and isinstance(b, dict):
        for field in TENSOR_FIELDS:
            if field == "stride" and _layout(a) == _layout(b):
                continue
            if a[field] != b[field]:
                category = "alias" if field in ("base", "shares") else field
                return category, f"{path}.{field}", a[field], b[field]
        if "values" in a:
            bad = _values_differ(a["values"], b["values"], dtype)
            if bad:
                return "values", path, _show(a["values"]), _show(b["values"])
        return None
    if isinstance(a, dict) or isinstance(b, dict):
        return "type", path, _kind(a), _kind(b)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "shape", path, f"{len(a)} items", f"{len(b)} items"
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _compare_summary(x, y, f"{path}[{k}]", dtype)
            if d:
                return d
        return None
    if type(a) is not type(b):
        return "type", path, f"{type(a).__name__} {a!r}", f"{type(b).__name__} {b!r}"
    if isinstance(a, float):
        if not _scalars_close(a, b, dtype):
            return "values", path, repr(a), repr(b)
        return None
    if a != b:
        return "values", path, repr(a), repr(b)
    return None


def _kind(x):
    return "tensor" if isinstance(x, dict) else type(x).__name__


def _show(t):
    return str(t.tolist()) if t.numel() <= 64 else f"{t.dtype} tensor of shape {tuple(t.shape)}"


def _scalars_close(a, b, dtype):
    x, y = torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64)
    return _values_differ(x, y, dtype if dtype in TOLERANCE else "float32") is None


def _values_differ(a, b, dtype=None):
    """None when tiny's values b match the CPU's a, else a short reason."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return "layout"
    if not a.dtype.is_floating_point:
        return None if torch.equal(a, b) else "exact"
    own = str(a.dtype).removeprefix("torch.")
    rtol, atol = TOLERANCE[loosest(own, dtype if dtype in TOLERANCE else None)]
    x, y = a.double(), b.double()
    nan_x, nan_y = x.isnan(), y.isnan()
    if not torch.equal(nan_x, nan_y):
        return "nan"
    inf_x, inf_y = x.isinf(), y.isinf()
    if not torch.equal(inf_x, inf_y) or not torch.equal(x[inf_x], y[inf_y]):
        return "inf"
    finite = ~(nan_x | inf_x)
    x, y = x[finite], y[finite]
    if x.numel() == 0:
        return None
    scale = max(1.0, x.abs().max().item())
    if ((x - y).abs() > atol * scale + rtol * x.abs()).any():
        return "close"
    return None
