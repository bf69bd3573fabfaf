"""Host overheads: recording lazy ops, and a sync whose schedule is cached.

Run: .venv/bin/python bench/overhead.py
"""

import time

import torch
from common import best_time


def per_call(op, x, n):
    """Seconds per call of y = op(y), n times from x, with no sync (the graph grows to n nodes)."""
    y = x
    start = time.perf_counter()
    for _ in range(n):
        y = op(y)
    elapsed = time.perf_counter() - start
    del y
    return elapsed / n


def main():
    n = 10_000
    for device in ("tiny", "cpu"):
        x = torch.ones(16, device=device)
        per_op = per_call(lambda y: y + 1.0, x, n)
        if device == "tiny":
            print(f"recording: {per_op * 1e6:.2f} us per ATen call ({n} small lazy ops, no sync)")
        else:
            print(f"  (torch CPU eager computing the same ops: {per_op * 1e6:.2f} us per call)")
    # Other kinds of call, tiny recording vs torch CPU computing
    for label, op, shape in (
        ("in-place y.mul_(1.5)", lambda y: y.mul_(1.5), (16,)),
        ("broadcast y + row", lambda y: y + y[0], (4, 16)),
        ("matmul y @ y.t() @ y", lambda y: y @ y.t() @ y, (4, 16)),
    ):
        tiny, cpu = (per_call(op, torch.ones(shape, device=d), n // 2) for d in ("tiny", "cpu"))
        print(f"  {label}: tiny {tiny * 1e6:.2f} us, torch CPU {cpu * 1e6:.2f} us per call")
    torch.tiny.synchronize()
    x = torch.ones(16, device="tiny")

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
