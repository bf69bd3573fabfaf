"""The differential fuzzer (run.py) as part of the test suite: a few hundred seeded random programs on tiny
against the CPU, the fuzzer's self-check (cpu against cpu), and its shrinker on a planted bug.

`make fuzz` runs 10,000 programs; this is the bounded slice `make test` runs.
"""

import re
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from comparator import compare  # noqa: E402
from generator import generate  # noqa: E402
from programs import execute, materialize  # noqa: E402
from shrinker import op_names, reproducer, shrink  # noqa: E402

PROGRAMS = 300


def fuzz(*args, timeout=600):
    cmd = [sys.executable, str(HERE / "run.py"), "--jobs", "2", "--timeout", "60", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_tiny_agrees_with_the_cpu_on_seeded_random_programs():
    shrink = ("--shrink", "1", "--shrink-budget", "15", "--shrink-total", "45")
    p = fuzz("--programs", str(PROGRAMS), "--seed", "0", *shrink)
    assert p.returncode == 0, f"the fuzzer's reproducers:\n{p.stdout[-30000:]}\n{p.stderr[-3000:]}"


def test_self_check_cpu_against_cpu_reports_no_mismatch():
    p = fuzz("--programs", str(PROGRAMS), "--seed", "0", "--self-check", "--shrink", "0")
    assert p.returncode == 0, p.stdout[-10000:] + p.stderr[-3000:]
    assert f"{PROGRAMS} programs, 0 mismatches, 0 crashes, 0 hangs" in p.stdout


def test_a_planted_bug_shrinks_to_a_short_program():
    def fails(program):
        mismatch = compare(execute(program, "cpu"), execute(program, "cpu", plant="flip"), len(program))
        return mismatch is not None and mismatch["category"] == "values"

    program = next(p for p in (generate(seed) for seed in range(200)) if fails(p))
    small = shrink(program, fails, budget_s=60, materialize=materialize)
    assert fails(small)
    assert len(small) == 2 < len(program), reproducer(small, None)  # an input, and the flip
    assert "flip" in op_names(small)
    code = reproducer(small, None)
    assert ".flip(" in code and 'run("tiny")' in code


def test_a_crash_is_isolated_and_reported_with_its_seed():
    p = fuzz("--programs", "20", "--self-check", "--plant", "abort:flip", "--shrink", "0")
    assert p.returncode == 1
    assert re.search(r"^seed \d+: crash: killed by signal 6", p.stdout, re.M), p.stdout[-5000:]
    assert re.search(r"20 programs, 0 mismatches, [1-9]\d* crashes, 0 hangs", p.stdout), p.stdout[-5000:]


def test_a_cast_of_rounded_floats_compares_at_the_precision_it_was_computed_in():
    # seed 8454: a float32 conv_transpose2d cast to float64; the two devices sum in different orders, so
    # the float64 values differ by float32 rounding, not by float64's
    program = generate(8454)
    cast = next(rec for rec in program if rec["op"] == "cast" and "float64" in rec["code"])
    assert cast.get("tol") == {cast["code"].split(" =")[0]: "float32"}, cast
    cpu = torch.tensor([17.816999435424805], dtype=torch.float64)
    tiny = torch.tensor([17.816997528076172], dtype=torch.float64)  # one float32 step away
    summary = {"dtype": "float64", "shape": (1,), "stride": (1,), "offset": 0, "requires_grad": False}
    summary |= {"base": None, "shares": ()}

    def log(values, tol):
        return [("end", "t5", {**summary, "values": values}, tol)]

    assert compare(log(cpu, None), log(tiny, None), 0)["category"] == "values"
    assert compare(log(cpu, "float32"), log(tiny, "float32"), 0) is None
    assert compare(log(cpu, "float32"), log(cpu + 0.01, "float32"), 0)["category"] == "values"


def test_products_convolutions_and_reductions_at_the_lowerings_sizes_match_cpu():
    # shapes.py: sizes near the lowering's thresholds, layouts and dtypes the op fuzzer's small tensors never reach
    cmd = [sys.executable, str(HERE / "shapes.py"), "--cases", "60", "--seed", "0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-20000:] + p.stderr[-3000:]
    assert "60 cases, 0 failures" in p.stdout


def test_the_shapes_check_fails_on_a_wrong_product():
    # its comparison catches one wrong element of a product (a bug of the size of seed 24162's), and not rounding
    sys.path.insert(0, str(HERE))
    import shapes

    a, b = torch.randn(16, 2), torch.randn(2, 8)
    good, bad = a @ b, (a @ b).clone()
    bad[3, 5] += 0.5
    scale = a.abs() @ b.abs()
    assert shapes.product_error(good, (a.double() @ b.double()), scale.double()) < 1e-6
    assert shapes.product_error(bad, (a.double() @ b.double()), scale.double()) > 0.05
