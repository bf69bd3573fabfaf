"""Reductions on tiny against PyTorch eager and torch.compile (Inductor) on the CPU, in one process,
contenders interleaved round by round (bench/common.py): sum of 16M, softmax, layer_norm and
log_softmax + nll_loss of (4096, 1024), float32. A copy into a preallocated tensor gives the machine's
bandwidth for scale.

Run: .venv/bin/python bench/reductions.py [rounds] [--no-compile] [--cpu-time]

--cpu-time runs every contender on one thread (torch.set_num_threads(1), TINY_THREADS=1) and times the
CPU time of that thread (time.thread_time) instead of the wall clock: on a shared, loaded machine the
wall clock also counts the time other processes held the core, which moves figures by 2-4x; one
thread's CPU time does not, so it compares the kernels themselves (recording and the sync included).
"""

import os
import sys
import time

if "--cpu-time" in sys.argv:
    os.environ["TINY_THREADS"] = "1"  # read when tiny's thread pool starts

import torch
import torch.nn.functional as F
from common import interleaved, report

CPU_TIME = "--cpu-time" in sys.argv
if CPU_TIME:
    torch.set_num_threads(1)
CLOCK = time.thread_time if CPU_TIME else time.perf_counter


def contenders(fn, cpu_args, tiny_args, compiled):
    c = {"tiny": lambda: fn(*tiny_args), "eager": lambda: fn(*cpu_args)}
    if compiled:
        f = torch.compile(fn)
        c["torch.compile"] = lambda: f(*cpu_args)
    return c


def main():
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), 12))
    compiled = "--no-compile" not in sys.argv and not CPU_TIME
    g = torch.Generator().manual_seed(0)
    n = 16 * 1024 * 1024
    x = torch.randn(n, generator=g)
    dst = torch.empty_like(x)
    t = interleaved({"copy_ (preallocated)": lambda: dst.copy_(x)}, rounds, clock=CLOCK)
    print(f"copy 16M float32 into a preallocated tensor: {2 * n * 4 / min(t['copy_ (preallocated)']) / 1e9:.1f} GB/s")

    cases = {
        "sum 16M": (lambda a: a.sum(), (x,)),
        "softmax (4096, 1024)": (lambda a: a.softmax(-1), (torch.randn(4096, 1024, generator=g),)),
        "layer_norm (4096, 1024)": (
            lambda a, w, b: F.layer_norm(a, (1024,), w, b),
            (torch.randn(4096, 1024, generator=g), torch.rand(1024, generator=g), torch.rand(1024, generator=g)),
        ),
        "log_softmax + nll (4096, 1024)": (
            lambda a, y: F.nll_loss(a.log_softmax(-1), y),
            (torch.randn(4096, 1024, generator=g), torch.randint(0, 1024, (4096,), generator=g)),
        ),
    }
    for name, (fn, args) in cases.items():
        tiny_args = tuple(a.to("tiny") for a in args)
        report(name, interleaved(contenders(fn, args, tiny_args, compiled), rounds, clock=CLOCK))


if __name__ == "__main__":
    main()
