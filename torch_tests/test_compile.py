"""torch.compile on tiny tensors, with the default backend (Inductor hands graphs on tiny to tiny) and with
backend="tiny": forward values and a training step of the demo CNN against PyTorch CPU, one schedule per
step replayed from the schedule cache, graph breaks, a second batch size, no recompilation on a repeated
call, and clear errors. A CPU graph in the same process still compiles with Inductor."""

import copy
import logging
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, counting
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import build_model  # noqa: E402

BACKENDS = {"default": {}, "tiny": {"backend": "tiny"}}
# As test_training.py: float32 summation order only
LOSS_TOL = {"rtol": 1e-4, "atol": 1e-6}
PARAM_TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from nothing, so that what one test compiled never answers for another."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def no_structured_trace():
    """pytest attaches its log capture to every logger that does not propagate, torch's structured trace log
    (TORCH_TRACE's) too, and torch then renders every compile artifact for it: compiles took 3-4x longer.
    A trace log that propagates and has no handler of its own is one torch skips."""
    trace_log = logging.getLogger("torch.__trace")
    handlers, propagate = trace_log.handlers[:], trace_log.propagate
    trace_log.handlers.clear()
    trace_log.propagate = True
    yield
    trace_log.handlers[:], trace_log.propagate = handlers, propagate


class Attention(nn.Module):
    """layer norm, one head of scaled dot-product attention, a GELU feed-forward, residuals."""

    def __init__(self, d=16):
        super().__init__()
        self.norm, self.qkv, self.ff = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + F.gelu(self.ff(x))


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), (5, 16)),
    "demo_cnn": (build_model, (4, 1, 28, 28)),
    "attention": (Attention, (2, 6, 16)),
}


def seeded(build, seed=0):
    torch.manual_seed(seed)
    return build()


def batch(shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# The default backend hands the same graphs to the same backend: one model is enough to show it.
@pytest.mark.parametrize(("name", "backend"), [*((name, "tiny") for name in MODELS), ("demo_cnn", "default")])
def test_compiled_forward_gives_the_cpus_values(name, backend):
    build, shape = MODELS[name]
    model = seeded(build).eval()
    x = batch(shape)
    compiled = torch.compile(copy.deepcopy(model).to(DEVICE), **BACKENDS[backend])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.to(DEVICE)).cpu(), model(x), rtol=1e-4, atol=1e-5)


def demo_step(model, opt, x, y):
    """The demo's training step: cross-entropy, backward, the optimizer's update; the loss as a float."""
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_compiled_training_step_of_the_demo_matches_cpu_and_then_replays(backend):
    model = seeded(build_model)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g)
    on_tiny = copy.deepcopy(model).to(DEVICE)
    compiled, opt = torch.compile(on_tiny, **BACKENDS[backend]), torch.optim.Adam(on_tiny.parameters(), lr=1e-3)
    xt, yt = x.to(DEVICE), y.to(DEVICE)
    with counting() as first:
        tiny_loss = demo_step(compiled, opt, xt, yt)
    cpu_loss = demo_step(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y)
    assert tiny_loss == pytest.approx(cpu_loss, rel=LOSS_TOL["rtol"], abs=LOSS_TOL["atol"])
    # Adam's first step moves each weight by lr times its gradient's sign: where the gradient is within float32
    # rounding of 0 that sign is the rounding's, so the weights compare where it is the gradient's (the gradients
    # themselves everywhere)
    signed = {n: p.grad.abs() > 1e-5 for n, p in model.named_parameters()}
    for (name, t), c in zip(on_tiny.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(t.grad.cpu(), c.grad, **PARAM_TOL, msg=lambda m, name=name: f"{name}'s grad: {m}")
    for (name, t), c in zip(on_tiny.state_dict().items(), model.state_dict().values(), strict=True):
        # weights, and batch norm's running statistics, which the compiled forward updates in place
        keep = signed.get(name, torch.ones_like(c, dtype=torch.bool))
        torch.testing.assert_close(t.cpu()[keep], c[keep], **PARAM_TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert first["fallbacks"] == 0, first["fallback_ops"]

    # Repeated, the compiled step is not compiled again by dynamo, and tiny replays every sync's schedule
    # (nothing scheduled or compiled), running no more kernels than the same step uncompiled.
    eager = copy.deepcopy(on_tiny)
    eager_opt = torch.optim.Adam(eager.parameters(), lr=1e-3)
    for _ in range(2):
        with counting() as uncompiled:
            demo_step(eager, eager_opt, xt, yt)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(2):
            with counting() as again:
                demo_step(compiled, opt, xt, yt)
    assert again["compiles"] == 0 and again["schedule_hits"] == again["syncs"] > 0, again.stats
    assert again["kernels"] <= uncompiled["kernels"], (again.stats, uncompiled.stats)


def test_a_compiled_optimizer_step_updates_the_weights_as_on_the_cpu():
    model = seeded(MODELS["mlp"][0])
    on_tiny = copy.deepcopy(model).to(DEVICE)
    x, y = batch((5, 16)), batch((5, 4), seed=2)
    opts = {"cpu": torch.optim.Adam(model.parameters(), lr=1e-2)}
    opts[DEVICE] = torch.optim.Adam(on_tiny.parameters(), lr=1e-2)
    steps = {"cpu": opts["cpu"].step, DEVICE: torch.compile(opts[DEVICE].step)}
    for _ in range(3):
        for device, m in (("cpu", model), (DEVICE, on_tiny)):
            opts[device].zero_grad()
            F.mse_loss(m(x.to(device)), y.to(device)).backward()
            steps[device]()
    for t, c in zip(on_tiny.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(t.detach().cpu(), c.detach(), **PARAM_TOL)


def test_a_compiled_forward_is_one_schedule_replayed_on_the_next_call():
    model = seeded(MODELS["attention"][0]).eval()
    x = batch(MODELS["attention"][1]).to(DEVICE)
    compiled = torch.compile(copy.deepcopy(model).to(DEVICE), backend="tiny")
    with torch.no_grad():
        compiled(x).cpu()
        with counting() as c, torch._dynamo.config.patch(error_on_recompile=True):
            out = compiled(x).cpu()
    assert c["syncs"] == 1 and c["schedule_hits"] == 1 and c["compiles"] == 0
    torch.testing.assert_close(out, model(x.cpu()).detach(), rtol=1e-4, atol=1e-5)


def with_a_break(x, log):
    y = x.relu() * 2
    log.append(y.sum().item())  # dynamo ends the graph here: the value goes to Python
    print("between the graphs")
    return y - y.mean()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_graph_breaks_at_item_and_print_give_the_cpus_values(backend, capsys):
    x = batch((3, 5))
    cpu_log, tiny_log = [], []
    expected = with_a_break(x, cpu_log)
    actual = torch.compile(with_a_break, **BACKENDS[backend])(x.to(DEVICE), tiny_log)
    torch.testing.assert_close(actual.cpu(), expected)
    assert tiny_log == pytest.approx(cpu_log, rel=1e-6)
    assert capsys.readouterr().out.count("between the graphs") == 2
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


def test_a_second_batch_size_compiles_once_more_then_no_more():
    model = seeded(MODELS["mlp"][0])
    compiled = torch.compile(copy.deepcopy(model).to(DEVICE))
    for size in (8, 5):
        x = batch((size, 16), seed=size)
        torch.testing.assert_close(compiled(x.to(DEVICE)).cpu(), model(x), rtol=1e-4, atol=1e-5)
    x = batch((3, 16), seed=3)
    with torch._dynamo.config.patch(error_on_recompile=True):  # the second size made the batch dim dynamic
        torch.testing.assert_close(compiled(x.to(DEVICE)).cpu(), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_an_error_in_the_model_is_the_one_compiling_it_on_the_cpu_raises(backend):
    # dynamo finds it while tracing (torch's shape checks on fake tensors), before any backend runs
    model = nn.Linear(4, 3)
    x = torch.randn(2, 5)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.compile(model, **BACKENDS[backend])(x)
    torch._dynamo.reset()
    with pytest.raises(type(on_cpu.value)) as on_tiny:
        torch.compile(copy.deepcopy(model).to(DEVICE), **BACKENDS[backend])(x.to(DEVICE))
    cause = "RuntimeError('a and b must have same reduction dim, but got [2, 5] X [4, 3].')"
    assert cause in str(on_cpu.value) and cause in str(on_tiny.value)


def test_an_op_without_a_tiny_kernel_names_itself_when_the_fallback_is_off(monkeypatch):
    op = torch.special.i0e
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::special_i0e", "PrivateUse1"):
        pytest.skip("special_i0e now has a tiny kernel")
    x = batch((4,))
    compiled = torch.compile(lambda t: op(t) + 1, backend="tiny")
    monkeypatch.setenv("TINY_FALLBACK", "0")
    with pytest.raises(RuntimeError, match=r"aten::special_i0e\S* has no tiny kernel and the CPU fallback is disabled"):
        compiled(x.to(DEVICE)).cpu()
    monkeypatch.delenv("TINY_FALLBACK")
    torch.testing.assert_close(compiled(x.to(DEVICE)).cpu(), op(x) + 1)


def test_backend_tiny_refuses_modes_and_options_by_name():
    x = batch((3,)).to(DEVICE)
    with pytest.raises(Exception, match=r"backend='tiny'\) takes no mode or options \(got mode='max-autotune'\)"):
        torch.compile(lambda t: t.sin(), backend="tiny", mode="max-autotune")(x)
    with pytest.raises(Exception, match=r"options=\['trace.enabled'\]"):
        torch.compile(lambda t: t.sin(), backend="tiny", options={"trace.enabled": True})(x)


def test_inductor_settings_on_a_graph_on_tiny_warn_that_they_do_not_apply():
    x = batch((3, 4))
    with pytest.warns(UserWarning, match="do not apply to graphs on tiny"):
        out = torch.compile(lambda t: t.cos() + 1, mode="max-autotune-no-cudagraphs")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), x.cos() + 1)


def test_a_cpu_graph_in_the_same_process_still_goes_to_inductor():
    torch.compile(lambda t: t * 2)(batch((3,)).to(DEVICE)).cpu()
    # a matmul is one call into ATen in Inductor's generated Python: no C++ to build, the test stays quick
    a, b = batch((3, 4)), batch((4, 2), seed=2)
    before = sum(torch._dynamo.utils.counters["inductor"].values())
    torch.testing.assert_close(torch.compile(torch.mm)(a, b), a @ b)
    assert sum(torch._dynamo.utils.counters["inductor"].values()) > before
