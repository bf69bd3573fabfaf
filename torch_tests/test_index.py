"""Indexing by tensors against CPU torch: advanced indexing (x[idx], x[mask], several and broadcast index
tensors), index_put_ (accumulate, duplicates), index_select, index_add, gather, scatter / scatter_add /
scatter_reduce, masked_select, nonzero, embedding (forward and backward), sort / argsort / topk / kthvalue;
gradients through them; errors for out-of-range and mistyped indices; and the syncs they cost.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import check, check_devices, counting, recorded_warnings

NAN = float("nan")


def sample(shape, dtype=torch.float32, *, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0 if dtype is torch.uint8 else -5, 6, shape, generator=g).to(dtype)


def idx(*values, dtype=torch.long):
    return torch.tensor(values, dtype=dtype)


def strided(t):
    """t as a non-contiguous view (every other element of a larger tensor)."""
    big = torch.zeros((t.shape[0] * 2,) + tuple(t.shape[1:]), dtype=t.dtype)
    big[::2] = t
    return big[::2]


def with_grad(fn):
    """fn's result and the gradient of the first argument under a fixed upstream gradient."""

    def run(x, upstream, *rest):
        x = x.detach().requires_grad_()
        y = fn(x, *rest)
        y.backward(upstream)
        return y.detach(), x.grad

    return run


# ---------------------------------------------------------------------------------------------
# advanced indexing: x[idx]


def test_index_by_one_tensor_along_each_dim_with_negative_and_repeated_indices():
    x = sample((4, 5, 6))
    i = idx(3, -1, 0, 0, -4)
    check(lambda t, i: t[i], x, i)
    check(lambda t, i: t[:, i], x, i)
    check(lambda t, i: t[..., i], x, i)
    check(lambda t, i: t[1:3, :, i], x, i)


def test_index_by_several_tensors_broadcast_together_and_kept_in_place_or_moved_first():
    x = sample((4, 5, 6))
    a, b = idx(0, 3, -2), idx([[1], [4]])
    check(lambda t, a, b: t[a, b], x, a, idx(1, 2, 4))
    check(lambda t, a, b: t[b, a], x, a, b)  # (2, 1) with (3,) -> (2, 3)
    check(lambda t, a, b: t[:, b, a], x, a, b)  # adjacent: the broadcast dims stay in place
    check(lambda t, a, b: t[b, :, a], x, a, b)  # separated: the broadcast dims go first
    check(lambda t, a, b: t[a, 2, b[0]], x, a, b)


def test_index_with_int32_multi_dim_and_non_contiguous_indices_of_every_dtype():
    for dtype in (torch.float32, torch.float16, torch.int64, torch.int8, torch.uint8, torch.bool):
        check(lambda t, i: t[i], sample((6, 3), dtype), idx([[5, 0], [2, 2]], dtype=torch.int32))
    check(lambda t, i: t[i], sample((6, 3)).t(), strided(idx(2, 0, 1)))
    check(lambda t, i: t[i], sample((5,))[1:], idx(0, 3))
    check(lambda t, i: t[i], sample((3, 0)), idx(2, 1))
    check(lambda t, i: t[i], sample((3, 2)), idx())


def test_index_out_of_range_and_bad_index_types_raise_at_the_call():
    x = sample((10, 3))
    check(lambda t, i: t[i], x, idx(1, 12))  # IndexError: index 12 is out of bounds for dimension 0 with size 10
    check(lambda t, i: t[i], x, idx(-11))
    check(lambda t, i: t[:, i], x, idx(3))
    check(lambda t, i: t[i], x, torch.tensor([1.0]))
    check(lambda t, i, j: t[i, j], x, idx(1, 2), idx(0, 1, 2))  # shapes do not broadcast
    check(lambda t, i: t[i, i, i], x, idx(0))  # too many indices
    check(lambda t, m: t[m], x, torch.ones(4, dtype=torch.bool))  # mask shape


def test_index_out_and_index_from_cpu_index_tensor():
    check(lambda t, i, o: torch.ops.aten.index.Tensor_out(t, [i], out=o), sample((4, 3)), idx(3, 1), torch.empty(0))
    check_devices(lambda d: sample((4, 3)).to(d)[idx(2, -1)])  # a CPU index into a tiny tensor


# ---------------------------------------------------------------------------------------------
# boolean masks


def test_boolean_mask_selects_in_row_major_order():
    x = sample((3, 4, 2))
    check(lambda t, m: t[m], x, sample((3, 4, 2), torch.bool))
    check(lambda t, m: t[m], x, sample((3, 4), torch.bool, seed=1))
    check(lambda t, m: t[:, m], x, sample((4,), torch.bool, seed=2))
    check(lambda t, m: t[m], x, torch.zeros(3, dtype=torch.bool))
    check(lambda t: t[t > 0], x)
    check(lambda t, m, i: t[m, i], x, idx(True, False, True, dtype=torch.bool), idx(0, 3))


def test_uint8_mask_warns_like_torch():
    def run(t, m):
        result, warned = recorded_warnings(lambda: t[m])
        return result, [w.split(" (Triggered")[0] for w in warned]

    check(run, sample((4,)), idx(1, 0, 1, 1, dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------
# index_put_: x[idx] = v


def put(indices, accumulate=False):
    def run(t, v):
        return t.index_put_(indices, v, accumulate=accumulate)

    return run


def test_index_put_replaces_and_accumulates_with_duplicates_in_order():
    x = sample((5, 3))
    check(put((idx(4, 0, -2),)), x, sample((3, 3), seed=1))
    check(put((idx(4, 0, -2),)), x, sample((3,), seed=1))  # broadcast
    check(put((idx(1, 1, 1, 3),), True), x, sample((4, 3), seed=1))
    check(put((idx(1, 1, 0), idx(2, 2, 0)), True), x, sample((3,), seed=1))
    check(put((idx(1, 1, 0), idx(2, 2, 0)), True), sample((5, 3), torch.int32), sample((3,), torch.int32))
    check(put((idx(1, 3), idx(0, 1)), True), sample((5, 3), torch.bool), sample((2,), torch.bool))


def test_index_put_into_views_and_non_contiguous_values():
    def into_transposed(t, v):
        t.t()[idx(2, 0)] = v
        return t

    check(into_transposed, sample((4, 3)), sample((2, 4), seed=1))
    check(lambda t, v: t.__setitem__((slice(None), idx(1, 0)), v) or t, sample((3, 4)), strided(sample((3, 2), seed=1)))
    check(put((None, idx(2, 3)), True), sample((3, 4)), sample((3, 2)).t().contiguous().t())


def test_index_put_by_mask_with_scalar_row_and_per_element_values():
    x, m = sample((4, 3)), sample((4, 3), torch.bool)
    check(lambda t, m: t.__setitem__(m, 2.5) or t, x, m)
    check(lambda t, m: t.__setitem__(m, 7) or t, sample((4, 3), torch.int64), m)
    check(lambda t, m, v: t.__setitem__(m, v) or t, x, m[:, 0], sample((3,), seed=1))  # a row for every hit
    check(lambda t, m, v: t.__setitem__(m, v) or t, x, m, sample((int(m.sum()),), seed=2))  # one value per hit
    check(lambda t, m, v: t.index_put_((m,), v, accumulate=True), x, m, torch.tensor(1.5))
    check(lambda t, m, v: t.__setitem__((slice(None), m[0]), v) or t, x, m, torch.tensor(-1.0))


def test_mask_assignment_of_a_scalar_needs_no_sync():
    t, m = sample((64,)).to("tiny"), sample((64,), torch.bool).to("tiny")
    with counting() as c:
        t[m] = 0.0
        t[~m] = t.new_tensor(1.0)
        t.index_put_((m,), torch.tensor(2.0, device="tiny"), accumulate=True)
    assert c["syncs"] == 0
    expected, mask = sample((64,)), sample((64,), torch.bool)
    expected[mask] = 0.0
    expected[~mask] = 1.0
    expected.index_put_((mask,), torch.tensor(2.0), accumulate=True)
    torch.testing.assert_close(t.cpu(), expected)


def test_index_put_errors():
    x = sample((5, 3))
    check(put((idx(5),)), x, sample((3,)))
    check(put((idx(-6),), True), x, sample((3,)))
    check(put((idx(1, 2),)), x, sample((3, 3)))  # value shape
    check(put((idx(1, 2),)), x, sample((2, 3), torch.float64))  # value dtype
    check(put((torch.tensor([0.5]),)), x, sample((3,)))


# ---------------------------------------------------------------------------------------------
# index_select, index_add


def test_index_select_along_each_dim_and_dtype():
    x = sample((4, 5, 3))
    for dim in (0, 1, -1):
        check(lambda t, i, dim=dim: t.index_select(dim, i), x, idx(2, 0, 2))
    check(lambda t, i: t.index_select(1, i), x.permute(2, 0, 1), idx(1, dtype=torch.int32))
    check(lambda t, i: t.index_select(0, i), sample((4, 3), torch.int16), torch.tensor(3))
    check(lambda t, i: t.index_select(0, i), torch.tensor(5.0), idx(0))
    check(lambda t, i: t.index_select(0, i), x, idx())
    check(lambda t, i, o: torch.index_select(t, 1, i, out=o), x, idx(4, 4), torch.empty(0))


def test_index_select_errors():
    x = sample((4, 3))
    check(lambda t, i: t.index_select(0, i), x, idx(4))
    check(lambda t, i: t.index_select(1, i), x, idx(-1))  # torch's dim-1 path raises RuntimeError
    check(lambda t, i: t.index_select(2, i), sample((2, 3, 4)), idx(4))
    check(lambda t, i: t.index_select(0, i), sample((5,)), idx(5))
    check(lambda t, i: t.index_select(0, i), sample((0, 3)), idx(5))
    check(lambda t, i: t.index_select(0, i), sample((3, 0)), idx(5))
    check(lambda t, i: t.index_select(0, i), sample((0,)), idx(0))
    check(lambda t, i: t.index_select(0, i), x, torch.tensor([1.0]))
    check(lambda t, i: t.index_select(0, i), x, idx([0, 1]))
    check(lambda t, i: t.index_select(2, i), x, idx(0))


def test_index_add_with_alpha_and_duplicates():
    x = sample((5, 4))
    check(lambda t, i, s: t.index_add(0, i, s), x, idx(1, 3, 1), sample((3, 4), seed=1))
    check(lambda t, i, s: t.index_add(1, i, s, alpha=-2.5), x, idx(3, 3), sample((5, 2), seed=1))
    check(lambda t, i, s: t.index_add_(0, i, s), sample((5, 4), torch.int32), idx(0, 0, 4), sample((3, 4), torch.int32))
    check(lambda t, i, s: t.t().index_add_(0, i, s), x, idx(2, 0), sample((2, 5), seed=1))
    check(lambda t, i, s: t.index_add(0, i, s), x, idx(5), sample((1, 4)))
    check(lambda t, i, s: t.index_add(0, i, s), sample((5,)), idx(-1), sample((1,)))
    check(lambda t, i, s: t.index_add(0, i, s), x, idx(1), sample((1, 4), torch.float64))


# ---------------------------------------------------------------------------------------------
# index_fill, index_copy, take, put_


def test_index_fill_with_a_scalar_or_a_0_dim_tensor():
    x = sample((3, 4))
    check(lambda t, i: t.index_fill(1, i, -2.0), x, idx(3, -1, 0))
    check(lambda t, i: t.t().index_fill_(0, i, 5), sample((3, 4), torch.int32), idx(1))
    check(lambda t, i, v: t.index_fill_(0, i, v), x, torch.tensor(2), torch.tensor(7.5))
    check(lambda t, i: t.index_fill(0, i, 1.0), torch.tensor(3.0), idx(0))
    check(lambda t, i: t.index_fill(1, i, 1.0), x, idx(4))
    check(lambda t, i: t.index_fill(1, i, 1.0), x, idx(1, dtype=torch.int32))
    check(lambda t, i, v: t.index_fill_(0, i, v), x, idx(1), torch.ones(1))


def test_index_copy_rows_and_columns():
    x = sample((4, 3))
    check(lambda t, i, s: t.index_copy(0, i, s), x, idx(3, 0), sample((2, 3), seed=1))
    check(lambda t, i, s: t.index_copy_(1, i, s), x, idx(2), sample((4, 1), seed=1))
    check(lambda t, i, s: t.index_copy(0, i, s), x, idx(-1), sample((1, 3), seed=1))
    check(lambda t, i, s: t.index_copy(0, i, s), x, idx(4), sample((1, 3), seed=1))


def test_take_and_put_treat_self_as_flat():
    x = sample((3, 4))
    check(lambda t, i: t.take(i), x, idx([[0, 11], [-1, 5]]))
    check(lambda t, i: t.t().take(i), x, idx(1, 2, 3))
    check(lambda t, i: t.take(i), x, idx(12))
    check(lambda t, i, s: t.put_(i, s), x, idx(0, -1, 5), sample((3,), seed=1))
    check(lambda t, i, s: t.t().put_(i, s, accumulate=True), x, idx([1, 1], [2, 11]), sample((2, 2), seed=1))
    check(lambda t, i, s: t.put(i, s), x, idx(12), sample((1,), seed=1))
    check(lambda t, i, s: t.put_(i, s), x, idx(1), sample((1,), torch.float64))


# ---------------------------------------------------------------------------------------------
# gather, scatter, scatter_add, scatter_reduce


def test_gather_along_each_dim_with_a_smaller_index():
    x = sample((4, 5))
    check(lambda t, i: t.gather(0, i), x, idx([[3, 0, 1], [2, 2, 0]]))
    check(lambda t, i: t.gather(1, i), x, idx([[4, 0], [1, 1], [0, 3]]))
    check(lambda t, i: t.gather(-1, i), x.t(), idx([[3], [0]], dtype=torch.int32))
    check(lambda t, i: t.gather(0, i), sample((6,), torch.int8), idx(5, 0, 5))
    check(lambda t, i: t.gather(0, i), torch.tensor(2.0), torch.tensor(0))
    check(lambda t, i: torch.gather(t, 1, i), x, idx([[5]]))
    check(lambda t, i: torch.gather(t, 1, i), x, idx([[-1]]))


def test_scatter_src_value_and_legacy_reduce():
    x = sample((3, 5))
    i = idx([[0, 4, 2], [1, 3, 0]])
    check(lambda t, i, s: t.scatter(1, i, s), x, i, sample((2, 4), seed=1))
    check(lambda t, i: t.scatter(1, i, 2.5), x, i)
    check(lambda t, i: t.scatter_(0, i[:, :2].clamp(max=2), -1.0), x, i)
    check(lambda t, i, s: t.scatter(1, i, s, reduce="add"), x, i, sample((2, 3), seed=1))
    check(lambda t, i, s: t.scatter(1, i, s, reduce="multiply"), x, i, sample((2, 3), seed=1))
    check(lambda t, i: t.scatter(1, i, 3, reduce="add"), sample((3, 5), torch.int64), i)
    check(lambda t, i: t.scatter(1, i, 5.0), x, idx([[5]]))
    check(lambda t, i, s: t.scatter(1, i, s, reduce="max"), x, i, sample((2, 3)))


def test_scatter_add_accumulates_duplicates_in_order():
    x = sample((4, 3))
    check(lambda t, i, s: t.scatter_add(0, i, s), x, idx([[0, 1, 0], [0, 3, 3], [0, 1, 2]]), sample((3, 3), seed=1))
    check(
        lambda t, i, s: t.scatter_add_(1, i, s),
        sample((4, 3), torch.int32),
        idx([[2, 2, 2]]),
        sample((1, 3), torch.int32),
    )
    check(lambda t, i, s: t.t().scatter_add_(1, i, s), x, idx([[0, 0]]), strided(sample((1, 2), seed=2)))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_every_reduction_with_and_without_self(reduce):
    i = idx([[0, 1, 0, 3], [2, 2, 2, 0]])
    for include_self in (True, False):
        for dtype in (torch.float32, torch.int64):
            check(
                lambda t, i, s, inc=include_self: t.scatter_reduce(1, i, s, reduce, include_self=inc),
                sample((2, 5), dtype),
                i,
                sample((2, 4), dtype, seed=1),
            )
    check(
        lambda t, i, s: t.scatter_reduce(0, i, s, reduce),
        torch.tensor([1.0, NAN, 2.0]),
        idx(0, 1, 2),
        torch.tensor([NAN, 3.0, 1.0]),
    )


def test_scatter_reduce_errors():
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "max"), sample((3,)), idx(0), sample((1,)))
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "mean"), sample((3,), torch.bool), idx(0), sample((1,), torch.bool))
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "sum"), sample((3,)), idx(3), sample((1,)))


# ---------------------------------------------------------------------------------------------
# masked_select, nonzero


def test_masked_select_with_broadcasting():
    x = sample((3, 4))
    check(lambda t, m: t.masked_select(m), x, sample((3, 4), torch.bool))
    check(lambda t, m: t.masked_select(m), x, sample((4,), torch.bool, seed=3))
    check(lambda t, m: t.masked_select(m), sample((4,), torch.int8), sample((3, 1), torch.bool, seed=4))
    check(lambda t, m: t.masked_select(m), x, torch.zeros(3, 4, dtype=torch.bool))
    check(lambda t, m: t.masked_select(m), x, torch.ones(3, 4))  # not bool


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_masked_scatter_fills_masked_elements_in_order(dtype):
    x, src = sample((3, 4), dtype), sample((2, 7), dtype, seed=5)
    check(lambda t, m, s: t.masked_scatter(m, s), x, sample((3, 4), torch.bool, seed=1), src)
    check(lambda t, m, s: t.clone().masked_scatter_(m, s), x, sample((4,), torch.bool, seed=2), src)
    check(lambda t, m, s: t.t().masked_scatter(m, s), x, sample((4, 3), torch.bool, seed=3), src)
    check(lambda t, m, s: t.masked_scatter(m, s), x, torch.zeros(3, 4, dtype=torch.bool), src)


def test_masked_scatter_errors_match_torch():
    x, src = sample((3, 4)), sample((12,))
    check(lambda t, m, s: t.masked_scatter(m, s), x, torch.ones(3, 4, dtype=torch.bool), src[:5])  # too few
    check(lambda t, m, s: t.masked_scatter(m, s), x, torch.ones(3, 4), src)  # not bool
    check(lambda t, m, s: t.masked_scatter(m, s), x, torch.ones(3, 4, dtype=torch.bool), src.double())
    check(lambda t, m, s: t.masked_scatter_(m, s), x[0], torch.ones(3, 4, dtype=torch.bool), src)  # no broadcast


def test_masked_select_gradient_is_a_masked_scatter():
    x, m = sample((3, 4)), sample((3, 4), torch.bool, seed=1)
    check(with_grad(lambda t, m: t.masked_select(m)), x, sample((int(m.sum()),), seed=2), m)


def test_nonzero_of_every_kind_and_layout():
    check(lambda t: t.nonzero(), sample((3, 4), torch.int32))
    check(lambda t: t.nonzero(), torch.tensor([[0.0, NAN], [-0.0, 1.0]]))
    check(lambda t: t.nonzero(), sample((2, 3, 2), torch.bool))
    check(lambda t: (t.nonzero(), torch.argwhere(t)), torch.tensor(3.0))
    check(lambda t: t.nonzero(as_tuple=True), sample((3, 4), torch.bool))
    check(lambda t: t.nonzero(), torch.zeros(2, 3))
    check(lambda t, o: torch.nonzero(t, out=o), sample((3, 4), torch.bool), torch.empty(0, dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# embedding


def test_embedding_forward_with_padding_idx():
    w = sample((10, 4))
    check(lambda w, i: F.embedding(i, w), w, idx([[1, 9], [0, 1]]))
    check(lambda w, i: F.embedding(i, w, padding_idx=1), w, idx(1, 2, 1, dtype=torch.int32))
    check(lambda w, i: F.embedding(i, w), w, idx(10))
    check(lambda w, i: F.embedding(i, w), w, idx(-1))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_embedding_max_norm_renormalizes_the_named_rows_in_place(norm_type):
    w = sample((10, 4)) * 3

    def run(w, i):
        out = F.embedding(i, w, max_norm=1.5, norm_type=norm_type)
        return out, w  # the weight's named rows are rescaled in place

    check(run, w, idx([[1, 9], [0, 1]]))
    check(run, w.to(torch.bfloat16), idx(3, 3, 7, dtype=torch.int32))
    check(lambda w, i: torch.embedding_renorm_(w, i, 2.0, 2.0), w, idx(2, 5))


@pytest.mark.parametrize("scale", [False, True])
def test_embedding_backward_accumulates_rows_and_zeros_padding(scale):
    w, i = sample((6, 3)), idx([[1, 4, 1], [0, 1, 5]])
    upstream = sample((2, 3, 3), seed=1)
    check(with_grad(lambda w, i: F.embedding(i, w, padding_idx=0, scale_grad_by_freq=scale)), w, upstream, i)
    check(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 6, -1, scale), upstream, i)


# ---------------------------------------------------------------------------------------------
# gradients through indexing


def test_gradients_through_index_gather_and_index_select():
    x = sample((5, 3))
    check(with_grad(lambda t, i: t[i]), x, sample((4, 3), seed=1), idx(4, 0, 4, 2))
    check(with_grad(lambda t, m: t[m]), x, sample((int(x.gt(0).sum()),), seed=1), x.gt(0))
    check(with_grad(lambda t, i: t.gather(1, i)), x, sample((5, 2), seed=1), idx([[0, 0]] * 5))
    check(with_grad(lambda t, i: t.index_select(0, i)), x, sample((3, 3), seed=1), idx(1, 1, 3))
    check(with_grad(lambda t, i: t.scatter_add(0, i, t[:1] * 2)), x, sample((5, 3), seed=1), idx([[0, 4, 0]]))


# ---------------------------------------------------------------------------------------------
# sort, argsort, topk, kthvalue


def distinct(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g).reshape(shape) - n // 2).to(dtype)


def test_sort_along_each_dim_both_directions():
    x = distinct((3, 4, 5))
    for dim, descending in ((0, False), (1, True), (-1, False), (-1, True)):
        check(lambda t, dim=dim, d=descending: torch.sort(t, dim, descending=d), x)
    check(lambda t: torch.sort(t.transpose(0, 2), 1), x)
    check(lambda t: torch.argsort(t, dim=0, descending=True), x)
    check(lambda t: torch.msort(t), x)


def test_sort_is_stable_and_puts_nan_last():
    x = torch.tensor([[2.0, NAN, 1.0, 2.0, -0.0, 0.0, NAN, 1.0], [3.0, 3.0, 3.0, -1.0, NAN, 5.0, 3.0, 3.0]])
    for descending in (False, True):
        check(lambda t, d=descending: torch.sort(t, stable=True, descending=d), x)
    for dtype, descending in ((torch.int64, False), (torch.uint8, True), (torch.float16, False), (torch.bool, True)):
        check(lambda t, d=descending: torch.sort(t, stable=True, descending=d), sample((3, 7), dtype))


def test_sort_of_scalars_empty_tensors_and_out():
    check(lambda t: torch.sort(t), torch.tensor(2.0))
    check(lambda t: torch.sort(t, 0), torch.zeros(0, 3))
    check(
        lambda t, v, i: torch.sort(t, 1, out=(v, i)), distinct((2, 4)), torch.empty(0), torch.empty(0, dtype=torch.long)
    )


def test_topk_largest_and_smallest():
    x = distinct((4, 6))
    for k, dim, largest in ((3, -1, True), (3, -1, False), (1, 0, True), (2, 0, False)):
        check(lambda t, k=k, dim=dim, lg=largest: torch.topk(t, k, dim=dim, largest=lg), x)
    check(lambda t: torch.topk(t, 2, sorted=False)[0].sort()[0], x)
    check(lambda t: torch.topk(t, 2), torch.tensor([1.0, NAN, 3.0]))
    check(lambda t: torch.topk(t, 7), x)


def test_kthvalue_with_and_without_keepdim():
    x = distinct((3, 5))
    check(lambda t: torch.kthvalue(t, 2), x)
    check(lambda t: torch.kthvalue(t, 3, 0, keepdim=True), x)
    check(lambda t: torch.kthvalue(t, 1), torch.tensor(4.0))
    check(lambda t: torch.kthvalue(t, 6), x)
    check(lambda t: torch.kthvalue(t, 1), sample((3,), torch.bool))


def test_long_rows_sort_through_the_network_stably_with_nan_last():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-50, 50, (2, 3000), generator=g).float()
    x[0, ::97] = NAN
    for descending in (False, True):
        check(lambda t, d=descending: torch.sort(t, stable=True, descending=d), x)
    check(lambda t: torch.topk(t, 5)[0], x)
    check(lambda t: torch.kthvalue(t, 1500), distinct((2, 3000)))
    check(lambda t: torch.sort(t, stable=True), torch.randint(0, 4, (2049,), generator=g, dtype=torch.int16))


def test_sort_gradient():
    check(with_grad(lambda t: torch.sort(t, 1)[0]), distinct((3, 4)), sample((3, 4)))
    check(with_grad(lambda t: torch.topk(t, 2)[0]), distinct((3, 4)), sample((3, 2)))


def test_sort_runs_without_fallback_in_a_fixed_number_of_kernels():
    t = distinct((8, 50)).to("tiny")
    torch.sort(t)[0].cpu()
    with counting() as c:
        v, i = torch.sort(t, descending=True)
        v.cpu(), i.cpu()
    assert c["fallbacks"] == 0
    assert c["kernels"] <= 4  # ranks, order, and the values and indices written from them


def test_searchsorted_and_bucketize_match_cpus_binary_search():
    nan = float("nan")
    b = torch.tensor([1.0, 2.0, 2.0, 3.0, nan])  # NaN: torch's search lands where its comparisons say
    v = torch.tensor([[0.0, 1.0, 2.0, 2.5, 3.0, 4.0, nan], [2.0, 2.0, 2.0, 1.0, 1.0, nan, -1.0]])
    for kwargs in ({}, {"right": True}, {"side": "right"}, {"out_int32": True}):
        check(lambda b, v, kw=kwargs: torch.searchsorted(b, v, **kw), b, v)
    g = torch.Generator().manual_seed(0)
    rows = torch.sort(torch.randn(3, 4, 9, generator=g), -1).values
    check(torch.searchsorted, rows, torch.randn(3, 4, 5, generator=g))  # a boundary row per value row
    u = torch.randn(3, 9, generator=g)
    check(lambda u, v, s: torch.searchsorted(u, v, sorter=s), u, torch.randn(3, 4, generator=g), torch.argsort(u))
    check(lambda b, v, o: torch.searchsorted(b, v, out=o), b, v, torch.empty(0, dtype=torch.long))
    check(lambda b: torch.searchsorted(b, 2.0), b)
    check(torch.searchsorted, torch.tensor([1, 5, 9]), torch.tensor([0.5, 5.0, 10.0]))  # promoted
    check(torch.bucketize, v, b)
    check(lambda b: torch.bucketize(2.5, b, right=True), b)
    # torch's errors
    check(lambda b, v: torch.searchsorted(b, v, side="middle"), b, v)
    check(lambda b, v: torch.searchsorted(b, v, right=True, side="left"), b, v)
    check(torch.searchsorted, rows, torch.randn(2, 4, 5, generator=g))
    check(torch.bucketize, v, rows)
    check(lambda b, v, o: torch.searchsorted(b, v, out=o), b, v, torch.empty(0, dtype=torch.int32))
