"""The demo CNN's training step (examples/mnist.py's model, Adam, cross-entropy, batch 128) on tiny, PyTorch
eager and torch.compile (Inductor) on the CPU, in one process, contenders interleaved round by round
(bench/common.py), best and median. Each contender has its own copy of the same weights and batch; tiny's
step is synchronized with its weight updates, not only the loss. `--model resnet18`: torchvision's ResNet-18
(10 classes) on 64 x 64 images, batch 16 unless --batch-size says otherwise; `--model shufflenet` ShuffleNet v2 x0.5
the same way; `--model vit`: a small torchvision VisionTransformer (4 layers, width 128, 4 heads, patches of 4 x 4
from 32 x 32 images: 65 tokens), batch 32. `--model dcgan`: a DCGAN generator
(transposed convolutions, 100-dim noise to 64 x 64 RGB, batch norm, ReLU, tanh) fitting target images by mean
squared error, batch 32. `--model mlp`: an MNIST-sized MLP (784-512-512-10, ReLU), batch 64: small kernels, where
recording each op counts.

Run: .venv/bin/python bench/training_step.py [rounds] [--model demo|resnet18|dcgan|vit|shufflenet|mlp]
     [--batch-size N] [--no-compile] [--cpu-time] [--steps K [--item]]
(--cpu-time: one thread each, its CPU time; bench/common.py)
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from common import CLOCK, interleaved, report
from compile import make_step
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import build_model  # noqa: E402


def dcgan_generator():
    """DCGAN's generator (Radford et al.), half width: noise (N, 100, 1, 1) to images (N, 3, 64, 64)."""
    layers, channels = [], [100, 256, 128, 64, 32]
    for i, (c_in, c_out) in enumerate(zip(channels, channels[1:], strict=False)):
        layers += [nn.ConvTranspose2d(c_in, c_out, 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False)]
        layers += [nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.ConvTranspose2d(channels[-1], 3, 4, 2, 1, bias=False), nn.Tanh())


# torchvision models: (build from torchvision.models, default batch, image shape, title)
TORCHVISION = {
    "resnet18": (lambda m: m.resnet18(num_classes=10), 16, (3, 64, 64), "torchvision ResNet-18, 64 x 64"),
    "vit": (
        lambda m: m.VisionTransformer(
            image_size=32, patch_size=4, num_layers=4, num_heads=4, hidden_dim=128, mlp_dim=512, num_classes=10
        ),
        32,
        (3, 32, 32),
        "torchvision ViT (4 layers, 128 wide), 32 x 32",
    ),
    "shufflenet": (
        lambda m: m.shufflenet_v2_x0_5(num_classes=10),
        16,
        (3, 64, 64),
        "torchvision ShuffleNet v2 x0.5, 64 x 64",
    ),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=12)
    parser.add_argument("--model", choices=("demo", "resnet18", "dcgan", "vit", "shufflenet", "mlp"), default="demo")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="128 for the demo, 16 for resnet18 and shufflenet, 32 for dcgan and vit",
    )
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--cpu-time", action="store_true", help="one thread each, its CPU time (bench/common.py)")
    parser.add_argument(
        "--steps",
        type=int,
        default=1,
        help="steps per timed run, tiny synchronized after the last only (as a loop that reads no value each step: "
        "each step's kernels run while the next is recorded); the time per step is reported",
    )
    parser.add_argument(
        "--item",
        action="store_true",
        help="with --steps: each step reads its loss (loss.item(), as a loop that logs it), which waits for the "
        "kernel computing the loss only; the rest of the step runs while the next is recorded",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    loss_fn = F.cross_entropy
    if args.model == "demo":
        model, batch, image, title = build_model(), args.batch_size or 128, (1, 28, 28), "demo CNN"
    elif args.model == "mlp":
        layers = [nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)]
        model, batch, image, title = nn.Sequential(*layers), args.batch_size or 64, (1, 28, 28), "MLP 784-512-512-10"
    elif args.model in TORCHVISION:
        import torchvision

        make, batch, image, title = TORCHVISION[args.model]
        model, batch = make(torchvision.models), args.batch_size or batch
    else:
        model, batch, image, title = dcgan_generator(), args.batch_size or 32, (100, 1, 1), "DCGAN generator, MSE"
        loss_fn = F.mse_loss
    x = torch.randn(batch, *image)
    y = torch.randn(batch, 3, 64, 64) if args.model == "dcgan" else torch.randint(0, 10, (batch,))
    item = args.steps == 1 or args.item  # (else no step reads its loss; the run's sync waits for the last)
    steps = {
        "tiny": (make_step(model, "tiny", None, loss_fn, item), x.to("tiny"), y.to("tiny")),
        "eager": (make_step(model, "cpu", None, loss_fn, item), x, y),
    }
    if not args.no_compile:
        steps["torch.compile"] = (make_step(model, "cpu", {}, loss_fn, item), x, y)

    def run(step, a, b):
        for _ in range(args.steps - 1):
            step(a, b)
        return step(a, b)

    contenders = {name: (lambda s=s, a=a, b=b: run(s, a, b)) for name, (s, a, b) in steps.items()}
    times = interleaved(contenders, args.rounds, clock=CLOCK)
    times = {name: [t / args.steps for t in ts] for name, ts in times.items()}
    per = f", {args.steps} steps a run{', loss read each step' if args.item else ''}" if args.steps > 1 else ""
    report(f"training step, {title}, batch {batch}, Adam{per}", times)


if __name__ == "__main__":
    main()
