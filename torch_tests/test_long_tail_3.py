"""The long tail of ATen ops (issue #16), part 3, natively on tiny, against PyTorch CPU with the fallback
disabled (TINY_FALLBACK=0), so a silent fallback fails the test: histc, histogram (bin count and bin edges),
histogramdd (_histogramdd_bin_edges, _histogramdd_from_bin_cts, _histogramdd_from_bin_tensors), nextafter,
hardshrink and softshrink (every form, and their backward ops), multi_margin_loss and multilabel_margin_loss
(and their backward ops), pdist, frexp, isin, mode, rrelu_with_noise, and torch.special's chebyshev T/U/V/W
(and shifted), hermite H/He, laguerre and legendre polynomials; values, gradients, dtypes, shapes, edge cases
and bad input raising the CPU's kind of error."""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same, by_dtype, check, rand, tol, with_grads

NAN, INF = float("nan"), float("inf")

pytestmark = pytest.mark.usefixtures("native")

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


# ---- histc ----


@by_dtype(FLOATS)
def test_histc_matches_cpu(dtype):
    x = rand(7, 9, dtype=dtype)
    check(torch.histc, x)
    check(lambda t: torch.histc(t, bins=7, min=-1, max=1), x)
    check(lambda t: torch.histc(t, bins=3, min=-0.5, max=2.5), x)


def test_histc_counts_the_right_edge_in_the_last_bin_and_skips_nan_and_outside_values():
    x = torch.tensor([0.0, 0.25, 0.5, 1.0, 1.0, -0.1, 1.1, NAN, INF, -INF])
    check(lambda t: torch.histc(t, bins=4, min=0, max=1), x)
    check(lambda t: torch.histc(t, bins=3, min=0, max=1), x)  # 1/3 steps: values next to edges
    check(lambda t: torch.histc(t, bins=10, min=0, max=1), torch.linspace(0, 1, 101))


def test_histc_of_constant_empty_and_scalar_inputs_matches_cpu():
    check(torch.histc, torch.full((5,), 3.0))  # min == max: widened by 1 each way
    check(torch.histc, torch.tensor([]))
    check(torch.histc, torch.tensor(2.5))
    check(lambda t: torch.histc(t, bins=4, min=2, max=2), torch.tensor([1.0, 2.0, 2.5]))
    check(torch.histc, rand(4, 6).t())  # non-contiguous


def test_histc_out_matches_cpu():
    x = rand(20)
    check(lambda t, o: torch.histc(t, bins=5, out=o), x, torch.empty(0))
    check(lambda t, o: torch.histc(t, bins=5, out=o), x, torch.empty(5))
    check(lambda t, o: torch.histc(t, bins=5, out=o), x, torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize(
    "x, kw",
    [
        (torch.arange(5), {}),  # integers: no kernel, as on the CPU
        (torch.arange(5.0), {"bins": 0}),
        (torch.arange(5.0), {"min": 3, "max": 1}),
        (torch.tensor([1.0, INF]), {}),
        (torch.arange(5.0), {"min": 1, "max": NAN}),
    ],
)
def test_histc_bad_input_raises_like_cpu(x, kw):
    check(lambda t: torch.histc(t, **kw), x)


# ---- histogram ----


@by_dtype((torch.float32, torch.float64))
def test_histogram_with_a_bin_count_matches_cpu(dtype):
    x = rand(50, dtype=dtype)
    check(lambda t: torch.histogram(t, 6), x)
    check(lambda t: torch.histogram(t, 4, range=(-1.0, 0.5)), x)
    w = rand(50, dtype=dtype, seed=1).abs()
    check(lambda t, w: torch.histogram(t, 5, weight=w), x, w)
    check(lambda t, w: torch.histogram(t, 5, range=(-2.0, 2.0), weight=w, density=True), x, w)
    check(lambda t: torch.histogram(t, 7, density=True), x)


@by_dtype(FLOATS)
def test_histogram_with_bin_edges_matches_cpu(dtype):
    x = rand(5, 8, dtype=dtype)
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.1, 1.0, 3.0], dtype=dtype)
    check(torch.histogram, x, edges)
    w = rand(5, 8, dtype=dtype, seed=2).abs()
    check(lambda t, e, w: torch.histogram(t, e, weight=w, density=True), x, edges, w, **tol(dtype))
    # values on the edges: the left edge is in, the right one out, except in the last bin
    on_edges = torch.tensor([-2.0, -0.5, 0.0, 0.1, 1.0, 3.0, 3.5, -2.5, NAN], dtype=dtype)
    check(torch.histogram, on_edges, edges)


def test_histogram_with_a_range_in_half_precision_matches_cpu():
    x = rand(30, dtype=torch.float16)
    check(lambda t: torch.histogram(t, 4, range=(-1.0, 1.0)), x)


def test_histogram_of_empty_constant_and_edge_valued_inputs_matches_cpu():
    check(lambda t: torch.histogram(t, 3), torch.tensor([]))  # range [0, 1]
    check(lambda t: torch.histogram(t, 3), torch.full((4,), 2.0))  # widened by 0.5
    check(lambda t: torch.histogram(t, 10), torch.linspace(-1, 1, 41))  # values on linspace's edges
    check(lambda t: torch.histogram(t, 3), rand(3, 4).t())


def test_histogram_out_matches_cpu():
    x = rand(20)
    check(lambda t, h, e: torch.histogram(t, 4, out=(h, e)), x, torch.empty(0), torch.empty(0))
    edges = torch.tensor([-1.0, 0.0, 2.0])
    check(lambda t, b, h, e: torch.histogram(t, b, out=(h, e)), x, edges, torch.empty(0), torch.empty(0))


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: torch.histogram(t, 0),
        lambda t: torch.histogram(t, 3, range=(2.0, 1.0)),
        lambda t: torch.histogram(t, 3, range=(0.0, INF)),
        lambda t: torch.histogram(t, 3, weight=torch.ones(4, device=t.device)),
        lambda t: torch.histogram(t, 3, weight=torch.ones(5, dtype=torch.float64, device=t.device)),
        lambda t: torch.histogram(t, torch.tensor([[0.0, 1.0]], device=t.device)),
        lambda t: torch.histogram(t, torch.tensor([2.0], device=t.device)),
        lambda t: torch.histogram(t, torch.tensor([0, 1], device=t.device)),
        lambda t: torch.histogram(t.half(), 3),  # no range: the CPU's range kernel has no half
        lambda t: torch.histogram(t.long(), 3),
    ],
)
def test_histogram_bad_input_raises_like_cpu(fn):
    check(fn, torch.arange(5.0))


# ---- histogramdd ----


@by_dtype((torch.float32, torch.float64))
def test_histogramdd_with_bin_counts_matches_cpu(dtype):
    x = rand(40, 3, dtype=dtype)
    check(lambda t: torch.histogramdd(t, [3, 4, 2]), x)
    check(lambda t: torch.histogramdd(t, 3), x)
    check(lambda t: torch.histogramdd(t, [2, 3, 2], range=[-1.0, 1.0, 0.0, 2.0, -3.0, 0.0]), x)
    w = rand(40, dtype=dtype, seed=1).abs()
    check(lambda t, w: torch.histogramdd(t, [3, 2, 2], weight=w, density=True), x, w)


def test_histogramdd_with_bin_edges_and_batched_rows_matches_cpu():
    x = rand(4, 5, 2)
    bins = [torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([-2.0, -0.5, 0.5, 3.0])]
    check(lambda t, a, b: torch.histogramdd(t, [a, b]), x, *bins)
    w = rand(4, 5, seed=3).abs()
    check(lambda t, a, b, w: torch.histogramdd(t, [a, b], weight=w, density=True), x, *bins, w)


def test_histogramdd_ops_directly_match_cpu():
    x = rand(10, 2)
    check(lambda t: torch.ops.aten._histogramdd_bin_edges(t, [3, 2]), x)
    check(lambda t: torch.ops.aten._histogramdd_from_bin_cts(t, [3, 2], range=[0.0, 1.0, -1.0, 1.0]), x)
    check(
        lambda t, a, b: torch.ops.aten._histogramdd_from_bin_tensors(t, [a, b]),
        x,
        torch.tensor([0.0, 1.0]),
        torch.tensor([-1.0, 0.0, 1.0]),
    )
    check(lambda t: torch.histogramdd(t, [2]), torch.zeros(0, 1))


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: torch.histogramdd(t, [3, 2]),
        lambda t: torch.histogramdd(t[:, 0], [3]),
        lambda t: torch.histogramdd(t, [2, 2, 2], range=[0.0, 1.0]),
        lambda t: torch.histogramdd(t, [2, 2, 2], weight=torch.ones(3, device=t.device)),
    ],
)
def test_histogramdd_bad_input_raises_like_cpu(fn):
    check(fn, rand(6, 3))


# ---- nextafter ----


@by_dtype(FLOATS)
def test_nextafter_matches_cpu(dtype):
    a = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, -0.0, 2.0, INF, -INF, NAN, 1.0, 3.0], dtype=dtype)
    b = torch.tensor([2.0, 0.0, -2.0, 0.0, 1.0, -1.0, 1.0, 2.0, 0.0, 0.0, 1.0, NAN, INF], dtype=dtype)
    check(torch.nextafter, a, b)
    check(torch.nextafter, rand(3, 4, dtype=dtype), rand(4, dtype=dtype, seed=1))


def test_nextafter_promotes_and_has_its_in_place_and_out_forms():
    check(torch.nextafter, rand(5), rand(5, dtype=torch.float64, seed=1))
    check(lambda a, b: a.nextafter_(b), rand(5), rand(5, seed=1))
    check(lambda a, b, o: torch.nextafter(a, b, out=o), rand(5), rand(5, seed=1), torch.empty(5))
    check(torch.nextafter, rand(5, dtype=torch.int64), rand(5, dtype=torch.int64, seed=1))


# ---- hardshrink, softshrink ----


@pytest.mark.parametrize("fn", [F.hardshrink, F.softshrink])
@by_dtype(FLOATS)
def test_shrinks_and_their_gradients_match_cpu(fn, dtype):
    x = torch.tensor([-2.0, -0.5, -0.3, 0.0, 0.3, 0.5, 0.7, 3.0, NAN, INF, -INF], dtype=dtype)
    expected, actual = with_grads(fn, x)
    assert_same(actual, expected, **tol(dtype))
    expected, actual = with_grads(lambda t: fn(t, 1.25), rand(4, 5, dtype=dtype))
    assert_same(actual, expected, **tol(dtype))


def test_shrinks_out_forms_backward_ops_and_bad_input_match_cpu():
    x = rand(3, 4)
    check(lambda t, o: torch.ops.aten.hardshrink.out(t, 0.25, out=o), x, torch.empty(0))
    check(lambda t, o: torch.ops.aten.softshrink.out(t, 0.25, out=o), x, torch.empty(3, 4))
    check(lambda g, t: torch.ops.aten.hardshrink_backward(g, t, 0.5), rand(3, 4, seed=1), x)
    check(lambda g, t: torch.ops.aten.softshrink_backward(g, t, 0.5), rand(3, 4, seed=1), x)
    check(lambda t: F.softshrink(t, -1.0), x)
    check(F.hardshrink, rand(3, dtype=torch.int64))
    check(F.softshrink, rand(3, 4).t())


# ---- multi_margin_loss ----


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@by_dtype((torch.float32, torch.float64))
def test_multi_margin_loss_and_its_gradient_match_cpu(p, reduction, dtype):
    x, target = rand(5, 4, dtype=dtype), torch.tensor([0, 3, 1, 1, 2])
    expected, actual = with_grads(lambda t: F.multi_margin_loss(t, target.to(t.device), p=p, reduction=reduction), x)
    assert_same(actual, expected)
    w = rand(4, dtype=dtype, seed=1).abs()  # not differentiable: a constant of the loss
    expected, actual = with_grads(
        lambda t: F.multi_margin_loss(
            t, target.to(t.device), p=p, margin=0.7, weight=w.to(t.device), reduction=reduction
        ),
        x,
    )
    assert_same(actual, expected)


def test_multi_margin_loss_of_vectors_scalars_and_empty_batches_matches_cpu():
    for reduction in ("none", "mean", "sum"):
        expected, actual = with_grads(
            lambda t, r=reduction: F.multi_margin_loss(t, torch.tensor(2, device=t.device), reduction=r), rand(4)
        )
        assert_same(actual, expected)
        check(lambda t, y, r=reduction: F.multi_margin_loss(t, y, reduction=r), rand(4), torch.tensor([2]))
        check(lambda t, y, r=reduction: F.multi_margin_loss(t, y, reduction=r), torch.tensor(1.5), torch.tensor(0))
    check(lambda t, y: F.multi_margin_loss(t, y), rand(4, 3).t(), torch.tensor([0, 2, 1]))  # non-contiguous
    # an empty batch (the CPU leaves a reduced loss of no frames uninitialized, so only without reduction)
    check(lambda t, y: F.multi_margin_loss(t, y, reduction="none"), rand(0, 4), torch.zeros(0).long())


@pytest.mark.parametrize(
    "x, target, kw",
    [
        (rand(3, 4), torch.tensor([0, 4, 1]), {}),  # target out of range
        (rand(3, 4), torch.tensor([0, -1, 1]), {}),
        (rand(3, 4), torch.tensor([0, 3, 1]), {"p": 3}),
        (rand(3, 4), torch.tensor([0, 3]), {}),
        (rand(3, 4), torch.tensor([0, 3, 1]), {"margin": 0.5, "weight_size": 3}),
        (rand(3, 0), torch.tensor([0, 0, 0]), {}),
        (rand(3, 4, dtype=torch.int64), torch.tensor([0, 3, 1]), {}),
        (rand(3, 4), torch.tensor([0, 3, 1], dtype=torch.int32), {}),
    ],
)
def test_multi_margin_loss_bad_input_raises_like_cpu(x, target, kw):
    def loss(t, y):
        n = kw.get("weight_size")
        weight = torch.ones(n, device=t.device) if n else None
        return F.multi_margin_loss(t, y, p=kw.get("p", 1), margin=kw.get("margin", 1.0), weight=weight)

    check(loss, x, target)


# ---- pdist ----


@pytest.mark.parametrize("p", [0, 1, 2, 3, 0.5, 1.5, INF])
@by_dtype((torch.float32, torch.float64))
def test_pdist_and_its_gradient_match_cpu(p, dtype):
    x = rand(6, 3, dtype=dtype)
    expected, actual = with_grads(lambda t: F.pdist(t, p), x)
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)


def test_pdist_of_equal_rows_few_rows_and_no_columns_matches_cpu():
    x = torch.tensor([[1.0, 2.0], [1.0, 2.0], [0.0, -1.0]])
    for p in (1, 2, 0.5, 3, INF):
        expected, actual = with_grads(lambda t, p=p: F.pdist(t, p), x)
        assert_same(actual, expected)
    check(F.pdist, rand(1, 3))
    check(F.pdist, rand(0, 3))
    check(F.pdist, rand(3, 0))
    check(lambda t: torch.ops.aten._pdist_forward(t, 2.0), rand(3, 2).t())  # requires contiguous
    check(lambda t: F.pdist(t, -1.0), rand(3, 2))
    check(F.pdist, rand(3, 2, dtype=torch.int64))


# ---- frexp ----


@by_dtype(FLOATS)
def test_frexp_matches_cpu(dtype):
    x = torch.tensor([1.0, -3.5, 0.0, -0.0, 0.375, 1e-3, 1000.0, INF, -INF, NAN], dtype=dtype)
    check(torch.frexp, x)
    check(torch.frexp, rand(3, 5, dtype=dtype).t())


def test_frexp_of_subnormals_extremes_and_its_out_form_matches_cpu():
    check(torch.frexp, torch.tensor([1e-40, -1e-45, 3.4e38, 1.1754944e-38]))
    check(torch.frexp, torch.tensor([5e-324, 1e-310, 1.7e308], dtype=torch.float64))
    x = rand(4)
    check(lambda t, m, e: torch.frexp(t, out=(m, e)), x, torch.empty(0), torch.empty(0, dtype=torch.int32))
    check(lambda t, m, e: torch.frexp(t, out=(m, e)), x, torch.empty(0, dtype=torch.float64), torch.empty(0).int())
    check(lambda t, m, e: torch.frexp(t, out=(m, e)), x, torch.empty(0), torch.empty(0, dtype=torch.int64))
    check(torch.frexp, rand(4, dtype=torch.int64))


def test_frexp_gradient_matches_cpu():
    expected, actual = with_grads(lambda t: torch.frexp(t).mantissa, rand(6))
    assert_same(actual, expected)


# ---- isin ----


@by_dtype((torch.float32, torch.float64, torch.int64, torch.int32, torch.float16))
def test_isin_matches_cpu(dtype):
    elements = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=dtype)
    tests = torch.tensor([2, 6, 9, 2], dtype=dtype)
    for invert in (False, True):
        check(lambda e, t, i=invert: torch.isin(e, t, invert=i), elements, tests)
        check(lambda e, t, i=invert: torch.isin(e, t, assume_unique=True, invert=i), elements, tests[:3])


def test_isin_promotes_skips_nan_and_handles_empty_and_out_like_cpu():
    check(torch.isin, torch.tensor([1.5, 2.0, NAN, 3.0]), torch.tensor([2, 3]))
    check(torch.isin, torch.tensor([1, 2, 3]), torch.tensor([2.0, 2.5]))
    check(torch.isin, torch.tensor([1.0, NAN]), torch.tensor([NAN]))
    check(torch.isin, torch.tensor([]), torch.tensor([1.0]))
    check(torch.isin, torch.tensor([1.0, 2.0]), torch.tensor([]))
    check(lambda e, t: torch.isin(e, t, invert=True), torch.tensor([1.0, 2.0]), torch.tensor([]))
    check(torch.isin, rand(200), rand(300, seed=1).round())  # the CPU's sorting path
    check(lambda e, t, o: torch.isin(e, t, out=o), rand(3, 2).round(), rand(5, seed=1).round(), torch.empty(0).bool())
    check(torch.isin, torch.tensor([True, False]), torch.tensor([True]))


# ---- mode ----


@by_dtype((torch.float32, torch.float64, torch.int64, torch.float16, torch.bool, torch.uint8, torch.int8))
def test_mode_values_and_indices_match_cpu(dtype):
    x = torch.tensor([[1, 3, 3, 2, 1, 3], [5, 4, 4, 5, 0, 0], [2, 2, 2, 2, 2, 2]], dtype=dtype)
    if dtype == torch.uint8:
        x = x + 200  # above int8's range
    for dim in (0, 1, -1):
        check(lambda t, d=dim: torch.mode(t, d), x)
        check(lambda t, d=dim: torch.mode(t, d, keepdim=True), x)


def test_mode_of_scalars_empty_and_non_contiguous_inputs_and_its_gradient_matches_cpu():
    check(torch.mode, torch.tensor(2.5))
    check(lambda t: torch.mode(t, 0), rand(3, 0))
    check(lambda t: torch.mode(t, 1), rand(3, 0))
    check(lambda t: torch.mode(t, 0), rand(4, 5).round().t())
    check(lambda t: torch.mode(t, 2), rand(2, 3))
    x = torch.tensor([[1.0, 2.0, 2.0, 0.5], [3.0, 3.0, 1.0, 1.0]])
    expected, actual = with_grads(lambda t: torch.mode(t, 1).values, x)
    assert_same(actual, expected)
    check(lambda t, v, i: torch.mode(t, 1, out=(v, i)), x, torch.empty(0), torch.empty(0, dtype=torch.long))


# ---- multilabel_margin_loss ----


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@by_dtype((torch.float32, torch.float64))
def test_multilabel_margin_loss_and_its_gradient_match_cpu(reduction, dtype):
    x = rand(4, 5, dtype=dtype)
    # targets end at the first negative entry; a repeated class counts once as a target, twice as a slot
    target = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 4, 0, 3], [-1, 2, 0, 0, 0], [2, 2, -1, -1, -1]])
    expected, actual = with_grads(lambda t: F.multilabel_margin_loss(t, target.to(t.device), reduction=reduction), x)
    assert_same(actual, expected)
    check(lambda t, y: torch.ops.aten.multilabel_margin_loss_forward(t, y, 1), x, target)


def test_multilabel_margin_loss_of_vectors_and_scalars_matches_cpu():
    for reduction in ("none", "mean", "sum"):
        expected, actual = with_grads(
            lambda t, r=reduction: F.multilabel_margin_loss(
                t, torch.tensor([3, 0, -1, 1], device=t.device), reduction=r
            ),
            rand(4),
        )
        assert_same(actual, expected)
        check(lambda t, y, r=reduction: F.multilabel_margin_loss(t, y, reduction=r), torch.tensor(1.5), torch.tensor(0))
    check(F.multilabel_margin_loss, rand(5, 3).t(), torch.tensor([[0, 1, -1, 2, 2]] * 3))  # non-contiguous


@pytest.mark.parametrize(
    "x, target",
    [
        (rand(3, 4), torch.tensor([[0, 4, -1, 0]] * 3)),  # out of range
        (rand(3, 4), torch.tensor([[0, -2, -1, 0]] * 3)),
        (rand(3, 4), torch.tensor([[0, 1, -1, 0]] * 2)),
        (rand(3, 0), torch.zeros(3, 0).long()),
        (rand(3, 4, dtype=torch.int64), torch.tensor([[0, 1, -1, 0]] * 3)),
        (rand(3, 4), torch.tensor([[0, 1, -1, 0]] * 3).int()),
    ],
)
def test_multilabel_margin_loss_bad_input_raises_like_cpu(x, target):
    check(F.multilabel_margin_loss, x, target)


# ---- rrelu_with_noise ----


@by_dtype(FLOATS)
def test_rrelu_in_evaluation_and_its_gradient_match_cpu(dtype):
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0, -INF, NAN], dtype=dtype)
    expected, actual = with_grads(lambda t: F.rrelu(t, 0.1, 0.3, training=False), x)
    assert_same(actual, expected, **tol(dtype))
    check(lambda t, n: torch.ops.aten.rrelu_with_noise(t, n, 0.1, 0.3, False), x, torch.zeros(7, dtype=dtype))


def test_rrelu_in_training_draws_slopes_within_the_bounds_and_keeps_them_as_noise():
    x = rand(64, 8).to(DEVICE)
    noise = torch.zeros(64, 8, device=DEVICE)
    y = torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.3, True)
    x, y, noise = x.cpu(), y.cpu(), noise.cpu()
    negative = x <= 0
    assert torch.equal(noise[~negative], torch.ones_like(noise[~negative]))
    assert ((noise[negative] >= 0.1) & (noise[negative] <= 0.3)).all()
    assert noise[negative].unique().numel() > 100  # drawn per element
    torch.testing.assert_close(y, x * noise)
    # the gradient of training mode is the noise (rrelu_with_noise_backward)
    t = rand(16, seed=3).to(DEVICE).requires_grad_()
    out = F.rrelu(t, 0.1, 0.3, training=True)
    (grad,) = torch.autograd.grad(out.sum(), t)
    slopes = (out / t).detach()
    torch.testing.assert_close(grad.cpu(), torch.where(t.cpu() > 0, 1.0, slopes.cpu()))


def test_rrelu_in_training_with_a_seed_repeats_and_bad_noise_raises_like_cpu():
    x = rand(32).to(DEVICE)
    torch.tiny.manual_seed(7)
    a = F.rrelu(x, training=True).cpu()
    torch.tiny.manual_seed(7)
    b = F.rrelu(x, training=True).cpu()
    assert torch.equal(a, b)
    check(lambda t, n: torch.ops.aten.rrelu_with_noise(t, n, 0.1, 0.3, True), rand(4), torch.zeros(5))
    x = rand(6).to(DEVICE)
    noise = torch.zeros(6, device=DEVICE)
    y = torch.ops.aten.rrelu_with_noise_(x, noise, 0.1, 0.3, True)
    assert y is x


# ---- orthogonal polynomials ----

POLYNOMIALS = [
    torch.special.chebyshev_polynomial_t,
    torch.special.chebyshev_polynomial_u,
    torch.special.chebyshev_polynomial_v,
    torch.special.chebyshev_polynomial_w,
    torch.special.shifted_chebyshev_polynomial_t,
    torch.special.shifted_chebyshev_polynomial_u,
    torch.special.shifted_chebyshev_polynomial_v,
    torch.special.shifted_chebyshev_polynomial_w,
    torch.special.hermite_polynomial_h,
    torch.special.hermite_polynomial_he,
    torch.special.laguerre_polynomial_l,
    torch.special.legendre_polynomial_p,
]


@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
@by_dtype((torch.float32, torch.float64))
def test_orthogonal_polynomials_match_cpu(fn, dtype):
    x = torch.tensor([-2.5, -1.0, -0.7, -0.2, 0.0, 0.25, 0.3, 0.5, 0.9, 1.0, 1.7, 3.0, NAN, INF], dtype=dtype)
    for n in (-2.0, 0.0, 1.0, 2.0, 3.5, 5.0, 6.0, 7.0, 9.0, 12.0, 40.0):
        check(fn, x, torch.full_like(x, n), rtol=1e-4, atol=1e-6)
    # a degree per element, broadcast against x
    check(fn, x[:10].reshape(10, 1), torch.tensor([0.0, 1.0, 2.0, 5.0, 9.0, 17.0], dtype=dtype), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
def test_orthogonal_polynomials_promote_integers_and_take_scalars_like_cpu(fn):
    check(fn, torch.tensor([-2, 0, 1, 3]), torch.tensor([3, 2, 0, 5]))
    check(fn, rand(5), 4)
    check(fn, 0.5, torch.tensor([0.0, 3.0, 8.0, 10.0]))
    check(lambda x, n, o: fn(x, n, out=o), rand(5), torch.tensor([1.0, 2.0, 3.0, 4.0, 30.0]), torch.empty(5))


def test_hermite_polynomials_past_their_degree_limit_are_nan_like_cpu():
    x = rand(4)
    check(torch.special.hermite_polynomial_h, x, torch.full((4,), 130.0))
    check(torch.special.hermite_polynomial_he, x.double(), torch.full((4,), 513.0, dtype=torch.float64))
