"""Ops record lazily; a sync runs them as few fused kernels; compiled programs are cached in memory
and on disk. Inputs are realized before counting, so counts cover only the computation itself."""

import gc
import json
import os
import random

import torch
from conftest import DEVICE, assert_same, counting
from test_device import run_python


def inputs(*shapes, seed=0):
    """CPU tensors and realized tiny copies of them."""
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(*shape, generator=g) for shape in shapes]
    tiny = [c.to(DEVICE) for c in cpu]
    torch.tiny.synchronize()
    return cpu, tiny


def test_ops_record_without_running_until_a_sync():
    _, (a, b) = inputs((64,), (64,))
    with counting() as c:
        y = (a + b).exp()
        y.mul_(2)
        z = y[::2] - 1
        assert c["kernels"] == 0, "a kernel ran before any sync"
        assert c["syncs"] == 0
        z.cpu()
        assert c["kernels"] >= 1


def test_fused_elementwise_chain_runs_as_one_kernel():
    (ca, cb, cc), (a, b, c_) = inputs((32, 32), (32, 32), (32, 32))
    with counting() as c:
        result = ((a + b) * c_).relu().sigmoid().cpu()
    assert c["kernels"] == 1, f"{c['kernels']} kernels"
    torch.testing.assert_close(result, ((ca + cb) * cc).relu().sigmoid())


def test_chain_of_inplace_ops_runs_as_one_kernel():
    (cx,), (x,) = inputs((1000,))
    with counting() as c:
        x.add_(1)
        x.mul_(2)
        x.clamp_(0, 3)
        result = x.cpu()
    assert c["kernels"] == 1, f"{c['kernels']} kernels"
    torch.testing.assert_close(result, ((cx + 1) * 2).clamp(0, 3))


def test_value_nobody_reads_is_never_computed():
    (cx,), (x,) = inputs((256,))
    with counting() as c:
        unused = (x * 3).exp()
        del unused
        result = (x + 1).cpu()
    assert c["kernels"] == 1, f"{c['kernels']} kernels"
    torch.testing.assert_close(result, cx + 1)


def test_dropped_computation_runs_nothing_at_synchronize():
    _, (x,) = inputs((256,))
    with counting() as c:
        y = (x - 2).sqrt()
        del y
        gc.collect()
        torch.tiny.synchronize()
    assert c["kernels"] == 0, f"{c['kernels']} kernels"


def test_synchronize_realizes_every_live_pending_tensor():
    (cx,), (x,) = inputs((128,))
    with counting() as c:
        y = x * 2
        z = x.exp()
        torch.tiny.synchronize()
        ran = c["kernels"]
        assert ran >= 1
        assert_same(y, cx * 2)
        assert_same(z, cx.exp())
    assert c["kernels"] == ran, "reading realized tensors ran kernels again"


def test_item_is_a_sync_point():
    (cx,), (x,) = inputs((4,))
    with counting() as c:
        y = x * 5
        assert y[1].item() == (cx * 5)[1].item()
    assert c["syncs"] >= 1 and c["kernels"] >= 1


def test_print_is_a_sync_point():
    (cx,), (x,) = inputs((4,))
    with counting() as c:
        text = repr(x + 7)
    assert text.replace(", device='tiny:0'", "") == repr(cx + 7)
    assert c["syncs"] >= 1 and c["kernels"] >= 1


def test_same_computation_again_compiles_nothing():
    def step(a, b):
        return ((a * b + 0.5).tanh() - a).abs().cpu()

    _, (a, b) = inputs((48, 8), (48, 8), seed=1)
    step(a, b)
    (ca, cb), (a2, b2) = inputs((48, 8), (48, 8), seed=2)
    with counting() as c:
        result = step(a2, b2)
    assert c["compiles"] == 0, f"{c['compiles']} programs compiled for a computation already seen"
    assert c["kernels"] == 1
    assert c["cache_hits"] >= 1
    torch.testing.assert_close(result, ((ca * cb + 0.5).tanh() - ca).abs())


def test_new_scalar_values_reuse_the_compiled_program():
    # Values no earlier run has seen, so the on-disk cache cannot hide a recompile.
    rng = random.Random(os.urandom(8))
    scalars = [round(rng.uniform(-100, 100), 3) for _ in range(4)]
    (cx,), (x,) = inputs((40,), seed=3)
    (x * scalars[0] + (scalars[0] - 1)).cpu()
    with counting() as c:
        results = [(x * s + (s - 1)).cpu() for s in scalars[1:]]
    assert c["compiles"] == 0, f"{c['compiles']} compiles for new scalar values {scalars[1:]}"
    for s, r in zip(scalars[1:], results, strict=True):
        torch.testing.assert_close(r, cx * s + (s - 1))


CACHE_SCRIPT = """
import json
import torch
import torch_tiny
a = torch.arange(37, dtype=torch.float32, device="tiny")
torch.tiny.synchronize()
torch.tiny.reset_stats()
r = ((a * 3 - 50).abs() + 0.5).sqrt().cos().cpu()
expected = ((torch.arange(37, dtype=torch.float32) * 3 - 50).abs() + 0.5).sqrt().cos()
print(json.dumps({"compiles": torch.tiny.stats()["compiles"], "kernels": torch.tiny.stats()["kernels"],
                  "close": torch.allclose(r, expected)}))
"""


def test_new_process_with_the_same_cache_dir_compiles_nothing(tmp_path):
    cache = str(tmp_path / "tiny-cache")
    first = json.loads(run_python(CACHE_SCRIPT, TINY_CACHE_DIR=cache).strip().splitlines()[-1])
    second = json.loads(run_python(CACHE_SCRIPT, TINY_CACHE_DIR=cache).strip().splitlines()[-1])
    assert first["close"] and second["close"]
    assert first["compiles"] >= 1, "an empty cache dir should need a compile"
    assert second["compiles"] == 0, f"second process compiled {second['compiles']} programs"
    assert second["kernels"] == first["kernels"] == 1


def test_an_empty_cache_dir_variable_means_the_default_cache(tmp_path):
    # TINY_CACHE_DIR= (set, empty) is read as unset, as XDG's variables are: ~/.cache/tiny, not a crash.
    first = json.loads(run_python(CACHE_SCRIPT, TINY_CACHE_DIR="", HOME=str(tmp_path)).strip().splitlines()[-1])
    assert first["close"] and first["compiles"] >= 1
    assert list((tmp_path / ".cache" / "tiny").glob("*.so")), "no kernel kept under $HOME/.cache/tiny"


def test_a_damaged_cached_kernel_is_compiled_again(tmp_path):
    # A binary that does not load (or lacks its kernel, as a race of two processes once left) is replaced:
    # the CPU device's shared libraries, the CL device's program binaries.
    cache = tmp_path / "tiny-cache"
    first = json.loads(run_python(CACHE_SCRIPT, TINY_CACHE_DIR=str(cache)).strip().splitlines()[-1])
    libraries = list(cache.glob("*.so")) + list(cache.glob("cl/*.bin"))
    assert libraries and first["close"]
    for so in libraries:
        so.write_bytes(b"not a shared library")
    second = json.loads(run_python(CACHE_SCRIPT, TINY_CACHE_DIR=str(cache)).strip().splitlines()[-1])
    assert second["close"]
    assert second["compiles"] == first["compiles"]
    assert not list(cache.glob("*.[0-9]*")), "per-process temporary files left in the cache"


DEBUG_SCRIPT = """
import torch
import torch_tiny
a = torch.arange(8, dtype=torch.float32, device="tiny")
print("RESULT", ((a * 2 + 1).sqrt() - a).cpu().tolist())
"""


def test_tiny_debug_prints_syncs_and_more_detail_at_higher_levels(tmp_path):
    def output(level):
        cache = str(tmp_path / f"cache{level}")  # fresh: every kernel compiles
        return run_python(DEBUG_SCRIPT, with_stderr=True, TINY_CACHE_DIR=cache, TINY_DEBUG=str(level))

    quiet, level1, level3 = output(0), output(1), output(3)
    assert len(level1.splitlines()) > len(quiet.splitlines()), "TINY_DEBUG=1 printed nothing"
    assert len(level3) > len(level1), "TINY_DEBUG=3 printed no more than TINY_DEBUG=1"
    assert "{" in level3, "TINY_DEBUG=3 printed no generated source"


def test_a_replayed_schedule_reuses_the_memory_of_dead_intermediates():
    """Six matmuls in a chain: each product is realized (the next one reduces it), and once the next
    has read it, its memory goes back for the ones after. peak_bytes counts what is live at once."""
    cpu, (x, w) = inputs((256, 256), (256, 256))
    block = 256 * 256 * 4

    def run(x):
        for _ in range(6):
            x = (x @ w).relu() * 0.1
        torch.tiny.synchronize()
        return x

    run(x)  # schedules and compiles
    torch.tiny.reset_stats()
    got = run(x)
    stats = torch.tiny.stats()
    assert stats["schedule_hits"] == 1
    # the inputs, the result, and at most two intermediates at once (one read, one written)
    assert stats["peak_bytes"] - stats["live_bytes"] <= 2 * block, stats
    want = cpu[0]
    for _ in range(6):
        want = (want @ cpu[1]).relu() * 0.1
    assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_program_and_schedule_caches_are_bounded():
    """A process that runs many distinct kernels keeps only so many loaded (on the CPU each is a
    dlopen'ed library, and a process can map only so many): TINY_MAX_PROGRAMS and TINY_MAX_SCHEDULES."""
    out = run_python(
        """
        import torch
        ops = [lambda t: t * 0.5 + 1, lambda t: (t + 1).sqrt(), lambda t: t.abs() - 0.25]
        for i in range(30):
            x, expected = torch.arange(8.0, device="tiny"), torch.arange(8.0)
            for _ in range(i % 10 + 1):  # 30 distinct fused kernels
                x, expected = ops[i // 10](x), ops[i // 10](expected)
            torch.testing.assert_close(x.cpu(), expected)
            assert torch.tiny.stats()["loaded_programs"] <= 4 + 2, torch.tiny.stats()
        print(torch.tiny.stats()["kernels"])
        """,
        TINY_MAX_PROGRAMS="4",
        TINY_MAX_SCHEDULES="2",
    )
    assert int(out.split()[-1]) >= 30


def manual_sgd(device, steps, sync_each_step=False):
    """A hand-written training loop: no torch.optim, updates under no_grad, no .item() unless asked."""
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(16, 32, generator=g) * 0.1).to(device).requires_grad_()
    w2 = (torch.randn(32, 4, generator=g) * 0.1).to(device).requires_grad_()
    x, y = torch.randn(8, 16, generator=g).to(device), torch.randint(0, 4, (8,), generator=g).to(device)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy((x @ w1).relu() @ w2, y)
        loss.backward()
        with torch.no_grad():
            for p in (w1, w2):
                p -= 0.1 * p.grad
                p.grad = None
        if sync_each_step:
            loss.item()
    return w1, w2, loss


def test_unsynced_training_loop_matches_cpu():
    expected = manual_sgd("cpu", 25)
    got = manual_sgd(DEVICE, 25)
    for a, e in zip(got, expected, strict=True):
        torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=1e-4, atol=1e-5)


def test_unsynced_loop_runs_as_many_kernels_per_step_as_a_synced_one():
    # A parameter updated step after step is a chain p - lr * g; inlined into every later step, the work
    # (and the kernels' size) would grow with the square of the steps.
    def kernels(steps, sync):
        manual_sgd(DEVICE, 1, sync)  # compiles
        with counting() as c:
            w1, w2, loss = manual_sgd(DEVICE, steps, sync)
            loss.item()
        return c["kernels"]

    synced, unsynced_20, unsynced_40 = kernels(20, True), kernels(20, False), kernels(40, False)
    assert unsynced_20 <= synced, (unsynced_20, synced)
    assert unsynced_40 <= 2 * unsynced_20 + 4, (unsynced_20, unsynced_40)


def test_a_long_pending_graph_is_realized_on_its_own():
    """60 steps of a loop that never syncs (cross_entropy's target check computes its own kernel and
    realizes nothing) grow past 600 live graph nodes a few times: each time the next read realizes them."""
    out = run_python(
        f"""
        import torch, torch_tiny, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from test_laziness import manual_sgd
        torch.tiny.reset_stats()
        w1, w2, loss = manual_sgd("tiny", 60)
        syncs_before_reading = torch.tiny.stats()["syncs"]
        print(syncs_before_reading, loss.item())
        """,
        TINY_MAX_PENDING_UOPS="600",
    )
    syncs, loss = out.split()
    assert int(syncs) >= 2, f"{syncs} syncs: the pending graph was never realized on its own"
    expected = manual_sgd("cpu", 60)[2].item()
    assert abs(float(loss) - expected) <= 1e-4 * max(1.0, abs(expected))


def test_a_graph_realized_on_its_own_is_not_computed_again():
    """A chain whose every op reads its operand twice (maximum(y, y[0])) past the pending-graph limit:
    each automatic sync realizes the chain once. Realized between an op's two reads, the op's first
    operand stayed on the old graph and its result held the whole chain again: from there on a sync every
    32 ops, each computing the chain anew (here 47 syncs and 14,981 kernels; 1.4 s a sync at the default
    limit)."""
    out = run_python(
        """
        import json, torch, torch_tiny
        cpu = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
        y = cpu.to("tiny")
        torch.tiny.synchronize()
        torch.tiny.reset_stats()
        for _ in range(3000):
            y = torch.maximum(y, y[0])
            cpu = torch.maximum(cpu, cpu[0])
        stats = torch.tiny.stats()
        print(json.dumps({"syncs": stats["syncs"], "kernels": stats["kernels"], "equal": torch.equal(y.cpu(), cpu)}))
        """,
        TINY_MAX_PENDING_UOPS="3000",
    )
    r = json.loads(out)
    assert 1 <= r["syncs"] <= 4, r
    assert r["kernels"] <= 1000, r
    assert r["equal"], r
