"""all_to_all in Gluon: the Triton kernel's push (``iris/ccl/all_to_all.py``) with its register layout spelled out:
``BLOCK / (32 * num_warps)`` contiguous elements per thread (upstream's kernel hard-codes a 64-lane layout, which
no NVIDIA GPU runs).

    barrier  ->  for each block: inp[slice q] -> out[slice me] of rank q, peers first  ->  barrier
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.ccl.device import program_row
from iris.ccl.gluon.all_gather import WARP_SIZE, check_block
from iris.device.rma import store
from iris.device.sync import group_barrier


@gluon.jit
def _all_to_all_gluon_kernel(out, inp, n, sync, GROUP_SIZE: gl.constexpr, HINT: gl.constexpr, BLOCK: gl.constexpr,
                             THREADS_PER_WARP: gl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size = sync  # GroupSync.args
    row = program_row(flags, world_size)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # no rank still uses its out
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (THREADS_PER_WARP * gl.num_warps())], [THREADS_PER_WARP],
                                            [gl.num_warps()], [0])
    n64 = n.to(gl.int64)  # slice offsets pass 2**31 elements in large calls
    my_slice = out + group_index * n64
    for start in range(gl.program_id(0).to(gl.int64) * BLOCK, n, gl.num_programs(0) * BLOCK):
        offs = gl.arange(0, BLOCK, layout=layout)
        mask = offs < gl.minimum(n - start, BLOCK).to(gl.int32)
        for i in gl.static_range(1, GROUP_SIZE + 1):  # peers first, our own slice last
            dest = (group_index + i) % GROUP_SIZE
            peer = gl.load(members + dest)
            x = gl.load(inp + dest * n64 + start + offs, mask=mask)  # [BLOCK] in layout
            store(my_slice + start + offs, x, rank, peer, heap_bases, mask=mask, hint=HINT)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every rank's slice has landed in our out


def launch(ctx, out_flat, inp_flat, n, plan, hint):
    """Launch on ``plan``'s grid (``iris.ccl.common.plan``); the block must fill whole warps."""
    check_block(plan, "ccl.all_to_all")
    _all_to_all_gluon_kernel[plan.grid](out_flat, inp_flat, n, plan.sync.args(ctx), GROUP_SIZE=plan.sync.size,
                                        HINT=hint, BLOCK=plan.block, THREADS_PER_WARP=WARP_SIZE,
                                        num_warps=plan.warps)
