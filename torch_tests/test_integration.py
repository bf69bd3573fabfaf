"""PyTorch features users rely on with cuda, on tiny (issue #15): parameters kept across module.to(),
device properties, memory statistics, DLPack. Each compares with what the CPU does or torch.cuda documents."""

import gc
import os

import pytest
import torch
from conftest import DEVICE, assert_same
from torch import nn

MiB = 1024 * 1024


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


# Device properties, as torch.cuda's where they apply.


def test_get_device_properties_names_the_device_and_its_memory_and_threads():
    props = torch.tiny.get_device_properties(0)
    assert props.name == torch.tiny.get_device_name(0)
    assert isinstance(props.total_memory, int) and props.total_memory > 0
    assert isinstance(props.multi_processor_count, int) and props.multi_processor_count >= 1
    if os.environ.get("TINY_DEVICE", "CPU") == "CPU":
        assert props.total_memory == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        threads = int(os.environ.get("TINY_THREADS", 0)) or os.cpu_count()
        assert props.multi_processor_count == threads
    for same in (None, "tiny", "tiny:0", torch.device("tiny:0")):
        assert torch.tiny.get_device_properties(same).total_memory == props.total_memory
    assert f"total_memory={props.total_memory // MiB}MB" in repr(props)
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.tiny.get_device_properties(torch.tiny.device_count())


def test_is_bf16_supported_and_bfloat16_computes_as_on_the_cpu():
    assert torch.tiny.is_bf16_supported() is True
    assert torch.tiny.is_bf16_supported(including_emulation=False) is True
    a = torch.randn(8, 16).bfloat16()
    b = torch.randn(16, 4).bfloat16()
    out = (a.to(DEVICE) @ b.to(DEVICE)).relu()
    assert out.dtype == torch.bfloat16
    assert_same(out, (a @ b).relu(), rtol=2e-2, atol=2e-2)


# Memory statistics from the allocator's own counters.


def settled():
    gc.collect()
    torch.tiny.synchronize()


def test_memory_allocated_moves_with_a_tensors_lifetime_and_empty_cache_returns_blocks():
    settled()
    torch.tiny.empty_cache()
    before = torch.tiny.memory_allocated()
    assert torch.tiny.memory_reserved() == before  # nothing cached after empty_cache
    x = torch.ones(MiB, device=DEVICE)  # 4 MiB, realized by memory_allocated (a sync point)
    assert torch.tiny.memory_allocated() == before + 4 * MiB
    assert torch.tiny.memory_reserved() >= before + 4 * MiB
    assert x.sum().item() == MiB
    del x
    settled()
    assert torch.tiny.memory_allocated() == before
    assert torch.tiny.memory_reserved() >= before + 4 * MiB  # the freed block stays cached
    torch.tiny.empty_cache()
    assert torch.tiny.memory_reserved() == before


def test_max_memory_allocated_records_the_peak_until_reset():
    settled()
    base = torch.tiny.memory_allocated()
    torch.tiny.reset_peak_memory_stats()
    assert torch.tiny.max_memory_allocated() == base
    x = torch.full((2 * MiB,), 3.0, device=DEVICE)  # 8 MiB
    torch.tiny.synchronize()
    del x
    settled()
    assert torch.tiny.memory_allocated() == base
    assert torch.tiny.max_memory_allocated() >= base + 8 * MiB
    assert torch.tiny.max_memory_reserved() >= base + 8 * MiB
    torch.tiny.reset_peak_memory_stats()
    assert torch.tiny.max_memory_allocated() == base


def test_memory_stats_has_torch_cudas_keys_and_pools_add_up():
    x = torch.ones(3 * MiB // 4, device=DEVICE)  # one large-pool block (3 MiB)
    y = torch.ones(10, device=DEVICE)  # one small-pool block
    stats = torch.tiny.memory_stats()
    assert list(stats) == sorted(stats)
    for kind in ("allocation", "allocated_bytes", "reserved_bytes", "segment", "active_bytes", "requested_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                assert isinstance(stats[f"{kind}.{pool}.{metric}"], int)
        assert stats[f"{kind}.all.current"] == stats[f"{kind}.small_pool.current"] + stats[f"{kind}.large_pool.current"]
    for counter in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        assert isinstance(stats[counter], int)
    assert stats["allocated_bytes.large_pool.current"] >= 3 * MiB
    assert stats["allocation.small_pool.current"] >= 1
    assert stats["allocated_bytes.all.current"] == torch.tiny.memory_allocated()
    assert stats["requested_bytes.all.current"] <= stats["allocated_bytes.all.current"]
    del x, y


def test_accumulated_stats_count_allocations_and_reset():
    settled()
    torch.tiny.reset_accumulated_memory_stats()
    assert torch.tiny.memory_stats()["allocated_bytes.all.allocated"] == 0
    x = torch.ones(MiB, device=DEVICE)
    torch.tiny.synchronize()
    del x
    settled()
    stats = torch.tiny.memory_stats()
    assert stats["allocated_bytes.all.allocated"] >= 4 * MiB
    assert stats["allocated_bytes.all.freed"] >= 4 * MiB


def test_torch_accelerator_memory_functions_read_tinys_counters():
    assert torch.accelerator.current_accelerator().type == DEVICE
    x = torch.ones(MiB, device=DEVICE)
    assert torch.accelerator.memory_allocated() == torch.tiny.memory_allocated()
    assert torch.accelerator.memory_allocated(0) >= 4 * MiB
    assert torch.accelerator.memory_reserved() == torch.tiny.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == torch.tiny.max_memory_allocated()
    assert torch.accelerator.memory_stats() == torch.tiny.memory_stats()
    del x
    settled()
    torch.accelerator.empty_cache()
    assert torch.tiny.memory_reserved() == torch.tiny.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.tiny.max_memory_allocated() == torch.tiny.memory_allocated()


def test_mem_get_info_reports_free_and_total_memory():
    if os.environ.get("TINY_DEVICE", "CPU") != "CPU":
        with pytest.raises(NotImplementedError, match="cannot tell"):
            torch.tiny.mem_get_info()
        return
    free, total = torch.tiny.mem_get_info()
    assert total == torch.tiny.get_device_properties().total_memory
    assert 0 < free <= total
    assert torch.accelerator.get_memory_info()[1] == total


# DLPack: a lazy storage has no device pointer to share.


def test_to_dlpack_of_a_tiny_tensor_raises_naming_the_lazy_storage():
    x = torch.arange(6.0, device=DEVICE)
    for to_dlpack in (torch.utils.dlpack.to_dlpack, torch.to_dlpack):
        with pytest.raises(RuntimeError, match="lazy and has no device pointer"):
            to_dlpack(x)
    with pytest.raises(BufferError, match="lazy and has no device pointer"):
        x.__dlpack__()
    with pytest.raises(BufferError, match="lazy and has no device pointer"):
        torch.from_dlpack(x)


def test_dlpack_still_exports_cpu_tensors_and_a_cpu_copy_of_a_tiny_one():
    cpu = torch.arange(6.0)
    assert torch.equal(torch.from_dlpack(torch.utils.dlpack.to_dlpack(cpu)), cpu)
    x = cpu.to(DEVICE)
    capsule = x.__dlpack__(dl_device=(torch.utils.dlpack.DLDeviceType.kDLCPU, 0))
    out = torch.from_dlpack(capsule)
    assert out.device.type == "cpu"
    assert torch.equal(out, cpu)
