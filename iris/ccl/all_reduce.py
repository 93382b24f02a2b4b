"""all_reduce: every rank ends with the elementwise reduction of every rank's input.

One-shot (latency):            two-shot (bandwidth):
    barrier (inputs ready)          barrier (inputs ready)
    out = op over ranks of inp      r = op over ranks of inp[my shard]; out[my shard] = r on every rank
    barrier (inputs free)           barrier (shards landed, inputs free)

Each program synchronises only with the same-numbered program of the other ranks: programs split the data
the same way on every rank, so program p only ever touches what program p of a peer produced, and no
grid-wide barrier (which would need every program resident) is needed.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.ccl.config import ALL_REDUCE_ALGORITHMS
from iris.device.group import first_block, program_row, reduce_blocks, reduce_from_group, store_to_group, tail_mask
from iris.device.sync import call_match, group_barrier, open_call
from iris.host import launches
from iris.host.distributed import Context


@triton.jit
def _one_shot(out, inp, src, n, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr, ACC_FP32: tl.constexpr,
              HINT: tl.constexpr, BLOCK: tl.constexpr, SLICED: tl.constexpr, STAGED: tl.constexpr):
    # SLICED: ``inp`` is slice ``group_index`` (of ``n`` elements) of a heap tensor (reduce_scatter's pull)
    # STAGED: ``src`` (anywhere on this device) is copied into ``inp`` first, by the program that reads those
    # blocks of every rank's ``inp`` later; the opening barrier then releases the copy
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    anchor = inp - group_index * n if SLICED else inp
    match = call_match(sync, ((anchor, tables[0]),))  # peers read inp (iris/device/sync.py)
    row = program_row(flags, world_size)
    if STAGED:  # our staging buffer, which no peer reads before the barrier below
        for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
            offs = tl.arange(0, BLOCK)
            mask = tail_mask(start, n, BLOCK)
            tl.store(inp + start + offs, tl.load(src + start + offs, mask=mask), mask=mask)
    # every rank's input is ready (written before this kernel began, or by our same-numbered program just now)
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=not STAGED)[1]:
        reduce_blocks(out, inp, n, tables[0], members, rank, group_index, GROUP_SIZE, OP, ACC_FP32, HINT, BLOCK)
        # no rank reads our inp
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, RELAXED=True, KERNEL_END=True, call=match)


@triton.jit
def _all_reduce_one_shot_kernel(out, inp, n, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr, ACC_FP32: tl.constexpr,
                                HINT: tl.constexpr, BLOCK: tl.constexpr, SLICED: tl.constexpr = False):
    _one_shot(out, inp, inp, n, sync, GROUP_SIZE, OP, ACC_FP32, HINT, BLOCK, SLICED, False)


@triton.jit
def _all_reduce_staged_kernel(out, inp, src, n, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr,
                              ACC_FP32: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    _one_shot(out, inp, src, n, sync, GROUP_SIZE, OP, ACC_FP32, HINT, BLOCK, False, True)


@triton.jit
def _all_reduce_two_shot_kernel(out, inp, n, shard, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr,
                                ACC_FP32: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((inp, tables[0]), (out, tables[1])))  # peers read inp, write out (iris/device/sync.py)
    row = program_row(flags, world_size)
    # every rank's input is ready
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        # Our shard, read from every rank and reduced, then stored straight into every rank's out: the
        # reduce-scatter and the all-gather in one pass, with no barrier between them. In place is safe: only
        # we read shard ``group_index`` of any rank's input, and each element before we overwrite it.
        shard_start = tl.cast(group_index, tl.int64) * shard
        shard_end = tl.minimum(shard_start + shard, n)
        for start in range(shard_start + first_block(BLOCK), shard_end, tl.num_programs(0) * BLOCK):
            offs = tl.arange(0, BLOCK)
            mask = tail_mask(start, shard_end, BLOCK)
            acc = reduce_from_group(inp + start, offs, mask, tables[0], members, rank, group_index, GROUP_SIZE, OP,
                                    ACC_FP32, HINT).to(out.dtype.element_ty)  # [BLOCK]
            store_to_group(out + start + offs, acc, rank, tables[1], members, group_index, GROUP_SIZE, mask=mask,
                           hint=HINT, PEERS_FIRST=True)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every shard landed; no rank reads inp


def all_reduce(ctx: Context, out: torch.Tensor, inp: torch.Tensor, op: common.ReduceOp = "sum",
               group: dist.ProcessGroup | None = None, async_op: bool = False,
               config: common.AnyConfig | None = None) -> common.Work | None:
    """``out = op(inp of every rank in group)``, elementwise; ``out`` may be ``inp`` (in place).

    Collective over ``group``; asynchronous for the host (stream-ordered, returns a ``Work`` with
    ``async_op=True``); graph-capturable after a first call. ``inp`` must be on the symmetric heap (peers
    read it); so must ``out`` for the two-shot algorithm. fp16/bf16 accumulate in fp32 and round once.
    Uses ``config.comm_sms`` programs at most.

        ref = reduce(op, [inp_r for r in group])     # see iris/ccl/reference.py

    Raises ``ValueError`` for operands that share bytes (but in the in-place form), operands of other shapes or dtypes,
    an ``inp`` off the heap, or an unknown ``op``; ``iris.MismatchError`` on every rank when the ranks' calls differ;
    ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.full((1024,), float(rank + 1))
        out = ctx.zeros(1024)
        ctx.ccl.all_reduce(out, inp)  # every rank gets 1 + 2 + ... + world_size
        assert torch.all(out == world_size * (world_size + 1) / 2)
    """
    caller = "ccl.all_reduce"
    key = launches.key_of(caller, group, config, (out, inp), op)
    if ctx.launches.run(ctx, key, group, config, (out, inp)):  # iris/host/launches.py
        return common.done(ctx, async_op)
    common.precheck(caller, group, config, (out, inp), str(op))
    op, out_flat, inp_flat, ins, p = _checked(ctx, caller, out, inp, "inp", op, group, config)
    n = inp.numel()
    in_place = common.in_place(caller, out, inp)
    algorithm = common.algorithm(p, ALL_REDUCE_ALGORITHMS, caller)
    if algorithm == "auto":
        algorithm = "one_shot" if n * inp.element_size() <= p.config.one_shot_max_bytes and not in_place else "two_shot"
    if algorithm == "one_shot" and in_place:
        raise ValueError(f"{caller}: the one-shot algorithm cannot run in place (peers still read inp while out is "
                         "written); use algorithm='two_shot' or 'auto', or a separate out")
    fp = common.fingerprint(ctx, caller, (out, inp), op, algorithm, launch=p.launch, sync=p.sync)
    meta = dict(GROUP_SIZE=p.sync.size, OP=op, ACC_FP32=common.accumulate_in_fp32(inp.dtype),
                HINT=common.vector_hint(inp, out), BLOCK=p.block, num_warps=p.warps)
    nbytes = n * inp.element_size()
    if algorithm == "one_shot":
        launch = launches.Launch(_all_reduce_one_shot_kernel, p.grid, (n, p.sync.args(ctx, fp, (ins, ins))), meta)
        ctx.launches.put(key, group, config, launch, symmetric=((1, nbytes, ins),))(
            out_flat, inp_flat)
    else:
        outs = ctx.symmetric_table(out, caller, "out")
        # Shards start on 16-element boundaries so the vector hint holds on every rank's shard.
        shard = triton.cdiv(triton.cdiv(n, p.sync.size), 16) * 16
        launch = launches.Launch(_all_reduce_two_shot_kernel, p.grid, (n, shard, p.sync.args(ctx, fp, (ins, outs))),
                                 meta)
        ctx.launches.put(key, group, config, launch, symmetric=((0, nbytes, outs), (1, nbytes, ins)))(
            out_flat, inp_flat)
    return common.done(ctx, async_op)


def _checked(ctx, caller, out, inp, name, op, group, config):
    """What every all_reduce checks and plans once its call is known to match: ``(op, out's and inp's flat views,
    inp's bases table, the plan)``; ``name`` is what the errors call ``inp``."""
    inp_flat, out_flat = common.flat(inp, caller, name), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    common.expect_numel(out, inp.numel(), caller, "out", f"{name}.numel()")
    op = common.reduce_op(op, inp.dtype, caller)
    ins = ctx.symmetric_table(inp, caller, name)
    return op, out_flat, inp_flat, ins, common.plan(ctx, caller, inp.numel(), group, config)


def all_reduce_staged(ctx, out, src, staged, op="sum", group=None, config=None):
    """The one-shot ``out = op(src of every rank in group)`` through ``staged``, a heap tensor of ``src``'s shape
    and dtype (the same allocation on every rank): the kernel copies ``src``, which may lie anywhere on this device,
    into ``staged`` before its opening barrier, so a tensor off the heap costs no copy of its own (the
    torch.distributed route, ``iris/distributed/collectives.py``). Returns the launch, which a caller may repeat as
    ``launch(out, staged, src)`` for tensors of the same shape, dtype and alignment, in the same group and config.
    Its call matches a one-shot ``all_reduce(out, staged)``'s, which a peer may make instead."""
    caller = "ccl.all_reduce"
    common.precheck(caller, group, config, (out, staged), str(op))
    src_flat = common.flat(src, caller, "src")
    common.same_dtype(staged, src, caller)
    common.expect_numel(staged, src.numel(), caller, "staged", "src.numel()")
    op, out_flat, inp_flat, ins, p = _checked(ctx, caller, out, staged, "staged", op, group, config)
    n = src.numel()
    if common.algorithm(p, ALL_REDUCE_ALGORITHMS, caller) not in ("auto", "one_shot"):
        raise ValueError(f"{caller}: a staged call is one-shot, got algorithm={p.config.algorithm!r}")
    fp = common.fingerprint(ctx, caller, (out, staged), op, "one_shot", launch=p.launch, sync=p.sync)
    meta = dict(GROUP_SIZE=p.sync.size, OP=op, ACC_FP32=common.accumulate_in_fp32(src.dtype),
                HINT=common.vector_hint(staged, out, src), BLOCK=p.block, num_warps=p.warps)
    launch = launches.Launch(_all_reduce_staged_kernel, p.grid, (n, p.sync.args(ctx, fp, (ins, ins))), meta)
    launch(out_flat, inp_flat, src_flat)
    return launch


record.declare("all_reduce", all_reduce, reference.all_reduce, "every rank gets the reduction of every rank's input",
               "all_reduce", process_group=("allreduce", "allreduce_coalesced"), compile_op="all_reduce")
