"""Collectives written as Triton kernels on the symmetric heap: ``ctx.ccl.<collective>(out, inp, ...)``."""

from iris.ccl.all_gather import all_gather
from iris.ccl.all_reduce import all_reduce
from iris.ccl.all_reduce_rmsnorm import all_reduce_rmsnorm
from iris.ccl.all_to_all import all_to_all
from iris.ccl import moe_utils
from iris.ccl.config import CollectiveConfig
from iris.ccl.moe_dispatch import DispatchHandle, MoEDispatchConfig, MoEDispatcher
from iris.ccl.reduce_scatter import reduce_scatter
from iris.ccl.rooted import broadcast, gather, recv, reduce, scatter, send

_COLLECTIVES = {f.__name__: f for f in (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce,
                                        scatter, gather, send, recv)}
_COLLECTIVES["all_reduce_rmsnorm"] = all_reduce_rmsnorm


class CCL:
    """``ctx.ccl``: the collectives bound to one context. Each method is the function of the same name in
    ``iris.ccl`` with ``ctx`` filled in; see those for semantics."""

    def __init__(self, ctx):
        self._ctx = ctx
        for name, fn in _COLLECTIVES.items():
            setattr(self, name, _bind(fn, ctx))

    def barrier(self, group=None):
        """Device-side barrier over ``group`` (``ctx.device_barrier``): stream-ordered, graph-capturable."""
        self._ctx.device_barrier(group)

    def moe_dispatcher(self, hidden_dim, num_experts, topk, max_tokens, group=None, config=None,
                       expt_assignment=None, dtype=None):
        """An ``iris.ccl.MoEDispatcher`` on this context (see it for semantics). Collective: allocates on the heap."""
        import torch

        return MoEDispatcher(self._ctx, hidden_dim, num_experts, topk, max_tokens, group=group, config=config,
                             expt_assignment=expt_assignment, dtype=torch.bfloat16 if dtype is None else dtype)


def _bind(fn, ctx):
    def bound(*args, **kwargs):
        return fn(ctx, *args, **kwargs)

    bound.__name__, bound.__doc__ = fn.__name__, fn.__doc__
    return bound


__all__ = ["CCL", "CollectiveConfig", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
           "reduce", "scatter", "gather", "send", "recv", "all_reduce_rmsnorm",
           "MoEDispatcher", "MoEDispatchConfig", "DispatchHandle", "moe_utils"]
