"""torch.tiny: the device module of the tiny backend (registered by torch_tiny)."""

import collections

import torch

from torch_tiny import _C

__all__ = [
    "current_device",
    "default_generators",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "reset_stats",
    "seed",
    "set_device",
    "set_rng_state",
    "stats",
    "synchronize",
]


def is_available() -> bool:
    return _C.device_count() > 0


# tiny needs no lazy initialization. torch.utils.checkpoint reads this flag (as torch.cuda's) to decide
# whether to save the device's random-number state and restore it for the recomputed forward.
_initialized = True


def is_initialized() -> bool:
    return _initialized


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    pass


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def _device_index(device) -> int:
    """The index of a tiny device given as an int, "tiny:N", torch.device or None (current)."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tiny":
            raise ValueError(f"expected a tiny device, got {device}")
        return current_device() if device.index is None else device.index
    return int(device)


def get_device_name(device=None) -> str:
    """Which backend and device runs `tiny:N`, as torch.cuda.get_device_name says: "tiny CPU (clang)",
    "tiny CL: <OpenCL device> (<platform>)". TINY_DEVICE chooses the backend."""
    return "tiny " + _C.device_name(_device_index(device))


class _TinyDeviceProperties:
    """What torch.tiny.get_device_properties returns: the fields of torch.cuda's that a tiny device has."""

    def __init__(self, name: str, total_memory: int, multi_processor_count: int) -> None:
        self.name = name
        self.total_memory = total_memory
        self.multi_processor_count = multi_processor_count

    def __repr__(self) -> str:
        return (
            f"_TinyDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def get_device_properties(device=None) -> _TinyDeviceProperties:
    """name (as get_device_name), total_memory in bytes (the machine's RAM for the CPU device, the device's
    global memory on CL) and multi_processor_count (the threads kernels run on for the CPU device, compute
    units on CL)."""
    _, total_memory, units = _C.device_properties(_device_index(device))
    return _TinyDeviceProperties(get_device_name(device), total_memory, units)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """tiny computes bfloat16 on every device (in float32, rounding each result to bfloat16)."""
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes torch.autocast("tiny", dtype=...) accepts. Under autocast, tiny casts the inputs of the ops
    in torch's lists as CUDA does: matmuls, linear and convolutions to this dtype, softmax, norms, sums and
    losses to float32 (aten_ops/amp.cpp)."""
    return [torch.float16, torch.bfloat16]


def set_device(device) -> None:
    _C.set_device(_device_index(device))


class device:  # noqa: N801  (torch's device modules name it so: torch.cuda.device)
    """Context manager that makes `idx` the current tiny device (torch.load uses it)."""

    def __init__(self, idx) -> None:
        self.idx = _device_index(idx)
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = current_device()
        set_device(self.idx)

    def __exit__(self, *exc) -> None:
        set_device(self.prev)


def synchronize(device=None) -> None:
    """Runs every pending computation (on every tiny device: one realize)."""
    _C.synchronize()


def stats() -> dict:
    """Counters since the last reset_stats(): kernels, compiles, cache_hits, schedule_hits, syncs,
    fallbacks, fallback_ops, peak_bytes (the most device memory live at once); and live_buffers,
    live_bytes, loaded_programs (compiled kernels loaded now)."""
    return _C.stats()


def reset_stats() -> None:
    _C.reset_stats()


# One torch.Generator per device, sharing the C++ default generators.
default_generators: tuple = tuple(_C._default_generator(i) for i in range(_C.device_count()))


def manual_seed(seed: int) -> None:
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for gen in default_generators:
        gen.manual_seed(int(seed))


def seed() -> int:
    return default_generators[current_device()].seed()


def initial_seed() -> int:
    return default_generators[current_device()].initial_seed()


def get_rng_state(device="tiny") -> torch.Tensor:
    return default_generators[_device_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device="tiny") -> None:
    default_generators[_device_index(device)].set_state(new_state)


# Memory, as torch.cuda reports it, from the device's caching allocator (the same counters
# torch.accelerator.memory_* read). A tiny tensor takes device memory when a sync realizes it: these
# functions realize pending work first (a sync point), so the numbers count every live tensor.


def memory_stats_as_nested_dict(device=None) -> dict:
    return _C.memory_stats(_device_index(device))


def memory_stats(device=None) -> collections.OrderedDict:
    """The allocator's statistics, flattened and sorted as torch.cuda.memory_stats:
    "allocated_bytes.all.current", "reserved_bytes.large_pool.peak", "num_device_alloc", ...
    allocated: blocks holding live tensors (and a sync's intermediates while it runs); reserved: those
    plus the freed blocks the allocator keeps for reuse (empty_cache returns them to the system)."""
    flat = []

    def flatten(prefix, value):
        if isinstance(value, dict):
            for key, nested in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, nested)
        else:
            flat.append((prefix, value))

    flatten("", memory_stats_as_nested_dict(device))
    flat.sort()
    return collections.OrderedDict(flat)


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    _C.reset_peak_memory_stats(_device_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    _C.reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:
    """Returns the freed blocks every tiny device's allocator keeps for reuse to the system."""
    _C.empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device's memory: the machine's available and total RAM for the CPU
    device. An OpenCL device cannot tell what is free: NotImplementedError."""
    return tuple(_C.memory_info(_device_index(device)))
