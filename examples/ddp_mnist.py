"""Train examples/mnist.py's CNN with DistributedDataParallel over several processes, on tiny or the CPU.

Each process trains on its own part of every epoch (DistributedSampler) with its own batch; DDP averages
the gradients with gloo (tiny tensors go through host copies: torch_tiny/distributed.py), so every
process holds the same weights. The model, data and evaluation are examples/mnist.py's.

Run: .venv/bin/torchrun --nproc-per-node 2 examples/ddp_mnist.py --steps 40 --test-batches 10
     .venv/bin/torchrun --nproc-per-node 2 examples/ddp_mnist.py --device cpu --steps 40
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import transforms

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist import DATASETS, MEAN_STD, build_model, evaluate, prepare_root  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "tiny"], default="tiny")
    parser.add_argument("--dataset", choices=list(DATASETS), default="fashion-mnist")
    parser.add_argument("--data", default="~/.cache/tiny/datasets", help="torchvision root (filled from the system)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="max training steps per epoch (default: all)")
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-batches", type=int, default=None, help="max evaluation batches (default: all)")
    args = parser.parse_args()

    dist.init_process_group("gloo")  # torchrun's environment: rank, world size, address
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:  # unpacks the dataset once, before the other processes read it
        prepare_root(args.dataset, args.data)
    dist.barrier()
    root = prepare_root(args.dataset, args.data)
    mean, std = MEAN_STD[args.dataset]
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((mean,), (std,))])
    train_set = DATASETS[args.dataset](root, train=True, download=False, transform=transform)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, num_workers=0)

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(build_model().to(device))  # starts from rank 0's weights
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        total = min(len(loader), args.steps or len(loader))
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}: {world} processes on {device}, batch {args.batch_size} each")
        for step, (x, y) in enumerate(loader, 1):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            opt.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)
            mean_loss = mean_loss.item()  # the sync point: on tiny, the pending work runs here
            if step == 1:  # the first step compiles the kernels: the rate counts the steps after it
                start = time.perf_counter()
            rate = (step - 1) * args.batch_size * world / (time.perf_counter() - start) if step > 1 else 0.0
            if rank == 0:
                print(f"\r  step {step}/{total}  loss {mean_loss:.4f}  {rate:8.1f} img/s", end="", flush=True)
            if step == total:
                break
        if rank == 0:
            print()

    if rank == 0:
        test_set = DATASETS[args.dataset](root, train=False, download=False, transform=transform)
        test_loader = DataLoader(test_set, batch_size=args.batch_size, num_workers=0)
        print(f"  test accuracy {evaluate(model.module, test_loader, device, args.test_batches):.2%}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
