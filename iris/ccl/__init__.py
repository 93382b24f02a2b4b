"""Collectives written as Triton kernels on the symmetric heap: ``ctx.ccl.<collective>(out, inp, ...)``.

Each collective's module declares its record (``iris/ccl/record.py``); importing the modules here files them, and
``CCL`` binds every record's names to a context."""

import inspect

from iris.ccl import record
from iris.ccl.multinode import hierarchical
from iris.ccl.all_gather import all_gather
from iris.ccl.all_reduce import all_reduce
from iris.ccl.all_reduce_rmsnorm import all_reduce_rmsnorm
from iris.ccl.all_to_all import all_to_all, all_to_all_single
from iris.ccl.config import CollectiveConfig, Config
from iris.ccl.moe.dispatch import DispatchHandle, MoEDispatchConfig, MoEDispatcher
from iris.ccl.reduce_scatter import reduce_scatter, reduce_scatter_tensor
from iris.ccl.reduce_scatter_v import reduce_scatter_v
from iris.ccl.rooted import broadcast, gather, recv, reduce, scatter, send


class CCL:
    """``ctx.ccl``: the collectives bound to one context. Each method is the function of the same name in
    ``iris.ccl`` with ``ctx`` filled in; see those for semantics. On several nodes a call over the world runs the
    hierarchical algorithm of the same name (``iris/ccl/multinode/hierarchical.py``), a call within one node the
    kernel."""

    def __init__(self, ctx):
        self._ctx = ctx
        for name, collective in record.REGISTRY.items():
            across = getattr(hierarchical, collective.hierarchical) if ctx.num_nodes > 1 else None
            setattr(self, name, _bind(collective.run, ctx, across, name))

    def barrier(self, group=None):
        """Device-side barrier over ``group`` (``ctx.device_barrier``): stream-ordered, graph-capturable."""
        self._ctx.device_barrier(group)

    def moe_dispatcher(self, hidden_dim, num_experts, topk, max_tokens, group=None, config=None,
                       expt_assignment=None, dtype=None):
        """An ``iris.ccl.MoEDispatcher`` on this context (see it for semantics). Collective: allocates on the heap."""
        import torch

        return MoEDispatcher(self._ctx, hidden_dim, num_experts, topk, max_tokens, group=group, config=config,
                             expt_assignment=expt_assignment, dtype=torch.bfloat16 if dtype is None else dtype)


def _bind(fn, ctx, across, name):
    signature = inspect.signature(fn)

    def bound(*args, **kwargs):
        if across is not None and ("group" not in signature.parameters or ctx.spans_nodes(
                signature.bind(ctx, *args, **kwargs).arguments.get("group"), fn.__name__)):
            return across(ctx, *args, **kwargs)
        return fn(ctx, *args, **kwargs)

    bound.__name__, bound.__doc__ = name, fn.__doc__
    return bound


__all__ = ["CCL", "CollectiveConfig", "Config", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
           "reduce", "scatter", "gather", "send", "recv", "all_reduce_rmsnorm", "all_to_all_single",
           "reduce_scatter_tensor", "reduce_scatter_v", "MoEDispatcher", "MoEDispatchConfig", "DispatchHandle"]
