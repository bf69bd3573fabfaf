"""The demo CNN's training step (examples/mnist.py's model, Adam, cross-entropy, batch 128) on tiny, PyTorch
eager and torch.compile (Inductor) on the CPU, in one process, contenders interleaved round by round
(bench/common.py), best and median. Each contender has its own copy of the same weights and batch; tiny's
step is synchronized with its weight updates, not only the loss.

Run: .venv/bin/python bench/training_step.py [rounds] [--batch-size N] [--no-compile] [--cpu-time]
(--cpu-time: one thread each, its CPU time; bench/common.py)
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from common import CLOCK, interleaved, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import build_model  # noqa: E402


def make_step(device, batch_size, compiled=False):
    """A closure running one training step on `device` (the model compiled by Inductor when `compiled`)."""
    torch.manual_seed(0)
    x, y = torch.randn(batch_size, 1, 28, 28), torch.randint(0, 10, (batch_size,))
    model = build_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = x.to(device), y.to(device)
    forward = torch.compile(model) if compiled else model

    def step():
        loss = F.cross_entropy(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--cpu-time", action="store_true", help="one thread each, its CPU time (bench/common.py)")
    args = parser.parse_args()
    contenders = {"tiny": make_step("tiny", args.batch_size), "eager": make_step("cpu", args.batch_size)}
    if not args.no_compile:
        contenders["torch.compile"] = make_step("cpu", args.batch_size, compiled=True)
    times = interleaved(contenders, args.rounds, clock=CLOCK)
    report(f"training step, demo CNN, batch {args.batch_size}, Adam", times)


if __name__ == "__main__":
    main()
