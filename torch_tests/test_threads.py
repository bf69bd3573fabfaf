"""tiny used from several Python threads at once: independent models training side by side, one model
read by two threads, backward (which runs in autograd's device thread for tiny) while another thread runs
forward, and syncs from several threads. Every thread records into the same lazy graphs and pending list
(one thread's sync realizes what the others recorded), so each result is compared with the same work on
the CPU. The threads run under a deadline: a deadlock fails the test with every thread's Python stack
instead of hanging the suite."""

import copy
import faulthandler
import os
import queue
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE
from torch import nn

# For each test's threads together. A test takes a few seconds with a cold kernel cache, well under a
# second with a warm one.
DEADLINE_S = 40
TOL = {"rtol": 1e-4, "atol": 1e-5}


def run_threads(targets):
    """Runs each callable in its own thread, started together; returns their results in order. Fails on a
    hang (a thread alive at the deadline) and re-raises the first exception a thread raised."""
    start = threading.Barrier(len(targets))
    results = [None] * len(targets)
    errors = []

    def body(i, fn):
        try:
            start.wait(timeout=DEADLINE_S)
            results[i] = fn()
        except BaseException as e:  # re-raised in the test's thread below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i, fn), daemon=True) for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE_S
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        pytest.fail(f"{hung} still running after {DEADLINE_S} s: a deadlock (every thread's stack is on stderr)")
    if errors:
        raise errors[0]
    return results


def mlp(seed, width):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, width), nn.ReLU(), nn.Linear(width, 3))


def batches(seed, steps, batch=8):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 12, generator=g), torch.randn(batch, 3, generator=g)) for _ in range(steps)]


OPTIMIZERS = [
    lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    lambda params: torch.optim.Adam(params, lr=1e-2),
]


def train(model, data, optimizer, device):
    """Trains a copy of model on device; the per-step losses (each .item() syncs) and the final weights."""
    model = copy.deepcopy(model).to(device)
    opt = optimizer(model.parameters())
    losses = []
    for x, y in data:
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def assert_close(actual, expected, what):
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("threads", [2, 4])
def test_independent_models_training_in_threads_match_the_cpu(threads):
    # Two widths: threads of one width replay each other's cached schedules, the others' differ.
    jobs = [(mlp(i, 24 if i % 2 else 16), batches(100 + i, 15), OPTIMIZERS[i % 2]) for i in range(threads)]
    expected = [train(*job, "cpu") for job in jobs]
    actual = run_threads([lambda job=job: train(*job, DEVICE) for job in jobs])
    for i, ((losses, params), (cpu_losses, cpu_params)) in enumerate(zip(actual, expected, strict=True)):
        assert_close(losses, cpu_losses, f"thread {i}'s losses")
        for k, (p, c) in enumerate(zip(params, cpu_params, strict=True)):
            assert_close(p, c, f"thread {i}'s parameter {k}")


def test_one_model_read_by_two_threads_gives_each_thread_its_own_outputs():
    model = mlp(0, 32)
    inputs = [[x for x, _ in batches(seed, 20)] for seed in (1, 2)]
    with torch.no_grad():
        expected = [[model(x) for x in xs] for xs in inputs]
        shared = copy.deepcopy(model).to(DEVICE)
        actual = run_threads([lambda xs=xs: [shared(x.to(DEVICE)).cpu() for x in xs] for xs in inputs])
    for t, (outs, cpu_outs) in enumerate(zip(actual, expected, strict=True)):
        for i, (o, c) in enumerate(zip(outs, cpu_outs, strict=True)):
            assert_close(o, c, f"thread {t}'s output {i}")


def test_two_threads_backward_into_one_model_accumulate_both_threads_gradients():
    model = mlp(0, 32)
    data = [batches(seed, 10) for seed in (3, 4)]
    for x, y in data[0] + data[1]:
        F.mse_loss(model(x), y).backward()
    shared = copy.deepcopy(model).to(DEVICE)
    shared.zero_grad()

    def backward_all(pairs):
        for x, y in pairs:
            F.mse_loss(shared(x.to(DEVICE)), y.to(DEVICE)).backward()

    run_threads([lambda pairs=pairs: backward_all(pairs) for pairs in data])
    for (name, p), c in zip(shared.named_parameters(), model.parameters(), strict=True):
        assert_close(p.grad.cpu(), c.grad, f"{name}.grad summed over both threads")


def test_backward_in_autograd_thread_while_another_thread_runs_forward():
    trained, data = mlp(5, 24), batches(6, 15)
    reader, inputs = mlp(7, 16), [x for x, _ in batches(8, 30)]
    cpu_train = train(trained, data, OPTIMIZERS[0], "cpu")
    with torch.no_grad():
        cpu_outputs = [reader(x) for x in inputs]
    on_device = copy.deepcopy(reader).to(DEVICE)
    threads = {}

    def note_backward_thread(grad):
        threads["backward"] = threading.get_ident()

    def train_and_note_backward_thread():
        threads["caller"] = threading.get_ident()
        x = torch.ones(2, device=DEVICE, requires_grad=True)
        x.register_hook(note_backward_thread)
        (x * 2).sum().backward()
        return train(trained, data, OPTIMIZERS[0], DEVICE)

    def forward_only():
        with torch.no_grad():
            return [on_device(x.to(DEVICE)).cpu() for x in inputs]

    (losses, params), outputs = run_threads([train_and_note_backward_thread, forward_only])
    # The claim this test makes: tiny's backward runs in autograd's own thread, not the caller's.
    assert threads["backward"] != threads["caller"]
    assert_close(losses, cpu_train[0], "losses of the training thread")
    for k, (p, c) in enumerate(zip(params, cpu_train[1], strict=True)):
        assert_close(p, c, f"parameter {k} of the training thread")
    for i, (o, c) in enumerate(zip(outputs, cpu_outputs, strict=True)):
        assert_close(o, c, f"forward thread's output {i}")


def lazy_program(x, step):
    """Elementwise ops, a reduction, an in-place write through a view and a matmul: all left pending."""
    y = (x * (step + 1)).exp().tanh() + x.flip(0)
    y[1:, ::2] += y.sum(0, keepdim=True)[:, ::2]
    return y @ x.t()


SYNCS = {
    "cpu": lambda t: t.cpu(),
    "item": lambda t: (t.sum().item(), t)[1].cpu(),
    "synchronize": lambda t: (torch.tiny.synchronize(), t)[1].cpu(),
}


def test_syncs_from_several_threads_realize_every_threads_graphs():
    starts = [torch.randn(6, 5, generator=torch.Generator().manual_seed(s)) for s in range(6)]
    sync_of = [list(SYNCS)[i % len(SYNCS)] for i in range(len(starts))]

    def run(x, device, sync):
        x, out = x.to(device), []
        for step in range(25):
            y = lazy_program(x, step)
            # Every other step leaves y pending: another thread's sync realizes it, or this thread's next one.
            out.append(y if step % 2 else SYNCS[sync](y))
        return [o.cpu() for o in out]

    expected = [run(x, "cpu", sync) for x, sync in zip(starts, sync_of, strict=True)]
    actual = run_threads([lambda x=x, s=s: run(x, DEVICE, s) for x, s in zip(starts, sync_of, strict=True)])
    for t, (outs, cpu_outs) in enumerate(zip(actual, expected, strict=True)):
        for i, (o, c) in enumerate(zip(outs, cpu_outs, strict=True)):
            assert_close(o, c, f"thread {t} ({sync_of[t]}) step {i}")


def test_tensors_recorded_in_one_thread_are_read_in_another():
    inputs = [torch.randn(4, 4, generator=torch.Generator().manual_seed(s)) for s in range(40)]
    handoff = queue.Queue()

    def produce():
        for step, x in enumerate(inputs):
            handoff.put(lazy_program(x.to(DEVICE), step))  # still pending when the consumer gets it
        handoff.put(None)

    def consume():
        got = []
        while (y := handoff.get(timeout=DEADLINE_S)) is not None:
            got.append(y.cpu())
        return got

    _, got = run_threads([produce, consume])
    expected = [lazy_program(x, step) for step, x in enumerate(inputs)]
    assert len(got) == len(expected)
    for i, (o, c) in enumerate(zip(got, expected, strict=True)):
        assert_close(o, c, f"tensor {i}")


@pytest.mark.skipif(torch.tiny.get_device_name(0).find("CPU") < 0, reason="the CPU device's thread pool")
def test_torch_set_num_threads_sizes_the_cpu_devices_kernels():
    """torch.set_num_threads sizes the CPU device's kernels (its own pool, at most one thread per core),
    and every split computes the same values."""
    before = torch.get_num_threads()
    x = torch.randn(1 << 20)
    expected = (x * 2).sum()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            if "TINY_THREADS" not in os.environ:
                assert torch.tiny.get_device_properties(0).multi_processor_count == min(n, os.cpu_count())
            got = (x.to(DEVICE) * 2).sum().cpu()
            torch.testing.assert_close(got, expected, **TOL)
    finally:
        torch.set_num_threads(before)


EXIT_AFTER_BACKWARD = """
import torch
import torch.nn.functional as F
import torch_tiny
x, w, g = torch.randn(16, 512, 2, 2), torch.randn(512, 512, 3, 3) * 0.1, torch.randn(16, 512, 2, 2)
def step(device):
    xx, ww = x.to(device).requires_grad_(), w.to(device).requires_grad_()
    F.conv2d(xx, ww, padding=1).backward(g.to(device))
    torch.tiny.synchronize()
for _ in range(2):
    step("cpu")
    step("tiny")
"""


def test_a_script_that_ends_after_a_backward_exits_cleanly():
    """torch's autograd thread for tiny frees the graph it ran last, whose thread-local state holds a Python object,
    by taking the GIL: after the interpreter has begun to finalize, that ended the process with `terminate called
    without an active exception` (abort) in about half the runs of this script (eager's OpenMP threads spinning
    beside it). torch_tiny lets that thread drop the graph at exit, before finalization."""
    env = dict(os.environ, OMP_WAIT_POLICY="ACTIVE")
    for _ in range(4):
        proc = subprocess.run([sys.executable, "-c", EXIT_AFTER_BACKWARD], env=env, capture_output=True, timeout=300)
        assert proc.returncode == 0 and b"terminate" not in proc.stderr, proc.stderr[-2000:]
