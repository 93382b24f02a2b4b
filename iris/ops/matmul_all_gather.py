"""matmul_all_gather (the paper's GEMM + All-Scatter): ``out = cat_r(A @ B_r, dim=1)`` on every rank.

Fused sequential schedule: each output tile is stored into every rank's ``out`` as soon as it is computed,
so the link carries tile i while the tensor cores work on tile i + 1. When the tiles do not fill the last
wave by half or more, its tiles' K steps are shared evenly by the programs (stream-K, ``gemm.split_tail``).

    program p:  barrier(out free) | tile -> C tile -> store to rank 0..W-1 | tile -> ... | its share of the
                last wave's K steps (partials summed by each tile's last program, which stores it) | barrier

By default on pairs of GPUs (``OpsConfig.copy_engine``) the tiles finished before the last wave are stored into
our own ``out`` only and counted per band (``group_m`` tile rows by a few MB of tile columns,
``copy_schedule.BAND_BYTES``); a side stream copies each band to the peers
once its count is full (``iris/host/copy_engine/queue.py``), so the SMs spend no time on those transfers. The last
wave's tiles still leave from the SMs, which then have nothing else to do.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl.common import fingerprint
from iris.device.group import program_row, store_to_group
from iris.device.sync import call_match, count_published, group_barrier, open_call
from iris.device.tracing import OP_GEMM_TILE, OP_SCATTER_TILE, now, record
from iris.host import launches
from iris.host.distributed import Context
from iris.host.groups import MAX_COMM_PROGRAMS
from iris.ops import common, reference
from iris.ops.config import AnyOpsConfig
from iris.ops.record import declare
from iris.ops.upstream_layouts import is_row_sharded, matmul_all_gather_rows
from iris.host.copy_engine.schedule import CopySchedule, bands_before, copy_sms, output_bands
from iris.ops.gemm import (add_partials, band_of, corner, descriptors_fit, first_unit, leading_operands,
                             leave_partial, mainloop, num_programs, operand_maker, split_tail, stream_program,
                             stream_share, strides, tile_coords)


@triton.jit
def _scatter_tile(acc, pid_m, pid_n, out, out_strides, M, N_local, sync, trace, t_send, engines,
                  GROUP_SIZE: tl.constexpr, TILE: tl.constexpr, VEC: tl.constexpr, TRACE: tl.constexpr,
                  BY_ENGINE: tl.constexpr, WARPS: tl.constexpr):
    """The finished tile lands in our column block of every rank's ``out``: from registers into each rank's, or
    (``BY_ENGINE``) into ours alone, counted (once per warp) on its band (``band_of``), which the copy engines
    carry to the peers once the count is full."""
    BLOCK_M: tl.constexpr = TILE[0]
    BLOCK_N: tl.constexpr = TILE[1]
    _, heap_bases, members, rank, group_index, _, _, tables, _ = sync
    stride_om, stride_on = out_strides
    tile_out = acc.to(out.dtype.element_ty)  # [BLOCK_M, BLOCK_N]
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (pid_m * BLOCK_M + rows[:, None] < M) & (pid_n * BLOCK_N + cols[None, :] < N_local)
    ptrs = corner(out, pid_m * BLOCK_M, group_index * N_local + pid_n * BLOCK_N, stride_om, stride_on) + \
        rows[:, None] * stride_om + cols[None, :] * stride_on
    if BY_ENGINE:
        band_counts, band_cols, _ = engines
        tl.store(ptrs, tile_out, mask=mask)
        count_published(band_counts + band_of(pid_m, pid_n, tl.cdiv(N_local, BLOCK_N), TILE[3], band_cols), WARPS)
    else:
        store_to_group(ptrs, tile_out, rank, tables[1], members, group_index, GROUP_SIZE, mask=mask,
                       hint=(1, VEC))
        if TRACE:  # (a traced call takes the SM stores unless told otherwise)
            # target -1: every rank; bytes: the tile once per rank (a masked edge tile counted whole)
            tile_bytes = BLOCK_M * BLOCK_N * out.dtype.element_ty.primitive_bitwidth // 8
            record(trace, OP_SCATTER_TILE, -1, GROUP_SIZE * tile_bytes, t_send, rank)


@triton.jit
def _whole_tile(tile, a, b, out, strides, shape, sync, trace, engines, GROUP_SIZE: tl.constexpr,
                TILE: tl.constexpr, VEC: tl.constexpr, TRACE: tl.constexpr, TMA: tl.constexpr,
                BY_ENGINE: tl.constexpr, WARPS: tl.constexpr):
    """One output tile of A @ B_local, its whole K loop, then its scatter."""
    M, N_local, K = shape
    rank = sync[3]
    if TRACE:
        t_gemm = now(trace)
    pid_m, pid_n = tile_coords(tile, tl.cdiv(M, TILE[0]), tl.cdiv(N_local, TILE[1]), TILE[3])
    acc = mainloop(a, b, strides, M, N_local, K, pid_m, pid_n, TILE, TMA=TMA)  # [BLOCK_M, BLOCK_N] fp32
    t_send = 0
    if TRACE:
        record(trace, OP_GEMM_TILE, rank, 0, t_gemm, rank)
        t_send = now(trace)
    _scatter_tile(acc, pid_m, pid_n, out, strides[2], M, N_local, sync, trace, t_send, engines, GROUP_SIZE, TILE,
                  VEC, TRACE, BY_ENGINE, WARPS)


@triton.jit
def _stream_k(a, b, out, strides, shape, sync, trace, stream_k, engines, GROUP_SIZE: tl.constexpr,
              TILE: tl.constexpr, VEC: tl.constexpr, TRACE: tl.constexpr, TMA: tl.constexpr, WARPS: tl.constexpr):
    """The tiles from ``full`` on, stream-K (``stream_k`` = (partials, part_flags, full, stream)): our even share
    (of ``stream`` programs) of their K steps, tile after tile. A share that ends inside a tile leaves that part as
    a partial (in slot p), computed first; each tile whose last step is ours is finished here, with the partials of
    the programs before us that hold its earlier steps, and scattered from the SMs."""
    M, N_local, K = shape
    partials, part_flags, full, stream = stream_k
    rank = sync[3]
    p = tl.program_id(0)
    num_pid_m = tl.cdiv(M, TILE[0])
    num_pid_n = tl.cdiv(N_local, TILE[1])
    k_iters = tl.cdiv(K, TILE[2])
    tail_steps = (num_pid_m * num_pid_n - full) * k_iters
    first, stop = stream_share(p, stream, tail_steps)
    if (stop % k_iters != 0) & (stop > first):
        j = stop // k_iters
        pid_m, pid_n = tile_coords(full + j, num_pid_m, num_pid_n, TILE[3])
        acc = mainloop(a, b, strides, M, N_local, K, pid_m, pid_n, TILE, TMA=TMA,
                       k_first=tl.maximum(first - j * k_iters, 0), k_stop=stop - j * k_iters)
        leave_partial(acc, p, partials, part_flags, TILE[0], TILE[1])
    for j in range(first // k_iters, stop // k_iters):
        if TRACE:
            t_gemm = now(trace)
        pid_m, pid_n = tile_coords(full + j, num_pid_m, num_pid_n, TILE[3])
        acc = mainloop(a, b, strides, M, N_local, K, pid_m, pid_n, TILE, TMA=TMA,
                       k_first=tl.maximum(first - j * k_iters, 0))
        acc = add_partials(acc, stream_program(j * k_iters, stream, tail_steps), p, partials, part_flags, rank,
                           TILE[0], TILE[1])
        t_send = 0
        if TRACE:
            record(trace, OP_GEMM_TILE, rank, 0, t_gemm, rank)
            t_send = now(trace)
        _scatter_tile(acc, pid_m, pid_n, out, strides[2], M, N_local, sync, trace, t_send, engines, GROUP_SIZE,
                      TILE, VEC, TRACE, False, WARPS)


@triton.jit
def _matmul_all_gather_kernel(a, b, out, strides, shape, sync, trace, stream_k, engines, GROUP_SIZE: tl.constexpr,
                              TILE: tl.constexpr, VEC: tl.constexpr, TRACE: tl.constexpr, TMA: tl.constexpr,
                              COPY_ENGINE: tl.constexpr, WARPS: tl.constexpr):
    # shape: (M, N_local, K); sync: the group's (flags, heap_bases, members, rank, group_index, world_size);
    # stream_k: (partials, part_flags, full, stream); engines: (band_counts, band_cols, engine_tiles)
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync
    match = call_match(sync, ((out, tables[1]),))  # peers write out (iris/device/sync.py)
    M, N_local, K = shape
    full = stream_k[2]
    engine_tiles = engines[2]
    row = program_row(flags, world_size)
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:  # every rank's out is free to write
        tiles = tl.cdiv(M, TILE[0]) * tl.cdiv(N_local, TILE[1])
        p = tl.program_id(0)
        programs = tl.num_programs(0)
        # ---- whole tiles: compute one tile of A @ B_local, scatter it, next. Flattened, the compiler pipelines
        # across tiles: the next tile's first operand loads are in flight while this one's stores go out (a traced
        # call runs unflattened: Triton 3.6 fails to fuse the nest with the records). With
        # COPY_ENGINE the tiles before ``engine_tiles`` (whole bands) are the copy engines' to carry, in a loop of
        # their own: a branch between the two kinds of tile inside one flattened loop fails to compile (Triton 3.6).
        first = p
        if COPY_ENGINE:
            for tile in tl.range(p, engine_tiles, programs, flatten=not TRACE):
                _whole_tile(tile, a, b, out, strides, shape, sync, trace, engines, GROUP_SIZE, TILE, VEC, TRACE, TMA,
                            True, WARPS)
            first = first_unit(p, programs, engine_tiles)
        for tile in tl.range(first, full, programs, flatten=not TRACE):
            _whole_tile(tile, a, b, out, strides, shape, sync, trace, engines, GROUP_SIZE, TILE, VEC, TRACE, TMA, False,
                        WARPS)
        # ---- the last wave, stream-K (split_tail)
        if full < tiles:
            _stream_k(a, b, out, strides, shape, sync, trace, stream_k, engines, GROUP_SIZE, TILE, VEC, TRACE, TMA,
                      WARPS)
        # every rank's tiles stored from its SMs have landed in our out (those the copy engines carry, the host's
        # streams wait for)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)


def matmul_all_gather(ctx: Context, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                      bias: torch.Tensor | None = None, group: dist.ProcessGroup | None = None,
                      config: AnyOpsConfig | None = None) -> torch.Tensor:
    """Two shardings, told apart by shape (``upstream_layouts.py``); ``out`` [M, N] on the heap:

    - upstream Iris's: ``A`` [M / W, K] this rank's row block, ``B`` [K, N] the same on every rank: ``out`` =
      ``cat([A_r @ B (+ bias_r[:, None]) for r in group], dim=0)``, bias one per row of A; run bulk-synchronous.
    - ours (the paper's GEMM + All-Scatter, fused): ``A`` [M, K] the same on every rank, ``B`` [K, N / W] this
      rank's column block: ``out`` = ``cat([A @ B_r for r in group], dim=1) (+ bias)``, bias one per column.

    Collective; stream-ordered.

        ref = torch.cat([A @ B_r for r in group], dim=1) + bias      # ours
        ref = torch.cat([A_r @ B for r in group], dim=0)             # upstream's

    Raises ``ValueError`` for an ``out`` that shares bytes with ``A``, ``B`` or ``bias``, operands that are not 2-D, of
    other dtypes (float16, bfloat16 or float32, all alike), devices or shapes, an ``out`` off the heap, a ``bias`` of
    another shape, or ``variant="fused"`` where the fused kernel cannot run; ``TypeError`` for a ``config`` that is
    neither ``OpsConfig`` nor ``FusedConfig``; ``NotImplementedError`` from ``ctx.ops`` across nodes;
    ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        A, B = ctx.randn(64, 32), ctx.randn(32, 32)  # the whole operands: the same on every rank here
        out = ctx.empty(64, 32)  # on the heap
        ctx.ops.matmul_all_gather(out, A, B.chunk(world_size, dim=1)[rank])  # this rank's columns of B
        assert torch.allclose(out, A @ B, atol=1e-2)
    """
    caller, given = "ops.matmul_all_gather", config  # config is resolved below; the key holds the object passed
    common.bias_apart(caller, out, bias)
    key = common.launch_key(ctx, caller, group, given, (out, a, b))
    if ctx.launches.run(ctx, key, group, given, (out, a, b)):  # a remembered launch (iris/host/launches.py)
        return common.add_bias(ctx, out, bias, caller)
    config = common.resolve_config(config, caller)
    if is_row_sharded(out, a, b, ctx.group_sync(group, caller).size):
        return matmul_all_gather_rows(ctx, out, a, b, bias, group, config, caller)
    common.check_operands(caller, out, a, b)
    outs = ctx.symmetric_table(out, caller, "out")  # the heap's, or another provider's (the SMs store there then)
    sync = ctx.group_sync(group, caller)
    M, K = a.shape
    n_local = b.shape[1]
    common.expect_shape(caller, "out", out, (M, sync.size * n_local), f"[M, group size {sync.size} * B columns]")
    if out.numel() == 0:  # M or N is 0 on every rank (the shapes agree): nothing to compute or send
        return common.add_bias(ctx, out, bias, caller)
    block_m, block_n, block_k = config.blocks(ctx.get_device().type, a.dtype)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(n_local, block_n)
    sent = (sync.size - 1) * M * n_local * out.element_size()
    if not common.choose_fused(caller, config, ctx, tiles, comm_bytes=sent, flops=2 * M * n_local * K):
        # GEMM into our slot of a [W, M, N / W] workspace, all_gather it in place, then lay the slots side by side.
        gathered = ctx.workspaces.get("matmul_all_gather", sync.ranks, (sync.size, M, n_local), a.dtype)
        common.bulk_gemm(gathered[sync.index], a, b, config)
        ctx.ccl.all_gather(gathered, gathered[sync.index], group=group)
        out.view(M, sync.size, n_local).copy_(gathered.permute(1, 0, 2))
        return common.add_bias(ctx, out, bias, caller)
    tma = descriptors_fit(a, b)
    engines = (config.uses_copy_engine(out.device.type, sync.size, ctx.tracing.enabled, ctx.shares_gpu)
               and out.is_contiguous() and outs is ctx.heap_bases)
    programs = min(num_programs(ctx.get_device(), tiles, spare=copy_sms(ctx, engines), sms=ctx.get_agreed_cu_count()),
                   MAX_COMM_PROGRAMS)
    full, stream = split_tail(tiles, programs, triton.cdiv(K, block_k))
    # The tile order finishes the bands one after another; the copy engines carry those done before the last wave.
    band_cols, engine_bands = output_bands(config, M, n_local, block_m, block_n, out.element_size())
    engine_bands = bands_before(engine_bands, min(full, (tiles - 1) // programs * programs))
    copy_engine = engines and len(engine_bands) > 0
    slots = max(1, stream)  # a partial per program of the stream-K last wave
    partials = ctx.workspaces.get("matmul_all_gather.partials", sync.ranks, (slots, block_m, block_n),
                                  torch.float32)
    part_flags = ctx.workspaces.get("matmul_all_gather.part_flags", sync.ranks, (slots,), torch.int32,
                                    zero=True)
    band_counts = ctx.workspaces.get("matmul_all_gather.band_counts", sync.ranks, (len(engine_bands),),
                                         torch.int32, zero=True) if copy_engine else part_flags
    schedule = None
    if copy_engine:
        # made (zeroed) before the kernel, whose opening barrier keeps peers from raising them before that
        sent = ctx.workspaces.peer_flags("matmul_all_gather.sent", sync.ranks, 1)  # row i: member i's block
        schedule = CopySchedule(ctx, sync, caller)
        schedule.send_bands(out, engine_bands, band_counts, sent, config.num_warps,
                            col_offset=sync.index * n_local)  # our column block
    described = fingerprint(ctx, caller, (a, b, out), launch=dict(programs=programs, tile=(block_m, block_n, block_k),
                                                                  group_m=config.group_m,
                                                                  engine_bands=len(engine_bands) if copy_engine else 0),
                            sync=sync)
    launch = launches.OperandLaunch(
        _matmul_all_gather_kernel, (programs,),
        (strides(a, b, out), (M, n_local, K), sync.args(ctx, described, (ctx.heap_bases, outs)),
         ctx.tracing.device_args(), (partials, part_flags, full, stream),
         (band_counts, band_cols, sum(band.tiles for band in engine_bands))),
        dict(GROUP_SIZE=sync.size, TILE=(block_m, block_n, block_k, config.group_m),
             VEC=common.row_vector_width(out, n_local), TRACE=ctx.tracing.enabled, TMA=tma, COPY_ENGINE=copy_engine,
             WARPS=config.num_warps, num_warps=config.num_warps, num_stages=config.stages()),
        leading_operands(operand_maker((block_m, block_k), tma), operand_maker((block_k, block_n), tma)))
    if schedule:  # the copy engines' queue is per call: never remembered
        with schedule.launch(band_counts):
            launch(out, a, b)
        schedule.join(arrived=sent)
    else:
        common.remember(ctx, key, group, given, launch, sync,
                        ("matmul_all_gather.partials", "matmul_all_gather.part_flags"),
                        symmetric=((0, common.span_bytes(out), outs),))(out, a, b)
    return common.add_bias(ctx, out, bias, caller)


declare("matmul_all_gather", matmul_all_gather, reference.matmul_all_gather,
        "A times each rank's column block of B, gathered along the columns (out on the heap)",
        "A [M, K], B [K, N / W], out [M, N]", compile_op="matmul_all_gather")
