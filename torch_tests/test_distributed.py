"""torch.distributed with tiny tensors, 2 processes on 127.0.0.1: every collective gloo has, on tiny
tensors, leaves them as the same collective leaves the same tensors on the CPU (values, dtype, shape,
strides, the rest of a view's base), or raises the same error; DistributedDataParallel of a model on tiny
trains with the gradients and weights of a single-process run on the CPU.

The two processes start once for the whole file and run every check under "gloo" and under
"cpu:gloo,tiny:gloo" (and the checks that need no CPU collective under "tiny:gloo" and without a backend
string), one process group after the other; each pytest test then reads how its check went on both ranks."""

import json
import socket
import traceback
import warnings
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2
# Every dtype tiny holds (conftest's ALL_DTYPES). Not imported from conftest: the two processes import this
# module, and conftest would make each import torchvision too (3 s of CPU).
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32)
DTYPES += (torch.int64, torch.uint8, torch.bool)
# The backend strings every check runs under, then those without a CPU backend (None: init_process_group()
# picks the accelerator's, tiny's): there, only the checks that need no CPU collective run.
BACKENDS = ("gloo", "cpu:gloo,tiny:gloo", "tiny:gloo", None)
TINY_ONLY_BACKENDS = ("tiny:gloo", None)
TINY_ONLY_CHECKS = ("barrier", "ddp_trains_as_one_process")
# A check that hangs (one rank waiting for a collective the other never makes) fails after this.
COLLECTIVE_TIMEOUT = timedelta(seconds=30)
OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
    "avg": dist.ReduceOp.AVG,
}

CHECKS = {}


def check(fn, name=None):
    CHECKS[name or fn.__name__] = fn
    return fn


# ---------------------------------------------------------------------------------------------
# Comparing a collective on tiny tensors with the same collective on CPU tensors


def values(rank, shape, dtype=torch.float32, device="cpu"):
    """Different values on each rank, exact in every dtype."""
    n = torch.Size(shape).numel()
    x = (torch.arange(n) * 3 + rank * 7) % 11 + rank + 1
    if dtype == torch.bool:
        x = x % 2
    return x.reshape(shape).to(dtype).to(device)


def tensors_in(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in tensors_in(item)]
    return []


def run(collective, args):
    """The collective's exception (type and message), or None; waits for an async collective's work."""
    try:
        work = collective(*args)
        if isinstance(work, dist.Work):
            assert work.wait()
        return None
    except Exception as e:  # compared with the CPU's below
        return type(e).__name__, str(e)


def same_as_cpu(make, collective):
    """make(device) builds the collective's arguments (the same values on "cpu" and "tiny"); each tensor
    in them ends up as on the CPU, or both raise the same error."""
    cpu_args, tiny_args = make("cpu"), make("tiny")
    cpu_error, tiny_error = run(collective, cpu_args), run(collective, tiny_args)
    assert tiny_error == cpu_error
    for c, t in zip(tensors_in(cpu_args), tensors_in(tiny_args), strict=True):
        assert t.device.type == "tiny"
        assert (t.dtype, t.shape, t.stride(), t.storage_offset()) == (c.dtype, c.shape, c.stride(), c.storage_offset())
        torch.testing.assert_close(t.cpu(), c, rtol=0, atol=0, equal_nan=True)


def same_as_cpu_through_view(base, index, collective):
    """collective(base[index]) on tiny, a view that is not dense, writes into the view's elements what the
    collective gives a contiguous CPU copy of the view, and keeps the rest of the base. (gloo on the CPU
    reads and writes such a view as if it were dense: other elements of its base.)"""
    expected = base.clone()
    region = expected[index].contiguous()
    assert run(collective, [region]) is None
    expected[index] = region
    tiny = base.to("tiny")
    assert run(collective, [tiny[index]]) is None
    torch.testing.assert_close(tiny.cpu(), expected, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# The checks: each runs on both ranks, which make the same collectives in the same order


def all_reduce_check(dtype, op):
    def fn(rank):
        same_as_cpu(lambda d: [values(rank, (2, 3), dtype, d)], lambda t: dist.all_reduce(t, op=OPS[op]))

    return fn


for _dtype in DTYPES:
    for _op in OPS:
        check(all_reduce_check(_dtype, _op), f"all_reduce_{_op}_{str(_dtype).removeprefix('torch.')}")


@check
def all_reduce_async_work_waits_for_the_result_in_tiny_tensor(rank):
    def collective(t):
        work = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
        assert work.wait(timeout=timedelta(seconds=20))
        future = work.get_future()
        assert future.done()
        if t.device.type == "tiny":  # the future's value is the caller's tensor, not a host copy
            assert all(v is t for v in future.value())

    same_as_cpu(lambda d: [values(rank, (4, 5), device=d)], collective)


@check
def all_reduce_writes_through_a_view_and_keeps_the_rest_of_its_base(rank):
    same_as_cpu_through_view(values(rank, (4, 6)), (slice(1, 3), slice(None, None, 2)), dist.all_reduce)


@check
def all_reduce_of_a_transposed_tensor_keeps_its_strides(rank):
    same_as_cpu(lambda d: [values(rank, (3, 5), device=d).t()], lambda t: dist.all_reduce(t, async_op=True))


@check
def all_reduce_reads_pending_tiny_work(rank):
    # the input is a lazy result that no sync has computed yet
    same_as_cpu(lambda d: [values(rank, (8,), device=d).mul(2).add_(1)], lambda t: dist.all_reduce(t))


@check
def all_reduce_coalesced_of_several_tensors(rank):
    def make(device):
        return [[values(rank, (3,), device=device), values(rank, (2, 2), torch.int64, device)]]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates all_reduce_coalesced
        same_as_cpu(make, lambda ts: dist.all_reduce_coalesced(ts, dist.ReduceOp.MAX))


@check
def broadcast_from_each_rank(rank):
    for src in range(WORLD):
        same_as_cpu(lambda d: [values(rank, (3, 2), torch.int64, d)], lambda t, src=src: dist.broadcast(t, src))


@check
def broadcast_into_a_view(rank):
    def collective(view):
        return dist.broadcast(view, 1, async_op=True)

    same_as_cpu_through_view(values(rank, (5, 4), torch.float64), (slice(None), 1), collective)


@check
def broadcast_from_a_rank_outside_the_group_raises(rank):
    same_as_cpu(lambda d: [values(rank, (3,), device=d)], lambda t: dist.broadcast(t, WORLD))


@check
def reduce_to_each_rank(rank):
    for dst in range(WORLD):
        same_as_cpu(lambda d: [values(rank, (6,), device=d)], lambda t, dst=dst: dist.reduce(t, dst, dist.ReduceOp.MIN))


@check
def all_gather_into_a_list(rank):
    same_as_cpu(
        lambda d: [[torch.zeros(2, 3, device=d) for _ in range(WORLD)], values(rank, (2, 3), device=d)],
        lambda out, x: dist.all_gather(out, x),
    )


@check
def all_gather_into_views_of_one_tensor(rank):
    def make(device):
        out = torch.zeros(WORLD * 3, 2, device=device)
        return [out, list(out.chunk(WORLD)), values(rank, (3, 2), device=device)]

    same_as_cpu(make, lambda out, chunks, x: dist.all_gather(chunks, x, async_op=True))


@check
def all_gather_into_tensor_concatenated_and_stacked(rank):
    for shape in [(WORLD * 2, 3), (WORLD, 2, 3)]:

        def make(device, shape=shape):
            return [torch.zeros(shape, dtype=torch.int64, device=device), values(rank, (2, 3), torch.int64, device)]

        same_as_cpu(make, lambda out, x: dist.all_gather_into_tensor(out, x))


@check
def all_gather_into_tensor_of_the_wrong_size_raises(rank):
    same_as_cpu(
        lambda d: [torch.zeros(WORLD * 2 + 1, device=d), values(rank, (2,), device=d)],
        lambda out, x: dist.all_gather_into_tensor(out, x),
    )


@check
def all_gather_of_mismatched_dtypes_raises(rank):
    same_as_cpu(
        lambda d: [[torch.zeros(2, device=d, dtype=torch.int64) for _ in range(WORLD)], values(rank, (2,), device=d)],
        lambda out, x: dist.all_gather(out, x),
    )


@check
def reduce_scatter_from_a_list(rank):
    same_as_cpu(
        lambda d: [torch.zeros(3, device=d), [values(rank + i, (3,), device=d) for i in range(WORLD)]],
        lambda out, xs: dist.reduce_scatter(out, xs, dist.ReduceOp.SUM),
    )


@check
def reduce_scatter_tensor(rank):
    same_as_cpu(
        lambda d: [torch.zeros(2, 3, device=d), values(rank, (WORLD * 2, 3), device=d)],
        lambda out, x: dist.reduce_scatter_tensor(out, x, dist.ReduceOp.MAX, async_op=True),
    )


@check
def gather_to_each_rank(rank):
    for dst in range(WORLD):

        def make(device, dst=dst):
            out = [torch.zeros(4, device=device) for _ in range(WORLD)] if rank == dst else None
            return [out, values(rank, (4,), device=device)]

        same_as_cpu(make, lambda out, x, dst=dst: dist.gather(x, out, dst))


@check
def scatter_from_each_rank(rank):
    for src in range(WORLD):

        def make(device, src=src):
            xs = [values(rank + i, (2, 2), torch.float16, device) for i in range(WORLD)] if rank == src else None
            return [torch.zeros(2, 2, dtype=torch.float16, device=device), xs]

        same_as_cpu(make, lambda out, xs, src=src: dist.scatter(out, xs, src))


@check
def all_to_all_single_even_and_uneven_splits(rank):
    same_as_cpu(
        lambda d: [torch.zeros(WORLD * 2, device=d), values(rank, (WORLD * 2,), device=d)],
        lambda out, x: dist.all_to_all_single(out, x),
    )
    # rank r sends r + 1 + i elements to rank i
    out_splits = [i + 1 + rank for i in range(WORLD)]
    in_splits = [rank + 1 + i for i in range(WORLD)]
    same_as_cpu(
        lambda d: [torch.zeros(sum(out_splits), device=d), values(rank, (sum(in_splits),), device=d)],
        lambda out, x: dist.all_to_all_single(out, x, out_splits, in_splits),
    )


@check
def all_to_all_of_lists(rank):
    def make(device):
        outs = [torch.zeros(2, device=device) for _ in range(WORLD)]
        return [outs, [values(rank + i, (2,), device=device) for i in range(WORLD)]]

    same_as_cpu(make, lambda outs, xs: dist.all_to_all(outs, xs))


@check
def send_and_recv(rank):
    for tag, sender in enumerate(range(WORLD)):

        def make(device, sender=sender):
            x = values(rank, (3, 3), torch.int64, device)
            return [x if rank == sender else torch.zeros_like(x)]

        def collective(t, sender=sender, tag=tag):
            if rank == sender:
                dist.send(t, 1 - sender, tag=tag)
            else:
                dist.recv(t, sender, tag=tag)

        same_as_cpu(make, collective)


@check
def isend_and_irecv_into_a_view(rank):
    def make(device):
        base = values(rank, (4, 4), device=device)
        return [base, base[1]]

    def collective(base, row):
        work = dist.isend(row, 1) if rank == 0 else dist.irecv(row, 0)
        return work

    same_as_cpu(make, collective)


@check
def all_reduce_in_a_new_group(rank):
    group = dist.new_group(list(range(WORLD)))
    same_as_cpu(lambda d: [values(rank, (2, 2), device=d)], lambda t: dist.all_reduce(t, group=group))
    dist.destroy_process_group(group)


@check
def barrier(rank):
    dist.barrier()
    assert dist.barrier(async_op=True).wait()


# ---------------------------------------------------------------------------------------------
# DistributedDataParallel against a single process on the CPU

BATCH = 8  # per rank


class Net(nn.Module):
    def __init__(self, with_unused_layer):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = nn.Linear(4 * 6 * 6, 16)
        self.fc2 = nn.Linear(16, 5)
        if with_unused_layer:  # no gradient: find_unused_parameters=True lets DDP finish without it
            self.unused = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(F.relu(self.conv(x)).flatten(1))))


def ddp_check(steps=3, no_sync=False, comm_hook=None, **ddp_kwargs):
    def fn(rank):
        unused = ddp_kwargs.get("find_unused_parameters", False)
        torch.manual_seed(0)
        reference = Net(unused)  # the whole batch in one process, on the CPU
        torch.manual_seed(rank)  # rank 1 starts elsewhere: DDP broadcasts rank 0's weights
        model = DDP(Net(unused).to("tiny"), **ddp_kwargs)
        if comm_hook is not None:
            model.register_comm_hook(None, comm_hook)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (reference, model)]
        g = torch.Generator().manual_seed(1)
        for _ in range(steps):
            x, y = torch.randn(WORLD * BATCH, 1, 6, 6, generator=g), torch.randint(0, 5, (WORLD * BATCH,), generator=g)
            for opt in optimizers:
                opt.zero_grad()
            F.cross_entropy(reference(x), y).backward()
            mine = slice(rank * BATCH, (rank + 1) * BATCH)
            x, y = x[mine].to("tiny"), y[mine].to("tiny")
            if no_sync:  # half of this rank's batch without gradient sync, then the other half
                half = BATCH // 2
                with model.no_sync():
                    (F.cross_entropy(model(x[:half]), y[:half]) / 2).backward()
                (F.cross_entropy(model(x[half:]), y[half:]) / 2).backward()
            else:
                F.cross_entropy(model(x), y).backward()
            for (name, p), q in zip(model.module.named_parameters(), reference.parameters(), strict=True):
                assert (p.grad is None) == (q.grad is None), name
                if q.grad is not None:
                    torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)
            for opt in optimizers:
                opt.step()
        for p, q in zip(model.module.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)

    return fn


check(ddp_check(), "ddp_trains_as_one_process")
check(ddp_check(bucket_cap_mb=0.001), "ddp_with_one_bucket_per_parameter")
check(ddp_check(gradient_as_bucket_view=True), "ddp_with_gradient_as_bucket_view")
check(ddp_check(no_sync=True), "ddp_no_sync_accumulates_then_syncs")
check(ddp_check(find_unused_parameters=True), "ddp_with_find_unused_parameters")
# a Python hook: it all-reduces the bucket with async_op=True and reads the Work's future
check(ddp_check(comm_hook=default_hooks.allreduce_hook), "ddp_with_python_allreduce_comm_hook")


# ---------------------------------------------------------------------------------------------
# Two processes per backend string, every check in turn


def worker(rank, ports, out_dir):
    """One rank: every check under each backend string; writes how each went to <out_dir>/<rank>.json."""
    outcomes = {}
    for backend, port in zip(BACKENDS, ports, strict=True):
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD, timeout=COLLECTIVE_TIMEOUT
        )
        try:
            for name in checks_under(backend):
                try:
                    CHECKS[name](rank)
                    outcomes[f"{backend} {name}"] = "ok"
                except Exception:
                    outcomes[f"{backend} {name}"] = traceback.format_exc()
        finally:
            dist.destroy_process_group()
    (out_dir / f"{rank}.json").write_text(json.dumps(outcomes))


def checks_under(backend):
    return TINY_ONLY_CHECKS if backend in TINY_ONLY_BACKENDS else list(CHECKS)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every check's outcome on each rank: both processes start once for the whole file."""
    out_dir = tmp_path_factory.mktemp("distributed")
    mp.spawn(worker, args=([free_port() for _ in BACKENDS], out_dir), nprocs=WORLD, join=True)
    return [json.loads((out_dir / f"{rank}.json").read_text()) for rank in range(WORLD)]


@pytest.mark.parametrize(
    "backend,name", [(b, name) for b in BACKENDS for name in checks_under(b)], ids=lambda x: str(x).replace(" ", "")
)
def test_collective_on_tiny_matches_cpu(results, backend, name):
    for rank, outcomes in enumerate(results):
        outcome = outcomes.get(f"{backend} {name}", "did not run")
        assert outcome == "ok", f"rank {rank}:\n{outcome}"
