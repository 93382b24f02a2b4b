"""reduce_scatter: rank r ends with slice r of the elementwise reduction (torch's reduce_scatter_tensor), or, into
a full-size output, with the reduction at its own tiles (upstream Iris's layout, ``reduce_scatter_tiles.py``).

Pull ("auto" below ``PUSH_MIN_BYTES`` per output slice): each rank reads its slice from every member's input and
reduces it.

    barrier (inputs ready)  ->  out = op over ranks of inp[slice me]  ->  barrier (inputs free)

which is the one-shot all_reduce kernel run on slice ``group_rank`` of every input (the slice sits at the
same heap offset on every rank, so the peers' slices are found from ours).

Push ("auto" from ``PUSH_MIN_BYTES`` on, on GPUs): each rank stores each peer's slice of its input into its
own row of a staging buffer on that peer, segment by segment, and raises a flag per segment; it then reduces
its own slice with the staged rows as their flags arrive. Stores cross NVLink faster than loads (367 against
338 GB/s both ways at once on 2 x H200), and the local reduce of one segment overlaps the pushes of the next.

    barrier (staging free)  ->  per segment s:  staging[me] on d = inp[slice d][s] for every peer d;
                                                flag[me, s] on d = call      (one release for all peers)
                                                wait flag[d, s] for every peer d;
                                                out[s] = op(inp[slice me][s], staging[d][s] for every d)
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.ccl.all_reduce import _all_reduce_one_shot_kernel
from iris.ccl.config import REDUCE_SCATTER_ALGORITHMS
from iris.ccl.reduce_scatter_tiles import reduce_scatter_tiles
from iris.device.group import combine, finish, peer_at, program_row, tail_mask
from iris.device.atomics import atomic_xchg
from iris.device.rma import store
from iris.device.sync import call_match, fence_release_sys, open_call, wait_until
from iris.host import launches
from iris.host.distributed import Context

SEGMENT_BLOCKS = 4  # blocks per flagged segment: one sys fence per 4 x 16 KiB of bf16 on the large shape
# The push's bandwidth-bound shape: two programs per SM of 16 warps, each pushing 8192 elements a step. On
# 2 x H200 it moved 338 GB/s at 256 MiB and 352 at 1 GiB against 313 and 326 with the collectives' default
# (128 x 16384 x 32; docs/perf-notes.md).
PUSH_LARGE_SHAPE = (256, 8192, 16)
# "auto" pushes from output slices of this many bytes (on the large shape): on 2 x H200 the pull was ahead at
# 32 MiB slices (318 against 291 GB/s), the push at 128 MiB (341 against 329) and 512 MiB (355 against 334).
PUSH_MIN_BYTES = 64 << 20


@triton.jit
def _reduce_scatter_push_kernel(out, inp, n, staged, segments, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr,
                                ACC_FP32: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr, SEGMENT: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    staging, segment_flags, flag_stride = staged  # our row of staging on a peer: staging + group_index * n
    match = call_match(sync, ((staging, heap_bases), (segment_flags, heap_bases)))  # peers write both
    row = program_row(flags, world_size)
    # Every member has started this call, so its last call's reads of its staging are over. The epoch stamps
    # this call's segment flags: segment s is always program s % programs's, on every rank, so one row's count.
    epoch, ok = open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)
    if ok:
        _push_and_reduce(out, inp, n, staged, segments, epoch, members, rank, group_index, heap_bases, GROUP_SIZE, OP,
                         ACC_FP32, HINT, BLOCK, SEGMENT)


@triton.jit
def _push_and_reduce(out, inp, n, staged, segments, epoch, members, rank, group_index, heap_bases,
                     GROUP_SIZE: tl.constexpr, OP: tl.constexpr, ACC_FP32: tl.constexpr, HINT: tl.constexpr,
                     BLOCK: tl.constexpr, SEGMENT: tl.constexpr):
    """This program's segments: push the peers' slices, raise their flags, reduce ours as the peers' arrive."""
    staging, segment_flags, flag_stride = staged
    n64 = tl.cast(n, tl.int64)  # slice offsets pass 2**31 elements in large calls; block starts are 64-bit too
    for s in range(tl.program_id(0), segments, tl.num_programs(0)):
        first = tl.cast(s, tl.int64) * (SEGMENT * BLOCK)
        end = tl.minimum(first + SEGMENT * BLOCK, n64)
        # ---- push: each peer's slice of our input, this segment, into our row of its staging
        for i in range(1, GROUP_SIZE):
            dest_index = (group_index + i) % GROUP_SIZE
            dest = tl.load(members + dest_index)
            for start in range(first, end, BLOCK):
                offs = tl.arange(0, BLOCK)
                mask = tail_mask(start, end, BLOCK)
                x = tl.load(inp + dest_index * n64 + start + offs, mask=mask)  # [BLOCK]
                store(staging + group_index * n64 + start + offs, x, rank, dest, heap_bases, mask=mask, hint=HINT)
        tl.debug_barrier()
        fence_release_sys()  # one release for the segment's stores to every peer, then relaxed flag writes
        for i in range(1, GROUP_SIZE):
            atomic_xchg(segment_flags + group_index * flag_stride + s, epoch, rank,
                        peer_at(members, group_index, i, GROUP_SIZE), heap_bases, sem="relaxed", scope="sys")
        # ---- reduce: our slice of our input and each peer's staged copy of theirs
        for i in range(1, GROUP_SIZE):
            src_index = (group_index + GROUP_SIZE - i) % GROUP_SIZE
            wait_until(segment_flags + src_index * flag_stride + s, epoch, rank, tl.load(members + src_index),
                       "reduce_scatter push")
        # in group order, ours among them (reduce_from_group's rule): every slice rounds as all_reduce's would
        for start in range(first, end, BLOCK):
            offs = tl.arange(0, BLOCK)
            mask = tail_mask(start, end, BLOCK)
            acc = tl.load(_slice_of(0, inp, staging, group_index, n64) + start + offs, mask=mask)  # [BLOCK]
            if ACC_FP32:
                acc = acc.to(tl.float32)
            for src_index in range(1, GROUP_SIZE):
                x = tl.load(_slice_of(src_index, inp, staging, group_index, n64) + start + offs, mask=mask)
                acc = combine(acc, x.to(acc.dtype), OP)
            tl.store(out + start + offs, finish(acc, OP, GROUP_SIZE).to(out.dtype.element_ty), mask=mask)


@triton.jit
def _slice_of(src_index, inp, staging, group_index, n64):
    """Where member ``src_index``'s contribution to our slice lies here: in our input for ourselves, else in its
    row of our staging."""
    if src_index == group_index:
        src = inp + group_index * n64
    else:
        src = staging + src_index * n64
    return src


def pushes(plan, slice_bytes, caller):
    """Whether this call pushes: asked for, or "auto" with output slices of ``PUSH_MIN_BYTES`` on the large
    shape (which only GPUs take). The same answer on every rank: the config and sizes are the same."""
    algorithm = common.algorithm(plan, REDUCE_SCATTER_ALGORITHMS, caller)
    return algorithm == "push" or (algorithm == "auto" and plan.large and slice_bytes >= PUSH_MIN_BYTES)


def reduce_scatter(ctx: Context, out: torch.Tensor, inp: torch.Tensor, op: common.ReduceOp = "sum",
                   group: dist.ProcessGroup | None = None, async_op: bool = False,
                   config: common.AnyConfig | None = None) -> common.Work | None:
    """Two layouts, told apart by ``out``'s size:

    - upstream Iris's, ``out`` as large as ``inp`` (``[M, N]``, anywhere; ``inp`` on the heap): each rank's ``out``
      receives the reduction at its own tiles and keeps every other element (``reduce_scatter_tiles``: the tile map
      comes from an ``iris.ccl.Config``, or upstream's default 32 x 64 tiles in blocks).
    - torch's (``reduce_scatter_tensor``), ``out`` one slice (``[n, ...]``, anywhere): slice ``group_rank`` along
      dim 0 of ``op`` over every rank's ``inp`` (``[group_size * n, ...]``: on the heap for the pull, anywhere for
      the push; "auto" pulls below 64 MiB output slices and on the cpu backend).

    fp16/bf16 accumulate in fp32; every rank adds the ranks in one order. Collective over ``group``;
    stream-ordered; graph-capturable after a first call (the push makes its staging buffer and flags,
    ``ctx.workspaces``, at its first call and when a larger size comes).

        ref = reduce(op, [inp_r for r in group]).chunk(group_size)[group_rank]     # torch's
        ref = where(tile of rank group_rank, reduce(op, [inp_r for r in group]), out)  # upstream's

    Raises ``ValueError`` for operands that share bytes (but in the in-place form), operands of other sizes or dtypes, a
    dim 0 the group size does not divide (torch's layout), an ``inp`` off the heap (the pull) or an unknown ``op``;
    ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.ones(32 * world_size, 64)
        part = ctx.empty(32, 64)  # one slice: torch's layout
        ctx.ccl.reduce_scatter(part, inp)
        assert torch.all(part == world_size)
        full = ctx.zeros(32 * world_size, 64)  # as large as inp: upstream's, the sum at this rank's 32 x 64 tiles
        ctx.ccl.reduce_scatter(full, inp)  # here one tile a rank: rows 32 * rank to 32 * rank + 31
        assert torch.all(full[32 * rank:32 * rank + 32] == world_size) and full.sum() == part.sum()
    """
    caller = "ccl.reduce_scatter"
    key = launches.key_of(caller, group, config, (out, inp), op)
    if ctx.launches.run(ctx, key, group, config, (out, inp)):  # the pull's launch (iris/host/launches.py)
        return common.done(ctx, async_op)
    common.precheck(caller, group, config, (out, inp), str(op))
    size = ctx.group_sync(group, caller).size
    if isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and size > 1 and out.numel() == inp.numel():
        common.same_dtype(out, inp, caller)
        if tuple(out.shape) != tuple(inp.shape):
            raise ValueError(f"{caller}: out is {tuple(out.shape)} but inp is {tuple(inp.shape)}; a full-size out "
                             "(upstream's layout) has inp's shape")
        return reduce_scatter_tiles(ctx, out, inp, op, group, async_op, config, caller)
    return _reduce_scatter_slice(ctx, out, inp, op, group, async_op, config, caller, key)


def reduce_scatter_tensor(ctx: Context, out: torch.Tensor, inp: torch.Tensor, op: common.ReduceOp = "sum",
                          group: dist.ProcessGroup | None = None, async_op: bool = False,
                          config: common.AnyConfig | None = None) -> common.Work | None:
    """torch's layout only (``dist.reduce_scatter_tensor``): ``out`` [n, ...] = slice ``group_rank`` along dim 0
    of ``op`` over every rank's ``inp`` [group_size * n, ...]. Same contract as ``reduce_scatter``'s slice form.

        ref = reduce(op, [inp_r for r in group]).chunk(group_size)[group_rank]

    Raises ``ValueError`` for operands that share bytes (but in the in-place form), operands of other sizes or dtypes, a
    dim 0 the group size does not divide, an ``inp`` off the heap (the pull) or an unknown ``op``;
    ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.arange(world_size * 4, dtype=torch.float32)  # the same on every rank here
        out = ctx.empty(4)
        ctx.ccl.reduce_scatter_tensor(out, inp)  # rank r gets slice r of the sum
        assert torch.equal(out, world_size * torch.arange(4 * rank, 4 * rank + 4).float())
    """
    caller = "ccl.reduce_scatter_tensor"
    key = launches.key_of(caller, group, config, (out, inp), op)
    if ctx.launches.run(ctx, key, group, config, (out, inp)):  # the pull's launch (iris/host/launches.py)
        return common.done(ctx, async_op)
    common.precheck(caller, group, config, (out, inp), str(op))
    return _reduce_scatter_slice(ctx, out, inp, op, group, async_op, config, caller, key)


def _reduce_scatter_slice(ctx, out, inp, op, group, async_op, config, caller, key):
    """The slice form of both names; the pull's launch is remembered under ``key`` (the caller's)."""
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    op = common.reduce_op(op, inp.dtype, caller)
    n = common.split_rows(inp, ctx.group_sync(group, caller).size, caller, "inp")
    p = common.plan(ctx, caller, n, group, config)
    common.expect_numel(out, n, caller, "out", f"inp.numel() / group size {p.sync.size}")
    common.in_place(caller, out, inp, p.sync.index * n, n)
    acc_fp32 = common.accumulate_in_fp32(inp.dtype)
    aligned = (n * inp.element_size()) % 16 == 0
    if pushes(p, n * inp.element_size(), caller):
        if p.large:
            p = common.plan(ctx, caller, n, group, config, large_shape=PUSH_LARGE_SHAPE)
        if n == 0:  # nothing to move, and no barrier needed: nobody reads anybody's memory
            return common.done(ctx, async_op)
        segments = triton.cdiv(n, SEGMENT_BLOCKS * p.block)
        programs = min(p.programs, segments)
        ranks = p.sync.ranks
        # One staging buffer and one flag array for every size and dtype, grown to the largest (ctx.workspaces, off
        # the user's heap). Segment s's flag is stamped with the count of program s % programs's row: flags per
        # program count, at a layout that lasts (stable) since the counts of different rows differ.
        nbytes = p.sync.size * n * inp.element_size()
        staging = ctx.workspaces.get(caller + ".staging", ranks, (nbytes,), torch.uint8).view(inp.dtype)
        segment_flags = ctx.workspaces.peer_flags(f"{caller}.flags.{programs}", ranks, segments, stable=True)
        hint = common.vector_hint(out, inp, staging) if aligned else None
        staged = (staging, segment_flags, segment_flags.shape[1])
        fp = common.fingerprint(ctx, caller, (out, inp), op, "push", launch=dict(programs=programs, block=p.block),
                                sync=p.sync)
        _reduce_scatter_push_kernel[(programs,)](out_flat, inp_flat, n, staged, segments, p.sync.args(ctx, fp),
                                                 GROUP_SIZE=p.sync.size, OP=op, ACC_FP32=acc_fp32, HINT=hint,
                                                 BLOCK=p.block, SEGMENT=SEGMENT_BLOCKS, num_warps=p.warps)
        return common.done(ctx, async_op)
    ins = ctx.symmetric_table(inp, caller, "inp")
    fp = common.fingerprint(ctx, caller, (out, inp), op, "pull", launch=p.launch, sync=p.sync)
    start = p.sync.index * n
    hint = common.vector_hint(out, inp_flat[start:start + n]) if aligned else None
    launch = launches.SlicedLaunch(_all_reduce_one_shot_kernel, p.grid, (n, p.sync.args(ctx, fp, (ins, ins))),
                                   dict(GROUP_SIZE=p.sync.size, OP=op, ACC_FP32=acc_fp32, HINT=hint, BLOCK=p.block,
                                        SLICED=True, num_warps=p.warps), start, start + n)
    ctx.launches.put(key, group, config, launch, symmetric=((1, inp.numel() * inp.element_size(), ins),))(
        out_flat, inp_flat)
    return common.done(ctx, async_op)


record.declare("reduce_scatter", reduce_scatter, reference.reduce_scatter_tiles,
               "upstream's layout: each rank's tiles of the reduction, in a full-size out (or torch's, by out's size)",
               "reduce_scatter")
record.declare("reduce_scatter_tensor", reduce_scatter_tensor, reference.reduce_scatter,
               "torch's layout: slice r of the reduction along dim 0 to rank r", "reduce_scatter",
               process_group=("reduce_scatter", "reduce_scatter_single", "reduce_scatter_single_coalesced"),
               compile_op="reduce_scatter")
