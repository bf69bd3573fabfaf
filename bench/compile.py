"""torch.compile on tiny: one training step of the examples/mnist.py CNN (cross-entropy, Adam), four ways.

uncompiled tiny, torch.compile(backend="tiny"), the default torch.compile (Inductor, which hands graphs on
tiny to tiny) and PyTorch CPU eager, timed in turn round by round in one process (best and median), each
from the same initial weights and batch. For the tiny ones, the kernels, syncs and replayed schedules of
one step, and the first compiled call (dynamo and aot_autograd tracing, tiny's kernels already compiled).

Run: .venv/bin/python bench/compile.py --batch-size 128 --rounds 7
"""

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import interleaved, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import build_model  # noqa: E402


def make_step(model, device, compile_kwargs=None, loss_fn=F.cross_entropy, item=True):
    """A closure running one training step on device; compile_kwargs: torch.compile's, or None for eager. It returns
    the loss's value (`loss.item()`, a sync point), or with item=False the loss tensor, read by nobody."""
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    run = model if compile_kwargs is None else torch.compile(model, **compile_kwargs)

    def step(x, y):
        loss = loss_fn(run(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item() if item else loss

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each after the first")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model()
    x, y = torch.randn(args.batch_size, 1, 28, 28), torch.randint(0, 10, (args.batch_size,))
    xt, yt = x.to("tiny"), y.to("tiny")
    ways = {
        "tiny uncompiled": (make_step(model, "tiny"), xt, yt),
        'backend="tiny"': (make_step(model, "tiny", {"backend": "tiny"}), xt, yt),
        "default compile": (make_step(model, "tiny", {}), xt, yt),
        "cpu eager": (make_step(model, "cpu"), x, y),
    }
    print(f"MNIST CNN training step (Adam), batch {args.batch_size}, torch threads {torch.get_num_threads()}")
    for name, (step, a, b) in ways.items():
        start = time.perf_counter()
        loss = step(a, b)
        print(f"  first step {name:<18} {time.perf_counter() - start:8.3f} s   loss {loss:.6f}")
    for name, (step, a, b) in ways.items():
        for _ in range(args.warmup):
            step(a, b)
        if a.device.type == "tiny":
            torch.tiny.synchronize()
            torch.tiny.reset_stats()
            step(a, b)
            torch.tiny.synchronize()
            s = torch.tiny.stats()
            print(
                f"  one step {name:<20} kernels {s['kernels']}, syncs {s['syncs']}, replayed schedules "
                f"{s['schedule_hits']}, compiles {s['compiles']}, fallbacks {s['fallbacks']}"
            )
    times = interleaved({name: (lambda s=step, a=a, b=b: s(a, b)) for name, (step, a, b) in ways.items()}, args.rounds)
    report(f"\nsteady state, {args.rounds} rounds", times, base="tiny uncompiled")


if __name__ == "__main__":
    main()
