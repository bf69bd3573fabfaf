"""The differential fuzzer of issue #14: seeded random programs on tiny against the same on the CPU.

    .venv/bin/python torch_tests/fuzz/run.py --programs 1000 --seed 0 --jobs 2
    .venv/bin/python torch_tests/fuzz/run.py --programs 200 --self-check     # cpu against cpu: must be 0
    .venv/bin/python torch_tests/fuzz/run.py --replay 1234                   # one seed, shrunk if it fails
    .venv/bin/python torch_tests/fuzz/run.py --seeds 17,34 --shrink 1        # these seeds

Each program (generator.py) runs in a worker process, on the CPU and on tiny from the same CPU inputs,
and the two logs are compared (comparator.py). A worker that dies (segfault, abort) is a crash and one
that runs past --timeout a hang, both reported with the seed; a new worker takes the next program.
Every failing program is shrunk (shrinker.py) to a short reproducer, printed as plain PyTorch with the
output of running it. Prints `fuzz: N programs, M mismatches, C crashes, H hangs`; exit status 1 on any.
"""

import argparse
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from records import defined  # noqa: E402  (torch-free: the parent process never loads the device)

# -- the worker: runs programs it is sent, one JSON line in, one out ----------------------------------


def worker_main(self_check, include_known, plant):
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever torch or tiny print goes to stderr, not into the protocol
    import torch
    from comparator import compare
    from generator import generate
    from programs import execute, materialize

    torch.set_num_threads(1)
    progress = open(os.environ["FUZZ_PROGRESS"], "w") if os.environ.get("FUZZ_PROGRESS") else None  # noqa: SIM115

    def on_step(i):
        progress.seek(0)
        progress.write(f"{i:8d}")
        progress.flush()

    other = "cpu" if self_check else "tiny"
    if not self_check:
        import torch_tiny  # noqa: F401
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            program = msg.get("program") or generate(msg["seed"], include_known)
            if "materialize" in msg:
                reply = {"status": "ok", "spec": materialize(program, msg["materialize"])}
            elif msg.get("generate_only"):
                reply = {"status": "ok", "program": program}
            else:
                reply = check(program, other, execute, compare, plant, on_step if progress else None)
        except Exception:
            reply = {"status": "error", "error": traceback.format_exc()[-2000:]}
        reply["seed"] = msg["seed"]
        protocol.write(json.dumps(reply) + "\n")


def check(program, other, execute, compare, plant=None, on_step=None):
    expected = execute(program, "cpu")
    actual = execute(program, other, plant, on_step)
    mismatch = compare(expected, actual, len(program))
    if mismatch is None:
        return {"status": "ok"}
    raised = [i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if "raise" in (a[0], b[0])]
    return {"status": "mismatch", "mismatch": mismatch, "program": program, "raised": raised}


# -- the parent: workers, dispatch, shrinking, the summary ---------------------------------------------


class Worker:
    def __init__(self, args):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        cmd += ["--self-check"] if args.self_check else []
        cmd += ["--include-known"] if args.include_known else []
        cmd += ["--plant", args.plant] if args.plant else []
        self.stderr = tempfile.TemporaryFile()
        fd, self.progress = tempfile.mkstemp(prefix="fuzz-progress-")
        os.close(fd)
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0" if args.self_check else "1")
        env["FUZZ_PROGRESS"] = self.progress
        env["FUZZ_STRICT_STRIDES"] = "1" if args.strict_strides else "0"
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env
        )
        self.seed = None
        self.deadline = None

    def send(self, msg, timeout):
        self.seed = msg["seed"]
        self.deadline = time.monotonic() + timeout
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def receive(self):
        line = self.proc.stdout.readline()
        self.seed = None
        if not line:
            return {"status": "crash", "error": self.death(), "index": self.crash_index()}
        return json.loads(line)

    def crash_index(self):
        """The record the device run was at when the process died."""
        try:
            return int(Path(self.progress).read_text().strip())
        except (OSError, ValueError):
            return None

    def death(self):
        code = self.proc.wait()
        self.stderr.seek(0)
        tail = self.stderr.read().decode(errors="replace").strip().splitlines()[-6:]
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return how + ("\n" + "\n".join(tail) if tail else "")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        Path(self.progress).unlink(missing_ok=True)

    def ask(self, msg, timeout):
        """One request, waited for: the reply, or a crash or hang."""
        self.send(msg, timeout)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        if not ready:
            index = self.crash_index()
            self.kill()
            return {"status": "hang", "seed": msg["seed"], "index": index}
        return self.receive()


def run_seeds(seeds, args, on_result):
    """Runs each seed's program in `args.jobs` workers; on_result(reply) for each."""
    workers = [Worker(args) for _ in range(args.jobs)]
    pending = list(reversed(seeds))
    sel = selectors.DefaultSelector()
    try:
        while pending or any(w.seed is not None for w in workers):
            for i, w in enumerate(workers):
                if w.seed is None and pending:
                    if w.proc.poll() is not None:
                        w = workers[i] = Worker(args)
                    w.send({"seed": pending.pop()}, args.timeout)
                    sel.register(w.proc.stdout, selectors.EVENT_READ, i)
            busy = [w for w in workers if w.seed is not None]
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            for key, _ in sel.select(wait):
                w = workers[key.data]
                seed = w.seed
                sel.unregister(w.proc.stdout)
                reply = w.receive()
                reply["seed"] = seed
                if reply["status"] == "crash":
                    workers[key.data] = Worker(args)
                on_result(reply)
            for i, w in enumerate(workers):
                if w.seed is not None and time.monotonic() > w.deadline:
                    seed, index = w.seed, w.crash_index()
                    sel.unregister(w.proc.stdout)
                    w.kill()
                    workers[i] = Worker(args)
                    on_result({"status": "hang", "seed": seed, "index": index})
    finally:
        for w in workers:
            w.kill()


def generate_program(seed, args):
    """The program of a seed that crashed or hung, generated on the CPU only."""
    w = Worker(args)
    try:
        return w.ask({"seed": seed, "generate_only": True}, 120).get("program")
    finally:
        w.kill()


class Judge:
    """Runs candidates for the shrinker in a worker kept alive between them."""

    def __init__(self, args, seed, failure):
        self.args, self.seed, self.failure = args, seed, failure
        self.worker = None
        self.last = None

    def __call__(self, program):
        if self.worker is None or self.worker.proc.poll() is not None:
            self.worker = Worker(self.args)
        reply = self.worker.ask({"seed": self.seed, "program": program}, self.args.timeout)
        if reply["status"] in ("crash", "hang"):
            self.worker = None
        same = reply["status"] == self.failure["status"]
        if same and reply["status"] == "mismatch":
            same = reply["mismatch"]["category"] == self.failure["mismatch"]["category"]
        if same:
            self.last = reply
        return same

    def materialize(self, program, index):
        if self.worker is None or self.worker.proc.poll() is not None:
            self.worker = Worker(self.args)
        reply = self.worker.ask({"seed": self.seed, "program": program, "materialize": index}, self.args.timeout)
        return reply.get("spec")

    def close(self):
        if self.worker is not None:
            self.worker.kill()


def run_script(code, timeout):
    env = dict(os.environ)
    try:
        p = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return f"(hung past {timeout} s)"
    out = (p.stdout + p.stderr).strip().splitlines()
    text = "\n".join(out[-12:])
    if p.returncode:
        text += f"\n(exit status {p.returncode})"
    return text


def failure_class(reply):
    if reply["status"] != "mismatch":
        return reply["status"]
    m = reply["mismatch"]
    program = reply.get("program") or []
    if m["index"] < len(program):
        return f"{m['category']}:{program[m['index']]['op']}"
    # at the end: the op that made the tensor
    made = [r["op"] for r in program if m.get("name") and defined(r) == m["name"]]
    return f"{m['category']}:end:{made[0] if made else '?'}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="the first program's seed; the others follow")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a program may run (a hang past it)")
    ap.add_argument("--self-check", action="store_true", help="cpu against cpu: proves the comparator sound")
    ap.add_argument("--include-known", action="store_true", help="also generate the KNOWN classes")
    ap.add_argument("--strict-strides", action="store_true", help="also compare strides of size-1 dims and empties")
    ap.add_argument("--shrink", type=int, default=2, help="failures shrunk per class (0: none)")
    ap.add_argument("--shrink-budget", type=float, default=60.0, help="seconds per shrink")
    ap.add_argument("--shrink-total", type=float, default=None, help="seconds for all shrinking (default: no limit)")
    ap.add_argument("--plant", help="with --self-check: results of this op come out 1 too large (tests the fuzzer)")
    ap.add_argument("--replay", type=int, help="run one seed's program, and shrink it if it fails")
    ap.add_argument("--seeds", help="run these seeds (comma-separated) instead of --programs from --seed")
    ap.add_argument("--json", help="write every failure (seed, class, reproducer) to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.self_check, args.include_known, args.plant)
        return 0
    if args.replay is not None:
        args.seeds = str(args.replay)
        args.shrink = max(args.shrink, 1)
    if args.seeds:
        args.seeds = [int(x) for x in args.seeds.split(",")]
    seeds = args.seeds or list(range(args.seed, args.seed + args.programs))
    return fuzz(seeds, args)


def fuzz(seeds, args):
    started = time.monotonic()
    counts = Counter()
    failures = defaultdict(list)

    def on_result(reply):
        counts["programs"] += 1
        status = reply["status"]
        if status == "error":
            print(f"seed {reply['seed']}: the fuzzer itself failed:\n{reply['error']}", flush=True)
            counts["error"] += 1
            return
        if status != "ok":
            counts[status] += 1
            failures[failure_class(reply)].append(reply)
            print(f"seed {reply['seed']}: {describe(reply)}", flush=True)

    run_seeds(seeds, args, on_result)
    elapsed = time.monotonic() - started
    report = []
    shrunk_seen = set()
    shrink_until = time.monotonic() + args.shrink_total if args.shrink_total else None
    for cls, replies in sorted(failures.items(), key=lambda kv: -len(kv[1])):
        for reply in replies[: args.shrink]:
            if shrink_until is not None and time.monotonic() > shrink_until:
                break
            entry = shrink_failure(reply, args)
            if entry is None or entry["ops"] in shrunk_seen:
                continue
            shrunk_seen.add(entry["ops"])
            entry["class"] = cls
            report.append(entry)
            print(f"\n=== {cls}: seed {reply['seed']}, {describe(entry['reply'])}\n{entry['code']}", end="")
            print("# output:\n" + "\n".join("#   " + line for line in entry["output"].splitlines()), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "counts": counts,
                    "classes": {k: [r["seed"] for r in v] for k, v in failures.items()},
                    "shrunk": report,
                },
                indent=1,
                default=str,
            )
        )
    by_class = ", ".join(f"{k} {len(v)}" for k, v in sorted(failures.items(), key=lambda kv: -len(kv[1])))
    mode = " (self-check: cpu against cpu)" if args.self_check else ""
    print(
        f"\nfuzz{mode}: {counts['programs']} programs, {counts['mismatch']} mismatches, {counts['crash']} crashes, "
        f"{counts['hang']} hangs"
        + (f", {counts['error']} fuzzer errors" if counts["error"] else "")
        + f" ({elapsed:.0f} s)"
    )
    if by_class:
        print(f"by class: {by_class}")
    return 1 if counts["mismatch"] or counts["crash"] or counts["hang"] or counts["error"] else 0


def describe(reply):
    if reply["status"] == "mismatch":
        m = reply["mismatch"]
        return f"{m['category']} differs at {m['where']}: cpu {m['cpu'][:300]} / tiny {m['tiny'][:300]}"
    if reply["status"] == "crash":
        return "crash: " + reply.get("error", "")[:600]
    return reply["status"]


def shrink_failure(reply, args):
    from shrinker import op_names, reproducer, shrink

    program = reply.get("program") or generate_program(reply["seed"], args)
    if not program:
        return None
    judge = Judge(args, reply["seed"], reply)
    first = reply["mismatch"]["index"] if reply["status"] == "mismatch" else reply.get("index")
    budget = args.shrink_budget if reply["status"] != "hang" else min(args.shrink_budget, 3 * args.timeout)
    try:
        if not judge(program):
            # it failed after other programs ran in the same worker: state a fresh process does not have
            note = "# does NOT fail again in a fresh process: it depends on what ran before it in the worker\n"
            code = note + reproducer(program, reply.get("mismatch"), set(reply.get("raised", ())))
            return {"seed": reply["seed"], "ops": ("flaky", reply["seed"]), "code": code, "output": "", "reply": reply}
        small = shrink(program, judge, budget_s=budget, first_index=first, materialize=judge.materialize)
        final = judge.last if judge.last is not None else reply
        if not judge(small):
            small, final = program, reply
        else:
            final = judge.last
    finally:
        judge.close()
    code = reproducer(small, final.get("mismatch"), set(final.get("raised", ())))
    output = run_script(code, args.timeout) if not args.self_check else "(self-check: not run)"
    return {"seed": reply["seed"], "ops": op_names(small), "code": code, "output": output, "reply": final}


if __name__ == "__main__":
    sys.exit(main())
