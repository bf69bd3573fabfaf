"""Every elementwise op of the walking skeleton, in every form torch has, for every dtype CPU
torch supports, against CPU torch.

Forms: functional Tensor-Tensor with broadcasting, out=, in-place `_`, Tensor-Python-scalar
(functional and in-place), the Python operators. Inputs avoid undefined behaviour (no integer
division by zero, no signed overflow) and include negatives; float inputs for the special-values
tests include nan, +-inf and signed zeros.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import ALL_DTYPES, FLOAT_DTYPES, CpuUnsupported, check, dtype_name, kernel_sources, tol

NAN, INF = float("nan"), float("inf")

# ---------------------------------------------------------------------------------------------
# Inputs


def lhs(dtype, op=None):
    """A (3, 4) operand."""
    if dtype is torch.bool:
        data = [
            [True, False, True, False],
            [False, False, True, True],
            [True, True, False, False],
        ]
    elif dtype.is_floating_point:
        data = [
            [-2.5, -1.75, -1.0, -0.5],
            [-0.25, 0.0, 0.5, 0.75],
            [1.0, 1.5, 2.25, 2.5],
        ]
    elif op == "pow":  # small bases: no overflow for exponents up to 3
        data = (
            [[0, 1, 2, 3], [4, 5, 1, 2], [3, 0, 5, 4]]
            if dtype is torch.uint8
            else [[-3, -2, -1, 0], [1, 2, 3, -3], [2, -2, 1, 0]]
        )
    elif dtype is torch.uint8:
        data = [[0, 1, 2, 3], [4, 5, 6, 7], [9, 10, 200, 250]]
    else:
        data = [[-5, -4, -3, -2], [-1, 0, 1, 2], [3, 4, 5, 7]]
    return torch.tensor(data, dtype=dtype)


def rhs(dtype, op=None):
    """A (4,) operand that broadcasts against lhs; never zero for integer dtypes."""
    if dtype is torch.bool:
        data = [True, False, True, True]
    elif op == "pow":
        data = [2.0, -1.0, 0.5, 3.0] if dtype.is_floating_point else [0, 1, 2, 3]
    elif op in SHIFTS:
        data = [0, 1, 2, 3]
    elif dtype.is_floating_point:
        data = [1.5, -2.0, 0.75, -0.5]
    elif dtype is torch.uint8:
        data = [2, 3, 1, 7]
    else:
        data = [2, -3, 1, -1]
    return torch.tensor(data, dtype=dtype)


def scalar(dtype, op=None):
    """A Python scalar of the dtype's own category (so it does not promote)."""
    if dtype is torch.bool:
        return True
    if op == "pow" or op in SHIFTS:
        return 2.0 if dtype.is_floating_point else 2
    if dtype.is_floating_point:
        return 1.5
    return 3 if dtype is torch.uint8 else -3


def special_lhs(dtype):
    data = [[NAN, INF, -INF, 0.0], [-0.0, 1.0, -1.0, 100.0], [-100.0, 0.5, -2.5, 3.0]]
    return torch.tensor(data, dtype=dtype)


def special_rhs(dtype):
    return torch.tensor([0.0, INF, -1.5, -0.0], dtype=dtype)


def lhs_as_right_operand(dtype, op):
    """lhs made safe as the right operand: no integer zero divisors, shift amounts in range and
    non-negative integer exponents."""
    t = lhs(dtype, op)
    if dtype.is_floating_point or dtype is torch.bool:
        return t
    if op in SHIFTS or op == "pow":
        return t.abs() % 4
    if op in ("div", "div_trunc", "div_floor", "remainder", "fmod"):
        return torch.where(t == 0, torch.ones_like(t), t)
    return t


# ---------------------------------------------------------------------------------------------
# The ops


def _alpha(dtype):
    if dtype is torch.bool:
        return True
    return 0.5 if dtype.is_floating_point else 2


SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")

# id -> (torch function name, keyword arguments for a dtype)
BINARY = {
    "add": ("add", lambda dt: {}),
    "add_alpha": ("add", lambda dt: {"alpha": _alpha(dt)}),
    "sub": ("sub", lambda dt: {}),
    "sub_alpha": ("sub", lambda dt: {"alpha": _alpha(dt)}),
    "mul": ("mul", lambda dt: {}),
    "div": ("div", lambda dt: {}),
    "div_trunc": ("div", lambda dt: {"rounding_mode": "trunc"}),
    "div_floor": ("div", lambda dt: {"rounding_mode": "floor"}),
    "remainder": ("remainder", lambda dt: {}),
    "fmod": ("fmod", lambda dt: {}),
    "pow": ("pow", lambda dt: {}),
    "maximum": ("maximum", lambda dt: {}),
    "minimum": ("minimum", lambda dt: {}),
    "eq": ("eq", lambda dt: {}),
    "ne": ("ne", lambda dt: {}),
    "lt": ("lt", lambda dt: {}),
    "le": ("le", lambda dt: {}),
    "gt": ("gt", lambda dt: {}),
    "ge": ("ge", lambda dt: {}),
    "logical_and": ("logical_and", lambda dt: {}),
    "logical_or": ("logical_or", lambda dt: {}),
    "logical_xor": ("logical_xor", lambda dt: {}),
    "bitwise_and": ("bitwise_and", lambda dt: {}),
    "bitwise_or": ("bitwise_or", lambda dt: {}),
    "bitwise_xor": ("bitwise_xor", lambda dt: {}),
    "bitwise_left_shift": ("bitwise_left_shift", lambda dt: {}),
    "bitwise_right_shift": ("bitwise_right_shift", lambda dt: {}),
    "copysign": ("copysign", lambda dt: {}),
    "logaddexp": ("logaddexp", lambda dt: {}),
    "logaddexp2": ("logaddexp2", lambda dt: {}),
    "fmax": ("fmax", lambda dt: {}),
    "fmin": ("fmin", lambda dt: {}),
    "xlogy": ("xlogy", lambda dt: {}),
    "hypot": ("hypot", lambda dt: {}),
    "heaviside": ("heaviside", lambda dt: {}),
    "atan2": ("atan2", lambda dt: {}),
}

UNARY = [
    "neg", "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt",
    "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "erf", "isnan", "isinf",
    "isfinite", "logical_not", "bitwise_not", "floor", "ceil", "round", "trunc", "sgn", "logit",
    "frac", "sinc", "signbit", "isposinf", "isneginf", "asin", "acos", "atan", "sinh", "cosh", "asinh",
    "acosh", "atanh", "erfc", "lgamma",
]  # fmt: skip
UNARY_WITHOUT_OUT = {"relu", "isnan", "isinf", "isfinite"}


def has_inplace(name):
    return hasattr(torch.Tensor, name + "_")


def cpu_dtype_of(fn, *args):
    """The dtype CPU torch gives fn(*args); used only to allocate out= tensors."""
    try:
        return fn(*args).dtype
    except NotImplementedError as e:
        raise CpuUnsupported(str(e)) from e
    except Exception:
        return None  # the CPU raises; the out= check then expects tiny to raise too


def matches_cpu(fn, *args, **kw):
    """check(), skipping when CPU torch has no kernel for the dtype."""
    try:
        check(fn, *args, allow_cpu_unsupported=True, **kw)
    except CpuUnsupported as e:
        pytest.skip(f"CPU torch: {e}")


def matches_cpu_for_each(dtypes, make_case):
    """check(*make_case(dtype)) for each dtype; failures name the dtype, skips only if CPU torch
    supports none of them."""
    supported = 0
    for dtype in dtypes:
        fn, *args = make_case(dtype)
        try:
            check(fn, *args, allow_cpu_unsupported=True)
            supported += 1
        except CpuUnsupported:
            continue
        except AssertionError as e:
            raise AssertionError(f"{dtype_name(dtype)}: {e}") from e
    if not supported:
        pytest.skip("CPU torch supports none of " + ", ".join(map(dtype_name, dtypes)))


def op_params(ops):
    return pytest.mark.parametrize("op", list(ops), ids=str)


by_dtype = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_name)
# Layout variants (operand order, strided out=) test indexing, not arithmetic: a few dtypes that
# cover each category keep the number of distinct kernels (one compile each) down.
LAYOUT_DTYPES = (torch.float32, torch.bfloat16, torch.int16, torch.uint8, torch.bool)
by_float_dtype = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)


def binary(op):
    name, kwargs = BINARY[op]
    return getattr(torch, name), name, kwargs


# ---------------------------------------------------------------------------------------------
# Binary ops


@op_params(list(BINARY))
@by_dtype
def test_binary_op_with_broadcast_tensor_matches_cpu(op, dtype):
    fn, _, kwargs = binary(op)
    matches_cpu(lambda a, b: fn(a, b, **kwargs(dtype)), lhs(dtype, op), rhs(dtype, op))


@op_params(list(BINARY))
@pytest.mark.parametrize("dtype", LAYOUT_DTYPES, ids=dtype_name)
def test_binary_op_with_broadcast_on_the_left_matches_cpu(op, dtype):
    fn, _, kwargs = binary(op)
    matches_cpu(lambda b, a: fn(b, a, **kwargs(dtype)), rhs(dtype, op), lhs_as_right_operand(dtype, op))


@op_params(list(BINARY))
@by_dtype
def test_binary_op_out_form_writes_into_out(op, dtype):
    fn, _, kwargs = binary(op)
    a, b = lhs(dtype, op), rhs(dtype, op)
    try:
        out_dtype = cpu_dtype_of(lambda: fn(a, b, **kwargs(dtype)))
    except CpuUnsupported as e:
        pytest.skip(f"CPU torch: {e}")
    out = torch.full((3, 4), 1, dtype=out_dtype or dtype)
    matches_cpu(lambda a, b, out: fn(a, b, **kwargs(dtype), out=out), a, b, out)
    if dtype in LAYOUT_DTYPES:
        # out= a strided view of a larger tensor: only every other column is written
        wide = torch.full((3, 8), 1, dtype=out_dtype or dtype)
        matches_cpu(lambda a, b, w: fn(a, b, **kwargs(dtype), out=w[:, ::2]), a, b, wide)


@op_params([op for op in BINARY if has_inplace(BINARY[op][0])])
@by_dtype
def test_binary_op_inplace_form_updates_self(op, dtype):
    _, name, kwargs = binary(op)
    matches_cpu(
        lambda a, b: getattr(a, name + "_")(b, **kwargs(dtype)),
        lhs(dtype, op),
        rhs(dtype, op),
    )


@op_params([op for op in BINARY if has_inplace(BINARY[op][0])])
def test_binary_op_inplace_through_a_view_updates_the_base(op):
    _, name, kwargs = binary(op)

    def case(dtype):
        def fn(a, b):
            view = a[:, 1:].t()  # (3, 3), strides (1, 4), offset 1
            return getattr(view, name + "_")(b[:3], **kwargs(dtype))

        return fn, lhs(dtype, op), rhs(dtype, op)

    matches_cpu_for_each((torch.float32, torch.int32, torch.uint8), case)


@op_params(list(BINARY))
@by_dtype
def test_binary_op_with_python_scalar_matches_cpu(op, dtype):
    fn, _, kwargs = binary(op)
    s = scalar(dtype, op)
    matches_cpu(lambda a: fn(a, s, **kwargs(dtype)), lhs(dtype, op))


@op_params([op for op in BINARY if has_inplace(BINARY[op][0])])
@by_dtype
def test_binary_op_inplace_with_python_scalar_matches_cpu(op, dtype):
    _, name, kwargs = binary(op)
    s = scalar(dtype, op)
    matches_cpu(lambda a: getattr(a, name + "_")(s, **kwargs(dtype)), lhs(dtype, op))


@op_params(SHIFTS)
@by_dtype
def test_shift_by_negative_or_too_large_amounts_matches_cpu(op, dtype):
    # torch defines these: a left shift past the width gives 0, a right shift fills with the sign bit
    if dtype.is_floating_point or dtype is torch.bool:
        pytest.skip("shifts are for integer dtypes")
    bits = torch.iinfo(dtype).bits
    amounts = [bits, bits + 3, 1, 0] if dtype is torch.uint8 else [bits, bits + 3, -1, -bits]
    fn = getattr(torch, op)
    matches_cpu(fn, lhs(dtype), torch.tensor(amounts, dtype=dtype))


@op_params(list(BINARY))
@by_float_dtype
def test_binary_op_on_nan_inf_and_zeros_matches_cpu(op, dtype):
    fn, _, kwargs = binary(op)
    matches_cpu(lambda a, b: fn(a, b, **kwargs(dtype)), special_lhs(dtype), special_rhs(dtype))


OPERATORS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "**": lambda a, b: a**b,
    "==": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b,
    "+=": lambda a, b: a.__iadd__(b),
    "*=": lambda a, b: a.__imul__(b),
    "//=": lambda a, b: a.__ifloordiv__(b),
    "<<=": lambda a, b: a.__ilshift__(b),
}
OPERATOR_DOMAIN = {"**": "pow", "<<": SHIFTS[0], ">>": SHIFTS[1], "<<=": SHIFTS[0]}


@pytest.mark.parametrize("symbol", OPERATORS, ids=str)
@by_dtype
def test_python_operator_matches_cpu(symbol, dtype):
    domain = OPERATOR_DOMAIN.get(symbol)
    fn = OPERATORS[symbol]
    matches_cpu(fn, lhs(dtype, domain), rhs(dtype, domain))
    matches_cpu(lambda a: fn(a, scalar(dtype, domain)), lhs(dtype, domain))


@by_dtype
def test_unary_minus_and_invert_operators_match_cpu(dtype):
    matches_cpu(lambda a: -a, lhs(dtype))
    matches_cpu(lambda a: ~a, lhs(dtype))


@by_dtype
def test_reflected_scalar_operators_match_cpu(dtype):
    s = scalar(dtype)
    matches_cpu(lambda a: s - a, lhs(dtype))
    matches_cpu(lambda a: s * a + s, lhs(dtype))


# ---------------------------------------------------------------------------------------------
# Unary ops


@op_params(UNARY)
@by_dtype
def test_unary_op_matches_cpu(op, dtype):
    matches_cpu(getattr(torch, op), lhs(dtype))


@op_params([op for op in UNARY if op not in UNARY_WITHOUT_OUT])
@by_dtype
def test_unary_op_out_form_writes_into_out(op, dtype):
    fn = getattr(torch, op)
    a = lhs(dtype)
    try:
        out_dtype = cpu_dtype_of(fn, a)
    except CpuUnsupported as e:
        pytest.skip(f"CPU torch: {e}")
    out = torch.zeros(3, 4, dtype=out_dtype or dtype)
    matches_cpu(lambda a, out: fn(a, out=out), a, out)


@op_params([op for op in UNARY if has_inplace(op)])
@by_dtype
def test_unary_op_inplace_form_updates_self(op, dtype):
    matches_cpu(lambda a: getattr(a, op + "_")(), lhs(dtype))


@op_params([op for op in UNARY if has_inplace(op)])
def test_unary_op_inplace_through_a_view_updates_the_base(op):
    def case(dtype):
        return (lambda a: getattr(a[:, 1:].t(), op + "_")()), lhs(dtype)

    matches_cpu_for_each((torch.float32, torch.int32, torch.bool), case)


@op_params(UNARY)
@by_float_dtype
def test_unary_op_on_nan_inf_and_zeros_matches_cpu(op, dtype):
    matches_cpu(getattr(torch, op), special_lhs(dtype))


@by_float_dtype
def test_special_entr_and_xlog1py_on_nan_inf_and_zeros_match_cpu(dtype):
    matches_cpu(torch.special.entr, special_lhs(dtype))
    matches_cpu(torch.special.xlog1py, special_lhs(dtype), special_rhs(dtype))
    matches_cpu(lambda a, b, o: torch.special.xlog1py(a, b, out=o), lhs(dtype), rhs(dtype), torch.empty(0, dtype=dtype))


def test_bool_results_refuse_other_out_dtypes_like_cpu():
    for fn in (torch.signbit, torch.isposinf, torch.isneginf):
        matches_cpu(lambda a, o, fn=fn: fn(a, out=o), lhs(torch.float32), torch.empty(0))
        matches_cpu(lambda a, o, fn=fn: fn(a, out=o), lhs(torch.float32), torch.empty(0, dtype=torch.bool))


@by_float_dtype
def test_logit_with_eps_clamps_like_cpu(dtype):
    x = torch.tensor([-0.5, 0.0, 1e-4, 0.25, 0.5, 0.9, 1.0, 1.5, NAN], dtype=dtype)
    for eps in (0.0, 1e-3, 0.2, -1.0):
        check(lambda t, eps=eps: (torch.logit(t, eps), torch.logit(t, eps=eps).exp()), x, **tol(dtype))
    check(lambda t: t.clone().logit_(0.1), x, **tol(dtype))


def test_round_rounds_half_to_even_like_cpu():
    for dtype in FLOAT_DTYPES:
        halves = torch.tensor(
            [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, -4.5, 0.49],
            dtype=dtype,
        )
        check(torch.round, halves.reshape(3, 4))


# ---------------------------------------------------------------------------------------------
# clamp and where


def clamp_bounds(dtype):
    if dtype.is_floating_point:
        return -1.0, 2.0
    if dtype is torch.uint8:
        return 1, 6
    return -1, 2


def clamp_tensors(dtype):
    """Tensor bounds that broadcast against lhs from both sides: min (4,), max (3, 1)."""
    if dtype.is_floating_point:
        lo, hi = [-1.0, 0.0, -2.0, 1.0], [[0.5], [2.0], [1.0]]
    elif dtype is torch.uint8:
        lo, hi = [0, 2, 5, 1], [[3], [6], [200]]
    elif dtype is torch.bool:
        lo, hi = [False, True, False, False], [[True], [True], [False]]
    else:
        lo, hi = [-1, 0, -4, 1], [[0], [2], [5]]
    return torch.tensor(lo, dtype=dtype), torch.tensor(hi, dtype=dtype)


@by_dtype
def test_clamp_with_scalar_bounds_matches_cpu_in_every_form(dtype):
    lo, hi = clamp_bounds(dtype)
    matches_cpu(lambda a: torch.clamp(a, lo, hi), lhs(dtype))
    matches_cpu(lambda a: torch.clamp(a, min=lo), lhs(dtype))
    matches_cpu(lambda a: torch.clamp(a, max=hi), lhs(dtype))
    matches_cpu(lambda a: a.clamp_(lo, hi), lhs(dtype))
    matches_cpu(
        lambda a, out: torch.clamp(a, lo, hi, out=out),
        lhs(dtype),
        torch.zeros(3, 4, dtype=dtype),
    )


@by_dtype
def test_clamp_with_tensor_bounds_matches_cpu_in_every_form(dtype):
    lo, hi = clamp_tensors(dtype)
    matches_cpu(lambda a, lo, hi: torch.clamp(a, lo, hi), lhs(dtype), lo, hi)
    matches_cpu(lambda a, lo: torch.clamp(a, min=lo), lhs(dtype), lo)
    matches_cpu(lambda a, hi: torch.clamp(a, max=hi), lhs(dtype), hi)
    matches_cpu(lambda a, lo, hi: a.clamp_(lo, hi.expand(3, 4)), lhs(dtype), lo, hi)
    out = torch.zeros(3, 4, dtype=dtype)
    matches_cpu(lambda a, lo, hi, out: torch.clamp(a, lo, hi, out=out), lhs(dtype), lo, hi, out)


@by_float_dtype
def test_clamp_propagates_nan_and_prefers_max_when_bounds_cross(dtype):
    matches_cpu(lambda a: torch.clamp(a, -1.0, 2.0), special_lhs(dtype))
    matches_cpu(lambda a: torch.clamp(a, 2.0, -1.0), special_lhs(dtype))
    nan_bounds = torch.tensor([NAN, 0.0, 1.0, NAN], dtype=dtype)
    matches_cpu(lambda a, lo: torch.clamp(a, min=lo), special_lhs(dtype), nan_bounds)


def condition():
    return torch.tensor(
        [
            [True, False, False, True],
            [False, True, True, False],
            [True, True, False, False],
        ]
    )


@by_dtype
def test_where_matches_cpu_in_every_form(dtype):
    a, b = lhs(dtype), rhs(dtype)
    matches_cpu(torch.where, condition(), a, b)
    matches_cpu(lambda c, b, a: torch.where(c, b, a), condition()[:, :1], b, a)
    matches_cpu(lambda c, a: torch.where(c, a, scalar(dtype)), condition(), a)
    matches_cpu(lambda c, a: torch.where(c, scalar(dtype), a), condition(), a)
    matches_cpu(lambda c, a, b: a.where(c, b), condition(), a, b)
    out = torch.zeros(3, 4, dtype=dtype)
    matches_cpu(lambda c, a, b, out: torch.where(c, a, b, out=out), condition(), a, b, out)


def test_where_with_non_bool_condition_raises_like_cpu():
    check(torch.where, torch.tensor([1, 0, 1]), torch.ones(3), torch.zeros(3))


# ---------------------------------------------------------------------------------------------
# Layouts: non-contiguous, expanded, offset, 0-dim and empty operands

LAYOUTS = {
    "transposed": lambda t: t.t(),
    "strided": lambda t: t[:, ::2],
    "offset": lambda t: t[1:, 1:],
    "expanded": lambda t: t[:1].expand(3, 4),
    "scalar_0dim": lambda t: t[1, 2],
    "empty": lambda t: t[:0],
}

LAYOUT_OPS = {
    "add": lambda a: torch.add(a, a * 2, alpha=3),
    "exp": torch.exp,
    "where": lambda a: torch.where(a > 0, a, -a),
    "chain": lambda a: ((a + 1) * a).relu().sigmoid(),
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("op", LAYOUT_OPS.values(), ids=LAYOUT_OPS.keys())
def test_elementwise_result_layout_follows_torch_for_odd_inputs(layout, op):
    check(lambda t: op(layout(t)), lhs(torch.float32).reshape(4, 3).t().contiguous())


def test_zero_dim_tensors_combine_with_tensors_of_any_shape():
    check(lambda s, t: s * t + s, torch.tensor(2.5), lhs(torch.float32))
    check(lambda s, t: (s + t).abs(), torch.tensor(-3), torch.tensor(4))


# Operands that are contiguous and of one shape (or 0-dim) take the kernel's short path, which
# allocates the result without TensorIterator: its dtype, shape and strides must still be torch's.
MIXED_PAIRS = [
    (torch.int32, torch.float16),
    (torch.uint8, torch.int8),
    (torch.bool, torch.int64),
    (torch.bfloat16, torch.float16),
    (torch.bool, torch.int16),
]


@op_params(["add_alpha", "div", "div_floor", "remainder", "lt", "maximum", "bitwise_and", "logical_xor"])
def test_binary_op_on_same_shape_operands_of_mixed_dtypes_matches_cpu(op):
    fn, _, kwargs = binary(op)
    supported = 0
    for a, b in MIXED_PAIRS:
        try:
            divisor = rhs(b, op).expand(3, 4).contiguous()  # never 0 for integer dtypes
            kw = kwargs(a)
            check(lambda x, y, kw=kw: fn(x, y, **kw), lhs(a, op), divisor, allow_cpu_unsupported=True)
            supported += 1
        except CpuUnsupported:
            continue
        except AssertionError as e:
            raise AssertionError(f"{dtype_name(a)}, {dtype_name(b)}: {e}") from e
    assert supported, "CPU torch supports none of the pairs"


def test_zero_dim_operands_promote_like_torch_on_the_short_path():
    ints, halves = lhs(torch.int32), lhs(torch.float16)
    check(lambda t, s: t + s, ints, torch.tensor(2.5, dtype=torch.float64))  # float32: the default float
    check(lambda s, t: s * t, torch.tensor(3), lhs(torch.uint8))  # uint8: a 0-dim int does not widen
    check(lambda t: t * torch.tensor(2.0, dtype=torch.float64), halves)  # a CPU 0-dim tensor, float16 result
    check(lambda t: torch.div(t, 2), ints)  # int / int: float32
    check(lambda t: (t > 0.5, t.neg(), t.exp()), halves)


def test_contiguous_operand_with_an_odd_stride_on_a_size_one_dim_matches_cpu():
    base = torch.arange(500.0)
    check(lambda b: b.as_strided((3, 1, 4), (4, 100, 1)) * 2 + b.as_strided((3, 1, 4), (4, 7, 1)), base)


def test_expanded_operands_give_torchs_result_layout_on_the_short_path():
    """An operand expanded along some dims and contiguous in the others leaves the result row-major; expanded dims
    beside a transposed or oddly strided operand, or a stride 0 on a size-1 dim, keep TensorIterator's layout."""
    row, col, x = lhs(torch.float32)[0], lhs(torch.float32)[:, :1], lhs(torch.float32)
    check(lambda r, x: x + r.expand(3, 4), row, x)
    check(lambda c, x: c.expand(3, 4) * x, col, x)
    check(lambda c, r: c.expand(3, 4) - r.expand(3, 4), col, row)  # every operand expanded
    check(lambda r, x: (x.t() + r.expand(3, 4).t(), r.expand(4, 3, 4) + x), row, x)
    check(lambda r, x: x.clone().mul_(r.expand(3, 4)), row, x)
    check(lambda r: r.clone().expand(3, 4).mul_(2), row)  # self expanded: the CPU's internal-overlap error
    check(lambda r, x: torch.where(x > 0, r.expand(3, 4), x), row, x)
    cube = torch.arange(24.0).reshape(2, 3, 4)
    check(lambda c: c[:, :1].expand(2, 3, 4) + c.transpose(0, 1).contiguous().transpose(0, 1), cube)
    check(lambda c: c[:1, :1, :1].as_strided((2, 1, 4), (0, 0, 1)) + c[:, :1], cube)  # stride 0, size 1


def test_pow_clamp_and_lerp_with_numbers_lay_out_their_result_by_their_tensors():
    """The CPU's pow, clamp and lerp leave Python numbers out of their iterator: a (2, 1) input of strides (1, 2)
    counts as contiguous there and gives (1, 1), where add and mul by a number keep (1, 2) (fuzzer seed 49578), and
    hardtanh and nan_to_num keep (1, 2)."""
    t = torch.tensor([0.25, 1.0, 3.0])
    odd = lambda x: x.as_strided((2, 1), (1, 2))  # noqa: E731
    check(lambda x: (odd(x) ** 2, 2.0 ** odd(x), odd(x).clamp(0.1, 0.5), odd(x).clamp_min(0.2), odd(x).clamp_max(2)), t)
    check(lambda x: (torch.lerp(odd(x), odd(x), 0.5), odd(x) * 2, odd(x) + 1, odd(x).neg()), t)
    check(lambda x: (odd(x).long() ** 2).view(torch.float16), t)
    check(lambda x: (odd(x) ** 2.5, odd(x).long().clamp(1, 2), x[:2].reshape(2, 1).t() ** 2), t)
    check(lambda x: torch.clamp(odd(x), torch.tensor(0.3), 2.0), t)
    # hardtanh and nan_to_num compute into empty_like(self): they keep the input's strides
    check(lambda x: (F.hardtanh(odd(x)), F.relu6(odd(x)), torch.nan_to_num(odd(x)), torch.nan_to_num(x[::2])), t)
    check(lambda x: (F.hardtanh(x.expand(2, 3), -0.5, 0.5), torch.nan_to_num(x.expand(2, 3), posinf=1.0)), t)


def test_cpu_zero_dim_tensor_is_accepted_as_a_scalar_operand():
    cpu_scalar = torch.tensor(2.5)
    check(lambda t: t * cpu_scalar + torch.tensor(1), lhs(torch.float32))
    check(lambda t: torch.where(t > 0, t, torch.tensor(0.0)), lhs(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=dtype_name)
def test_addcmul_addcdiv_and_lerp_in_every_form(dtype):
    """The optimizers' pointwise ops (Adam's foreach path): functional, in-place, out=, scalar and tensor weights."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(4, 6, generator=g).to(dtype) for _ in range(3))
    w = torch.rand(6, generator=g).to(dtype)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype is torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-6}
    check(lambda a, b, c: torch.addcmul(a, b, c, value=0.3), a, b, c, **tol)
    check(lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1, value=-0.7), a, b, c, **tol)
    check(lambda a, b, c, w: (torch.lerp(a, b, 0.9), torch.lerp(a, b, w), torch.lerp(a, b, 0.2)), a, b, c, w, **tol)
    check(lambda a, b, c: a.clone().addcmul_(b, c).addcdiv_(b, c.abs() + 1, value=2).lerp_(c, 0.1), a, b, c, **tol)
    check(
        lambda a, b, c, out: torch.addcmul(a, b.t()[:, :4].t(), c, out=out),
        a,
        b.repeat(1, 2)[:, :6].contiguous(),
        c,
        torch.empty(0, dtype=dtype),
        **tol,
    )


def test_integer_addcdiv_raises_like_torch():
    ints = torch.ones(2, dtype=torch.int64)
    check(lambda a, b, c: torch.addcdiv(a, b, c), ints, ints, ints)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_exp_tanh_and_log_over_their_whole_range(dtype):
    """exp, tanh and log are computed without libm for float (polynomials after range reduction):
    check overflow, underflow to denormals and zero, the switch between tanh's two forms, log's
    denormal inputs, zero and negatives, and NaN/inf."""
    x = torch.cat(
        [
            torch.linspace(-110, 95, 4001),
            torch.linspace(-1, 1, 2001),
            torch.tensor([0.625, -0.625, 0.6249, 88.72, 88.73, -87.3, -103.9, -104.1, 1e-30, -0.0]),
            torch.tensor([float("nan"), float("inf"), float("-inf")]),
        ]
    ).to(dtype)
    check(lambda t: (t.exp(), t.tanh(), torch.sigmoid(t), t.exp2()), x, **tol(dtype))
    positive = torch.cat([torch.logspace(-45, 38, 3001), torch.tensor([0.0, -0.0, -1.0, 1.0, 0.7071, 0.7072])])
    check(lambda t: (t.log(), t.log_softmax(0)), torch.cat([positive, x.abs().float()]).to(dtype), **tol(dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_erf_and_gelu_over_their_whole_range(dtype):
    """erf is a polynomial for float (x P(x^2) below 0.921875, Q(|x| - 2.2) with x's sign above, |x| clamped to
    3.92): check both forms and the switch between them, where it rounds to +-1, denormals, signed zeros, NaN and
    infinities, to 4 ulp in float32."""
    x = torch.cat(
        [
            torch.linspace(-5, 5, 20001),
            torch.logspace(-40, 0, 2001),
            -torch.logspace(-40, 0, 2001),
            torch.tensor([0.921875, -0.921875, 0.92187494, 3.92, 3.93, 4.0, 4.1, 0.0, -0.0, 1e-45]),
            torch.tensor([float("nan"), float("inf"), float("-inf")]),
        ]
    ).to(dtype)
    close = {"rtol": 4 * 2.0**-23, "atol": 1e-44} if dtype is torch.float32 else tol(dtype)
    check(torch.erf, x, **close)
    # gelu (x / 2) (1 + erf(x / sqrt(2))) at torch's tolerance: 1 + erf cancels for negative x. At +inf oneDNN's gelu
    # gives NaN, torch's own kernel inf: the CPU takes oneDNN's for a contiguous input of 2+ elements in float32 (and
    # bfloat16, float16 where the CPU has their instructions), torch's for anything else (fuzzer seeds 17335, 22133)
    check(lambda t: (F.gelu(t), F.gelu(t, approximate="tanh")), x, **tol(dtype))
    inf = torch.full((2, 3, 4, 5), float("inf"), dtype=dtype)
    layouts = (
        lambda t: t,
        lambda t: t[0, 0, 0, :1],
        lambda t: t[0, 0, 0, 0],
        lambda t: t[..., ::2],
        lambda t: t.contiguous(memory_format=torch.channels_last),
    )
    check(lambda t: [F.gelu(layout(t)) for layout in layouts] + [F.gelu(t, approximate="tanh")], inf)
    check(lambda t: torch._C._nn.gelu_(t.clone()), inf)  # in place


SQUARE_GRADIENT = """
import torch
import torch_tiny
xc = torch.randn(4096).requires_grad_()
x = xc.detach().to("tiny").requires_grad_()
(g,) = torch.autograd.grad(((x - 0.5) ** 2).sum(), [x])
(want,) = torch.autograd.grad(((xc - 0.5) ** 2).sum(), [xc])
torch.testing.assert_close(g.cpu(), want)
"""


def test_the_gradient_of_a_square_calls_no_pow(tmp_path):
    """pow's backward takes x.pow(exponent - 1): to the exponent 1 that is x itself, as torch's CPU pow copies it (with
    the exponent a kernel argument, the kernel called C's powf an element, 5 ns each)."""
    assert not [s for s in kernel_sources(SQUARE_GRADIENT, tmp_path) if "pow" in s]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_name)
def test_expm1_log1p_and_tanh_over_their_whole_range(dtype):
    """expm1, tanh and log1p are polynomials for float (expm1 and tanh from one reduction of e^y, log1p from log and
    the rounding of 1 + x): check where they round to -1, +-1 or overflow, tiny and denormal inputs, signed zeros,
    x = -1 and below, NaN and inf, to 4 ulp in float32; elu, selu, celu, softplus and mish go through them."""
    x = torch.cat(
        [
            torch.linspace(-35, 95, 4001),
            torch.linspace(-1.5, 1.5, 3001),
            torch.logspace(-40, 1.5, 1001),
            -torch.logspace(-40, 1.5, 1001),
            torch.tensor([88.72, 88.73, 88.38, -30.0, -17.5, 9.02, -9.02, 0.0, -0.0, 1e-45, -1e-45, 2.0**-24]),
            torch.tensor([-1.0, -0.99999994, -1.0000001, 0.34657, -0.34658, 0.5493, 3.4e38]),
            torch.tensor([float("nan"), float("inf"), float("-inf")]),
        ]
    ).to(dtype)
    close = {"rtol": 4 * 2.0**-23, "atol": 1e-44} if dtype is torch.float32 else tol(dtype)
    check(lambda t: (t.expm1(), t.tanh(), t.log1p()), x, **close)
    check(lambda t: (F.elu(t), F.selu(t), F.celu(t, 0.7), F.softplus(t), F.mish(t)), x, **tol(dtype))
    zeros = torch.tensor([0.0, -0.0], dtype=dtype)
    for fn in (torch.expm1, torch.tanh, torch.log1p):
        assert fn(zeros.to("tiny")).cpu().signbit().tolist() == [False, True], fn


ACTIVATIONS = """
import torch
import torch.nn.functional as F
import torch_tiny
x = torch.randn(4096)
for f in (F.elu, F.selu, F.softplus, F.mish, torch.expm1, torch.log1p, F.logsigmoid, torch.sin, torch.cos, torch.tan):
    torch.testing.assert_close(f(x.to("tiny")).cpu(), f(x), equal_nan=True)
torch.testing.assert_close((x.to("tiny").abs() ** x.to("tiny")).cpu(), x.abs() ** x)
"""


def test_float_math_functions_call_no_libm(tmp_path):
    """expm1, log1p (elu, selu, softplus, mish, logsigmoid), sin, cos, tan and pow are the prelude's polynomials, not
    libm's expm1f, log1pf, sinf, cosf, tanf and powf: a call per element keeps the loop scalar (elu of 1M floats, one
    thread: 15.7 -> 0.35 ms; sin 3.6 -> 1.35 ns an element, pow 4.5 -> 1.3)."""
    libm = re.compile(r"(?<!\w)(expm1f|log1pf|sinf|cosf|tanf|powf)\(")
    sources = kernel_sources(ACTIVATIONS, tmp_path)
    assert not [s for s in sources if libm.search(s)]
    assert {"tiny_expm1f(", "tiny_log1pf(", "tiny_sinf(", "tiny_cosf(", "tiny_tanf(", "tiny_powf("} <= {
        call for s in sources for call in re.findall(r"tiny_\w+\(", s)
    }


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=dtype_name)
def test_sin_cos_tan_and_pow_over_their_whole_range(dtype):
    """sin, cos, tan and pow of float are the prelude's (their float reduction by pi/2 below 2^18, a double one above,
    the one selected; pow's special operands selected after 2^(y log2 |x|)), of double libm's: check arguments large
    and huge, either side of 2^18 and 2^27, near multiples of pi/2, denormals, signed zeros, NaN and inf, and pow's
    negative bases, zero, one and infinite operands, to 4 ulp."""
    x = torch.cat(
        [
            torch.linspace(-100, 100, 20001),
            torch.logspace(-40, 38, 2001),
            -torch.logspace(-40, 38, 2001),
            torch.tensor([0.0, -0.0, 1e-45, 1.5707964, 3.1415927, 4.712389, 1e30, -1e30, 3.4e38]),
            torch.tensor([134217720.0, 134217728.0, 134217744.0, -134217728.0, 1e9, 16367173 * 2.0**72]),
            torch.tensor([262143.98, 262144.0, 262144.03, -262143.98, -262144.0, 1e-4, -1e-4, 2.0**-12, -(2.0**-13)]),
            torch.tensor([float("nan"), float("inf"), float("-inf")]),
        ]
    ).to(dtype)
    close = {"rtol": 4 * torch.finfo(dtype).eps, "atol": torch.finfo(dtype).tiny}
    check(lambda t: (t.sin(), t.cos(), t.tan()), x, **close)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, -3.0, float("inf"), float("-inf"), float("nan")]
    base = torch.cat([torch.linspace(-4, 4, 161), torch.tensor(special)]).to(dtype)
    exponent = torch.cat([torch.linspace(-6, 6, 49), torch.tensor(special)]).to(dtype)
    check(lambda b, e: b[:, None] ** e[None, :], base, exponent, **close)


def test_tanh_near_its_saturation_converts_to_integers_as_torch():
    """tanh(-9) is -0.99999994 in float32 (correctly rounded and torch's): it rounded to -1 when the quotient's two sums
    each rounded to 1, and a conversion to an integer gave -1 where torch gives 0 (found by the differential fuzzer, an
    int16 tensor assigned its own tanh)."""
    x = torch.arange(-20, 21, dtype=torch.int16)
    check(lambda t: t.tanh().to(torch.int16), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=dtype_name)
def test_floor_division_gives_a_zero_quotient_the_sign_of_the_true_quotient(dtype):
    """torch's floor division of floats returns copysign(0, a / b) where its quotient is zero: -1 // -3 is 0.0 and
    -0.0 // 2 is -0.0 (tiny gave -0.0 and 0.0, seen through an int view; fuzzer seed 62608). bfloat16 left out: its NaN
    quotients' signs differ (the CPU's x86 default NaN)."""
    a = torch.tensor([-1.0, 1.0, -1.0, 1.0, 0.0, -0.0, 0.5, -0.5, 3.0, -3.0, 0.0, -0.0, 5.0, -5.0, -2.0, 7.0] * 3)
    b = torch.tensor([-3.0, 3.0, 3.0, -3.0, 2.0, 2.0, -2.0, 2.0, 3.0, 3.0, -2.0, -2.0, INF, INF, 0.0, -0.0] * 3)
    signs = lambda t: t.signbit()  # noqa: E731
    check(lambda x, y: (x // y, signs(x // y), signs(torch.div(x, y, rounding_mode="floor"))), a.to(dtype), b.to(dtype))
    check(lambda x: signs(x.floor_divide(-3.0)), a.to(dtype))


@pytest.mark.parametrize("n", [1, 5, 16, 100], ids=str)
def test_clamps_keep_a_negative_zero_input_as_the_cpu(n):
    # the CPU's clamp, relu, hardtanh and relu6 keep x where it equals a bound (std::max/min return their first
    # operand of two equal ones): -0.0 stays -0.0, whose sign a bool or int view shows (fuzzer seed 39210)
    x = torch.tensor([-0.0, 0.0, -1.0, 2.0] * n)
    for f in (
        torch.relu,
        lambda t: t.clone().relu_(),
        lambda t: t.clamp_min(0),
        lambda t: t.clamp(0, 1),
        lambda t: (-t).clamp_max(0),
        lambda t: torch.nn.functional.hardtanh(t, 0.0, 1.0),
        torch.nn.functional.relu6,
    ):
        check(lambda t, f=f: f(t).view(torch.int32), x)


NUMBER_OPS = {
    "add": lambda t, s: t + s,
    "rsub": lambda t, s: s - t,
    "gt": lambda t, s: t > s,
    "eq": lambda t, s: t == s,
    "le": lambda t, s: t <= s,
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "pow": lambda t, s: t.abs() ** s,
    "rpow": lambda t, s: s**t,
    "mul": lambda t, s: t * s,
    "div": lambda t, s: t / s,
    "floor_divide": torch.floor_divide,
    "lerp": lambda t, s: t.lerp(t * 2, s),
    "add_0dim": lambda t, s: t + torch.tensor(s),
    "gt_0dim": lambda t, s: t > torch.tensor(s),
    "atan2_0dim": lambda t, s: torch.atan2(t, torch.tensor(s)),
}


@pytest.mark.parametrize("op", NUMBER_OPS, ids=list(NUMBER_OPS))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=dtype_name)
def test_a_number_meets_a_half_precision_tensor_as_on_the_cpu(op, dtype):
    # TensorIterator rounds a Python number (or a 0-dim CPU tensor) to the tensor's dtype first: bfloat16's 0.3 is
    # 0.30078125, so x > 0.3 is False there; mul, div, floor_divide and lerp read the number as given
    g = torch.Generator().manual_seed(0)
    near = [0.3, 0.30078125, 0.29882812, 0.2998, 0.3003, 1.7, 1.6953125, -2.3, -2.296875]
    x = torch.cat([torch.randn(500, generator=g) * 3, torch.tensor(near)]).to(dtype)
    for s in (0.3, 1.7, -2.3):
        expected = NUMBER_OPS[op](x, s)
        actual = NUMBER_OPS[op](x.to("tiny"), s).cpu()
        assert torch.equal(actual.nan_to_num(), expected.nan_to_num()), (s, (actual != expected).sum().item())
