"""tiny vs PyTorch CPU eager in one process: sum, sgemm, softmax, layer_norm, and a copy for scale.

Run: .venv/bin/python bench/kernels.py
The ratio is torch time / tiny time (above 1: tiny is faster).
"""

import torch
import torch.nn.functional as F
from common import best_time, row


def main():
    g = torch.Generator().manual_seed(0)
    n = 16 * 1024 * 1024
    x_cpu = torch.randn(n, generator=g)
    x = x_cpu.to("tiny")
    copy = best_time(lambda: x_cpu.clone())
    tiny_sum = best_time(lambda: x.sum().item())
    cpu_sum = best_time(lambda: x_cpu.sum().item())
    copy_gbs = 2 * n * 4 / copy / 1e9
    sum_gbs = n * 4 / tiny_sum / 1e9
    row("sum 16M float32", tiny_sum, cpu_sum, f"  {sum_gbs:.1f} GB/s (copy {copy_gbs:.1f} GB/s)")

    a_cpu, b_cpu = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    a, b = a_cpu.to("tiny"), b_cpu.to("tiny")
    tiny_mm = best_time(lambda: (a @ b).cpu(), reps=3)
    cpu_mm = best_time(lambda: a_cpu @ b_cpu, reps=3)
    row("sgemm 1024^3 float32", tiny_mm, cpu_mm, f"  {2 * 1024**3 / tiny_mm / 1e9:.1f} GFLOP/s")
    wt = b.t().contiguous()
    torch.tiny.synchronize()
    tiny_lin = best_time(lambda: F.linear(a, wt).cpu(), reps=3)
    cpu_lin = best_time(lambda: F.linear(a_cpu, b_cpu.t().contiguous()), reps=3)
    row("linear 1024x1024x1024 (x @ w.t())", tiny_lin, cpu_lin, f"  {2 * 1024**3 / tiny_lin / 1e9:.1f} GFLOP/s")

    s_cpu = torch.randn(4096, 1024, generator=g)
    s = s_cpu.to("tiny")
    row("softmax (4096, 1024)", best_time(lambda: s.softmax(-1).cpu()), best_time(lambda: s_cpu.softmax(-1)))
    w, bias = torch.ones(1024, device="tiny"), torch.zeros(1024, device="tiny")
    row(
        "layer_norm (4096, 1024)",
        best_time(lambda: F.layer_norm(s, (1024,), w, bias).cpu()),
        best_time(lambda: F.layer_norm(s_cpu, (1024,), w.cpu(), bias.cpu())),
    )


if __name__ == "__main__":
    main()
