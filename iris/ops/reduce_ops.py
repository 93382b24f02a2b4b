"""matmul_all_reduce and matmul_reduce_scatter: each rank holds a K-slice, the partial products are summed.

Both run bulk-synchronous today: the shared GEMM writes this rank's partial product into a heap workspace,
then the Triton collective reduces it (one-shot or two-shot all_reduce, pull reduce_scatter), all on the
stream. They share this file because they differ only in the collective.

    GEMM: partial = A_r @ B_r  ->  all_reduce(out, partial)      or      reduce_scatter(out, partial)
"""

from iris.ops import common
from iris.ops.gemm import matmul


def _partial(ctx, caller, out, a, b, config):
    config = common.resolve_config(config, caller)
    common.check_operands(caller, out, a, b)
    if config.variant == "fused":
        raise ValueError(f"{caller}: no fused kernel yet; use variant='bulk' or 'auto'")
    partial = ctx.ops.workspaces.get(caller, (a.shape[0], b.shape[1]), a.dtype)
    return matmul(partial, a, b, config)


def matmul_all_reduce(ctx, out, a, b, bias=None, group=None, config=None):
    """``out`` ([M, N], anywhere) = ``sum over r of A_r @ B_r (+ bias)``; ``A`` [M, K / W] and ``B`` [K / W, N] are
    this rank's slices. Collective; stream-ordered. fp16/bf16 partials are summed in fp32 by the collective.

        ref = sum(A_r @ B_r for r in group) + bias
    """
    caller = "ops.matmul_all_reduce"
    common.expect_shape(caller, "out", out, (a.shape[0], b.shape[1]), "[A rows, B columns]")
    partial = _partial(ctx, caller, out, a, b, config)
    ctx.ccl.all_reduce(out, partial, group=group)
    return common.add_bias(out, bias, caller)


def matmul_reduce_scatter(ctx, out, a, b, bias=None, group=None, config=None):
    """``out`` ([M / W, N], anywhere) = rows ``group_rank`` of ``sum over r of A_r @ B_r (+ bias)``. Collective;
    stream-ordered.

        ref = sum(A_r @ B_r for r in group).chunk(W)[group_rank] + bias
    """
    caller = "ops.matmul_reduce_scatter"
    size = ctx.group_sync(group, caller).size
    m_local = common.divisible(caller, "M (rows of A)", a.shape[0], size)
    common.expect_shape(caller, "out", out, (m_local, b.shape[1]), f"[A rows / group size {size}, B columns]")
    partial = _partial(ctx, caller, out, a, b, config)
    ctx.ccl.reduce_scatter(out, partial, group=group)
    return common.add_bias(out, bias, caller)
