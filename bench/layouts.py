"""Layout copies and computed inputs on tiny against PyTorch eager (and torch.compile), in one process, contenders
interleaved round by round (bench/common.py): a permuted tensor made contiguous (x.t().contiguous(), NCHW to
channels-last; eager also into a preallocated tensor), a padded channels-last copy, convolutions whose input is
computed (a ReLU before a 3 x 3 conv, a depthwise one), and gelu (erf).

Run: .venv/bin/python bench/layouts.py [rounds] [--no-compile] [--cpu-time] (--cpu-time: bench/common.py)
"""

import sys

import torch
import torch.nn.functional as F
from common import CLOCK, CPU_TIME, contenders, interleaved, report


def main():
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), 12))
    compiled = "--no-compile" not in sys.argv and not CPU_TIME
    g = torch.Generator().manual_seed(0)

    def rand(*shape, dt=torch.float32):
        return torch.randn(*shape, generator=g).to(dt)

    # Permuted views made contiguous; eager's .contiguous() allocates its result (a fresh 64 MB tensor page-faults),
    # so eager also copies into a tensor allocated once, the honest reference for a copy.
    views = {
        "x.t().contiguous(), (1024, 1024)": (lambda a: a.t(), rand(1024, 1024)),
        "x.t().contiguous(), (4096, 4096)": (lambda a: a.t(), rand(4096, 4096)),
        "x.t().contiguous(), (1024, 1024) bfloat16": (lambda a: a.t(), rand(1024, 1024, dt=torch.bfloat16)),
        "NCHW -> channels-last, (128, 64, 14, 14)": (lambda a: a.permute(0, 2, 3, 1), rand(128, 64, 14, 14)),
    }
    for name, (view, a) in views.items():
        runs = contenders(lambda t, view=view: view(t).contiguous(), (a,), (a.to("tiny"),), compiled)
        out = view(a).contiguous()
        runs["eager, into a preallocated tensor"] = lambda view=view, a=a, out=out: out.copy_(view(a))
        report(name, interleaved(runs, rounds, clock=CLOCK))
        torch.testing.assert_close(view(a.to("tiny")).contiguous().cpu(), out)

    x, w = rand(128, 32, 28, 28), rand(32, 32, 3, 3)
    cases = {
        "padded channels-last, (128, 32, 14, 14) bfloat16": (
            lambda a: F.pad(a, (1, 1, 1, 1)).permute(0, 2, 3, 1).contiguous(),
            (rand(128, 32, 14, 14, dt=torch.bfloat16),),
        ),
        "conv2d(relu(x)), (128, 32, 28, 28) * (32, 32, 3, 3)": (lambda a, b: F.conv2d(a.relu(), b, padding=1), (x, w)),
        "depthwise conv2d(relu(x)), 3 x 3": (lambda a, b: F.conv2d(a.relu(), b, padding=1, groups=32), (x, w[:, :1])),
        "gelu, (128, 32, 28, 28)": (F.gelu, (x,)),
    }
    for name, (fn, args) in cases.items():
        tiny_args = tuple(a.to("tiny") for a in args)
        times = interleaved(contenders(fn, args, tiny_args, compiled), rounds, clock=CLOCK)
        report(name, times)
        torch.testing.assert_close(fn(*tiny_args).cpu(), fn(*args), rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    main()
