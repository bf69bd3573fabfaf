"""PyTorch features users rely on with cuda, on tiny (issue #15): parameters kept across module.to(),
device properties, memory statistics, DLPack. Each compares with what the CPU does or torch.cuda documents."""

import torch
from conftest import DEVICE, assert_same
from torch import nn

# module.to("tiny") keeps the Parameter objects (torch.cuda's documented behaviour: Module._apply
# assigns `param.data` when torch._has_compatible_shallow_copy_type says the tensor types agree).


def test_module_to_tiny_keeps_the_same_parameter_objects():
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    params = list(model.parameters())
    values = [p.detach().clone() for p in params]
    model.to(DEVICE)
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in model.parameters())
    assert all(p.device.type == DEVICE for p in list(model.parameters()) + list(model.buffers()))
    for p, v in zip(params, values, strict=True):
        assert_same(p, v)
    model.to("cpu")
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_tied_weights_stay_tied_and_train_as_on_the_cpu():
    class TiedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight  # GPT-style weight tying

        def forward(self, idx):
            return self.head(self.emb(idx))

    def train(device):
        torch.manual_seed(0)
        model = TiedLM().to(device)
        assert model.head.weight is model.emb.weight
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        idx = torch.tensor([1, 2, 3, 4]).to(device)
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(idx), idx)
            loss.backward()
            opt.step()
        assert model.head.weight is model.emb.weight
        return model.emb.weight

    assert_same(train(DEVICE), train("cpu"))


def test_optimizer_built_before_to_updates_the_moved_parameters():
    def train(device):
        torch.manual_seed(0)
        model = nn.Linear(5, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)  # built while the parameters are on the CPU
        model.to(device)
        x = torch.randn(8, 5).to(device)
        for _ in range(2):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        return model.weight, model.bias

    torch.manual_seed(0)
    initial = nn.Linear(5, 2).weight.detach().clone()
    cpu_w, cpu_b = train("cpu")
    tiny_w, tiny_b = train(DEVICE)
    assert not torch.equal(tiny_w.detach().cpu(), initial)  # the step moved them
    assert_same(tiny_w, cpu_w)
    assert_same(tiny_b, cpu_b)


def test_module_to_moves_a_parameters_grad_in_place():
    model = nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    grad = model.weight.grad
    expected = grad.clone()
    model.to(DEVICE)
    assert model.weight.grad is grad
    assert grad.device.type == DEVICE
    assert_same(grad, expected)


def test_assigning_param_data_moves_the_parameter_to_tiny():
    p = nn.Parameter(torch.randn(3, 2))
    expected = p.detach().clone()
    p.data = p.data.to(DEVICE)
    assert isinstance(p, nn.Parameter) and p.requires_grad
    assert p.device.type == DEVICE
    assert_same(p, expected)
    (p * 2).sum().backward()
    assert p.grad.device.type == DEVICE
    assert_same(p.grad, torch.full((3, 2), 2.0))
    p.data = p.data.cpu()
    assert p.device.type == "cpu"


def test_shallow_copy_compatibility_answers_as_for_two_dense_backends():
    cpu, tiny = torch.ones(2), torch.ones(2, device=DEVICE)
    check = torch._has_compatible_shallow_copy_type
    assert check(cpu, tiny) and check(tiny, cpu) and check(tiny, tiny)
    assert check(tiny, torch.ones(2, dtype=torch.int64, device=DEVICE))
    sparse = torch.eye(2).to_sparse()
    # the CPU says no for dense against sparse; so does tiny
    assert not check(cpu, sparse)
    assert not check(tiny, sparse) and not check(sparse, tiny)
