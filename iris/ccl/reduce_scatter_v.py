"""reduce_scatter_v: a reduce-scatter with uneven splits (torch's ``dist.reduce_scatter`` with inputs of uneven
sizes).

Every rank's ``inp`` holds ``sum(splits)`` elements; rank ``i`` of the group gets elements ``sum(splits[:i])`` to
``sum(splits[:i + 1])`` of the reduction over the group. Pull: each rank reads its own range of every member's input.

    barrier (every input ready)  ->  out = op over members of inp[my range]  ->  barrier (no rank reads inp)

Every rank launches the same grid (planned for the largest split, so that program p of each rank meets program p
of the others); a program with nothing of its rank's range to reduce only meets the others at the barriers.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.device.group import program_row, reduce_blocks
from iris.device.sync import call_match, group_barrier, open_call
from iris.host import launches
from iris.host.distributed import Context


@triton.jit
def _reduce_scatter_v_kernel(out, inp, first, n, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr,
                             ACC_FP32: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((inp, tables[0]),))  # peers read inp (iris/device/sync.py)
    row = program_row(flags, world_size)
    # every rank's input is ready
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        mine = inp + tl.cast(first, tl.int64)  # 64-bit: our range may begin past 2**31 elements
        reduce_blocks(out, mine, n, tables[0], members, rank, group_index, GROUP_SIZE, OP, ACC_FP32, HINT, BLOCK)
        # no rank reads our inp
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, RELAXED=True, KERNEL_END=True, call=match)


def reduce_scatter_v(ctx: Context, out: torch.Tensor, inp: torch.Tensor, splits: list[int] | tuple[int, ...],
                     op: common.ReduceOp = "sum", group: dist.ProcessGroup | None = None, async_op: bool = False,
                     config: common.AnyConfig | None = None) -> common.Work | None:
    """``out`` (``splits[group_rank]`` elements, anywhere on this device) = elements ``sum(splits[:group_rank])`` to
    ``sum(splits[:group_rank + 1])`` of ``op`` over every rank's ``inp`` (``sum(splits)`` elements, contiguous, on
    the heap). ``splits`` (one int per member of ``group``, in group order) must be the same on every rank: it is
    part of the call's match. fp16/bf16 accumulate in fp32 and round once; every rank adds the ranks in one order.
    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        start = sum(splits[:group_rank])
        ref = reduce(op, [inp_r.flatten() for r in group])[start:start + splits[group_rank]]

    Raises ``ValueError`` for ``splits`` that are not one non-negative int per rank of the group, an ``inp`` of
    other than ``sum(splits)`` elements or off the heap, an ``out`` of other than ``splits[group_rank]`` elements,
    operands of other dtypes or an unknown ``op``; ``iris.MismatchError`` on every rank when the ranks' calls differ
    (``splits`` included); ``iris.PeerError`` once a peer has failed.

    Example::

        splits = [2 + r for r in range(world_size)]  # elements for each rank: the same list on every rank
        inp = ctx.arange(sum(splits), dtype=torch.float32)
        out = ctx.empty(splits[rank])
        ctx.ccl.reduce_scatter_v(out, inp, splits)
        start = sum(splits[:rank])
        assert torch.equal(out, world_size * torch.arange(start, start + splits[rank]).float())
    """
    caller = "ccl.reduce_scatter_v"
    splits = _checked_splits(splits, caller)
    key = launches.key_of(caller, group, config, (out, inp), op, str(splits))
    if ctx.launches.run(ctx, key, group, config, (out, inp)):  # iris/host/launches.py
        return common.done(ctx, async_op)
    common.precheck(caller, group, config, (inp,), str(op), splits)  # out's size is each rank's own
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    op = common.reduce_op(op, inp.dtype, caller)
    sync = ctx.group_sync(group, caller)
    if len(splits) != sync.size:
        raise ValueError(f"{caller}: splits has {len(splits)} entries but the group has {sync.size} ranks; give one "
                         "count per rank, in group order")
    common.expect_numel(inp, sum(splits), caller, "inp", "sum(splits)")
    index = sync.ranks.index(ctx.get_rank())
    start, n = sum(splits[:index]), splits[index]
    common.expect_numel(out, n, caller, "out", f"splits[{index}] (this rank's count)")
    common.in_place(caller, out, inp, start, n)
    ins = ctx.symmetric_table(inp, caller, "inp")
    p = common.plan(ctx, caller, max(splits), group, config, sync=sync)  # one grid on every rank
    fp = common.fingerprint(ctx, caller, (None, inp), op, splits, launch=p.launch, sync=p.sync)
    hint = common.vector_hint(inp, out) if start * inp.element_size() % 16 == 0 else None
    meta = dict(GROUP_SIZE=p.sync.size, OP=op, ACC_FP32=common.accumulate_in_fp32(inp.dtype), HINT=hint,
                BLOCK=p.block, num_warps=p.warps)
    launch = launches.Launch(_reduce_scatter_v_kernel, p.grid, (start, n, p.sync.args(ctx, fp, (ins, ins))), meta)
    ctx.launches.put(key, group, config, launch, symmetric=((1, sum(splits) * inp.element_size(), ins),))(
        out_flat, inp_flat)
    return common.done(ctx, async_op)


def _checked_splits(splits, caller):
    if not isinstance(splits, (list, tuple)) or not all(type(s) is int and s >= 0 for s in splits) or not splits:
        raise ValueError(f"{caller}: splits must be a list of non-negative ints, one per rank of the group, got "
                         f"{splits!r}")
    return tuple(splits)


record.declare("reduce_scatter_v", reduce_scatter_v, reference.reduce_scatter_v,
               "uneven splits: elements of the reduction to each rank by its count", "reduce_scatter_v",
               process_group=("reduce_scatter",))
