"""torch.tiny: the device module of the tiny backend (registered by torch_tiny)."""

import torch

from torch_tiny import _C

__all__ = [
    "current_device",
    "default_generators",
    "device",
    "device_count",
    "get_device_name",
    "get_rng_state",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "reset_stats",
    "seed",
    "set_device",
    "set_rng_state",
    "stats",
    "synchronize",
]


def is_available() -> bool:
    return _C.device_count() > 0


def is_initialized() -> bool:
    return True


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
