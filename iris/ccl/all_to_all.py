"""all_to_all in two layouts, one kernel.

**Layout decision.** ``ctx.ccl.all_to_all`` is upstream Iris's name, so it has upstream's meaning: a 2-D
``(M, N * W)`` tensor is split along **dim 1** into W column blocks, and column block j of rank i's input becomes
column block i of rank j's output. Code written for Iris passes such tensors, and a dim-0 split would hand it
silently different data; the shapes cannot tell the two layouts apart, so in ``ctx.ccl`` upstream's wins (a
Gluon all_to_all must follow the same layout). torch's layout (``all_to_all_single`` with equal splits: slices
along **dim 0**) is ``ctx.ccl.all_to_all_single``, and is what ``iris.distributed`` and ``torch.ops.iris`` use.
A 1-D tensor has only dim 0, where the two agree.

Both are one pattern: view the tensor as ``[rows, W, n]`` (dim 1: rows = M, n = N * trailing dims; dim 0:
rows = 1, n = numel / W) and move ``[:, q, :]`` of our input to ``[:, me, :]`` of rank q's output.

Push:  barrier (every out is free)  ->  put inp[:, q, :] into out[:, me, :] of rank q  ->  barrier
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.device.group import program_row, tail_mask
from iris.device.rma import store
from iris.device.sync import call_match, group_barrier, open_call
from iris.host.memory.overlap import check_apart
from iris.host.distributed import Context


@triton.jit
def _all_to_all_kernel(out, inp, rows, n, col_programs, sync, GROUP_SIZE: tl.constexpr, HINT: tl.constexpr,
                       BLOCK: tl.constexpr):
    # out / inp: [rows, GROUP_SIZE, n]; the programs form a (programs / col_programs) x col_programs grid over
    # (rows, blocks of n), so a dim-1 call with short rows still spreads over every program
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((out, tables[1]),))  # peers write out (iris/device/sync.py)
    row_program = tl.program_id(0) // col_programs
    row_programs = tl.num_programs(0) // col_programs
    col_first = tl.cast(tl.program_id(0) % col_programs, tl.int64) * BLOCK
    if open_call(program_row(flags, world_size), heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        _all_to_all_push(out, inp, rows, n, col_programs, row_program, row_programs, col_first, members, rank,
                         group_index, tables[1], GROUP_SIZE, HINT, BLOCK)
        group_barrier(program_row(flags, world_size), heap_bases, members, rank, GROUP_SIZE, call=match)  # landed


@triton.jit
def _all_to_all_push(out, inp, rows, n, col_programs, row_program, row_programs, col_first, members, rank,
                     group_index, out_bases, GROUP_SIZE: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    """This program's blocks: ``inp[r, q, block]`` into ``out[r, group_index, block]`` of member q."""
    n64 = tl.cast(n, tl.int64)  # slice offsets pass 2**31 elements in large calls
    for r in range(row_program, rows, row_programs):
        row_in = inp + tl.cast(r, tl.int64) * (GROUP_SIZE * n64)
        my_slice = out + tl.cast(r, tl.int64) * (GROUP_SIZE * n64) + group_index * n64
        for start in range(col_first, n, col_programs * BLOCK):
            offs = tl.arange(0, BLOCK)
            mask = tail_mask(start, n, BLOCK)
            # peers first, our own slice last; each slice's load is issued before the previous slice's store, so
            # a store never waits out a load's latency (the compiler cannot reorder them: out may alias inp)
            dest = (group_index + 1) % GROUP_SIZE
            x = tl.load(row_in + dest * n64 + start + offs, mask=mask)  # [BLOCK]
            for i in tl.static_range(1, GROUP_SIZE + 1):
                peer = tl.load(members + dest)
                if i < GROUP_SIZE:
                    following = (group_index + i + 1) % GROUP_SIZE
                    x_next = tl.load(row_in + following * n64 + start + offs, mask=mask)
                store(my_slice + start + offs, x, rank, peer, out_bases, mask=mask, hint=HINT)
                if i < GROUP_SIZE:
                    dest, x = following, x_next


def _launch(ctx, out, inp, dim, group, async_op, config, caller):
    common.precheck(caller, group, config, (out, inp))
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    common.expect_numel(out, inp.numel(), caller, "out", "inp.numel()")
    check_apart(caller, out, "out", inp, "inp", "all_to_all does not run in place; use a separate out")
    tables = (ctx.heap_bases, ctx.symmetric_table(out, caller, "out"))
    size = ctx.group_sync(group, caller).size
    if dim == 1 and inp.dim() >= 2:
        if tuple(out.shape) != tuple(inp.shape):
            raise ValueError(f"{caller}: out is {tuple(out.shape)} but inp is {tuple(inp.shape)}; upstream's layout "
                             "keeps the shape (M, N * world_size), so they must match")
        if inp.shape[1] % size:
            raise ValueError(f"{caller}: inp has {inp.shape[1]} columns along dim 1, which the group of {size} ranks "
                             f"does not divide; upstream's layout is (M, N * world_size). For torch's dim-0 split "
                             "use ccl.all_to_all_single")
        rows, n = inp.shape[0], inp.numel() // max(inp.shape[0], 1) // size
    else:
        rows, n = 1, common.split_rows(inp, size, caller, "inp")
    p = common.plan(ctx, caller, rows * n, group, config)
    block = min(p.block, max(16, triton.next_power_of_2(max(n, 1))))
    col_programs = min(p.programs, triton.cdiv(max(n, 1), block))
    programs = col_programs * max(1, min(p.programs // col_programs, rows))
    hint = common.vector_hint(out, inp) if (n * inp.element_size()) % 16 == 0 else None
    fp = common.fingerprint(ctx, caller, (out, inp), p.config.use_gluon, launch=dict(programs=programs, block=block),
                            sync=p.sync)
    if p.config.use_gluon:
        from iris.ccl.gluon.all_to_all import launch

        launch(ctx, out_flat, inp_flat, rows, n, col_programs, programs, block, p, hint, fp, tables)
        return common.done(ctx, async_op)
    if rows * n:
        _all_to_all_kernel[(programs,)](out_flat, inp_flat, rows, n, col_programs, p.sync.args(ctx, fp, tables),
                                        GROUP_SIZE=p.sync.size, HINT=hint, BLOCK=block, num_warps=p.warps)
    return common.done(ctx, async_op)


def all_to_all(ctx: Context, out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup | None = None,
               async_op: bool = False, config: common.AnyConfig | None = None) -> common.Work | None:
    """Upstream Iris's layout: ``out`` and ``inp`` are ``(M, N * group_size)`` (more dims ride along with dim 1);
    ``out`` on the heap. Column block q of ``inp`` goes to rank q, arriving as column block ``group_rank`` of its
    ``out``. A 1-D tensor splits along dim 0. Not in place.

    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        ref_q = torch.cat([inp_r.chunk(group_size, dim=1)[q] for r in group], dim=1)

    Raises ``ValueError`` for operands that share bytes, operands of other shapes or dtypes, a dim 1 the group size does
    not divide, an ``out`` off the heap; ``iris.MismatchError`` on every rank when the ranks' calls differ;
    ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.full((2, world_size * 4), float(rank))  # column block q goes to rank q
        out = ctx.zeros(2, world_size * 4)
        ctx.ccl.all_to_all(out, inp)  # column block r of out came from rank r
        assert torch.equal(out, torch.arange(world_size).repeat_interleave(4).float().expand(2, -1))
    """
    return _launch(ctx, out, inp, 1, group, async_op, config, "ccl.all_to_all")


def all_to_all_single(ctx: Context, out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup | None = None,
                      async_op: bool = False, config: common.AnyConfig | None = None) -> common.Work | None:
    """torch's layout (``dist.all_to_all_single`` with equal splits): ``out`` and ``inp`` are
    ``[group_size * n, ...]``; ``out`` on the heap. Slice q of ``inp`` along dim 0 goes to rank q, arriving as slice
    ``group_rank`` of its ``out``. Not in place.

    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        ref_q = torch.cat([inp_r.chunk(group_size, dim=0)[q] for r in group], dim=0)

    Raises ``ValueError`` for operands that share bytes, operands of other sizes or dtypes, a dim 0 the group size does
    not divide, an ``out`` off the heap; ``iris.MismatchError`` on every rank when the ranks' calls differ;
    ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.arange(world_size * 4, dtype=torch.float32) + 100 * rank  # slice q (4 elements) goes to rank q
        out = ctx.zeros(world_size * 4)
        ctx.ccl.all_to_all_single(out, inp)  # slice r of out is slice `rank` of rank r's inp
        mine = torch.arange(4 * rank, 4 * rank + 4).float()
        assert torch.equal(out, torch.cat([mine + 100 * r for r in range(world_size)]))
    """
    return _launch(ctx, out, inp, 0, group, async_op, config, "ccl.all_to_all_single")


record.declare("all_to_all", all_to_all, reference.all_to_all,
               "upstream's layout: column block r of every rank's input to rank r", "all_to_all", gluon=True)
record.declare("all_to_all_single", all_to_all_single, reference.all_to_all_single,
               "torch's layout: slice r along dim 0 of every rank's input to rank r", "all_to_all_single", gluon=True,
               process_group=("all_to_all_single", "alltoall", "allgather"), compile_op="all_to_all")
