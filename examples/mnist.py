"""Train a small CNN on Fashion-MNIST (or MNIST) with torchvision, on torch.device("tiny") or the CPU.

The data come from Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist): nothing is downloaded.
The same --seed gives the same initial weights and batches on both devices, so their losses can be compared.

Run: .venv/bin/python examples/mnist.py --device tiny --steps 20 --test-batches 5
     .venv/bin/python examples/mnist.py --device cpu
"""

import argparse
import gzip
import shutil
import struct
import time
import zlib
from itertools import pairwise
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

SYSTEM_DATA = {"fashion-mnist": Path("/usr/share/datasets/fashion-mnist"), "mnist": Path("/usr/share/datasets/mnist")}
DATASETS = {"fashion-mnist": datasets.FashionMNIST, "mnist": datasets.MNIST}
MEAN_STD = {"fashion-mnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}
FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def prepare_root(name, root):
    """Unpack the system's .gz files into <root>/<Class>/raw/, where torchvision looks (it reads them unpacked)."""
    src = SYSTEM_DATA[name]
    missing = [str(src / f"{f}.gz") for f in FILES if not (src / f"{f}.gz").exists()]
    if missing:
        hint = "apt-get install dataset-fashion-mnist" if name == "fashion-mnist" else "no Debian package: copy them"
        raise SystemExit(f"{name}: missing {', '.join(missing)} ({hint})")
    root = Path(root).expanduser()
    raw = root / DATASETS[name].__name__ / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        if not (raw / f).exists():
            with gzip.open(src / f"{f}.gz", "rb") as packed, open(raw / f"{f}.tmp", "wb") as out:
                shutil.copyfileobj(packed, out)
            (raw / f"{f}.tmp").rename(raw / f)
    return root


def conv_block(cin, cout):
    """conv-relu-conv-relu-batchnorm-maxpool, as a list of modules."""
    return [
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.ReLU(),
        nn.BatchNorm2d(cout),
        nn.MaxPool2d(2),
    ]


def build_model():
    return nn.Sequential(*conv_block(1, 32), *conv_block(32, 64), nn.Flatten(), nn.Linear(64 * 7 * 7, 10))


def train_epoch(model, opt, loader, device, max_steps, losses):
    model.train()
    total = min(len(loader), max_steps or len(loader))
    start = time.perf_counter()
    for step, (x, y) in enumerate(loader, 1):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())  # the sync point: on tiny, the pending work runs here
        rate = step * loader.batch_size / (time.perf_counter() - start)
        print(f"\r  step {step}/{total}  loss {losses[-1]:.4f}  {rate:8.1f} img/s", end="", flush=True)
        if step == total:
            break
    print()


def evaluate(model, loader, device, max_batches):
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=device)
    seen = 0
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i == max_batches:
                break
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum()
            seen += len(y)
    return correct.item() / seen


def save_png(losses, path, width=480, height=240, margin=20):
    """A loss curve as a grayscale PNG, written with zlib and struct alone (no matplotlib here)."""
    pixels = [bytearray(b"\xff" * width) for _ in range(height)]
    for x in range(margin, width - margin):
        pixels[height - margin][x] = 0
    for y in range(margin, height - margin + 1):
        pixels[y][margin] = 0
    lo, hi = min(losses), max(losses)
    span_x, span_y = width - 2 * margin - 2, height - 2 * margin - 2
    points = [
        (
            margin + 1 + i * span_x // max(len(losses) - 1, 1),
            height - margin - 1 - round((v - lo) / ((hi - lo) or 1) * span_y),
        )
        for i, v in enumerate(losses)
    ]
    for (x0, y0), (x1, y1) in pairwise(points[:1] + points):  # straight segments between the points
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for t in range(n + 1):
            pixels[y0 + (y1 - y0) * t // n][x0 + (x1 - x0) * t // n] = 60

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    rows = b"".join(b"\x00" + bytes(row) for row in pixels)  # filter type 0 per row
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    Path(path).write_bytes(png)


def save_plot(losses, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        save_png(losses, path)
        return
    plt.plot(losses)
    plt.xlabel("step")
    plt.ylabel("training loss")
    plt.savefig(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "tiny"], default="tiny")
    parser.add_argument("--dataset", choices=list(DATASETS), default="fashion-mnist")
    parser.add_argument("--data", default="~/.cache/tiny/datasets", help="torchvision root (filled from the system)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="max training steps per epoch (default: all)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-batches", type=int, default=None, help="max evaluation batches (default: all)")
    parser.add_argument("--plot", default="mnist_loss.png")
    args = parser.parse_args()

    root = prepare_root(args.dataset, args.data)
    mean, std = MEAN_STD[args.dataset]
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((mean,), (std,))])
    train_set = DATASETS[args.dataset](root, train=True, download=False, transform=transform)
    test_set = DATASETS[args.dataset](root, train=False, download=False, transform=transform)
    shuffle = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=shuffle, num_workers=0)
    test_loader = DataLoader(test_set, batch_size=args.batch_size, num_workers=0)

    device = torch.device(args.device)
    torch.manual_seed(args.seed)  # the same initial weights on every device
    model = build_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    losses = []
    for epoch in range(1, args.epochs + 1):
        print(f"epoch {epoch}/{args.epochs} on {device}")
        train_epoch(model, opt, train_loader, device, args.steps, losses)
        print(f"  test accuracy {evaluate(model, test_loader, device, args.test_batches):.2%}")

    save_plot(losses, args.plot)
    print(f"loss curve: {Path(args.plot).resolve()}")
    if device.type == "tiny":
        stats = torch.tiny.stats()
        print(f"tiny: {stats['kernels']} kernels, {stats['fallbacks']} fallbacks {stats['fallback_ops']}")


if __name__ == "__main__":
    main()
