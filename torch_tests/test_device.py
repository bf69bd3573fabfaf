"""The device as a user meets it: torch.device("tiny"), torch.tiny.*, .tiny(), autoload, stats."""

import json
import os
import subprocess
import sys
import textwrap

import torch
from conftest import DEVICE, assert_same

STATS_KEYS = (
    "kernels",
    "compiles",
    "cache_hits",
    "syncs",
    "fallbacks",
    "live_buffers",
    "live_bytes",
)


def run_python(code, *, with_stderr=False, **env):
    """Run code in a fresh interpreter (same venv) and return its stdout (plus stderr if asked);
    fail with its stderr if it exits with an error."""
    full_env = {**os.environ, **env}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr if with_stderr else proc.stdout


def test_device_names_parse_like_other_backends():
    assert torch.device("tiny").type == "tiny"
    assert torch.device("tiny").index is None
    assert torch.device("tiny:0") == torch.device("tiny", 0)
    assert str(torch.device("tiny:0")) == "tiny:0"


def test_tensor_created_on_tiny_lives_on_device_zero():
    t = torch.zeros(2, device="tiny")
    assert t.device == torch.device("tiny", 0)
    t0 = torch.zeros(2, device="tiny:0")
    assert t0.device == torch.device("tiny:0")
    t1 = torch.zeros(2, device=torch.device("tiny"))
    assert t1.device.type == "tiny"


def test_torch_tiny_module_reports_an_available_device():
    assert torch.tiny.is_available() is True
    assert isinstance(torch.tiny.device_count(), int)
    assert torch.tiny.device_count() >= 1
    assert torch.tiny.current_device() == 0


def test_set_device_selects_the_current_device():
    torch.tiny.set_device(0)
    assert torch.tiny.current_device() == 0
    assert torch.zeros(1, device="tiny").device.index == 0


def test_synchronize_and_manual_seed_are_callable():
    torch.tiny.synchronize()
    torch.tiny.manual_seed(0)
    torch.tiny.synchronize()


def test_is_tiny_tells_tiny_tensors_apart():
    assert torch.zeros(2, device="tiny").is_tiny is True
    assert torch.zeros(2).is_tiny is False


def test_tensor_tiny_moves_a_cpu_tensor_to_tiny():
    cpu = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = cpu.tiny()
    assert t.device.type == "tiny"
    assert_same(t, cpu.clone())


def test_module_tiny_moves_parameters_and_buffers():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    expected = {k: v.clone() for k, v in cpu_model.state_dict().items()}
    model = cpu_model.tiny()
    assert model is cpu_model  # Module.to moves in place and returns self
    for name, value in model.state_dict().items():
        assert value.device.type == "tiny", name
        assert_same(value, expected[name], path=name)
    for p in model.parameters():
        assert isinstance(p, torch.nn.Parameter) and p.device.type == "tiny"


def test_tiny_is_available_after_plain_import_torch_through_autoload():
    out = run_python(
        """
        import json, sys
        import torch
        t = torch.zeros(2, device="tiny")
        print(json.dumps([t.device.type, t.cpu().tolist(), torch.tiny.is_available(), "torch_tiny" in sys.modules]))
        """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="1",
    )
    assert json.loads(out.strip().splitlines()[-1]) == ["tiny", [0.0, 0.0], True, True]


def test_importing_torch_tiny_before_torch_works():
    out = run_python(
        """
        import json
        import torch_tiny
        import torch
        t = torch.ones(3, device="tiny") * 2
        print(json.dumps([t.device.type, t.cpu().tolist()]))
        """
    )
    assert json.loads(out.strip().splitlines()[-1]) == ["tiny", [2.0, 2.0, 2.0]]


def test_stats_has_every_counter_as_an_int():
    stats = torch.tiny.stats()
    assert isinstance(stats, dict)
    for key in STATS_KEYS:
        assert key in stats, f"torch.tiny.stats() lacks {key!r}"
        assert isinstance(stats[key], int), f"{key} is {type(stats[key]).__name__}"
        assert stats[key] >= 0, key


def test_reset_stats_clears_the_event_counters():
    x = torch.arange(8, dtype=torch.float32, device="tiny")
    (x * 3 + 1).cpu()
    torch.tiny.reset_stats()
    stats = torch.tiny.stats()
    for key in ("kernels", "compiles", "cache_hits", "syncs", "fallbacks"):
        assert stats[key] == 0, f"{key} = {stats[key]} after reset_stats()"


def test_cpu_copy_counts_a_sync_and_a_kernel():
    x = torch.arange(8, dtype=torch.float32, device="tiny")
    torch.tiny.synchronize()
    torch.tiny.reset_stats()
    y = x * 2 + 1
    assert torch.tiny.stats()["syncs"] == 0
    y.cpu()
    stats = torch.tiny.stats()
    assert stats["syncs"] >= 1
    assert stats["kernels"] >= 1


def test_live_buffers_and_bytes_follow_tensor_lifetime():
    import gc

    gc.collect()
    torch.tiny.synchronize()
    before = torch.tiny.stats()
    t = torch.ones(1024, dtype=torch.float32, device="tiny")
    u = (t + 1).cpu()  # realize t
    during = torch.tiny.stats()
    assert during["live_buffers"] >= before["live_buffers"] + 1
    assert during["live_bytes"] >= before["live_bytes"] + 1024 * 4
    del t, u
    gc.collect()
    torch.tiny.synchronize()
    after = torch.tiny.stats()
    assert after["live_buffers"] == before["live_buffers"]
    assert after["live_bytes"] == before["live_bytes"]


def test_device_context_manager_creates_tiny_tensors():
    with torch.device("tiny"):
        t = torch.ones(3)
    assert t.device.type == DEVICE
    assert torch.tiny.current_device() == 0
