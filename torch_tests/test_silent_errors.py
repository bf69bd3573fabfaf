"""Classes of silent wrong results (issue #14), each proven over its whole class against the CPU:
a write after a lazy read, accumulating writes to one place, writes through a view of another
dtype, gradients of broadcasts, reloaded strided views, and special values."""

import io

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same, check_devices

# ---- a partial write into a storage leaves earlier lazy reads of it unchanged ----

PRODUCERS = {
    "sum": lambda x: x.sum(0),
    "cumsum": lambda x: x.cumsum(0)[1],
    "amax": lambda x: x.amax(0),
    "mm": lambda x: (x @ x.t())[0],
    "sort_values": lambda x: x.sort(1)[0][0],
    "sort_indices": lambda x: x.sort(1)[1][0].float(),
    "topk_indices": lambda x: x.topk(3, 1)[1][1].float(),
    "add": lambda x: (x + 1)[0],
    "softmax": lambda x: x.softmax(1)[1],
}
READERS = {
    "flip": lambda s: s.flip(0),
    "cat": lambda s: torch.cat([s, s[:1]]),
    "broadcast": lambda s: s.unsqueeze(0) * torch.ones(2, 1, device=s.device),
    "slice_copy": lambda s: s[1:].clone(),
    "roll": lambda s: s.roll(1),
}
WRITES = {
    "index_fill": lambda s: s.__setitem__(0, 100.0),
    "slice_mul": lambda s: s[1:].mul_(-2),
    "copy_into_view": lambda s: s[:2].copy_(torch.full((2,), 7.0, device=s.device)),
}


@pytest.mark.parametrize("write", WRITES, ids=str)
@pytest.mark.parametrize("reader", READERS, ids=str)
@pytest.mark.parametrize("producer", PRODUCERS, ids=str)
def test_partial_write_after_a_lazy_read_leaves_the_read_unchanged(producer, reader, write):
    def program(dev):
        s = PRODUCERS[producer](torch.arange(12.0).reshape(4, 3).to(dev) * 0.5)
        y = READERS[reader](s)
        WRITES[write](s)
        return y, s

    check_devices(program)


# ---- several writes to one place accumulate, in order ----


def test_put_accumulate_adds_every_duplicate_index():
    def program(dev):
        x = torch.zeros(1, device=dev)
        x.put_(torch.tensor([0, 0, 0], device=dev), torch.ones(3, device=dev), accumulate=True)
        y = torch.zeros(2, 3, device=dev)
        y.put_(torch.tensor([4, 4, -2, 0], device=dev), torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev), True)
        return x, y

    check_devices(program)


@pytest.mark.parametrize(
    "op",
    [
        lambda x, i, v: x.index_put_((i,), v, accumulate=True),
        lambda x, i, v: x.index_add_(0, i, v),
        lambda x, i, v: x.scatter_add_(0, i, v),
        lambda x, i, v: x.scatter_reduce_(0, i, v, "prod"),
        lambda x, i, v: x.scatter_reduce_(0, i, v, "amax", include_self=False),
    ],
    ids=["index_put_accumulate", "index_add_", "scatter_add_", "scatter_reduce_prod", "scatter_reduce_amax"],
)
def test_accumulating_scatters_into_one_place_combine_every_value(op):
    def program(dev):
        x = torch.full((3,), 2.0, device=dev)
        return op(x, torch.zeros(5, dtype=torch.long, device=dev), torch.arange(1.0, 6.0, device=dev))

    check_devices(program)


def test_take_gradient_adds_the_repeated_indices():
    def program(dev):
        x = torch.arange(6.0, device=dev).reshape(2, 3).requires_grad_()
        torch.take(x, torch.tensor([1, 1, 1, -1, 5], device=dev)).pow(2).sum().backward()
        return x.grad

    check_devices(program)


# ---- a write through a view of another dtype stores the view's bits ----

SAME_SIZE = [
    (torch.bool, torch.uint8),
    (torch.bool, torch.int8),
    (torch.uint8, torch.bool),
    (torch.int32, torch.float32),
    (torch.float32, torch.int32),
    (torch.int16, torch.float16),
    (torch.bfloat16, torch.int16),
    (torch.float16, torch.bfloat16),
    (torch.float64, torch.int64),
]


@pytest.mark.parametrize("base_dtype, view_dtype", SAME_SIZE, ids=lambda d: str(d).removeprefix("torch."))
def test_write_through_a_view_of_another_dtype_keeps_the_views_bits(base_dtype, view_dtype):
    def program(dev):
        base = torch.tensor([1, 0, 1, 1], dtype=torch.uint8).to(base_dtype).to(dev)
        v = base.view(view_dtype)
        v[0] = 5 if view_dtype != torch.bool else True
        v[2:].fill_(3 if view_dtype != torch.bool else False)
        return v.clone(), base.view(view_dtype).clone()

    check_devices(program)


@pytest.mark.parametrize("base_dtype", [torch.int64, torch.int16, torch.uint8, torch.float32], ids=str)
@pytest.mark.parametrize(
    "op",
    [
        lambda b: b.square(),
        lambda b: b.sum(0),
        lambda b: b.to(torch.int32),
        lambda b: b.float() * 2,
        lambda b: torch.where(b, 1, 0),
        lambda b: b & b.flip(0),
        lambda b: b.long().cumsum(0),
    ],
    ids=["square", "sum", "to_int32", "to_float", "where", "and", "cumsum"],
)
def test_bool_view_of_bytes_other_than_0_and_1_reads_them_as_true(base_dtype, op):
    def program(dev):
        base = torch.tensor([3, -3, 2, 0, 1, -128], dtype=torch.int64).to(base_dtype).to(dev)
        return op(base.view(torch.bool))

    check_devices(program)


@pytest.mark.parametrize("n", [8, 40, 100])
def test_a_long_bool_view_of_bytes_sums_them_as_true(n):
    # a sum over 64 or more bytes steps in vector lanes, which a bool view's reinterpretation has none of: it
    # raised "render_c: no BITCAST over lanes" at the sync
    def program(dev):
        base = (torch.arange(n, dtype=torch.int64) * 7 - 20).to(dev)
        b = base.view(torch.bool)
        return b.sum(), b.view(8, n).sum(1), b.float().sum()

    check_devices(program)


BOOL_WRITES = {
    "index_put": lambda b: b.index_put_((torch.tensor([0, 3, 1]).to(b.device),), torch.tensor(False).to(b.device)),
    "index_put_accumulate": lambda b: b.index_put_(
        (torch.tensor([0, 3, 0]).to(b.device),), torch.tensor(True).to(b.device), accumulate=True
    ),
    "setitem_slice": lambda b: b.__setitem__((slice(1, 3), slice(None, None, 3)), False),
    "masked_fill": lambda b: b.masked_fill_(torch.eye(4, 16, dtype=torch.bool).to(b.device), True),
    "scatter": lambda b: b.scatter_(1, torch.tensor([[2], [5], [0], [1]]).to(b.device), True),
}


@pytest.mark.parametrize("write", BOOL_WRITES, ids=str)
@pytest.mark.parametrize("base_dtype", [torch.float32, torch.int32, torch.uint8], ids=str)
def test_a_write_through_a_bool_view_keeps_the_other_bytes(base_dtype, write):
    def program(dev):
        base = torch.tensor([4.0, 3.0, 0.0, 1.0, 5.0, 0.0, 5.0, 9.0, 4.0, 0.0, 4.0, 9.0, 0.0, 7.0, 9.0, 3.0])
        base = base.to(base_dtype).to(dev)
        if base_dtype == torch.uint8:
            base = base.repeat(4)
        bools = base.view(torch.bool).reshape(4, 16)
        BOOL_WRITES[write](bools)
        return base, bools.clone()

    check_devices(program)


def test_a_write_through_a_half_view_keeps_the_nan_payloads_of_the_other_elements():
    def program(dev):
        base = torch.tensor([3, -3, 3, -3, 3, -3], dtype=torch.int64).to(dev).reshape(3, 2)
        halves = base.view(torch.float16)
        halves[1:2] = 2.0
        bf = torch.tensor([-1, 0x7F81, 0x7FC0, 5], dtype=torch.int16).to(dev)
        bf.view(torch.bfloat16)[3] = 1.0
        return base, bf, halves.clone().view(torch.int16)

    check_devices(program)


@pytest.mark.parametrize("to", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16], ids=str)
def test_a_float_cast_out_of_the_int_range_gives_the_cpus_value(src, to):
    # C++ leaves it undefined; torch's CPU (x86) converts through 32 bits (64 for int64) and an out-of-range
    # value becomes the minimum: tiny gives the same on every target
    def program(dev):
        big = 6e4 if src == torch.float16 else 5e9
        x = torch.tensor(
            [-float("inf"), float("inf"), float("nan"), big, -big, 300.0, -1.5, 70000.5], dtype=torch.float64
        )
        x = x.to(src).to(dev)
        return x.to(to), x.sum(0, keepdim=True, dtype=to) if to != torch.uint8 else x[:1].to(to)

    check_devices(program)


# ---- gradients of broadcasts sum over every broadcast element ----


@pytest.mark.parametrize(
    "shape, to",
    [((1, 1, 1, 1), (4, 3, 2, 6)), ((1,), (5, 7)), ((1, 1), (3, 4)), ((3, 1, 1), (2, 3, 4, 5)), ((), (2, 3))],
    ids=str,
)
def test_gradient_of_an_expand_sums_every_broadcast_element(shape, to):
    def program(dev):
        x = torch.rand(shape, generator=torch.Generator().manual_seed(0)).to(dev).requires_grad_()
        x.expand(*to).sum().backward()
        g1 = x.grad.clone()
        x.grad = None
        (x.expand(*to) * torch.arange(float(torch.Size(to).numel())).reshape(to).to(dev)).sum().backward()
        return g1, x.grad

    check_devices(program)


@pytest.mark.parametrize(
    "stride, output_padding, width",
    [((2, 3), (1, 1), 5), ((2, 2), (1, 0), 5), ((3, 3), (2, 2), 4), ((1, 2), (0, 1), 7), ((2, 3), (1, 1), 6)],
    ids=str,
)
def test_conv_transpose_gradients_with_output_padding(stride, output_padding, width):
    def program(dev):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 4, 6, width, generator=g).to(dev).requires_grad_()
        w = torch.randn(4, 4, 3, 3, generator=g).to(dev).requires_grad_()
        b = torch.randn(4, generator=g).to(dev).requires_grad_()
        y = F.conv_transpose2d(x, w, b, output_padding=output_padding, stride=stride)
        y.sum().backward()
        return y, x.grad, w.grad, b.grad

    check_devices(program, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [1, 7, 15, 16, 17, 31, 32, 33, 48])
def test_sum_over_all_but_one_dim_of_any_width(width):
    def program(dev):
        go = torch.randn(2, 4, 14, width, generator=torch.Generator().manual_seed(0)).to(dev)
        return go.sum((0, 2, 3)), go.sum((0, 2)), go.sum((0, 3))

    check_devices(program, rtol=1e-5, atol=1e-4)


# ---- torch.save / torch.load of strided views ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_load_without_map_location_restores_strided_views(dtype):
    base = torch.arange(6.0).to(dtype).to(DEVICE).reshape(2, 3)
    views = [base[:, 1:], base.t(), base[1], base[:, ::2]]
    buf = io.BytesIO()
    torch.save(views, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    cpu = base.cpu()
    for got, want in zip(loaded, [cpu[:, 1:], cpu.t(), cpu[1], cpu[:, ::2]], strict=True):
        assert_same(got, want)
    assert loaded[0].untyped_storage().data_ptr() == loaded[1].untyped_storage().data_ptr()


# ---- special values ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_pow_of_special_values_follows_torchs_sqrt_and_reciprocal_rules(dtype):
    """float32 and bfloat16 take 0.5 and -0.5 as sqrt (pow(-inf, 0.5) is NaN); float16 as C's pow (inf; fuzzer seed
    16599), in a vector kernel (36 elements) as in a single element."""

    def program(dev):
        x = torch.tensor([-float("inf"), -4.0, -0.0, 0.0, 4.0, float("inf"), float("nan")], dtype=dtype, device=dev)
        return [t.pow(e) for e in (0.5, -0.5, 2, -2, 3, 0, 1, -1, 0.3) for t in (x, x.repeat(6))]

    check_devices(program)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_var_mean_of_rows_with_infinities(dtype):
    def program(dev):
        x = torch.tensor([[1.0, float("inf"), 2.0], [float("-inf"), 1.0, 1.0], [1.0, 2.0, 3.0]], dtype=dtype)
        x = x.to(dev)
        return torch.var_mean(x, 1), torch.std_mean(x, 0), x.var(), x.mean(1)

    check_devices(program)


def test_group_norm_with_infinite_weights_gives_torchs_nans():
    def program(dev):
        x = torch.tensor([4.0, 3.0, 0.0, 3.0]).reshape(1, 2, 2).to(dev)
        w, b = torch.tensor([-float("inf"), float("inf")]).to(dev), torch.tensor([-2.0, 2.0]).to(dev)
        return F.group_norm(x, 1, w, b), F.group_norm(x, 2, torch.tensor([1.0, float("inf")]).to(dev))

    check_devices(program)


@pytest.mark.parametrize(
    "sizes, strides", [((5, 1), (1, 5)), ((1, 4), (7, 1)), ((3, 1, 2), (2, 9, 1)), ((1, 1), (3, 8))], ids=str
)
def test_results_keep_the_layout_torch_gives_operands_with_odd_size_1_strides(sizes, strides):
    def program(dev):
        a = torch.arange(1, 11).to(dev).as_strided(sizes, strides)
        return a // torch.ones(1, 1, device=dev), a * 2, a + a, a.float().exp()

    check_devices(program)


@pytest.mark.parametrize("op", ["le", "lt", "eq", "add", "mul", "maximum"])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
def test_a_0d_float32_operand_is_rounded_to_the_half_common_dtype(op, half):
    def program(dev):
        t0 = torch.tensor(1.94).to(dev)
        t1 = torch.tensor([[1.9404296875, 1.9375, 1.95]], dtype=half).to(dev)
        return getattr(torch, op)(t1, t0), getattr(torch, op)(t0, t1)

    check_devices(program)
