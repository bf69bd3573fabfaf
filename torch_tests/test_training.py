"""Training end to end against PyTorch CPU: the same model, initial weights, data and optimizer give the
same per-step losses and final weights on tiny; the demo CNN's step runs without fallbacks; a long loop
keeps memory flat with or without syncs in it; gradient clipping, lr schedules and checkpoints behave
as on the CPU; and the MNIST demo runs end to end in a short mode."""

import copy
import gc
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import CPU_LOWERING, DEVICE, conv_block, counting
from torch import nn

REPO = Path(__file__).resolve().parents[1]

# Losses and weights after 20 steps differ from the CPU's by ~2e-7 (float32 summation order). The learning
# rates are moderate on purpose: with 5-10x larger ones the CNN's trajectory amplifies last-bit gradient
# differences (tiny's per-step gradients are as close to float64 as the CPU's) to ~1e-4 in the weights,
# which would force tolerances that hide real bugs.
LOSS_TOL = {"rtol": 1e-4, "atol": 1e-6}
PARAM_TOL = {"rtol": 1e-4, "atol": 1e-5}


def small_cnn():
    """conv-relu-conv-relu-batchnorm-maxpool, flatten, linear: 1x8x8 images, 5 classes."""
    return nn.Sequential(
        *conv_block(1, 4),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 5),
    )


def small_mlp():
    """linear-relu-linear: 16 features in, 4 regression targets out."""
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


OPTIMIZERS = {
    "sgd_nesterov": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3),
    "rmsprop": lambda params: torch.optim.RMSprop(params, lr=1e-3),
}


def cnn_batches(steps, batch=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, 1, 8, 8, generator=g), torch.randint(0, 5, (batch,), generator=g)) for _ in range(steps)
    ]


def mlp_batches(steps, batch=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 16, generator=g), torch.randn(batch, 4, generator=g)) for _ in range(steps)]


TASKS = {
    "cnn": (small_cnn, cnn_batches, F.cross_entropy),
    "mlp": (small_mlp, mlp_batches, F.mse_loss),
}


def initial_model(build, seed=0):
    """The model built on the CPU under a fixed seed: every device starts from copies of these weights."""
    torch.manual_seed(seed)
    return build()


def train(model, opt, batches, loss_fn, device):
    """One optimizer step per batch; the per-step losses as floats (each .item() is a sync on tiny)."""
    model.train()
    losses = []
    for x, y in batches:
        loss = loss_fn(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_copy(model, make_opt, batches, loss_fn, device):
    """Train a deep copy of model on device; return (losses, final parameters on the CPU, the copy)."""
    model = copy.deepcopy(model).to(device)
    losses = train(model, make_opt(model.parameters()), batches, loss_fn, device)
    return losses, [p.detach().cpu() for p in model.parameters()], model


def assert_losses_match(tiny_losses, cpu_losses):
    worst = max(abs(t - c) / max(abs(c), 1e-12) for t, c in zip(tiny_losses, cpu_losses, strict=True))
    torch.testing.assert_close(
        torch.tensor(tiny_losses, dtype=torch.float64),
        torch.tensor(cpu_losses, dtype=torch.float64),
        **LOSS_TOL,
        msg=lambda m: (
            f"per-step losses differ from the CPU's (worst relative {worst:.2e}):\n"
            f"tiny {tiny_losses}\ncpu  {cpu_losses}\n{m}"
        ),
    )


def assert_params_match(tiny_params, cpu_params, names):
    for name, t, c in zip(names, tiny_params, cpu_params, strict=True):
        torch.testing.assert_close(t, c, **PARAM_TOL, msg=lambda m, name=name: f"parameter {name}: {m}")


# ---------------------------------------------------------------------------------------------
# Training matches the CPU step by step


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("task", list(TASKS))
def test_twenty_training_steps_match_cpu_losses_and_final_weights(task, optimizer):
    build, make_batches, loss_fn = TASKS[task]
    model = initial_model(build)
    batches = make_batches(20)
    cpu_losses, cpu_params, cpu_model = train_copy(model, OPTIMIZERS[optimizer], batches, loss_fn, "cpu")
    tiny_losses, tiny_params, tiny_model = train_copy(model, OPTIMIZERS[optimizer], batches, loss_fn, DEVICE)
    assert all(p.device.type == DEVICE for p in tiny_model.parameters())
    assert_losses_match(tiny_losses, cpu_losses)
    assert_params_match(tiny_params, cpu_params, [n for n, _ in model.named_parameters()])
    # batch norm's running statistics follow the same batches
    for (name, t), c in zip(tiny_model.named_buffers(), cpu_model.buffers(), strict=True):
        assert t.device.type == DEVICE, f"buffer {name} on {t.device}"
        torch.testing.assert_close(t.cpu(), c, **PARAM_TOL, msg=lambda m, name=name: f"buffer {name}: {m}")


def test_demo_model_training_step_runs_without_fallbacks(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    from mnist import build_model

    model = initial_model(build_model)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g)
    tiny_model = copy.deepcopy(model).to(DEVICE)
    opt = torch.optim.Adam(tiny_model.parameters(), lr=1e-3)
    xt, yt = x.to(DEVICE), y.to(DEVICE)
    with counting() as c:
        loss = F.cross_entropy(tiny_model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tiny_loss = loss.item()
        torch.tiny.synchronize()
    assert c["fallbacks"] == 0, f"the step ran {c['fallbacks']} op(s) through the CPU fallback: {c['fallback_ops']}"
    assert c["kernels"] > 0
    cpu_losses = train(model, torch.optim.Adam(model.parameters(), lr=1e-3), [(x, y)], F.cross_entropy, "cpu")
    assert_losses_match([tiny_loss], cpu_losses)
    names = [n for n, _ in model.named_parameters()]
    assert_params_match([p.grad.cpu() for p in tiny_model.parameters()], [p.grad for p in model.parameters()], names)
    # Adam's first step moves each weight by lr times the sign of its gradient: where the gradient is within float32
    # rounding of 0 (the demo's 64-channel 3 x 3 weight, at batch 4: 271 gradients under 1e-6, each device's error up
    # to 1e-6 against float64) that sign is the rounding's, and the weights compare where it is the gradient's.
    signed = [p.grad.abs() > 1e-5 for p in model.parameters()]
    assert_params_match(
        [p.detach().cpu()[s] for p, s in zip(tiny_model.parameters(), signed, strict=True)],
        [p.detach()[s] for p, s in zip(model.parameters(), signed, strict=True)],
        names,
    )


# ---------------------------------------------------------------------------------------------
# Memory over a long loop


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def long_adam_loop(steps, item_each_step, marks=(50,)):
    """Train a small MLP with Adam on tiny for `steps` steps, cycling 4 batches already on the device.

    Returns the counters and RSS at each step in marks and at the last step (before any sync after the
    loop), and, only when the loop's work ran as it went, the final loss after one sync, how many kernels
    that sync ran and the final weights. When nothing ran during the loop, the deferred graph is dropped
    unrealized (realizing 200 steps at once could take a very long time)."""
    gc.collect()  # tensors earlier tests left in reference cycles must not die mid-loop (live_buffers is global)
    model = copy.deepcopy(initial_model(small_mlp)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = [(x.to(DEVICE), y.to(DEVICE)) for x, y in mlp_batches(4)]
    torch.tiny.synchronize()
    torch.tiny.reset_stats()
    seen = {}
    for step in range(1, steps + 1):
        loss = mse_step(model, opt, *batches[step % len(batches)])
        if item_each_step:
            loss.item()
        if step in marks or step == steps:
            stats = torch.tiny.stats()
            seen[step] = {"live_buffers": stats["live_buffers"], "kernels": stats["kernels"], "rss": rss_bytes()}
    first, last = seen[marks[0]], seen[steps]
    if last["kernels"] == first["kernels"]:
        return seen, None
    before = torch.tiny.stats()["kernels"]
    final_loss = loss.item()
    final_sync_kernels = torch.tiny.stats()["kernels"] - before
    return seen, (final_loss, final_sync_kernels, [p.detach().cpu() for p in model.parameters()])


def cpu_adam_loop(steps):
    model = copy.deepcopy(initial_model(small_mlp))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = mlp_batches(4)
    for step in range(1, steps + 1):
        loss = mse_step(model, opt, *batches[step % len(batches)])
    return loss.item(), [p.detach() for p in model.parameters()]


def mse_step(model, opt, x, y):
    """One optimizer step on the mean squared error of model(x) against y; the loss, unsynced."""
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


RSS_GROWTH_LIMIT = 4 * 2**20  # measured: ~0.01 MB over 150 steps; ~5 MB when every step stays lazy


@pytest.mark.parametrize("item_each_step", [True, False], ids=["item_each_step", "no_sync_in_loop"])
def test_memory_stays_flat_over_200_adam_steps(item_each_step):
    steps, mark = 200, 50
    seen, finished = long_adam_loop(steps, item_each_step, marks=(mark,))
    at_mark, at_end = seen[mark], seen[steps]
    assert at_end["live_buffers"] == at_mark["live_buffers"], (
        f"live buffers grew from {at_mark['live_buffers']} at step {mark} to {at_end['live_buffers']} at step {steps}"
    )
    growth = at_end["rss"] - at_mark["rss"]
    # The steps' work must run while the loop goes, not pile up into one graph for the final sync.
    assert finished is not None, (
        f"no kernel ran between step {mark} and step {steps}: every step's work is deferred to one lazy graph "
        f"(RSS grew by {growth / 2**20:.1f} MB meanwhile)"
    )
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth / 2**20:.1f} MB between step {mark} and step {steps}"
    final_loss, final_sync_kernels, params = finished
    per_step = (at_end["kernels"] - at_mark["kernels"]) / (steps - mark)
    assert final_sync_kernels <= max(2 * per_step, 1), (
        f"the sync after the loop ran {final_sync_kernels} kernels; one step runs about {per_step:.0f}"
    )
    cpu_loss, cpu_params = cpu_adam_loop(steps)
    assert_losses_match([final_loss], [cpu_loss])
    assert_params_match(params, cpu_params, [n for n, _ in small_mlp().named_parameters()])


def adam_mlp_steps(model, batches, device, after_step=None):
    """A copy of model on device trained by Adam, a step per batch (moved to the device at its step), after_step(step,
    model, optimizer, loss) called after each; the model, the optimizer and the last loss."""
    m = copy.deepcopy(model).to(device)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for step, (x, y) in enumerate(batches):
        loss = mse_step(m, opt, x.to(device), y.to(device))
        if after_step:
            after_step(step, m, opt, loss)
    return m, opt, loss


def test_batches_moved_to_the_device_while_the_last_steps_kernels_run_train_like_cpu():
    """Each optimizer step's end starts its kernels without waiting (the CPU device's queue, as a GPU's stream);
    the next batch's copy to the device lands in memory that the queued kernels may still use (blocks freed
    meanwhile), so it must run after them. Fifty steps, nothing read until the end: the CPU's weights."""
    model = initial_model(small_mlp)
    batches = mlp_batches(50, batch=256)
    weights = {}
    for device in ("cpu", DEVICE):
        m, _, loss = adam_mlp_steps(model, batches, device)
        weights[device] = ([p.detach().cpu() for p in m.parameters()], loss.item())
    assert_params_match(weights[DEVICE][0], weights["cpu"][0], [n for n, _ in model.named_parameters()])
    assert_losses_match([weights[DEVICE][1]], [weights["cpu"][1]])


def test_values_read_each_step_while_the_rest_of_the_step_runs_match_cpu():
    """A read waits for the kernels that write what it reads, not for the whole queue: the loss read each step
    returns while that step's backward pass and weight updates may still run, and a parameter or Adam's state read
    every tenth step waits for the one kernel that writes the parameter and both states. The CPU's values."""
    model = initial_model(small_mlp)
    batches = mlp_batches(30, batch=256)
    seen = {}
    for device in ("cpu", DEVICE):
        losses, reads = [], []

        def read(step, m, opt, loss, losses=losses, reads=reads):
            losses.append(loss.item())
            if step % 10 == 9:
                for p in m.parameters():
                    state = opt.state[p]
                    reads += [t.detach().to("cpu", copy=True) for t in (p, state["exp_avg"], state["exp_avg_sq"])]

        adam_mlp_steps(model, batches, device, read)
        seen[device] = (losses, reads)
    assert_losses_match(seen[DEVICE][0], seen["cpu"][0])
    assert_params_match(seen[DEVICE][1], seen["cpu"][1], [f"read {i}" for i in range(len(seen["cpu"][1]))])


def test_a_large_parameter_read_right_after_its_step_holds_the_steps_value():
    """An optimizer step ends with a flush: its kernels are queued and the call returns. A read of a parameter of 4M
    floats right after waits for the kernel that writes it (on the CPU lowering one kernel writes Adam's two states
    and the parameter), and so does a read of a state. The CPU's values, step after step."""
    g = torch.Generator().manual_seed(0)
    cpu = nn.Parameter(torch.randn(1 << 22, generator=g))
    tiny = nn.Parameter(cpu.detach().to(DEVICE))
    opts = [torch.optim.Adam([p], lr=1e-2) for p in (cpu, tiny)]
    for _ in range(3):
        grad = torch.randn(cpu.shape, generator=g)
        cpu.grad, tiny.grad = grad.clone(), grad.to(DEVICE)
        for opt in opts:
            opt.step()
        torch.testing.assert_close(tiny.detach().cpu(), cpu.detach(), **PARAM_TOL)
        for name in ("exp_avg", "exp_avg_sq"):
            state = opts[1].state[tiny][name].cpu()
            torch.testing.assert_close(state, opts[0].state[cpu][name], **PARAM_TOL, msg=lambda m, n=name: f"{n}: {m}")


ONE_KERNEL_OPTIMIZERS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "adam_fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5),
}


@pytest.mark.skipif(not CPU_LOWERING, reason="the CPU lowering merges elementwise kernels (a GPU device's do not)")
@pytest.mark.parametrize("name", ONE_KERNEL_OPTIMIZERS)
def test_an_optimizer_step_updates_each_parameter_and_its_state_in_one_kernel(name):
    """Adam's exp_avg, exp_avg_sq and parameter (each a kernel reading the gradient) are one kernel of three outputs
    (merge_elementwise, docs/design.md); so are SGD's momentum and RMSprop's. Two parameters of one size stay two
    kernels (they share no buffer). The values are the CPU's, step after step."""
    shapes = [(64, 32), (32,), (16, 32), (32,)]
    g = torch.Generator().manual_seed(0)
    cpu = [nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(4)]
    tiny = [nn.Parameter(p.detach().to(DEVICE)) for p in cpu]
    opt_cpu, opt_tiny = ONE_KERNEL_OPTIMIZERS[name](cpu), ONE_KERNEL_OPTIMIZERS[name](tiny)
    for step, gs in enumerate(grads):
        for p, q, gr in zip(cpu, tiny, gs, strict=True):
            p.grad, q.grad = gr.clone(), gr.to(DEVICE)
        opt_cpu.step()
        torch.tiny.synchronize()
        before = torch.tiny.stats()["kernels"]
        opt_tiny.step()
        torch.tiny.synchronize()
        if step >= 1:  # (the first step creates the states; the fused step counts its steps on the device too)
            assert torch.tiny.stats()["kernels"] - before == len(shapes) + (name == "adam_fused"), f"step {step}"
        for p, q in zip(cpu, tiny, strict=True):
            torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    for key in opt_cpu.state[cpu[0]]:
        a, b = opt_cpu.state[cpu[0]][key], opt_tiny.state[tiny[0]][key]
        torch.testing.assert_close(b.cpu() if torch.is_tensor(b) else b, a, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Gradient clipping and learning-rate schedules


@pytest.mark.parametrize("norm_type", [2.0, math.inf], ids=["l2", "inf"])
def test_clip_grad_norm_gives_the_cpu_total_norm_and_clipped_gradients(norm_type):
    model = initial_model(small_mlp)
    x, y = mlp_batches(1)[0]
    grads, norms = {}, {}
    for device in ("cpu", DEVICE):
        m = copy.deepcopy(model).to(device)
        (100 * F.mse_loss(m(x.to(device)), y.to(device))).backward()
        norms[device] = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.5, norm_type=norm_type)
        grads[device] = [p.grad for p in m.parameters()]
    assert norms["cpu"] > 0.5, "the gradients must be large enough to be clipped"
    assert norms[DEVICE].device.type == DEVICE
    torch.testing.assert_close(norms[DEVICE].cpu(), norms["cpu"], msg=lambda m: f"total norm: {m}")
    for i, (t, c) in enumerate(zip(grads[DEVICE], grads["cpu"], strict=True)):
        assert t.device.type == DEVICE
        torch.testing.assert_close(t.cpu(), c, msg=lambda m, i=i: f"clipped grad of parameter {i}: {m}")
    clipped = torch.linalg.vector_norm(torch.cat([g.cpu().flatten() for g in grads[DEVICE]]), norm_type)
    assert clipped <= 0.5 * (1 + 1e-4), f"norm after clipping {clipped.item()}"


def test_step_lr_schedule_steps_the_learning_rate_and_losses_like_cpu():
    model = initial_model(small_mlp)
    batches = mlp_batches(7)
    runs = {}
    for device in ("cpu", DEVICE):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        lrs = []
        losses = []
        for batch in batches:
            losses += train(m, opt, [batch], F.mse_loss, device)
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
        runs[device] = (lrs, losses, sched.get_last_lr())
    assert runs[DEVICE][0] == runs["cpu"][0], f"lr per step: tiny {runs[DEVICE][0]}, CPU {runs['cpu'][0]}"
    assert runs[DEVICE][2] == runs["cpu"][2]
    assert len(set(runs["cpu"][0])) > 2, "the schedule must actually change the lr"
    assert_losses_match(runs[DEVICE][1], runs["cpu"][1])


# ---------------------------------------------------------------------------------------------
# Checkpoints


def tensors_in(obj, path="checkpoint"):
    """(path, tensor) for every tensor in nested dicts and lists."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors_in(v, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors_in(v, f"{path}[{i}]")


def trained_cnn_and_adam(device, steps=3):
    model = copy.deepcopy(initial_model(small_cnn)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    train(model, opt, cnn_batches(steps), F.cross_entropy, device)
    return model, opt


@pytest.mark.parametrize("map_location", ["cpu", DEVICE, None], ids=["to_cpu", "to_tiny", "no_map_location"])
def test_model_and_optimizer_state_dicts_round_trip_through_a_file(tmp_path, map_location):
    model, opt = trained_cnn_and_adam(DEVICE)
    saved = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    path = tmp_path / "checkpoint.pt"
    torch.save(saved, path)
    loaded = torch.load(path, map_location=map_location)

    original = dict(tensors_in(saved))
    restored = dict(tensors_in(loaded))
    assert restored.keys() == original.keys()
    assert any("exp_avg_sq" in p for p in original), "the optimizer state must have been saved"
    for p, t in restored.items():
        expected_device = original[p].device.type if map_location is None else map_location
        assert t.device.type == expected_device, f"{p}: loaded on {t.device}, expected {expected_device}"
        assert t.dtype == original[p].dtype and t.shape == original[p].shape, p
        assert torch.equal(t.cpu(), original[p].cpu()), f"{p}: loaded values differ from the saved ones"
    assert loaded["optimizer"]["param_groups"] == saved["optimizer"]["param_groups"]

    fresh = small_cnn().to(DEVICE)
    fresh.load_state_dict(loaded["model"])
    for name, t in fresh.state_dict().items():
        assert t.device.type == DEVICE, f"{name} on {t.device} after load_state_dict"
        assert torch.equal(t.cpu(), saved["model"][name].cpu()), name


def test_model_loaded_from_a_cpu_checkpoint_continues_training_like_cpu(tmp_path):
    model, opt = trained_cnn_and_adam("cpu")
    path = tmp_path / "cpu_checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    batches = cnn_batches(4, seed=7)
    losses = {}
    for device in ("cpu", DEVICE):
        ckpt = torch.load(path, map_location=device)
        m = small_cnn().to(device)
        m.load_state_dict(ckpt["model"])
        o = torch.optim.Adam(m.parameters(), lr=1e-2)
        o.load_state_dict(ckpt["optimizer"])
        losses[device] = train(m, o, batches, F.cross_entropy, device)
        state = o.state[next(iter(m.parameters()))]
        assert state["exp_avg"].device.type == device
    assert_losses_match(losses[DEVICE], losses["cpu"])


# ---------------------------------------------------------------------------------------------
# The demo


def test_mnist_demo_short_run_prints_accuracy_writes_a_png_and_has_no_fallbacks(tmp_path):
    plot = tmp_path / "loss.png"
    args = ["--device", DEVICE, "--steps", "3", "--batch-size", "16", "--test-batches", "2", "--plot", str(plot)]
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "mnist.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mnist.py exited with {proc.returncode}:\n{out[-3000:]}"
    assert re.search(r"test accuracy \d+(\.\d+)?%", out), f"no test accuracy line:\n{out[-3000:]}"
    assert plot.exists(), f"no plot at {plot}"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "the plot is not a PNG"
    fallbacks = re.search(r"tiny: \d+ kernels, (\d+) fallbacks", out)
    assert fallbacks, f"no tiny stats line:\n{out[-3000:]}"
    assert fallbacks.group(1) == "0", f"the demo ran ops through the CPU fallback: {fallbacks.group(0)}..."


def test_vit_tokens_class_token_before_transposed_patches_match_cpu():
    """A torchvision ViT's token rows: the class token concatenated before the patch embedding's flattened and
    transposed convolution output, the position embedding added, then a layer norm over each token (its reads
    through the concatenation's mask index the patches by the token row alone); values and gradients as on the
    CPU."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 32, 32, generator=g)
    conv_w, cls, pos = (
        torch.randn(48, 3, 4, 4, generator=g),
        torch.randn(1, 1, 48, generator=g),
        torch.randn(1, 65, 48, generator=g),
    )
    ln_w, ln_b, gy = torch.randn(48, generator=g), torch.randn(48, generator=g), torch.randn(4, 65, 48, generator=g)

    def tokens(device):
        leaves = [t.to(device).requires_grad_() for t in (conv_w, cls, pos, ln_w, ln_b)]
        w, c, p, lw, lb = leaves
        patches = F.conv2d(x.to(device), w, stride=4).flatten(2).transpose(1, 2)
        y = F.layer_norm(torch.cat([c.expand(4, -1, -1), patches], dim=1) + p, (48,), lw, lb)
        grads = torch.autograd.grad(y, leaves, gy.to(device))
        return [y.cpu(), *(t.cpu() for t in grads)]

    for got, want in zip(tokens(DEVICE), tokens("cpu"), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
