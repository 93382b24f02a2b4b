"""all_reduce_rmsnorm: the all-reduce, residual add and RMSNorm that end every tensor-parallel decoder block.

    residual_out = sum over ranks of inp + residual
    out          = residual_out * rsqrt(mean(residual_out ** 2 over the hidden dim) + eps) * weight

One kernel, one-shot, one program per row (a token's hidden vector) and a grid of at most 64 programs that
stride over the rows:

    barrier (inputs ready) | for each of our rows: sum every rank's row in fp32, + residual -> residual_out,
                           | normalise the fp32 sum in registers -> out | barrier (inputs free)

A row lives in one program's registers, so the sum of squares is taken from them: the inputs are read once,
no program waits for another of its rank, and the norm costs what the residual and weight loads cost. Program p synchronises only with program p of
the other ranks, as in the one-shot ``all_reduce`` (the same relaxed barriers, the same rows of the group's
flags), so no program waits for another program of its own rank.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl import common, record, reference
from iris.device.group import program_row, reduce_from_group
from iris.device.sync import call_match, group_barrier, open_call
from iris.host import launches
from iris.host.memory.overlap import check_apart
from iris.host.distributed import Context

# A row is held whole in one program's registers: 32768 fp32 values over 16 warps are 64 per thread.
MAX_HIDDEN = 32768
NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _all_reduce_rmsnorm_kernel(out, residual_out, inp, residual, weight, rows, hidden, eps, sync,
                               GROUP_SIZE: tl.constexpr, HINT: tl.constexpr, BLOCK_H: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((inp, tables[0]),))  # peers read inp (iris/device/sync.py)
    row_flags = program_row(flags, world_size)
    # every input is ready
    if open_call(row_flags, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        cols = tl.arange(0, BLOCK_H)
        mask = cols < hidden
        w = tl.load(weight + cols, mask=mask, other=0.0).to(tl.float32)  # [BLOCK_H] fp32
        for row in range(tl.program_id(0), rows, tl.num_programs(0)):
            offs = tl.cast(row, tl.int64) * hidden + cols  # 64-bit: rows * hidden may pass 2**31 in prefill
            # ---- all-reduce: every rank's row, summed in fp32, plus our residual
            acc = reduce_from_group(inp, offs, mask, tables[0], members, rank, group_index, GROUP_SIZE, "sum", True,
                                    HINT)  # [BLOCK_H] fp32
            acc += tl.load(residual + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(residual_out + offs, acc.to(residual_out.dtype.element_ty), mask=mask)
            # ---- RMSNorm of the unrounded sum
            acc = tl.where(mask, acc, 0.0)
            inv_rms = tl.rsqrt(tl.sum(acc * acc, axis=0) / hidden + eps)
            tl.store(out + offs, (acc * inv_rms * w).to(out.dtype.element_ty), mask=mask)
        # no rank reads our inp
        group_barrier(row_flags, heap_bases, members, rank, GROUP_SIZE, RELAXED=True, call=match)


def all_reduce_rmsnorm(ctx: Context, out: torch.Tensor, residual_out: torch.Tensor, inp: torch.Tensor,
                       residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                       group: dist.ProcessGroup | None = None,
                       config: common.AnyConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum ``inp`` over the ranks of ``group``, add ``residual``, RMS-normalise each row over the last (hidden)
    dim and scale by ``weight``; returns ``(out, residual_out)``.

    ``inp``, ``residual``, ``residual_out`` and ``out`` are [..., hidden] of one float dtype, contiguous;
    ``weight`` is [hidden]. ``inp`` must be on the symmetric heap (peers read it); the others may be anywhere.
    ``residual_out`` may be ``residual`` and ``out`` may be ``residual`` (each row is read before it is
    written), but neither may be ``inp``. The sum, the add and the norm run in fp32; each output is rounded
    once, and the norm uses the unrounded sum. Collective over ``group``; stream-ordered; graph-capturable
    after a first call. One kernel of at most 64 programs (``config.comm_sms``).

        residual_out = sum(inp_r for r in group) + residual          # see iris/ccl/reference.py
        out = residual_out * rsqrt(mean(residual_out ** 2, -1) + eps) * weight

    Raises ``ValueError`` for operands of other shapes or dtypes (float16, bfloat16 or float32, all alike), a ``weight``
    that is not ``[hidden]``, a hidden size outside ``[1, 32768]``, an ``out`` or ``residual_out`` that shares bytes
    with ``inp``, ``weight`` or the other output, a negative ``eps`` or an ``inp`` off the heap; ``iris.MismatchError``
    on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        inp = ctx.full((4, 64), 1.0)  # [tokens, hidden], on the heap
        residual, weight = ctx.zeros(4, 64), ctx.ones(64)
        out, residual_out = ctx.ccl.all_reduce_rmsnorm(ctx.empty(4, 64), ctx.empty(4, 64), inp, residual, weight)
        assert torch.all(residual_out == world_size)  # 1 from every rank, + 0
        assert torch.allclose(out, torch.ones_like(out))  # a constant row normalises to ones
    """
    caller = "ccl.all_reduce_rmsnorm"
    key = launches.key_of(caller, group, config, (out, residual_out, inp, residual, weight), eps)
    if ctx.launches.run(ctx, key, group, config, (out, residual_out, inp, residual, weight)):  # iris/host/launches.py
        common.done(ctx, False)
        return out, residual_out
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{caller}: eps={eps!r} must be a number >= 0 (RMSNorm adds it to the mean square)")
    tensors = dict(out=out, residual_out=residual_out, inp=inp, residual=residual)
    common.precheck(caller, group, config, tuple(tensors.values()) + (weight,), float(eps))
    for name, t in tensors.items():
        common.flat(t, caller, name)
        if t.dtype not in NORM_DTYPES:
            raise ValueError(f"{caller}: {name} has dtype {t.dtype}; use float16, bfloat16 or float32")
        if t.shape != inp.shape:
            raise ValueError(f"{caller}: {name} is {tuple(t.shape)} but inp is {tuple(inp.shape)}; they must match")
        if t.dtype != inp.dtype:
            raise ValueError(f"{caller}: {name} has dtype {t.dtype} but inp has {inp.dtype}; they must match")
    if inp.dim() == 0:
        raise ValueError(f"{caller}: inp must have a hidden dim, got a 0-d tensor; pass [tokens, hidden]")
    hidden = inp.shape[-1]
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"{caller}: hidden size {hidden} is outside [1, {MAX_HIDDEN}] (a row is held in one "
                         "program's registers); normalise in slices of at most that")
    common.flat(weight, caller, "weight")
    if weight.shape != (hidden,) or not weight.dtype.is_floating_point:
        raise ValueError(f"{caller}: weight is {tuple(weight.shape)} {weight.dtype}, expected ({hidden},) of a "
                         "float dtype (one scale per hidden element)")
    # What each output may share: residual itself (each row is read before it is written), nothing else it reads
    # (inp, which peers read too; weight, which every row reads) and not the other output.
    for name in ("out", "residual_out"):
        for other in ("inp", "weight", "residual") + (("out",) if name == "residual_out" else ()):
            check_apart(caller, tensors[name], name, weight if other == "weight" else tensors[other], other,
                        "use a separate tensor (out and residual_out may each be residual)",
                        inside=0 if other == "residual" else None)
    ins = ctx.symmetric_table(inp, caller, "inp")
    rows = inp.numel() // hidden
    resolved = common.resolve_config(config, caller)
    sync = ctx.group_sync(group, caller)
    on_cpu = ctx.get_device().type == "cpu"
    block_h = triton.next_power_of_2(hidden)
    # 8 warps hold a 4096-wide row as 16 values a thread (two 16-byte bf16 loads per rank)
    warps = resolved.num_warps or (4 if on_cpu else min(16, max(4, block_h // 512)))
    programs = max(1, min(rows, resolved.comm_sms or (4 if on_cpu else 64)))
    hint = common.vector_hint(out, residual_out, inp, residual) if hidden % 16 == 0 else None
    fp = common.fingerprint(ctx, caller, (out, residual_out, inp, residual, weight), float(eps),
                            launch=dict(programs=programs), sync=sync)
    if rows:
        launch = launches.Launch(_all_reduce_rmsnorm_kernel, (programs,), (rows, hidden, float(eps),
                                                                          sync.args(ctx, fp, (ins, ins))),
                                 dict(GROUP_SIZE=sync.size, HINT=hint, BLOCK_H=block_h, num_warps=warps))
        ctx.launches.put(key, group, config, launch, symmetric=((2, inp.numel() * inp.element_size(), ins),))(
            out, residual_out, inp, residual, weight)
    common.done(ctx, False)
    return out, residual_out


record.declare("all_reduce_rmsnorm", all_reduce_rmsnorm, reference.all_reduce_rmsnorm,
               "all_reduce, residual add and RMSNorm in one kernel", "all_reduce_rmsnorm")
