"""The long tail of ATen ops (issue #16), part 4, natively on tiny, against PyTorch CPU with the fallback
disabled (TINY_FALLBACK=0), so a silent fallback fails the test: hash_tensor (an xor fold of each
element's 64 bits), renorm (every form) and channel_shuffle; values, gradients, dtypes, shapes, strides,
edge cases and bad input raising the CPU's kind of error."""

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same, by_dtype, check, rand, tol, with_grads

NAN, INF = float("nan"), float("inf")

pytestmark = pytest.mark.usefixtures("native")

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
HASHED = FLOATS + (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)


# ---- hash_tensor ----


@by_dtype(HASHED)
def test_hash_tensor_of_every_dtype_matches_cpu(dtype):
    x = (rand(5, 7, dtype=torch.int64) * 37).to(dtype) if not dtype.is_floating_point else rand(5, 7, dtype=dtype)
    check(torch.hash_tensor, x)
    check(lambda t: torch.hash_tensor(t, 1), x)
    check(lambda t: torch.hash_tensor(t, (0, 1), keepdim=True), x)
    check(lambda t: torch.hash_tensor(t, 0, keepdim=True), x.t())  # non-contiguous


def test_hash_tensor_sees_the_bits_of_signed_zeros_nans_and_negative_integers():
    check(torch.hash_tensor, torch.tensor([0.0, -0.0, NAN, INF, -INF, 1e-45]))
    check(torch.hash_tensor, torch.tensor([-1, -128, 127], dtype=torch.int8))
    check(torch.hash_tensor, torch.tensor(3.5))  # 0-dim


def test_hash_tensor_of_a_long_vector_folds_every_element():
    check(torch.hash_tensor, rand(1 << 20, seed=3))
    check(lambda t: torch.hash_tensor(t, 1), rand(3, 100_000, seed=4))


def test_hash_tensor_over_empty_dims_and_out_matches_cpu():
    check(lambda t: torch.hash_tensor(t, 1), torch.empty(0, 3))  # no rows
    check(lambda t: torch.hash_tensor(t, 0), torch.empty(0, 3))  # the CPU's zero-size error
    check(torch.hash_tensor, torch.empty(0))  # numel 0 without a dim: the CPU's error
    check(lambda t, o: torch.hash_tensor(t, 1, out=o), rand(4, 5), torch.empty(0, dtype=torch.uint64))


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: torch.hash_tensor(t, mode=1),
        lambda t: torch.hash_tensor(t.to(torch.complex64)),
        lambda t: torch.hash_tensor(t.to(torch.uint32)),
        lambda t: torch.hash_tensor(t, 2),
    ],
)
def test_hash_tensor_bad_input_raises_like_cpu(fn):
    check(fn, torch.arange(6.0).reshape(2, 3))


# ---- renorm ----


@by_dtype(FLOATS)
@pytest.mark.parametrize("p, dim, maxnorm", [(2, 0, 1.0), (1, 1, 2.5), (3.5, -1, 0.5), (INF, 0, 1.0), (2, 1, 100.0)])
def test_renorm_matches_cpu(dtype, p, dim, maxnorm):
    x = rand(4, 5, 3, dtype=dtype)
    check(lambda t: torch.renorm(t, p, dim, maxnorm), x, **tol(dtype))
    check(lambda t: t.renorm_(p, dim, maxnorm), x.clone(), **tol(dtype))
    check(lambda t, o: torch.renorm(t, p, dim, maxnorm, out=o), x, torch.empty(0, dtype=dtype), **tol(dtype))


def test_renorm_of_a_transposed_input_and_a_zero_maxnorm_matches_cpu():
    check(lambda t: torch.renorm(t, 2, 1, 1.0), rand(6, 4).t())
    check(lambda t: torch.renorm(t, 2, 0, 0.0), rand(3, 4))


def test_renorm_gradient_matches_cpu():
    (want, want_grads), (got, got_grads) = with_grads(lambda t: torch.renorm(t, 2, 0, 1.0), rand(4, 6))
    assert_same(got, want)
    assert_same(got_grads, want_grads)


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: torch.renorm(t, 0, 0, 1.0),  # p must be positive
        lambda t: torch.renorm(t, 2, 0, -1.0),  # maxnorm must be >= 0
        lambda t: torch.renorm(t, 2, 2, 1.0),  # dim out of range
        lambda t: torch.renorm(t.long(), 2, 0, 1.0),
        lambda t: torch.renorm(t[0], 2, 0, 1.0),  # one dim
    ],
)
def test_renorm_bad_input_raises_like_cpu(fn):
    check(fn, rand(3, 4))


# ---- channel_shuffle ----


@by_dtype(FLOATS + (torch.int64, torch.bool))
def test_channel_shuffle_matches_cpu(dtype):
    x = rand(2, 6, 3, 4, dtype=dtype) if dtype != torch.bool else rand(2, 6, 3, 4) > 0
    check(lambda t: F.channel_shuffle(t, 2), x)
    check(lambda t: F.channel_shuffle(t, 3), x)
    check(lambda t: F.channel_shuffle(t, 6), x[:, :, :, 0])  # one spatial dim


def test_channel_shuffle_keeps_channels_last_and_reads_strided_inputs_like_cpu():
    check(lambda t: F.channel_shuffle(t, 2), rand(2, 4, 3, 5).contiguous(memory_format=torch.channels_last))
    check(lambda t: F.channel_shuffle(t, 2), rand(2, 6, 8)[:, :, ::2])
    check(lambda t: F.channel_shuffle(t, 3), torch.empty(0, 6, 2))
    check(lambda t: F.channel_shuffle(t, 2), rand(1, 4, 2, 2, 2))  # 3 spatial dims


def test_channel_shuffle_gradient_matches_cpu():
    (want, want_grads), (got, got_grads) = with_grads(lambda t: F.channel_shuffle(t, 3), rand(2, 6, 5))
    assert_same(got, want)
    assert_same(got_grads, want_grads)


@pytest.mark.parametrize("x, groups", [(rand(2, 6), 2), (rand(1, 6, 2), 0), (rand(1, 6, 2), 4), (rand(1, 6, 2), -1)])
def test_channel_shuffle_bad_input_raises_like_cpu(x, groups):
    check(lambda t: F.channel_shuffle(t, groups), x)
