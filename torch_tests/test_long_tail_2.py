"""More of the long tail of ATen ops (issue #16) natively on tiny, against PyTorch CPU with the fallback
disabled (TINY_FALLBACK=0), so a silent fallback fails the test: prelu (_prelu_kernel and its backward),
nonzero_static, segment_reduce (every reduction, lengths and offsets, initial, and its backward), and cdist
(_cdist_forward and _cdist_backward for p = 0, 1, 2, inf and other p, in each compute mode); values and
gradients, float32 and float64 (and float16/bfloat16 where the CPU has them), odd shapes, non-contiguous
inputs, and bad input raising the CPU's kind of error."""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same, by_dtype, check, rand, tol, with_grads

NAN, INF = float("nan"), float("inf")

pytestmark = pytest.mark.usefixtures("native")


# ---- prelu ----


@by_dtype((torch.float32, torch.float64, torch.float16, torch.bfloat16))
def test_prelu_values_and_gradients_match_cpu(dtype):
    x = rand(2, 3, 5, 4, dtype=dtype)
    for weight in (rand(3, dtype=dtype, seed=1), rand(1, dtype=dtype, seed=2)):
        expected, actual = with_grads(F.prelu, x, weight)
        assert_same(actual, expected, **tol(dtype))


def test_prelu_on_non_contiguous_and_odd_shapes_matches_cpu():
    x = rand(5, 3, 7).transpose(0, 2)  # (7, 3, 5), channel dim 1
    expected, actual = with_grads(F.prelu, x, rand(3, seed=1))
    assert_same(actual, expected)
    expected, actual = with_grads(F.prelu, rand(6), rand(1, seed=1))
    assert_same(actual, expected)
    expected, actual = with_grads(F.prelu, rand(1).reshape(()), rand(1, seed=1))
    assert_same(actual, expected)


def test_prelu_kernel_and_its_backward_match_cpu_directly():
    x, w = rand(4, 3, 2), rand(3, 1, seed=1)
    check(torch._prelu_kernel, x, w)
    check(lambda g, a, b: torch.ops.aten._prelu_kernel_backward(g, a, b), rand(4, 3, 2, seed=3), x, w)


def test_prelu_bad_input_raises_like_cpu():
    check(torch._prelu_kernel, rand(3, 2), rand(2).double())
    check(torch._prelu_kernel, rand(3, 2, dtype=torch.int64), rand(2, dtype=torch.int64))
    check(F.prelu, rand(3, 4), rand(3))


def test_prelu_runs_natively_under_autocast():
    x, w = rand(2, 3, 4), rand(3, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.prelu(x, w)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        actual = F.prelu(x.to(DEVICE), w.to(DEVICE))
    assert_same(actual, expected)


# ---- nonzero_static ----


@pytest.mark.parametrize("size", [0, 1, 3, 7, 40])
@by_dtype((torch.float32, torch.int64, torch.bool, torch.float16))
def test_nonzero_static_matches_cpu(size, dtype):
    x = rand(4, 5, dtype=dtype) if dtype != torch.bool else rand(4, 5) > 0
    x = x * (rand(4, 5, seed=3) > 0) if dtype != torch.bool else x
    check(lambda t: torch.nonzero_static(t, size=size), x)
    check(lambda t: torch.nonzero_static(t, size=size, fill_value=-7), x)


def test_nonzero_static_of_odd_inputs_matches_cpu():
    check(lambda t: torch.nonzero_static(t, size=3), torch.tensor(2.0))
    check(lambda t: torch.nonzero_static(t, size=3), torch.tensor(0.0))
    check(lambda t: torch.nonzero_static(t, size=2), torch.zeros(3, 0, 2))
    check(lambda t: torch.nonzero_static(t, size=4), torch.tensor([NAN, 0.0, -0.0, INF]))
    check(lambda t: torch.nonzero_static(t, size=6), rand(3, 4, 2).permute(2, 0, 1))  # non-contiguous
    check(lambda t: torch.nonzero_static(t, size=5, fill_value=2**40), rand(2, 1, 3))


def test_nonzero_static_out_and_bad_input_match_cpu():
    x = torch.tensor([[0, 1], [2, 0]])
    check(lambda t, o: torch.nonzero_static(t, size=3, out=o), x, torch.empty(0, dtype=torch.long))
    check(lambda t, o: torch.nonzero_static(t, size=3, out=o), x, torch.empty(0, dtype=torch.int32))
    check(lambda t: torch.nonzero_static(t, size=-1), x)


# ---- segment_reduce ----

REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


def segment_data(dtype=torch.float32):
    """8 values with ties, a zero, a NaN, and segments of lengths 2, 0, 3, 2, 1."""
    data = torch.tensor([3.0, 3.0, 1.0, 0.0, 2.0, NAN, -1.5, 5.0], dtype=dtype)
    return data, torch.tensor([2, 0, 3, 2, 1])


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 2.0])
@by_dtype((torch.float32, torch.float64, torch.float16, torch.bfloat16))
def test_segment_reduce_with_lengths_matches_cpu_with_gradients(reduce, initial, dtype):
    data, lengths = segment_data(dtype)
    expected, actual = with_grads(
        lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=initial), data, lengths
    )
    assert_same(actual, expected, **tol(dtype))


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_segment_reduce_along_an_inner_axis_with_offsets_matches_cpu(reduce):
    data = rand(2, 6, 3)
    offsets = torch.tensor([[0, 1, 1, 4, 6], [0, 3, 3, 5, 6]])
    lengths = offsets.diff(dim=1)
    for name, index in (("offsets", offsets), ("lengths", lengths), ("lengths", lengths.int())):
        expected, actual = with_grads(
            lambda d, i, name=name: torch.segment_reduce(d, reduce, axis=1, **{name: i}), data, index
        )
        assert_same(actual, expected, rtol=1e-5, atol=1e-6)
    # a non-contiguous data tensor, reduced along axis 0 with trailing dims
    data = rand(4, 5, 2).permute(1, 0, 2)  # (5, 4, 2)
    expected, actual = with_grads(
        lambda d, n: torch.segment_reduce(d, reduce, lengths=n), data, torch.tensor([1, 3, 1])
    )
    assert_same(actual, expected, rtol=1e-5, atol=1e-6)


def test_segment_reduce_ties_and_nans_share_the_gradient_like_cpu():
    data = torch.tensor([4.0, 4.0, 4.0, NAN, 1.0, 0.0, 0.0, 7.0, 0.0, NAN])
    lengths = torch.tensor([3, 2, 2, 3])
    for reduce in REDUCTIONS:
        expected, actual = with_grads(lambda d, n, r=reduce: torch.segment_reduce(d, r, lengths=n), data, lengths)
        assert_same(actual, expected)


def test_segment_reduce_unsafe_skips_the_length_checks_like_cpu():
    check(lambda d, n: torch.segment_reduce(d, "sum", lengths=n, unsafe=True), rand(6), torch.tensor([2, 2]))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lengths": torch.tensor([2, 2])},  # rows do not sum to the axis
        {"lengths": torch.tensor([-1, 7])},
        {},  # neither lengths nor offsets
        {"lengths": torch.tensor([3.0, 3.0])},
        {"lengths": torch.tensor([3, 3]), "axis": 1},
    ],
)
def test_segment_reduce_bad_input_raises_like_cpu(kwargs):
    check(lambda d, kw: torch.segment_reduce(d, "sum", **kw), rand(6), kwargs)


def test_segment_reduce_bad_reduction_or_dtype_raises_like_cpu():
    check(lambda d, n: torch.segment_reduce(d, "foo", lengths=n), rand(6), torch.tensor([3, 3]))
    check(lambda d, n: torch.segment_reduce(d, "sum", lengths=n), torch.arange(6), torch.tensor([3, 3]))


# ---- cdist ----


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, INF, 0.5, 1.5, 3.0])
@by_dtype((torch.float32, torch.float64))
def test_cdist_values_and_gradients_match_cpu(p, dtype):
    x1, x2 = rand(2, 5, 4, dtype=dtype), rand(2, 6, 4, dtype=dtype, seed=1)
    x2[0, 1] = x1[0, 2]  # a zero distance, where the gradient formulas divide by it
    x2[1, 0, :2] = x1[1, 3, :2]  # zero differences in some columns
    expected, actual = with_grads(lambda a, b: torch.cdist(a, b, p=p), x1, x2)
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    assert_same(actual, expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(
    "mode", [None, "use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"]
)
def test_cdist_compute_modes_match_cpu(mode):
    kw = {} if mode is None else {"compute_mode": mode}
    for rows in (3, 30):  # the matrix-product form starts above 25 rows
        x1, x2 = rand(rows, 7), rand(4, 7, seed=1)
        expected, actual = with_grads(lambda a, b: torch.cdist(a, b, **kw), x1, x2)
        assert_same(actual, expected, rtol=1e-4, atol=1e-4)


def test_cdist_broadcasts_batches_and_reads_non_contiguous_inputs_like_cpu():
    x1 = rand(3, 2, 4).transpose(0, 1)  # (2, 3, 4)
    x2 = rand(5, 1, 6, 4, seed=1)[:, 0].transpose(1, 2).transpose(1, 2)  # (5, 6, 4), strided
    x1 = x1.unsqueeze(0).expand(5, 2, 3, 4)[:, :1]  # (5, 1, 3, 4)
    for p in (1.0, 2.0, 2.5):
        expected, actual = with_grads(lambda a, b, p=p: torch.cdist(a, b, p=p), x1.contiguous(), x2)
        assert_same(actual, expected, rtol=1e-5, atol=1e-5)
    check(lambda a, b: torch.cdist(a, b), x1, x2, rtol=1e-5, atol=1e-5)


def test_cdist_of_empty_inputs_matches_cpu():
    check(lambda a, b: torch.cdist(a, b), rand(3, 0), rand(2, 0))
    check(lambda a, b: torch.cdist(a, b), rand(0, 4), rand(2, 4))


@pytest.mark.parametrize(
    "x1,x2,p",
    [
        (rand(3, 4), rand(3, 5), 2.0),
        (rand(3, 4), rand(3, 4), -1.0),
        (rand(4), rand(3, 4), 2.0),
        (rand(3, 4, dtype=torch.int32), rand(3, 4, dtype=torch.int32), 2.0),
    ],
)
def test_cdist_bad_input_raises_like_cpu(x1, x2, p):
    check(lambda a, b: torch.cdist(a, b, p=p), x1, x2)
    check(lambda a, b: torch.ops.aten._cdist_forward(a, b, p, None), x1, x2)


def test_cdist_forward_with_a_bad_mode_raises_like_cpu():
    check(lambda a, b: torch.ops.aten._cdist_forward(a, b, 2.0, 3), rand(3, 4), rand(2, 4))


# ---- grid_sample (grid_sampler_2d, grid_sampler_3d) ----

MODES_2D = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]


def sample_grid(*shape, seed=4, dtype=torch.float32):
    """Coordinates mostly inside [-1, 1], some outside (for the padding modes), a few exactly on pixels."""
    g = rand(*shape, seed=seed).mul(0.8).to(dtype)
    flat = g.view(-1)
    flat[:3] = torch.tensor([-1.0, 1.0, 0.0], dtype=dtype)
    flat[3:5] = torch.tensor([-2.7, 3.1], dtype=dtype)
    return g


@pytest.mark.parametrize("mode", MODES_2D)
@pytest.mark.parametrize("padding_mode", PADDINGS)
@pytest.mark.parametrize("align_corners", [False, True])
@by_dtype((torch.float32, torch.float64))
def test_grid_sample_2d_values_and_gradients_match_cpu(mode, padding_mode, align_corners, dtype):
    x, grid = rand(2, 3, 5, 7, dtype=dtype), sample_grid(2, 4, 6, 2, dtype=dtype)

    def fn(a, g):
        return F.grid_sample(a, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    expected, actual = with_grads(fn, x, grid)
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    assert_same(actual, expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", PADDINGS)
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_3d_values_and_gradients_match_cpu(mode, padding_mode, align_corners):
    x, grid = rand(2, 2, 3, 4, 5), sample_grid(2, 3, 2, 4, 3)

    def fn(a, g):
        return F.grid_sample(a, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    expected, actual = with_grads(fn, x, grid)
    assert_same(actual, expected, rtol=1e-4, atol=1e-4)


@by_dtype((torch.float16, torch.bfloat16))
def test_grid_sample_in_half_precision_matches_cpu(dtype):
    x, grid = rand(1, 2, 4, 5, dtype=dtype), sample_grid(1, 3, 3, 2, dtype=dtype)
    for mode in MODES_2D:
        expected, actual = both_devices(lambda a, g, m=mode: F.grid_sample(a, g, mode=m, align_corners=False), x, grid)
        assert_same(actual, expected, rtol=3e-2, atol=3e-2)


def both_devices(fn, *inputs):
    return fn(*inputs), fn(*[t.to(DEVICE) for t in inputs])


def test_grid_sample_of_non_contiguous_inputs_and_single_pixel_images_matches_cpu():
    x = rand(3, 4, 6, 2).permute(3, 2, 0, 1)  # (2, 6, 3, 4), channels-last-like strides
    grid = sample_grid(5, 2, 2, 3).transpose(0, 2)  # (2, 2, 5, 3) -> last dim 3: make it 2 below
    grid = grid[..., :2]
    for mode in MODES_2D:
        for padding_mode in PADDINGS:
            expected, actual = with_grads(
                lambda a, g, m=mode, p=padding_mode: F.grid_sample(a, g, m, p, align_corners=True), x, grid
            )
            assert_same(actual, expected, rtol=1e-4, atol=1e-4)
    # a 1x1 image, where align_corners' reflection has no span
    for padding_mode in PADDINGS:
        expected, actual = with_grads(
            lambda a, g, p=padding_mode: F.grid_sample(a, g, padding_mode=p, align_corners=True),
            rand(1, 1, 1, 1),
            sample_grid(1, 2, 2, 2),
        )
        assert_same(actual, expected, rtol=1e-5, atol=1e-5)


def test_grid_sampler_ops_directly_and_an_empty_grid_match_cpu():
    x, grid = rand(1, 2, 3, 3), sample_grid(1, 2, 2, 2)
    check(lambda a, g: torch.grid_sampler_2d(a, g, 0, 0, False), x, grid)
    check(lambda a, g: torch.grid_sampler_2d(a, g, 2, 2, True), x, grid, rtol=1e-5, atol=1e-5)
    check(lambda a, g: torch.grid_sampler_3d(a, g, 1, 1, False), rand(1, 2, 2, 3, 3), sample_grid(1, 2, 2, 2, 3))
    check(lambda a, g: F.grid_sample(a, g, align_corners=False), x, torch.zeros(1, 0, 4, 2))


@pytest.mark.parametrize(
    "x,grid,kw",
    [
        (rand(1, 2, 3, 3), rand(2, 2, 2, 2), {}),  # batch sizes differ
        (rand(1, 2, 3, 3), rand(1, 2, 2, 3), {}),  # 3 coordinates for a 2d image
        (rand(1, 2, 0, 3), rand(1, 2, 2, 2), {}),  # an empty spatial dim
        (rand(1, 2, 3, 3, 3), rand(1, 2, 2, 2, 3), {"mode": "bicubic"}),  # bicubic in 3d
        (rand(1, 2, 3, 3), rand(1, 2, 2, 2).double(), {}),
        (rand(1, 2, 3, 3), rand(1, 2, 2, 2), {"mode": "area"}),
    ],
)
def test_grid_sample_bad_input_raises_like_cpu(x, grid, kw):
    check(lambda a, g: F.grid_sample(a, g, align_corners=False, **kw), x, grid)


# ---- fractional_max_pool2d / 3d ----


def fractional_samples(n, c, dims, seed=7, dtype=torch.float32):
    return torch.rand(n, c, dims, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize(
    "size,kernel,out", [((9, 11), (2, 3), (4, 5)), ((5, 5), (2, 2), (4, 4)), ((7, 6), (3, 1), (1, 6)), ((4, 4), 1, 4)]
)
@by_dtype((torch.float32, torch.float64))
def test_fractional_max_pool2d_values_indices_and_gradients_match_cpu(size, kernel, out, dtype):
    x = rand(2, 3, *size, dtype=dtype)
    x[0, 0, 1, 1] = NAN
    x[1, 2, :2, :2] = 4.0  # ties: the first wins
    samples = fractional_samples(2, 3, 2, dtype=dtype)

    def fn(t, s):
        return F.fractional_max_pool2d(t, kernel, output_size=out, return_indices=True, _random_samples=s)

    expected, actual = both_devices(fn, x, samples)
    assert_same(actual, expected)
    expected, actual = with_grads(lambda t, s: fn(t, s)[0], x, samples, wrt=1)
    assert_same(actual, expected)


@by_dtype((torch.float32, torch.float64))
def test_fractional_max_pool3d_values_indices_and_gradients_match_cpu(dtype):
    x = rand(2, 2, 6, 7, 8, dtype=dtype)
    samples = fractional_samples(2, 2, 3, dtype=dtype)

    def fn(t, s):
        return F.fractional_max_pool3d(t, (2, 3, 2), output_size=(3, 4, 5), return_indices=True, _random_samples=s)

    expected, actual = both_devices(fn, x, samples)
    assert_same(actual, expected)
    expected, actual = with_grads(lambda t, s: fn(t, s)[0], x, samples, wrt=1)
    assert_same(actual, expected)


def test_fractional_max_pool_of_unbatched_and_non_contiguous_inputs_matches_cpu():
    x = rand(3, 9, 8).transpose(1, 2)  # (3, 8, 9) unbatched, strided
    samples = fractional_samples(1, 3, 2)
    expected, actual = with_grads(
        lambda t, s: F.fractional_max_pool2d(t, 3, output_size=(4, 5), _random_samples=s), x, samples, wrt=1
    )
    assert_same(actual, expected)
    x = rand(2, 5, 5, 3).permute(0, 3, 1, 2)  # channels last
    samples = fractional_samples(2, 3, 2)
    expected, actual = both_devices(
        lambda t, s: F.fractional_max_pool2d(t, 2, output_size=3, return_indices=True, _random_samples=s), x, samples
    )
    assert_same(actual, expected)
    x3 = rand(2, 5, 6, 4)  # unbatched 3d
    expected, actual = with_grads(
        lambda t, s: F.fractional_max_pool3d(t, 2, output_size=(3, 4, 2), _random_samples=s),
        x3,
        fractional_samples(1, 2, 3),
        wrt=1,
    )
    assert_same(actual, expected)


@by_dtype((torch.float16, torch.bfloat16))
def test_fractional_max_pool2d_in_half_precision_matches_cpu(dtype):
    x, samples = rand(1, 2, 9, 10, dtype=dtype), fractional_samples(1, 2, 2, dtype=dtype)
    expected, actual = both_devices(
        lambda t, s: F.fractional_max_pool2d(t, 2, output_size=(5, 6), return_indices=True, _random_samples=s),
        x,
        samples,
    )
    assert_same(actual, expected)


def test_fractional_max_pool_ops_directly_match_cpu():
    x, s = rand(1, 2, 7, 7), fractional_samples(1, 2, 2)
    check(lambda t, r: torch.ops.aten.fractional_max_pool2d(t, [2, 2], [4, 4], r), x, s)
    check(
        lambda t, r, o, i: torch.ops.aten.fractional_max_pool2d.output(t, [2, 2], [4, 4], r, output=o, indices=i),
        x,
        s,
        torch.empty(0),
        torch.empty(0, dtype=torch.long),
    )
    values, indices = torch.ops.aten.fractional_max_pool2d(x, [2, 2], [4, 4], s)
    g = rand(*values.shape, seed=3)
    check(lambda gg, t, i: torch.ops.aten.fractional_max_pool2d_backward(gg, t, [2, 2], [4, 4], i), g, x, indices)
    check(
        lambda gg, t, i, o: torch.ops.aten.fractional_max_pool2d_backward.grad_input(
            gg, t, [2, 2], [4, 4], i, grad_input=o
        ),
        g,
        x,
        indices,
        torch.empty(0),
    )
    x3, s3 = rand(1, 2, 5, 6, 7), fractional_samples(1, 2, 3)
    values3, indices3 = torch.ops.aten.fractional_max_pool3d(x3, [2, 2, 2], [3, 4, 4], s3)
    check(
        lambda gg, t, i, o: torch.ops.aten.fractional_max_pool3d_backward.grad_input(
            gg, t, [2, 2, 2], [3, 4, 4], i, grad_input=o
        ),
        rand(*values3.shape, seed=4),
        x3,
        indices3,
        torch.empty(0),
    )


@pytest.mark.parametrize(
    "kernel,out",
    [((4, 4), (5, 5)), ((2, 2), (9, 4))],  # window plus output past the input; an output larger than the input
)
def test_fractional_max_pool2d_bad_sizes_raise_like_cpu(kernel, out):
    check(
        lambda t, s: F.fractional_max_pool2d(t, kernel, output_size=out, _random_samples=s),
        rand(1, 2, 7, 7),
        fractional_samples(1, 2, 2),
    )


# ---- unique along a dim (unique_dim, unique_consecutive with dim) ----


def repeated_rows():
    x = torch.tensor([[1, 2, 1, 1], [0, 2, 0, 0], [1, 2, 1, 1], [3, 3, 3, 3], [0, 2, 0, 0]])
    return x


@pytest.mark.parametrize("dim", [0, 1, -1])
@by_dtype((torch.int64, torch.float32, torch.float64, torch.int32, torch.uint8))
def test_unique_along_a_dim_matches_cpu(dim, dtype):
    x = repeated_rows().to(dtype)
    check(lambda t: torch.unique(t, dim=dim, return_inverse=True, return_counts=True), x)
    check(lambda t: torch.unique(t, dim=dim), x)
    check(lambda t: torch.unique_consecutive(t, dim=dim, return_inverse=True, return_counts=True), x)


def test_unique_along_a_dim_of_3d_bool_and_non_contiguous_inputs_matches_cpu():
    x = torch.randint(0, 2, (3, 4, 2), generator=torch.Generator().manual_seed(0))
    for dim in range(3):
        check(lambda t, d=dim: torch.unique(t, dim=d, return_inverse=True, return_counts=True), x)
        check(lambda t, d=dim: torch.unique(t, dim=d, return_inverse=True, return_counts=True), x.bool())
        check(lambda t, d=dim: torch.unique(t, dim=d, return_counts=True), x.transpose(0, 2))
        check(lambda t, d=dim: torch.unique_consecutive(t, dim=d, return_inverse=True), x.float())
    check(lambda t: torch.unique(t, dim=0, return_inverse=True, return_counts=True), torch.tensor([3, 1, 1, 2]))


def test_unique_along_a_dim_of_empty_inputs_matches_cpu():
    check(lambda t: torch.unique(t, dim=0, return_inverse=True, return_counts=True), torch.zeros(0, 3))
    check(lambda t: torch.unique(t, dim=0), torch.zeros(3, 0))  # raises on the CPU
    check(lambda t: torch.unique(t, dim=0), torch.zeros(0, 0))
    check(lambda t: torch.unique(t, dim=2), torch.zeros(2, 3))
