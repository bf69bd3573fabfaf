"""torch.profiler sees tiny's work: every kernel a sync runs is a device event of tiny:N with its
generated name and its run time, linked to the ATen op that forced the sync; the sync itself, its
scheduling and compiling are host events under that op. Nothing is timed while no trace records."""

import json
import random
import re

import pytest
import torch
from conftest import DEVICE, counting
from torch._C._profiler import _ExperimentalConfig
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_tiny

# how tiny's lowering names a kernel: kind (W: a Winograd convolution), loop sizes, then vector lanes (CPU) or rows
# per thread (GPU)
KERNEL_NAME = re.compile(r"^[ERGSW](_\d+)+(_v\d+|_r\d+|_o\d+)?$")


def realized(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(*shape, generator=g).to(DEVICE) for shape in shapes]
    torch.tiny.synchronize()
    return out


def kernel_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def host_events(prof, prefix):
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith(prefix)]


def profile_tiny():
    # the metadata of tiny's events (kernels per sync, replayed or new, programs compiled) as event.metadata
    return profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        experimental_config=_ExperimentalConfig(expose_kineto_event_metadata=True),
    )


def inside(inner, outer):
    return outer.time_range.start <= inner.time_range.start and inner.time_range.end <= outer.time_range.end


def test_fused_chain_is_one_kernel_event_inside_the_sync_that_ran_it():
    a, b, c_ = realized((64, 64), (64, 64), (64, 64))
    with counting() as c, profile_tiny() as prof:
        y = ((a + b) * c_).relu().sigmoid()
        y.cpu()
    assert c["kernels"] == 1
    (kernel,) = kernel_events(prof)
    assert KERNEL_NAME.match(kernel.name) and kernel.name.startswith("E"), kernel.name
    assert kernel.device_index == 0
    syncs = host_events(prof, "tiny::sync")
    assert len(syncs) == 1, [e.name for e in syncs]
    sync = syncs[0]
    # .cpu() copies through aten::_to_copy -> aten::copy_ -> tiny's _copy_from: the sync names that op
    assert re.fullmatch(r"tiny::sync \(aten::\w+\)", sync.name), sync.name
    assert inside(kernel, sync)
    duration = kernel.time_range.end - kernel.time_range.start
    assert 0 < duration <= sync.time_range.end - sync.time_range.start


def test_kernel_device_time_is_attributed_to_the_op_that_synced():
    (x,) = realized((256, 256))
    with profile_tiny() as prof:
        (x.exp() * 2).sum().item()
    kernels = kernel_events(prof)
    assert kernels
    kernel_us = sum(k.time_range.end - k.time_range.start for k in kernels)
    ops = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.kernels]
    # every kernel hangs under the op that caused its sync (aten::_local_scalar_dense, under aten::item)
    assert {e.name for e in ops} == {"aten::_local_scalar_dense"}, {e.name for e in ops}
    cpu_events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    assert sum(e.self_device_time_total for e in cpu_events) == pytest.approx(kernel_us)
    item = next(e for e in prof.key_averages() if e.key == "aten::item")
    assert item.device_time_total == pytest.approx(kernel_us)
    table = prof.key_averages().table(sort_by="self_device_time_total")
    for k in kernels:
        assert k.name in table
    assert "tiny::sync (aten::_local_scalar_dense)" in table


def test_training_step_shows_every_kernel_it_runs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = realized((8, 16), (8, 4))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()  # tiny syncs at the end of every optimizer step
        return loss.item()

    step()
    with counting() as c, profile_tiny() as prof:
        step()
    kernels = kernel_events(prof)
    assert len(kernels) == c["kernels"] > 3
    assert all(KERNEL_NAME.match(k.name) for k in kernels), [k.name for k in kernels]
    assert all(k.time_range.end > k.time_range.start for k in kernels)
    assert len(host_events(prof, "tiny::sync")) == c["syncs"]


def test_schedule_cache_replays_are_recorded():
    a, b = realized((128,), (128,))

    def run():
        return ((a * 3 + b).tanh() - a).sum().item()

    run()
    with counting() as c, profile_tiny() as prof:
        run()
    assert c["schedule_hits"] == 1
    kernels = kernel_events(prof)
    assert len(kernels) == c["kernels"] >= 1
    (sync,) = host_events(prof, "tiny::sync")
    assert all(inside(k, sync) for k in kernels)
    assert not host_events(prof, "tiny::schedule"), "a replay schedules nothing"
    assert sync.metadata["schedule"] == "replayed"
    assert sync.metadata["kernels"] == len(kernels)
    assert all(k.metadata["schedule"] == "replayed" for k in kernels)


def test_new_schedule_shows_its_scheduling_and_compiling():
    (x,) = realized((48, 40))  # a shape no other test uses: a schedule of its own
    with profile_tiny() as prof:
        (x.cos() + 1).mean(dim=0).cpu()
    (sync,) = host_events(prof, "tiny::sync")
    (sched,) = host_events(prof, "tiny::schedule")
    compiles = host_events(prof, "tiny::compile")
    assert compiles
    for e in [sched, *compiles]:
        assert inside(e, sync)


def test_compiles_report_the_programs_they_compiled():
    # a shape no earlier run used (the disk cache keeps kernels across runs): its kernels compile here
    rows, cols = random.randrange(100, 1000), random.randrange(100, 1000)
    x = torch.ones(rows, cols, device=DEVICE)
    torch.tiny.synchronize()
    with counting() as c, profile_tiny() as prof:
        (x * 2 + 1).exp().sum(dim=0).cpu()
    compiled = sum(e.metadata.get("programs compiled", 0) for e in host_events(prof, "tiny::compile"))
    assert compiled == c["compiles"] >= 1


def test_no_trace_times_nothing_and_changes_no_counter():
    a, b = realized((32,), (32,))
    assert not torch_tiny._C.profiler_tracing()

    def run():
        with counting() as c:
            (a * b + 1).relu().sum().item()
        return {k: c[k] for k in ("kernels", "syncs", "schedule_hits", "compiles")}

    run()  # scheduled and compiled: the runs below replay it
    plain = run()
    with profile_tiny() as prof:
        assert torch_tiny._C.profiler_tracing()
        profiled = run()
    assert not torch_tiny._C.profiler_tracing()
    assert kernel_events(prof)
    assert profiled == plain
    with counting() as c:
        (a * b + 1).relu().sum().item()
    assert c["kernels"] == plain["kernels"]


def test_cpu_only_trace_has_no_device_events():
    (x,) = realized((64,))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + 1).sum().item()
    assert not kernel_events(prof)


def test_chrome_trace_holds_the_kernels_and_syncs(tmp_path):
    a, b = realized((64,), (64,))
    with profile_tiny() as prof:
        (a - b).abs().max().item()
    names = {k.name for k in kernel_events(prof)}
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {e["name"] for e in kernels} == names
    assert all(e["dur"] > 0 for e in kernels)
    runtime = [e for e in events if e.get("cat") == "privateuse1_runtime"]
    assert any(e["name"].startswith("tiny::sync") for e in runtime)


def test_legacy_autograd_profiler_with_use_device_tiny():
    # use_kineto=False (its default): each op's device time is the kernel time of the syncs it ran
    (x,) = realized((64, 8))
    with torch.autograd.profiler.profile(use_device="tiny") as prof:
        x.softmax(dim=1).sum().item()
    timed = {e.name for e in prof.function_events if e.self_device_time_total > 0}
    assert timed == {"aten::_local_scalar_dense"}, timed
    item = next(e for e in prof.key_averages() if e.key == "aten::item")
    assert item.device_time_total > 0


def test_legacy_autograd_profiler_with_kineto_lists_kernels():
    (x,) = realized((64, 8))
    with torch.autograd.profiler.profile(use_device="tiny", use_kineto=True) as prof:
        x.softmax(dim=1).sum().item()
    kernels = [e for e in prof.function_events if e.device_type == DeviceType.PrivateUse1]
    assert kernels and all(KERNEL_NAME.match(k.name) for k in kernels)
    scalar = next(e for e in prof.function_events if e.name == "aten::_local_scalar_dense" and e.kernels)
    assert {k.name for k in scalar.kernels} == {k.name for k in kernels}


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle")
def test_scheduled_profiler_records_only_its_active_steps():
    from torch.profiler import schedule

    (x,) = realized((256,))
    windows = []

    def step(i):
        with counting() as c:
            (x * i).exp().sum().item()
        return c["kernels"]

    def ready(p):
        windows.append(len(kernel_events(p)))

    launched = []
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
        on_trace_ready=ready,
    ) as prof:
        for i in range(8):
            launched.append(step(i))
            prof.step()
    # each cycle of 4 steps waits one, warms up one, then records two
    assert windows == [launched[2] + launched[3], launched[6] + launched[7]]
