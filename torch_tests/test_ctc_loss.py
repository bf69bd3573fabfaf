"""CTC loss (aten/_ctc_loss, _ctc_loss_backward) natively on tiny against torch's CPU: values, gradients, the
target layouts and length forms, impossible alignments, zero_infinity, and torch's errors."""

import pytest
import torch
import torch.nn.functional as F
from conftest import check_devices


def ctc_case(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(12, 3, 6, generator=g, dtype=dtype).log_softmax(2)
    targets = torch.randint(1, 6, (3, 4), generator=g)
    return log_probs, targets, torch.tensor([12, 9, 7]), torch.tensor([4, 2, 3])


def loss_and_grad(log_probs, targets, input_lengths, target_lengths, lengths_as_lists=False, **kw):
    def run(dev):
        lp = log_probs.to(dev).requires_grad_()
        il, tl = input_lengths, target_lengths
        il, tl = (il.tolist(), tl.tolist()) if lengths_as_lists else (il.to(dev), tl.to(dev))
        loss = F.ctc_loss(lp, targets.to(dev), il, tl, **kw)
        (grad,) = torch.autograd.grad(loss.sum(), lp)
        return loss.detach(), grad

    return run


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lists", [False, True], ids=["tensor-lengths", "list-lengths"])
def test_ctc_loss_and_gradient_match_cpu(reduction, lists):
    check_devices(loss_and_grad(*ctc_case(), lengths_as_lists=lists, reduction=reduction))


def test_ctc_loss_float32_concatenated_targets_other_blank_and_empty_target():
    log_probs, targets, il, tl = ctc_case(torch.float32, seed=1)
    flat = torch.cat([targets[0, :4], targets[1, :2], targets[2, :3]])
    check_devices(loss_and_grad(log_probs, flat, il, tl), rtol=1e-5, atol=1e-5)
    check_devices(loss_and_grad(log_probs, targets.clamp(max=4), il, tl, blank=5), rtol=1e-5, atol=1e-5)
    check_devices(loss_and_grad(log_probs, targets, il, torch.tensor([0, 2, 3])), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_of_an_impossible_alignment_is_inf_or_zeroed(zero_infinity):
    log_probs = ctc_case()[0]
    # sample 0 needs 7 steps for 1 1 1 2 (blanks between the repeats) but has 4; sample 1 ends in repeats
    targets = torch.tensor([[1, 1, 1, 2], [3, 3, 0, 0], [2, 2, 2, 2]])
    lengths = torch.tensor([4, 5, 12]), torch.tensor([4, 2, 4])
    check_devices(loss_and_grad(log_probs, targets, *lengths, reduction="none", zero_infinity=zero_infinity))


def test_ctc_loss_errors_match_cpu():
    log_probs, targets, il, tl = ctc_case()
    for bad in (
        dict(input_lengths=torch.tensor([13, 9, 7])),  # longer than the input
        dict(target_lengths=torch.tensor([5, 2, 3])),  # longer than the padded targets
        dict(blank=6),
        dict(input_lengths=torch.tensor([12, 9])),
    ):
        args = dict(input_lengths=il, target_lengths=tl) | bad
        blank = args.pop("blank", 0)
        check_devices(
            lambda dev, a=args, b=blank: F.ctc_loss(
                log_probs.to(dev), targets.to(dev), a["input_lengths"], a["target_lengths"], blank=b
            )
        )
    check_devices(lambda dev: F.ctc_loss(log_probs.half().to(dev), targets.to(dev), il, tl))
    check_devices(lambda dev: F.ctc_loss(log_probs.to(dev), targets.float().to(dev), il, tl))
