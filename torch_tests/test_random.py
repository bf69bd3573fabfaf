"""Random numbers on tiny: drawn on the device by tiny's own generator, so values differ from the CPU's,
but distributions (means, variances, ranges, frequencies), dtypes, shapes, torch's argument errors,
reproducibility under torch.manual_seed / torch.tiny.manual_seed / a tiny torch.Generator, and
get_rng_state / set_rng_state behave as torch's. Also randperm, multinomial and dropout.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import check, check_devices, counting

N = 20000  # draws per statistical check: the mean of N uniforms is within 0.01 of 1/2 at about 6 sigma
TINY = "tiny"


def draw(fn, *, seed=0):
    torch.manual_seed(seed)
    return fn().cpu()


def close(value, expected, tol):
    assert abs(value - expected) <= tol, f"{value} is not within {tol} of {expected}"


# ---------------------------------------------------------------------------------------------
# distributions


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_rand_is_uniform_in_zero_one(dtype):
    x = draw(lambda: torch.rand(N, device=TINY, dtype=dtype))
    assert x.dtype == dtype and x.shape == (N,)
    x = x.double()
    assert x.min() >= 0 and x.max() < 1
    close(x.mean().item(), 0.5, 0.01)
    close(x.var().item(), 1 / 12, 0.005)
    assert x.unique().numel() > (200 if dtype is torch.bfloat16 else 1000)


def test_uniform_in_a_range_and_its_errors():
    x = draw(lambda: torch.empty(N, device=TINY).uniform_(-3, 5))
    assert x.min() >= -3 and x.max() < 5
    close(x.mean().item(), 1.0, 0.1)
    check(lambda t: t.uniform_(2, 1), torch.empty(3))
    check(lambda t: t.uniform_(), torch.empty(3, dtype=torch.int64))
    check(lambda t: t.uniform_(0, 1e39), torch.empty(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_randn_is_standard_normal(dtype):
    x = draw(lambda: torch.randn(N, device=TINY, dtype=dtype)).double()
    close(x.mean().item(), 0.0, 0.03)
    close(x.std().item(), 1.0, 0.03)
    close((x.abs() < 1).double().mean().item(), 0.6827, 0.015)
    close((x.abs() < 2).double().mean().item(), 0.9545, 0.01)
    assert x.isfinite().all()


def test_normal_with_mean_and_std_in_every_form():
    x = draw(lambda: torch.empty(N, device=TINY).normal_(3.0, 0.5))
    close(x.mean().item(), 3.0, 0.02)
    close(x.std().item(), 0.5, 0.02)
    mean = torch.tensor([-10.0, 0.0, 10.0], device=TINY).repeat(N // 3)
    y = draw(lambda: torch.normal(mean, 2.0)).reshape(-1, 3)
    for k, m in enumerate((-10.0, 0.0, 10.0)):
        close(y[:, k].mean().item(), m, 0.1)
        close(y[:, k].std().item(), 2.0, 0.1)
    z = draw(lambda: torch.normal(1.0, torch.full((N,), 0.1, device=TINY)))
    close(z.std().item(), 0.1, 0.005)
    w = draw(lambda: torch.normal(mean, mean.abs() / 10))
    assert w.shape == (N // 3 * 3,)
    check(lambda t: t.normal_(0, -1), torch.empty(3))
    check(lambda t: t.normal_(), torch.empty(3, dtype=torch.int32))
    check_devices(lambda d: torch.normal(torch.zeros(3, device=d), torch.tensor([1.0, -1.0, 1.0], device=d)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.float32, torch.float16])
def test_randint_covers_its_range_evenly(dtype):
    x = draw(
        lambda: (
            torch.randint(-3, 5, (N,), device=TINY, dtype=dtype)
            if dtype != torch.uint8
            else torch.randint(0, 8, (N,), device=TINY, dtype=dtype)
        )
    )
    assert x.dtype == dtype
    counts = torch.bincount(x.long() - x.long().min())
    assert counts.numel() == 8
    assert counts.min() > N / 8 * 0.9 and counts.max() < N / 8 * 1.1


def test_random_without_bounds_spans_the_dtype():
    for dtype, hi in ((torch.int8, 127), (torch.uint8, 255), (torch.bool, 1), (torch.int16, 32767)):
        x = draw(lambda dtype=dtype: torch.empty(N, device=TINY, dtype=dtype).random_()).long()
        assert 0 <= x.min() <= hi // 100 and hi - hi // 100 <= x.max() <= hi
    x = draw(lambda: torch.empty(N, device=TINY).random_())
    assert x.min() >= 0 and x.max() <= 2**24 and x.max() > 2**23
    x = draw(lambda: torch.empty(N, device=TINY, dtype=torch.int64).random_())
    assert x.min() >= 0 and x.double().mean() > 2**61
    x = draw(lambda: torch.empty(N, device=TINY, dtype=torch.int64).random_(-(2**63), None))
    assert x.min() < -(2**62) and x.max() > 2**62
    x = draw(lambda: torch.empty(N, device=TINY, dtype=torch.int64).random_(-(2**62), 2**62 + 2**61))
    assert x.min() >= -(2**62) and x.max() < 2**62 + 2**61


def test_random_errors_match_torch():
    check(lambda t: t.random_(5, 2), torch.empty(3))
    check(lambda t: t.random_(0, 300), torch.empty(3, dtype=torch.int8))
    check(lambda t: t.random_(-1, 2), torch.empty(3, dtype=torch.bool))


def test_bernoulli_with_a_probability_or_a_tensor_of_them():
    x = draw(lambda: torch.empty(N, device=TINY).bernoulli_(0.3))
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    close(x.mean().item(), 0.3, 0.015)
    p = torch.tensor([0.0, 1.0, 0.5, 0.9], device=TINY).repeat(N // 4)
    y = draw(lambda: torch.bernoulli(p)).reshape(-1, 4)
    assert (y[:, 0] == 0).all() and (y[:, 1] == 1).all()
    close(y[:, 2].mean().item(), 0.5, 0.03)
    close(y[:, 3].mean().item(), 0.9, 0.02)
    z = draw(
        lambda: torch.empty(4, N // 4, device=TINY, dtype=torch.bool).bernoulli_(
            torch.tensor([[0.2], [0.0], [1.0], [0.7]], device=TINY)
        )
    )
    assert z.dtype == torch.bool
    close(z[0].double().mean().item(), 0.2, 0.03)
    assert not z[1].any() and z[2].all()
    check(lambda t: t.bernoulli_(1.5), torch.empty(3))
    # torch's CPU kernel raises part way through the writes: compare the errors only
    check_devices(lambda d: torch.zeros(3, device=d).bernoulli_(torch.tensor([0.5, 2.0, 0.1], device=d)))
    check_devices(lambda d: torch.zeros(2, device=d).bernoulli_(torch.tensor([0.5, -0.0, -1.0], device=d)))
    check(lambda t, p: t.bernoulli_(p), torch.empty(3), torch.tensor([1, 0, 1]))
    check(lambda p: torch.bernoulli(p, 0.5).dtype, torch.ones(3, dtype=torch.int32))


def test_exponential_cauchy_log_normal_and_geometric():
    x = draw(lambda: torch.empty(N, device=TINY).exponential_(2.0)).double()
    assert x.min() > 0
    close(x.mean().item(), 0.5, 0.02)
    c = draw(lambda: torch.empty(N, device=TINY).cauchy_(1.0, 2.0)).double()
    close(c.median().item(), 1.0, 0.1)
    close((c - 1).abs().median().item(), 2.0, 0.15)
    ln = draw(lambda: torch.empty(N, device=TINY).log_normal_(0.0, 0.5)).double()
    close(ln.log().mean().item(), 0.0, 0.02)
    close(ln.log().std().item(), 0.5, 0.02)
    g = draw(lambda: torch.empty(N, device=TINY, dtype=torch.int32).geometric_(0.25)).double()
    assert g.min() >= 1
    close(g.mean().item(), 4.0, 0.15)
    check(lambda t: t.exponential_(), torch.empty(3, dtype=torch.int64))
    check(lambda t: t.exponential_(-1.0), torch.empty(3))
    check(lambda t: t.cauchy_(), torch.empty(3, dtype=torch.int64))
    check(lambda t: t.log_normal_(), torch.empty(3, dtype=torch.uint8))
    check(lambda t: t.geometric_(0.5), torch.empty(3, dtype=torch.bool))
    check(lambda t: t.geometric_(1.5), torch.empty(3))


def test_like_factories_and_shapes():
    base = torch.empty(3, 4, device=TINY, dtype=torch.float64)
    for fn in (torch.rand_like, torch.randn_like, lambda t: torch.randint_like(t, 10)):
        y = fn(base)
        assert y.device.type == TINY and y.dtype == torch.float64 and y.shape == (3, 4)
    assert torch.rand(0, device=TINY).cpu().shape == (0,)
    assert torch.randn((), device=TINY).cpu().shape == ()
    t = torch.zeros(4, 6, device=TINY)
    t[:, ::2].uniform_(1, 2)  # into a strided view: the other columns stay 0
    host = t.cpu()
    assert (host[:, 1::2] == 0).all() and (host[:, ::2] >= 1).all()


# ---------------------------------------------------------------------------------------------
# reproducibility and generators


def test_the_same_seed_gives_the_same_numbers_and_draws_differ():
    a = draw(lambda: torch.rand(100, device=TINY), seed=7)
    b = draw(lambda: torch.rand(100, device=TINY), seed=7)
    c = draw(lambda: torch.rand(100, device=TINY), seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.tiny.manual_seed(7)
    assert torch.equal(torch.rand(100, device=TINY).cpu(), a)
    first, second = torch.rand(100, device=TINY).cpu(), torch.rand(100, device=TINY).cpu()
    assert not torch.equal(first, second)


def test_rng_state_round_trips():
    torch.manual_seed(3)
    torch.rand(5, device=TINY)
    state = torch.tiny.get_rng_state()
    a = torch.randn(50, device=TINY).cpu()
    torch.tiny.set_rng_state(state)
    b = torch.randn(50, device=TINY).cpu()
    assert torch.equal(a, b)
    with torch.random.fork_rng(device_type=TINY):
        torch.rand(5, device=TINY)
    assert not torch.equal(torch.randn(50, device=TINY).cpu(), b)


def test_a_tiny_generator_is_honoured_and_independent_of_the_default():
    g1 = torch.Generator(device=TINY).manual_seed(123)
    g2 = torch.Generator(device=TINY).manual_seed(123)
    torch.manual_seed(0)
    default_before = torch.tiny.get_rng_state()
    a = torch.rand(64, device=TINY, generator=g1).cpu()
    b = torch.rand(64, device=TINY, generator=g2).cpu()
    assert torch.equal(a, b)
    assert torch.equal(torch.tiny.get_rng_state(), default_before)  # the default generator did not move
    assert not torch.equal(torch.rand(64, device=TINY, generator=g1).cpu(), a)
    for op in (
        lambda g: torch.randn(8, device=TINY, generator=g),
        lambda g: torch.randint(0, 9, (8,), device=TINY, generator=g),
        lambda g: torch.randperm(8, device=TINY, generator=g),
        lambda g: torch.empty(8, device=TINY).bernoulli_(0.5, generator=g),
        lambda g: torch.multinomial(torch.ones(8, device=TINY), 4, generator=g),
    ):
        assert torch.equal(op(g1.manual_seed(5)).cpu(), op(g2.manual_seed(5)).cpu())


def test_a_generator_of_another_device_raises_like_torch():
    check_devices(lambda d: torch.rand(3, device=d, generator=torch.Generator("tiny" if d == "cpu" else "cpu")))


def test_a_new_draw_compiles_nothing():
    torch.rand(1000, device=TINY).cpu()
    with counting() as c:
        torch.manual_seed(99)
        torch.rand(1000, device=TINY).cpu()
    assert c["compiles"] == 0 and c["fallbacks"] == 0


# ---------------------------------------------------------------------------------------------
# randperm, multinomial


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float16])
def test_randperm_is_a_permutation(dtype):
    x = draw(lambda: torch.randperm(300, device=TINY, dtype=dtype))
    assert x.dtype == dtype
    assert torch.equal(x.long().sort()[0], torch.arange(300))
    assert not torch.equal(x.long(), torch.arange(300))


def test_a_long_randperm_is_a_permutation():
    x = draw(lambda: torch.randperm(5000, device=TINY))
    assert torch.equal(x.sort()[0], torch.arange(5000))
    close(x[:2500].double().mean().item(), 2499.5, 100)


def test_randperm_positions_are_uniform_and_errors():
    hits = torch.zeros(5, 5)
    for s in range(400):
        p = draw(lambda: torch.randperm(5, device=TINY), seed=s)
        hits[torch.arange(5), p] += 1
    assert hits.min() > 50 and hits.max() < 110  # 80 expected in each cell
    assert draw(lambda: torch.randperm(0, device=TINY)).shape == (0,)
    check_devices(lambda d: torch.randperm(-1, device=d))
    check_devices(lambda d: torch.randperm(300, device=d, dtype=torch.int8))
    check_devices(lambda d: torch.randperm(3, device=d, dtype=torch.bool))


def test_multinomial_with_replacement_follows_the_probabilities():
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]], device=TINY)
    x = draw(lambda: torch.multinomial(p, 5000, replacement=True))
    assert x.shape == (2, 5000) and x.dtype == torch.int64
    f0 = torch.bincount(x[0], minlength=4) / 5000
    f1 = torch.bincount(x[1], minlength=4) / 5000
    torch.testing.assert_close(f0, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.03, rtol=0)
    torch.testing.assert_close(f1, torch.tensor([0.25, 0.25, 0.0, 0.5]), atol=0.03, rtol=0)


def test_multinomial_without_replacement_draws_distinct_categories():
    p = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 10.0], device=TINY)
    firsts = torch.zeros(6)
    for s in range(300):
        x = draw(lambda: torch.multinomial(p, 5), seed=s)
        assert x.unique().numel() == 5 and 4 not in x.tolist()
        firsts[x[0]] += 1
    torch.testing.assert_close(firsts / 300, torch.tensor([0.05, 0.1, 0.15, 0.2, 0.0, 0.5]), atol=0.07, rtol=0)
    one = draw(lambda: torch.multinomial(p.repeat(3, 1), 1))
    assert one.shape == (3, 1)


def test_multinomial_errors_match_torch():
    check(lambda p: torch.multinomial(p, 1), torch.tensor([0.5, -1.0]))
    check(lambda p: torch.multinomial(p, 2, True), torch.tensor([0.5, -1.0]))
    check(lambda p: torch.multinomial(p, 2, True), torch.tensor([0.0, 0.0]))
    check(lambda p: torch.multinomial(p, 1), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    check(lambda p: torch.multinomial(p, 2, True), torch.tensor([1.0, math.inf]))
    check(lambda p: torch.multinomial(p, 3), torch.tensor([1.0, 1.0]))
    check(lambda p: torch.multinomial(p, 1), torch.tensor([1, 2]))
    check(lambda p: torch.multinomial(p, 0), torch.tensor([1.0, 2.0]))
    check(lambda p: torch.multinomial(p, 1), torch.ones(2, 2, 2))


# ---------------------------------------------------------------------------------------------
# dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dropout_zeroes_a_fraction_and_scales_the_rest(dtype):
    x = torch.linspace(1, 2, N, device=TINY, dtype=dtype)
    torch.manual_seed(0)
    y = F.dropout(x, p=0.25, training=True).cpu()
    kept = y != 0
    close(kept.double().mean().item(), 0.75, 0.015)
    torch.testing.assert_close(y[kept], (x.cpu() / 0.75).to(dtype)[kept])
    out, mask = torch.native_dropout(x, 0.25, True)
    assert out.dtype == dtype and mask.dtype == torch.bool
    torch.testing.assert_close(out.cpu(), (x.cpu() * mask.cpu() * (1 / 0.75)).to(dtype))


def test_dropout_in_eval_and_at_the_edges_matches_torch():
    x = torch.randn(4, 5)
    check(lambda t: F.dropout(t, p=0.5, training=False), x)
    check(lambda t: torch.native_dropout(t, 0.5, False), x)
    check(lambda t: F.dropout(t, p=0.0, training=True), x)
    check(lambda t: F.dropout(t, p=1.0, training=True), x)
    check(lambda t: torch.native_dropout(t, 1.0, True), x)
    check(lambda t: torch.native_dropout(t, 0.5, True), torch.empty(0, 3))
    check(lambda t: F.dropout(t, p=1.5), x)


def test_dropout_backward_uses_the_same_mask():
    x = torch.randn(6, 7, device=TINY, requires_grad=True)
    torch.manual_seed(1)
    y = F.dropout(x, p=0.4, training=True)
    y.backward(torch.ones_like(y))
    kept = (y != 0).cpu()
    torch.testing.assert_close(x.grad.cpu(), kept.float() / 0.6)
    check(lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.0), torch.randn(3, 4), torch.rand(3, 4) > 0.5)


def test_dropout_forward_and_backward_run_natively():
    w = torch.randn(4, 8, device=TINY, requires_grad=True)
    with counting() as c:
        loss = F.dropout(w * 2, p=0.3).square().mean()
        loss.backward()
        loss.item(), w.grad.cpu()
    assert c["fallbacks"] == 0
