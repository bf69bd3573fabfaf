"""A hand-written training loop (manual SGD under no_grad, no torch.optim, no .item()) against the same
loop with a sync per step: scheduling is linear in graph size and a long pending graph is realized on
its own, so the unsynced loop should cost about what the synced one does, at 20 and at 200 steps.
Runs alternate between the two loops; prints best and median per step."""

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_tiny  # noqa: F401


def make(seed=0):
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(64, 128, generator=g) * 0.1).to("tiny").requires_grad_()
    w2 = (torch.randn(128, 10, generator=g) * 0.1).to("tiny").requires_grad_()
    x = torch.randn(32, 64, generator=g).to("tiny")
    y = torch.randint(0, 10, (32,), generator=g).to("tiny")
    return [w1, w2], x, y


def run(steps, sync_each_step):
    params, x, y = make()
    torch.tiny.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss = F.cross_entropy((x @ params[0]).relu() @ params[1], y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p.grad = None
        if sync_each_step:
            loss.item()
    final = loss.item()
    return (time.perf_counter() - start) / steps, final


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for steps in (20, 200):
        run(steps, True), run(steps, False)  # warm-up: compiles
        synced, unsynced = [], []
        for _ in range(reps):
            t, a = run(steps, True)
            synced.append(t)
            t, b = run(steps, False)
            unsynced.append(t)
            assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (a, b)
        best = min(unsynced) / min(synced)
        med = statistics.median(unsynced) / statistics.median(synced)
        print(
            f"{steps:4d} steps: synced {min(synced) * 1e3:7.2f} ms/step (median {statistics.median(synced) * 1e3:7.2f})"
            f"   unsynced {min(unsynced) * 1e3:7.2f} ms/step (median {statistics.median(unsynced) * 1e3:7.2f})"
            f"   unsynced/synced best {best:4.2f}x median {med:4.2f}x"
        )


if __name__ == "__main__":
    main()
