"""all_gather in Gluon: the Triton kernel's push (``iris/ccl/all_gather.py``) with its register layout spelled out.

Each program owns blocks ``pid, pid + programs, ...`` of the input; a block is ``BLOCK`` elements in the layout
``vector_layout`` gives (one 16-byte vector a thread, the warp's 32 vectors side by side, repeated over the block: the
layout Triton's compiler picks for the same 1-D block), and is stored to every member's slot ``group_index`` through
the one translate (``iris.device.rma.store``).

    barrier  ->  for each block: load it once, store it to every member (ourselves first)  ->  barrier
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.device.group import program_row
from iris.device.rma import store
from iris.device.sync import call_match, group_barrier, open_call

WARP_SIZE = 32


@gluon.jit
def _all_gather_gluon_kernel(out, inp, n, sync, GROUP_SIZE: gl.constexpr, HINT: gl.constexpr, BLOCK: gl.constexpr,
                             THREADS_PER_WARP: gl.constexpr, VEC: gl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((out, tables[1]),))  # peers write out (iris/device/sync.py)
    row = program_row(flags, world_size)
    # the strict barrier: the relaxed one's all-members acquire builds a layout-less block, which Gluon refuses
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:  # no rank still uses its out
        layout: gl.constexpr = gl.BlockedLayout([VEC], [THREADS_PER_WARP], [gl.num_warps()], [0])
        slot = out + group_index.to(gl.int64) * n  # 64-bit: past 2**31 elements from the third rank's slot on
        for start in range(gl.program_id(0).to(gl.int64) * BLOCK, n, gl.num_programs(0) * BLOCK):
            offs = gl.arange(0, BLOCK, layout=layout)
            mask = offs < gl.minimum(n - start, BLOCK).to(gl.int32)
            x = gl.load(inp + start + offs, mask=mask)  # [BLOCK] in layout
            for i in gl.static_range(GROUP_SIZE):
                peer = gl.load(members + (group_index + i) % GROUP_SIZE)
                store(slot + start + offs, x, rank, peer, tables[1], mask=mask, hint=HINT)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every rank's slot has landed in out


def launch(ctx, out_flat, inp_flat, n, plan, hint, fingerprint, tables):
    """Launch on ``plan``'s grid (``iris.ccl.common.plan``); the block must fill whole warps."""
    check_block(plan.block, plan.warps, "ccl.all_gather")
    _all_gather_gluon_kernel[plan.grid](out_flat, inp_flat, n, plan.sync.args(ctx, fingerprint, tables),
                                        GROUP_SIZE=plan.sync.size,
                                        HINT=hint, BLOCK=plan.block, THREADS_PER_WARP=WARP_SIZE,
                                        VEC=vector_width(plan.block, plan.warps, inp_flat.element_size()),
                                        num_warps=plan.warps)


def check_block(block, warps, caller):
    threads = WARP_SIZE * warps
    if block % threads:
        raise ValueError(f"{caller}: use_gluon=True needs block_size a multiple of 32 * num_warps = {threads} (one "
                         f"BlockedLayout over the program's threads), got block_size={block}; raise block_size "
                         f"or lower num_warps")


def vector_width(block, warps, element_size):
    """Elements a thread holds side by side in the register layout (``VEC`` of ``BlockedLayout([VEC], [32], [warps],
    [0])``): one 16-byte vector, so that each warp-wide load or store covers 32 * 16 = 512 contiguous bytes, or the
    whole block when it is smaller. A wider run per thread (``block / (32 * warps)`` elements, upstream's layout) puts
    a thread's vectors side by side instead and spreads each warp instruction over twice the bytes, half of every
    32-byte sector: at 4096 bf16 and 8 warps, 32 sectors a warp store instead of 16 (``tests/gluon_probe.py``)."""
    return max(1, min(16 // element_size, block // (WARP_SIZE * warps)))
