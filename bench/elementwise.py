"""A chain of 10 elementwise ops on 16M float32: tiny (one fused kernel) vs PyTorch CPU eager.

Run: .venv/bin/python bench/elementwise.py [--numel N] [--reps R]
Prints both times (best of R after a warm-up), the ratio, tiny's GB/s (bytes the fused kernel reads
and writes / time) and, for reference, the GB/s of a plain CPU copy (clone) of the same bytes.
"""

import argparse
import time

import torch

import torch_tiny  # noqa: F401  (registers the tiny device)


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


def best_time(fn, reps):
    fn()  # warm-up: compiles, allocates, fills caches
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    x_cpu = torch.randn(args.numel, generator=g)
    y_cpu = torch.randn(args.numel, generator=g)
    x, y = x_cpu.to("tiny"), y_cpu.to("tiny")
    torch.tiny.synchronize()

    results = {}

    def run_tiny():
        results["tiny"] = chain(x, y)
        torch.tiny.synchronize()  # the result is alive, so this realizes it

    def run_cpu():
        results["cpu"] = chain(x_cpu, y_cpu)

    t_tiny = best_time(run_tiny, args.reps)
    torch.tiny.reset_stats()
    run_tiny()
    kernels = torch.tiny.stats()["kernels"]
    t_cpu = best_time(run_cpu, args.reps)
    t_copy = best_time(lambda: x_cpu.clone(), args.reps)

    max_diff = (results["tiny"].cpu() - results["cpu"]).abs().max().item()

    itemsize = x_cpu.element_size()
    fused_bytes = 3 * args.numel * itemsize  # reads x and y, writes the result
    copy_bytes = 2 * args.numel * itemsize  # reads and writes one tensor
    print(f"chain of 10 elementwise ops on {args.numel:,} float32, best of {args.reps} (torch threads: "
          f"{torch.get_num_threads()})")  # fmt: skip
    print(f"  tiny        {t_tiny * 1e3:8.2f} ms  {fused_bytes / t_tiny / 1e9:6.2f} GB/s  ({kernels} kernel per run)")
    print(f"  torch cpu   {t_cpu * 1e3:8.2f} ms  (eager, one kernel per op)")
    print(f"  ratio       {t_cpu / t_tiny:8.2f}x  (torch cpu time / tiny time; > 1 means tiny is faster)")
    print(f"  cpu clone   {t_copy * 1e3:8.2f} ms  {copy_bytes / t_copy / 1e9:6.2f} GB/s  (reference copy bandwidth)")
    print(f"  max |tiny - cpu| = {max_diff:.2e}")
    torch.testing.assert_close(results["tiny"].cpu(), results["cpu"])  # float32 default tolerances


if __name__ == "__main__":
    main()
