"""reduce_scatter: rank r ends with slice r of the elementwise reduction (torch's reduce_scatter_tensor).

Pull: each rank reads its slice from every member's input and reduces it.

    barrier (inputs ready)  ->  out = op over ranks of inp[slice me]  ->  barrier (inputs free)

which is the one-shot all_reduce kernel run on slice ``group_rank`` of every input (the slice sits at the
same heap offset on every rank, so the peers' slices are found from ours).
"""

from iris.ccl import common
from iris.ccl.all_reduce import _all_reduce_one_shot_kernel


def reduce_scatter(ctx, out, inp, op="sum", group=None, async_op=False, config=None):
    """``out`` (``[n, ...]``, anywhere) = slice ``group_rank`` along dim 0 of ``op`` over every rank's ``inp``
    (``[group_size * n, ...]``, on the heap). fp16/bf16 accumulate in fp32.

    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        ref = reduce(op, [inp_r for r in group]).chunk(group_size)[group_rank]
    """
    caller = "ccl.reduce_scatter"
    common.precheck(caller, group, config, (out, inp), str(op))
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    op = common.reduce_op(op, inp.dtype, caller)
    ctx.check_symmetric(inp, caller, "inp")
    n = common.split_rows(inp, ctx.group_sync(group, caller).size, caller, "inp")
    p = common.plan(ctx, caller, n, group, config)
    common.expect_numel(out, n, caller, "out", f"inp.numel() / group size {p.sync.size}")
    mine = inp_flat[p.sync.index * n:(p.sync.index + 1) * n]
    hint = common.vector_hint(out, mine) if (n * inp.element_size()) % 16 == 0 else None
    _all_reduce_one_shot_kernel[p.grid](out_flat, mine, n, *p.sync_args(ctx), GROUP_SIZE=p.sync.size, OP=op,
                                        ACC_FP32=common.accumulate_in_fp32(inp.dtype), HINT=hint, BLOCK=p.block,
                                        num_warps=p.warps)
    return common.done(ctx, async_op)
