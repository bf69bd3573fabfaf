"""Outcomes of the upstream OpInfo suite: per sample, per test, the known failures, and the results file.

A test is one (OpInfo, kind, dtype): kind is forward, backward, out or noncontiguous. Each of its samples
ends as pass, fail, no_kernel (natively: the sample needs an ATen op tiny has no kernel for, named by the
fallback's error) or skip (with a reason). The test's outcome follows from its samples and from
known_failures.txt:

    pass       every sample passes (an op listed as a known failure that passes is an xpass: an error)
    fail       a sample fails, and the test is not a known failure
    xfail      a sample fails, and the test is a known failure
    xpass      a known failure whose samples all pass: remove its line from known_failures.txt (when
               TINY_UPSTREAM_MAX_SAMPLES left samples out, such a test stays an xfail: the rest may fail)
    no_kernel  no sample fails, but some need the CPU fallback (native mode only)
    skip       nothing ran (with the reason)
    crash      the process died in the test (recorded by run.py)
    timeout    the test ran past run.py's limit (recorded by run.py)

A known failure whose reason starts with "crash:" or "hang:" is not run: it is an xfail without running.

When TINY_UPSTREAM_RESULTS names a file, each test appends a JSON line when it starts, one per sample and
one when it ends, so that run.py can tell which test and sample a dead process was running.
"""

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

KNOWN_FAILURES_FILE = Path(__file__).with_name("known_failures.txt")
KINDS = ("forward", "backward", "out", "noncontiguous")
MODES = ("native", "fallback")

# The fallback's refusals (csrc/fallback.cpp): natively, or for a view op.
_NO_KERNEL = re.compile(
    r"tiny: (\S+) (?:has no tiny kernel and the CPU fallback is disabled|is a view op with no tiny)"
)


def mode() -> str:
    """native when the CPU fallback is disabled (TINY_FALLBACK=0), else fallback."""
    return "native" if os.environ.get("TINY_FALLBACK") == "0" else "fallback"


def op_id(op) -> str:
    """The OpInfo's name as known_failures.txt and the summary write it: name, or name.variant."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def first_line(error: BaseException, limit: int = 300) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else "(no message)"
    return f"{type(error).__name__}: {line[:limit]}"


def missing_kernel(error: BaseException) -> str | None:
    """The ATen op named by the fallback's refusal (native mode, or a view op), if that is the error."""
    seen = set()
    while error is not None and id(error) not in seen:  # autograd and OpInfo wrappers chain the original
        seen.add(id(error))
        match = _NO_KERNEL.search(str(error))
        if match:
            return match.group(1)
        error = error.__cause__ or error.__context__
    return None


# ---------------------------------------------------------------------------------------------
# known_failures.txt: `op kind dtype mode reason...`, mode is native, fallback or both


@dataclass(frozen=True)
class KnownFailure:
    op: str
    kind: str
    dtype: str
    mode: str
    reason: str

    def matches(self, op: str, kind: str, dtype: str, mode: str) -> bool:
        return self.op == op and self.kind == kind and self.dtype == dtype and self.mode in ("both", mode)


def parse_known_failures(text: str) -> list[KnownFailure]:
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 4)
        if len(parts) < 5:
            raise ValueError(f"known_failures.txt:{number}: expected `op kind dtype mode reason`, got {raw!r}")
        op, kind, dtype, mode_, reason = parts
        if kind not in KINDS or mode_ not in (*MODES, "both"):
            raise ValueError(f"known_failures.txt:{number}: unknown kind or mode in {raw!r}")
        entries.append(KnownFailure(op, kind, dtype, mode_, reason))
    return entries


_known: list[KnownFailure] | None = None


def max_samples() -> int | None:
    """TINY_UPSTREAM_MAX_SAMPLES: check only a test's first N samples (a time-bounded run)."""
    value = os.environ.get("TINY_UPSTREAM_MAX_SAMPLES")
    return int(value) if value else None


def not_to_run(known: "KnownFailure | None") -> bool:
    """A known failure that crashes the process or hangs is not run (unless TINY_UPSTREAM_RUN_KNOWN_CRASHES=1):
    one costs a new process, the other the whole test timeout."""
    return (
        known is not None
        and known.reason.startswith(("crash:", "hang:"))
        and os.environ.get("TINY_UPSTREAM_RUN_KNOWN_CRASHES") != "1"
    )


def known_failure(op: str, kind: str, dtype: str, mode_: str) -> KnownFailure | None:
    global _known
    if _known is None:
        path = Path(os.environ.get("TINY_UPSTREAM_KNOWN_FAILURES", KNOWN_FAILURES_FILE))
        _known = parse_known_failures(path.read_text()) if path.exists() else []
    return next((k for k in _known if k.matches(op, kind, dtype, mode_)), None)


# ---------------------------------------------------------------------------------------------
# One test's samples


class SampleSkip(Exception):
    """This sample cannot be checked (the reason says why); the test goes on with the next one."""


@dataclass
class Tally:
    op: str
    kind: str
    dtype: str
    counts: dict = field(default_factory=lambda: {"pass": 0, "fail": 0, "no_kernel": 0, "skip": 0})
    failures: list = field(default_factory=list)  # "sample i: message", first few
    missing: dict = field(default_factory=dict)  # ATen op -> samples that needed it (native mode)
    skip_reasons: dict = field(default_factory=dict)
    values_not_compared: int = 0  # random ops, uninitialized memory: dtype and shape compared
    not_run: int = 0  # samples past TINY_UPSTREAM_MAX_SAMPLES

    @contextlib.contextmanager
    def sample(self, index: int):
        """Runs one sample's check: its outcome is counted, nothing escapes."""
        write_result({"event": "sample", "index": index})  # names the sample if the process dies in it
        try:
            yield
        except SampleSkip as e:
            self.counts["skip"] += 1
            self.skip_reasons[str(e)] = self.skip_reasons.get(str(e), 0) + 1
        except Exception as e:  # the sample's outcome; the test goes on
            name = missing_kernel(e)
            if name is not None and mode() == "native":
                self.counts["no_kernel"] += 1
                self.missing[name] = self.missing.get(name, 0) + 1
            else:
                self.counts["fail"] += 1
                if len(self.failures) < 3:
                    self.failures.append(f"sample {index}: {first_line(e)}")
        else:
            self.counts["pass"] += 1


def outcome(tally: Tally, error: BaseException | None) -> tuple[str, str]:
    """(outcome, reason) of a finished test, before known failures are consulted."""
    c = tally.counts
    if error is not None:
        name = missing_kernel(error)
        if name is not None and mode() == "native":
            tally.missing[name] = tally.missing.get(name, 0) + 1
            return "no_kernel", f"needs {name}"
        return "fail", f"the test itself: {first_line(error)}"
    if c["fail"]:
        return "fail", "; ".join(tally.failures)
    if c["no_kernel"]:
        return "no_kernel", "needs " + ", ".join(sorted(tally.missing))
    if c["pass"]:
        return "pass", ""
    if c["skip"]:
        return "skip", "; ".join(sorted(tally.skip_reasons))
    return "skip", "the OpInfo gives no sample for this dtype"


# ---------------------------------------------------------------------------------------------
# The results file


def write_result(record: dict) -> None:
    path = os.environ.get("TINY_UPSTREAM_RESULTS")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


class Timer:
    def __init__(self):
        self.start = time.monotonic()

    def seconds(self) -> float:
        return round(time.monotonic() - self.start, 3)
