"""torch.distributed on tiny tensors: gloo runs each collective on host copies.

`dist.init_process_group("gloo")` (gloo's devices then include tiny) and `"cpu:gloo,tiny:gloo"` build one
gloo backend and register it for each device the config names; for the tiny slot, `register()` makes
torch register a `HostCopyBackend` around it instead. torch's c10d ops send a call whose tensors are on
tiny there: it copies the tiny tensors the collective reads to the host (one copy per tensor, a sync
point), runs gloo's own collective on the host tensors (so gloo checks the arguments and raises its own
errors), and when gloo's work completes, copies the host results back into the caller's tiny tensors in
place (`copy_`: views and non-contiguous tensors get their elements written). The Work it returns is
done once the results are back: `wait()` and `get_future()` (whose value names the caller's tiny
tensors, as DistributedDataParallel's reducer expects) behave as gloo's do."""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, ProcessGroup, Work

# The Backend methods that carry tensors, with the role of each tensor argument in order ("in": only
# read, "out": only written, "inout": both); the arguments after them (options, ranks, tags, split
# sizes) pass through. A tensor argument is a tensor, a list of tensors or a list of lists.
_TENSOR_ROLES = {
    "broadcast": ("inout",),
    "allreduce": ("inout",),
    "allreduce_coalesced": ("inout",),
    "reduce": ("inout",),
    "allgather": ("out", "in"),
    "allgather_coalesced": ("out", "in"),
    "all_gather_single": ("out", "in"),
    "all_gather_single_coalesced": ("out", "in"),
    "gather": ("out", "in"),
    "scatter": ("out", "in"),
    "reduce_scatter": ("out", "in"),
    "reduce_scatter_single": ("out", "in"),
    "reduce_scatter_single_coalesced": ("out", "in"),
    "all_to_all_single": ("out", "in"),
    "alltoall": ("out", "in"),
    "send": ("in",),
    "recv": ("out",),
    "recv_anysource": ("out",),
    "barrier": (),
}

# What the wrapped backend answers for itself (name, sequence numbers, shutting down).
_FORWARDED = ("getBackendName", "_get_sequence_number_for_group", "_set_sequence_number_for_group", "abort", "shutdown")


def _on_tiny(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "tiny"


def _to_host(arg, role: str, written: list):
    """The host stand-in of one tensor argument; appends (tiny tensor, host tensor) to `written` for each
    tensor the collective writes."""
    if isinstance(arg, list):
        return [_to_host(a, role, written) for a in arg]
    if not _on_tiny(arg):
        return arg
    # A tensor the collective only writes needs no copy of its old values.
    host = torch.empty_like(arg, device="cpu") if role == "out" else arg.cpu()
    if role != "in":
        written.append((arg, host))
    return host


def _with_tiny_tensors(value, tiny_of: dict):
    """gloo's future value (its host tensors) with each host stand-in replaced by its tiny tensor."""
    if isinstance(value, list):
        return [_with_tiny_tensors(v, tiny_of) for v in value]
    return tiny_of.get(id(value), value) if isinstance(value, torch.Tensor) else value


class HostCopyBackend(Backend):
    """A c10d backend for tiny tensors that runs each collective of a host backend (gloo) on host copies."""

    def __init__(self, host_backend):
        super().__init__(host_backend.rank(), host_backend.size())
        self._host = host_backend

    @property
    def options(self):
        return self._host.options

    def _collective(self, name: str, roles: tuple, args: tuple):
        written = []
        tensor_args, other_args = args[: len(roles)], list(args[len(roles) :])
        host_args = [_to_host(a, role, written) for a, role in zip(tensor_args, roles, strict=True)] + other_args
        work = getattr(self._host, name)(*host_args)
        if not written:
            return work
        tiny_of = {id(host): tiny for tiny, host in written}

        def copy_back():
            for tiny, host in written:
                tiny.copy_(host)

        try:
            done = work.get_future()
        except RuntimeError:  # gloo's send and recv works have no future: wait() copies back
            return _CopyBackWork(work, None, copy_back)

        def then_copy_back(done):
            # A failed collective can have written its host tensors (gloo's AVG of ints fails after the sum):
            # they come back as they are, as a CPU tensor would keep them, before the error is raised.
            copy_back()
            return _with_tiny_tensors(done.value(), tiny_of)

        return _CopyBackWork(work, done.then(then_copy_back), copy_back)


class _CopyBackWork(Work):
    """The Work of a collective on tiny tensors: done when the host work is and its results are back in
    the tiny tensors. With a future (`copied`), the copy back runs when the host work completes (in the
    host backend's thread: tiny may be used from any thread); without one, in wait()."""

    def __init__(self, host_work, copied, copy_back):
        super().__init__()
        self._host_work = host_work
        self._copied = copied
        self._copy_back = copy_back

    def wait(self, timeout=timedelta(0)):
        self._host_work.wait(timeout)  # raises the host backend's timeout or error
        if self._copied is not None:
            self._copied.wait()
        elif self._copy_back is not None:
            self._copy_back()
            self._copy_back = None
        return True

    def get_future(self):
        if self._copied is None:
            return self._host_work.get_future()  # raises the host work's own error
        return self._copied


def _add_methods() -> None:
    for name, roles in _TENSOR_ROLES.items():

        def collective(self, *args, name=name, roles=roles):
            return self._collective(name, roles, args)

        collective.__name__ = name
        setattr(HostCopyBackend, name, collective)
    for name in _FORWARDED:

        def forwarded(self, *args, name=name):
            return getattr(self._host, "name" if name == "getBackendName" else name)(*args)

        forwarded.__name__ = name
        setattr(HostCopyBackend, name, forwarded)


_add_methods()


def register() -> None:
    """Lets gloo serve tiny tensors: "gloo" alone covers tiny (as it covers cpu and cuda), and the backend
    torch registers for the tiny device of a process group is gloo's, wrapped in a HostCopyBackend."""
    if not dist.is_available() or not dist.is_gloo_available():
        return
    gloo_devices = dist.Backend.backend_capability[dist.Backend.GLOO]
    if "tiny" not in gloo_devices:
        gloo_devices.append("tiny")
    # init_process_group() without a backend picks the accelerator's (tiny's) default backend
    dist.Backend.default_device_backend_map.setdefault("tiny", dist.Backend.GLOO)

    register_backend = ProcessGroup._register_backend

    host_backends = (dist.ProcessGroupGloo, dist.distributed_c10d._ProcessGroupWrapper)

    def _register_backend(pg, device, backend_type, backend):
        register_backend(pg, device, backend_type, backend)
        if device.type == "tiny" and isinstance(backend, host_backends):
            # A process group keeps one backend per backend type, and its default type (GLOO) must have
            # one, also when only tiny names gloo ("tiny:gloo"): gloo stays registered as GLOO, and the
            # tiny slot gets the wrapper under another type (as GLOO, it would get gloo back).
            register_backend(pg, device, ProcessGroup.BackendType.CUSTOM, HostCopyBackend(backend))

    ProcessGroup._register_backend = _register_backend
