"""Collectives written as Triton kernels on the symmetric heap: ``ctx.ccl.<collective>(out, inp, ...)``.

Each collective's module declares its record (``iris/ccl/record.py``); importing the modules here files them, and
``CCL`` binds every record's names to a context."""

import inspect

import torch
import torch.distributed as dist

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
from iris.ccl.moe.routing import ExptAssignment
from iris.ccl.rooted import broadcast, gather, recv, reduce, scatter, send
from iris.host.distributed import Context


class _Collectives:
    """``ctx.ccl``: the collectives bound to one context. Each method is the function of the same name in
    ``iris.ccl`` with ``ctx`` filled in; see those for semantics (``help(ctx.ccl)`` lists them all). On several
    nodes a call over the world runs the hierarchical algorithm of the same name
    (``iris/ccl/multinode/hierarchical.py``), a call within one node the kernel."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def barrier(self, group: dist.ProcessGroup | None = None) -> None:
        """Device-side barrier over ``group`` (``ctx.device_barrier``): stream-ordered, graph-capturable. Work queued
        before it on each member's stream is visible to work queued after it on every member.

        Raises ``ValueError`` when this rank is not in ``group``; ``TypeError`` when ``group`` is not a process group
        or None; ``iris.PeerError`` once a peer has failed.

        Example::

            x = ctx.full((4,), float(rank))  # written before the barrier ...
            ctx.ccl.barrier()  # ... so every rank's kernels queued from here on see every rank's x
        """
        self._ctx.device_barrier(group)

    def moe_dispatcher(self, hidden_dim: int, num_experts: int, topk: int, max_tokens: int,
                       group: dist.ProcessGroup | None = None, config: MoEDispatchConfig | None = None,
                       expt_assignment: ExptAssignment | None = None,
                       dtype: torch.dtype | None = None) -> MoEDispatcher:
        """An ``iris.ccl.MoEDispatcher`` on this context (see it for semantics). Collective: allocates on the heap.
        ``dtype``: the rows' (default bfloat16).

        Raises ``ValueError`` for sizes that are not positive ints (``max_tokens`` may be 0), a dtype the dispatcher
        does not move, ``num_experts`` the shards do not divide (without ``expt_assignment``) or an
        ``expt_assignment`` of another shape; ``TypeError`` for a ``config`` that is not a ``MoEDispatchConfig``.

        Example::

            d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=4 * world_size, topk=2, max_tokens=8)
            assert d.capacity == world_size * 8 * 2  # receive rows: every token of every shard, topk times
            assert d.dtype == torch.bfloat16 and d.num_experts == 4 * world_size
        """
        return MoEDispatcher(self._ctx, hidden_dim, num_experts, topk, max_tokens, group=group, config=config,
                             expt_assignment=expt_assignment, dtype=torch.bfloat16 if dtype is None else dtype)


def _method(name, collective):
    """``ctx.ccl.<name>``: ``collective.run`` with the context, or across nodes its hierarchical form."""
    run = collective.run
    signature = inspect.signature(run)
    takes_group = "group" in signature.parameters

    def method(self, *args, **kwargs):
        ctx = self._ctx
        if ctx.num_nodes > 1 and (not takes_group or ctx.spans_nodes(
                signature.bind(ctx, *args, **kwargs).arguments.get("group"), run.__name__)):
            return getattr(hierarchical, collective.hierarchical)(ctx, *args, **kwargs)
        return run(ctx, *args, **kwargs)

    return record.as_method(method, name, run)


CCL = record.method_class("CCL", _Collectives, record.records(), _method)


__all__ = ["CCL", "CollectiveConfig", "Config", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
           "reduce", "scatter", "gather", "send", "recv", "all_reduce_rmsnorm", "all_to_all_single",
           "reduce_scatter_tensor", "reduce_scatter_v", "MoEDispatcher", "MoEDispatchConfig", "DispatchHandle"]
