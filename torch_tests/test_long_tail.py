"""The long tail of ATen ops (issue #16) natively on tiny, against PyTorch CPU with the fallback disabled
(TINY_FALLBACK=0), so a silent fallback fails the test: log10 and nan_to_num in every form, the special
functions (digamma, polygamma, zeta, erfinv, i0, i0e, i1, i1e) over wide ranges with poles, huge values and
nan/inf, count_nonzero, cummax/cummin, logcumsumexp, median/nanmedian, index_reduce, max_unpool2d/3d,
adaptive_max_pool2d/3d, im2col/col2im (F.unfold/F.fold), and the fused Adam/AdamW steps; with
gradients where autograd reaches these ops."""

import functools

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, FLOAT_DTYPES, assert_optimizer_steps_match_cpu, assert_same, by_dtype, check, rand, tol

NAN, INF = float("nan"), float("inf")


pytestmark = pytest.mark.usefixtures("native")


def both(fn, *inputs):
    """fn on the CPU inputs and on tiny copies of them."""
    return fn(*inputs), fn(*[x.to(DEVICE) if isinstance(x, torch.Tensor) else x for x in inputs])


def special_inputs(dtype=torch.float32):
    """Wide ranges: negative and positive, near and at the poles (the non-positive integers), tiny, huge,
    and nan/inf, with both signed zeros."""
    g = torch.Generator().manual_seed(0)
    wide = torch.cat(
        [
            torch.linspace(-30, 30, 241),
            torch.rand(200, generator=g) * 2000 - 1000,
            torch.tensor([-3.0, -2.0, -1.0, -2.999, -1.001, -0.5, 1e-30, 1e-6, 0.5, 1.0, 9.999, 10.0, 10.001]),
            torch.tensor([1e10, -1e10, 1e30, 88.0, 89.0, 700.0, NAN, INF, -INF, 0.0, -0.0]),
        ]
    )
    return wide.to(dtype)


UNARY_SPECIAL = {
    "log10": torch.log10,
    "digamma": torch.digamma,
    "polygamma1": lambda x: torch.polygamma(1, x),
    "polygamma2": lambda x: torch.polygamma(2, x),
    "polygamma3": lambda x: torch.polygamma(3, x),
    "polygamma5": lambda x: torch.special.polygamma(5, x),
    "i0": torch.i0,
    "i0e": torch.special.i0e,
    "i1": torch.special.i1,
    "i1e": torch.special.i1e,
}


@pytest.mark.parametrize("name", list(UNARY_SPECIAL))
@by_dtype((torch.float32, torch.float64))
def test_special_function_matches_cpu_over_wide_ranges(name, dtype):
    fn = UNARY_SPECIAL[name]
    x = special_inputs(dtype)
    expected, actual = both(fn, x)
    # the CPU's own float32 polygamma sums in float64: a few ulps near the poles and for huge results
    rtol = {torch.float32: 1e-5, torch.float64: 1e-10}[dtype]
    assert_same(actual, expected, rtol=rtol, atol=1e-30 if dtype == torch.float64 else 1e-6)


@by_dtype((torch.float32, torch.float64))
def test_erfinv_matches_cpu_on_the_whole_domain_and_beyond(dtype):
    x = torch.cat([torch.linspace(-1, 1, 401), torch.tensor([-1.0, 1.0, 1.5, -2.0, NAN, 0.9999999, -0.99999])])
    expected, actual = both(torch.erfinv, x.to(dtype))
    assert_same(actual, expected, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)


@by_dtype((torch.float16, torch.bfloat16, torch.int64, torch.bool))
def test_special_functions_promote_like_cpu(dtype):
    x = rand(20, dtype=dtype) if dtype != torch.bool else torch.tensor([True, False])
    for fn in (torch.digamma, torch.erfinv, torch.i0, torch.special.i1e, torch.log10, lambda t: torch.polygamma(2, t)):
        expected, actual = both(fn, x)
        assert_same(actual, expected, **tol(actual.dtype))


def test_special_functions_out_and_inplace_forms_match_cpu():
    x = special_inputs()
    for fn in ("log10", "digamma", "erfinv", "i0"):
        out_cpu, out_tiny = torch.empty(3), torch.empty(3, device=DEVICE)
        getattr(torch, fn)(x, out=out_cpu)
        getattr(torch, fn)(x.to(DEVICE), out=out_tiny)
        assert_same(out_tiny, out_cpu, rtol=1e-5, atol=1e-6)
        a, b = x.clone(), x.to(DEVICE)
        getattr(a, fn + "_")()
        getattr(b, fn + "_")()
        assert_same(b, a, rtol=1e-5, atol=1e-6)
    a, b = x.clone(), x.to(DEVICE)
    a.polygamma_(2)
    b.polygamma_(2)
    assert_same(b, a, rtol=1e-5, atol=1e-6)


def test_polygamma_of_a_negative_order_raises_like_cpu():
    with pytest.raises(RuntimeError, match="negative"):
        torch.polygamma(-1, torch.ones(2))
    with pytest.raises(RuntimeError, match="negative"):
        torch.polygamma(-1, torch.ones(2, device=DEVICE))


def test_special_function_gradients_match_cpu():
    x = torch.tensor([0.3, 1.7, 4.0, -2.5, 12.0])
    for fn in (torch.digamma, torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e, torch.log10):
        grads = []
        for dev in ("cpu", DEVICE):
            t = x.clone().to(dev).requires_grad_()
            fn(t).sum().backward()
            grads.append(t.grad)
        assert_same(grads[1], grads[0], rtol=1e-5, atol=1e-6)
    y = torch.tensor([-0.9, -0.3, 0.0, 0.4, 0.95])
    grads = []
    for dev in ("cpu", DEVICE):
        t = y.clone().to(dev).requires_grad_()
        torch.erfinv(t).sum().backward()
        grads.append(t.grad)
    assert_same(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@by_dtype(FLOAT_DTYPES + (torch.int32, torch.bool))
def test_nan_to_num_matches_cpu_in_every_form(dtype):
    x = torch.tensor([NAN, INF, -INF, 1.5, -2.0, 0.0])
    x = x.to(dtype) if dtype.is_floating_point else torch.tensor([1, 0, 3]).to(dtype)
    for kwargs in ({}, {"nan": 7.0}, {"posinf": 1e3, "neginf": -2.5}, {"nan": -1.0, "posinf": 1e300}):
        expected, actual = both(functools.partial(torch.nan_to_num, **kwargs), x)
        assert_same(actual, expected)
    a, b = x.clone(), x.to(DEVICE)
    a.nan_to_num_(nan=3.0)
    b.nan_to_num_(nan=3.0)
    assert_same(b, a)
    out_cpu, out_tiny = torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype, device=DEVICE)
    torch.nan_to_num(x, out=out_cpu)
    torch.nan_to_num(x.to(DEVICE), out=out_tiny)
    assert_same(out_tiny, out_cpu)


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 2), (-1,)])
def test_count_nonzero_matches_cpu(dim):
    x = torch.tensor([[[0.0, 1, 2], [0, 0, 3]], [[NAN, 0, -1], [0, 0, 0]]])
    expected, actual = both(lambda t: torch.count_nonzero(t, dim=dim), x)
    assert_same(actual, expected)
    expected, actual = both(lambda t: torch.count_nonzero(t, dim=dim), x > 0)
    assert_same(actual, expected)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@by_dtype((torch.float32, torch.float64, torch.int64, torch.int16, torch.uint8, torch.bool))
def test_cummax_cummin_values_and_indices_match_cpu(op, dtype):
    # ties (the later index wins) and NaNs (the running extreme becomes NaN at the last NaN seen)
    x = torch.tensor([[3, 1, 3, 5, 5, 0, 2], [0, 0, 0, 1, 1, 0, 7]], dtype=torch.float32)
    if dtype.is_floating_point:
        x = torch.cat([x, torch.tensor([[1.0, NAN, 2, NAN, 9, -INF, 4]])])
    x = x.to(dtype) if dtype != torch.bool else x > 1
    for dim in (0, 1, -1):
        expected, actual = both(getattr(torch, op), x, dim)
        assert_same(actual.values, expected.values)
        assert_same(actual.indices, expected.indices)
    expected, actual = both(lambda t: getattr(torch, op)(t, 0), x[0, 0])  # 0-dim
    assert_same(actual.indices, expected.indices)


def test_cummax_gradient_matches_cpu():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0, 5.0], [4.0, 1.0, 4.0, 2.0, 0.0]])
    grads = []
    for dev in ("cpu", DEVICE):
        t = x.clone().to(dev).requires_grad_()
        (torch.cummax(t, 1).values * torch.arange(5.0, device=dev)).sum().backward()
        grads.append(t.grad)
    assert_same(grads[1], grads[0])


@by_dtype((torch.float32, torch.float64, torch.float16, torch.bfloat16))
def test_logcumsumexp_matches_cpu_with_infinities_and_nan(dtype):
    x = rand(3, 9, dtype=torch.float32) * 30
    x[0, 2] = -INF
    x[1, :] = -INF
    x[2, 4] = INF
    x = torch.cat([x, torch.tensor([[1.0, NAN, 2, 3, 4, 5, 6, 7, 8]])]).to(dtype)
    for dim in (0, 1):
        expected, actual = both(torch.logcumsumexp, x, dim)
        assert_same(actual, expected, **({"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else tol(dtype)))
    t = rand(4, 5).to(DEVICE).requires_grad_()
    c = t.detach().cpu().requires_grad_()
    torch.logcumsumexp(t, 1).sum().backward()
    torch.logcumsumexp(c, 1).sum().backward()
    assert_same(t.grad, c.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_median_and_nanmedian_match_cpu_values_and_indices(op):
    x = torch.tensor([[3.0, 1, 1, 3], [NAN, 2, NAN, 1], [5, 4, 3, 2], [1, NAN, 7, 7]])
    fn = getattr(torch, op)
    for dim in (0, 1):
        for keepdim in (False, True):
            expected, actual = both(fn, x, dim, keepdim)
            assert_same(actual.values, expected.values)
            assert_same(actual.indices, expected.indices)
    # a row of NaNs: the CPU's index there comes from nth_element's internals, so only the value is compared
    expected, actual = both(fn, torch.full((2, 3), NAN), 1)
    assert_same(actual.values, expected.values)
    expected, actual = both(fn, x[2])
    assert_same(actual, expected)
    expected, actual = both(fn, torch.tensor([]))
    assert_same(actual, expected)
    expected, actual = both(fn, torch.tensor([2, 9, 4, 4], dtype=torch.int32), 0)
    assert_same(actual.values, expected.values)
    with pytest.raises(IndexError, match="non-zero size"):
        fn(torch.zeros(2, 0, device=DEVICE), 1)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@by_dtype((torch.float32, torch.int64))
def test_index_reduce_matches_cpu(reduce, include_self, dtype):
    self_ = rand(5, 3, dtype=dtype, seed=1)
    source = rand(4, 3, dtype=dtype, seed=2)
    index = torch.tensor([0, 4, 0, 2])
    expected, actual = both(
        lambda s, i, src: s.index_reduce(0, i, src, reduce, include_self=include_self), self_, index, source
    )
    assert_same(actual, expected)
    expected, actual = both(
        lambda s, i, src: s.index_reduce(1, i, src, reduce), self_, torch.tensor([2, 0, 2]), rand(5, 3, dtype=dtype)
    )
    assert_same(actual, expected)


def test_index_reduce_with_an_index_out_of_range_raises_like_cpu():
    with pytest.raises(IndexError, match="out of bounds"):
        torch.zeros(3, device=DEVICE).index_reduce_(
            0, torch.tensor([5], device=DEVICE), torch.ones(1, device=DEVICE), "prod"
        )


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_max_unpool_inverts_max_pool_like_cpu_with_gradients(dims):
    pool, unpool = {
        1: (F.max_pool1d, F.max_unpool1d),
        2: (F.max_pool2d, F.max_unpool2d),
        3: (F.max_pool3d, F.max_unpool3d),
    }[dims]
    x = rand(2, 3, *([6] * dims))
    results = []
    for dev in ("cpu", DEVICE):
        t = x.clone().to(dev).requires_grad_()
        values, indices = pool(t, 2, stride=2, return_indices=True)
        y = unpool(values, indices, 2, stride=2, output_size=[7] * dims)
        (y * torch.arange(y.numel(), device=dev, dtype=y.dtype).reshape(y.shape)).sum().backward()
        results.append((y, t.grad))
    assert_same(results[1], results[0])


def test_max_unpool2d_checks_its_indices_like_cpu():
    values = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    indices = torch.tensor([[[[0, 2], [5, 7]]]])
    expected, actual = both(lambda v, i: F.max_unpool2d(v, i, 2, output_size=(3, 3)), values, indices)
    assert_same(actual, expected)
    with pytest.raises(RuntimeError, match="invalid max index"):
        F.max_unpool2d(values.to(DEVICE), (indices + 9).to(DEVICE), 2, output_size=(3, 3))


@pytest.mark.parametrize("size", [(3, 3), (4, 2), (2, 5), (1, 1)])
def test_adaptive_max_pool2d_values_indices_and_gradients_match_cpu(size):
    x = rand(2, 3, 8, 10)
    x[0, 0, 1, 1] = NAN
    results = []
    for dev in ("cpu", DEVICE):
        t = x.clone().to(dev).requires_grad_()
        values, indices = F.adaptive_max_pool2d(t, size, return_indices=True)
        (values.nan_to_num() * 2).sum().backward()
        results.append((values, indices, t.grad))
    assert_same(results[1], results[0])


def test_adaptive_max_pool1d_and_3d_match_cpu():
    x = rand(2, 3, 7)
    expected, actual = both(lambda t: F.adaptive_max_pool1d(t, 3, return_indices=True), x)
    assert_same(actual, expected)
    x3 = rand(1, 2, 4, 6, 5)
    expected, actual = both(lambda t: F.adaptive_max_pool3d(t, (2, 3, 2), return_indices=True), x3)
    assert_same(actual, expected)


@pytest.mark.parametrize(
    "kernel,dilation,padding,stride",
    [((2, 3), 1, 0, 1), ((3, 3), (2, 1), 1, 2), ((1, 1), 1, 0, 1), ((5, 5), 1, 2, 1), ((2, 2), 1, 3, 3)],
)
def test_unfold_and_fold_match_cpu_with_gradients(kernel, dilation, padding, stride):
    x = rand(2, 3, 7, 6)
    results = []
    for dev in ("cpu", DEVICE):
        t = x.clone().to(dev).requires_grad_()
        cols = F.unfold(t, kernel, dilation=dilation, padding=padding, stride=stride)
        back = F.fold(cols * 1.5, (7, 6), kernel, dilation=dilation, padding=padding, stride=stride)
        back.square().sum().backward()
        results.append((cols, back, t.grad))
    assert_same(results[1], results[0], rtol=1e-5, atol=1e-5)
    # unbatched input, and a fold of columns that were never unfolded
    expected, actual = both(lambda t: F.unfold(t, 2), x[0])
    assert_same(actual, expected)


def test_unfold_with_a_kernel_larger_than_the_padded_input_raises_like_cpu():
    with pytest.raises(RuntimeError, match="must be at least one"):
        F.unfold(torch.ones(1, 1, 2, 2, device=DEVICE), 3)


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW"])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
def test_fused_adam_steps_match_the_cpu_fused_kernel(optimizer, amsgrad, maximize):
    assert_optimizer_steps_match_cpu(
        lambda params: getattr(torch.optim, optimizer)(
            params, lr=0.01, weight_decay=0.1, amsgrad=amsgrad, maximize=maximize, fused=True
        )
    )


def test_fused_adamw_skips_the_step_when_found_inf_and_unscales_gradients():
    for found in (0.0, 1.0):
        outs = []
        for dev in ("cpu", DEVICE):
            p = [torch.ones(3, device=dev)]
            g = [torch.tensor([2.0, -4.0, 8.0], device=dev)]
            m, v = [torch.zeros(3, device=dev)], [torch.zeros(3, device=dev)]
            steps = [torch.tensor(1.0, device=dev)]
            torch._fused_adamw_(
                p,
                g,
                m,
                v,
                [],
                steps,
                lr=0.1,
                beta1=0.9,
                beta2=0.999,
                weight_decay=0.01,
                eps=1e-8,
                amsgrad=False,
                maximize=False,
                grad_scale=torch.tensor(2.0, device=dev),
                found_inf=torch.tensor(found, device=dev),
            )
            outs.append((p, g, m, v))
        assert_same(outs[1], outs[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_matches_cpu_with_gradients(mode, include_last_offset):
    weight = rand(10, 4)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = torch.tensor([0, 2, 2, 5, 9]) if include_last_offset else torch.tensor([0, 2, 2, 5])
    results = []
    for dev in ("cpu", DEVICE):
        w = weight.clone().to(dev).requires_grad_()
        out = F.embedding_bag(
            indices.to(dev), w, offsets.to(dev), mode=mode, include_last_offset=include_last_offset, padding_idx=4
        )
        (out * torch.arange(out.numel(), device=dev, dtype=out.dtype).reshape(out.shape)).sum().backward()
        results.append((out, w.grad))
    assert_same(results[1], results[0], rtol=1e-5, atol=1e-6)


def test_embedding_bag_with_per_sample_weights_and_2d_input_matches_cpu():
    weight = rand(7, 3)
    indices = torch.tensor([[0, 2, 6], [1, 1, 5]])
    psw = rand(2, 3, seed=3)
    results = []
    for dev in ("cpu", DEVICE):
        w = weight.clone().to(dev).requires_grad_()
        p = psw.clone().to(dev).requires_grad_()
        out = F.embedding_bag(indices.to(dev), w, mode="sum", per_sample_weights=p)
        out.square().sum().backward()
        results.append((out, w.grad, p.grad))
    assert_same(results[1], results[0], rtol=1e-5, atol=1e-6)


def test_embedding_bag_with_an_index_out_of_range_raises():
    with pytest.raises(RuntimeError, match="out of range"):
        F.embedding_bag(
            torch.tensor([0, 12], device=DEVICE), torch.ones(5, 2, device=DEVICE), torch.tensor([0], device=DEVICE)
        )


@by_dtype((torch.float32, torch.int64, torch.bool))
def test_unique_matches_cpu_values_inverse_and_counts(dtype):
    if dtype == torch.bool:
        x = torch.tensor([[True, False], [True, True]])
    elif dtype == torch.float32:
        x = torch.tensor([[3.0, NAN, 1.0, 3.0], [2.0, NAN, 1.0, 0.0]])
    else:
        x = rand(3, 5, dtype=dtype)
    for kwargs in (
        {},
        {"return_inverse": True},
        {"return_counts": True},
        {"return_inverse": True, "return_counts": True},
    ):
        expected, actual = both(functools.partial(torch.unique, **kwargs), x)
        assert_same(actual, expected)
    expected, actual = both(functools.partial(torch.unique, return_inverse=True, return_counts=True), x[0, 0])
    assert_same(actual, expected)
    expected, actual = both(torch.unique, x[:0])
    assert_same(actual, expected)


def test_unique_consecutive_matches_cpu():
    x = torch.tensor([1, 1, 2, 2, 3, 1, 1, 2])
    for kwargs in ({}, {"return_inverse": True, "return_counts": True}, {"dim": 0}):
        expected, actual = both(functools.partial(torch.unique_consecutive, **kwargs), x)
        assert_same(actual, expected)


@by_dtype((torch.float32, torch.float64))
def test_hurwitz_zeta_matches_cpu_over_its_special_cases(dtype):
    """torch.special.zeta(x, q): poles at x = 1 and at q = 0, -1, ...; NaN for x < 1 and for a non-integer x at
    q <= 0; a long direct sum for a very negative q."""
    xs = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.5, 10.0, 30.0, NAN, INF, -2.0], dtype=dtype)
    qs = torch.tensor([-20.5, -3.0, -2.5, -0.5, 0.0, 0.01, 0.5, 1.0, 2.5, 9.5, 100.0, 1e6, NAN, INF, -INF], dtype=dtype)
    x, q = torch.meshgrid(xs, qs, indexing="ij")
    check(torch.special.zeta, x, q, rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=0)
    check(torch.special.zeta, torch.tensor([2, 3, 4]), torch.tensor([1, 2, 3]))  # integers promote to float
    check(lambda x: torch.special.zeta(x, 1.0), rand(5) + 2)
