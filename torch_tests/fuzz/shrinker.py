"""Shrinks a failing program to a short one that still fails the same way, and prints it as plain PyTorch.

`shrink(program, fails)` is delta debugging over the records: drop everything after the first
difference, then chunks of records (halves, quarters, ... as in ddmin), then single records, until no
single record can go; then it simplifies each input that is left (a contiguous layout, then small integer
values, then float32 for a float). `fails(candidate)` says whether a candidate still fails the same way
(the same mismatch category, or a crash, or a hang); a candidate that uses a name no record defines any
more just skips those records (programs.py), so any subset is a valid program.

`reproducer(program, mismatch, raised)` renames the tensors t0, t1, ... in order and prints a script a
human can paste: a function of the device that runs the records (a record that raised on either device
wrapped so its exception type is printed) and returns what differed, called on "cpu" and on "tiny".
"""

import math
import re
import time

from records import NAME, code_of, defined


def shrink(program, fails, budget_s=120.0, first_index=None, materialize=None):
    deadline = time.monotonic() + budget_s
    current = list(program)
    if first_index is not None and first_index < len(current) - 1:
        cut = current[: first_index + 1]
        if fails(cut):
            current = cut

    def attempt(candidate):
        return time.monotonic() < deadline and fails(candidate)

    current = _drop_records(current, attempt, deadline)
    if materialize is not None:
        # a tensor built by earlier ops, given as an input holding the CPU's values instead
        for i in reversed(range(len(current))):
            if time.monotonic() > deadline or i >= len(current) or defined(current[i]) is None:
                continue
            if "input" in current[i] or current[i].get("obs"):
                continue
            spec = materialize(current, i)
            if spec is not None:
                candidate = current[:i] + [{"code": f"{defined(current[i])} = <input>", "op": "input", "input": spec}]
                candidate += current[i + 1 :]
                if attempt(candidate):
                    current = _drop_records(candidate, attempt, deadline)
    current = _simplify_inputs(current, attempt)
    return current


def _drop_records(current, attempt, deadline):
    n = 2
    while len(current) >= 2 and time.monotonic() < deadline:
        chunk = math.ceil(len(current) / n)
        for start in range(0, len(current), chunk):
            candidate = current[:start] + current[start + chunk :]
            if candidate and attempt(candidate):
                current = candidate
                n = max(n - 1, 2)
                break
        else:
            if chunk == 1:
                break
            n = min(n * 2, len(current))
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in reversed(range(len(current))):
            candidate = current[:i] + current[i + 1 :]
            if i < len(current) and candidate and attempt(candidate):
                current = candidate
                changed = True
    return current


def _simplify_inputs(current, attempt):
    changed = True
    while changed:
        changed = False
        for i, rec in enumerate(current):
            for simpler in _simpler_inputs(rec["input"]) if "input" in rec else ():
                candidate = current[:i] + [dict(rec, input=simpler)] + current[i + 1 :]
                if attempt(candidate):
                    current = candidate
                    changed = True
                    break
    return current


def _simpler_inputs(spec):
    size = list(spec["size"])
    numel = math.prod(size)
    contiguous = _contiguous(size)
    if list(spec["stride"]) != contiguous or spec["offset"] != 0 or len(spec["values"]) != numel:
        yield dict(spec, stride=contiguous, offset=0, values=_logical_values(spec))
    small = [_small(v) for v in spec["values"]]
    if small != spec["values"]:
        yield dict(spec, values=small)
    if spec["dtype"] in ("float64", "float16", "bfloat16"):
        yield dict(spec, dtype="float32")


def _contiguous(size):
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return list(reversed(strides))


def _logical_values(spec):
    """The values a strided input shows, in row-major order (what a contiguous copy holds)."""
    size, stride, off, vals = spec["size"], spec["stride"], spec["offset"], spec["values"]
    out = []

    def walk(d, pos):
        if d == len(size):
            out.append(vals[pos])
            return
        for i in range(size[d]):
            walk(d + 1, pos + i * stride[d])

    walk(0, off)
    return out


def _small(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return v
        return float(round(v))
    return max(-3, min(3, v)) if abs(v) > 3 else v


def renamed(program):
    """The program with its tensors named t0, t1, ... in the order they are defined."""
    mapping = {}
    for rec in program:
        d = defined(rec)
        if d is not None and d not in mapping:
            mapping[d] = f"t{len(mapping)}"
    out = []
    for rec in program:
        code = NAME.sub(lambda m: mapping.get(m.group(0), m.group(0)), rec["code"])
        out.append(dict(rec, code=code))
    return out, mapping


def _observed(mismatch, program, mapping):
    """An expression showing what differed."""
    index, category = mismatch["index"], mismatch["category"]
    if mismatch.get("name"):
        name = mapping.get(mismatch["name"], mismatch["name"])
        if mismatch["where"].startswith(f"end {mismatch['name']}.grad"):
            return f"{name}.grad"
    elif index < len(program):
        rec = program[index]
        if rec.get("obs"):
            return code_of(rec)
        name = defined(rec)
    else:
        name = None
    if name is None or category in ("raise", "flow"):
        return None
    if category == "values":
        return name
    if category == "alias":
        return f"{name}._base is not None, {name}.untyped_storage().data_ptr()"
    return f"{name}.dtype, {name}.shape, {name}.stride(), {name}.storage_offset()"


def reproducer(program, mismatch, raised=()):
    """A script a human can paste that shows the difference (see the module docstring)."""
    index = mismatch["index"] if mismatch else len(program)
    program, mapping = renamed(program)
    observed = _observed(mismatch, program, mapping) if mismatch else None
    lines = ["import io"] if any("io." in r["code"] for r in program) else []
    lines += ["import torch"]
    if any("F." in r["code"] for r in program):
        lines.append("import torch.nn.functional as F")
    lines += ["", "", "def run(dev):"]
    for i, rec in enumerate(program):
        code = code_of(rec)
        if rec.get("obs"):
            if i == index and observed == code:
                continue
            code = f"print(dev, {code})"
        if i in raised:
            lines += ["    try:", f"        {code}", "    except Exception as e:"]
            lines.append('        print(dev, "raises", repr(e))')
        else:
            lines.append(f"    {code}")
    if observed:
        lines.append(f"    return {observed}")
    lines += ["", "", 'print("cpu: ", run("cpu"))', 'print("tiny:", run("tiny"))']
    return "\n".join(lines) + "\n"


def op_names(program):
    return tuple(r["op"] for r in program if r["op"] != "input")


def short_code(program):
    program, _ = renamed(program)
    return "; ".join(re.sub(r"\s+", " ", code_of(r)) for r in program)
