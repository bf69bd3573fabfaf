"""Reductions (sum, mean, prod, amax/amin, max/min with indices, argmax/argmin, all/any, var/std,
norms, logsumexp, cumsum/cumprod, softmax/log_softmax and their gradients) against CPU torch: values,
result dtypes, shapes, strides, out= forms, empty inputs and errors; and kernel counts that show a
reduction fusing with its elementwise inputs and epilogue.
"""

import pytest
import torch
from conftest import (
    ALL_DTYPES,
    CPU_LOWERING,
    FLOAT_DTYPES,
    INT_DTYPES,
    check,
    check_devices,
    counting,
    kernel_sources,
    recorded_warnings,
)

NAN, INF = float("nan"), float("inf")
DIMS = (None, 0, -1, (0, 2), ())


def sample(shape, dtype=torch.float32, *, seed=0):
    """Values that reduce without overflow: small ints, floats around 1 in magnitude."""
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    low = 0 if dtype is torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=g).to(dtype)


def tolerance(dtype):
    """Summation order differs from torch's (cascade sums): looser for the half types."""
    return {"rtol": 1e-2, "atol": 1e-2} if dtype in (torch.float16, torch.bfloat16) else {}


def dim_kwargs(dim):
    return {} if dim is None else {"dim": dim}


# ---------------------------------------------------------------------------------------------
# sum, mean, prod


def test_sum_of_every_dtype():
    for dtype in ALL_DTYPES:
        check(lambda t: t.sum(1), sample((2, 3, 4), dtype), **tolerance(dtype))


def test_sum_over_every_dim_set():
    x = sample((2, 3, 4))
    for dim in DIMS:
        check(lambda t, dim=dim: torch.sum(t, **dim_kwargs(dim)), x)
    check(lambda t: (t.sum((0, 2), keepdim=True), t.sum(-2, keepdim=True)), x)


def test_sum_dtype_argument_and_int_results():
    x = sample((3, 4), torch.int8)
    check(lambda t: (t.sum(), t.sum(1, dtype=torch.int16), t.sum(dtype=torch.float64)), x)
    check(lambda t: (t.sum(0), t.sum(dtype=torch.float16)), sample((3, 4)), **tolerance(torch.float16))
    check(lambda t: t.sum(), torch.tensor([100, 100, 100], dtype=torch.uint8))


def test_sum_of_empty_non_contiguous_and_scalar():
    check(lambda t: (t.sum(), t.sum(0), t.sum(1, keepdim=True)), sample((0, 3)))
    check(lambda t: (t.sum(), t.sum(0)), sample((0, 3), torch.int32))
    check(lambda t: (t.sum(), t.sum(0), t.sum(-1)), torch.tensor(2.5))
    check(lambda t: (t.sum(0), t.sum((1, 2))), sample((4, 3, 2)).permute(2, 0, 1))
    check(lambda t: t.sum(1), sample((3, 1)).expand(3, 5))
    check(lambda t: t.sum(0), sample((1,)))


def test_sum_out_and_errors():
    def into(t, out):
        _, warned = recorded_warnings(lambda: torch.sum(t, 1, out=out))
        return out, len(warned)

    check(into, sample((3, 4)), torch.empty(3))
    check(into, sample((3, 4)), torch.empty(2))
    check(into, sample((3, 4)), torch.empty(3, dtype=torch.float64))
    check(lambda t: t.sum(3), sample((3, 4)))
    check(lambda t: t.sum((0, 0)), sample((3, 4)))


def test_mean_of_float_dtypes_and_int_errors():
    for dtype in FLOAT_DTYPES:
        check(lambda t: torch.mean(t, (0, 2)), sample((2, 3, 4), dtype), **tolerance(dtype))
    check(lambda t: (t.mean(), t.mean(-1, keepdim=True)), sample((2, 3, 4)))
    check(lambda t: (t.mean(), t.mean(0), t.mean(1, keepdim=True)), sample((0, 3)))
    check(lambda t: t.mean(), sample((3, 4), torch.int32))
    check(lambda t: t.mean(dtype=torch.float64), sample((3, 4), torch.int32))
    check(lambda t, out: torch.mean(t, 0, out=out), sample((3, 4)), torch.empty(4))


def test_prod_of_every_dtype():
    for dtype in ALL_DTYPES:
        check(lambda t: t.prod(1), sample((3, 4), dtype), **tolerance(dtype))
    check(lambda t: (t.prod(), t.prod(0, keepdim=True)), sample((3, 4)))
    check(lambda t: (t.prod(), t.prod(0), t.prod(1)), sample((0, 3)))
    check(lambda t: (t.prod(dtype=torch.float64), t.prod(1, dtype=torch.int32)), sample((3, 4), torch.int8))
    check(lambda t, out: torch.prod(t, 1, out=out), sample((3, 4)), torch.empty(0))


# ---------------------------------------------------------------------------------------------
# amax, amin, max, min, argmax, argmin, aminmax


def test_amax_and_amin_of_every_dtype():
    for dtype in ALL_DTYPES:
        check(lambda t: torch.amax(t, (1, 2)), sample((2, 3, 4), dtype))
    x = sample((2, 3, 4))
    check(lambda t: (torch.amin(t, 0, keepdim=True), torch.amax(t), torch.amin(t, -1)), x)


def test_extremes_propagate_nan_and_pick_the_first_index():
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [2.0, 5.0, 5.0, -1.0], [INF, -INF, INF, 0.0]])
    check(lambda t: (t.amax(1), t.amin(0), t.max(), t.min()), x)
    check(lambda t: (t.max(1), t.min(0), t.max(1, keepdim=True)), x)
    check(lambda t: (t.argmax(), t.argmin(), t.argmax(1), t.argmin(0), t.argmax(0, keepdim=True)), x)
    ties = torch.tensor([[3, 1, 3, 1], [2, 2, 2, 2]], dtype=torch.int32)
    check(lambda t: (t.max(1), t.min(1), t.argmax(), t.argmin(1)), ties)


def test_max_min_with_dim_of_every_dtype():
    for dtype in ALL_DTYPES:
        check(lambda t: t.max(1), sample((3, 4), dtype))
    for dtype in (torch.int32, torch.bool, torch.float16):
        check(lambda t: (t.min(0, keepdim=True), t.argmax()), sample((3, 4), dtype))
    check(lambda t: (t.max(0), t.argmax(), t.argmin(0), t.max()), torch.tensor(1.5))
    check(lambda t: (t.max(1), t.argmin(1)), sample((3, 4, 2)).transpose(0, 2))


def test_extreme_errors_on_empty_match_torch():
    check(lambda t: t.amax(0), sample((0, 3)))
    check(lambda t: t.amax(1), sample((0, 3)))
    check(lambda t: t.max(), sample((0,)))
    check(lambda t: t.min(0), sample((0, 3)))
    check(lambda t: t.max(1), sample((0, 3)))
    check(lambda t: t.argmax(), sample((0,)))


def test_extreme_out_forms():
    x = sample((3, 4))
    check(lambda t, out: torch.amax(t, 1, out=out), x, torch.empty(3))
    check(lambda t, out: torch.max(t, out=out), x, torch.empty(2, dtype=torch.float64))
    check(lambda t, out: torch.max(t, out=out), x, torch.empty(0, dtype=torch.int64))
    check(lambda t, v, i: torch.max(t, 1, out=(v, i)), x, torch.empty(3), torch.empty(3, dtype=torch.int64))
    check(
        lambda t, v, i: torch.min(t, 0, keepdim=True, out=(v, i)), x, torch.empty(0), torch.empty(0, dtype=torch.int64)
    )
    check(lambda t, out: torch.argmax(t, 1, out=out), x, torch.empty(3, dtype=torch.int64))
    check(lambda t: torch.aminmax(t), x)
    check(lambda t: torch.aminmax(t, dim=1, keepdim=True), x)


# ---------------------------------------------------------------------------------------------
# all, any


def test_all_and_any_of_every_dtype_and_form():
    for dtype in ALL_DTYPES:
        check(lambda t: t.any(1), sample((2, 3), dtype))
    for dtype in (torch.uint8,):
        x = sample((2, 3), dtype)
        check(lambda t: (t.all(), t.any(), t.all(1), t.any(0, keepdim=True), t.all((0, 1)), t.any(())), x)
    check(lambda t: (t.all(), t.any(), t.all(0), t.any(1)), sample((0, 3)))
    check(lambda t: (t.all(), t.any()), torch.tensor([NAN, 0.0]))
    check(
        lambda t, out: (torch.all(t, 1, out=out), torch.any(t, out=out)),
        sample((2, 3)),
        torch.empty(0, dtype=torch.bool),
    )


# ---------------------------------------------------------------------------------------------
# var, std, var_mean, std_mean


def test_var_and_std_over_dims_and_corrections():
    for dtype in FLOAT_DTYPES:
        check(lambda t: torch.std(t, 1, keepdim=True), sample((3, 4, 5), dtype), **tolerance(dtype))
    x = sample((3, 4, 5))
    for dim in (None, 1, (0, 2)):
        for correction in (0, 1, 2.5):
            check(lambda t, dim=dim, c=correction: torch.var(t, dim, correction=c), x)
    x = sample((3, 4))
    check(lambda t: (torch.var_mean(t, 1), torch.std_mean(t, 0, keepdim=True), torch.std_mean(t)), x)
    check(lambda t: (t.var(unbiased=False), t.std(1, unbiased=True)), x)
    check(lambda t: torch.var(t, 0), sample((3, 4)).t())


def test_var_edge_cases_match_torch():
    def var_warned(t, **kw):
        result, warned = recorded_warnings(lambda: torch.var(t, **kw))
        return result, [w.split(" (Triggered internally")[0] for w in warned]

    check(lambda t: var_warned(t), torch.tensor([2.0]))
    check(lambda t: var_warned(t, dim=0, correction=3), sample((2, 3)))
    check(lambda t: (torch.var(t), torch.var(t, 0)), sample((0, 3)))
    check(lambda t: torch.var(t), sample((3,), torch.int64))
    check(lambda t, out: torch.var(t, 1, out=out), sample((3, 4)), torch.empty(3, dtype=torch.float64))
    check(lambda t, out: torch.std(t, out=out), sample((3, 4)), torch.empty(0))


# ---------------------------------------------------------------------------------------------
# norms, logsumexp


def test_vector_norms_of_every_order():
    x = sample((3, 4))
    for ord in (0, 1, 2, 3, 0.5, -1, INF, -INF):
        check(lambda t, o=ord: torch.linalg.vector_norm(t, o, dim=1, keepdim=True), x)
    check(lambda t: (torch.linalg.vector_norm(t, 2.5), torch.norm(t, 1, dim=0)), x)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        check(lambda t: (t.norm(), torch.linalg.vector_norm(t, 3, (0, 1))), sample((3, 4), dtype), **tolerance(dtype))
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), x)
    check(lambda t: (t.norm(), torch.linalg.vector_norm(t, 1, 0)), sample((0, 3)))
    check(lambda t: torch.linalg.vector_norm(t, INF), sample((0, 3)))
    check(lambda t: torch.linalg.vector_norm(t), sample((3,), torch.int32))
    check(lambda t, out: torch.linalg.vector_norm(t, 2, 1, out=out), x, torch.empty(3))


def test_logsumexp():
    x = torch.tensor([[1.0, 2.0, -INF], [-INF, -INF, -INF], [INF, 1.0, 0.0], [NAN, 1.0, 2.0]])
    check(lambda t: (torch.logsumexp(t, 1), torch.logsumexp(t, 0, keepdim=True)), x)
    check(lambda t: torch.logsumexp(t, (0, 1)), sample((3, 4), torch.float64))
    check(lambda t: torch.logsumexp(t, 1), sample((3, 4), torch.int64))
    check(lambda t: torch.logsumexp(t, 0), sample((0, 3)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_logsumexp_beside_a_dim_of_one_compiles_and_matches_cpu(dtype):
    # the max read at two places that differ only along the dim of one: its index once named a loop the
    # kernel's block of accumulators did not open ("undeclared identifier" from the C compiler)
    for shape, dim in (((3, 1, 2), -1), ((3, 2, 1, 2), -1), ((3, 2, 1, 2), 3)):
        check(lambda t, dim=dim: torch.logsumexp(t, dim), sample(shape, dtype), **tolerance(dtype))


def test_nansum_trace_and_equal():
    x = torch.tensor([[1.0, NAN, 2.0], [NAN, NAN, NAN], [INF, 1.0, -INF]])
    for dim in (None, 0, 1):
        check(lambda t, dim=dim: torch.nansum(t, **dim_kwargs(dim)), x)
    for dtype in ALL_DTYPES:
        check(lambda t: (torch.nansum(t, 1, keepdim=True), torch.trace(t)), sample((4, 4), dtype), **tolerance(dtype))
    check(lambda t, o: torch.nansum(t, 0, out=o), x, torch.empty(0))
    check(lambda t: torch.nansum(t, 0, dtype=torch.float64), x)
    check(torch.trace, sample((3, 5)))
    check(torch.trace, sample((3,)))  # not a matrix: torch's error
    a = sample((3, 4))
    b = a.clone()
    b[1, 2] += 1
    for other in (a.clone(), b, a[:2], a.double(), torch.full((3, 4), NAN)):
        check(torch.equal, a, other)
    check(torch.equal, torch.full((2,), NAN), torch.full((2,), NAN))


# ---------------------------------------------------------------------------------------------
# cumsum, cumprod


def test_cumsum_and_cumprod_of_every_dtype():
    for dtype in ALL_DTYPES:
        check(lambda t: t.cumsum(-1), sample((3, 4), dtype), **tolerance(dtype))
    for dtype in (torch.float64, torch.int32, torch.bool):
        check(lambda t: (t.cumsum(0), t.cumprod(1)), sample((3, 4), dtype))
    x = sample((3, 4))
    check(lambda t: (t.cumsum(1, dtype=torch.float64), t.cumprod(0, dtype=torch.int32)), sample((3, 4), torch.int8))
    check(lambda t: (t.cumsum(0), t.cumprod(0)), torch.tensor(3.0))
    check(lambda t: (t.cumsum(1), t.cumprod(0)), sample((0, 3)))
    check(lambda t: t.cumsum(0), sample((3, 4, 2)).transpose(0, 2))
    check(lambda t: t.cumprod(0), torch.tensor([1.0, NAN, 2.0, INF, 0.0]))

    def in_place(t):
        t.cumsum_(1)
        t[1:].cumprod_(0)
        return t

    check(in_place, x)
    check(lambda t, out: torch.cumsum(t, 0, out=out), x, torch.empty(0))
    check(lambda t: t.cumsum(2), x)


# ---------------------------------------------------------------------------------------------
# softmax, log_softmax and their gradients


def test_softmax_and_log_softmax_values():
    for dtype in FLOAT_DTYPES:
        check(lambda t: (torch.softmax(t, -1), torch.log_softmax(t, -1)), sample((3, 4, 5), dtype), **tolerance(dtype))
    for dim in (0, 1):
        check(lambda t, d=dim: (torch.softmax(t, d), torch.log_softmax(t, d)), sample((3, 4, 5)))
    special = torch.tensor([[1.0, 2.0, -INF], [-INF, -INF, -INF], [INF, 1.0, 0.0], [1e4, -1e4, 0.0]])
    check(lambda t: (torch.softmax(t, 1), torch.log_softmax(t, 1)), special)
    check(
        lambda t: (torch.softmax(t, 0, dtype=torch.float64), torch.log_softmax(t, 1, dtype=torch.float32)),
        sample((3, 4), torch.float16),
    )
    check(lambda t: (torch.softmax(t, 0), torch.log_softmax(t, -1)), torch.tensor(2.0))
    check(lambda t: torch.softmax(t, 1), sample((0, 3)))
    check(lambda t: torch._softmax(t, 1, True), sample((3, 4), torch.float16))
    check(lambda t: torch.softmax(t, 2), sample((3, 4)))


def test_all_equal_to_an_infinity_matches_cpu_with_nans_and_empty_rows():
    # what sdpa's _safe_softmax asks of its scores (rows all -inf), with NaNs beside infinities and empty rows
    rows = torch.tensor(
        [[-INF, -INF, -INF], [-INF, NAN, -INF], [-INF, 1.0, -INF], [NAN, NAN, NAN], [INF, INF, INF], [INF, NAN, INF]]
    )
    for t in (rows, rows.t(), torch.empty(0, 3), torch.empty(3, 0)):
        check(
            lambda t: (
                t.eq(-INF).all(-1),
                t.eq(INF).all(0, keepdim=True),
                (t == torch.tensor(-INF)).all(),
                (-INF == t).all((0, 1)),
                t.eq(INF).any(-1),
            ),
            t,
        )
    check(lambda t: torch._safe_softmax(t, 1), rows)
    check(lambda t: torch._safe_softmax(t, 0), rows.to(torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_safe_softmax_zeroes_rows_all_minus_infinity(dtype):
    """tiny's _safe_softmax tests a row by its max (-inf exactly where every element is -inf), in softmax's kernel:
    rows of sdpa's length and longer, all or partly -inf, with NaN beside -inf, along each dim, its gradient; a
    conversion to float32 of a double below float's range (-1e300 becomes -inf, but is not -inf) as torch."""
    x = torch.randn(5, 6, 65, generator=torch.Generator().manual_seed(0))
    x[1, 2] = -INF
    x[2, 3, :5] = -INF
    x[3, 1, 4] = NAN
    x[4, 0] = -INF
    x[4, 0, 3] = NAN
    x[:, 4, :] = -INF
    x = x.to(dtype)
    for dim in (-1, 1, 0):
        check(lambda t, dim=dim: torch._safe_softmax(t, dim), x)
    check(lambda t: torch._safe_softmax(t, -1, torch.float32), x)
    check(lambda t: torch._safe_softmax(t, 1), torch.randn(4, 3000).to(dtype))
    check(lambda t: torch._safe_softmax(t, -1, torch.float32), torch.tensor([[-1e300, -1e300], [1.0, 2.0]]).double())
    check(lambda t: torch._safe_softmax(t, 0), torch.empty(0, 3).to(dtype))
    check(lambda t: torch._safe_softmax(t, 0), torch.ones(3, dtype=torch.long))
    if dtype in (torch.float32, torch.float64):
        a = torch.randn(4, 65, dtype=dtype, requires_grad=True)
        b = a.detach().to("tiny").requires_grad_()
        torch._safe_softmax(a, -1).pow(2).sum().backward()
        torch._safe_softmax(b, -1).pow(2).sum().backward()
        torch.testing.assert_close(b.grad.cpu(), a.grad)


def test_safe_softmax_tests_its_rows_by_their_max(tmp_path):
    """sdpa's softmax (_safe_softmax) runs as softmax's kernels: no reduction of its own for the rows all -inf (an AND
    of x == -inf). On the CPU one kernel that reduces each row twice (its max and its sum, no third reduction in bytes);
    on a GPU device the same kernels as softmax's (it was one more there)."""
    x = torch.randn(64, 65)
    assert kernels_of(lambda t: torch._safe_softmax(t, -1), x) == kernels_of(lambda t: torch.softmax(t, -1), x)
    if CPU_LOWERING:
        code = "import torch, torch_tiny\nx = torch.randn(64, 65).to('tiny')\ntorch._safe_softmax(x, -1).cpu()\n"
        kernels = [k for k in kernel_sources(code, tmp_path) if "tiny_expf" in k]
        assert len(kernels) == 1
        assert "acc" in kernels[0] and "tv_uint8_t acc" not in kernels[0] and "_Bool acc" not in kernels[0], kernels[0]


@pytest.mark.parametrize("width", [3, 64, 1000])
def test_softmax_of_one_row_expanded_stores_every_row(width):
    # every row the same (stride 0): the row's sums are one, but each row is written (fuzzer seed 46094: the
    # kernel's sum was hoisted out of the rows' loop with the store inside it, and did not compile)
    def run(t):
        rows = t.as_strided((5, width), (0, 1))
        return torch.softmax(rows, 1), torch.log_softmax(rows, -1), torch.nn.functional.layer_norm(rows, (width,))

    check(run, sample((width,)))
    check(lambda t: torch.softmax(t.as_strided((4, 5, width), (width, 0, 1)), -1), sample((4, width)))


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_gradients(fn):
    for dtype, dim in ((torch.float64, 1), (torch.float32, 0), (torch.bfloat16, -1)):

        def run(dev, dtype=dtype, dim=dim):
            x = sample((3, 4), dtype).to(dev).requires_grad_()
            y = fn(x, dim)
            y.backward(sample((3, 4), dtype, seed=1).to(dev))
            return y.detach(), x.grad

        check_devices(run, **tolerance(dtype))


def test_reduction_gradients_through_autograd():
    def run(dev):
        x = sample((3, 4), torch.float64).to(dev).requires_grad_()
        y = x.sum(1).mean() + x.amax(0).sum() + x.norm() + x.cumsum(1).sum()
        y.backward()
        return y.detach(), x.grad

    check_devices(run)


def test_reductions_of_reductions_and_their_gradients():
    """A reduction read inside another's loop is realized first (var(1).sum(), logsumexp backward)."""
    check(lambda t: (t.var(1).sum(), t.std(0).mean(), t.logsumexp(1).amax()), sample((3, 4), torch.float64))

    def run(dev):
        x = sample((3, 4), torch.float64).to(dev).requires_grad_()
        y = x.var(1).sum() + x.logsumexp(0).sum() + torch.softmax(x, 1).amax(1).sum()
        y.backward()
        return y.detach(), x.grad

    check_devices(run)


# ---------------------------------------------------------------------------------------------
# Fusion: a reduction absorbs its elementwise inputs and epilogue


# The CPU device's lowering (CPU_LOWERING) computes a row's reductions in the kernel that writes the row (row
# kernels); a GPU device's (TINY_DEVICE=CL) realizes them in kernels of their own.


def kernels_of(fn, *inputs):
    """Kernels launched by fn on already realized tiny copies of inputs, up to .cpu()."""
    xs = [t.to("tiny") for t in inputs]
    with counting() as c:
        fn(*xs).cpu()
    return c["kernels"]


def test_reduction_fuses_with_elementwise_input_and_epilogue():
    assert kernels_of(lambda x: (x * 2 + 1).sum(1).sqrt(), sample((8, 16))) == 1


@pytest.mark.parametrize(
    "name,fn,most",
    [
        ("mean", lambda x: x.mean(0) * 2, 1),
        ("argmax", lambda x: x.argmax(1), 1),
        ("cumsum", lambda x: (x + 1).cumsum(1), 1),
        ("softmax", lambda x: torch.softmax(x, -1), 1 if CPU_LOWERING else 3),
        ("log_softmax", lambda x: torch.log_softmax(x, -1), 1 if CPU_LOWERING else 3),
        ("var", lambda x: x.var(1), 1 if CPU_LOWERING else 2),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_reduction_kernel_counts(name, fn, most):
    assert kernels_of(fn, sample((8, 16))) <= most, name


ROW_OPS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
    "centered": lambda x: x - x.mean(-1, keepdim=True),
    "rms_norm": lambda x: x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6),
    "scaled by its max": lambda x: x / x.abs().amax(-1, keepdim=True),
}


@pytest.mark.parametrize("name", ROW_OPS)
def test_row_reductions_run_in_one_pass_over_the_rows(name):
    """Reductions read by every element of their row (softmax, layer norm) are computed in the kernel
    that writes the row, once per row, not realized by kernels of their own (rows of 16-lane multiples
    and not)."""
    fn = ROW_OPS[name]
    for shape in ((64, 1024), (33, 100), (4, 6, 48)):
        if CPU_LOWERING:
            assert kernels_of(fn, sample(shape)) == 1, (name, shape)
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            check(fn, sample(shape, dtype), **tolerance(dtype))


def test_statistics_shared_across_a_batch_loop_are_still_computed_once():
    """A per-channel statistic read under a batch loop it does not depend on (batch norm's mean over
    N, H, W in an (N, C, H, W) kernel) is realized first, not recomputed per batch element."""
    x = sample((4, 3, 8, 8))
    fn = lambda t: t - t.mean((0, 2, 3), keepdim=True)  # noqa: E731
    assert kernels_of(fn, x) == 2
    check(fn, x)


def test_int_dtypes_sum_to_int64():
    for dtype in INT_DTYPES + (torch.bool,):
        check(lambda t: t.sum(), sample((3, 4), dtype))


def test_a_sum_of_one_element_starts_from_zero_as_torchs():
    # torch's sums start from +0: a -0 summed alone (over dims of size 1) is +0; 1 / it tells the two apart
    x = torch.tensor([[-0.0, 1.0], [2.0, -0.0]]).reshape(2, 1, 2)
    for fn in (
        lambda x: x.sum(1),
        lambda x: x.mean(1),
        lambda x: x.sum((1,), keepdim=True),
        lambda x: x[:1, :, :1].sum(),
        lambda x: torch.nn.functional.conv1d(x, torch.full((1, 1, 1), -2.0, device=x.device) * 0 - 0.0),
        lambda x: torch.nn.functional.conv_transpose1d(x, -torch.ones(1, 1, 1, device=x.device), stride=2),
    ):
        check(lambda x, fn=fn: 1 / fn(x), x)


@pytest.mark.parametrize("width", (1000, 33, 973), ids=str)
def test_a_column_reduction_of_a_width_not_a_multiple_of_the_lanes_matches_cpu(width):
    """x.sum(0) and its kin over a width that does not divide into 16 lanes: one loop of vectors, the last overlapping
    the one before, split so that the two run on one thread (973: 61 vectors, a prime, one thread for all); it was a
    scalar walk down each column (4096 x 1000: 28 ms)."""
    x = torch.randn(4096 if width == 1000 else 300, width, generator=torch.Generator().manual_seed(width))
    check(lambda x: x.sum(0), x, rtol=1e-4, atol=1e-3)
    check(lambda x: x.amax(0), x)
    check(lambda x: x.mean(0), x, rtol=1e-4, atol=1e-5)
    check(lambda x: x.to(torch.int32).sum(0), x)
    # in place: outputs stored twice must not be read back (the overlapping vectors added their sums twice)
    check(lambda o, x: o.add_(x.sum(0)), torch.ones(width), x, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.int32, torch.int64, torch.bool), ids=str)
def test_row_reductions_whose_lanes_combine_as_vectors_match_cpu(dtype):
    """A row reduction vectorized along its row combines its 16 lanes after the loop in four whole-vector steps (each
    the vector and its halves swapped), not in a tree of scalar steps: sums, products, max and min, any and all over
    rows of 67 (four vectors and a tail of three) and 1024, NaN in a lane of the loop, in the tail, or nowhere."""
    gen = torch.Generator().manual_seed(67)
    for width in (67, 1024):
        x = torch.randn(6, width, generator=gen) * 2
        x[1, 9] = x[2, width - 4] = x[3, width - 1] = NAN
        if dtype == torch.bool:
            b = x > 0
            b[4] = True
            b[5] = False
            check(lambda t: (t.any(1), t.all(1), t.sum(1), t.amax(1), t.amin(1)), b)
            continue
        x = x.to(dtype) if dtype.is_floating_point else x.nan_to_num(0).to(dtype)
        check(lambda t: (t.amax(1), t.amin(1), t.max(1).values, t.min(1).values), x)
        check(lambda t: t.sum(1), x, rtol=1e-5, atol=1e-4)
        check(lambda t: (t / 2).sum(1) if dtype.is_floating_point else t.prod(1), x, rtol=1e-5, atol=1e-4)
        if dtype.is_floating_point:
            check(lambda t: (t.softmax(1), t.logsumexp(1), t.norm(dim=1)), x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", (4096, 3072, 4095, 4099), ids=str)
def test_a_column_reduction_over_many_rows_far_apart_sums_in_parts_and_matches_cpu(rows):
    """Reduced over 3072 or more rows far apart (each 1 KiB or more), a column reduction sums runs of about 256 rows
    (a divisor of the rows near it: 256, 256, 273 for 4095) into partial results, then their sum, so that each run's
    rows stay in L2 while every block of columns reads them; 4099 rows (a prime) stay one kernel. NaN in one run
    reaches its column's max and sum; integer sums stay exact."""
    x = torch.randn(rows, 1000, generator=torch.Generator().manual_seed(rows))
    x[rows - 5, 7] = NAN
    if CPU_LOWERING:
        assert kernels_of(lambda t: t.sum(0), x) == (1 if rows == 4099 else 2)
    check(lambda t: (t.sum(0), t.amax(0), t.amin(0)), x, rtol=1e-4, atol=1e-3)
    check(lambda t: (t.mean(0, keepdim=True), t.nansum(0), (t * 2 - 1).sum(0)), x, rtol=1e-4, atol=1e-3)
    check(lambda t: (t * 1000).to(torch.int64).sum(0), x.nan_to_num(0))
    check(lambda t: t.t().sum(1, dtype=torch.float64), x.double(), rtol=1e-10, atol=1e-10)
    check(lambda t: t[:, 3:700].sum(0), x, rtol=1e-4, atol=1e-3)
