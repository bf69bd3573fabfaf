"""A record of a fuzz program (programs.py), as text: the names it defines and uses, and its code.

Kept free of torch, so the fuzzer's parent process (run.py), which only dispatches and shrinks, never
loads the device.
"""

import math
import re

NAME = re.compile(r"\bt\d+\b")
DEF = re.compile(r"^(t\d+) = ")


def defined(rec):
    m = DEF.match(rec["code"])
    return m.group(1) if m else None


def used(rec):
    d = defined(rec)
    return [n for n in dict.fromkeys(NAME.findall(rec["code"])) if n != d]


def _float_literal(v):
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else '-float("inf")'
    return repr(v)


def input_code(name, spec):
    """`tN = torch.tensor([...], dtype=...).as_strided(...).to(dev)`: the same CPU values, moved to the
    device with the same sizes, strides and storage offset (the storage is the flat tensor)."""
    vals = spec["values"]
    if spec["dtype"] in ("float32", "float64", "float16", "bfloat16"):
        lit = "[" + ", ".join(_float_literal(float(v)) for v in vals) + "]"
    elif spec["dtype"] == "bool":
        lit = "[" + ", ".join("True" if v else "False" for v in vals) + "]"
    else:
        lit = "[" + ", ".join(str(int(v)) for v in vals) + "]"
    size, stride, offset = tuple(spec["size"]), tuple(spec["stride"]), spec["offset"]
    base = f"torch.tensor({lit}, dtype=torch.{spec['dtype']}).to(dev)"
    contiguous = _contiguous_strides(size)
    if offset == 0 and stride == contiguous and math.prod(size) == len(vals):
        return f"{name} = {base}" if len(size) == 1 else f"{name} = {base}.reshape({size})"
    return f"{name} = {base}.as_strided({size}, {stride}, {offset})"


def _contiguous_strides(size):
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def code_of(rec):
    if "input" in rec:
        return input_code(defined(rec), rec["input"])
    return rec["code"]
