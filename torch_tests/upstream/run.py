"""Runs the upstream OpInfo suite (opinfo_suite.py) against tiny and writes its summary.

    .venv/bin/python torch_tests/upstream/run.py --slice ci     # `make test`: bounded
    .venv/bin/python torch_tests/upstream/run.py --slice full   # `make test-upstream`: everything

The OpInfos run in chunks, each a pytest subprocess, `--jobs` at a time, in each mode: native
(TINY_FALLBACK=0, a sample that needs the CPU fallback counts as no_kernel) and fallback. The ci slice
checks the first `--max-samples` samples of each test. A process that dies (segfault, abort) or a sample
that runs past `--sample-timeout` costs that one test, recorded as crash or timeout with the sample's
index; the chunk goes on in a new process without it. The summary (counts per mode, kind, dtype and op;
the ATen ops that natively lack a kernel; the failures) goes to <summary>.json and <summary>.txt, with
each chunk's pytest output in <summary>-logs/, and the totals are printed. Exit status 1 when a test fails
that known_failures.txt does not list, a listed one passes (remove its line), or a test crashes or times
out.

`--write-known-failures` rewrites known_failures.txt from this run: the failures it saw are listed, the
tests it saw pass are removed, the tests it did not run keep their lines.
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from opinfo_record import (  # noqa: E402
    KINDS,
    KNOWN_FAILURES_FILE,
    MODES,
    parse_known_failures,
)

SUITE = HERE.relative_to(ROOT) / "opinfo_suite.py"
ALL_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool")
OPT_IN_DTYPES = ("complex64", "complex128")  # the full slice runs them; the ci slice when --dtypes names them
ON_REQUEST_DTYPES = ("complex32",)  # only when --dtypes names it (no slice runs it)
REPORT_ORDER = ALL_DTYPES + OPT_IN_DTYPES + ON_REQUEST_DTYPES
# mode -> (kinds, dtypes), and the samples checked per test (None: all)
SLICES = {
    "full": {
        "modes": {"native": (KINDS, ALL_DTYPES + OPT_IN_DTYPES), "fallback": (KINDS, ALL_DTYPES + OPT_IN_DTYPES)},
        "max_samples": None,
    },
    "ci": {
        "modes": {"native": (("forward", "backward"), ("float32",)), "fallback": (("forward",), ("float32",))},
        "max_samples": 32,
    },
}
BAD = ("fail", "xpass", "crash", "timeout")


def op_ids() -> list[str]:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from opinfo_record import op_id; "
        "from torch.testing._internal.common_methods_invocations import op_db; "
        "print('\\n'.join(op_id(op) for op in op_db))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(HERE)], env=env, check=True, capture_output=True, text=True)
    return out.stdout.split()


# ---------------------------------------------------------------------------------------------
# A chunk of OpInfos in one mode, in as many processes as its crashes take


class Chunk:
    def __init__(self, mode: str, ops: list[str], kinds, dtypes, workdir: Path, index: int, args):
        self.mode, self.ops, self.kinds, self.dtypes, self.args = mode, ops, kinds, dtypes, args
        self.name = f"{mode}-{index:03d}"
        self.results = workdir / f"{self.name}.jsonl"
        self.log = workdir / f"{self.name}.log"
        self.records: dict[str, dict] = {}  # nodeid -> end record
        self.started: dict | None = None  # the start record of the test now running
        self.sample: int | None = None  # the sample it is checking
        self.started_at = 0.0  # when the running test, or its current sample, started
        self.offset = 0  # bytes of self.results read
        self.proc: subprocess.Popen | None = None
        self.attempts = 0
        self.errors: list[str] = []  # processes that died outside a test
        self.done = False

    def start(self):
        self.attempts += 1
        env = dict(
            os.environ,
            TINY_UPSTREAM_OPS=",".join(self.ops),
            TINY_UPSTREAM_KINDS=",".join(self.kinds),
            TINY_UPSTREAM_DTYPES=",".join(self.dtypes),
            TINY_UPSTREAM_RESULTS=str(self.results),
            PYTHONFAULTHANDLER="1",
        )
        if self.args.max_samples is not None:
            env["TINY_UPSTREAM_MAX_SAMPLES"] = str(self.args.max_samples)
        if self.args.run_known_crashes:
            env["TINY_UPSTREAM_RUN_KNOWN_CRASHES"] = "1"
        if self.mode == "native":
            env["TINY_FALLBACK"] = "0"
        else:
            env.pop("TINY_FALLBACK", None)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT), str(SUITE)]
        for nodeid in self.records:
            command += ["--deselect", f"{SUITE}::{nodeid}"]
        with open(self.log, "a") as log:
            log.write(f"\n==== attempt {self.attempts}: {' '.join(command[:8])} ...\n")
            log.flush()
            self.proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started, self.started_at = None, time.monotonic()

    def read(self):
        if not self.results.exists():
            return
        with open(self.results) as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[: data.rfind("\n") + 1]
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            record = json.loads(line)
            if record["event"] == "start":
                self.started, self.started_at, self.sample = record, time.monotonic(), None
            elif record["event"] == "sample":
                self.sample, self.started_at = record["index"], time.monotonic()
            else:
                self.records[record["nodeid"]] = record
                self.started = None

    def poll(self) -> bool:
        """Advances the chunk; True once it has finished."""
        self.read()
        code = self.proc.poll()
        if code is None:
            if self.started is not None and time.monotonic() - self.started_at > self.args.sample_timeout:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.read()
                if self.started is not None:
                    self.lost("timeout", f"ran past {self.args.sample_timeout:.0f} s")
                return self.restart()
            return False
        self.read()
        if self.started is not None:
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            self.lost("crash", f"the process died ({how}); see {self.log}")
            return self.restart()
        if code not in (0, 1, 5):  # pytest: 0 passed, 1 tests failed, 5 none collected
            self.errors.append(f"{self.name}: pytest exited with status {code} outside any test; see {self.log}")
        self.done = True
        return True

    def lost(self, outcome: str, reason: str):
        if self.sample is not None:
            reason = f"sample {self.sample}: {reason}"
        record = dict(self.started, event="end", outcome=outcome, reason=reason, samples={}, seconds=None)
        self.records[record["nodeid"]] = record
        self.started = None

    def restart(self) -> bool:
        if self.attempts > len(self.records) + 3:  # no progress: give up on the chunk
            self.errors.append(f"{self.name}: gave up after {self.attempts} processes; see {self.log}")
            self.done = True
            return True
        self.start()
        return False


def run_chunks(chunks: list[Chunk], jobs: int, progress) -> None:
    pending, running = list(chunks), []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                chunk = pending.pop(0)
                chunk.start()
                running.append(chunk)
            time.sleep(0.2)
            for chunk in list(running):
                if chunk.poll():
                    running.remove(chunk)
                    progress(chunk)
    finally:  # interrupted: no test process outlives the run
        for chunk in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(chunk.proc.pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# The summary


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def summarize(records: list[dict], errors: list[str], seconds: float, config: dict) -> dict:
    modes = {}
    for mode in MODES:
        mine = [r for r in records if r["mode"] == mode]
        if not mine:
            continue
        totals = defaultdict(Counter)  # kind -> outcome -> tests
        unchecked = Counter()  # values_not_compared, not_run: samples
        samples = defaultdict(Counter)  # kind -> sample outcome -> samples
        by_dtype = defaultdict(lambda: defaultdict(lambda: {"tests": Counter(), "samples": Counter()}))
        ops = defaultdict(dict)
        missing, fallback_ops, skip_reasons = Counter(), Counter(), Counter()
        for r in mine:
            totals[r["kind"]][r["outcome"]] += 1
            samples[r["kind"]].update(r.get("samples") or {})
            cell = by_dtype[r["kind"]][r["dtype"]]
            cell["tests"][r["outcome"]] += 1
            cell["samples"].update(r.get("samples") or {})
            ops[r["op"]][f"{r['kind']}/{r['dtype']}"] = {
                "outcome": r["outcome"],
                "reason": r.get("reason") or r.get("known_reason") or "",
                "samples": r.get("samples") or {},
            }
            missing.update(r.get("missing") or {})
            unchecked.update({k: r.get(k) or 0 for k in ("values_not_compared", "not_run")})
            fallback_ops.update({k: 1 for k in r.get("fallback_ops") or {}})
            if r["outcome"] == "skip":
                skip_reasons[r.get("reason") or ""] += 1
        modes[mode] = {
            "totals": {k: dict(v) for k, v in totals.items()},
            "samples": {k: dict(v) for k, v in samples.items()},
            "values_not_compared": unchecked["values_not_compared"],  # random ops, empty: dtype and shape only
            "samples_not_run": unchecked["not_run"],  # past --max-samples
            "by_dtype": {
                k: {d: {"tests": dict(c["tests"]), "samples": dict(c["samples"])} for d, c in v.items()}
                for k, v in by_dtype.items()
            },
            "ops": dict(sorted(ops.items())),
            "missing_kernels": dict(missing.most_common()),  # ATen op -> samples that needed it
            "fallback_ops": dict(fallback_ops.most_common()),  # ATen op -> tests that used the fallback for it
            "skip_reasons": dict(skip_reasons.most_common()),
            "problems": [
                {k: r.get(k) for k in ("op", "kind", "dtype", "outcome", "reason", "known_reason")}
                for r in sorted(mine, key=lambda r: (r["op"], r["kind"], r["dtype"]))
                if r["outcome"] in BAD
            ],
        }
    return {"config": config, "seconds": round(seconds, 1), "errors": errors, "modes": modes}


def render(summary: dict) -> str:
    lines = [f"upstream OpInfo suite: {summary['config']}", f"took {summary['seconds']:.0f} s", ""]
    for mode, m in summary["modes"].items():
        lines.append(f"== {mode} ({'TINY_FALLBACK=0' if mode == 'native' else 'with the CPU fallback'})")
        lines.append(
            f"{'kind':<14}{'dtype':<10}{'OpInfos pass':>20}{'samples pass':>24}"
            f"{'fail':>6}{'xfail':>6}{'no_kernel':>10}{'skip':>6}{'crash':>6}"
        )
        for kind in KINDS:
            for dtype, cell in sorted(m["by_dtype"].get(kind, {}).items(), key=lambda x: REPORT_ORDER.index(x[0])):
                t, s = Counter(cell["tests"]), Counter(cell["samples"])
                tests, ran = sum(t.values()), sum(s.values())
                lines.append(
                    f"{kind:<14}{dtype:<10}{t['pass']:>6}/{tests:<6}{percent(t['pass'], tests):>8}"
                    f"{s['pass']:>8}/{ran:<7}{percent(s['pass'], ran):>8}"
                    f"{t['fail'] + t['xpass']:>6}{t['xfail']:>6}{t['no_kernel']:>10}{t['skip']:>6}"
                    f"{t['crash'] + t['timeout']:>6}"
                )
        lines.append(
            f"samples whose values are not compared (random, uninitialized): {m['values_not_compared']}; "
            f"samples left out by --max-samples: {m['samples_not_run']}"
        )
        if m["missing_kernels"]:
            top = list(m["missing_kernels"].items())[:25]
            lines.append("ATen ops without a tiny kernel, by samples that need them (most wanted first):")
            lines += [f"  {n:>6}  {name}" for name, n in top]
        if m["fallback_ops"]:
            top = list(m["fallback_ops"].items())[:25]
            lines.append("ATen ops served by the CPU fallback, by tests that used them:")
            lines += [f"  {n:>6}  {name}" for name, n in top]
        if m["skip_reasons"]:
            lines.append("skipped tests, by reason:")
            lines += [f"  {n:>6}  {reason[:150]}" for reason, n in m["skip_reasons"].items()]
        if m["problems"]:
            lines.append("unexpected outcomes (fail: add a fix or a known_failures.txt line; xpass: remove the line):")
            for p in m["problems"]:
                reason = (p["reason"] or p["known_reason"] or "")[:200]
                lines.append(f"  {p['outcome']:<8}{p['op']} {p['kind']} {p['dtype']}: {reason}")
        lines.append("")
    if summary["errors"]:
        lines.append("errors outside tests:")
        lines += [f"  {e}" for e in summary["errors"]]
    return "\n".join(lines) + "\n"


def closing_line(records: list[dict]) -> str:
    outcomes = Counter(r["outcome"] for r in records)
    detail = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
    passed = outcomes["pass"] + outcomes["xfail"]
    failed = sum(outcomes[k] for k in BAD)
    skipped = outcomes["skip"] + outcomes["no_kernel"]
    return f"upstream tests by outcome: {detail}\nupstream: {passed} passed, {failed} failed, {skipped} skipped"


# ---------------------------------------------------------------------------------------------
# known_failures.txt from a run


def write_known_failures(records: list[dict], path: Path) -> None:
    text = path.read_text() if path.exists() else ""
    header = [line for line in text.splitlines() if line.startswith("#")]
    ran = {(r["op"], r["kind"], r["dtype"], r["mode"]): r for r in records}
    failing = {"fail", "xfail", "crash", "timeout"}
    listed = defaultdict(dict)  # (op, kind, dtype) -> mode -> reason
    old_reason = {}
    for k in parse_known_failures(text):
        old_reason[(k.op, k.kind, k.dtype)] = k.reason
        for mode in MODES if k.mode == "both" else (k.mode,):
            if (k.op, k.kind, k.dtype, mode) not in ran:  # this run says nothing about it: the line stays
                listed[(k.op, k.kind, k.dtype)][mode] = k.reason
    for (op, kind, dtype, mode), r in ran.items():
        if r["outcome"] in failing:
            reason = old_reason.get((op, kind, dtype)) or r.get("reason") or "unknown"
            prefix = {"crash": "crash: ", "timeout": "hang: "}.get(r["outcome"], "")
            if prefix and not reason.startswith(prefix):  # so that later runs do not run it
                reason = prefix + reason
            listed[(op, kind, dtype)][mode] = " ".join(reason.split())[:240]
    order = REPORT_ORDER
    body = sorted(listed.items(), key=lambda item: (item[0][0], KINDS.index(item[0][1]), order.index(item[0][2])))
    width = max([len(op) for (op, _, _), _ in body] + [10])
    lines = list(header)
    for (op, kind, dtype), by_mode in body:
        mode = "both" if len(by_mode) == len(MODES) else next(iter(by_mode))
        lines.append(f"{op:<{width}} {kind:<13} {dtype:<8} {mode:<8} {next(iter(by_mode.values()))}")
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that run_chunks ends its test processes
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slice", choices=sorted(SLICES), default="full", help="which modes, kinds and dtypes")
    parser.add_argument("--modes", help="comma-separated: native,fallback (default: the slice's)")
    parser.add_argument("--kinds", help="comma-separated, overrides the slice's: " + ",".join(KINDS))
    parser.add_argument(
        "--dtypes",
        help="comma-separated, overrides the slice's: " + ",".join(REPORT_ORDER),
    )
    parser.add_argument("--ops", help="comma-separated OpInfo names (name or name.variant); default: all of op_db")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes at a time")
    parser.add_argument("--chunk", type=int, default=60, help="OpInfos per process")
    parser.add_argument(
        "--sample-timeout", type=float, default=60.0, help="seconds one sample (or a test between samples) may run"
    )
    parser.add_argument("--max-samples", type=int, help="check only each test's first N samples (default: the slice's)")
    parser.add_argument(
        "--run-known-crashes", action="store_true", help="also run known failures that crash or hang (crash:, hang:)"
    )
    parser.add_argument("--summary", default=str(ROOT / "upstream_summary"), help="writes SUMMARY.json, SUMMARY.txt")
    parser.add_argument("--write-known-failures", action="store_true", help="rewrite known_failures.txt")
    args = parser.parse_args()

    plan = SLICES[args.slice]["modes"]
    if args.max_samples is None:
        args.max_samples = SLICES[args.slice]["max_samples"]
    # The full run also tries the known crashes and hangs, so a fixed one shows up as an xpass.
    args.run_known_crashes = args.run_known_crashes or args.slice == "full"
    modes = args.modes.split(",") if args.modes else list(plan)
    ops = args.ops.split(",") if args.ops else op_ids()
    config = {"slice": args.slice, "modes": modes, "ops": len(ops), "jobs": args.jobs, "max_samples": args.max_samples}
    start = time.monotonic()
    logs = Path(args.summary + "-logs")  # each chunk's pytest output and results
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    chunks = []
    for mode in modes:
        kinds = args.kinds.split(",") if args.kinds else plan[mode][0]
        dtypes = args.dtypes.split(",") if args.dtypes else plan[mode][1]
        config[mode] = {"kinds": list(kinds), "dtypes": list(dtypes)}
        for i in range(0, len(ops), args.chunk):
            chunks.append(Chunk(mode, ops[i : i + args.chunk], kinds, dtypes, logs, i // args.chunk, args))
    finished = []

    def progress(chunk: Chunk):
        finished.append(chunk)
        outcomes = Counter(r["outcome"] for r in chunk.records.values())
        print(
            f"[{len(finished)}/{len(chunks)} {time.monotonic() - start:6.0f} s] {chunk.name} "
            f"({chunk.ops[0]} .. {chunk.ops[-1]}): {dict(sorted(outcomes.items()))}",
            flush=True,
        )
        for r in chunk.records.values():
            if r["outcome"] in BAD:
                print(f"    {r['outcome']}: {r['op']} {r['kind']} {r['dtype']}: {(r.get('reason') or '')[:200]}")

    run_chunks(chunks, args.jobs, progress)
    records = [r for c in chunks for r in c.records.values()]
    errors = [e for c in chunks for e in c.errors]
    summary = summarize(records, errors, time.monotonic() - start, config)
    Path(args.summary + ".json").write_text(json.dumps(summary, indent=1) + "\n")
    text = render(summary)
    Path(args.summary + ".txt").write_text(text)
    print(text)
    print(f"summary: {args.summary}.txt, {args.summary}.json")
    if args.write_known_failures:
        write_known_failures(records, KNOWN_FAILURES_FILE)
        print(f"rewrote {KNOWN_FAILURES_FILE}")
    print(closing_line(records))
    bad = any(r["outcome"] in BAD for r in records) or bool(errors)
    return 1 if bad and not args.write_known_failures else 0


if __name__ == "__main__":
    sys.exit(main())
