"""Reductions on tiny against PyTorch eager and torch.compile (Inductor) on the CPU, in one process,
contenders interleaved round by round (bench/common.py): sum of 16M, softmax, layer_norm and
log_softmax + nll_loss of (4096, 1024), and a column sum of (4096, 1000) (a 1000-class layer's bias gradient over a
large batch: its width does not divide into 16 lanes), float32. A copy into a preallocated tensor gives the machine's
bandwidth for scale.

Run: .venv/bin/python bench/reductions.py [rounds] [--no-compile] [--cpu-time] (--cpu-time: bench/common.py)
"""

import sys

import torch
import torch.nn.functional as F
from common import CLOCK, CPU_TIME, contenders, interleaved, report


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
        "column sum (4096, 1000)": (lambda a: a.sum(0), (torch.randn(4096, 1000, generator=g),)),
    }
    for name, (fn, args) in cases.items():
        tiny_args = tuple(a.to("tiny") for a in args)
        report(name, interleaved(contenders(fn, args, tiny_args, compiled), rounds, clock=CLOCK))


if __name__ == "__main__":
    main()
