"""tiny: a lazy PyTorch device. `import torch` loads it (entry point group torch.backends), as does
`import torch_tiny`; then torch.device("tiny") works and torch.tiny is this backend's device module."""


def _autoload() -> None:
    """The torch.backends entry point, called at the end of `import torch`."""
    # When `import torch_tiny` comes first, this module is still running its `import torch` below: it
    # registers tiny itself once torch is ready.
    if "_register" in globals():
        _register()


import torch  # noqa: E402
import torch._tensor_str  # noqa: E402
import torch.utils  # noqa: E402

from torch_tiny import _C  # noqa: E402, F401  (loading the extension registers the kernels and hooks)


def _register() -> None:
    # Idempotent: autoload and an explicit import may both get here.
    if hasattr(torch, "tiny"):
        return
    from torch_tiny import device

    torch.utils.rename_privateuse1_backend("tiny")
    torch._register_device_module("tiny", device)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    _print_from_cpu()
    _sync_after_optimizer_steps()


def _sync_after_optimizer_steps() -> None:
    # A training loop that never calls .item() would otherwise grow one lazy graph without bound: the
    # end of each optimizer step on tiny parameters realizes the step's work (torch's global hook).
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from torch_tiny import device

    def hook(optimizer, args, kwargs):
        if any(p.device.type == "tiny" for group in optimizer.param_groups for p in group["params"]):
            device.synchronize()

    register_optimizer_step_post_hook(hook)


def _print_from_cpu() -> None:
    # torch prints xla/lazy tensors from one CPU copy (see the Note in torch/_tensor_str.py): formatting
    # runs a dozen device ops otherwise, each a sync. tiny is lazy too, so it prints the same way.
    format_data = torch._tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "tiny":
            self = self.cpu()
        return format_data(self, indent)

    torch._tensor_str._tensor_str = _tensor_str


_register()

from torch_tiny.device import (  # noqa: E402
    current_device,
    device_count,
    empty_cache,
    get_device_name,
    get_device_properties,
    is_available,
    is_bf16_supported,
    manual_seed,
    manual_seed_all,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_peak_memory_stats,
    reset_stats,
    set_device,
    stats,
    synchronize,
)

__all__ = [
    "current_device",
    "device_count",
    "empty_cache",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_stats",
    "set_device",
    "stats",
    "synchronize",
]
