"""A fuzz program and how it runs: a list of records, each one line of PyTorch code over named tensors.

A program is data (a list of dicts), so it can be stored as JSON, shrunk by dropping records and printed
as plain PyTorch code. A record:

    code   one Python statement (`t3 = t1.sum(0)`, `t1[0] = 5`) or, for an observation, an expression
    op     the op's name (the summary counts mismatches by it; KNOWN in generator.py names ops)
    obs    True when `code` is an expression whose value both devices must agree on
    input  for an input tensor: {values, dtype, size, stride, offset}; its code is rendered from it
    tol    {name: dtype}: tensors this record defines or writes whose values carry the rounding of a
           less precise float dtype (a float64 cast of a float32 convolution), compared at its tolerance

Names are `t<N>`; the only other free names are `torch`, `F` (torch.nn.functional), `io` and `dev`. A record
that uses a name no earlier record defined (it was dropped, or the op defining it raised) is skipped, on
both devices alike.

`execute` runs a program on one device and returns its log: one entry per record (what it defined, what
it observed, the type of what it raised, or that it was skipped), then the final observation of every
live tensor and every leaf's `.grad`. Defined tensors are logged by metadata only (no sync: laziness is
part of what is tested); values are read at observations and at the end.
"""

import io
import os
import time
import warnings

import torch
import torch.nn.functional as F
from comparator import loosest
from records import code_of, defined, used


def _first_line(e):
    text = str(e).strip()
    return text.splitlines()[0][:160] if text else ""


def _storage_key(t):
    try:
        st = t.untyped_storage()
        return (st.data_ptr(), st.nbytes()) if st.nbytes() > 0 else None
    except Exception:
        return None


def _is_float_tensor(v):
    return isinstance(v, torch.Tensor) and v.dtype.is_floating_point


def _out_target(rec, env):
    """The tensor an `out=` record writes into, or None."""
    code = rec.get("code", "")
    if "out=" not in code:
        return None
    t = env.get(code.split("out=")[1].split(")")[0].split(",")[0].strip())
    return t if isinstance(t, torch.Tensor) else None


class Execution:
    """One run of a program on one device, record by record."""

    def __init__(self, device, plant=None, on_step=None):
        self.device = device
        self.on_step = on_step  # called with each record's index before it runs (run.py: where a crash was)
        self.plant = plant  # a bug planted to test the fuzzer (planted())
        self.env = {"torch": torch, "F": F, "io": io, "dev": device}
        self.names = []  # defined tensor names, in order
        self.log = []
        self.leaves = []  # names that were made leaves requiring grad
        self.tol = {}  # name -> a looser dtype its values compare at (the generator's rec["tol"])

    def run(self, program):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i, rec in enumerate(program):
                if self.on_step:
                    self.on_step(i)
                self.step(rec)
            self.finish()
        return self.log

    def step(self, rec):
        if any(n not in self.env for n in used(rec)):
            self.log.append(("skip",))
            return
        code = code_of(rec)
        name = defined(rec)
        out = _out_target(rec, self.env)
        out_size = out.numel() if out is not None else None
        try:
            if rec.get("obs"):
                # a Python float from .item()/.tolist() is compared at the tolerance of the tensor's dtype
                self.log.append(("obs", self.summary(eval(code, self.env), values=True), rec.get("dtype")))
                return
            exec(code, self.env)
            self.tol.update(rec.get("tol", {}))
            value = self.env[name] if name else None
            if self.plant and rec["op"] == self.plant.split(":")[-1]:
                self.planted(value)
            if isinstance(value, torch.Tensor):
                self.names.append(name)
                if value.requires_grad and value.is_leaf:
                    self.leaves.append(name)
            self.log.append(("def", self.summary(value, values=False)) if name else ("ok",))
        except Exception as e:  # the other device must raise the same type here
            if name:
                self.env.pop(name, None)
            if out is not None and out.numel() != out_size:
                # torch resized out= before the error: the new memory is uninitialized on both devices
                with torch.no_grad():
                    out.zero_()
            self.log.append(("raise", type(e).__name__, _first_line(e)))

    def planted(self, value):
        """A bug planted to test the fuzzer: `OP` adds 1 to what OP returns, `abort:OP` kills the
        process, `hang:OP` never returns."""
        kind = self.plant.split(":")[0] if ":" in self.plant else "wrong"
        if kind == "abort":
            os.abort()
        if kind == "hang":
            time.sleep(1e9)
        if isinstance(value, torch.Tensor) and value.dtype != torch.bool:
            with torch.no_grad():
                value.add_(1)

    def finish(self):
        for name in self.names:
            if name in self.env:
                self._final(("end", name), lambda n=name: self.env[n], self.tol.get(name))
        # a gradient flows back through every op of the program: it compares at the loosest dtype used
        floats = [str(t.dtype).removeprefix("torch.") for t in self.env.values() if _is_float_tensor(t)]
        grad_tol = loosest(*floats, *self.tol.values())
        for name in self.leaves:
            if name in self.env:
                self._final(("grad", name), lambda n=name: self.env[n].grad, grad_tol)

    def _final(self, head, get, tol):
        try:
            self.log.append((*head, self.summary(get(), values=True), tol))
        except Exception as e:  # reading a tensor back must not fail on one device only
            self.log.append(("raise", type(e).__name__, _first_line(e)))

    def summary(self, v, values):
        """What a user sees of v: for a tensor its dtype, shape, strides, offset, which named tensors it
        shares storage with and which one is its _base, and (at observations) its values on the CPU."""
        if isinstance(v, torch.Tensor):
            s = {
                "dtype": str(v.dtype).removeprefix("torch."),
                "shape": tuple(v.shape),
                "stride": v.stride(),
                "offset": v.storage_offset(),
                "requires_grad": v.requires_grad,
                "base": self._base_name(v),
                "shares": self._sharing(v),
            }
            if values:
                s["values"] = v.detach().cpu().clone()
            return s
        if isinstance(v, (list, tuple)):
            return [self.summary(x, values) for x in v]
        if isinstance(v, torch.dtype | torch.Size | int | float | bool | str | type(None)):
            return v
        return type(v).__name__

    def _named(self, t):
        for n in self.names:
            if self.env.get(n) is t:
                return n
        return None

    def _base_name(self, v):
        if v._base is None:
            return None
        return self._named(v._base) or "unnamed"

    def _sharing(self, v):
        key = _storage_key(v)
        if key is None:
            return ()
        out = []
        for n in self.names:
            t = self.env.get(n)
            if isinstance(t, torch.Tensor) and t is not v and _storage_key(t) == key:
                out.append(n)
        return tuple(out)


def execute(program, device, plant=None, on_step=None):
    return Execution(device, plant, on_step).run(program)


def materialize(program, index):
    """The input spec of the tensor record `index` defines, as the CPU computes it (its storage, sizes,
    strides and offset): the shrinker tries it in place of the ops that built it."""
    name = defined(program[index])
    ex = Execution("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rec in program[: index + 1]:
            ex.step(rec)
    t = ex.env.get(name)
    if not isinstance(t, torch.Tensor) or t.requires_grad:
        return None
    t = t.detach()
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype).set_(t.cpu().untyped_storage(), 0, (n,), (1,))
    if n > 64:
        flat, offset, stride = t.contiguous().reshape(-1), 0, list(t.contiguous().stride())
    else:
        offset, stride = t.storage_offset(), list(t.stride())
    dtype = str(t.dtype).removeprefix("torch.")
    values = [float(v) for v in flat.tolist()] if t.dtype.is_floating_point else flat.tolist()
    return {"values": values, "dtype": dtype, "size": list(t.shape), "stride": stride, "offset": offset}
