"""torch.uint16, uint32 and uint64 on tiny (issue #16): held natively, computed natively where torch's CPU has
kernels for them, refused with the CPU's own error where it has none (csrc/kernel_library.h, UnsignedPolicy)."""

import pytest
import torch
from conftest import DEVICE, FLOAT_DTYPES, INT_DTYPES, assert_same, check, check_devices, dtype_name

UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
BITS = {torch.uint16: 16, torch.uint32: 32, torch.uint64: 64}
by_unsigned = pytest.mark.parametrize("dtype", UNSIGNED, ids=dtype_name)


def edges(dtype):
    """0, 1, the top of the signed range and just above it, the largest value, and their neighbours."""
    top = 2 ** BITS[dtype] - 1
    half = 2 ** (BITS[dtype] - 1)
    return torch.tensor([0, 1, 2, half - 1, half, half + 5, top - 1, top, 3, half + 1], dtype=dtype)


def values(dtype, *shape, seed=0):
    """Seeded values over the whole range of dtype (random int64 bits, truncated as torch converts them)."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**63), 2**63 - 1, shape, generator=g, dtype=torch.int64)
    return bits.to(dtype)


def small(dtype, *shape, seed=0, low=0):
    """Seeded values in [low, low + 6): repeated keys for sorts and uniques, divisors, indices."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, low + 6, shape, generator=g, dtype=torch.int64).to(dtype)


def _cpu_copies(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def computes(fn, *args, devices=False, **kwargs):
    """check() (check_devices() of fn(device) with devices=True) of a call the CPU computes: a test of what
    works must not pass on two errors."""
    fn("cpu") if devices else fn(*_cpu_copies(args))
    check_devices(fn, **kwargs) if devices else check(fn, *args, **kwargs)


def refuses(fn, *args, devices=False):
    """check() (check_devices() with devices=True) of a call the CPU refuses: tiny raises the same type."""
    with pytest.raises((NotImplementedError, RuntimeError, OverflowError)):
        fn("cpu") if devices else fn(*_cpu_copies(args))
    check_devices(fn) if devices else check(fn, *args)


def ix(like, data):
    """An index tensor on the device of `like`."""
    return torch.tensor(data, device=like.device)


# ---- factories, copies, item ----


@by_unsigned
def test_factories_make_tensors_of_the_dtype(dtype):
    top = 2 ** BITS[dtype] - 1
    computes(
        lambda dev: (
            torch.zeros(2, 3, dtype=dtype, device=dev),
            torch.ones(4, dtype=dtype, device=dev),
            torch.full((3,), top, dtype=dtype, device=dev),
            torch.full((2, 2), 2 ** (BITS[dtype] - 1) + 5, dtype=dtype, device=dev),
            torch.zeros_like(torch.ones(2, 5, device=dev), dtype=dtype),
            torch.full_like(torch.ones(3, device=dev, dtype=dtype), 7),
            torch.empty(2, 4, dtype=dtype, device=dev).shape,
        ),
        devices=True,
    )


@by_unsigned
def test_a_fill_checks_the_value_as_on_the_cpu(dtype):
    # torch's checked conversion: past the largest value raises; -1 (in the signed range) is the largest
    refuses(lambda dev: torch.zeros(3, dtype=dtype, device=dev).fill_(2 ** BITS[dtype]), devices=True)
    computes(
        lambda dev: (torch.full((2,), -1, dtype=dtype, device=dev), torch.zeros(2, dtype=dtype, device=dev).fill_(-2)),
        devices=True,
    )


@by_unsigned
def test_values_above_the_signed_range_survive_the_round_trip_to_the_cpu(dtype):
    x = edges(dtype)
    y = x.to(DEVICE)
    assert y.dtype == dtype and y.device.type == DEVICE
    assert_same(y, x)
    assert y.tolist() == x.tolist()
    assert [y[i].item() for i in range(len(x))] == x.tolist()
    assert torch.equal(y.cpu(), x) and y.cpu().dtype == dtype


def test_uint64_above_int64_max_and_uint32_max_hold_their_values():
    big = torch.tensor([2**63 + 5, 2**64 - 1, 2**63], dtype=torch.uint64)
    assert big.to(DEVICE).tolist() == [2**63 + 5, 2**64 - 1, 2**63]
    assert torch.full((1,), 2**63 + 5, dtype=torch.uint64, device=DEVICE).item() == 2**63 + 5
    assert torch.full((1,), 2**32 - 1, dtype=torch.uint32, device=DEVICE).item() == 2**32 - 1
    refuses(lambda dev: int(torch.tensor(2**64 - 1, dtype=torch.uint64, device=dev)), devices=True)  # overflow
    assert int(torch.tensor(2**63 - 1, dtype=torch.uint64, device=DEVICE)) == 2**63 - 1


@by_unsigned
def test_print_shows_every_value(dtype):
    text = str(edges(dtype).to(DEVICE))
    assert all(str(v) in text for v in edges(dtype).tolist()) and f"dtype={dtype}" in text, text


# ---- casts ----


@by_unsigned
@pytest.mark.parametrize("other", FLOAT_DTYPES + INT_DTYPES + (torch.bool,) + UNSIGNED, ids=dtype_name)
def test_a_cast_to_another_dtype_gives_the_cpus_values(dtype, other):
    computes(lambda x: x.to(other), torch.cat([edges(dtype), values(dtype, 64)]))


def integer_edges(dtype):
    """The extremes of an integer dtype, -1, 0 and 1 where it has them, then seeded values over its range."""
    if dtype == torch.bool:
        return torch.tensor([True, False, False, True])
    if dtype in UNSIGNED:
        return torch.cat([edges(dtype), values(dtype, 64)])
    info = torch.iinfo(dtype)
    ends = torch.tensor(sorted({info.min, info.max, min(-1, info.max), 0, 1}), dtype=dtype)
    return torch.cat([ends, values(torch.int64, 64).to(dtype)])


@by_unsigned
@pytest.mark.parametrize("other", INT_DTYPES + (torch.bool,) + UNSIGNED, ids=dtype_name)
def test_a_cast_from_an_integer_dtype_wraps_as_on_the_cpu(dtype, other):
    computes(lambda t: t.to(dtype), integer_edges(other))


@by_unsigned
@pytest.mark.parametrize("src", FLOAT_DTYPES, ids=dtype_name)
def test_a_float_cast_in_range_truncates_as_on_the_cpu(dtype, src):
    top = min(2.0 ** BITS[dtype], torch.finfo(src).max)
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(64, generator=g, dtype=torch.float64) * top * 0.99).to(src)
    x = torch.cat([x, torch.tensor([0.0, 0.5, 1.99, -0.0, -0.7, 3.5], dtype=src)])
    computes(lambda t: t.to(dtype), x)


@by_unsigned
@pytest.mark.parametrize("src", FLOAT_DTYPES, ids=dtype_name)
def test_a_float_cast_out_of_range_gives_the_cpus_value(dtype, src):
    # C++ leaves it undefined; torch's CPU converts a tensor through its vectorized loop (blocks of 4 or 8
    # elements: the 64 here), uint32 from 2**31 as the signed conversion of x - 2**31 with the top bit set
    # again, and NaN and -inf to 2**31 (its scalar tail, a tensor's last n % 4 elements, differs there)
    specials = [-1.0, -5.5, 70000.0, 3e9, 5e9, 1e19, 2.0**63, 2.0**64, 1e30, float("nan"), float("inf")]
    specials += [-float("inf"), -3e9, -1e19, 2.0**31, 2.0**32 - 256, 2.0**32]
    x = torch.tensor(specials * 4, dtype=torch.float64)[:64].to(src)
    computes(lambda t: t.to(dtype), x)


@by_unsigned
def test_values_above_the_float_mantissa_round_to_nearest_as_on_the_cpu(dtype):
    b = BITS[dtype]
    near = [2**b - 1, 2 ** (b - 1) + 1, 2 ** (b - 1) - 1, 2**11 + 1, 65519, 65520, 2**24 + 1, 2**53 + 1]
    near += [2**63 + 2**39 + 1, 2**63 + 2**40 + 2**39]
    x = torch.tensor([v for v in near if v < 2**b] * 4, dtype=dtype)
    for to in FLOAT_DTYPES:
        computes(lambda t, to=to: t.to(to), x)


# ---- views and writes through them ----


@by_unsigned
def test_views_read_and_write_their_storage(dtype):
    def program(x):
        t = x.t()
        t[1:, 0] = 7
        x[0, 1:3].copy_(x[2, :2])
        x.diagonal().fill_(2 ** BITS[dtype] - 1)
        return x, t.contiguous(), x[1:, ::2].clone(), x.flatten()[3:9].view(2, 3), x.unsqueeze(0).expand(2, 4, 4) * 1

    computes(program, values(dtype, 4, 4))


@by_unsigned
def test_a_view_as_another_dtype_of_the_same_size_reinterprets_the_bits(dtype):
    signed = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}[dtype]
    computes(lambda x: (x.view(signed), x.view(signed).view(dtype)), edges(dtype))
    computes(lambda x: x.view(dtype), torch.tensor([-1, -2, 5, 0, 1 << 10], dtype=signed))
    computes(lambda x: x.view(torch.uint8), edges(dtype))
    if dtype != torch.uint64:
        computes(lambda x: x.view(torch.uint64), values(dtype, 8))


@by_unsigned
def test_copies_between_tiny_tensors_of_other_layouts_and_dtypes(dtype):
    def program(dev):
        x = values(dtype, 5, 6).to(dev)
        y = torch.zeros(6, 5, dtype=dtype, device=dev)
        y.copy_(x.t())
        z = torch.zeros(6, 5, dtype=torch.float64, device=dev)
        z.copy_(x.t())
        w = torch.zeros(5, 6, dtype=dtype, device=dev)
        w[:, ::2] = torch.arange(15, device=dev).reshape(5, 3)
        return y, z, w

    computes(program, devices=True)


# ---- elementwise ops the CPU has for these dtypes ----


@by_unsigned
def test_mul_wraps_in_the_dtype_as_on_the_cpu(dtype):
    computes(torch.mul, values(dtype, 40), values(dtype, 40, seed=1))
    computes(lambda x: x * 3, values(dtype, 40))
    computes(torch.mul, values(dtype, 33, 65).t(), values(dtype, 1, 33, seed=5))  # strided and broadcast operands
    computes(lambda x: x * (2**40 + 3), values(dtype, 40))
    computes(lambda x, y: x.mul_(y), values(dtype, 3, 4), values(dtype, 4, seed=2))
    computes(
        lambda x, y: torch.mul(x, y, out=torch.empty(0, dtype=dtype, device=x.device)),
        values(dtype, 6),
        small(dtype, 6),
    )


@by_unsigned
def test_true_division_and_float_operands_promote_to_float(dtype):
    computes(lambda x, y: x / y, values(dtype, 30), small(dtype, 30, low=1))
    computes(lambda x: x / 3, values(dtype, 30))
    computes(lambda x: x * 1.5, values(dtype, 30))
    computes(lambda x, y: x + y, values(dtype, 30), torch.rand(30))
    computes(lambda x: x < 2.5e9, values(dtype, 30))
    computes(lambda x: torch.float_power(x, 2), small(dtype, 10))


@by_unsigned
def test_eq_and_ne_compare_the_whole_unsigned_value(dtype):
    x, y = edges(dtype), edges(dtype).flip(0)
    computes(torch.eq, x, y)
    computes(torch.ne, x, y)
    computes(lambda a: (a == 2 ** (BITS[dtype] - 1) + 5, a != 2 ** BITS[dtype] - 1, a == -1, a == 0), x)
    computes(lambda a, b: torch.eq(a, b, out=torch.empty(0, dtype=dtype, device=a.device)), x, y)


@by_unsigned
def test_a_python_int_out_of_the_dtypes_range_wraps_into_it_as_on_the_cpu(dtype):
    x = torch.cat([edges(dtype), values(dtype, 20)])
    computes(lambda a: (a == -1, a & -1, a * -1, a == 2**63 + 5, a * 70000, a | (2**64 - 1), a ^ -(2**40)), x)


@by_unsigned
def test_bitwise_and_or_xor_as_on_the_cpu(dtype):
    x, y = values(dtype, 50), values(dtype, 50, seed=3)
    for op in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        computes(op, x, y)
        computes(lambda a, op=op: op(a, 2 ** (BITS[dtype] - 1) + 5), x)
        computes(lambda a, op=op: op(a, -1), x)
    computes(lambda a, b: a.bitwise_xor_(b), x, y)


@by_unsigned
def test_where_and_identity_like_unary_ops(dtype):
    x, y = values(dtype, 20), values(dtype, 20, seed=4)
    mask = torch.arange(20) % 3 == 0
    computes(torch.where, mask, x, y)
    computes(lambda m, a: torch.where(m, a, 5), mask, x)
    for op in (torch.floor, torch.ceil, torch.round, torch.trunc, torch.nan_to_num, torch.positive):
        computes(op, x)
    for op in (torch.isnan, torch.isinf, torch.isfinite, torch.signbit, torch.isreal, torch.isposinf):
        computes(op, x)


@by_unsigned
def test_float_valued_unary_ops_promote_as_on_the_cpu(dtype):
    x = torch.cat([edges(dtype), small(dtype, 10)])
    for op in (torch.sqrt, torch.exp, torch.log1p, torch.sin, torch.sigmoid, torch.reciprocal, torch.erfinv):
        computes(op, x, rtol=1e-5, atol=1e-6)


# ---- elementwise ops the CPU refuses: the same exception at the call ----

REFUSED_ELEMENTWISE = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "add_scalar": lambda x, y: x + 1,
    "rsub": lambda x, y: 1 - x,
    "neg": lambda x, y: -x,
    "abs": lambda x, y: x.abs(),
    "sign": lambda x, y: x.sign(),
    "lt": lambda x, y: x < y,
    "le_scalar": lambda x, y: x <= 3,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "clamp": lambda x, y: x.clamp(1, 4),
    "clamp_min": lambda x, y: x.clamp_min(2),
    "relu": lambda x, y: torch.relu(x),
    "pow": lambda x, y: x**y,
    "square": lambda x, y: x.square(),
    "bitwise_not": lambda x, y: ~x,
    "lshift": lambda x, y: x << 2,
    "rshift": lambda x, y: x >> y,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "floor_divide": torch.floor_divide,
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "logical_and": torch.logical_and,
    "logical_not": lambda x, y: x.logical_not(),
    "gcd": torch.gcd,
    "addcmul": lambda x, y: torch.addcmul(x, x, y),
    "lerp": lambda x, y: torch.lerp(x, y, 0.5),
    "in_place_add": lambda x, y: x.add_(y),
}


@by_unsigned
@pytest.mark.parametrize("op", REFUSED_ELEMENTWISE.values(), ids=REFUSED_ELEMENTWISE.keys())
def test_an_elementwise_op_the_cpu_refuses_raises_its_error(dtype, op):
    refuses(op, values(dtype, 3, 4), small(dtype, 3, 4, low=1))


PROMOTIONS = {
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


@by_unsigned
@pytest.mark.parametrize(
    "other", list(PROMOTIONS.values()) + list(UNSIGNED), ids=list(PROMOTIONS) + ["u16", "u32", "u64"]
)
def test_promotion_with_another_integer_dtype_raises_as_on_the_cpu(dtype, other):
    if other == dtype:
        return
    x, y = values(dtype, 5), torch.ones(5, dtype=other)
    refuses(torch.mul, x, y)
    refuses(torch.eq, x, y)
    refuses(torch.bitwise_and, x, y)
    refuses(lambda a, b: torch.cat([a, b]), x, y)
    refuses(lambda a, b: torch.where(a == b, a, b), x, y)


# ---- reductions ----


@by_unsigned
def test_sums_and_products_accumulate_in_int64_as_on_the_cpu(dtype):
    x = values(dtype, 6, 7)
    computes(lambda t: (t.sum(), t.sum(1), t.sum((0, 1), keepdim=True), t.nansum(0)), x)
    computes(lambda t: (t.sum(dtype=torch.int64), t.sum(0, dtype=torch.float32), t.sum(dtype=torch.float64)), x)
    computes(lambda t: (t.prod(), t.prod(1), t.prod(0, dtype=torch.int64)), x)
    computes(lambda t: (t.cumsum(0), t.cumprod(1), t.cumsum(1, dtype=torch.int64), t.cumsum(0, dtype=torch.float32)), x)
    computes(lambda t: torch.sum(t, 1, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)


@by_unsigned
def test_all_any_count_nonzero_and_equal(dtype):
    x = small(dtype, 5, 6)
    computes(lambda t: (t.all(), t.any(), t.all(1), t.any(0), t.all((0, 1)), t.count_nonzero(1)), x)
    computes(lambda t: (torch.equal(t, t.clone()), torch.equal(t, t.flip(0))), x)
    computes(lambda t: torch.equal(t, t), edges(dtype))


REFUSED_REDUCTIONS = {
    "sum_in_dtype": lambda x: x.sum(dtype=x.dtype),
    "nansum_in_dtype": lambda x: x.nansum(0, dtype=x.dtype),
    "prod_in_dtype": lambda x: x.prod(dtype=x.dtype),
    "cumsum_in_dtype": lambda x: x.cumsum(0, dtype=x.dtype),
    "cumprod_in_dtype": lambda x: x.cumprod(1, dtype=x.dtype),
    "count_nonzero_of_all": lambda x: x.count_nonzero(),
    "mean": lambda x: x.mean(),
    "var": lambda x: x.var(),
    "std_mean": lambda x: torch.std_mean(x),
    "norm": lambda x: x.norm(),
    "amax": lambda x: x.amax(),
    "amin_dim": lambda x: x.amin(1),
    "max": lambda x: x.max(),
    "max_dim": lambda x: x.max(1),
    "min_dim": lambda x: x.min(0),
    "argmax": lambda x: x.argmax(),
    "argmin_dim": lambda x: x.argmin(1),
    "aminmax": lambda x: torch.aminmax(x),
    "median": lambda x: x.median(),
    "median_dim": lambda x: x.median(1),
    "nanmedian_dim": lambda x: x.nanmedian(0),
    "mode": lambda x: x.mode(),
    "kthvalue": lambda x: x.kthvalue(2),
    "topk": lambda x: x.topk(2),
    "cummax": lambda x: x.cummax(0),
    "logcumsumexp": lambda x: x.logcumsumexp(0),
    "softmax": lambda x: x.softmax(0),
    "trace": lambda x: x.trace(),
    "histc": lambda x: torch.histc(x),
}


@by_unsigned
@pytest.mark.parametrize("op", REFUSED_REDUCTIONS.values(), ids=REFUSED_REDUCTIONS.keys())
def test_a_reduction_the_cpu_refuses_raises_its_error(dtype, op):
    refuses(op, values(dtype, 4, 5))


# ---- sorting ----


@by_unsigned
def test_sort_orders_values_above_the_signed_range_last(dtype):
    x = torch.cat([edges(dtype), values(dtype, 30)])
    computes(lambda t: (t.sort(), t.sort(descending=True, stable=True), t.argsort(stable=True), torch.msort(t)), x)
    computes(lambda t: t.sort(dim=1, stable=True), values(dtype, 5, 9))


@by_unsigned
def test_unique_and_unique_consecutive(dtype):
    x = torch.cat([edges(dtype), edges(dtype), small(dtype, 20)])
    computes(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x)
    computes(lambda t: torch.unique(t, sorted=True), x)
    computes(lambda t: torch.unique_consecutive(t, return_inverse=True, return_counts=True), x.sort().values)
    computes(lambda t: torch.unique(t, dim=0, return_counts=True), small(dtype, 8, 2))
    computes(lambda t: torch.unique_consecutive(t, dim=1, return_inverse=True), small(dtype, 2, 9).sort(1).values)


# ---- indexing and movement ----


@by_unsigned
def test_indexing_the_cpu_has_for_these_dtypes(dtype):
    x = values(dtype, 5, 6)
    idx = torch.tensor([4, 0, 2, 2])
    mask = torch.arange(30).reshape(5, 6) % 4 == 1
    computes(lambda t, i, m: (t[i], t[:, i], t[i, i], t[m], t[1:4, ::2]), x, idx, mask)
    computes(
        lambda t, i: (t.index_select(1, i), t.gather(1, i.repeat(5, 1)), torch.take_along_dim(t, i[None], 1)), x, idx
    )
    computes(lambda t, i: torch.nn.functional.embedding(i.reshape(2, 2), t), x, idx)


@by_unsigned
def test_scatters_and_index_add_the_cpu_has_for_these_dtypes(dtype):
    x, src = values(dtype, 4, 5), values(dtype, 4, 5, seed=7)
    idx = torch.tensor([[0, 1, 0], [2, 2, 4], [1, 3, 0], [4, 4, 4]])
    computes(lambda t, i, s: t.scatter(1, i, s[:, :3]), x, idx, src)
    computes(lambda t, i: t.scatter(1, i, 9), x, idx)
    computes(lambda t, i, s: t.scatter(1, i, s[:, :3], reduce="add"), x, idx, src)
    computes(lambda t, i, s: t.scatter(1, i, s[:, :3], reduce="multiply"), x, idx, src)
    computes(lambda t, i, s: t.scatter_add(1, i, s[:, :3]), x, idx, src)


@by_unsigned
def test_index_add_runs_on_the_fallback_where_the_cpus_path_for_the_call_decides(dtype):
    # the CPU adds 2-d tensors with alpha 1 and refuses alpha 3 ("add_stub") and 1-d tensors ("index_add_"):
    # tiny runs these dtypes on the CPU fallback
    x, src = values(dtype, 4, 5), values(dtype, 4, 5, seed=7)
    computes(lambda t, s: t.index_add(0, ix(t, [3, 0, 3]), s[:3]), x, src, allow_fallback=True)
    computes(lambda t, s: t.index_add(1, ix(t, [1, 1]), s[:, :2]), x, src, allow_fallback=True)
    refuses(lambda t, s: t.index_add_(0, ix(t, [1, 1]), s[:2], alpha=3), x, src)
    refuses(lambda t, s: t[0].index_add_(0, ix(t, [1, 1]), s[0, :2]), x, src)


@by_unsigned
def test_movement_ops(dtype):
    x, y = values(dtype, 3, 4), values(dtype, 3, 4, seed=8)
    computes(lambda a, b: (torch.cat([a, b]), torch.stack([a, b], 1), torch.hstack([a, b[:, :1]])), x, y)
    computes(lambda a: (a.flip(0), a.roll(1), a.roll((1, -1), (0, 1)), a.repeat(2, 3), a.tile(2)), x)
    computes(lambda a: (torch.rot90(a), a.repeat_interleave(2, 0), a.diag(), torch.diagonal_copy(a)), x)
    computes(lambda a: (torch.nn.functional.pad(a, (1, 2)), torch.nn.functional.pad(a, (1, 1), value=7)), x)
    computes(lambda a: torch.nn.functional.pad(a[None], (1, 1), mode="circular"), x)
    computes(lambda a: a.unfold(1, 2, 1).contiguous(), x)
    computes(lambda a: a[None, None].clone(memory_format=torch.channels_last), x)


REFUSED_INDEXING = {
    "index_put": lambda x: x.index_put((ix(x, [0, 2]),), x[:2]),
    "setitem_with_a_tensor_index": lambda x: x.__setitem__(ix(x, [0, 1]), 3),
    "masked_fill": lambda x: x.masked_fill(torch.ones_like(x, dtype=torch.bool), 1),
    "masked_select": lambda x: x.masked_select(torch.ones_like(x, dtype=torch.bool)),
    "masked_scatter": lambda x: x.masked_scatter(torch.ones_like(x, dtype=torch.bool), x),
    "index_fill": lambda x: x.index_fill(0, ix(x, [1]), 7),
    "index_copy": lambda x: x.index_copy(0, ix(x, [1, 0]), x[:2]),
    "take": lambda x: x.take(ix(x, [1, 5])),
    "put": lambda x: x.put_(ix(x, [1, 5]), x.flatten()[:2].clone()),
    "nonzero": lambda x: x.nonzero(),
    "argwhere": lambda x: torch.argwhere(x),
    "tril": lambda x: x.tril(),
    "triu": lambda x: x.triu(1),
    "scatter_reduce_amax": lambda x: x.scatter_reduce(1, ix(x, [[0, 0]] * 4), x[:, :2], "amax"),
    "index_reduce_mean": lambda x: x.index_reduce(0, ix(x, [2, 0]), x[:2], "mean"),
    "reflection_pad": lambda x: torch.nn.functional.pad(x[None], (1, 1), mode="reflect"),
    "replication_pad": lambda x: torch.nn.functional.pad(x[None], (1, 1), mode="replicate"),
    "isin": lambda x: torch.isin(x, x[0]),
    "searchsorted": lambda x: torch.searchsorted(x[0], x),
    "bincount": lambda x: torch.bincount(x.flatten()),
    "mm": lambda x: x @ x.t(),
    "dot": lambda x: x[0].dot(x[1]),
    "max_pool": lambda x: torch.nn.functional.max_pool1d(x[None], 2),
}


@by_unsigned
@pytest.mark.parametrize("op", REFUSED_INDEXING.values(), ids=REFUSED_INDEXING.keys())
def test_an_indexing_or_other_op_the_cpu_refuses_raises_its_error(dtype, op):
    refuses(op, small(dtype, 4, 5))


@by_unsigned
def test_factories_the_cpu_refuses_raise_its_error(dtype):
    for make in (
        lambda dev: torch.arange(5, dtype=dtype, device=dev),
        lambda dev: torch.linspace(0, 10, 5, dtype=dtype, device=dev),
        lambda dev: torch.eye(3, dtype=dtype, device=dev),
        lambda dev: torch.randperm(4, dtype=dtype, device=dev),
    ):
        refuses(make, devices=True)


@by_unsigned
def test_random_integers_in_a_range_and_the_cpus_refusal_of_the_whole_range(dtype):
    x = torch.randint(0, 10, (1000,), dtype=dtype, device=DEVICE)
    assert x.dtype == dtype and x.device.type == DEVICE
    counts = torch.bincount(x.cpu().to(torch.int64), minlength=10)
    assert len(counts) == 10 and counts.min() > 50, counts
    top = min(2 ** BITS[dtype] - 1, 2**63 - 1)  # random_'s bounds are int64
    y = torch.zeros(2000, dtype=dtype, device=DEVICE).random_(top - 100, top).tolist()
    assert min(y) >= top - 100 and max(y) < top and len(set(y)) > 50
    refuses(lambda dev: torch.zeros(3, dtype=dtype, device=dev).random_(), devices=True)


def test_the_refusal_of_a_dtype_tiny_cannot_hold_names_the_unsigned_ones():
    with pytest.raises(TypeError) as info:
        torch.zeros(2, dtype=torch.float8_e5m2, device=DEVICE)
    assert "uint8, uint16, uint32, uint64" in str(info.value), info.value
