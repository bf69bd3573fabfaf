"""A short tour of torch.device("tiny"): lazy ops, fused kernels, views and in-place writes.

Every result is compared with the same code run by PyTorch on the CPU.
"""

import torch

import torch_tiny  # noqa: F401  (plain `import torch` also loads it, through autoload)

tiny = torch.device("tiny")


def show(title, tiny_result, cpu_result):
    torch.tiny.reset_stats()
    values = tiny_result.cpu()  # a sync point: pending work runs here
    kernels = torch.tiny.stats()["kernels"]
    ok = torch.allclose(values, cpu_result, equal_nan=True)
    print(f"{title}\n{values}\n  -> {kernels} kernel(s), matches CPU: {ok}\n")


def main():
    print(f"tiny devices: {torch.tiny.device_count()}, current: {torch.tiny.current_device()}\n")

    a_cpu = torch.linspace(-2, 2, 12).reshape(3, 4)
    b_cpu = torch.arange(4, dtype=torch.float32)
    a, b = a_cpu.to(tiny), b_cpu.to(tiny)
    torch.tiny.synchronize()  # realize the inputs, so the counts below are for the computations only

    # Five elementwise ops with broadcasting: recorded lazily, run as one fused kernel.
    def f(x, y):
        return ((x + y) * x).relu().sigmoid()

    show("((a + b) * a).relu().sigmoid()", f(a, b), f(a_cpu, b_cpu))

    # In-place ops on the same tensor fuse too.
    def g(x):
        x = x.clone()
        x.add_(1)
        x.mul_(2)
        return x.clamp_(0, 3)

    show("a.clone().add_(1).mul_(2).clamp_(0, 3)", g(a), g(a_cpu))

    # Views share storage: writes through a view are visible through the base.
    def h(x):
        x = x.clone()
        x[1:3].mul_(-1)
        x.t()[0] = 9  # column 0 of x
        x.view(-1)[::5].zero_()
        return x

    show(
        "writes through views: x[1:3].mul_(-1); x.t()[0] = 9; x.view(-1)[::5].zero_()",
        h(a),
        h(a_cpu),
    )

    # Integer and comparison ops, with torch's type promotion.
    def k(x):
        n = (x * 10).to(torch.int32)
        return torch.where(n % 3 == 0, n // 2, -n) / 4  # int / int gives float32

    show("integer ops: where(n % 3 == 0, n // 2, -n) / 4", k(a), k(a_cpu))

    print(f"stats since the last reset: {torch.tiny.stats()}")


if __name__ == "__main__":
    main()
