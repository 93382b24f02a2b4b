"""Fused GEMM + communication on the symmetric heap: ``ctx.ops.<op>(out, A, B, ...)``."""

from iris.ops.all_gather_matmul import all_gather_matmul
from iris.ops.config import FusedConfig, OpsConfig
from iris.ops.matmul_all_gather import matmul_all_gather
from iris.ops.reduce_ops import matmul_all_reduce, matmul_reduce_scatter
from iris.spellings import ops_call

_OPS = {f.__name__: f for f in (matmul_all_reduce, all_gather_matmul, matmul_all_gather, matmul_reduce_scatter)}


class Ops:
    """``ctx.ops``: the fused ops bound to one context, ``ctx.ops.<op>(out, A, B, ...)``. Upstream's forms of the
    call (the context passed again, its positional ``bias, async_op, config, workspace``) are taken by
    ``ops_call`` at the binding (``iris/spellings.py``)."""

    def __init__(self, ctx):
        self._ctx = ctx
        for name, fn in _OPS.items():
            setattr(self, name, _bind(fn, ctx))

    @property
    def workspaces(self):
        """The context's workspaces (``ctx.workspaces``)."""
        return self._ctx.workspaces


def _bind(fn, ctx):
    @ops_call(ctx)
    def bound(out, a, b, *args, **kwargs):
        if ctx.num_nodes > 1:
            single_node_only(ctx, fn.__name__)
        return fn(ctx, out, a, b, *args, **kwargs)

    bound.__name__, bound.__doc__ = fn.__name__, fn.__doc__
    return bound


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
