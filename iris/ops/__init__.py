"""Fused GEMM + communication on the symmetric heap: ``ctx.ops.<op>(out, A, B, ...)``.

Each fused op's module declares its record (``iris/ops/record.py``); importing the modules here files them, and
``Ops`` has a method for every record."""

from iris.ccl.record import as_method, method_class
from iris.host.distributed import Context
from iris.ops import record
from iris.ops.all_gather_matmul import all_gather_matmul
from iris.ops.config import FusedConfig, OpsConfig
from iris.ops.matmul_all_gather import matmul_all_gather
from iris.ops.reduce_ops import matmul_all_reduce, matmul_reduce_scatter
from iris.spellings import ops_arguments


class _FusedOps:
    """``ctx.ops``: the fused ops bound to one context, ``ctx.ops.<op>(out, A, B, ...)`` (``help(ctx.ops)`` lists
    them). Upstream's forms of the call (the context passed again, its positional ``bias, async_op, config,
    workspace``) are taken too (``ops_arguments``, ``iris/spellings.py``)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    @property
    def workspaces(self):
        """The context's workspaces (``ctx.workspaces``)."""
        return self._ctx.workspaces


def _method(name, op):
    """``ctx.ops.<name>``: ``op.run`` with the context, upstream's forms of the call taken, within one node."""
    run = op.run

    def method(self, out, a, b, *args, **kwargs):
        ctx = self._ctx
        if ctx.num_nodes > 1:
            single_node_only(ctx, name)
        args, kwargs = ops_arguments(ctx, args, kwargs)
        return run(ctx, out, a, b, *args, **kwargs)

    return as_method(method, name, run)


Ops = method_class("Ops", _FusedOps, record.records(), _method)


def single_node_only(ctx, name):
    """The fused ops overlap their GEMM with loads and stores into every peer's heap, which exist within a node
    only; across nodes, a GEMM followed by ``ctx.ccl``'s hierarchical collective is the correct path."""
    raise NotImplementedError(
        f"ops.{name}: single node only; this job has {ctx.num_nodes} nodes ({ctx.local_world_size} ranks each; rank "
        f"{ctx.cur_rank} is on node {ctx.node}) and the fused ops read and write every peer's heap, which is mapped "
        "within a node only; across nodes, run the GEMM with torch and the collective with ctx.ccl (e.g. "
        "torch.matmul, then ctx.ccl.all_reduce), which runs hierarchically")


__all__ = ["Ops", "OpsConfig", "FusedConfig", "matmul_all_reduce", "all_gather_matmul", "matmul_all_gather",
           "matmul_reduce_scatter"]
