"""The demo CNN's training step (examples/mnist.py's model, Adam, cross-entropy, batch 128) on tiny, PyTorch
eager and torch.compile (Inductor) on the CPU, in one process, contenders interleaved round by round
(bench/common.py), best and median. Each contender has its own copy of the same weights and batch; tiny's
step is synchronized with its weight updates, not only the loss. `--model resnet18`: torchvision's ResNet-18
(10 classes) on 64 x 64 images, batch 16 unless --batch-size says otherwise.

Run: .venv/bin/python bench/training_step.py [rounds] [--model demo|resnet18] [--batch-size N] [--no-compile]
     [--cpu-time]
(--cpu-time: one thread each, its CPU time; bench/common.py)
"""

import argparse
import sys
from pathlib import Path

import torch
from common import CLOCK, interleaved, report
from compile import make_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import build_model  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=12)
    parser.add_argument("--model", choices=("demo", "resnet18"), default="demo")
    parser.add_argument("--batch-size", type=int, default=None, help="128 for the demo, 16 for resnet18")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--cpu-time", action="store_true", help="one thread each, its CPU time (bench/common.py)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.model == "demo":
        model, batch, image, title = build_model(), args.batch_size or 128, (1, 28, 28), "demo CNN"
    else:
        import torchvision

        model, batch, image = torchvision.models.resnet18(num_classes=10), args.batch_size or 16, (3, 64, 64)
        title = "torchvision ResNet-18, 64 x 64"
    x, y = torch.randn(batch, *image), torch.randint(0, 10, (batch,))
    steps = {"tiny": (make_step(model, "tiny"), x.to("tiny"), y.to("tiny")), "eager": (make_step(model, "cpu"), x, y)}
    if not args.no_compile:
        steps["torch.compile"] = (make_step(model, "cpu", {}), x, y)
    contenders = {name: (lambda s=s, a=a, b=b: s(a, b)) for name, (s, a, b) in steps.items()}
    times = interleaved(contenders, args.rounds, clock=CLOCK)
    report(f"training step, {title}, batch {batch}, Adam", times)


if __name__ == "__main__":
    main()
