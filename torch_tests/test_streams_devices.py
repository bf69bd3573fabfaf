"""Streams, events and several tiny devices, as torch.cuda's users meet them.

The tests that need two devices run when TINY_CPU_DEVICES=2 was set before tiny loaded: the suite's own
process has one device, so `test_two_device_tests_pass_with_two_cpu_devices` runs this file again in a
subprocess with two CPU devices, and those tests skip here.
"""

import os
import subprocess
import sys

import pytest
import torch
from conftest import assert_same, rand

TWO_DEVICES = torch.tiny.device_count() >= 2
two_devices = pytest.mark.skipif(
    not TWO_DEVICES, reason="needs TINY_CPU_DEVICES=2 (run by test_two_device_tests_pass_with_two_cpu_devices)"
)
SAME_DEVICE = "Expected all tensors to be on the same device"


def timed(work, x):
    """Milliseconds between two timing events around `work(x)`, the smallest of three runs after a warm-up
    (the first run compiles)."""
    work(x).cpu()
    times = []
    for _ in range(3):
        start, end = torch.Event(device="tiny", enable_timing=True), torch.Event(device="tiny", enable_timing=True)
        start.record()
        y = work(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        del y
    return min(times)


def matmuls(x):
    for _ in range(4):
        x = torch.tanh(x @ x)
    return x


# ---- events ----


def test_event_record_runs_the_pending_work():
    x = torch.ones(64, device="tiny") * 3
    kernels = torch.tiny.stats()["kernels"]
    event = torch.Event(device="tiny")
    event.record()
    assert torch.tiny.stats()["kernels"] > kernels  # the work recorded before the event ran at record()
    event.synchronize()  # a GPU-style queue may still be running it at record(): query() is true once it passed
    assert event.query()
    assert_same(x, torch.ones(64) * 3)


def test_event_that_was_never_recorded_is_complete():
    event = torch.Event(device="tiny")
    assert event.query()
    event.synchronize()


def test_event_wait_orders_work_on_another_stream():
    x = rand(32, 32).to("tiny")
    side = torch.tiny.Stream()
    y = x * 2
    done = torch.tiny.Event()
    done.record()
    done.wait(side)
    with torch.tiny.stream(side):
        z = y + 1
    assert_same(z, rand(32, 32) * 2 + 1)


def test_elapsed_time_of_device_work_is_positive():
    assert timed(matmuls, rand(128, 128).to("tiny") / 128) > 0


def test_elapsed_time_grows_with_the_work():
    small = timed(matmuls, rand(32, 32).to("tiny") / 32)
    big = timed(matmuls, rand(512, 512).to("tiny") / 512)  # 4096 times the multiply-adds
    assert big > 2 * small


def test_elapsed_time_needs_timing_events():
    start, end = torch.Event(device="tiny"), torch.Event(device="tiny")
    start.record()
    end.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        start.elapsed_time(end)


def test_elapsed_time_needs_recorded_events():
    start, end = torch.tiny.Event(enable_timing=True), torch.tiny.Event(enable_timing=True)
    start.record()
    with pytest.raises(ValueError, match="must be recorded"):
        start.elapsed_time(end)


def test_tiny_event_records_on_a_stream():
    s = torch.tiny.Stream()
    event = s.record_event()
    assert isinstance(event, torch.Event)
    event.synchronize()  # on a GPU-style queue, earlier work may still be running at record
    assert event.query()
    event = torch.tiny.Event(enable_timing=True)
    event.record(s)
    assert event.device == torch.device("tiny", 0)


def test_event_synchronize_and_elapsed_time_read_the_device_markers():
    start, end = torch.tiny.Event(enable_timing=True), torch.tiny.Event(enable_timing=True)
    start.record()
    y = matmuls(rand(256, 256).to("tiny") / 256)
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) > 0
    assert end.elapsed_time(start) < 0  # markers keep their order
    assert_same(y, matmuls(rand(256, 256) / 256), atol=1e-4, rtol=1e-4)


# ---- out of memory ----


def test_out_of_memory_raises_torchs_error_and_the_rest_survives():
    kept = torch.arange(6.0, device="tiny") * 2
    kept.cpu()
    huge = torch.ones(2**50, dtype=torch.uint8, device="tiny")  # a PiB: memory is taken at the sync
    with pytest.raises(torch.OutOfMemoryError, match="out of memory allocating"):
        huge[0].item()
    del huge
    assert torch.tiny.memory_stats()["num_ooms"] >= 1
    assert_same(kept + 1, torch.arange(6.0) * 2 + 1)


# ---- streams ----


def test_default_stream_is_the_current_stream():
    current = torch.tiny.current_stream()
    assert isinstance(current, torch.tiny.Stream)
    assert current == torch.tiny.default_stream()
    assert current.stream_id == 0
    assert current.device == torch.device("tiny", 0)


def test_new_streams_have_their_own_ids():
    a, b = torch.tiny.Stream(), torch.Stream(device="tiny")
    assert a.stream_id != 0 and b.stream_id != 0 and a.stream_id != b.stream_id
    assert a != b and a != torch.tiny.default_stream()
    assert a.device == b.device == torch.device("tiny", 0)


def test_stream_context_makes_the_stream_current_and_restores():
    s = torch.tiny.Stream()
    with torch.tiny.stream(s) as entered:
        assert entered == s
        assert torch.tiny.current_stream() == s
        assert torch.accelerator.current_stream() == s
        y = rand(8).to("tiny") + 1
    assert torch.tiny.current_stream() == torch.tiny.default_stream()
    assert_same(y, rand(8) + 1)
    with torch.tiny.stream(None):
        assert torch.tiny.current_stream() == torch.tiny.default_stream()


def test_torch_stream_is_a_context_manager():
    s = torch.Stream(device="tiny")
    with s:
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_stream().stream_id == 0


def test_set_stream_changes_the_current_stream():
    s = torch.tiny.Stream()
    torch.tiny.set_stream(s)
    try:
        assert torch.tiny.current_stream() == s
    finally:
        torch.tiny.set_stream(torch.tiny.default_stream())
    assert torch.tiny.current_stream().stream_id == 0


def test_stream_query_and_synchronize_run_the_pending_work():
    s = torch.tiny.Stream()
    with torch.tiny.stream(s):
        y = rand(16).to("tiny").exp()
    kernels = torch.tiny.stats()["kernels"]
    assert s.query()
    assert torch.tiny.stats()["kernels"] > kernels
    z = y * 2
    s.synchronize()
    assert_same(z, rand(16).exp() * 2)


def test_wait_stream_keeps_values_in_order():
    main, side = torch.tiny.current_stream(), torch.tiny.Stream()
    x = rand(64).to("tiny")
    x.add_(1)
    side.wait_stream(main)
    with torch.tiny.stream(side):
        x.mul_(3)
    main.wait_stream(side)
    assert_same(x, (rand(64) + 1) * 3)


def test_accelerator_api_uses_tiny_streams():
    assert torch.accelerator.current_accelerator() == torch.device("tiny")
    assert torch.accelerator.current_stream().device.type == "tiny"
    x = rand(10).to("tiny") * 2
    kernels = torch.tiny.stats()["kernels"]
    torch.accelerator.synchronize()
    assert torch.tiny.stats()["kernels"] > kernels
    assert_same(x, rand(10) * 2)


# ---- several devices ----


def test_two_device_tests_pass_with_two_cpu_devices():
    if TWO_DEVICES:
        pytest.skip("this process has two devices: the tests below ran here")
    env = {**os.environ, "TINY_CPU_DEVICES": "2", "TINY_DEVICE": "CPU"}  # two CPU devices, whatever this run's device
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "on_two_devices"],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(__file__),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]


@two_devices
def test_device_count_on_two_devices():
    assert torch.tiny.device_count() == 2
    assert torch.accelerator.device_count() == 2
    assert torch.tiny.get_device_name(1) == torch.tiny.get_device_name(0)


@two_devices
def test_copies_between_devices_on_two_devices():
    x = rand(5, 7)
    a = x.to("tiny:0")
    b = a.to("tiny:1")
    assert b.device == torch.device("tiny", 1)
    assert_same(b, x)
    back = (b * 2).to("tiny:0")
    assert back.device == torch.device("tiny", 0)
    assert_same(back, x * 2)
    c = torch.empty(5, 7, device="tiny:1")
    c.copy_(a.t().t() + 1)
    assert_same(c, x + 1)
    assert_same(b[1:3, ::2].to("tiny:0"), x[1:3, ::2].contiguous())


@two_devices
def test_work_on_both_devices_at_one_sync_on_two_devices():
    x = rand(300)
    a, b = x.to("tiny:0").exp(), (x.to("tiny:1") * 3).sum()
    c = torch.ones(4, device="tiny:1") * 2  # reads no buffer: still computed on tiny:1
    torch.tiny.synchronize()
    assert a.device.index == 0 and b.device.index == 1 and c.device.index == 1
    assert_same(a, x.exp())
    assert_same(b, (x * 3).sum())
    assert_same(c, torch.ones(4) * 2)


@two_devices
def test_device_context_and_set_device_on_two_devices():
    assert torch.tiny.current_device() == 0
    with torch.tiny.device(1):
        assert torch.tiny.current_device() == 1
        assert torch.empty(3, device="tiny").device == torch.device("tiny", 1)
        assert torch.zeros(3, device="tiny").to("tiny").device == torch.device("tiny", 1)
    assert torch.tiny.current_device() == 0
    torch.tiny.set_device(1)
    try:
        assert torch.accelerator.current_device_index() == 1
        assert torch.randn(2, device="tiny").device.index == 1
    finally:
        torch.tiny.set_device(0)
    with torch.accelerator.device_index(1):
        assert torch.tiny.current_device() == 1
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.tiny.set_device(2)


@two_devices
def test_module_moves_to_the_second_device_on_two_devices():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = rand(3, 6)
    want = model(x)
    model.to("tiny:1")
    assert all(p.device == torch.device("tiny", 1) for p in model.parameters())
    got = model(x.to("tiny:1"))
    assert got.device == torch.device("tiny", 1)
    assert_same(got, want)


@two_devices
def test_generators_per_device_on_two_devices():
    assert len(torch.tiny.default_generators) == 2
    torch.tiny.manual_seed_all(7)
    first = torch.rand(6, device="tiny:0").cpu()
    second = torch.rand(6, device="tiny:0").cpu()
    # tiny:1's generator did not advance with tiny:0's, and manual_seed_all seeded it the same
    assert torch.equal(torch.rand(6, device="tiny:1").cpu(), first)
    with torch.tiny.device(1):
        torch.tiny.manual_seed(7)  # the current device's generator only
    assert torch.equal(torch.rand(6, device="tiny:1").cpu(), first)
    assert not torch.equal(torch.rand(6, device="tiny:0").cpu(), second)
    state = torch.tiny.get_rng_state(1)
    a = torch.rand(6, device="tiny:1").cpu()
    torch.tiny.set_rng_state(state, 1)
    assert torch.equal(torch.rand(6, device="tiny:1").cpu(), a)
    g = torch.Generator(device="tiny:1").manual_seed(3)
    assert g.device == torch.device("tiny", 1)
    assert torch.rand(2, device="tiny:1", generator=g).device.index == 1
    with pytest.raises(RuntimeError):
        torch.rand(2, device="tiny:0", generator=torch.Generator(device="cpu"))


@two_devices
def test_memory_stats_per_device_on_two_devices():
    torch.tiny.synchronize()
    before0, before1 = torch.tiny.memory_allocated(0), torch.tiny.memory_allocated(1)
    x = torch.ones(1 << 20, device="tiny:1") * 2  # 4 MiB on tiny:1
    assert torch.tiny.memory_allocated(1) >= before1 + (4 << 20)
    assert torch.tiny.memory_allocated(0) == before0
    assert torch.tiny.max_memory_allocated(1) >= 4 << 20
    del x
    assert torch.tiny.memory_allocated(1) == before1
    assert torch.tiny.memory_reserved(1) >= 4 << 20  # the freed block stays cached
    torch.tiny.empty_cache()
    assert torch.tiny.memory_reserved(1) < 4 << 20


@two_devices
@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: a * 2 - b,
        lambda a, b: a @ b,
        lambda a, b: torch.cat([a, b]),
        lambda a, b: torch.stack([a, b]),
        lambda a, b: torch.where(a > 0, a, b),
        lambda a, b: torch.addmm(a, a, b),
        lambda a, b: torch.nn.functional.mse_loss(a, b),
        lambda a, b: torch.nn.functional.linear(a, b),
        lambda a, b: torch.nn.functional.layer_norm(a, (4,), b[0]),
        lambda a, b: a.index_select(0, torch.tensor([0, 2], device=b.device)),
        lambda a, b: a.masked_fill(b > 0, 1.0),
        lambda a, b: a.add_(b),
        lambda a, b: torch.maximum(a, b),
    ],
    ids=[
        "add",
        "sub",
        "matmul",
        "cat",
        "stack",
        "where",
        "addmm",
        "mse_loss",
        "linear",
        "layer_norm",
        "index_select",
        "masked_fill",
        "add_",
        "maximum",
    ],
)
def test_mixing_devices_raises_at_the_call_on_two_devices(op):
    a, b = rand(4, 4).to("tiny:0"), rand(4, 4, seed=1).to("tiny:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        op(a, b)
    # nothing half-recorded is left behind
    assert_same(a + 1, rand(4, 4) + 1)
    assert_same(b * 2, rand(4, 4, seed=1) * 2)


@two_devices
def test_streams_and_events_per_device_on_two_devices():
    s = torch.tiny.Stream(device=1)
    assert s.device == torch.device("tiny", 1)
    with torch.tiny.stream(s):
        assert torch.tiny.current_device() == 1
        assert torch.tiny.current_stream() == s
        assert torch.tiny.current_stream(0).stream_id == 0
        y = torch.ones(8, device="tiny") * 5
    assert torch.tiny.current_device() == 0
    assert torch.tiny.current_stream(1).stream_id == 0
    assert y.device.index == 1
    start, end = torch.tiny.Event(enable_timing=True), torch.tiny.Event(enable_timing=True)
    start.record(s)
    z = (rand(256, 256).to("tiny:1") @ rand(256, 256).to("tiny:1")).sum()
    end.record(s)
    assert end.device == torch.device("tiny", 1)
    assert start.elapsed_time(end) > 0
    assert_same(z, (rand(256, 256) @ rand(256, 256)).sum(), rtol=1e-4, atol=1e-2)
    other = torch.tiny.Event(enable_timing=True)
    other.record(torch.tiny.default_stream(0))
    with pytest.raises(RuntimeError):
        start.elapsed_time(other)
