"""The rooted collectives and point-to-point: broadcast, scatter, gather, reduce, send / recv.

They are one idea (a root moves data to or from the others; every rank pulls what it needs), so they share
this file and two kernels:

    _pull_from_root_kernel  barrier (root's data ready) -> non-roots read it -> barrier (root's data free)
                            broadcast, scatter, and send/recv (a group of the two ranks, the sender as root)
    _root_pulls_kernel      barrier (every input ready) -> the root reads every rank, gathers or reduces
                            -> barrier (inputs free)
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.device.group import first_block, program_row, reduce_from_group, tail_mask
from iris.device.rma import get
from iris.device.sync import call_match, group_barrier, open_call
from iris.host.memory.overlap import check_apart
from iris.host.distributed import Context


@triton.jit
def _pull_from_root_kernel(dst, src, anchor, n, root, root_index, sync, GROUP_SIZE: tl.constexpr,
                           ROOT_COPIES: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((anchor, tables[0]),))  # peers read the root's src (iris/device/sync.py)
    row = program_row(flags, world_size)
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:  # the root's data is ready
        if group_index != root_index:
            for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
                offs = tl.arange(0, BLOCK)
                get(src + start + offs, dst + start + offs, rank, root, tables[0], mask=tail_mask(start, n, BLOCK),
                    hint=HINT)
        elif ROOT_COPIES:  # scatter: the root's own slice
            for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
                offs = tl.arange(0, BLOCK)
                mask = tail_mask(start, n, BLOCK)
                tl.store(dst + start + offs, tl.load(src + start + offs, mask=mask), mask=mask)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # nobody still reads the root's data


@triton.jit
def _root_pulls_kernel(out, inp, n, root_index, sync, GROUP_SIZE: tl.constexpr, REDUCE: tl.constexpr, OP: tl.constexpr,
                       ACC_FP32: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((inp, tables[0]),))  # the root reads inp (iris/device/sync.py)
    row = program_row(flags, world_size)
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:  # every input is ready
        if group_index == root_index:
            for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
                offs = tl.arange(0, BLOCK)
                mask = tail_mask(start, n, BLOCK)
                if REDUCE:
                    acc = reduce_from_group(inp + start, offs, mask, tables[0], members, rank, group_index,
                                            GROUP_SIZE, OP, ACC_FP32, HINT)  # [BLOCK]
                    tl.store(out + start + offs, acc.to(out.dtype.element_ty), mask=mask)
                else:
                    for i in range(GROUP_SIZE):
                        peer = tl.load(members + i)
                        get(inp + start + offs, out + i * tl.cast(n, tl.int64) + start + offs, rank, peer,
                            tables[0], mask=mask, hint=HINT)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # nobody still reads an input


def _root_index(sync, root, caller, name):
    if isinstance(root, bool) or not isinstance(root, int):  # broadcast(tensor, src): the root is a rank number
        raise TypeError(f"{caller}: {name} must be a rank (an int), got {type(root).__name__}; the signature is "
                        f"{caller.split('.')[-1]}(..., {name}=rank)")
    if root not in sync.ranks:
        raise ValueError(f"{caller}: {name}={root!r} is not a rank of the group {sync.ranks}")
    return sync.ranks.index(root)


def _pull(ctx, caller, dst, src, n, root, group, config, async_op, call, anchor, table, sync=None):
    """``dst`` on every rank of the group becomes the root's ``src`` (``n`` elements); ``call``: ``(name, tensors,
    extra)`` that the fingerprint hashes; ``anchor``: the symmetric tensor ``src`` lies in, at one offset of its
    allocation on every rank, and ``table`` its bases table."""
    p = common.plan(ctx, caller, n, group, config, sync=sync)
    root_index = _root_index(p.sync, root, caller, "src")
    name, tensors, extra = call
    fp = common.fingerprint(ctx, name, tensors, *extra, launch=p.launch, sync=p.sync)
    _pull_from_root_kernel[p.grid](dst, src, anchor, n, root, root_index, p.sync.args(ctx, fp, (table, table)),
                                   GROUP_SIZE=p.sync.size, ROOT_COPIES=dst.data_ptr() != src.data_ptr(), HINT=common.vector_hint(dst, src),
                                   BLOCK=p.block, num_warps=p.warps)
    return common.done(ctx, async_op)


def broadcast(ctx: Context, tensor: torch.Tensor, src: int = 0, group: dist.ProcessGroup | None = None,
              async_op: bool = False, config: common.AnyConfig | None = None) -> common.Work | None:
    """``tensor`` (on the heap) on every rank becomes ``src``'s ``tensor``; ``src`` is a global rank.
    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        ref = tensor_src

    Raises ``TypeError`` when ``src`` is not an int; ``ValueError`` when it is not a rank of the group, or for a
    ``tensor`` off the heap or of an unsupported dtype; ``iris.MismatchError`` on every rank when the ranks' calls
    differ (another ``src`` included); ``iris.PeerError`` once a peer has failed.

    Example::

        tensor = ctx.full((8,), float(rank))
        ctx.ccl.broadcast(tensor, src=0)
        assert torch.all(tensor == 0)  # rank 0's values, on every rank
    """
    caller = "ccl.broadcast"
    common.precheck(caller, group, config, (tensor,), src)
    flat = common.flat(tensor, caller, "tensor")
    table = ctx.symmetric_table(tensor, caller, "tensor")
    return _pull(ctx, caller, flat, flat, flat.numel(), src, group, config, async_op, (caller, (tensor,), (src,)), flat,
                 table)


def scatter(ctx: Context, out: torch.Tensor, inp: torch.Tensor, src: int = 0, group: dist.ProcessGroup | None = None,
            async_op: bool = False, config: common.AnyConfig | None = None) -> common.Work | None:
    """Rank r's ``out`` (``[n, ...]``) becomes slice r along dim 0 of ``src``'s ``inp`` (``[group_size * n,
    ...]``). ``inp`` is read on ``src`` only, but must be a heap tensor on every rank (allocated collectively, so
    it sits at the same offset everywhere). Collective; stream-ordered; graph-capturable after a first call.

        ref_r = inp_src.chunk(group_size)[r]

    Raises ``TypeError`` when ``src`` is not an int; ``ValueError`` when it is not a rank of the group, for operands
    of other sizes or dtypes, a dim 0 the group size does not divide or an ``inp`` off the heap;
    ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.arange(world_size * 4, dtype=torch.float32)  # read on rank 0 only, allocated on every rank
        out = ctx.empty(4)
        ctx.ccl.scatter(out, inp, src=0)
        assert torch.equal(out, torch.arange(4 * rank, 4 * rank + 4).float())
    """
    caller = "ccl.scatter"
    common.precheck(caller, group, config, (out, inp), src)
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    sync = ctx.group_sync(group, caller)
    n = common.split_rows(inp, sync.size, caller, "inp")
    common.expect_numel(out, n, caller, "out", f"inp.numel() / group size {sync.size}")
    common.in_place(caller, out, inp, sync.index * n, n)
    table = ctx.symmetric_table(inp, caller, "inp")
    mine = inp_flat[sync.index * n:]
    return _pull(ctx, caller, out_flat, mine, n, src, group, config, async_op, (caller, (out, inp), (src,)), inp_flat,
                 table)


def _root_pulls(ctx, caller, out, inp, dst, group, config, async_op, op=None):
    common.precheck(caller, group, config, (out, inp), dst, op)
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    n = inp.numel()
    p = common.plan(ctx, caller, n, group, config)
    root_index = _root_index(p.sync, dst, caller, "dst")
    expected = n if op else p.sync.size * n
    common.expect_numel(out, expected, caller, "out", "inp.numel()" if op else f"group size {p.sync.size} * "
                        f"inp.numel() {n}")
    if op:  # the root reads each element of every inp before it writes that element of out
        common.in_place(caller, out, inp)
    else:  # the root pulls every rank's inp from one heap offset, which a slot of out is on no two ranks
        check_apart(caller, inp, "inp", out, "out", "gather reads every rank's inp at the same heap offset, so inp "
                    "cannot be a slot of out; use a separate inp")
    table = ctx.symmetric_table(inp, caller, "inp")
    fp = common.fingerprint(ctx, caller, (inp,), dst, op, launch=p.launch, sync=p.sync)
    _root_pulls_kernel[p.grid](out_flat, inp_flat, n, root_index, p.sync.args(ctx, fp, (table, table)),
                               GROUP_SIZE=p.sync.size, REDUCE=op is not None, OP=op or "sum", ACC_FP32=common.accumulate_in_fp32(inp.dtype),
                               HINT=common.vector_hint(out, inp) if (n * inp.element_size()) % 16 == 0 else None,
                               BLOCK=p.block, num_warps=p.warps)
    return common.done(ctx, async_op)


def gather(ctx: Context, out: torch.Tensor, inp: torch.Tensor, dst: int = 0, group: dist.ProcessGroup | None = None,
           async_op: bool = False, config: common.AnyConfig | None = None) -> common.Work | None:
    """On ``dst``, ``out`` (``[group_size * n, ...]``) becomes every rank's ``inp`` (``[n, ...]``, on the heap)
    in rank order; ``out`` is untouched elsewhere. Collective; stream-ordered; graph-capturable.

        ref_dst = torch.cat([inp_r for r in group])

    Raises ``TypeError`` when ``dst`` is not an int; ``ValueError`` when it is not a rank of the group, for operands
    of other sizes or dtypes or an ``inp`` off the heap; ``iris.MismatchError`` on every rank when the ranks' calls
    differ; ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.full((4,), float(rank))
        out = ctx.full((world_size * 4,), -1.0)
        ctx.ccl.gather(out, inp, dst=0)
        if rank == 0:
            assert torch.equal(out, torch.arange(world_size).repeat_interleave(4).float())  # every inp, in rank order
        else:
            assert torch.all(out == -1)  # untouched
    """
    return _root_pulls(ctx, "ccl.gather", out, inp, dst, group, config, async_op)


def reduce(ctx: Context, out: torch.Tensor, inp: torch.Tensor, dst: int = 0, op: common.ReduceOp = "sum",
           group: dist.ProcessGroup | None = None, async_op: bool = False,
           config: common.AnyConfig | None = None) -> common.Work | None:
    """On ``dst``, ``out`` becomes ``op`` over every rank's ``inp`` (on the heap); ``out`` is untouched elsewhere.
    Collective; stream-ordered; graph-capturable. fp16/bf16 accumulate in fp32.

        ref_dst = reduce(op, [inp_r for r in group])

    Raises ``TypeError`` when ``dst`` is not an int; ``ValueError`` when it is not a rank of the group, for an
    unknown ``op``, operands of other sizes or dtypes or an ``inp`` off the heap; ``iris.MismatchError`` on every
    rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.full((8,), float(rank + 1))
        out = ctx.zeros(8)
        ctx.ccl.reduce(out, inp, dst=0, op="max")
        assert torch.all(out == (world_size if rank == 0 else 0))  # out is untouched but on dst
    """
    op = common.reduce_op(op, common.flat(inp, "ccl.reduce", "inp").dtype, "ccl.reduce")  # a non-tensor: TypeError
    return _root_pulls(ctx, "ccl.reduce", out, inp, dst, group, config, async_op, op=op)


def _pair(ctx, caller, peer):
    ctx.check_rank(peer, caller, "peer")
    if peer == ctx.cur_rank:
        raise ValueError(f"{caller}: rank {peer} cannot exchange with itself")
    return ctx.groups.get(sorted([ctx.cur_rank, peer]), caller)


def send(ctx: Context, tensor: torch.Tensor, dst: int, async_op: bool = False,
         config: common.AnyConfig | None = None) -> common.Work | None:
    """Make ``tensor`` (on the heap) available to ``dst``, which must call ``recv`` on the same heap tensor
    (same allocation, hence the same offset); returns to the stream once ``dst`` has copied it.
    Pairwise, not collective over the world; stream-ordered; graph-capturable.

    Raises ``ValueError`` when ``dst`` is this rank or outside ``[0, world_size)``, or for a ``tensor`` off the heap;
    ``iris.MismatchError`` on both ranks when the pair's calls differ (not a send met by a recv of the same tensor);
    ``iris.PeerError`` once a peer has failed.

    Example::

        tensor = ctx.full((16,), float(rank))  # one allocation: the same heap offset on both ranks
        if rank == 0:
            ctx.ccl.send(tensor, dst=1)
        elif rank == 1:
            ctx.ccl.recv(tensor, src=0)
            assert torch.all(tensor == 0)
    """
    return _point_to_point(ctx, "ccl.send", tensor, dst, ctx.cur_rank, config, async_op)


def recv(ctx: Context, tensor: torch.Tensor, src: int, async_op: bool = False,
         config: common.AnyConfig | None = None) -> common.Work | None:
    """Copy ``src``'s ``tensor`` (the same heap allocation ``src`` passes to ``send``) into ours. Pairwise, like
    ``send``; stream-ordered; graph-capturable.

    Raises ``ValueError`` when ``src`` is this rank or outside ``[0, world_size)``, or for a ``tensor`` off the heap;
    ``iris.MismatchError`` on both ranks when the pair's calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        tensor = ctx.full((16,), float(rank))  # one allocation: the same heap offset on both ranks
        if rank == 0:
            ctx.ccl.send(tensor, dst=1)
        elif rank == 1:
            ctx.ccl.recv(tensor, src=0)
            assert torch.all(tensor == 0)
    """
    return _point_to_point(ctx, "ccl.recv", tensor, src, src, config, async_op)


def _point_to_point(ctx, caller, tensor, peer, sender, config, async_op):
    """The receiver pulls from the sender, in a group of the two ranks: its own flags, so the other ranks are
    not involved."""
    flat = common.flat(tensor, caller, "tensor")
    table = ctx.symmetric_table(tensor, caller, "tensor")
    pair = _pair(ctx, caller, peer)
    call = ("ccl.send/recv", (tensor,), (sender,))  # alike on both ends
    return _pull(ctx, caller, flat, flat, flat.numel(), sender, None, config, async_op, call, flat, table, sync=pair)


record.declare("broadcast", broadcast, reference.broadcast, "the root's tensor to every rank", "broadcast",
               process_group=("broadcast",))
record.declare("scatter", scatter, reference.scatter, "slice r along dim 0 of the root's input to rank r", "scatter")
record.declare("gather", gather, reference.gather, "every rank's input to the root, in rank order", "gather")
record.declare("reduce", reduce, reference.reduce, "the reduction of every rank's input to the root", "reduce",
               process_group=("reduce",))
record.declare("send", send, reference.send_recv, "a heap tensor made available to one peer (pairs with recv)", "send",
               process_group=("send",))
record.declare("recv", recv, reference.send_recv, "a peer's heap tensor copied into ours (pairs with send)", "recv",
               process_group=("recv",))
