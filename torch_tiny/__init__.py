"""tiny: a lazy PyTorch device. `import torch` loads it (entry point group torch.backends), as does
`import torch_tiny`; then torch.device("tiny") works and torch.tiny is this backend's device module."""


def _autoload() -> None:
    """The torch.backends entry point, called at the end of `import torch`."""
    # When `import torch_tiny` comes first, this module is still running its `import torch` below: it
    # registers tiny itself once torch is ready.
    if "_register" in globals():
        _register()


import atexit  # noqa: E402

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
    _refuse_dlpack_export()
    from torch_tiny.compile import route_inductor_graphs_on_tiny  # backend="tiny" is an entry point (setup.py)

    route_inductor_graphs_on_tiny()
    _serve_distributed()
    # before the interpreter finalizes, torch's autograd thread for tiny lets go of its last graph (csrc/module.cpp)
    atexit.register(_C._drain_autograd_device_threads)
    # and the kernels an optimizer step's flush left on the devices' queues finish first
    atexit.register(_C._wait_for_queues)


def _sync_after_optimizer_steps() -> None:
    # A training loop that never calls .item() would otherwise grow one lazy graph without bound: the
    # end of each optimizer step on tiny parameters realizes the step's work (torch's global hook). It starts the
    # kernels without waiting for them (flush): Python records the next step while they run.
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def hook(optimizer, args, kwargs):
        if any(p.device.type == "tiny" for group in optimizer.param_groups for p in group["params"]):
            _C._flush()  # the kernels run while Python records the next step; a read of their results waits

    register_optimizer_step_post_hook(hook)


def _refuse_dlpack_export() -> None:
    # DLPack shares a device pointer. A tiny storage is lazy: a graph until a sync, then a buffer that the
    # next write replaces, so there is no pointer to hand out (torch would export the fake address torch
    # sees, and the consumer's tensor would be broken). Exporting a CPU copy (dl_device=CPU) still works.
    import functools

    import torch.utils.dlpack as dlpack

    reason = (
        "tiny's storage is lazy and has no device pointer to share; export a CPU copy instead "
        "(x.cpu(), or x.__dlpack__(dl_device=(torch.utils.dlpack.DLDeviceType.kDLCPU, 0)))"
    )

    def exports_a_cpu_copy(dl_device) -> bool:
        return dl_device is not None and int(dl_device[0]) == int(dlpack.DLDeviceType.kDLCPU)

    export = dlpack.to_dlpack

    @functools.wraps(export)
    def to_dlpack(tensor):
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "tiny":
            raise RuntimeError(f"Cannot pack tensors on {tensor.device} into DLPack: {reason}")
        return export(tensor)

    dlpack.to_dlpack = to_dlpack
    torch.to_dlpack = to_dlpack

    dunder = torch.Tensor.__dlpack__

    @functools.wraps(dunder)
    def __dlpack__(self, *args, **kwargs):
        if self.device.type == "tiny" and not exports_a_cpu_copy(kwargs.get("dl_device")):
            # the DLPack protocol's error for a tensor that cannot be exported (torch's own refusals too)
            raise BufferError(f"Can't export tensors on {self.device} to DLPack: {reason}")
        return dunder(self, *args, **kwargs)

    torch.Tensor.__dlpack__ = __dlpack__

    device_of = torch.Tensor.__dlpack_device__

    # torch names the PrivateUse1 device kDLExtDev but looks for it as "privateuse1", which tiny renamed:
    # without this, torch.from_dlpack(x) fails with "Unknown device type tiny" before asking __dlpack__.
    @functools.wraps(device_of)
    def __dlpack_device__(self):
        if self.device.type == "tiny":
            return (dlpack.DLDeviceType.kDLExtDev, self.device.index or 0)
        return device_of(self)

    torch.Tensor.__dlpack_device__ = __dlpack_device__


def _serve_distributed() -> None:
    # torch.distributed's gloo backend runs collectives on tiny tensors through host copies.
    from torch_tiny import distributed

    distributed.register()


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

from torch_tiny import device as _device  # noqa: E402

# torch.tiny's functions, also importable from torch_tiny
__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
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
    "set_stream",
    "stats",
    "stream",
    "synchronize",
]
globals().update({name: getattr(_device, name) for name in __all__})
