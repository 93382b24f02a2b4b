"""all_gather: ``out = cat([inp of every rank], dim=0)`` on every rank (torch's all_gather_into_tensor).

Push: each rank stores its input straight into slot ``group_index`` of every member's ``out``.

    barrier (every out is free)  ->  put inp into out[me] of every rank  ->  barrier (every slot has landed)
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.device.group import first_block, program_row, store_to_group, tail_mask
from iris.device.sync import call_match, group_barrier, open_call
from iris.host import launches
from iris.host.memory.overlap import check_apart
from iris.host.distributed import Context


@triton.jit
def _all_gather_kernel(out, inp, n, sync, GROUP_SIZE: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((out, tables[1]),))  # peers write out (iris/device/sync.py)
    row = program_row(flags, world_size)
    # no rank still uses its out
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        slot = out + tl.cast(group_index, tl.int64) * n  # 64-bit: past 2**31 elements from the third rank's slot on
        for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
            offs = tl.arange(0, BLOCK)
            mask = tail_mask(start, n, BLOCK)
            x = tl.load(inp + start + offs, mask=mask)  # [BLOCK]
            store_to_group(slot + start + offs, x, rank, tables[1], members, group_index, GROUP_SIZE, mask=mask,
                           hint=HINT)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every rank's slot has landed in out


def all_gather(ctx: Context, out: torch.Tensor, inp: torch.Tensor, group: dist.ProcessGroup | None = None,
               async_op: bool = False, config: common.AnyConfig | None = None) -> common.Work | None:
    """``out`` (``[group_size * n, ...]``, on the heap) receives every rank's ``inp`` (``[n, ...]``, anywhere)
    in rank order along dim 0. ``inp`` may be this rank's slot of ``out`` (in place).

    Collective over ``group``; stream-ordered; graph-capturable after a first call.

        ref = torch.cat([inp_r for r in group], dim=0)

    Raises ``ValueError`` for operands that share bytes (but in the in-place form), operands of other sizes or dtypes or
    an ``out`` off the heap; ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once
    a peer has failed.

    Example::

        inp = ctx.full((4,), float(rank))
        out = ctx.zeros(world_size * 4)
        ctx.ccl.all_gather(out, inp)  # rank r's 4 elements land at out[4 * r:4 * r + 4] on every rank
        assert torch.equal(out, torch.arange(world_size).repeat_interleave(4).float())
    """
    caller = "ccl.all_gather"
    key = launches.key_of(caller, group, config, (out, inp))
    if ctx.launches.run(ctx, key, group, config, (out, inp)):  # iris/host/launches.py
        return common.done(ctx, async_op)
    common.precheck(caller, group, config, (out, inp))
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    n = inp.numel()
    p = common.plan(ctx, caller, n, group, config)
    common.expect_numel(out, p.sync.size * n, caller, "out", f"group size {p.sync.size} * inp.numel() {n}")
    check_apart(caller, inp, "inp", out, "out", f"use a separate inp, or this rank's slot out[{p.sync.index} * "
                f"{n}:][:{n}] of out itself for an in-place call", inside=p.sync.index * n)
    outs = ctx.symmetric_table(out, caller, "out")
    # A slot starts at group_index * n elements: 16-byte aligned only when n keeps it so.
    hint = common.vector_hint(out, inp) if (n * inp.element_size()) % 16 == 0 else None
    fp = common.fingerprint(ctx, caller, (out, inp), p.config.use_gluon and p.config.gluon_path, launch=p.launch,
                            sync=p.sync)
    if p.config.use_gluon:
        from iris.ccl.gluon import all_gather, all_gather_tma

        if p.config.gluon_path == "tma" and n:
            if outs is not ctx.heap_bases:
                raise ValueError(f"{caller}: gluon_path='tma' writes through descriptors of the heap's peers, so out "
                                 "must be on the heap; use gluon_path='registers' for memory of another provider")
            all_gather_tma.launch(ctx, out_flat, inp_flat, n, p, fp)
        else:
            all_gather.launch(ctx, out_flat, inp_flat, n, p, hint, fp, (ctx.heap_bases, outs))
        return common.done(ctx, async_op)
    launch = launches.Launch(_all_gather_kernel, p.grid, (n, p.sync.args(ctx, fp, (ctx.heap_bases, outs))),
                             dict(GROUP_SIZE=p.sync.size, HINT=hint, BLOCK=p.block, num_warps=p.warps))
    ctx.launches.put(key, group, config, launch, symmetric=((0, out.numel() * out.element_size(), outs),))(
        out_flat, inp_flat)
    return common.done(ctx, async_op)


record.declare("all_gather", all_gather, reference.all_gather, "every rank gets every rank's input, in rank order",
               "all_gather", aliases=("all_gather_into_tensor",), gluon=True,
               process_group=("all_gather_single", "all_gather_single_coalesced"), compile_op="all_gather")
