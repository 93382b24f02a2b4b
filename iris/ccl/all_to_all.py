"""all_to_all: slice j of rank i's input becomes slice i of rank j's output (torch's all_to_all_single with
equal splits).

Push:  barrier (every out is free)  ->  put inp[slice q] into out[slice me] of rank q  ->  barrier
"""

import triton
import triton.language as tl

from iris.ccl import common
from iris.ccl.device import first_block, program_row, tail_mask
from iris.device.rma import store
from iris.device.sync import group_barrier


@triton.jit
def _all_to_all_kernel(out, inp, n, sync, GROUP_SIZE: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size = sync  # GroupSync.args
    row = program_row(flags, world_size)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE, RELAXED=True)  # no rank still uses its out
    n64 = tl.cast(n, tl.int64)  # slice offsets pass 2**31 elements in large calls
    my_slice = out + group_index * n64
    for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
        offs = tl.arange(0, BLOCK)
        mask = tail_mask(start, n, BLOCK)
        # peers first, our own slice last; each slice's load is issued before the previous slice's store, so
        # a store never waits out a load's latency (the compiler cannot reorder them: out may alias inp)
        dest = (group_index + 1) % GROUP_SIZE
        x = tl.load(inp + dest * n64 + start + offs, mask=mask)  # [BLOCK]
        for i in tl.static_range(1, GROUP_SIZE + 1):
            peer = tl.load(members + dest)
            if i < GROUP_SIZE:
                following = (group_index + i + 1) % GROUP_SIZE
                x_next = tl.load(inp + following * n64 + start + offs, mask=mask)
            store(my_slice + start + offs, x, rank, peer, heap_bases, mask=mask, hint=HINT)
            if i < GROUP_SIZE:
                dest, x = following, x_next
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every rank's slice has landed in our out


def all_to_all(ctx, out, inp, group=None, async_op=False, config=None):
    """``out`` and ``inp`` are ``[group_size * n, ...]``; ``out`` on the heap. Slice q of ``inp`` goes to rank
    q, arriving as slice ``group_rank`` of its ``out``. Not in place.

    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        ref_q = torch.cat([inp_r.chunk(group_size)[q] for r in group])
    """
    caller = "ccl.all_to_all"
    common.precheck(caller, group, config, (out, inp))
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    common.expect_numel(out, inp.numel(), caller, "out", "inp.numel()")
    ctx.check_symmetric(out, caller, "out")
    if common.same_start(out, inp):
        raise ValueError(f"{caller}: out and inp are the same tensor; all_to_all needs a separate out")
    n = common.split_rows(inp, ctx.group_sync(group, caller).size, caller, "inp")
    p = common.plan(ctx, caller, n, group, config)
    hint = common.vector_hint(out, inp) if (n * inp.element_size()) % 16 == 0 else None
    if p.config.use_gluon:
        from iris.ccl.gluon.all_to_all import launch

        launch(ctx, out_flat, inp_flat, n, p, hint)
        return common.done(ctx, async_op)
    _all_to_all_kernel[p.grid](out_flat, inp_flat, n, p.sync.args(ctx), GROUP_SIZE=p.sync.size, HINT=hint,
                               BLOCK=p.block, num_warps=p.warps)
    return common.done(ctx, async_op)
