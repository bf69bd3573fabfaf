"""Shared timing for the benchmarks: best of R runs after a warm-up, tiny synchronized inside."""

import time

import torch

import torch_tiny  # noqa: F401  (registers the tiny device)


def best_time(fn, reps=5):
    fn()  # warm-up: compiles, allocates, fills caches
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.tiny.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def row(name, tiny_s, torch_s, extra=""):
    times = f"tiny {tiny_s * 1e3:9.3f} ms   torch {torch_s * 1e3:9.3f} ms"
    print(f"{name:<34} {times}   ratio {torch_s / tiny_s:5.2f}x {extra}")
