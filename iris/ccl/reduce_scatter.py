"""reduce_scatter: rank r ends with slice r of the elementwise reduction (torch's reduce_scatter_tensor).

Pull: each rank reads its slice from every member's input and reduces it.

    barrier (inputs ready)  ->  out = op over ranks of inp[slice me]  ->  barrier (inputs free)
"""

import triton
import triton.language as tl

from iris.ccl import common
from iris.ccl.device import program_row, reduce_from_group
from iris.device.sync import group_barrier


@triton.jit
def _reduce_scatter_kernel(out, inp, n, flags, heap_bases, members, rank, group_index, world_size,
                           GROUP_SIZE: tl.constexpr, OP: tl.constexpr, ACC_FP32: tl.constexpr, HINT: tl.constexpr,
                           BLOCK: tl.constexpr):
    row = program_row(flags, world_size)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every rank's input is ready
    mine = inp + group_index * n
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = reduce_from_group(mine, offs, mask, heap_bases, members, rank, group_index, GROUP_SIZE, OP, ACC_FP32,
                                HINT)  # [BLOCK]
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # no rank still reads our input


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
    hint = common.vector_hint(out, inp) if (n * inp.element_size()) % 16 == 0 else None
    _reduce_scatter_kernel[p.grid](out_flat, inp_flat, n, *p.sync_args(ctx), GROUP_SIZE=p.sync.size, OP=op,
                                   ACC_FP32=common.accumulate_in_fp32(inp.dtype), HINT=hint, BLOCK=p.block,
                                   num_warps=p.config.num_warps)
    return common.done(ctx, async_op)
