"""Seeded random programs (programs.py) over every dtype tiny holds.

The generator runs each record on the CPU as it writes it, so it knows the shapes, dtypes and values it
builds on and picks parameters that mean something (dims that exist, indices mostly in range, shapes
that broadcast). Records that raise on the CPU are kept: tiny must raise the same type there.

Torch leaves some results open, and the generator avoids exactly those (each is named where it is done):
  - the order of equal elements in `sort(stable=False)`, `topk`, `kthvalue`, `median`, `mode` (and the
    indices of near-equal floats anywhere): indices are asked for only where the row has no ties;
  - a float cast to an integer type out of its range, or of NaN/inf, is undefined behaviour in C++;
  - which write wins among duplicate indices without accumulate (`index_put_`, `put_`, `scatter_`,
    `index_copy_`) is unspecified: their indices are made unique;
  - comparisons, rounding, casts to int/bool, `nonzero`, argmax and the like of floats computed by
    arithmetic: a float computed in another order can fall on the other side of a step. Each tensor
    carries an `exact` flag (inputs, views, copies, exact ops like neg/abs/max/where/index of exact
    tensors, and every integer op of exact tensors), and step functions take only exact tensors;
  - the bits of such floats, and the sign and payload of any NaN, seen through `view(dtype)`;
  - a write into a tensor whose elements overlap in a way torch does not detect (it raises for a
    stride 0 over a size > 1, and those are kept, except where it only warns that the write is
    deprecated: masked_fill_, index_put_ and x[index] = v on an expanded tensor), and an `out=` of a
    reduction, scan, matmul, cat or gather that shares memory with an input (Generator.undefined_write);
  - `x[i] = v` into an expanded x with v a 0-dim tensor sharing x's memory: torch's indexing fills x from a CPU v
    (fill_, which clones a v that aliases x and then raises on x's overlap) but copies v expanded from any other
    device's (copy_, a no-op where the expanded v is x itself), so the CPU's error is its own (seed 105184);
  - how an inf propagates through the formula of a normalization or convolution: nn layers get finite
    inputs;
  - the strides of size-1 dims and of empty tensors (comparator.py; `--strict-strides` compares them).

KNOWN lists classes of programs where tiny differs from the CPU today, for reasons in issue #14. The
generator leaves them out unless asked (`--include-known`); an entry goes when its item is fixed.
"""

import math
import random
import re
import warnings

import torch
from comparator import loosest
from programs import Execution
from records import NAME, defined, used
from torch._prims_common import is_non_overlapping_and_dense_or_false

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool")
FLOATS = DTYPES[:4]
INTS = DTYPES[4:9]
RANGE = {
    "int8": (-128, 127),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**62), 2**62),
    "uint8": (0, 255),
}

# class -> (why tiny differs from the CPU there today, the issue item, which records fall in it). The
# generator leaves such records out unless --include-known; kept short: a fixed item loses its line.
KNOWN = {
    "view_dtype_of_odd_storage": (
        "a storage is held as one typed buffer: a view of another element size over a storage whose byte "
        "count that size does not divide (9 bytes as float16) raises 'not supported yet' on tiny",
        "#14: storages of mixed element sizes",
        lambda g, rec, meta: rec["op"] == "view_dtype" and _odd_storage(g.T(used(rec)[0]), rec["code"]),
    ),
    "attention_of_non_finite": (
        "scaled_dot_product_attention over infinities or NaNs: tiny runs torch's math path, whose causal mask adds "
        "-inf to every masked score (inf - inf = NaN), the CPU its flash kernel, which skips the masked keys and "
        "treats a row of -inf its own way",
        "#14: sdpa as the CPU's flash kernel computes it",
        lambda g, rec, meta: rec["op"] == "attention" and not all(torch.isfinite(g.T(n)).all() for n in used(rec)),
    ),
    "int_div_zero": (
        "an integer division by zero raises ZeroDivisionError at the next sync (issue #14's design), where the "
        "CPU raises at the call: a record-by-record comparison cannot follow a deferred error",
        "#14 errors: integer division by zero (by design, not a bug)",
        lambda g, rec, meta: rec["op"] in INT_DIVISIONS and _int_div_by_zero(g, used(rec), meta.get("y")),
    ),
}
DEPRECATED_OVERLAP = ("masked_fill_", "index_put_", "setitem_adv")
# out= ops whose overlap with their inputs and within out= torch checks (TensorIterator's elementwise ops)
ELEMENTWISE_OUT = ("add_out", "neg_out", "clamp_out", "where_out")
INT_DIVISIONS = ("div_floor", "div_trunc", "floordiv", "remainder", "fmod")


def dtype_of(t):
    return str(t.dtype).removeprefix("torch.")


def is_float(t):
    return t.dtype.is_floating_point


class Generator:
    def __init__(self, seed, include_known=False, max_records=None):
        self.rng = random.Random(seed)
        self.include_known = include_known
        self.program = []
        self.ex = Execution("cpu")
        self.exact = {}
        self.precision = {}  # name -> the loosest float dtype an inexact step of its history rounded in
        self.count = 0
        self.last_read = []
        self.max_records = max_records or self.rng.randint(6, 22)

    # -- building blocks ------------------------------------------------------------------------

    def fresh(self):
        name = f"t{self.count}"
        self.count += 1
        return name

    def emit(self, code, op, *, exact=True, obs=False, spec=None, dtype=None, meta=None):
        """Append a record and run it on the CPU; exact says the op itself computes without rounding
        choices (its result is exact when its operands are), None that it rounds where its result is float
        (exp of an integer tensor, a true division of two: float results); meta tells KNOWN's predicates more."""
        rec = {"code": code, "op": op}
        if not self.include_known and any(pred(self, rec, meta or {}) for _, _, pred in KNOWN.values()):
            return None
        if self.undefined_write(rec):
            return None
        if obs:
            rec["obs"] = True
        if dtype is not None:
            rec["dtype"] = dtype
        if spec is not None:
            rec["input"] = spec
        self.program.append(rec)
        self.ex.step(rec)
        if defined(rec) and not obs and spec is None:
            self.last_read = used(rec)
        operands_exact = all(self.exact.get(n, True) for n in used(rec))
        name = defined(rec)
        if exact is None:
            result = self.ex.env.get(name) if name is not None else None
            exact = isinstance(result, torch.Tensor) and not is_float(result)
        if name is not None and name in self.ex.env:
            self.exact[name] = exact and operands_exact
            self.note_precision(rec, [name], exact)
        elif name is None and not obs and not (exact and operands_exact):
            for n in used(rec):  # an inexact write reaches every tensor sharing the storage
                self.note_precision(rec, self.taint(n), exact)
        return name if name in self.ex.env else None

    def note_precision(self, rec, names, exact):
        """Records the tolerance the values of names are compared at: a float64 cast of a float32
        convolution carries float32's rounding differences. rec["tol"] names those looser than their
        own dtype."""
        history = [self.precision[n] for n in used(rec) if n in self.precision and not self.exact.get(n, True)]
        for n in names:
            t = self.ex.env.get(n)
            if not isinstance(t, torch.Tensor) or self.exact.get(n, True):
                continue
            own = [dtype_of(t)] if is_float(t) and not exact else []
            candidates = history + own + ([self.precision[n]] if n in self.precision else [])
            if candidates:
                self.precision[n] = loosest(*candidates)
                if is_float(t) and loosest(self.precision[n], dtype_of(t)) != dtype_of(t):
                    rec.setdefault("tol", {})[n] = self.precision[n]

    def undefined_write(self, rec):
        """Writes whose result torch leaves undefined: into a tensor whose elements overlap in memory
        where torch cannot tell (it raises for a stride 0 over a size > 1, a good test, except in the
        deprecated DEPRECATED_OVERLAP writes), and an out= of a
        reduction, scan, matmul, cat or gather that shares memory with an input."""
        target = _write_target(rec)
        if target is None or target not in self.ex.env:
            return False
        t = self.T(target)
        if any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride(), strict=True)):
            # masked_fill_ and index_put_ only warn that writing an expanded tensor is deprecated, and a reduction
            # into an expanded out= does not check it (seed 23372: sum(t, 0, out=expanded)); their result then
            # depends on the order the CPU's loop writes in
            if rec["op"] == "setitem" and _zero_dim_alias(self, t, rec["code"].split("=", 1)[1].strip()):
                return True  # the CPU's indexing raises on its own path (see the module's docstring)
            return rec["op"] in DEPRECATED_OVERLAP or ("out=" in rec["code"] and rec["op"] not in ELEMENTWISE_OUT)
        if _overlaps(t):
            return True
        if "out=" not in rec["code"] and _reads_its_target_elsewhere(self, target, rec):
            return True
        if "out=" in rec["code"]:
            key = t.untyped_storage().data_ptr()
            inputs = [n for n in NAME.findall(rec["code"].split("out=")[0]) if n in self.ex.env]
            shared = [self.T(n) for n in inputs if self.T(n).untyped_storage().data_ptr() == key]
            if rec["op"] not in ELEMENTWISE_OUT:
                return bool(shared)
            # elementwise: torch raises for an input that partly overlaps out=, where it can tell (both dense);
            # with a gap in either (its overlap check's "too hard") the result depends on the CPU loop's order
            return any(_order_dependent(x, t) for x in shared)
        return False

    def taint(self, name):
        """Marks every tensor sharing name's storage inexact; returns their names."""
        t = self.T(name)
        key = t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
        names = []
        for n in self.ex.names:
            u = self.ex.env.get(n)
            if isinstance(u, torch.Tensor) and u.untyped_storage().data_ptr() == key:
                self.exact[n] = False
                names.append(n)
        return names

    def T(self, name):
        return self.ex.env[name]

    def tensors(self, pred=lambda t: True):
        return [n for n in self.ex.names if n in self.ex.env and _holds(pred, self.T(n))]

    def pick(self, pred=lambda t: True, exact=False):
        names = [n for n in self.tensors(pred) if not exact or self.exact.get(n, True)]
        if not names:
            return None
        recent = names[-4:]
        return self.rng.choice(recent if self.rng.random() < 0.6 else names)

    def shape(self, max_numel=36):
        r = self.rng
        ndim = r.choice((0, 1, 1, 2, 2, 2, 3, 3, 4))
        sizes = [r.choice((1, 2, 2, 3, 3, 4, 5, 0 if r.random() < 0.1 else 1)) for _ in range(ndim)]
        while math.prod(sizes) > max_numel:
            sizes[sizes.index(max(sizes))] -= 1
        return tuple(sizes)

    def values(self, dtype, n, finite=False):
        r = self.rng
        if dtype in FLOATS:
            style = r.random()
            out = []
            for _ in range(n):
                if style < 0.15:
                    out.append(round(r.gauss(0, 2), 3))
                else:
                    out.append(r.randint(-16, 16) / 4)
            if r.random() < 0.15 and n and not finite:
                for _ in range(r.randint(1, 2)):
                    out[r.randrange(n)] = r.choice((math.inf, -math.inf, math.nan, -0.0))
            return out
        if dtype == "bool":
            return [r.random() < 0.5 for _ in range(n)]
        lo, hi = RANGE[dtype]
        out = [r.randint(max(lo, -9), min(hi, 9)) for _ in range(n)]
        if r.random() < 0.1 and n:
            out[r.randrange(n)] = r.choice((lo, hi))
        return out

    def new_input(self, shape=None, dtype=None, layout=True, finite=False):
        r = self.rng
        shape = self.shape() if shape is None else tuple(shape)
        dtype = dtype or r.choice(DTYPES)
        stride, offset, storage = _contiguous(shape), 0, math.prod(shape)
        if layout and shape and r.random() < 0.4:
            kind = r.choice(("permuted", "stepped", "offset", "expanded"))
            if kind == "permuted" and len(shape) >= 2:
                perm = list(range(len(shape)))
                r.shuffle(perm)
                inner = _contiguous(tuple(shape[p] for p in perm))
                strides = [0] * len(shape)
                for i, p in enumerate(perm):
                    strides[p] = inner[i]
                stride = tuple(strides)
            elif kind == "stepped":
                stride = tuple(s * 2 for s in _contiguous(shape))
            elif kind == "offset":
                offset = r.randint(1, 3)
            elif kind == "expanded":
                d = r.randrange(len(shape))
                stride = tuple(0 if i == d else s for i, s in enumerate(_contiguous(shape)))
            storage = _extent(shape, stride) + offset + r.choice((0, 0, 1))
        spec = {
            "values": self.values(dtype, storage, finite),
            "dtype": dtype,
            "size": list(shape),
            "stride": list(stride),
            "offset": offset,
        }
        name = self.fresh()
        return self.emit(f"{name} = <input>", "input", spec=spec)

    def scalar(self, kind=None):
        r = self.rng
        kind = kind or r.choice(("int", "int", "float", "float", "bool"))
        if kind == "int":
            return str(r.choice((0, 1, 2, 3, -1, -2, 5)))
        if kind == "float":
            return repr(r.choice((0.5, -1.5, 2.0, 0.25, -3.0, 1.0)))
        return r.choice(("True", "False"))

    def broadcastable(self, shape):
        """A shape that broadcasts with `shape`: a suffix of it with some sizes set to 1."""
        r = self.rng
        out = list(shape[r.randint(0, min(2, len(shape))) :]) if shape else []
        out = [1 if r.random() < 0.3 else s for s in out]
        if r.random() < 0.15:
            out.insert(0, r.choice((1, 2)))
        return tuple(out)

    def operand(self, t, want_exact=False):
        """The second operand of a binary op with tensor t: a scalar, a tensor that broadcasts with it,
        or a new input that does."""
        r = self.rng
        roll = r.random()
        if roll < 0.25:
            return self.scalar()
        if roll < 0.55:

            def fits(u):
                try:
                    torch.broadcast_shapes(u.shape, t.shape)
                    return True
                except RuntimeError:
                    return False

            name = self.pick(fits, exact=want_exact)
            if name is not None:
                return name
        dtype = dtype_of(t) if r.random() < 0.5 else r.choice(DTYPES)
        return self.new_input(self.broadcastable(tuple(t.shape)), dtype)

    def exact_ok(self, *names):
        return all(self.exact.get(n, True) for n in names if n and n.startswith("t"))

    def cast_ok(self, v, t):
        """Whether writing tensor v into t is defined: a float into an integer tensor must be an exact
        value in the integer type's range (else C++ leaves the cast undefined)."""
        if is_float(t) or not v.startswith("t") or not is_float(self.T(v)):
            return True
        return self.exact_ok(v) and _in_range(self.T(v), dtype_of(t))

    def dim(self, t, allow_none=False):
        if t.dim() == 0:
            return None if allow_none else self.rng.choice((0, -1))
        if allow_none and self.rng.random() < 0.2:
            return None
        return self.rng.randrange(-t.dim(), t.dim())

    def index_list(self, n, count, unique=False, negative=True):
        r = self.rng
        if n == 0:
            return [0] * count if not unique else []
        if unique:
            pool = list(range(n))
            r.shuffle(pool)
            return pool[: min(count, n)]
        lo = -n if negative and r.random() < 0.3 else 0
        return [r.randint(lo, n - 1) for _ in range(count)]

    # -- one record ------------------------------------------------------------------------------

    def step(self):
        r = self.rng
        if not self.tensors() or r.random() < 0.08:
            self.new_input()
            return
        read = [n for n in self.last_read if n in self.ex.env]
        if read and r.random() < 0.2:
            # a write into what the last op read (lazily on tiny): the read must keep the old values
            x = r.choice(read)
            self.last_read = []
            if r.random() < 0.7:
                self.setitem(x, self.T(x))
            else:
                self.emit(f"{x}.{r.choice(('add_(1)', 'zero_()', 'mul_(2)', 'fill_(3)'))}", "write_after_read")
            return
        table = (
            (22, self.view),
            (8, self.copy),
            (16, self.elementwise),
            (16, self.inplace),
            (10, self.reduce),
            (4, self.matmul),
            (10, self.index),
            (4, self.sort),
            (6, self.grad),
            (6, self.observe),
            (4, self.nn),
            (1, self.serialize),
        )
        total = sum(w for w, _ in table)
        x = r.uniform(0, total)
        for w, fn in table:
            x -= w
            if x <= 0:
                fn()
                return

    # -- views -------------------------------------------------------------------------------------

    def view(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        out = self.fresh()
        nd = t.dim()
        kind = r.choice(
            (
                "slice",
                "slice",
                "select",
                "transpose",
                "permute",
                "t",
                "expand",
                "view",
                "reshape",
                "flatten",
                "unfold",
                "diagonal",
                "as_strided",
                "view_dtype",
                "narrow",
                "unsqueeze",
                "squeeze",
                "split",
                "unbind",
                "none_index",
                "detach",
                "movedim",
                "mT",
            )
        )
        if kind == "slice" and nd:
            d = r.randrange(nd)
            n = t.shape[d]
            start = r.choice(("", str(r.randint(-n - 1, n))))
            stop = r.choice(("", str(r.randint(-n, n + 1))))
            step = r.choice(("", "2", "3", "1"))
            sl = f"{start}:{stop}" + (f":{step}" if step else "")
            idx = ", ".join([":"] * d + [sl])
            self.emit(f"{out} = {x}[{idx}]", "slice")
        elif kind == "select" and nd:
            d = r.randrange(nd)
            n = t.shape[d]
            i = r.randint(-n, n - 1) if n and r.random() < 0.95 else n
            if r.random() < 0.5 and d == 0:
                self.emit(f"{out} = {x}[{i}]", "select")
            else:
                self.emit(f"{out} = {x}.select({d}, {i})", "select")
        elif kind == "transpose" and nd:
            self.emit(f"{out} = {x}.transpose({self.dim(t)}, {self.dim(t)})", "transpose")
        elif kind == "permute":
            perm = list(range(nd))
            r.shuffle(perm)
            self.emit(f"{out} = {x}.permute({tuple(perm)})", "permute")
        elif kind == "t" and nd <= 2:
            self.emit(f"{out} = {x}.t()", "t")
        elif kind == "mT" and nd >= 2:
            self.emit(f"{out} = {x}.mT", "mT")
        elif kind == "expand":
            sizes = [r.choice((1, 2, 3)) if s == 1 else (-1 if r.random() < 0.2 else s) for s in t.shape]
            lead = [r.choice((1, 2, 3)) for _ in range(r.choice((0, 0, 1, 2)))]
            self.emit(f"{out} = {x}.expand({tuple(lead + sizes)})", "expand")
        elif kind in ("view", "reshape"):
            shape = _factor(t.numel(), r) if r.random() < 0.9 else (-1,)
            self.emit(f"{out} = {x}.{kind}({shape})", kind)
        elif kind == "flatten" and nd:
            s = r.randrange(nd)
            e = r.randrange(s, nd)
            self.emit(f"{out} = {x}.flatten({s}, {e})", "flatten")
        elif kind == "unfold":
            d = self.dim(t)
            n = t.shape[d] if nd else 1
            size = r.randint(0, n + (1 if r.random() < 0.1 else 0))
            self.emit(f"{out} = {x}.unfold({d}, {size}, {r.randint(1, 3)})", "unfold")
        elif kind == "diagonal" and nd >= 2:
            d1 = r.randrange(nd)
            d2 = r.choice([d for d in range(nd) if d != d1])
            self.emit(f"{out} = {x}.diagonal({r.randint(-2, 2)}, {d1}, {d2})", "diagonal")
        elif kind == "as_strided":
            storage = t.untyped_storage().nbytes() // max(t.element_size(), 1)
            size = tuple(r.randint(1, 3) for _ in range(r.randint(0, 3)))
            stride = tuple(r.choice((0, 1, 1, 2, 3)) for _ in size)
            extent = _extent(size, stride)
            if extent > storage:
                return
            off = r.randint(0, storage - extent)
            self.emit(f"{out} = {x}.as_strided({size}, {stride}, {off})", "as_strided")
        elif kind == "view_dtype":
            # the bits of a float computed by arithmetic differ in the last place, and a NaN's sign and
            # payload are unspecified: reinterpreted as another type, only exact floats without NaN
            if is_float(t) and (not self.exact_ok(x) or bool(t.isnan().any())):
                return
            self.emit(f"{out} = {x}.view(torch.{r.choice(DTYPES)})", "view_dtype")
        elif kind == "narrow" and nd:
            d = self.dim(t)
            n = t.shape[d]
            start = r.randint(0, n)
            self.emit(f"{out} = {x}.narrow({d}, {start}, {r.randint(0, n - start)})", "narrow")
        elif kind == "unsqueeze":
            self.emit(f"{out} = {x}.unsqueeze({r.randint(-nd - 1, nd)})", "unsqueeze")
        elif kind == "squeeze":
            arg = "" if r.random() < 0.4 or not nd else str(self.dim(t))
            self.emit(f"{out} = {x}.squeeze({arg})", "squeeze")
        elif kind == "split" and nd:
            d = self.dim(t)
            k = r.randint(1, 3)
            parts = max(1, math.ceil(t.shape[d] / k)) if t.shape[d] else 1
            fn = r.choice(("split", "chunk"))
            self.emit(f"{out} = {x}.{fn}({k}, {d})[{r.randrange(parts)}]", fn)
        elif kind == "unbind" and nd and t.shape[0]:
            d = self.dim(t)
            if t.shape[d]:
                self.emit(f"{out} = {x}.unbind({d})[{r.randrange(t.shape[d])}]", "unbind")
        elif kind == "none_index":
            self.emit(f"{out} = {x}[{r.choice(('None', '..., None', 'None, ...', '...'))}]", "none_index")
        elif kind == "detach":
            self.emit(f"{out} = {x}.{r.choice(('detach()', 'view_as(' + x + ')', 'alias()'))}", "detach")
        elif kind == "movedim" and nd:
            self.emit(f"{out} = {x}.movedim({self.dim(t)}, {self.dim(t)})", "movedim")

    # -- copies ----------------------------------------------------------------------------------

    def copy(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        out = self.fresh()
        nd = t.dim()
        kind = r.choice(("flip", "roll", "clone", "contiguous", "cast", "cast", "cat", "stack", "repeat", "tril"))
        if kind == "flip":
            dims = tuple(sorted({self.dim(t) for _ in range(r.randint(1, 2))})) if nd else ()
            self.emit(f"{out} = {x}.flip({dims})", "flip")
        elif kind == "roll":
            d = self.dim(t, allow_none=True)
            arg = f"{r.randint(-3, 3)}" + ("" if d is None else f", {d}")
            self.emit(f"{out} = {x}.roll({arg})", "roll")
        elif kind == "clone":
            fmt = r.choice(("", "", "memory_format=torch.contiguous_format"))
            self.emit(f"{out} = {x}.clone({fmt})", "clone")
        elif kind == "contiguous":
            self.emit(f"{out} = {x}.contiguous()", "contiguous")
        elif kind == "cast":
            target = r.choice(DTYPES)
            if is_float(t) and target not in FLOATS:
                if not self.exact_ok(x) or not _in_range(t, target):
                    return  # undefined behaviour in C++ (out of range, NaN, inf); or a step of a rounded float
            self.emit(f"{out} = {x}.to(torch.{target})", "cast")
        elif kind in ("cat", "stack"):
            d = self.dim(t) if kind == "cat" else r.randint(0, nd)
            y = self.pick(lambda u: u.shape == t.shape or (kind == "cat" and u.dim() == nd))
            if y is None:
                y = self.new_input(t.shape, dtype_of(t) if r.random() < 0.7 else None)
            if y is not None:
                self.emit(f"{out} = torch.{kind}([{x}, {y}], {d})", kind)
        elif kind == "repeat":
            reps = tuple(r.randint(1, 2) for _ in range(nd + r.randint(0, 1)))
            self.emit(f"{out} = {x}.repeat({reps})", "repeat")
        elif kind == "tril" and nd >= 2:
            fn = r.choice(("tril", "triu"))
            self.emit(f"{out} = {x}.{fn}({r.randint(-1, 1)})", fn)

    # -- elementwise -------------------------------------------------------------------------------

    UNARY = {
        # name: (code, kind) -- kind: exact (no rounding), cont (rounds), step (needs exact input)
        "neg": ("-{x}", "exact"),
        "abs": ("{x}.abs()", "exact"),
        "relu": ("{x}.relu()", "exact"),
        "exp": ("{x}.exp()", "cont"),
        "log": ("{x}.log()", "cont"),
        "sqrt": ("{x}.sqrt()", "cont"),
        "sin": ("{x}.sin()", "cont"),
        "tanh": ("{x}.tanh()", "cont"),
        "sigmoid": ("{x}.sigmoid()", "cont"),
        "reciprocal": ("{x}.reciprocal()", "cont"),
        "rsqrt": ("{x}.rsqrt()", "cont"),
        "square": ("{x}.square()", "cont"),
        "erf": ("{x}.erf()", "cont"),
        "expm1": ("{x}.expm1()", "cont"),
        "log1p": ("{x}.log1p()", "cont"),
        "floor": ("{x}.floor()", "step"),
        "ceil": ("{x}.ceil()", "step"),
        "round": ("{x}.round()", "step"),
        "trunc": ("{x}.trunc()", "step"),
        "frac": ("{x}.frac()", "step"),
        "sign": ("{x}.sign()", "step"),
        "round_decimals": ("{x}.round(decimals=1)", "step"),
        "logical_not": ("{x}.logical_not()", "step"),
        "bitwise_not": ("{x}.bitwise_not()", "exact"),
        "isnan": ("{x}.isnan()", "step"),
        "isinf": ("{x}.isinf()", "step"),
        "nan_to_num": ("{x}.nan_to_num()", "exact"),
        "clamp": ("{x}.clamp({a}, {b})", "exact"),
        "clamp_min": ("{x}.clamp(min={a})", "exact"),
        "pow_half": ("{x}.pow(0.5)", "cont"),
        "pow_2": ("{x} ** 2", "cont"),
        "pow_neg": ("{x}.pow(-1)", "cont"),
        "softmax": ("{x}.softmax({d})", "cont"),
        "log_softmax": ("{x}.log_softmax({d})", "cont"),
        "sgn": ("{x}.sgn()", "step"),
        "signbit": ("{x}.signbit()", "step"),
        "float": ("{x}.float()", "exact"),
        "gelu": ("F.gelu({x})", "cont"),
    }
    BINARY = {
        "add": ("{x} + {y}", "cont"),
        "add_alpha": ("torch.add({x}, {y}, alpha=2)", "cont"),
        "sub": ("{x} - {y}", "cont"),
        "rsub": ("{y} - {x}", "cont"),
        "mul": ("{x} * {y}", "cont"),
        "div": ("{x} / {y}", "cont"),
        "div_floor": ("torch.div({x}, {y}, rounding_mode='floor')", "step"),
        "div_trunc": ("torch.div({x}, {y}, rounding_mode='trunc')", "step"),
        "floordiv": ("{x} // {y}", "step"),
        "remainder": ("{x} % {y}", "step"),
        "fmod": ("torch.fmod({x}, {y})", "step"),
        "pow": ("{x} ** {y}", "cont"),
        "maximum": ("torch.maximum({x}, {y})", "exact"),
        "minimum": ("torch.minimum({x}, {y})", "exact"),
        "fmax": ("torch.fmax({x}, {y})", "exact"),
        "eq": ("{x} == {y}", "step"),
        "ne": ("{x} != {y}", "step"),
        "lt": ("{x} < {y}", "step"),
        "le": ("{x} <= {y}", "step"),
        "gt": ("{x} > {y}", "step"),
        "ge": ("{x} >= {y}", "step"),
        "logical_and": ("torch.logical_and({x}, {y})", "step"),
        "logical_or": ("torch.logical_or({x}, {y})", "step"),
        "bitwise_and": ("{x} & {y}", "exact"),
        "bitwise_or": ("{x} | {y}", "exact"),
        "bitwise_xor": ("{x} ^ {y}", "exact"),
        "atan2": ("torch.atan2({x}, {y})", "cont"),
        "hypot": ("torch.hypot({x}, {y})", "cont"),
        "copysign": ("torch.copysign({x}, {y})", "step"),
        "lerp": ("torch.lerp({x}, {y}, 0.25)", "cont"),
        "where": ("torch.where({c}, {x}, {y})", "exact"),
        "addcmul": ("torch.addcmul({x}, {y}, {y}, value=0.5)", "cont"),
        "xlogy": ("torch.xlogy({x}, {y})", "cont"),
        "logaddexp": ("torch.logaddexp({x}, {y})", "cont"),
        "isclose": ("torch.isclose({x}, {y})", "step"),
    }
    TENSOR_ONLY = ("maximum", "minimum", "fmax", "where", "atan2", "hypot", "logaddexp", "isclose", "logical_and")

    def elementwise(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        out = self.fresh()
        if r.random() < 0.4:
            name = r.choice(list(self.UNARY))
            code, kind = self.UNARY[name]
            if kind == "step" and is_float(t) and not self.exact_ok(x):
                return
            code = code.format(x=x, a=self.scalar("int"), b=self.scalar("float"), d=self.dim(t))
            # a rounding op of an integer tensor (log1p of uint8) rounds its float result too: seed 95411
            # viewed log1p(6) as int64 bits, where tiny's float differs from the CPU's in the last place
            self.emit(
                f"{out} = {code}", name, exact=True if kind == "exact" else None if kind == "cont" else not is_float(t)
            )
            return
        name = r.choice(list(self.BINARY))
        code, kind = self.BINARY[name]
        y = self.operand(t, want_exact=kind == "step")
        if y is not None and not y.startswith("t") and name in self.TENSOR_ONLY:
            y = self.new_input(self.broadcastable(tuple(t.shape)), dtype_of(t))
        if y is None:
            return
        c = None
        if name == "where":
            c = self.pick(lambda u: u.dtype == torch.bool, exact=True)
            if c is None:
                return
        ty = self.T(y) if y.startswith("t") else None
        floats = is_float(t) or (ty is not None and is_float(ty)) or "." in y
        if kind == "step" and floats and not self.exact_ok(x, y):
            return
        self.emit(f"{out} = {code.format(x=x, y=y, c=c)}", name, exact=None if kind == "cont" else True, meta={"y": y})

    # -- in-place and out= writes -------------------------------------------------------------------

    INPLACE_UNARY = {
        "zero_": ("exact", "{x}.zero_()"),
        "fill_": ("exact", "{x}.fill_({s})"),
        "neg_": ("exact", "{x}.neg_()"),
        "abs_": ("exact", "{x}.abs_()"),
        "relu_": ("exact", "{x}.relu_()"),
        "clamp_": ("exact", "{x}.clamp_({a}, {b})"),
        "exp_": ("cont", "{x}.exp_()"),
        "sqrt_": ("cont", "{x}.sqrt_()"),
        "floor_": ("step", "{x}.floor_()"),
        "mul_scalar_": ("cont", "{x}.mul_({s})"),
        "pow_": ("cont", "{x}.pow_({a})"),
        "t_": ("exact", "{x}.t_()"),
        "unsqueeze_": ("exact", "{x}.unsqueeze_(0)"),
        "squeeze_": ("exact", "{x}.squeeze_()"),
        "transpose_": ("exact", "{x}.transpose_(0, -1)"),
    }
    INPLACE_BINARY = {
        "add_": ("cont", "{x}.add_({y})"),
        "sub_": ("cont", "{x}.sub_({y})"),
        "mul_": ("cont", "{x}.mul_({y})"),
        "div_": ("cont", "{x}.div_({y})"),
        "copy_": ("exact", "{x}.copy_({y})"),
        "maximum_out": ("exact", "torch.maximum({x}, {y}, out={x})"),
        "bitwise_or_": ("exact", "{x}.bitwise_or_({y})"),
        "lerp_": ("cont", "{x}.lerp_({y}, 0.5)"),
        "addcmul_": ("cont", "{x}.addcmul_({y}, {y})"),
        "masked_fill_": ("exact", "{x}.masked_fill_({m}, {s})"),
    }

    def inplace(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        roll = r.random()
        if roll < 0.3:
            self.setitem(x, t)
        elif roll < 0.5:
            name = r.choice(list(self.INPLACE_UNARY))
            kind, code = self.INPLACE_UNARY[name]
            if kind == "step" and is_float(t) and not self.exact_ok(x):
                return
            code = code.format(x=x, s=self.scalar(), a=self.scalar("int"), b=self.scalar("float"))
            self.emit(code, name, exact=kind == "exact" or not is_float(t))
        elif roll < 0.8:
            name = r.choice(list(self.INPLACE_BINARY))
            kind, code = self.INPLACE_BINARY[name]
            y = self.operand(t)
            m = None
            if name == "masked_fill_":
                m = self.mask(t.shape)
            if y is None or (name == "masked_fill_" and m is None) or (name == "copy_" and not self.cast_ok(y, t)):
                return
            floats = is_float(t) or "." in y or (y.startswith("t") and is_float(self.T(y)))
            self.emit(code.format(x=x, y=y, m=m, s=self.scalar()), name, exact=kind == "exact" or not floats)
        else:
            self.out_write(x, t)

    def mask(self, shape):
        """A bool tensor that broadcasts to shape: an exact comparison, or a new input."""
        r = self.rng
        m = self.pick(lambda u: u.dtype == torch.bool and _broadcasts_to(u.shape, shape), exact=True)
        if m is not None and r.random() < 0.5:
            return m
        return self.new_input(self.broadcastable(tuple(shape)), "bool", layout=r.random() < 0.3)

    def basic_index(self, t):
        r = self.rng
        parts = []
        for d in range(r.randint(1, max(1, t.dim()))):
            if d >= t.dim():
                break
            n = t.shape[d]
            roll = r.random()
            if roll < 0.3 and n:
                parts.append(str(r.randint(-n, n - 1)))
            elif roll < 0.8:
                a = r.randint(0, n)
                step = r.choice(("", ":2", ":3"))
                parts.append(f"{a}:{r.randint(a, n + 1)}{step}")
            else:
                parts.append(":")
        return ", ".join(parts) if parts else "..."

    def setitem(self, x, t):
        r = self.rng
        idx = self.basic_index(t)
        try:
            target = eval(f"t[{idx}]", {"t": t})
        except Exception:
            target = t
        v = self.scalar() if r.random() < 0.5 else self.operand(target)
        if v is None or not self.cast_ok(v, t):
            return
        floats = is_float(t) or "." in v or (v.startswith("t") and is_float(self.T(v)))
        self.emit(f"{x}[{idx}] = {v}", "setitem", exact=not floats or self.exact_ok(v))

    def out_write(self, x, t):
        """torch.fn(..., out=x): x may be a view, of another dtype or size (torch resizes or raises)."""
        r = self.rng
        a = self.pick()
        ta = self.T(a)
        kind = r.choice(("add", "neg", "sum", "cumsum", "mm", "cat", "index_select", "amax", "where", "clamp"))
        d = self.dim(ta)
        call, exact = None, True
        if kind == "add":
            y = self.operand(ta)
            call, exact = (f"torch.add({a}, {y}", not is_float(ta)) if y is not None else (None, True)
        elif kind == "neg":
            call = f"torch.neg({a}"
        elif kind == "sum":
            call, exact = f"torch.sum({a}, {d}", not is_float(ta)
        elif kind == "cumsum":
            call, exact = f"torch.cumsum({a}, {d}", not is_float(ta)
        elif kind == "amax":
            call = f"torch.amax({a}, {d}"
        elif kind == "clamp":
            call = f"torch.clamp({a}, {self.scalar('int')}"
        elif kind == "mm" and ta.dim() == 2:
            b = self.new_input((ta.shape[1], r.randint(1, 3)), dtype_of(ta))
            call, exact = (f"torch.mm({a}, {b}", not is_float(ta)) if b is not None else (None, True)
        elif kind == "cat" and ta.dim():
            call = f"torch.cat([{a}, {a}], {d}"
        elif kind == "index_select" and ta.dim():
            idx = self.index_list(ta.shape[d], r.randint(1, 3), negative=False)
            call = f"torch.index_select({a}, {d}, torch.tensor({idx}).to(dev)"
        elif kind == "where":
            c = self.mask(ta.shape)
            call = f"torch.where({c}, {a}, {self.scalar()}" if c is not None else None
        if call is None or x not in self.ex.env:
            return
        try:
            result = eval(call + ")", dict(self.ex.env))
        except Exception:
            result = None
        if isinstance(result, torch.Tensor) and result.shape != t.shape:
            # torch resizes out; when out shares memory with an input, or grows, what it reads is undefined
            key = t.untyped_storage().data_ptr()
            shares = any(self.T(n).untyped_storage().data_ptr() == key for n in used({"code": call}))
            if shares or result.numel() > t.numel() or not t.is_contiguous():
                return
        self.emit(f"{call}, out={x})", f"{kind}_out", exact=exact)

    # -- reductions ------------------------------------------------------------------------------

    def reduce(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        out = self.fresh()
        d = self.dim(t, allow_none=True)
        dd = "" if d is None else str(d)
        keep = ", keepdim=True" if d is not None and r.random() < 0.3 else ""
        dk = f"{dd}{keep}"
        kind = r.choice(
            (
                "sum",
                "sum",
                "sum_dtype",
                "mean",
                "amax",
                "amin",
                "max_values",
                "max_indices",
                "argmax",
                "argmin",
                "cumsum",
                "cumprod",
                "var",
                "std",
                "prod",
                "all",
                "any",
                "logsumexp",
                "norm",
                "nansum",
                "count_nonzero",
                "max_all",
                "sum_dims",
            )
        )
        fl = is_float(t)
        if kind == "sum":
            self.emit(f"{out} = {x}.sum({dk})", "sum", exact=not fl)
        elif kind == "sum_dtype":
            self.emit(
                f"{out} = {x}.sum({dd + ', ' if dd else ''}dtype=torch.{r.choice(DTYPES)})", "sum_dtype", exact=False
            )
        elif kind == "sum_dims" and t.dim() >= 2:
            self.emit(f"{out} = {x}.sum((0, -1){keep})", "sum_dims", exact=not fl)
        elif kind == "mean":
            self.emit(f"{out} = {x}.mean({dk})", "mean", exact=False)
        elif kind in ("amax", "amin"):
            self.emit(f"{out} = {x}.{kind}({dk})", kind)
        elif kind == "max_values" and d is not None:
            self.emit(f"{out} = {x}.{r.choice(('max', 'min'))}({dk}).values", "max_dim")
        elif kind == "max_indices" and d is not None:
            if not self.exact_ok(x) and not _no_ties(t, d):
                return
            self.emit(f"{out} = {x}.{r.choice(('max', 'min'))}({dk}).indices", "max_dim_indices")
        elif kind in ("argmax", "argmin"):
            if not self.exact_ok(x) and not _no_ties(t, d):
                return
            self.emit(f"{out} = {x}.{kind}({dk})", kind)
        elif kind in ("cumsum", "cumprod") and d is not None:
            self.emit(f"{out} = {x}.{kind}({d})", kind, exact=not fl)
        elif kind in ("var", "std"):
            self.emit(
                f"{out} = {x}.{kind}({dd + ', ' if dd else ''}correction={r.randint(0, 1)}{keep})", kind, exact=False
            )
        elif kind == "prod":
            self.emit(f"{out} = {x}.prod({dk})", "prod", exact=not fl)
        elif kind in ("all", "any"):
            if fl and not self.exact_ok(x):
                return
            self.emit(f"{out} = {x}.{kind}({dk})", kind)
        elif kind == "logsumexp" and d is not None:
            self.emit(f"{out} = {x}.logsumexp({d}{keep})", "logsumexp", exact=False)
        elif kind == "norm":
            self.emit(f"{out} = {x}.norm()", "norm", exact=False)
        elif kind == "nansum":
            self.emit(f"{out} = {x}.nansum({dk})", "nansum", exact=not fl)
        elif kind == "count_nonzero":
            if fl and not self.exact_ok(x):
                return
            self.emit(f"{out} = {x}.count_nonzero({dd})", "count_nonzero")
        elif kind == "max_all":
            self.emit(f"{out} = {x}.{r.choice(('max', 'min'))}()", "max_all")

    # -- matmul ----------------------------------------------------------------------------------

    def matmul(self):
        r = self.rng
        x = self.pick(lambda u: 1 <= u.dim() <= 3)
        if x is None:
            return
        t = self.T(x)
        out = self.fresh()
        k = t.shape[-1]
        dtype = dtype_of(t) if r.random() < 0.9 else r.choice(DTYPES)
        m = r.randint(1, 4)
        kind = r.choice(("matmul", "mm", "bmm", "addmm", "mv", "dot", "einsum", "linear", "attention"))
        fl = is_float(t)
        if kind == "matmul":
            y = self.new_input((k, m) if r.random() < 0.7 else (k,), dtype)
            if y:
                self.emit(f"{out} = {x} @ {y}", "matmul", exact=not fl)
        elif kind == "mm" and t.dim() == 2:
            y = self.new_input((k, m), dtype)
            if y:
                self.emit(f"{out} = torch.mm({x}, {y})", "mm", exact=not fl)
        elif kind == "bmm" and t.dim() == 3:
            y = self.new_input((t.shape[0], k, m), dtype)
            if y:
                self.emit(f"{out} = torch.bmm({x}, {y})", "bmm", exact=not fl)
        elif kind == "addmm" and t.dim() == 2:
            y = self.new_input((k, m), dtype)
            c = self.new_input(self.broadcastable((t.shape[0], m)), dtype)
            if y and c:
                self.emit(f"{out} = torch.addmm({c}, {x}, {y}, beta=0.5, alpha=2)", "addmm", exact=not fl)
        elif kind == "mv" and t.dim() == 2:
            y = self.new_input((k,), dtype)
            if y:
                self.emit(f"{out} = torch.mv({x}, {y})", "mv", exact=not fl)
        elif kind == "dot" and t.dim() == 1:
            y = self.new_input((k,), dtype)
            if y:
                self.emit(f"{out} = torch.dot({x}, {y})", "dot", exact=not fl)
        elif kind == "einsum" and t.dim() == 2:
            y = self.new_input((m, k), dtype)
            if y:
                self.emit(f"{out} = torch.einsum('ij,kj->ik', {x}, {y})", "einsum", exact=not fl)
        elif kind == "attention" and fl and t.dim() == 3:
            # (the query's layout picks the result's where torch's CPU runs its flash kernel: like the query)
            s = r.randint(1, 5)
            y = self.new_input((t.shape[0], s, k), dtype_of(t))
            v = self.new_input((t.shape[0], s, k if r.random() < 0.8 else m), dtype_of(t))
            opts = r.choice(("", ", is_causal=True", ", scale=0.3"))
            if y and v:
                self.emit(f"{out} = F.scaled_dot_product_attention({x}, {y}, {v}{opts})", "attention", exact=False)
        elif kind == "linear" and fl:
            w = self.new_input((m, k), dtype)
            b = self.new_input((m,), dtype) if r.random() < 0.6 else "None"
            if w and b:
                self.emit(f"{out} = F.linear({x}, {w}, {b})", "linear", exact=False)

    # -- indexing and scatters ---------------------------------------------------------------------

    def index(self):
        r = self.rng
        x = self.pick(lambda u: u.dim() >= 1)
        if x is None:
            return
        t = self.T(x)
        out = self.fresh()
        d = self.dim(t)
        n = t.shape[d]
        kind = r.choice(
            (
                "index_select",
                "gather",
                "scatter",
                "scatter_value",
                "scatter_add",
                "scatter_reduce",
                "index_add",
                "index_copy",
                "index_fill",
                "adv",
                "adv2",
                "mask",
                "index_put",
                "index_put_",
                "setitem_adv",
                "put_",
                "take",
                "masked_fill",
                "masked_select",
                "nonzero",
            )
        )
        fl = is_float(t)
        idx_lit = _index_literal
        if kind == "index_select":
            idx = self.index_list(n, r.randint(0, 4), negative=False)
            self.emit(f"{out} = {x}.index_select({d}, {idx_lit(idx)})", "index_select")
        elif kind in ("gather", "scatter", "scatter_value", "scatter_add", "scatter_reduce"):
            unique = kind in ("scatter", "scatter_value")  # duplicate targets without a reduction: unspecified
            ishape = [r.randint(1, s) if s else 0 for s in t.shape]
            ishape[d] = r.randint(1, max(1, n)) if n else 0
            if math.prod(ishape) == 0 and n == 0:
                return
            idx = _index_tensor(r, ishape, d, n, unique)
            lit = idx_lit(idx)
            if kind == "gather":
                self.emit(f"{out} = {x}.gather({d}, {lit})", "gather")
                return
            if kind == "scatter_value":
                self.emit(f"{out} = {x}.scatter({d}, {lit}, {self.scalar()})", "scatter_value")
                return
            src = self.new_input(tuple(ishape), dtype_of(t) if r.random() < 0.9 else None)
            if src is None:
                return
            if kind == "scatter":
                self.emit(f"{out} = {x}.scatter({d}, {lit}, {src})", "scatter")
            elif kind == "scatter_add":
                self.emit(f"{out} = {x}.scatter_add({d}, {lit}, {src})", "scatter_add", exact=not fl)
            else:
                red = r.choice(("sum", "prod", "mean", "amax", "amin"))
                inc = r.choice(("True", "False"))
                code = f"{out} = {x}.scatter_reduce({d}, {lit}, {src}, '{red}', include_self={inc})"
                self.emit(code, "scatter_reduce", exact=not fl or red in ("amax", "amin"))
        elif kind in ("index_add", "index_copy"):
            unique = kind == "index_copy"
            idx = self.index_list(n, r.randint(1, 3), unique=unique, negative=False)
            shape = list(t.shape)
            shape[d] = len(idx)
            src = self.new_input(tuple(shape), dtype_of(t))
            if src is not None:
                self.emit(f"{out} = {x}.{kind}({d}, {idx_lit(idx)}, {src})", kind, exact=not fl or unique)
        elif kind == "index_fill" and t.numel() > 0:
            # torch leaves this open: index_fill of an empty tensor at indices past its empty dim fails on
            # the CPU with an internal storage error (setStorage ... out of bounds, RuntimeError) before
            # the index check that raises IndexError; tiny raises the IndexError
            idx = self.index_list(n, r.randint(1, 3), negative=False)
            self.emit(f"{out} = {x}.index_fill({d}, {idx_lit(idx)}, {self.scalar()})", "index_fill")
        elif kind == "adv":
            idx = self.index_list(t.shape[0], r.randint(0, 4))
            self.emit(f"{out} = {x}[{idx_lit(idx)}]", "adv_index")
        elif kind == "adv2" and t.dim() >= 2:
            a = self.index_list(t.shape[0], 2)
            b = self.index_list(t.shape[1], r.choice((1, 2)))
            self.emit(f"{out} = {x}[{idx_lit(a)}, {idx_lit(b)}]", "adv_index2")
        elif kind == "mask":
            m = self.new_input(tuple(t.shape[: r.randint(1, t.dim())]), "bool", layout=False)
            if m is not None:
                self.emit(f"{out} = {x}[{m}]", "mask_index")
        elif kind in ("index_put", "index_put_", "setitem_adv"):
            acc = kind != "setitem_adv" and r.random() < 0.5
            idx = self.index_list(t.shape[0], r.randint(1, 3), unique=not acc)
            v = (
                self.new_input((), dtype_of(t))
                if r.random() < 0.5
                else self.new_input((len(idx),) + tuple(t.shape[1:]))
            )
            if v is None:
                return
            exact = not fl or not acc
            if kind == "setitem_adv":
                self.emit(f"{x}[{idx_lit(idx)}] = {v}", "setitem_adv", exact=exact)
            elif kind == "index_put":
                self.emit(f"{out} = {x}.index_put(({idx_lit(idx)},), {v}, accumulate={acc})", "index_put", exact=exact)
            else:
                self.emit(f"{x}.index_put_(({idx_lit(idx)},), {v}, accumulate={acc})", "index_put_", exact=exact)
        elif kind == "put_":
            acc = r.random() < 0.5
            idx = self.index_list(t.numel(), r.randint(1, 4), unique=not acc)
            src = self.new_input((len(idx),), dtype_of(t))
            if src is not None:
                self.emit(f"{x}.put_({idx_lit(idx)}, {src}, accumulate={acc})", "put_", exact=not fl or not acc)
        elif kind == "take":
            idx = self.index_list(t.numel(), r.randint(0, 4))
            self.emit(f"{out} = torch.take({x}, {idx_lit(idx)})", "take")
        elif kind == "masked_fill":
            m = self.mask(t.shape)
            if m is not None:
                self.emit(f"{out} = {x}.masked_fill({m}, {self.scalar()})", "masked_fill")
        elif kind == "masked_select":
            m = self.mask(t.shape)
            if m is not None:
                self.emit(f"{out} = {x}.masked_select({m})", "masked_select")
        elif kind == "nonzero":
            if fl and not self.exact_ok(x):
                return
            self.emit(f"{out} = {x}.nonzero()", "nonzero")

    # -- sorting ---------------------------------------------------------------------------------

    def sort(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        out = self.fresh()
        d = self.dim(t)
        n = t.shape[d] if t.dim() else 1
        kind = r.choice(("sort_stable", "sort", "argsort", "topk", "kthvalue", "msort", "sort_values"))
        desc = r.choice(("False", "True"))
        ties_ok = _no_ties(t, d)
        if kind == "sort_stable" and (self.exact_ok(x) or ties_ok):
            field = r.choice(("values", "indices"))
            self.emit(f"{out} = {x}.sort(dim={d}, descending={desc}, stable=True).{field}", "sort_stable")
        elif kind == "sort_values":
            self.emit(f"{out} = {x}.sort({d}, descending={desc}).values", "sort_values")
        elif kind == "sort" and ties_ok:
            self.emit(f"{out} = {x}.sort({d}, descending={desc}).indices", "sort")
        elif kind == "argsort" and ties_ok:
            self.emit(f"{out} = {x}.argsort({d}, descending={desc})", "argsort")
        elif kind == "topk":
            k = r.randint(0, n)
            field = "values" if not ties_ok else r.choice(("values", "indices"))
            self.emit(f"{out} = {x}.topk({k}, {d}, largest={desc}).{field}", "topk")
        elif kind == "kthvalue" and n:
            field = "values" if not ties_ok else r.choice(("values", "indices"))
            self.emit(f"{out} = {x}.kthvalue({r.randint(1, n)}, {d}).{field}", "kthvalue")
        elif kind == "msort" and t.dim():
            self.emit(f"{out} = {x}.msort()", "msort")

    # -- autograd ----------------------------------------------------------------------------------

    def grad(self):
        r = self.rng
        roll = r.random()
        needs = [n for n in self.tensors(lambda u: u.requires_grad)]
        if roll < 0.4 or not needs:
            x = self.pick(lambda u: is_float(u) and not u.requires_grad)
            if x is None:
                return
            self.emit(f"{self.fresh()} = {x}.detach().clone().requires_grad_()", "requires_grad")
            return
        if roll < 0.7:
            # a differentiable chain on a tensor that requires grad
            x = r.choice(needs[-3:])
            t = self.T(x)
            out = self.fresh()
            code = r.choice(
                (
                    "{x}.expand({e})",
                    "{x} * {x}",
                    "{x}.sum({d})",
                    "{x}.tanh()",
                    "{x}.flip({d})",
                    "{x}.exp()",
                    "{x}[..., ::2]",
                    "{x}.transpose(0, -1)",
                    "{x}.cumsum({d})",
                    "{x}.softmax({d})",
                    "{x}.amax({d})",
                    "{x}.unsqueeze(0).expand(2, *{x}.shape)",
                    "{x}.reshape(-1)",
                    "{x}.relu()",
                    "{x}.clamp(-1, 1)",
                    "{x}.abs()",
                    "{x}.mean()",
                    "torch.take({x}, torch.tensor([0, 0]).to(dev))",
                    "{x}.pow(2)",
                    "{x}.log_softmax({d})",
                )
            )
            e = tuple(r.choice((2, 3)) if s == 1 else s for s in t.shape)
            self.emit(f"{out} = " + code.format(x=x, d=self.dim(t), e=e), "grad_op", exact=False)
            return
        y = r.choice(needs[-3:])
        ty = self.T(y)
        if ty.numel() == 1 and r.random() < 0.5:
            self.emit(f"{y}.sum().backward()", "backward", exact=False)
        else:
            gvals = self.values("float32", ty.numel()) if ty.numel() else []
            gvals = [0.5 if not math.isfinite(v) else v for v in gvals]
            g = f"torch.tensor({gvals}, dtype=torch.{dtype_of(ty)}).reshape({tuple(ty.shape)}).to(dev)"
            self.emit(f"{y}.backward({g})", "backward", exact=False)
        leaf = self.pick(lambda u: u.requires_grad and u.is_leaf)
        if leaf is not None:
            self.emit(f"{leaf}.grad", "grad", obs=True)

    # -- torch.nn.functional, forward and backward ------------------------------------------------

    def nn(self):
        """A layer on new float inputs (some of them leaves requiring grad), then often its backward and
        the leaves' gradients."""
        r = self.rng
        dtype = r.choice(("float32", "float32", "float64"))
        n, c, h, w = r.randint(1, 2), r.randint(1, 3), r.randint(2, 5), r.randint(2, 5)
        kind = r.choice(
            ("conv2d", "conv_transpose2d", "conv1d", "max_pool2d", "avg_pool2d", "layer_norm", "batch_norm")
            + ("cross_entropy", "embedding", "interpolate", "pad", "group_norm", "softmax")
        )
        leaves = []

        def arg(shape, dt=dtype, grad=True):
            # finite values: how an inf propagates through a normalization or a convolution depends on the
            # formula torch's CPU kernel happens to use (inf - inf = nan), which no contract fixes
            name = self.new_input(shape, dt, layout=r.random() < 0.3, finite=True)
            if name is not None and grad and r.random() < 0.6:
                leaf = self.fresh()
                if self.emit(f"{leaf} = {name}.detach().clone().requires_grad_()", "requires_grad"):
                    leaves.append(leaf)
                    return leaf
            return name

        out = None
        if kind in ("conv2d", "conv_transpose2d"):
            g = r.choice((1, 1, c))
            o = g * r.randint(1, 2)
            k = (r.randint(1, min(3, h)), r.randint(1, min(3, w)))
            stride = (r.randint(1, 2), r.randint(1, 3))
            x = arg((n, c, h, w))
            b = arg((o,)) if r.random() < 0.7 else "None"
            if kind == "conv2d":
                wt = arg((o, c // g, *k))
                pad = r.choice(("0", "1", "'same'")) if stride == (1, 1) else r.choice(("0", "1"))
                call = f"F.conv2d({x}, {wt}, {b}, stride={stride}, padding={pad}, groups={g})"
            else:
                wt = arg((c, o // g, *k))
                op = tuple(r.randint(0, s - 1) for s in stride)
                call = f"F.conv_transpose2d({x}, {wt}, {b}, stride={stride}, output_padding={op}, groups={g})"
            if x and wt and b:
                out = self.emit(f"{self.fresh()} = {call}", kind, exact=False)
        elif kind == "conv1d":
            x, wt = arg((n, c, w)), arg((2, c, r.randint(1, w)))
            if x and wt:
                out = self.emit(f"{self.fresh()} = F.conv1d({x}, {wt}, padding={r.randint(0, 1)})", kind, exact=False)
        elif kind in ("max_pool2d", "avg_pool2d"):
            x = arg((n, c, h, w))
            k = r.randint(1, min(h, w))
            ceil = r.choice(("False", "True"))
            if x:
                code = f"F.{kind}({x}, {k}, stride={r.randint(1, 2)}, padding={r.randint(0, k // 2)}, ceil_mode={ceil})"
                out = self.emit(f"{self.fresh()} = {code}", kind, exact=kind == "max_pool2d")
        elif kind in ("layer_norm", "group_norm"):
            # over 2 elements the normalized values are +-1 whatever the input: the input's gradient is 0
            # in exact arithmetic, and torch's and tiny's are rounding noise of different orders
            w = max(w, 3)
            x = arg((n, c, w))
            if kind == "layer_norm":
                wt, b = arg((w,)), arg((w,))
                call = f"F.layer_norm({x}, ({w},), {wt}, {b})"
            else:
                wt, b = arg((c,)), arg((c,))
                call = f"F.group_norm({x}, 1, {wt}, {b})"
            if x and wt and b:
                out = self.emit(f"{self.fresh()} = {call}", kind, exact=False)
        elif kind == "batch_norm":
            x = arg((n + 1, c, w))
            if x:
                out = self.emit(f"{self.fresh()} = F.batch_norm({x}, None, None, training=True)", kind, exact=False)
        elif kind == "cross_entropy":
            x = arg((n + 1, c + 1))
            target = [r.randrange(c + 1) for _ in range(n + 1)]
            smooth = r.choice(("0.0", "0.1"))
            if x:
                code = f"F.cross_entropy({x}, torch.tensor({target}).to(dev), label_smoothing={smooth})"
                out = self.emit(f"{self.fresh()} = {code}", kind, exact=False)
        elif kind == "embedding":
            wt = arg((5, c))
            idx = [r.randrange(5) for _ in range(r.randint(1, 4))]
            if wt:
                out = self.emit(f"{self.fresh()} = F.embedding(torch.tensor({idx}).to(dev), {wt})", kind)
        elif kind == "interpolate":
            x = arg((n, c, h, w))
            mode = r.choice(("'nearest'", "'bilinear'"))
            if x:
                code = f"F.interpolate({x}, scale_factor={r.choice((2, 0.5, 1.5))}, mode={mode})"
                out = self.emit(f"{self.fresh()} = {code}", kind, exact=False)
        elif kind == "pad":
            x = arg((n, c, w))
            mode = r.choice(("'constant'", "'reflect'", "'replicate'"))
            pads = (r.randint(-1, 2), r.randint(0, 2))
            if x:
                out = self.emit(f"{self.fresh()} = F.pad({x}, {pads}, mode={mode})", kind)
        elif kind == "softmax":
            x = arg((n, c, w))
            if x:
                out = self.emit(f"{self.fresh()} = F.log_softmax({x}, {r.randint(-1, 2)})", kind, exact=False)
        if out is None or not leaves or r.random() < 0.25:
            return
        t = self.T(out)
        gvals = [v if math.isfinite(v) else 0.5 for v in self.values("float32", t.numel())]
        g = f"torch.tensor({gvals}, dtype=torch.{dtype_of(t)}).reshape({tuple(t.shape)}).to(dev)"
        self.emit(f"{out}.backward({g})", "backward", exact=False)
        for leaf in leaves:
            self.emit(f"{leaf}.grad", f"{kind}_grad", obs=True)

    def serialize(self):
        """torch.save then torch.load (no map_location: the tensor comes back on its device)."""
        x = self.pick()
        if x is None:
            return
        out = self.fresh()
        code = f"{out} = (lambda b: (torch.save({x}, b), b.seek(0), torch.load(b))[2])(io.BytesIO())"
        self.emit(code, "save_load")

    # -- observations (mid-program syncs) ------------------------------------------------------

    def observe(self):
        r = self.rng
        x = self.pick()
        t = self.T(x)
        kind = r.choice(("cpu", "cpu", "item", "tolist", "clone_cpu"))
        tol = self.tolerance(x)
        if kind == "item" and t.numel():
            self.emit(f"{x}.flatten()[{r.randrange(t.numel())}].item()", "item", obs=True, dtype=tol)
        elif kind == "tolist":
            self.emit(f"{x}.tolist()", "tolist", obs=True, dtype=tol)
        elif kind == "clone_cpu":
            self.emit(f"{x}.clone().cpu()", "cpu", obs=True, dtype=tol)
        else:
            self.emit(f"{x}", "cpu", obs=True, dtype=tol)

    def tolerance(self, x):
        """The dtype whose tolerance x's values compare at: its own, or a looser one it was computed in."""
        t = self.T(x)
        if is_float(t) and x in self.precision and not self.exact.get(x, True):
            return loosest(dtype_of(t), self.precision[x])
        return dtype_of(t)


def _contiguous(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _extent(shape, stride):
    """Elements of storage a view of this size and stride reaches."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True))


def _factor(n, r):
    """A random shape with n elements."""
    if n == 0:
        return tuple(r.choice(((0,), (0, 3), (2, 0), (0, -1))))
    dims = []
    while n > 1 and len(dims) < 3:
        divisors = [k for k in range(2, n + 1) if n % k == 0]
        k = r.choice(divisors)
        dims.append(k)
        n //= k
    if n > 1:
        dims.append(n)
    if r.random() < 0.3:
        dims.insert(r.randint(0, len(dims)), 1)
    if dims and r.random() < 0.2:
        dims[r.randrange(len(dims))] = -1
    return tuple(dims)


def _in_range(t, target):
    if target == "bool":
        return True
    if t.numel() == 0:
        return True
    x = t.double()
    if not x.isfinite().all():
        return False
    lo, hi = RANGE[target]
    return bool((x >= lo).all() and (x <= hi).all()) and (target != "int64" or bool((x.abs() < 2**52).all()))


def _no_ties(t, d):
    """True when no row along d holds two equal or nearly equal values (or two NaNs): then the indices
    of sort, topk, argmax and the like are the same under any tie rule."""
    if t.dtype == torch.bool:
        return t.numel() <= 1
    x = t.detach().double()
    if x.dim() == 0 or t.numel() == 0:
        return True
    if d is None:
        x = x.reshape(-1)
        d = 0
    x = x.movedim(d, -1).reshape(-1, x.shape[d])
    if x.isnan().sum(-1).gt(1).any():
        return False
    s = x.nan_to_num(nan=math.inf).sort(-1).values
    gaps = s[:, 1:] - s[:, :-1]
    both_inf = s[:, 1:].isinf() & (s[:, 1:] == s[:, :-1])
    near = gaps.abs() <= 1e-3 * (1 + s[:, 1:].abs())
    return not bool((near | both_inf).any())


def _int_div_by_zero(g, names, y):
    x = g.T(names[0])
    ty = g.T(y) if y and y.startswith("t") else None
    if is_float(x) or (ty is not None and is_float(ty)) or "." in (y or ""):
        return False
    if ty is None:
        return y in ("0", "False")
    # the divisor is cast to the result's dtype first: a 0-d int32 of -2**31 divides an int16 by 0
    return bool((ty.to(torch.result_type(x, ty)) == 0).any())


def _index_tensor(r, shape, d, n, unique):
    """An int64 index for gather/scatter: values in [0, n); unique along d when asked."""
    t = torch.empty(shape, dtype=torch.int64)
    if t.numel() == 0:
        return t.tolist()
    moved = t.movedim(d, -1)
    rows = moved.reshape(-1, shape[d])
    for i in range(rows.shape[0]):
        if unique:
            pool = list(range(n))
            r.shuffle(pool)
            rows[i] = torch.tensor(pool[: shape[d]])
        else:
            rows[i] = torch.tensor([r.randrange(n) for _ in range(shape[d])])
    return rows.reshape(moved.shape).movedim(-1, d).tolist()


def _index_literal(v):
    return f"torch.tensor({v}).to(dev)" if v else "torch.tensor([], dtype=torch.int64).to(dev)"


def _broadcasts_to(shape, target):
    try:
        return torch.broadcast_shapes(shape, target) == tuple(target)
    except RuntimeError:
        return False


def generate(seed, include_known=False, max_records=None):
    """The program of this seed: a list of records (programs.py)."""
    gen = Generator(seed, include_known, max_records)
    guard = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while len(gen.program) < gen.max_records and guard < 200:
            guard += 1
            gen.step()
    return gen.program


def _odd_storage(t, code):
    """Whether viewing t as the dtype its record names leaves bytes of t's storage outside whole elements."""
    size = getattr(torch, code.rsplit("torch.", 1)[1].rstrip(")")).itemsize
    return t.untyped_storage().nbytes() % size != 0


def _holds(pred, t):
    """pred(t), False where asking raises (`is_leaf` of a view that a later in-place write made invalid)."""
    try:
        return bool(pred(t))
    except RuntimeError:
        return False


def _zero_dim_alias(g, t, v):
    """Whether the value v of `x[i] = v` names a 0-dim tensor that shares t's storage."""
    u = g.ex.env.get(v)
    return (
        isinstance(u, torch.Tensor)
        and u.dim() == 0
        and u.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    )


def _write_target(rec):
    """The tensor a record writes into: `out=` of an out= call, else the first name of an in-place
    record (one that defines nothing); None for every other record."""
    if defined(rec) or rec.get("obs") or rec["op"] in ("backward", "input"):
        return None
    m = re.search(r"out=(t\d+)", rec["code"])
    if m:
        return m.group(1)
    m = NAME.search(rec["code"])
    return m.group(0) if m else None


def _reads_its_target_elsewhere(g, target, rec):
    """An in-place write whose operand is another view of the written memory (`x.mul_(x.select(1, 0))`):
    torch reads each element as its loop reaches it, after the writes before it, an order no contract fixes."""
    t = g.T(target)
    lo, hi = _byte_span(t)
    for n in used(rec):
        u = g.ex.env.get(n)
        if (
            n == target
            or not isinstance(u, torch.Tensor)
            or u.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
        ):
            continue
        if (u.data_ptr(), u.shape, u.stride()) == (t.data_ptr(), t.shape, t.stride()):
            continue
        ulo, uhi = _byte_span(u)
        if ulo < hi and lo < uhi:
            return True
    return False


def _byte_span(t):
    """The bytes [lo, hi) of t's storage that t's elements span."""
    if t.numel() == 0:
        return 0, 0
    lo = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s < 0)
    hi = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s > 0) + 1
    return lo * t.element_size(), hi * t.element_size()


def _order_dependent(x, out):
    """Whether an elementwise op reading x into out, x sharing out's storage, writes elements that it reads later
    where torch's overlap check cannot tell (x or out not dense): not x being out itself."""
    same = (x.storage_offset(), x.shape, x.stride()) == (out.storage_offset(), out.shape, out.stride())
    return not same and not (is_non_overlapping_and_dense_or_false(x) and is_non_overlapping_and_dense_or_false(out))


def _overlaps(t):
    """Whether two elements of t share memory."""
    if t.numel() <= 1:
        return False
    offsets = torch.zeros((), dtype=torch.int64)
    for n, st in zip(t.shape, t.stride(), strict=True):
        offsets = (offsets.unsqueeze(-1) + torch.arange(n) * st).reshape(-1)
    return offsets.unique().numel() < t.numel()
