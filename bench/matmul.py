"""Matmul and convolution on tiny against PyTorch eager (oneDNN/MKL) and torch.compile (Inductor) on the
CPU, in one process, contenders interleaved round by round (bench/common.py), float32 and bfloat16:
a 1024^3 matmul, matmuls of 32 and 256 rows (batches), a linear layer (x @ w.t(), of 1024 rows and of batches of 16
and 256), a linear layer's weight gradient (grad_output.t() @ x: 1024^3, and a small ViT's MLP, 2080 tokens, 512 x
128), attention over a ViT's 65 tokens (heads of 32: scaled_dot_product_attention of (32, 4, 65, 32)), and the demo
CNN's second convolution (batch 128, 32 -> 64 channels, 14 x 14, 3 x 3) forward and its input and weight gradients.

Run: .venv/bin/python bench/matmul.py [rounds] [--no-compile] [--cpu-time] (--cpu-time: bench/common.py)
"""

import sys

import torch
import torch.nn.functional as F
from common import CLOCK, CPU_TIME, contenders, interleaved, report


def conv_backward(x, w, gy):
    """The input and weight gradients of conv2d(x, w, padding=1) for the output gradient gy."""
    return torch.ops.aten.convolution_backward(
        gy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False]
    )[:2]


def transposed_mm(a, b):
    """a.t() @ b: a linear layer's weight gradient, grad_output.t() @ x (or x.t() @ grad_output), tokens-major."""
    return a.t() @ b


def main():
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), 12))
    compiled = "--no-compile" not in sys.argv and not CPU_TIME
    g = torch.Generator().manual_seed(0)
    for dt in (torch.float32, torch.bfloat16):

        def rand(*shape, dt=dt):
            return torch.randn(*shape, generator=g).to(dt)

        x, w = rand(128, 32, 14, 14), rand(64, 32, 3, 3)
        qkv = [rand(32, 4, 65, 32) for _ in range(3)]
        cases = {
            "matmul 1024^3": (torch.mm, (rand(1024, 1024), rand(1024, 1024))),
            "matmul (32, 1024) x (1024, 1024)": (torch.mm, (rand(32, 1024), rand(1024, 1024))),
            "matmul (256, 1024) x (1024, 1024)": (torch.mm, (rand(256, 1024), rand(1024, 1024))),
            "linear (1024, 1024) x (1024, 1024)^T": (F.linear, (rand(1024, 1024), rand(1024, 1024))),
            "linear (16, 1024) x (1024, 1024)^T": (F.linear, (rand(16, 1024), rand(1024, 1024))),
            "linear (256, 1024) x (1024, 1024)^T": (F.linear, (rand(256, 1024), rand(1024, 1024))),
            "weight gradient (1024, 1024)^T x (1024, 1024)": (transposed_mm, (rand(1024, 1024), rand(1024, 1024))),
            "weight gradient (2080, 512)^T x (2080, 128)": (transposed_mm, (rand(2080, 512), rand(2080, 128))),
            "attention (32, 4, 65, 32)": (F.scaled_dot_product_attention, tuple(qkv)),
            "conv2d (128, 32, 14, 14) * (64, 32, 3, 3)": (lambda a, b: F.conv2d(a, b, padding=1), (x, w)),
            "conv2d backward (input, weight)": (conv_backward, (x, w, rand(128, 64, 14, 14))),
        }
        for name, (fn, args) in cases.items():
            tiny_args = tuple(a.to("tiny") for a in args)
            title = f"{name}, {str(dt).removeprefix('torch.')}"
            report(title, interleaved(contenders(fn, args, tiny_args, compiled), rounds, clock=CLOCK))


if __name__ == "__main__":
    main()
