"""The upstream runner's own bookkeeping: known failures only shrink, outcomes follow from samples, and a
run writes its summary and fails on an unexpected pass."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opinfo_record import Tally, outcome, parse_known_failures
from run import write_known_failures

RUN = Path(__file__).with_name("run.py")


def record(op, kind, dtype, mode, result, reason="boom"):
    return {"op": op, "kind": kind, "dtype": dtype, "mode": mode, "outcome": result, "reason": reason}


def test_known_failure_lines_parse_and_bad_lines_are_rejected():
    (entry,) = parse_known_failures("# comment\n\nadd  forward  float16  both  rounds differently here\n")
    assert (entry.op, entry.kind, entry.dtype, entry.mode, entry.reason) == (
        "add",
        "forward",
        "float16",
        "both",
        "rounds differently here",
    )
    assert entry.matches("add", "forward", "float16", "native")
    assert not entry.matches("add", "forward", "float32", "native")
    with pytest.raises(ValueError, match="known_failures.txt:1"):
        parse_known_failures("add sideways float16 both reason\n")
    with pytest.raises(ValueError, match="known_failures.txt:2"):
        parse_known_failures("# header\nadd forward float16\n")


def test_outcome_follows_from_the_samples():
    tally = Tally("add", "forward", "float32")
    with tally.sample(0):
        pass
    assert outcome(tally, None) == ("pass", "")
    with tally.sample(1):
        raise AssertionError("values differ")
    assert outcome(tally, None)[0] == "fail"
    assert "sample 1: AssertionError: values differ" in outcome(tally, None)[1]


def test_needing_a_missing_kernel_is_no_kernel_natively_and_a_failure_with_the_fallback(monkeypatch):
    message = "tiny: aten::cumsum.out has no tiny kernel and the CPU fallback is disabled (TINY_FALLBACK=0)"
    monkeypatch.setenv("TINY_FALLBACK", "0")
    tally = Tally("cumsum", "forward", "float32")
    with tally.sample(0):
        raise RuntimeError(message)
    assert outcome(tally, None) == ("no_kernel", "needs aten::cumsum.out")
    monkeypatch.delenv("TINY_FALLBACK")
    tally = Tally("cumsum", "forward", "float32")
    with tally.sample(0):
        raise RuntimeError(message)
    assert outcome(tally, None)[0] == "fail"


def test_rewriting_known_failures_drops_passes_keeps_unrun_lines_and_merges_modes(tmp_path):
    path = tmp_path / "known_failures.txt"
    path.write_text(
        "# header stays\n"
        "fixed     forward float32 both     was broken\n"
        "unrun     forward float64 native   not run this time\n"
        "still     forward float32 fallback kept reason\n"
    )
    records = [
        record("fixed", "forward", "float32", "native", "pass"),
        record("fixed", "forward", "float32", "fallback", "xpass"),
        record("still", "forward", "float32", "fallback", "xfail"),
        record("new", "backward", "float32", "native", "fail", "grads differ"),
        record("new", "backward", "float32", "fallback", "fail", "grads differ"),
        record("half", "forward", "float32", "native", "no_kernel"),
        record("half", "forward", "float32", "fallback", "fail", "wrong"),
    ]
    write_known_failures(records, path)
    entries = {(k.op, k.kind, k.dtype): (k.mode, k.reason) for k in parse_known_failures(path.read_text())}
    assert path.read_text().startswith("# header stays\n")
    assert entries == {
        ("unrun", "forward", "float64"): ("native", "not run this time"),
        ("still", "forward", "float32"): ("fallback", "kept reason"),
        ("new", "backward", "float32"): ("both", "grads differ"),
        ("half", "forward", "float32"): ("fallback", "wrong"),
    }


def test_a_run_writes_its_summary_and_fails_on_an_unexpected_pass(tmp_path):
    known = tmp_path / "known.txt"
    known.write_text("abs forward float32 both pretended failure\n")
    env = {k: v for k, v in os.environ.items() if k != "TINY_FALLBACK"}
    env["TINY_UPSTREAM_KNOWN_FAILURES"] = str(known)
    summary = tmp_path / "summary"
    command = [sys.executable, str(RUN), "--ops", "abs,neg", "--modes", "fallback", "--kinds", "forward"]
    command += ["--dtypes", "float32", "--jobs", "1", "--summary", str(summary)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "upstream: 1 passed, 1 failed, 0 skipped" in done.stdout
    data = json.loads(summary.with_suffix(".json").read_text())
    ops = data["modes"]["fallback"]["ops"]
    assert ops["abs"]["forward/float32"]["outcome"] == "xpass"
    assert ops["neg"]["forward/float32"]["outcome"] == "pass"
    assert data["modes"]["fallback"]["samples"]["forward"]["pass"] > 0
    assert "xpass" in summary.with_suffix(".txt").read_text()
