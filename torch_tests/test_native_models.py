"""Every op that the demo's CNN, torchvision's resnet18 and a small GPT use runs natively (issue #16): a
forward, backward and optimizer step of each with the CPU fallback disabled (TINY_FALLBACK=0, so any op
without a tiny kernel raises), compared with the same steps on PyTorch's CPU: losses, gradients and the
updated weights."""

import copy
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, assert_same
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

TOL = {"rtol": 1e-4, "atol": 1e-5}


pytestmark = pytest.mark.usefixtures("native")


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, fused):
        super().__init__()
        self.heads, self.fused = heads, fused
        # no bias: the key bias gets an exactly zero gradient (softmax ignores a shift), which Adam turns into
        # steps of +-lr from rounding noise
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads, fused):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, fused)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token and position embeddings, two pre-norm blocks, a final layer norm and a head tied to the token
    embedding."""

    def __init__(self, vocab=17, context=8, dim=16, heads=2, fused=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, fused) for _ in range(2)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(positions))
        return self.head(self.ln(x))


def train_steps(model, make_optimizer, batches, loss_of, device, steps=2):
    """Losses, gradients of the last step and final weights after `steps` optimizer steps on device."""
    model = copy.deepcopy(model).to(device)
    opt = make_optimizer(model.parameters())
    losses = []
    for inputs, target in batches[:steps]:
        opt.zero_grad()
        loss = loss_of(model(inputs.to(device)), target.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    grads = [p.grad for p in model.parameters()]
    return losses, grads, [p.detach() for p in model.parameters()]


def compare(model, make_optimizer, batches, loss_of, tol=TOL, steps=2):
    expected = train_steps(model, make_optimizer, batches, loss_of, "cpu", steps)
    actual = train_steps(model, make_optimizer, batches, loss_of, DEVICE, steps)
    torch.testing.assert_close(actual[0], expected[0], **tol)
    assert_same(actual[1], expected[1], path="gradients", **tol)
    assert_same(actual[2], expected[2], path="weights", **tol)


@pytest.mark.parametrize("fused", [True, False], ids=["sdpa", "explicit_attention"])
def test_small_gpt_trains_natively_like_cpu(fused):
    torch.manual_seed(0)
    model = TinyGPT(fused=fused)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 17, (3, 8), generator=g), torch.randint(0, 17, (3, 8), generator=g)) for _ in range(2)]

    def loss_of(logits, target):
        return F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1))

    compare(model, lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), batches, loss_of)


def test_resnet18_trains_natively_like_cpu():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=5)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 5, (4,), generator=g))]
    # one step: 20 batch-normalized layers over 4 images amplify float32 summation-order differences into
    # the first layers' gradients (up to ~1e-3 where they are O(1); a wrong kernel is off by O(1))
    compare(
        model,
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
        batches,
        F.cross_entropy,
        tol={"rtol": 1e-3, "atol": 2e-3},
        steps=1,
    )


def test_demo_cnn_trains_natively_like_cpu():
    from mnist import build_model  # the demo's model

    torch.manual_seed(0)
    model = build_model()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(2)]
    # SGD: Adam's first step moves each weight by lr times its gradient's sign, and at batch 4 some of the 64-channel
    # 3 x 3 weight's gradients are within float32 rounding of 0, signed by the rounding (test_training.py's demo step
    # runs Adam, its weights compared where the sign is the gradient's)
    # The second step's gradients of the linear layer (up to ~4) differ from the CPU's by up to 2.5e-5: the 3 x 3
    # convolutions sum in Winograd's transforms, a few ulp from the CPU's sums, and two steps carry that on.
    compare(
        model,
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
        batches,
        F.cross_entropy,
        tol={"rtol": 1e-4, "atol": 5e-5},
    )
