"""An optimizer's step alone on tiny against PyTorch eager on the CPU (its default foreach step and its fused one) and
torch.compile (Inductor) of the foreach step, in one process, contenders interleaved round by round
(bench/common.py), best and median: Adam and SGD with momentum over the parameters of torchvision's ResNet-18 (11.2M
floats in 62 tensors), each step's gradients set beforehand. On tiny each parameter's update is one kernel
(merge_elementwise, docs/design.md): it reads the parameter, its gradient and its states once and writes them back in
place.

Run: .venv/bin/python bench/optimizer.py [rounds] [--no-compile] [--cpu-time] (--cpu-time: bench/common.py)
(Inductor compiles each optimizer's step in ~40 s.)
"""

import sys

import torch
import torchvision
from common import CLOCK, CPU_TIME, interleaved, report


def step_of(params, make, compiled=False):
    """A step of make(params) with gradients set once: each call updates the parameters and the states in place."""
    opt = make(params)
    g = torch.Generator().manual_seed(1)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(p.device) * 1e-3
    return torch.compile(opt.step) if compiled else opt.step


def main():
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), 12))
    compiled = "--no-compile" not in sys.argv and not CPU_TIME
    model = torchvision.models.resnet18(num_classes=10)
    optimizers = {
        "Adam": lambda p, **kw: torch.optim.Adam(p, lr=1e-3, **kw),
        "SGD, momentum 0.9": lambda p, **kw: torch.optim.SGD(p, lr=1e-3, momentum=0.9, **kw),
    }
    for name, make in optimizers.items():

        def params(device):
            return [torch.nn.Parameter(p.detach().clone().to(device)) for p in model.parameters()]

        contenders = {
            "tiny": step_of(params("tiny"), make),
            "eager (foreach)": step_of(params("cpu"), make),
            "eager (fused)": step_of(params("cpu"), lambda p, make=make: make(p, fused=True)),
        }
        if compiled:
            contenders["torch.compile"] = step_of(params("cpu"), make, compiled=True)
        title = f"{name} step over ResNet-18's parameters ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M)"
        report(title, interleaved(contenders, rounds, clock=CLOCK))


if __name__ == "__main__":
    main()
