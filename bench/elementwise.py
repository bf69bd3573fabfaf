"""Chains of 10 elementwise ops on 16M float32: tiny (one fused kernel) against PyTorch eager (one kernel per
op) and torch.compile (Inductor), and a copy into a preallocated tensor for the machine's bandwidth, in one
process, contenders interleaved round by round (bench/common.py), best and median. Two chains: issue #13's
(sigmoid, sqrt and tanh among its ops: two exps and three divisions an element, which bind it to arithmetic,
not memory, on this CPU) and one of ten cheap ops (multiplies, adds, abs, max, clamp), which only moves bytes.

Run: .venv/bin/python bench/elementwise.py [rounds] [--numel N] [--no-compile] [--cpu-time] [--activations [NAME ...]]
(--cpu-time: one thread each, its CPU time; bench/common.py. --activations: also single activations and math
functions on 4M float32, each its own kernel on tiny: elu, softplus, mish, silu, gelu, tanh, sigmoid, sin, cos, tan,
log1p, expm1, pow; with names, only those, and no chains)

The bandwidth of the fused chain counts the bytes it must move (reads x and y, writes the result); the copy's,
the bytes it moves (reads and writes one tensor). The copy writes into a tensor allocated once: a clone()
allocates 64 MB each time and page-faults it in, which flatters anything compared with it.
"""

import argparse
import statistics

import torch
import torch.nn.functional as F
from common import CLOCK, CPU_TIME, contenders, interleaved, report


def chain(x, y):
    t = x * y  # 1
    t = t + 0.5  # 2
    t = t.sigmoid()  # 3
    t = t * x  # 4
    t = t - y  # 5
    t = t.abs()  # 6
    t = t.sqrt()  # 7
    t = torch.maximum(t, y)  # 8
    t = t * 0.25  # 9
    return t.tanh()  # 10


def cheap_chain(x, y):
    t = x * y  # 1
    t = t + 0.5  # 2
    t = t.abs()  # 3
    t = t * x  # 4
    t = t - y  # 5
    t = torch.maximum(t, y)  # 6
    t = t * 0.25  # 7
    t = t.clamp(-1.0, 1.0)  # 8
    t = t + x  # 9
    return t * y  # 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=12)
    parser.add_argument("--numel", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--cpu-time", action="store_true", help="one thread each, its CPU time (bench/common.py)")
    parser.add_argument(
        "--activations",
        nargs="*",
        metavar="NAME",
        help="also single activations and math functions; with names, only those (no chains)",
    )
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(args.numel, generator=g), torch.randn(args.numel, generator=g)
    if not args.activations:
        for name, fn in (("chain of 10 elementwise ops", chain), ("chain of 10 cheap elementwise ops", cheap_chain)):
            measure(name, fn, x, y, args)
    if args.activations is not None:
        activations(x[: 4 * 1024 * 1024], args)


ACTIVATIONS = {
    "elu": F.elu,
    "softplus": F.softplus,
    "mish": F.mish,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu (tanh)": lambda t: F.gelu(t, approximate="tanh"),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "log1p of |x|": lambda t: t.abs().log1p(),
    "expm1": torch.expm1,
    "|x| ** 1.7": lambda t: t.abs() ** 1.7,
}


def activations(x, args):
    for name, fn in ACTIVATIONS.items():
        if args.activations and name not in args.activations:
            continue
        runs = contenders(fn, (x,), (x.to("tiny"),), not args.no_compile and not CPU_TIME)
        report(f"{name}, {x.numel():,} float32", interleaved(runs, args.rounds, clock=CLOCK))
        torch.testing.assert_close(fn(x.to("tiny")).cpu(), fn(x))


def measure(name, fn, x, y, args):
    dst = torch.empty_like(x)
    runs = contenders(fn, (x, y), (x.to("tiny"), y.to("tiny")), not args.no_compile and not CPU_TIME)
    runs["copy_ (preallocated)"] = lambda: dst.copy_(x)
    times = interleaved(runs, args.rounds, clock=CLOCK)
    copy_times = times.pop("copy_ (preallocated)")
    report(f"{name}, {args.numel:,} float32", times)

    itemsize = x.element_size()
    fused, copied = 3 * args.numel * itemsize, 2 * args.numel * itemsize
    for what, ts, nbytes in (("tiny (fused)", times["tiny"], fused), ("copy_ (preallocated)", copy_times, copied)):
        best, median = nbytes / min(ts) / 1e9, nbytes / statistics.median(ts) / 1e9
        print(f"  {what:<22} best {best:6.2f} GB/s   median {median:6.2f} GB/s")
    best = (fused / min(times["tiny"])) / (copied / min(copy_times))
    median = (fused / statistics.median(times["tiny"])) / (copied / statistics.median(copy_times))
    print(f"  tiny's bandwidth / the copy's: {best:.2f} (best)  {median:.2f} (median)  (issue #13's target: 0.8)")

    expected, got = fn(x, y), fn(x.to("tiny"), y.to("tiny")).cpu()
    torch.testing.assert_close(got, expected)  # float32 default tolerances


if __name__ == "__main__":
    main()
