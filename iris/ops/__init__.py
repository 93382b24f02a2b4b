"""Fused GEMM + communication on the symmetric heap: ``ctx.ops.<op>(out, A, B, ...)``."""

from iris.ops.all_gather_matmul import all_gather_matmul
from iris.ops.config import FusedConfig, OpsConfig
from iris.ops.matmul_all_gather import matmul_all_gather
from iris.ops.reduce_ops import matmul_all_reduce, matmul_reduce_scatter

_OPS = {f.__name__: f for f in (matmul_all_reduce, all_gather_matmul, matmul_all_gather, matmul_reduce_scatter)}


class Ops:
    """``ctx.ops``: the fused ops bound to one context. Calls written for the reference Iris that pass the
    context again (``ctx.ops.matmul_all_reduce(out, A, B, ctx)``) work too."""

    def __init__(self, ctx):
        self._ctx = ctx
        for name, fn in _OPS.items():
            setattr(self, name, _bind(fn, ctx))


    @property
    def workspaces(self):
        """The context's workspaces (``ctx.workspaces``)."""
        return self._ctx.workspaces


def _bind(fn, ctx):
    def bound(out, a, b, *args, **kwargs):
        if args and args[0] is ctx:  # the reference API passes the context once more
            args = args[1:]
        if ctx.num_nodes > 1:
            single_node_only(ctx, fn.__name__)
        # Upstream's signature is (out, A, B, bias, async_op, config, workspace): its async_op (ours are stream-
        # ordered and end with an in-kernel barrier either way) and workspace (ours live in ctx.workspaces) have
        # nothing to select here, and a positional async_op must not land in ``group``.
        kwargs.pop("async_op", None)
        kwargs.pop("workspace", None)
        if len(args) >= 2 and isinstance(args[1], bool):  # upstream's positional (bias, async_op, config, ...)
            if len(args) >= 3:
                kwargs["config"] = args[2]
            args = args[:1]
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


__all__ = ["Ops", "OpsConfig", "FusedConfig", "matmul_all_reduce", "all_gather_matmul", "matmul_all_gather", "matmul_reduce_scatter"]
