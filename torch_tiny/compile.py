"""torch.compile on tiny.

`torch.compile(model, backend="tiny")` (found through the torch_dynamo_backends entry point): dynamo
captures the Python code as an FX graph, aot_autograd turns it into ATen graphs (the forward, and the
backward the forward's autograd would run), and `tiny` runs each graph's ATen ops on tiny. Nothing syncs
in between: the ops only record, so the graph's work (with the backward and the optimizer step after it)
is one schedule at the next sync, and a repeated call replays it from the schedule cache. tiny is the
compiler here: fusion, code generation and the replay are its own.

The default `torch.compile(model)` (Inductor) cannot run on tiny tensors: Inductor generates C++ or
Triton kernels that read device memory through pointers, and a tiny storage is lazy (a graph until a
sync, with an address nothing may dereference). So the default call hands a graph whose tensors are on
tiny to the same backend (`route_inductor_graphs_on_tiny`); every other graph still goes to Inductor.
"""

import functools
import warnings

import torch

__all__ = ["on_tiny", "route_inductor_graphs_on_tiny", "tiny"]


def _values(gm: torch.fx.GraphModule, example_inputs):
    """The graph's inputs and what dynamo or aot_autograd recorded for each node (fake tensors)."""
    yield from example_inputs
    for node in gm.graph.nodes:
        yield node.meta.get("val", node.meta.get("example_value"))


def on_tiny(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether the graph reads or makes a tensor on tiny."""
    for value in _values(gm, example_inputs):
        for leaf in torch.utils._pytree.tree_leaves(value):
            if isinstance(leaf, torch.Tensor) and leaf.device.type == "tiny":
                return True
    return False


def _run_on_tiny(gm: torch.fx.GraphModule, example_inputs):
    """aot_autograd's compiler for each graph: its ATen ops, called in order, record on tiny."""
    from functorch.compile import make_boxed_func

    return make_boxed_func(gm.forward)


@functools.cache
def _aot_backend():
    from torch._dynamo.backends.common import aot_autograd

    # No decompositions: the graph keeps the ATen ops eager autograd calls (convolution_backward,
    # native_batch_norm_backward, ...), which tiny implements whole. The default partition saves what the
    # backward reads; tiny's scheduler decides what to realize, as for an eager step.
    return aot_autograd(fw_compiler=_run_on_tiny, bw_compiler=_run_on_tiny)


def tiny(gm: torch.fx.GraphModule, example_inputs, *, mode=None, options=None):
    """The "tiny" dynamo backend. A graph without tiny tensors runs its ATen ops where its tensors are."""
    if mode is not None or options:
        given = ", ".join(
            ([f"mode={mode!r}"] if mode is not None else []) + ([f"options={sorted(options)}"] if options else [])
        )
        raise ValueError(
            f"torch.compile(backend='tiny') takes no mode or options (got {given}): tiny's compiler has no "
            "tuning modes; each graph is scheduled once and replayed from the schedule cache"
        )
    return _aot_backend()(gm, example_inputs)


def route_inductor_graphs_on_tiny() -> None:
    """Makes the default torch.compile (Inductor) hand graphs of tiny tensors to the tiny backend.

    Inductor has a registration for a new device's kernel generator (register_backend_for_device), but its
    kernels need memory they can address, and its only way to run a graph as ATen calls instead
    (config.fallback_by_default, "lite mode") is a process-wide setting. So the choice is made per graph
    where torch.compile calls Inductor: `_TorchCompileInductorWrapper.__call__`, loaded with torch
    (importing dynamo or Inductor at `import torch` would cost seconds)."""
    wrapper = torch._TorchCompileInductorWrapper
    inductor = wrapper.__call__
    if getattr(inductor, "_tiny_routed", False):
        return

    @functools.wraps(inductor)
    def __call__(self, model_, inputs_, **kwargs):
        if not on_tiny(model_, inputs_):
            return inductor(self, model_, inputs_, **kwargs)
        if self.config:
            warnings.warn(
                f"torch.compile: Inductor's settings {sorted(self.config)} (from mode= or options=) do not apply "
                "to graphs on tiny, which tiny compiles itself",
                stacklevel=2,
            )
        return tiny(model_, inputs_)

    __call__._tiny_routed = True
    wrapper.__call__ = __call__
