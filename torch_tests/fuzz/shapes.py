"""Seeded random products, convolutions, pooling, reductions, attention, normalizations, layout copies, indexing,
activations and interpolation at sizes across the lowering's thresholds, on tiny against the CPU, with a float64
reference for both.

    .venv/bin/python torch_tests/fuzz/shapes.py --cases 200 --seed 0
    .venv/bin/python torch_tests/fuzz/shapes.py --replay 1234       # one case, printed as it runs

The op fuzzer (run.py) draws small tensors; the CPU lowering picks register blocks, tiles, split reductions,
runs of 256 rows, panels, padded channels-last copies and pair dot products by size, layout and dtype, and
most of those choices start at sizes it never reaches. Here each case draws its sizes from small ones, ones
near those thresholds (8, 16, 64, 256, 1024, 2080, ...) and medium ones, with transposed, sliced, offset and
channels-last operands. A sum of products' error is measured against the float64 result, relative to the same
sum over absolute values (the size its rounding scales with): tiny fails where its error is well above both the
CPU's and what its reduction's length allows (a wrong element is an error near 1, rounding one below 1e-4).
Other floating results are measured relative to their size. Results must also have the CPU's dtype, shape,
strides (a size-1 dim's aside) and NaN and infinities; integer and exact results must be equal. Prints a line per
failing case with its seed (--replay runs it again), then `shapes: N cases, F failures`; exit status 1 on any
failure.
"""

import argparse
import math
import random
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import on_device  # noqa: E402  (a copy on tiny in the same layout: strides, storage offset)

UNIT = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
THRESHOLDS = (2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300, 512, 1024, 2080)


def size(r, most=2080):
    """A dim's size: small, near a threshold of the lowering, or medium."""
    pick = r.random()
    n = r.randint(1, 17) if pick < 0.35 else r.choice(THRESHOLDS) if pick < 0.7 else r.randint(18, 400)
    return max(1, min(n, most))


def rand(r, shape, dtype, scale=1.0):
    g = torch.Generator().manual_seed(r.randrange(1 << 30))
    if not dtype.is_floating_point:
        return torch.randint(0 if dtype == torch.uint8 else -4, 5, shape, generator=g, dtype=dtype)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def layout(r, t):
    """t, or the same values through a transposed, sliced or offset view of a larger storage."""
    pick = r.random()
    if t.dim() == 4 and pick < 0.1:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() >= 2 and pick < 0.25:  # stored transposed
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if pick < 0.4:  # every other element of a storage twice as wide along the last dim
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    if pick < 0.5:  # an offset into a larger storage
        flat = torch.zeros(t.numel() + 5, dtype=t.dtype)
        view = flat[5:].view(t.shape)
        view.copy_(t)
        return view
    return t


# -- cases: each returns (name, fn, inputs, reduced length, kind), fn(*inputs) -> tensor or tuple of tensors ------


def product(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64), (6, 3, 1, 1, 1))[0]
    m, k, n = size(r), size(r), size(r)
    while m * k * n > 3e8:
        m, k, n = max(1, m // 2), max(1, k // 2), n
    s = 1 / math.sqrt(k)
    form = r.choice(("mm", "bmm", "matmul", "linear", "addmm", "at_b", "a_bt", "baddbmm", "mv"))
    b = r.choice((1, 2, 3, 5)) if form in ("bmm", "matmul", "baddbmm") else 1
    if form in ("bmm", "baddbmm"):
        a_, b_ = rand(r, (b, m, k), dt, s), rand(r, (b, k, n), dt)
        if form == "bmm":
            return form, torch.bmm, [a_, b_], k, "product"
        c = rand(r, (b, m, n), dt)
        return form, lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5, alpha=2), [c, a_, b_], k, "product"
    if form == "matmul":
        return form, torch.matmul, [rand(r, (b, m, k), dt, s), rand(r, (k, n), dt)], k, "product"
    if form == "linear":
        args = [rand(r, (m, k), dt, s), rand(r, (n, k), dt)]
        if r.random() < 0.5:
            args.append(rand(r, (n,), dt))
        return form, F.linear, args, k, "product"
    if form == "addmm":
        c = rand(r, (n,) if r.random() < 0.5 else (m, n), dt)
        return (
            form,
            lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2),
            [c, rand(r, (m, k), dt, s), rand(r, (k, n), dt)],
            k,
            "product",
        )
    if form == "at_b":  # a weight gradient: x.t() @ grad, tokens-major
        return form, lambda x, y: x.t() @ y, [rand(r, (k, m), dt, s), rand(r, (k, n), dt)], k, "product"
    if form == "a_bt":
        return form, lambda x, y: x @ y.t(), [rand(r, (m, k), dt, s), rand(r, (n, k), dt)], k, "product"
    if form == "mv":
        return form, torch.mv, [rand(r, (m, k), dt, s), rand(r, (k,), dt)], k, "product"
    return form, torch.mm, [rand(r, (m, k), dt, s), rand(r, (k, n), dt)], k, "product"


def convolution(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float64), (6, 3, 1))[0]
    dims = r.choice((1, 2, 2, 2))
    transposed = dims == 2 and r.random() < 0.2
    groups = r.choice((1, 1, 1, 2, 4))
    cin = groups * r.choice((1, 2, 3, 4, 8, 16, 32))
    cout = groups * r.choice((1, 2, 3, 8, 16, 32, 64))
    batch = r.choice((1, 2, 3, 8, 16))
    kernel = [r.choice((1, 2, 3, 3, 3, 5, 7)) for _ in range(dims)]
    stride = r.choice((1, 1, 1, 2, 3))
    dilation = r.choice((1, 1, 1, 2))
    padding = r.choice((0, 1, 1, 2, 3))
    spatial = [max(kernel[i] * dilation, r.choice((1, 4, 7, 8, 13, 14, 16, 28, 31, 33))) for i in range(dims)]
    while batch * cin * cout * math.prod(spatial) * math.prod(kernel) > 2e8:
        batch, spatial = max(1, batch // 2), [max(kernel[i] * dilation, s // 2) for i, s in enumerate(spatial)]
    reduced = cin // groups * math.prod(kernel)
    x = rand(r, (batch, cin, *spatial), dt)
    if transposed:
        w = rand(r, (cin, cout // groups, *kernel), dt, 1 / math.sqrt(reduced))
        out_pad = r.choice((0, stride - 1)) if stride > dilation or stride > 1 else 0
        out_pad = min(out_pad, max(stride, dilation) - 1)

        def fn(x, w, b):
            return F.conv_transpose2d(x, w, b, stride, padding, out_pad, groups, dilation)
    else:
        w = rand(r, (cout, cin // groups, *kernel), dt, 1 / math.sqrt(reduced))
        conv = F.conv1d if dims == 1 else F.conv2d

        def fn(x, w, b):
            return conv(x, w, b, stride, padding, dilation, groups)

    try:
        out_shape = fn(x.double()[:1], w.double(), None).shape
    except RuntimeError:  # sizes the convolution refuses (an output below one element): a smaller case instead
        return convolution(r)
    grad = rand(r, (batch, *out_shape[1:]), dt)
    b = rand(r, (cout,), dt) if r.random() < 0.5 else None
    name = f"{'conv_transpose' if transposed else 'conv'}{dims}d k{kernel} s{stride} p{padding} d{dilation} g{groups}"
    return name, with_backward(fn, grad), [x, w, b], reduced * max(1, stride), "product"


def winograd_convolution(r):
    """A float32 3 x 3 convolution of stride 1 that tiny runs by Winograd's transforms on an AVX-512 CPU (channels and
    filters by 16s, padding up to 2, outputs of 16 tiles or more: aten_ops/conv.cpp, runs_winograd), forward and both
    gradients; a few of them (tiles of one output) sized just past the threshold."""
    cin, cout = r.choice((16, 32, 48, 64)), r.choice((16, 32, 64, 96))
    padding = r.choice((0, 1, 1, 2))
    hw = [r.choice((5, 6, 7, 8, 9, 13, 14, 16, 28, 31)) for _ in range(2)]
    x = rand(r, (r.choice((1, 2, 3, 8)), cin, *hw), torch.float32)
    w = rand(r, (cout, cin, 3, 3), torch.float32, 1 / math.sqrt(cin * 9))
    out = [n + 2 * padding - 2 for n in hw]
    if min(out) < 1:
        return winograd_convolution(r)
    b = rand(r, (cout,), torch.float32) if r.random() < 0.5 else None
    grad = rand(r, (x.shape[0], cout, *out), torch.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, padding)

    return f"conv2d 3x3 p{padding} (Winograd's shapes)", with_backward(fn, grad), [x, w, b], cin * 9, "product"


def with_backward(fn, grad):
    """fn's result and its inputs' gradients for the output gradient `grad`."""

    def run(*inputs):
        leaves = [t.detach().requires_grad_() if t is not None and t.is_floating_point() else t for t in inputs]
        out = fn(*leaves)
        out.backward(grad.to(out.device, out.dtype))
        return (out.detach(), *[t.grad for t in leaves if t is not None and t.is_floating_point()])

    run.absolute = lambda *inputs: with_backward(fn, grad.abs())(*inputs)  # the scale of each result's rounding
    return run


def pooling(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float64), (6, 3, 1))[0]
    kernel = r.choice((2, 2, 3, 4))
    stride = r.choice((None, 1, 2, 3))
    padding = r.randint(0, kernel // 2)
    hw = [max(kernel, r.choice((1, 5, 7, 8, 14, 15, 28, 33))) for _ in range(2)]
    x = rand(r, (r.choice((1, 2, 16)), r.choice((1, 3, 16, 32, 64)), *hw), dt)
    kind = r.choice(("max", "avg"))
    pool = F.max_pool2d if kind == "max" else F.avg_pool2d
    out_shape = pool(x[:1].double(), kernel, stride, padding).shape
    grad = rand(r, (x.shape[0], *out_shape[1:]), dt)
    return (
        f"{kind}_pool2d k{kernel} s{stride} p{padding}",
        with_backward(lambda t: pool(t, kernel, stride, padding), grad),
        [x],
        kernel * kernel,
        "product",
    )


def reduction(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float16, torch.float64), (6, 2, 1, 1))[0]
    rank = r.randint(1, 4)
    shape = [size(r, 4096 if rank == 1 else 2080) for _ in range(rank)]
    while math.prod(shape) > 2e7:
        shape[shape.index(max(shape))] //= 2
    x = rand(r, shape, dt)
    dim = r.randrange(rank)
    keep = r.random() < 0.3
    ops = {
        "sum": (lambda t: t.sum(dim, keepdim=keep), "product"),
        "sum_all": (lambda t: t.sum(), "product"),
        "mean": (lambda t: t.mean(dim, keepdim=keep), "product"),
        "amax": (lambda t: t.amax(dim, keepdim=keep), "exact"),
        "max_dim": (lambda t: t.max(dim, keepdim=keep), "exact"),
        "argmin": (lambda t: t.argmin(dim, keepdim=keep), "exact"),
        "var": (lambda t: t.var(dim, keepdim=keep), "close"),
        "softmax": (lambda t: t.softmax(dim), "close"),
        "log_softmax": (lambda t: t.log_softmax(dim), "close"),
        "layer_norm": (lambda t: F.layer_norm(t, t.shape[-1:]), "close"),
        "cumsum": (lambda t: t.cumsum(dim), "product"),
        "norm": (lambda t: torch.linalg.vector_norm(t, dim=dim), "close"),
    }
    name = r.choice(sorted(ops))
    fn, kind = ops[name]
    return f"{name} dim={dim} keepdim={keep}", fn, [x], shape[dim], kind


def attention(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float64), (6, 3, 1))[0]
    batch, heads, length, source = r.choice((1, 2, 8, 32)), r.choice((1, 2, 4)), size(r, 300), size(r, 300)
    head = r.choice((8, 16, 17, 32, 64))
    q, k, v = (rand(r, (batch, heads, n, head), dt) for n in (length, source, source))
    causal = r.random() < 0.3 and length == source
    grad = rand(r, (batch, heads, length, head), dt)
    fn = with_backward(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), grad)
    return f"attention causal={causal}", fn, [q, k, v], max(head, source), "close"


def normalization(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float64), (6, 3, 1))[0]
    batch, channels = r.choice((1, 2, 8, 16, 128)), r.choice((1, 3, 16, 32, 64))
    hw = [r.choice((1, 2, 7, 14, 28)) for _ in range(2)]
    while batch * channels * math.prod(hw) > 4e6:
        batch = max(1, batch // 2)
    x = rand(r, (batch, channels, *hw), dt)
    w, b = rand(r, (channels,), dt), rand(r, (channels,), dt)
    grad = rand(r, x.shape, dt)
    if r.random() < 0.6 and batch * math.prod(hw) > 1:
        fn = with_backward(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), grad)
        return "batch_norm", fn, [x, w, b], batch * math.prod(hw), "close"
    # (a group of one element has no variance: its gradient is rounding noise times 1 / sqrt(eps), on the CPU too)
    groups = r.choice([g for g in (1, 2, 4, 8, 16) if channels % g == 0 and channels // g * math.prod(hw) > 1] or [1])
    if channels // groups * math.prod(hw) == 1:
        hw = [2, hw[1]]
        x, grad = rand(r, (batch, channels, *hw), dt), rand(r, (batch, channels, *hw), dt)
    fn = with_backward(lambda x, w, b: F.group_norm(x, groups, w, b), grad)
    return f"group_norm groups={groups}", fn, [x, w, b], channels // groups * math.prod(hw), "close"


def layout_copy(r):
    dt = r.choices(
        (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.uint8), (5, 2, 1, 1, 1, 1)
    )[0]
    shape = [size(r, 300) for _ in range(r.randint(2, 4))]
    while math.prod(shape) > 8e6:
        shape[shape.index(max(shape))] //= 2
    x = rand(r, shape, dt) if dt != torch.bool else rand(r, shape, torch.int64) > 0
    order = list(range(len(shape)))
    r.shuffle(order)
    pads = [r.randint(0, 3) for _ in range(2 * min(2, len(shape)))]
    shift = r.randint(-5, 5)
    forms = {
        "permute_contiguous": lambda t: t.permute(order).contiguous(),
        "channels_last": lambda t: (
            t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t.t().contiguous()
        ),
        "pad": lambda t: F.pad(t, pads),
        "cat": lambda t: torch.cat([t, t.flip(-1)], dim=order[0]),
        "transpose_add": lambda t: t.transpose(0, -1) + t.transpose(0, -1).flip(0),
        "flip": lambda t: t.flip(order[:2]),
        "roll": lambda t: t.roll(shift, order[0]),
    }
    name = r.choice(sorted(forms))
    if name == "transpose_add" and dt == torch.bool:
        name = "flip"
    return name, forms[name], [x], 1, "exact"


def indexing(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float64), (6, 3, 1))[0]
    rows, width, count = size(r, 4096), size(r, 300), size(r, 2080)
    g = torch.Generator().manual_seed(r.randrange(1 << 30))
    index = torch.randint(0, rows, (count,), generator=g)
    table = rand(r, (rows, width), dt)
    grad = rand(r, (count, width), dt)
    form = r.choice(("embedding", "index_select", "gather", "cross_entropy"))
    if form == "embedding":
        return form, with_backward(lambda w, i: F.embedding(i, w), grad), [table, index], count, "product"
    if form == "index_select":
        return form, with_backward(lambda w, i: w.index_select(0, i), grad), [table, index], count, "product"
    if form == "gather":
        cols = torch.randint(0, width, (rows, width), generator=g)
        return form, lambda w, i: w.gather(1, i), [table, cols], 1, "exact"
    target = torch.randint(0, width, (rows,), generator=g)
    smoothing = r.choice((0.0, 0.0, 0.1))
    fn = with_backward(lambda x, y: F.cross_entropy(x, y, label_smoothing=smoothing), torch.tensor(1.0, dtype=dt))
    return f"cross_entropy smoothing={smoothing}", fn, [table, target], width, "close"


def resampling(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float64), (6, 3, 1))[0]
    mode = r.choice(("nearest", "bilinear", "bicubic", "nearest-exact"))
    x = rand(r, (r.choice((1, 2, 8)), r.choice((1, 3, 16)), size(r, 64), size(r, 64)), dt)
    scale = r.choice((0.5, 2.0, 1.7, 3.0))
    corners = mode in ("bilinear", "bicubic") and r.random() < 0.5
    out = [max(1, int(math.floor(n * scale))) for n in x.shape[2:]]
    grad = rand(r, (*x.shape[:2], *out), dt)
    kw = {"align_corners": corners} if mode in ("bilinear", "bicubic") else {}

    def fn(t):
        return F.interpolate(t, size=out, mode=mode, **kw)

    return f"interpolate {mode} corners={corners}", with_backward(fn, grad), [x], 16, "close"


def activation(r):
    dt = r.choices((torch.float32, torch.bfloat16, torch.float16, torch.float64), (6, 2, 1, 1))[0]
    shape = [size(r, 2080) for _ in range(r.randint(1, 3))]
    while math.prod(shape) > 4e6:
        shape[shape.index(max(shape))] //= 2
    x = rand(r, shape, dt, 3.0)
    grad = rand(r, shape, dt)
    name = r.choice(
        ("gelu", "gelu_tanh", "silu", "mish", "softplus", "elu", "sigmoid", "tanh", "hardswish", "logsigmoid")
    )
    f = {
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu,
        "mish": F.mish,
        "softplus": F.softplus,
        "elu": F.elu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "hardswish": F.hardswish,
        "logsigmoid": F.logsigmoid,
    }[name]
    return name, with_backward(f, grad), [x], 1, "close"


CASES = (
    product,
    product,
    product,
    convolution,
    convolution,
    winograd_convolution,
    pooling,
    reduction,
    reduction,
    attention,
    normalization,
    layout_copy,
    indexing,
    activation,
)


def case(seed):
    r = random.Random(seed)
    name, fn, inputs, reduced, kind = r.choice(CASES)(r)
    return name, fn, [None if t is None else layout(r, t) for t in inputs], reduced, kind


# -- comparison -----------------------------------------------------------------------------------------------------


def results(out):
    return list(out) if isinstance(out, tuple) else [out]


def to(inputs, device, dtype=None):
    return [
        None if t is None else t.to(device, dtype) if dtype is None or t.is_floating_point() else t.to(device)
        for t in inputs
    ]


def product_error(x, ref, scale):
    """The largest error of x against the float64 result ref, relative to scale (a sum of products' the same sum over
    absolute values); a NaN where ref has none counts as infinite."""
    if x.numel() == 0:
        return 0.0
    ref = ref.double()
    err = (x.double() - ref).abs() / (scale.double().abs() + torch.finfo(x.dtype).tiny)
    same = (x.double() == ref) | (x.isnan() & ref.isnan())  # infinities and NaN where the reference has them
    return err.masked_fill(same, 0).nan_to_num(nan=float("inf")).max().item()


def check(seed):
    """None, or what is wrong with this case on tiny."""
    name, fn, inputs, reduced, kind = case(seed)
    shapes = ", ".join(f"{tuple(t.shape)}{'' if t.is_contiguous() else ' strided'}" for t in inputs if t is not None)
    dt = next(t.dtype for t in inputs if t is not None)
    what = f"{name} {str(dt).removeprefix('torch.')} of {shapes}"
    try:
        cpu = results(fn(*inputs))
    except (RuntimeError, ValueError) as e:  # the CPU refuses the case (a dtype its kernel lacks): so must tiny
        try:
            fn(*on_device(inputs, "tiny"))
        except (RuntimeError, ValueError):
            return None
        return f"{what}: the CPU raised ({str(e).splitlines()[0]}) and tiny did not"
    tiny = [x.cpu() for x in results(fn(*on_device(inputs, "tiny")))]
    compared = dt.is_floating_point and kind != "exact"
    ref = results(fn(*to(inputs, "cpu", torch.float64))) if compared else None
    absolute = getattr(fn, "absolute", fn)
    in_abs = [t.double().abs() if t is not None and t.is_floating_point() else t for t in inputs]
    scale = results(absolute(*in_abs)) if compared and kind == "product" else None
    for i, (c, t) in enumerate(zip(cpu, tiny, strict=True)):
        where = f"{what}: result {i}"
        if t.dtype != c.dtype or t.shape != c.shape:
            return f"{where}: dtype/shape {t.dtype} {tuple(t.shape)}, cpu {c.dtype} {tuple(c.shape)}"
        # (a dim of one element: its stride addresses nothing, and is not compared)
        if t.numel() > 1 and [x for x, n in zip(t.stride(), t.shape, strict=True) if n > 1] != [
            x for x, n in zip(c.stride(), c.shape, strict=True) if n > 1
        ]:
            return f"{where}: strides {t.stride()}, cpu {c.stride()}"
        if kind == "exact" or not c.is_floating_point():
            if not torch.equal(t, c):
                bad = (t != c).nonzero()[:3].tolist()
                return f"{where}: differs at {bad}"
            continue
        special = [(x.isnan(), x.isposinf(), x.isneginf()) for x in (t, c)]
        if not all(torch.equal(a, b) for a, b in zip(*special, strict=True)):
            bad = ((t.isnan() != c.isnan()) | (t.isinf() != c.isinf())).nonzero()[:3].tolist()
            return f"{where}: NaN or infinity where the CPU's is not (or the reverse) at {bad}"
        # the error relative to a scale: a sum of products' to the same sum of absolute values, another result's to
        # its own size (near-zero values to the result's mean size); against the CPU's and the reduction's length
        # (float64: the CPU's result is the reference itself, its error 0, and tiny's is measured by rounding; a
        # result that is all rounding residue, zero in exact arithmetic, takes the case's largest mean result size as
        # its floor: attention's q gradient over one key is 0 exactly in tiny, -1e-15 on the CPU, seed 15370)
        if kind == "product":
            s, ulps = scale[i], 8
        else:
            size = ref[i].abs().mean()
            if c.dtype == torch.float64:
                size = max([size] + [r.abs().mean() for r in ref if r.is_floating_point() and r.numel()])
            s, ulps = ref[i].abs() + 0.1 * size, 16384 if c.dtype == torch.float64 else 32
        e_tiny, e_cpu = product_error(t, ref[i], s), product_error(c, ref[i], s)
        allowed = max(16 * e_cpu, ulps * UNIT[c.dtype] * math.sqrt(max(reduced, 1)), 2 * UNIT[c.dtype])
        if e_tiny > allowed:
            worst = ((t.double() - ref[i]).abs() / (s.double().abs() + 1e-300)).flatten().argmax().item()
            idx = list(torch.unravel_index(torch.tensor(worst), t.shape)) if t.dim() else []
            return (
                f"{where}: error {e_tiny:.3g} of its scale (cpu {e_cpu:.3g}, allowed {allowed:.3g}); worst at "
                f"{[int(v) for v in idx]}: tiny {t.flatten()[worst].item()}, cpu {c.flatten()[worst].item()}"
            )
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", type=int, help="run this one seed and print its case")
    args = parser.parse_args()
    import torch_tiny  # noqa: F401

    torch.set_num_threads(1)
    seeds = [args.replay] if args.replay is not None else range(args.seed, args.seed + args.cases)
    failures, start = 0, time.time()
    for seed in seeds:
        if args.replay is not None:
            print(f"seed {seed}: {case(seed)[0]}", flush=True)
        try:
            wrong = check(seed)
        except Exception:
            wrong = "raised\n" + traceback.format_exc()[-3000:]
        if wrong:
            failures += 1
            print(f"seed {seed}: {wrong}", flush=True)
    print(f"shapes: {len(seeds)} cases, {failures} failures ({time.time() - start:.0f} s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
