"""all_to_all in Gluon: the Triton kernel's push and layouts (``iris/ccl/all_to_all.py``: upstream's dim-1 split for
``all_to_all``, torch's dim-0 split for ``all_to_all_single``) with its register layout spelled out:
one 16-byte vector a thread, the warp's vectors side by side (``iris.ccl.gluon.all_gather.vector_width``; upstream's
Gluon kernel hard-codes a 64-lane layout, which no NVIDIA GPU runs).

    barrier  ->  for each row and block: inp[:, q, :] -> out[:, me, :] of rank q, peers first  ->  barrier
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.device.group import program_row
from iris.ccl.gluon.all_gather import WARP_SIZE, check_block, vector_width
from iris.device.rma import store
from iris.device.sync import call_match, group_barrier, open_call


@gluon.jit
def _all_to_all_gluon_kernel(out, inp, rows, n, col_programs, sync, GROUP_SIZE: gl.constexpr, HINT: gl.constexpr,
                             BLOCK: gl.constexpr, THREADS_PER_WARP: gl.constexpr, VEC: gl.constexpr):
    # out / inp: [rows, GROUP_SIZE, n]; the programs form a (programs / col_programs) x col_programs grid over
    # (rows, blocks of n), as the Triton kernel's
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((out, tables[1]),))  # peers write out (iris/device/sync.py)
    row = program_row(flags, world_size)
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:  # no rank still uses its out
        _push(out, inp, rows, n, col_programs, members, rank, group_index, tables[1], GROUP_SIZE, HINT, BLOCK,
              THREADS_PER_WARP, VEC)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every slice has landed in our out


@gluon.jit
def _push(out, inp, rows, n, col_programs, members, rank, group_index, out_bases, GROUP_SIZE: gl.constexpr,
          HINT: gl.constexpr, BLOCK: gl.constexpr, THREADS_PER_WARP: gl.constexpr, VEC: gl.constexpr):
    """This program's blocks: ``inp[r, q, block]`` into ``out[r, group_index, block]`` of member q."""
    layout: gl.constexpr = gl.BlockedLayout([VEC], [THREADS_PER_WARP], [gl.num_warps()], [0])
    row_program = gl.program_id(0) // col_programs
    row_programs = gl.num_programs(0) // col_programs
    col_first = (gl.program_id(0) % col_programs).to(gl.int64) * BLOCK
    n64 = n.to(gl.int64)  # slice offsets pass 2**31 elements in large calls
    for r in range(row_program, rows, row_programs):
        row_in = inp + gl.cast(r, gl.int64) * (GROUP_SIZE * n64)
        my_slice = out + gl.cast(r, gl.int64) * (GROUP_SIZE * n64) + group_index * n64
        for start in range(col_first, n, col_programs * BLOCK):
            offs = gl.arange(0, BLOCK, layout=layout)
            mask = offs < gl.minimum(n - start, BLOCK).to(gl.int32)
            for i in gl.static_range(1, GROUP_SIZE + 1):  # peers first, our own slice last
                dest = (group_index + i) % GROUP_SIZE
                peer = gl.load(members + dest)
                x = gl.load(row_in + dest * n64 + start + offs, mask=mask)  # [BLOCK] in layout
                store(my_slice + start + offs, x, rank, peer, out_bases, mask=mask, hint=HINT)


def launch(ctx, out_flat, inp_flat, rows, n, col_programs, programs, block, plan, hint, fingerprint, tables):
    """Launch on the Triton kernel's grid and block (``iris/ccl/all_to_all.py``); the block must fill whole warps."""
    check_block(block, plan.warps, "ccl.all_to_all")
    if rows * n:
        _all_to_all_gluon_kernel[(programs,)](out_flat, inp_flat, rows, n, col_programs,
                                              plan.sync.args(ctx, fingerprint, tables),
                                              GROUP_SIZE=plan.sync.size, HINT=hint, BLOCK=block,
                                              THREADS_PER_WARP=WARP_SIZE,
                                              VEC=vector_width(block, plan.warps, inp_flat.element_size()),
                                              num_warps=plan.warps)
