"""PyTorch's side of bench/gpu_check.sh: what tiny's bench_gpu measures, done by torch on its own device
(cuda on a lent GPU; cpu for the script's --dry-run). A device-to-device copy of the bytes the elementwise
chain moves, the chain itself, a sum, an m^3 matmul in float32 (full float32: TF32 off, cuBLAS's SGEMM)
and in bfloat16. Best of `rounds`, each `reps` runs then one sync. One line per case:
    torch <case> <best ms per run> <rate> <unit>
Usage: python bench/gpu_reference.py DEVICE [n] [m] [rounds] [reps]
"""

import sys
import time

import torch


def best_ms(fn, sync, rounds, reps):
    fn()
    sync()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e3


def main():
    dev = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 256 << 20
    m = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    reps = int(sys.argv[5]) if len(sys.argv) > 5 else 10
    torch.backends.cuda.matmul.allow_tf32 = False
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    name = torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu"
    print(f"device torch {torch.__version__} on {name}")
    x = torch.rand(n, device=dev) * 2 - 1
    out = torch.empty_like(x)
    a = torch.rand(m, m, device=dev) * 2 - 1
    b = torch.rand(m, m, device=dev) * 2 - 1
    a16, b16 = a.bfloat16(), b.bfloat16()

    def chain():
        y = x
        for _ in range(5):
            y = y * 0.999 + 0.001
        return y

    cases = [
        ("copy", 2.0 * n * 4, "GB/s", lambda: out.copy_(x)),
        ("elementwise_chain", 2.0 * n * 4, "GB/s", chain),
        ("sum", 1.0 * n * 4, "GB/s", lambda: x.sum()),
        ("matmul_f32", 2.0 * m**3, "TFLOP/s", lambda: a @ b),
        ("matmul_bf16", 2.0 * m**3, "TFLOP/s", lambda: a16 @ b16),
    ]
    for case, work, unit, fn in cases:
        ms = best_ms(fn, sync, rounds, reps)
        scale = 1e12 if unit == "TFLOP/s" else 1e9
        print(f"torch {case} {ms:.4f} {work / (ms / 1e3) / scale:.3f} {unit}", flush=True)


if __name__ == "__main__":
    main()
