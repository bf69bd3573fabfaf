"""One training step of the examples/mnist.py CNN (Adam, cross-entropy): tiny against PyTorch CPU eager.

Prints the steady-state step (median over --steps after --warmup), tiny's kernels per step, and tiny's first
step, which compiles: once in this process with an empty kernel cache, then in a new process that finds the
kernels on disk. The batch is random data of MNIST's shape, seeded and made once on the CPU.

Run: .venv/bin/python bench/train_mnist.py --steps 5 --batch-size 32
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import row

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import build_model


def make_step(device, batch_size, seed):
    """A closure running one training step on `device`, synchronized; the same weights and batch for each device."""
    torch.manual_seed(seed)
    x, y = torch.randn(batch_size, 1, 28, 28), torch.randint(0, 10, (batch_size,))
    model = build_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = x.to(device), y.to(device)

    def step():
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        if device == "tiny":
            torch.tiny.synchronize()  # the optimizer's updates too, not only the loss
        return time.perf_counter() - start

    return step


def first_step(step):
    """The first step of a new process or model: its time, and how many kernels it compiled or found on disk."""
    torch.tiny.reset_stats()
    seconds = step()
    stats = torch.tiny.stats()
    return {"seconds": seconds, "compiles": stats["compiles"], "disk_hits": stats["disk_hits"]}


def steady(step, args):
    """The median step after the warm-up; tiny's counters cover the timed steps only."""
    for _ in range(args.warmup):
        step()
    torch.tiny.reset_stats()
    return statistics.median(step() for _ in range(args.steps))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", help="kernel cache (TINY_CACHE_DIR); default: a new empty one, removed after")
    parser.add_argument("--first-step-only", action="store_true", help="print the first tiny step as JSON, and exit")
    args = parser.parse_args()

    if args.first_step_only:
        print(json.dumps(first_step(make_step("tiny", args.batch_size, args.seed))))
        return

    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="tiny-cache-")
    os.environ["TINY_CACHE_DIR"] = cache_dir  # read at each compile, and inherited by the second process
    print(f"MNIST CNN training step, batch {args.batch_size}, median of {args.steps} after {args.warmup} warm-up")
    print(f"torch threads {torch.get_num_threads()}, kernel cache {cache_dir}\n")
    try:
        tiny_step = make_step("tiny", args.batch_size, args.seed)
        cold = first_step(tiny_step)
        tiny_s = steady(tiny_step, args)
        stats = torch.tiny.stats()
        torch_s = steady(make_step("cpu", args.batch_size, args.seed), args)
        cmd = [sys.executable, __file__, "--first-step-only", f"--batch-size={args.batch_size}", f"--seed={args.seed}"]
        warm = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()[-1])
    finally:
        if not args.cache_dir:
            shutil.rmtree(cache_dir, ignore_errors=True)

    row("training step (steady state)", tiny_s, torch_s)
    print(
        f"{'kernels per step':<34} {stats['kernels'] / args.steps:.0f}   fallbacks per step "
        f"{stats['fallbacks'] / args.steps:.0f} {stats['fallback_ops']}"
    )
    for name, first in [("first step, empty cache", cold), ("first step, new process", warm)]:
        print(f"{name:<34} {first['seconds']:9.3f} s   compiles {first['compiles']}, disk hits {first['disk_hits']}")


if __name__ == "__main__":
    main()
