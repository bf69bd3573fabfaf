"""Type promotion across dtypes, scalars and 0-dim tensors follows torch's rules on tiny."""

import pytest
import torch
from conftest import check


def t(data, dtype):
    return torch.tensor(data, dtype=dtype)


I8 = t([-3, 1, 5], torch.int8)
I16 = t([300, -2, 7], torch.int16)
I32 = t([-7, 2, 9], torch.int32)
I64 = t([10, -4, 3], torch.int64)
U8 = t([250, 3, 0], torch.uint8)
B = t([True, False, True], torch.bool)
F16 = t([1.5, -2.25, 0.125], torch.float16)
BF16 = t([1.5, -2.25, 100.0], torch.bfloat16)
F32 = t([0.5, -1.25, 3.0], torch.float32)
F64 = t([2.0, -0.75, 1e-3], torch.float64)

CASES = {
    "int_true_div_int_gives_default_float": (
        lambda a, b: a / b,
        I32,
        t([2, -4, 3], torch.int32),
    ),
    "int64_true_div_python_int": (lambda a: a / 4, I64),
    "int8_true_div_int8": (torch.true_divide, I8, t([2, 3, -2], torch.int8)),
    "bool_plus_int64": (torch.add, B, I64),
    "bool_plus_python_int": (lambda a: a + 3, B),
    "bool_times_float_tensor": (torch.mul, B, F32),
    "int8_plus_int16": (torch.add, I8, I16),
    "int16_times_int64": (torch.mul, I16, I64),
    "int32_minus_int8": (torch.sub, I32, I8),
    "uint8_plus_int8_gives_int16": (torch.add, U8, I8),
    "uint8_plus_bool": (torch.add, U8, B),
    "uint8_bitwise_and_int8": (torch.bitwise_and, U8, I8),
    "int_plus_python_float": (lambda a: a + 0.5, I32),
    "int_times_float_0dim_tensor": (
        lambda a, s: a * s,
        I16,
        torch.tensor(1.5, dtype=torch.float64),
    ),
    "int8_plus_int64_0dim_tensor_stays_int8": (lambda a, s: a + s, I8, torch.tensor(2)),
    "float16_plus_float32_0dim_stays_float16": (
        lambda a, s: a + s,
        F16,
        torch.tensor(0.25),
    ),
    "float16_plus_float32_tensor": (torch.add, F16, F32),
    "float16_plus_bfloat16_gives_float32": (torch.add, F16, BF16),
    "bfloat16_plus_int64": (torch.add, BF16, I64),
    "float32_plus_float64": (torch.add, F32, F64),
    "int_pow_python_float": (lambda a: a.abs() ** 0.5, I32),
    "int_maximum_float16": (torch.maximum, I8, F16),
    "int8_lt_float32": (torch.lt, I8, F32),
    "uint8_eq_int8": (torch.eq, U8, I8),
    "int_div_floor_float": (
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        I64,
        F32,
    ),
    "where_int8_or_float16": (lambda c, a, b: torch.where(c, a, b), B, I8, F16),
    "where_int_or_python_float": (lambda c, a: torch.where(c, a, 2.5), B, I16),
    "clamp_int_with_float_bounds": (lambda a: torch.clamp(a, 0.5, 2.5), I8),
    "clamp_bool_with_int_bounds": (lambda a: torch.clamp(a, 0, 1), B),
    "logical_and_of_float_and_int": (torch.logical_and, F32, I64),
    "int_sqrt_gives_default_float": (torch.sqrt, I16.abs()),
    "bool_exp_gives_default_float": (torch.exp, B),
    "int_inplace_add_int_of_other_width": (lambda a, b: a.add_(b), I64.clone(), I8),
    "float16_inplace_mul_float64_tensor": (lambda a, b: a.mul_(b), F16.clone(), F64),
    "int_inplace_add_python_float_is_refused": (lambda a: a.add_(1.5), I32.clone()),
    "int_inplace_true_div_is_refused": (
        lambda a, b: a.div_(b),
        I32.clone(),
        t([1, 2, 3], torch.int32),
    ),
    "uint8_inplace_sub_int8_is_refused": (lambda a, b: a.sub_(b), U8.clone(), I8),
    "out_of_wider_float_accepts_int_result": (
        lambda a, b, o: torch.add(a, b, out=o),
        I8,
        I8,
        F64.clone(),
    ),
    "out_of_int_refuses_float_result": (
        lambda a, b, o: torch.mul(a, b, out=o),
        F32,
        F32,
        I64.clone(),
    ),
    "out_of_bool_refuses_int_result": (
        lambda a, b, o: torch.add(a, b, out=o),
        I8,
        I8,
        B.clone(),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_type_promotion_matches_cpu(case):
    fn, *args = case
    check(fn, *args)


def test_int_true_division_follows_the_default_dtype():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        check(lambda a, b: a / b, I32, t([3, 7, -2], torch.int32))
        check(torch.sigmoid, I64)
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("x", [I8, U8, I16, I32], ids=["int8", "uint8", "int16", "int32"])
def test_a_python_int_out_of_the_dtypes_range_wraps_into_it_as_on_the_cpu(x):
    # TensorIterator converts the wrapped number to the tensor's dtype by a static_cast: int8 == 300 compares
    # with 44 (a fill would raise an overflow error instead)
    check(lambda a: (a == 300, a * 70000, a & (2**63 + 5), a | -(2**40), a != 2**64 - 1), x)
