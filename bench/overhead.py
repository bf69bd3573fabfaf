"""Host overheads: recording lazy ops, and a sync whose schedule is cached.

Run: .venv/bin/python bench/overhead.py [--rounds R] [--calls N]
"""

import argparse
import statistics
import time

import torch
from common import best_time


def per_call(op, shape, device, n):
    """Seconds per call of y = op(y), n times from ones(shape), with no sync (a tiny graph grows to n nodes)."""
    y = torch.ones(shape, device=device)
    start = time.perf_counter()
    for _ in range(n):
        y = op(y)
    elapsed = time.perf_counter() - start
    del y
    return elapsed / n


def recording(cases, rounds, n):
    """Each case's tiny recording and torch CPU computing, alternating within every round so that the shared
    machine's changing speed reaches both alike; a sync between rounds (untimed) drops the recorded graph."""
    times = {label: {"tiny": [], "cpu": []} for label, _, _ in cases}
    for _, op, shape in cases:  # warm-up: the CPU kernel probes, the allocators, the caches
        for device in ("tiny", "cpu"):
            per_call(op, shape, device, 50)
        torch.tiny.synchronize()
    for _ in range(rounds):
        for label, op, shape in cases:
            for device in ("tiny", "cpu"):
                times[label][device].append(per_call(op, shape, device, n))
                torch.tiny.synchronize()
    print(f"recording ({n} calls per round, {rounds} rounds): us per call, best / median")
    for label, t in times.items():
        tb, tm = min(t["tiny"]) * 1e6, statistics.median(t["tiny"]) * 1e6
        cb, cm = min(t["cpu"]) * 1e6, statistics.median(t["cpu"]) * 1e6
        print(
            f"  {label:<22} tiny {tb:6.2f} / {tm:6.2f}   torch CPU eager {cb:6.2f} / {cm:6.2f}"
            f"   tiny/eager {tb / cb:4.2f} / {tm / cm:4.2f}"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    recording(
        (
            ("y + 1.0", lambda y: y + 1.0, (16,)),
            ("in-place y.mul_(1.5)", lambda y: y.mul_(1.5), (16,)),
            ("broadcast y + y[0]", lambda y: y + y[0], (4, 16)),
            ("matmul y @ y.t() @ y", lambda y: y @ y.t() @ y, (4, 16)),
        ),
        args.rounds,
        args.calls,
    )
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
