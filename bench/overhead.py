"""Host overheads: recording lazy ops, and a sync whose schedule is cached.

Run: .venv/bin/python bench/overhead.py
"""

import time

import torch
from common import best_time


def record(x, n):
    for _ in range(n):
        x = x + 1.0
    return x


def main():
    x = torch.ones(16, device="tiny")
    torch.tiny.synchronize()
    n = 10_000
    start = time.perf_counter()
    y = record(x, n)
    per_op = (time.perf_counter() - start) / n
    del y
    print(f"recording: {per_op * 1e6:.2f} us per ATen call ({n} small lazy ops, no sync)")

    # A 2,000-node graph (1,000 adds and 1,000 muls) realized again and again: the schedule is cached.
    def step():
        z = x
        for _ in range(1000):
            z = z * 1.0001 + 0.5
        return z

    graph = step()
    torch.tiny.synchronize()

    def sync_only():
        nonlocal graph
        graph = step()
        start = time.perf_counter()
        torch.tiny.synchronize()
        return time.perf_counter() - start

    sync_only()
    best = min(sync_only() for _ in range(5))
    hits = torch.tiny.stats()["schedule_hits"]
    print(f"cached sync of a 2,000-node graph: {best * 1e3:.3f} ms host+run; schedule_hits={hits}")
    build = best_time(step, reps=3)
    print(f"  (recording that graph: {build * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
