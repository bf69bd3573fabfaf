"""Sparse COO tensors on tiny against the same code on PyTorch's CPU. Natively (TINY_FALLBACK=0): construction
(torch.sparse_coo_tensor with and without a size, dense dims, to_sparse and to_sparse(sparse_dim)), the
structure (indices, values, _nnz, sparse_dim, dense_dim, the coalesced flag), coalesce, to_dense, copies between
tiny and the CPU, clone, copy_, zero_, unsqueeze, permute, sparse_mask, to_sparse's gradient, every dtype, and bad
input raising the CPU's kind of error; a sparse op without a tiny kernel is refused naming the op. With the CPU
fallback: sparse arithmetic, sums, matrix products and their gradients, shape ops, in-place and out= forms run on
the CPU's sparse kernels and give its results, sparse results back on tiny. Compressed layouts (CSR, CSC, BSR,
BSC) move between tiny and the CPU natively; their ops (to_dense, arithmetic, products, sampled_addmm) run on
the CPU's kernels."""

import pytest
import torch
from conftest import DEVICE, by_dtype

native = pytest.mark.usefixtures("native")  # no op may run through the CPU fallback

DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)

# Entries with repeated indices: (0, 1) three times, (1, 0) twice.
INDICES = torch.tensor([[0, 1, 0, 2, 1, 0], [1, 0, 1, 2, 0, 1]])


def assert_same(actual, expected):
    """A tiny result matches the CPU's: a sparse tensor by its whole structure (indices in the same order, the
    coalesced flag), a dense one by dtype, shape and values, other results by value."""
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.device.type == DEVICE, f"on {actual.device}, expected a tiny tensor"
    assert (actual.layout, actual.dtype, actual.shape) == (expected.layout, expected.dtype, expected.shape)
    if expected.layout == torch.sparse_coo:
        assert (actual.sparse_dim(), actual.dense_dim(), actual._nnz(), actual.is_coalesced()) == (
            expected.sparse_dim(),
            expected.dense_dim(),
            expected._nnz(),
            expected.is_coalesced(),
        )
        assert actual._indices().device.type == DEVICE and actual._values().device.type == DEVICE
        torch.testing.assert_close(actual._indices().cpu(), expected._indices(), rtol=0, atol=0)
        torch.testing.assert_close(actual._values().cpu(), expected._values())
    else:
        torch.testing.assert_close(actual.cpu(), expected)


def both(fn):
    """fn(device) on the CPU and on tiny: the same result, or the same kind of error."""
    try:
        expected = fn("cpu")
    except Exception as cpu_error:
        with pytest.raises(type(cpu_error)):
            fn(DEVICE)
        return
    assert_same(fn(DEVICE), expected)


def values(n, dtype, *dense):
    return torch.arange(1, n * max(1, torch.Size(dense).numel()) + 1).reshape(n, *dense).to(dtype)


@native
@by_dtype(DTYPES)
def test_to_sparse_of_a_dense_tensor_matches_cpu(dtype):
    x = torch.tensor([[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 4, 0]]).to(dtype)
    both(lambda d: x.to(d).to_sparse())
    both(lambda d: x.to(d).to_sparse(1))


@native
@by_dtype(DTYPES)
def test_coalesce_sums_repeated_indices_like_cpu(dtype):
    v = values(6, dtype)
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3)).coalesce())


@native
@by_dtype(DTYPES)
def test_to_dense_adds_repeated_indices_like_cpu(dtype):
    v = values(6, dtype)
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3)).to_dense())


@native
def test_sparse_coo_tensor_without_a_size_takes_the_largest_index():
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d)))


@native
def test_sparse_coo_tensor_on_tiny_from_cpu_indices_and_values():
    both(lambda d: torch.sparse_coo_tensor(INDICES, values(6, torch.float32), (3, 4), device=d))


@native
def test_dense_dims_coalesce_and_densify_like_cpu():
    v = values(6, torch.float32, 2, 3)
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2, 3)))
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2, 3)).coalesce())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2, 3)).to_dense())


@native
def test_to_sparse_with_dense_dims_keeps_rows_with_any_nonzero():
    x = torch.tensor([[[0.0, 1], [0, 0]], [[0, 0], [0, 0]], [[2, 0], [0, 3]]])
    both(lambda d: x.to(d).to_sparse(1))
    both(lambda d: x.to(d).to_sparse(2))
    both(lambda d: x.to(d).to_sparse(2).to_dense())


@native
def test_no_sparse_dims_sum_every_entry():
    v = values(3, torch.float32, 2)
    both(lambda d: torch.sparse_coo_tensor(torch.zeros(0, 3, dtype=torch.long, device=d), v.to(d), (2,)).coalesce())
    both(lambda d: torch.sparse_coo_tensor(torch.zeros(0, 3, dtype=torch.long, device=d), v.to(d), (2,)).to_dense())


@native
def test_zero_dim_and_all_zero_tensors_convert_like_cpu():
    both(lambda d: torch.tensor(3.0, device=d).to_sparse())
    both(lambda d: torch.tensor(0.0, device=d).to_sparse())
    both(lambda d: torch.zeros(3, 4, device=d).to_sparse())
    both(lambda d: torch.zeros(3, 4, device=d).to_sparse(1))
    both(lambda d: torch.zeros(3, 4, device=d).to_sparse().to_dense())
    both(lambda d: torch.sparse_coo_tensor(size=(2, 3), device=d))
    both(lambda d: torch.sparse_coo_tensor(size=(2, 3), device=d).to_dense())


@native
def test_a_single_entry_is_coalesced_by_a_copy():
    both(lambda d: torch.sparse_coo_tensor([[1], [2]], [5.0], (3, 3), device=d).coalesce())


@native
def test_indices_values_and_counts_match_cpu():
    def structure(d):
        s = torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3))
        c = s.coalesce()
        return (s._nnz(), c._nnz(), s.sparse_dim(), s.dense_dim(), s.is_coalesced(), c.is_coalesced())

    both(structure)
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3)).coalesce().indices())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3)).coalesce().values())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3))._indices())


@native
def test_indices_of_an_uncoalesced_tensor_raise_like_cpu():
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3)).indices())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3)).values())


@native
def test_bad_construction_raises_like_cpu():
    v = values(6, torch.float32)
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (2, 3)))  # index past the size
    both(lambda d: torch.sparse_coo_tensor(-INDICES.to(d), v.to(d), (3, 3)))  # negative index
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3,)))  # too few dims
    both(lambda d: torch.sparse_coo_tensor(INDICES[0].to(d), v.to(d), (3,)))  # 1-d indices
    both(lambda d: torch.ones(3, 4, device=d).to_sparse(3))
    both(lambda d: torch.ones(3, 4, device=d).to_sparse(0))
    both(lambda d: torch.ones(3, 4, device=d).to_sparse().to_dense(dtype=torch.float64))


@native
def test_copies_between_tiny_and_cpu_keep_the_structure():
    s = torch.sparse_coo_tensor(INDICES, values(6, torch.float32, 2), (3, 3, 2))
    t = s.to(DEVICE)
    assert t.device.type == DEVICE and t.layout == torch.sparse_coo
    back = t.cpu()
    assert back.device.type == "cpu"
    assert_same(t, s)
    assert torch.equal(back._indices(), s._indices()) and torch.equal(back._values(), s._values())
    assert back.is_coalesced() == s.is_coalesced()
    assert t.coalesce().cpu().is_coalesced()
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3)).to(torch.float64))


@native
def test_clone_copy_and_zero_match_cpu():
    v = values(6, torch.float32, 2)
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).clone())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).zero_())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).detach())
    both(
        lambda d: torch.sparse_coo_tensor(size=(3, 3, 2), device=d).copy_(
            torch.sparse_coo_tensor(INDICES, v, (3, 3, 2))
        )
    )

    def copy_between_tiny_tensors(d):
        src = torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2))
        return torch.sparse_coo_tensor(size=(3, 3, 2), device=d).copy_(src)

    both(copy_between_tiny_tensors)


@native
def test_a_copy_does_not_share_indices_or_values():
    s = torch.sparse_coo_tensor(INDICES, values(6, torch.float32), (3, 3), device=DEVICE)
    c = s.clone()
    c._values().zero_()
    assert torch.equal(s._values().cpu(), values(6, torch.float32))


@native
@by_dtype((torch.float32, torch.int64, torch.complex64))
def test_sparse_mask_reads_self_at_the_masks_indices(dtype):
    x = torch.arange(9).reshape(3, 3).to(dtype)
    mask = torch.sparse_coo_tensor(INDICES, torch.ones(6), (3, 3))
    both(lambda d: x.to(d).sparse_mask(mask.to(d)))
    both(lambda d: x.to(d).sparse_mask(mask.to(d).coalesce()))
    both(lambda d: torch.ones(2, 3, device=d).sparse_mask(mask.to(d)))


@native
def test_gradient_of_to_sparse_then_to_dense_matches_cpu():
    x = torch.tensor([[0.0, 1.5, 0.0], [-2.0, 0.0, 3.0]])
    g = torch.arange(6.0).reshape(2, 3) + 1

    def grad(d):
        leaf = x.to(d).requires_grad_()
        (out,) = torch.autograd.grad(leaf.to_sparse().to_dense(), leaf, g.to(d))
        return out

    both(grad)

    def grad_of_values(d):
        leaf = x.to(d).requires_grad_()
        (out,) = torch.autograd.grad(leaf.to_sparse(1).coalesce().values().sum(), leaf)
        return out

    both(grad_of_values)


@native
def test_print_shows_the_cpu_values():
    s = torch.sparse_coo_tensor(INDICES, values(6, torch.float32), (3, 3))
    assert repr(s.to(DEVICE)).replace("device='tiny:0', ", "") == repr(s)


@native
def test_a_sparse_op_without_a_tiny_kernel_is_refused_natively_naming_it():
    s = torch.sparse_coo_tensor(INDICES, values(6, torch.float32), (3, 3), device=DEVICE)
    with pytest.raises(RuntimeError, match="aten::add.Tensor has no tiny kernel"):
        s + s
    with pytest.raises(RuntimeError, match="aten::addmm has no tiny kernel"):
        torch.sparse.mm(s, torch.ones(3, 2, device=DEVICE))


# ---- sparse ops without a tiny kernel: the CPU's sparse kernels through the CPU fallback ----


def sparse(d, coalesced=False):
    s = torch.sparse_coo_tensor(INDICES.to(d), values(6, torch.float32).to(d), (3, 3))
    return s.coalesce() if coalesced else s


def test_sparse_arithmetic_runs_on_the_cpu_and_matches_it():
    both(lambda d: sparse(d) + sparse(d))
    both(lambda d: sparse(d, True) - sparse(d))
    both(lambda d: sparse(d, True) * sparse(d, True))
    both(lambda d: sparse(d) * 2)
    both(lambda d: -sparse(d))
    both(lambda d: sparse(d) / 2)
    both(lambda d: torch.ones(3, 3, device=d) + sparse(d))
    both(lambda d: sparse(d) * torch.arange(9.0, device=d).reshape(3, 3))
    both(lambda d: torch.sparse.sum(sparse(d)))
    both(lambda d: torch.sparse.sum(sparse(d), dim=1))


def test_sparse_in_place_and_out_results_stay_sparse_on_tiny():
    both(lambda d: sparse(d).add_(sparse(d, True)))
    both(lambda d: torch.add(sparse(d), sparse(d), out=torch.sparse_coo_tensor(size=(3, 3), device=d)))
    s = sparse(DEVICE)
    r = s.mul_(3)
    assert r is s and s.layout == torch.sparse_coo and s._values().device.type == DEVICE


def test_sparse_matrix_products_and_their_gradients_match_cpu():
    x = torch.arange(6.0).reshape(3, 2)
    both(lambda d: torch.sparse.mm(sparse(d), x.to(d)))
    both(lambda d: sparse(d) @ x.to(d))
    both(lambda d: torch.sparse.addmm(torch.ones(3, 2, device=d), sparse(d), x.to(d)))

    def grads(d):
        leaf = x.to(d).requires_grad_()
        w = sparse(d, True).requires_grad_()
        return torch.autograd.grad(torch.sparse.mm(w, leaf).sum(), [leaf, w])

    both(lambda d: grads(d)[0])
    both(lambda d: grads(d)[1])


def test_sparse_shape_ops_match_cpu():
    both(lambda d: torch.cat([sparse(d), sparse(d, True)]))
    both(lambda d: torch.stack([sparse(d), sparse(d)]))
    both(lambda d: sparse(d).unsqueeze(1))
    both(lambda d: sparse(d).permute(1, 0))
    both(lambda d: sparse(d).t())
    both(lambda d: sparse(d).index_select(0, torch.tensor([2, 0], device=d)))
    both(lambda d: torch.sparse.softmax(sparse(d, True), 1))


@native
def test_unsqueeze_and_permute_of_a_sparse_tensor_run_natively():
    v = values(6, torch.float32, 2)
    for dim in (0, 1, 2, 3, -1):
        both(lambda d, k=dim: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).unsqueeze(k))
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).permute(1, 0, 2))
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).permute(1, 0, 2).coalesce())
    both(lambda d: torch.sparse_coo_tensor(INDICES.to(d), v.to(d), (3, 3, 2)).permute(2, 0, 1))  # dense dim moved


# ---- compressed layouts (CSR, CSC, BSR, BSC): held and moved natively, their ops on the CPU's kernels ----

DENSE = torch.tensor([[0.0, 1, 0, 0], [2, 0, 3, 0], [0, 0, 0, 4], [5, 0, 0, 6]])
COMPRESSED = {
    "csr": lambda x: x.to_sparse_csr(),
    "csc": lambda x: x.to_sparse_csc(),
    "bsr": lambda x: x.to_sparse_bsr((2, 2)),
    "bsc": lambda x: x.to_sparse_bsc((2, 2)),
}


@native
@pytest.mark.parametrize("layout", COMPRESSED)
def test_compressed_tensors_move_between_tiny_and_cpu_keeping_their_structure(layout):
    c = COMPRESSED[layout](DENSE)
    t = c.to(DEVICE)
    assert (t.layout, t.device.type, t._nnz(), t.shape) == (c.layout, DEVICE, c._nnz(), c.shape)
    assert t.values().device.type == DEVICE
    back = t.cpu()
    assert back.layout == c.layout and back.device.type == "cpu"
    torch.testing.assert_close(back, c, rtol=0, atol=0)
    torch.testing.assert_close(t.clone().cpu(), c, rtol=0, atol=0)
    compressed, plain = (
        (t.crow_indices(), t.col_indices()) if layout in ("csr", "bsr") else (t.ccol_indices(), t.row_indices())
    )
    expected = (c.crow_indices(), c.col_indices()) if layout in ("csr", "bsr") else (c.ccol_indices(), c.row_indices())
    assert compressed.device.type == DEVICE
    torch.testing.assert_close((compressed.cpu(), plain.cpu()), expected, rtol=0, atol=0)


def test_csr_ops_run_on_the_cpu_and_match_it():
    x = torch.arange(8.0).reshape(4, 2)
    both(lambda d: DENSE.to(d).to_sparse_csr())
    both(lambda d: DENSE.to_sparse_csr().to(d).to_dense())
    both(lambda d: DENSE.to_sparse_csr().to(d) * 2)
    both(lambda d: DENSE.to_sparse_csr().to(d) + DENSE.to_sparse_csr().to(d))
    both(lambda d: DENSE.to_sparse_csr().to(d).sin())
    both(lambda d: DENSE.to_sparse_csr().to(d) @ x.to(d))
    both(lambda d: torch.sparse.sampled_addmm(DENSE.to_sparse_csr().to(d), x.to(d), x.t().to(d), alpha=0.5))


@native
@by_dtype((torch.bool, torch.complex64, torch.int32, torch.float16))
def test_no_sparse_dims_in_other_dtypes_match_cpu(dtype):
    v = torch.tensor([[1, 0], [2, 1], [0, 0], [3, 1], [1, 1]]).to(dtype)
    both(lambda d: torch.sparse_coo_tensor(torch.zeros(0, 5, dtype=torch.long, device=d), v.to(d), (2,)).to_dense())
    both(lambda d: torch.sparse_coo_tensor(torch.zeros(0, 5, dtype=torch.long, device=d), v.to(d), (2,)).coalesce())


@native
def test_sparse_mask_edge_cases_match_cpu():
    empty = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (3, 3))
    x = torch.arange(9.0).reshape(3, 3)
    both(lambda d: x.to(d).sparse_mask(empty.to(d)))
    both(lambda d: x.to(d).sparse_mask(empty.to(d).coalesce()))
    # a sparse self (another tensor than the mask): its duplicates summed at each of the mask's indices
    both(lambda d: sparse(d).sparse_mask(sparse(d)))
    both(lambda d: sparse(d).sparse_mask(sparse(d, True)))
    s = sparse(DEVICE)
    assert s.sparse_mask(s) is s  # the mask itself: torch returns it
    mask = torch.sparse_coo_tensor(INDICES, torch.ones(6, 2), (3, 3, 2))
    both(lambda d: torch.arange(18.0).reshape(3, 3, 2).to(d).sparse_mask(mask.to(d)))


@native
def test_coalesce_of_many_random_entries_matches_cpu():
    g = torch.Generator().manual_seed(0)
    indices, v = torch.randint(0, 50, (3, 3000), generator=g), torch.randn(3000, generator=g)
    both(lambda d: torch.sparse_coo_tensor(indices.to(d), v.to(d), (50, 50, 50)).coalesce())
    both(lambda d: torch.sparse_coo_tensor(indices.to(d), v.to(d), (50, 50, 50)).to_dense())
