"""matmul_reduce_scatter and matmul_all_reduce: each rank holds a K-slice, the partial products are summed.

Fused schedule (one persistent kernel). The output rows are split into W row blocks; rank q owns block q.
Every rank computes its partial product for every tile and pushes those of peers' row blocks into a staging
slot on the owner's heap, stamped with a per-tile flag. A rank's own unit of a tile trails that tile's peer
units by ``lag`` tiles (``_unit``). For reduce_scatter the lag is two waves of tiles: its own unit of a tile
comes when the peers' partials for it have landed, so the epilogue only waits on the flags, sums its own and
the staged partials in fp32 in group order (each rounded to the staging dtype first, as they travel) and stores, while every wave mixes programs pushing partials with programs
adding them, so only part of the programs store to the link at a time. For all_reduce each tile's own unit
follows that tile's peer units (lag 0), and the finished tile is pushed to every rank's ``out``: a
reduce-scatter and an all-gather, both inside the GEMM, the all-gather spread over the whole kernel.
reduce_scatter raises the flag of a pushed partial after the program's next K loop, all_reduce right after the
stores (``_walk_order`` gives both choices and what they measured).

    rank q:  barrier | units (block d != q, tile t): partial -> staging[q] on d, flag[q, t] = call number
                     | units (block q, tile t): sum over s in group order of staging[s][t] (after flag[s, t]),
                       our own partial in place of staging[q][t]
                       -> out (all_reduce: push to every rank, barrier)

The units of all row blocks form one persistent loop, so the tiles of every block share the waves. Flags are
stamped with the call number (``call_epoch``), the same in every program of every rank. The bulk variant runs
the GEMM (cuBLAS on GPUs), then the Triton collective.

By default on pairs of GPUs (``OpsConfig.copy_engine``) both ops take every peer unit first and store those
partials in a local outbox instead, counted per band (``group_m`` tile rows by a few MB of tile columns,
``copy_schedule.BAND_BYTES``); a side stream copies each band into its owner's staging slot once the count is full
and raises the band's flag there (``iris/host/copy_engine/queue.py``), so the SMs spend no time on the link, and each
own unit waits on its band's flag.
all_reduce then stores its reduced tiles locally, counted per band too, and the side stream copies each band
into the peers' ``out``; only the walk's last wave, which finishes with the GEMM, is pushed from the SMs.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl.config import CollectiveConfig
from iris.ccl.common import fingerprint
from iris.device.group import program_row, store_to_group
from iris.device.atomics import atomic_xchg
from iris.device.rma import store
from iris.device.sync import call_epoch, call_match, count_published, finish_call, group_barrier, open_call, wait_until
from iris.host import launches
from iris.host.distributed import Context
from iris.host.groups import MAX_COMM_PROGRAMS
from iris.ops import common, reference
from iris.ops.config import AnyOpsConfig
from iris.ops.record import declare
from iris.host.copy_engine.schedule import CopySchedule, bands_before, copy_sms, output_bands
from iris.ops.gemm import (band_of, corner, descriptors_fit, first_unit, mainloop, num_programs,
                             leading_operands, operand_maker, store_tile, strides, tile_coords)

ONE_SHOT_MAX_BYTES = CollectiveConfig().one_shot_max_bytes  # below it all_reduce writes an out anywhere


@triton.jit
def _unit(u, tiles, lag, GROUP_SIZE: tl.constexpr):
    """(step, tile) of unit ``u`` of the walk over ``GROUP_SIZE * tiles`` units in which a rank's own unit of a
    tile trails that tile's peer units by ``lag`` tiles: first the peer units of tiles [0, lag), step by step;
    then for each later tile its peer units and the own unit of the tile ``lag`` before it; then the last
    ``lag`` own units. ``step`` < GROUP_SIZE names the block of rank group_index + step, GROUP_SIZE our own.
    lag = tiles is every peer unit first, lag = 0 tile by tile."""
    head = (GROUP_SIZE - 1) * lag
    body = GROUP_SIZE * (tiles - lag)
    per = tl.maximum(lag, 1)
    v = tl.maximum(u - head, 0)
    r = v % GROUP_SIZE
    peer = r < GROUP_SIZE - 1
    step = tl.where(u < head, u // per + 1, tl.where((u < head + body) & peer, r + 1, GROUP_SIZE))
    tile = tl.where(u < head, u % per,
                    tl.where(u < head + body, tl.where(peer, lag + v // GROUP_SIZE, v // GROUP_SIZE),
                             tiles - lag + (u - head - body)))
    return step, tile


@triton.jit
def _own_unit(acc, t, pid_m, pid_n, band, out, out_strides, shape, sync, reduce, engines, epoch, tiles, bands,
              GROUP_SIZE: tl.constexpr, TILE: tl.constexpr, ALL_REDUCE: tl.constexpr, OUT_VEC: tl.constexpr,
              COPY_ENGINE: tl.constexpr, TO_ENGINES: tl.constexpr, WARPS: tl.constexpr):
    """Our row block's tile ``t``: our partial ``acc`` plus every peer's (once its flag, or with COPY_ENGINE its
    band's flag, says it has landed in our staging), then out: reduce_scatter's own ``out``; all_reduce's rows of
    every rank's, from the SMs, or with TO_ENGINES stored here and counted on the band the copy engines take to
    the peers."""
    BLOCK_M: tl.constexpr = TILE[0]
    BLOCK_N: tl.constexpr = TILE[1]
    M_local, N, _ = shape
    _, heap_bases, members, rank, group_index, _, _, tables, _ = sync
    staging, tile_flags, _, _ = reduce
    _, band_counts, band_flags, _, _ = engines
    stride_om, stride_on = out_strides
    offs = tl.arange(0, BLOCK_M)[:, None] * N + tl.arange(0, BLOCK_N)[None, :]  # inside a staging tile
    n_mask = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :] < N
    # Every rank's partial in the form the peers' travel in (staging's dtype), summed in fp32 in group order
    # (``reduce_from_group``'s rule), so a tile's bits do not depend on which rank owns it.
    total = tl.full([BLOCK_M, BLOCK_N], -0.0, tl.float32)  # -0.0 + x is x for every x, -0.0 included
    for src_index in range(GROUP_SIZE):
        if src_index == group_index:
            part = acc.to(staging.dtype.element_ty).to(tl.float32)
        else:
            if COPY_ENGINE:  # the band holding the tile, set by the peer's side stream after its copy
                wait_until(band_flags + src_index * bands + band, 1, rank, tl.load(members + src_index),
                           "matmul_reduce band")
            else:
                wait_until(tile_flags + src_index * tiles + t, epoch, rank, tl.load(members + src_index),
                           "matmul_reduce")
            slot = corner(staging, src_index * M_local + pid_m * BLOCK_M, pid_n * BLOCK_N, N, 1)
            part = tl.load(slot + offs, mask=n_mask, other=0.0).to(tl.float32)
        total += part
    acc = total
    if ALL_REDUCE:  # rows group_index * M_local + ... of every rank's out
        ptrs = corner(out, group_index * M_local + pid_m * BLOCK_M, pid_n * BLOCK_N, stride_om, stride_on) + \
            tl.arange(0, BLOCK_M)[:, None] * stride_om + tl.arange(0, BLOCK_N)[None, :] * stride_on
        if TO_ENGINES:  # ours only; the copy engines take the band to the peers
            tl.store(ptrs, acc.to(out.dtype.element_ty), mask=n_mask)
            count_published(band_counts + (GROUP_SIZE - 1) * bands + band, WARPS)
        else:  # from the SMs (with the copy engines: the walk's last wave, when the SMs have nothing else to do)
            store_to_group(ptrs, acc.to(out.dtype.element_ty), rank, tables[1], members, group_index, GROUP_SIZE,
                           mask=n_mask, hint=(1, OUT_VEC))
    else:
        store_tile(out, acc, pid_m, pid_n, M_local, N, out_strides, TILE, False)


@triton.jit
def _own_units(lo, hi, a, b, out, strides, shape, sync, reduce, engines, epoch, GROUP_SIZE: tl.constexpr,
               TILE: tl.constexpr, TMA: tl.constexpr, ALL_REDUCE: tl.constexpr, OUT_VEC: tl.constexpr,
               TO_ENGINES: tl.constexpr, WARPS: tl.constexpr):
    """The copy-engine walk's units ``lo`` .. ``hi`` of our own row block (unit (W - 1) * tiles + t is tile t),
    this program's share of the walk's round-robin deal, in one loop the compiler can flatten."""
    M_local, N, K = shape
    group_index = sync[4]
    band_cols = engines[3]
    num_pid_m = M_local // TILE[0]
    num_pid_n = tl.cdiv(N, TILE[1])
    tiles = num_pid_m * num_pid_n
    bands = tl.cdiv(num_pid_m, TILE[3]) * tl.cdiv(num_pid_n, band_cols)
    programs = tl.num_programs(0)
    for u in tl.range(first_unit(tl.program_id(0), programs, lo), hi, programs, flatten=True):
        t = u - (GROUP_SIZE - 1) * tiles
        pid_m, pid_n = tile_coords(t, num_pid_m, num_pid_n, TILE[3])
        acc = mainloop(a, b, strides, GROUP_SIZE * M_local, N, K, group_index * num_pid_m + pid_m, pid_n, TILE,
                       TMA=TMA)
        _own_unit(acc, t, pid_m, pid_n, band_of(pid_m, pid_n, num_pid_n, TILE[3], band_cols), out, strides[2],
                  shape, sync, reduce, engines, epoch, tiles, bands, GROUP_SIZE, TILE, ALL_REDUCE, OUT_VEC, True,
                  TO_ENGINES, WARPS)


@triton.jit
def _matmul_reduce_kernel(a, b, out, strides, shape, sync, reduce, engines, GROUP_SIZE: tl.constexpr,
                          TILE: tl.constexpr, TMA: tl.constexpr, ALL_REDUCE: tl.constexpr, VEC: tl.constexpr,
                          COPY_ENGINE: tl.constexpr, WARPS: tl.constexpr):
    # shape: (M_local, N, K); sync: the group's (flags, heap_bases, members, rank, group_index, world_size);
    # reduce: (staging, tile_flags, call, lag); engines: (outbox, band_counts, band_flags, band_cols, engine_tiles);
    # VEC: (STAGE_VEC, OUT_VEC), the widths of the vectors into staging and out (``common.row_vector_width``)
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync
    staging, tile_flags, call, lag = reduce
    # peers write our staging and tile flags, and all_reduce's out (iris/device/sync.py)
    if ALL_REDUCE:
        match = call_match(sync, ((staging, heap_bases), (tile_flags, heap_bases), (out, tables[1])))
    else:
        match = call_match(sync, ((staging, heap_bases), (tile_flags, heap_bases)))
    outbox, band_counts, _, band_cols, engine_tiles = engines
    M_local, N, K = shape
    BLOCK_M: tl.constexpr = TILE[0]
    BLOCK_N: tl.constexpr = TILE[1]
    GROUP_M: tl.constexpr = TILE[3]
    STAGE_VEC: tl.constexpr = VEC[0]
    OUT_VEC: tl.constexpr = VEC[1]
    row = program_row(flags, world_size)
    # staging is free: every rank has started this call, so its last call (all of whose reads) is over
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:
        epoch = call_epoch(call)  # stamps this call's tile flags: the same number in every program of every rank
        num_pid_m = M_local // BLOCK_M  # row blocks per rank
        num_pid_n = tl.cdiv(N, BLOCK_N)
        tiles = num_pid_m * num_pid_n
        bands = tl.cdiv(num_pid_m, GROUP_M) * tl.cdiv(num_pid_n, band_cols)  # of a row block (COPY_ENGINE)
        M = GROUP_SIZE * M_local
        offs = tl.arange(0, BLOCK_M)[:, None] * N + tl.arange(0, BLOCK_N)[None, :]  # inside a staging tile
        p = tl.program_id(0)
        programs = tl.num_programs(0)
        # One pass over every (row block, tile) unit, so the programs fill the waves of all blocks together
        # (separate passes would round each block up to whole waves). reduce_scatter takes our unit of a tile
        # ``lag`` tiles after the peers' units of it (two waves by default): by then their partials have landed.
        # all_reduce goes tile by tile (each tile's units for the peers' blocks, then ours), so the stores of
        # finished tiles to every rank spread over the kernel instead of all following the last GEMM wave.
        # Either way a unit of ours waits only on peers' units of lower index, and those never wait, so any order
        # of resident programs completes. Programs run one at a time (the interpreter) need each program to wait
        # only on units of the same program number, earlier in its sequence (``_run`` picks the count).
        if COPY_ENGINE:
            # Every peer unit first (lag = tiles), then ours: each kind of unit in a loop of its own, dealt round robin
            # as one walk, so that the compiler can flatten each (a branch between kinds inside one
            # flattened loop fails to compile in Triton 3.6). Partials go to our outbox, counted on their band.
            peer_units = (GROUP_SIZE - 1) * tiles
            for u in tl.range(p, peer_units, programs, flatten=True):
                step = u // tiles + 1
                t = u % tiles
                pid_m, pid_n = tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
                block_index = (group_index + step) % GROUP_SIZE
                acc = mainloop(a, b, strides, M, N, K, block_index * num_pid_m + pid_m, pid_n, TILE, TMA=TMA)
                slot = corner(outbox, block_index * M_local + pid_m * BLOCK_M, pid_n * BLOCK_N, N, 1)
                tl.store(slot + offs, acc.to(outbox.dtype.element_ty),
                         mask=pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :] < N)
                count_published(band_counts + (step - 1) * bands + band_of(pid_m, pid_n, num_pid_n, GROUP_M, band_cols),
                                WARPS)
            # our units: all_reduce's tiles before ``engine_tiles`` (whole bands) for the copy engines, the rest from
            # the SMs (reduce_scatter: engine_tiles is 0)
            _own_units(peer_units, peer_units + engine_tiles, a, b, out, strides, shape, sync, reduce, engines, epoch,
                       GROUP_SIZE, TILE, TMA, ALL_REDUCE, OUT_VEC, True, WARPS)
            _own_units(peer_units + engine_tiles, GROUP_SIZE * tiles, a, b, out, strides, shape, sync, reduce, engines,
                       epoch, GROUP_SIZE, TILE, TMA, ALL_REDUCE, OUT_VEC, False, WARPS)
        else:
            # A release waits until the program's stores have reached the peer, and a wave's partials leave together,
            # so a flag raised right after its tile's stores stalls the program for the link's time on the whole wave.
            # reduce_scatter raises the flag of a pushed partial one unit later, after that unit's K loop, by when the
            # stores have drained: still before the program waits on anything, so no two programs wait on each other.
            pending = -1  # reduce_scatter: the flag (index into tile_flags on rank pending_dest) not yet raised
            pending_dest = rank
            for u in range(p, GROUP_SIZE * tiles, programs):
                step, t = _unit(u, tiles, lag, GROUP_SIZE)
                pid_m, pid_n = tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
                block_index = (group_index + step) % GROUP_SIZE
                acc = mainloop(a, b, strides, M, N, K, block_index * num_pid_m + pid_m, pid_n, TILE, TMA=TMA)
                if pending >= 0:
                    atomic_xchg(tile_flags + pending, epoch, rank, pending_dest, heap_bases, sem="release", scope="sys")
                    pending = -1
                if step < GROUP_SIZE:
                    # ---- a peer's row block: push the partial to the owner's staging slot for us, stamp its flag
                    dest = tl.load(members + block_index)
                    slot = corner(staging, group_index * M_local + pid_m * BLOCK_M, pid_n * BLOCK_N, N, 1)
                    store(slot + offs, acc.to(staging.dtype.element_ty), rank, dest, heap_bases,
                          mask=pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :] < N, hint=(1, STAGE_VEC))
                    if not ALL_REDUCE:
                        pending = group_index * tiles + t
                        pending_dest = dest
                    else:
                        atomic_xchg(tile_flags + group_index * tiles + t, epoch, rank, dest, heap_bases, sem="release",
                                    scope="sys")
                else:
                    _own_unit(acc, t, pid_m, pid_n, 0, out, strides[2], shape, sync, reduce, engines, epoch, tiles,
                              bands, GROUP_SIZE, TILE, ALL_REDUCE, OUT_VEC, False, False, WARPS)
            if pending >= 0:
                atomic_xchg(tile_flags + pending, epoch, rank, pending_dest, heap_bases, sem="release", scope="sys")
        if ALL_REDUCE:
            group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every rank's tiles are in our out
        finish_call(call)


def _walk_order(all_reduce, programs, group_size, own_tiles):
    """The lag of our own unit of a tile behind that tile's peer units, in tiles (``_unit``), as measured on
    2 x H200 (docs/perf-notes.md): reduce_scatter two waves of tiles (2 x programs / ranks), with each pushed
    partial's flag raised after the next K loop, 0.4-3% faster than one wave raised at once, so the epilogue only
    adds partials that have landed; all_reduce 0 (tile by tile: its finished tiles' pushes spread over the kernel,
    0.588 -> 0.455 ms on 4096x8192x8192), with flags raised at once (deferred, it lost 2.4% on 8192x4608x36864).
    Through the copy engines the kernel takes every peer unit first whatever the lag, so that the bands leave in
    order while our own block is computed."""
    return 0 if all_reduce else min(2 * programs // group_size, own_tiles)


def _run(ctx, caller, out, a, b, group, config, all_reduce, key, given):
    """Fused kernel or bulk pair, whichever ``config`` and the shape call for; a fused launch on the SMs is
    remembered under ``key`` for ``given`` (the config object the caller passed)."""
    sync = ctx.group_sync(group, caller)
    M, N = a.shape[0], b.shape[1]
    m_local = common.divisible(caller, "M (rows of A)", M, sync.size)
    if out.numel() == 0:  # M or N is 0 on every rank (the shapes agree): nothing to compute or send
        return out
    block_m, block_n, block_k = config.blocks(ctx.get_device().type, a.dtype)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    needs = [] if m_local % block_m == 0 else [f"block_m={block_m} to divide M / W = {m_local}"]
    if all_reduce and not ctx.is_symmetric(out):
        needs.append("out on the symmetric heap (peers store the reduced tiles into it)")
    # per rank: (W - 1) / W of the partial out, and for all_reduce as much of the result back
    sent = (2 if all_reduce else 1) * (sync.size - 1) * m_local * N * out.element_size()
    if not common.choose_fused(caller, config, ctx, tiles, needs, comm_bytes=sent, flops=2 * M * N * a.shape[1]):
        partial = ctx.workspaces.get(caller, sync.ranks, (M, N), a.dtype)
        common.bulk_gemm(partial, a, b, config)
        # The collectives take contiguous operands: a strided out (a transposed or column view) gets the result
        # reduced in place in the workspace, then copied into its layout.
        if not all_reduce:
            mine = out if out.is_contiguous() else partial[sync.index * m_local:(sync.index + 1) * m_local]
            ctx.ccl.reduce_scatter(mine, partial, group=group)
            if mine is not out:
                out.copy_(mine)
        elif out.is_contiguous() and (ctx.is_symmetric(out)
                                      or partial.numel() * partial.element_size() <= ONE_SHOT_MAX_BYTES):
            ctx.ccl.all_reduce(out, partial, group=group)
        else:  # two-shot writes its result into every rank's out, so out must be on the heap: reduce in place
            ctx.ccl.all_reduce(partial, partial, group=group)
            out.copy_(partial)
        return out
    staging = ctx.workspaces.get(caller + ".staging", sync.ranks, (sync.size, m_local, N), a.dtype)
    tile_flags = ctx.workspaces.peer_flags(caller + ".flags", sync.ranks, tiles // sync.size)
    call = ctx.workspaces.get(caller + ".call", sync.ranks, (2,), torch.int32, zero=True)
    tma = descriptors_fit(a, b)
    own_tiles = tiles // sync.size
    # all_reduce through the copy engines needs out's rows contiguous (each band of them is one 2-D copy)
    copy_engine = (config.uses_copy_engine(ctx.get_device().type, sync.size, shared_gpu=ctx.shares_gpu)
                   and (not all_reduce or out.stride(1) == 1))
    programs = min(num_programs(ctx.get_device(), own_tiles, spare=copy_sms(ctx, copy_engine),
                                sms=ctx.get_agreed_cu_count()),
                   MAX_COMM_PROGRAMS)
    lag = _walk_order(all_reduce, programs, sync.size, own_tiles)
    if ctx.get_device().type == "cpu":  # programs run one at a time there: a program waits only on its namesakes
        if copy_engine:  # a band leaves once every program counted its tiles: one program does them all first
            programs = 1
        elif lag == 0:  # program p takes step p + 1 of every tile: all producers or all consumers
            programs = sync.size
        elif lag == own_tiles:  # peers first: tile t's units all fall to program t % programs
            programs = max(p for p in range(1, programs + 1) if own_tiles % p == 0)
        else:
            programs = 1
    band_cols, row_bands = output_bands(config, m_local, N, block_m, block_n, out.element_size())  # of a row block
    out_bands, sent, schedule = [], None, None  # out_bands: all_reduce's bands of our reduced rows for the peers
    if copy_engine:
        # slot d holds our partial of rank d's row block (ours unused), laid out as the owner's staging slot
        outbox = ctx.workspaces.get(caller + ".outbox", sync.ranks, (sync.size, m_local, N), a.dtype)
        # counts: (W - 1) rows of partial bands, then one of our reduced bands
        band_counts = ctx.workspaces.get(caller + ".band_counts", sync.ranks, (sync.size * len(row_bands),),
                                         torch.int32, zero=True)
        band_flags = ctx.workspaces.peer_flags(caller + ".band_flags", sync.ranks, len(row_bands))
        if all_reduce:
            # our units come after every peer unit, tile by tile; the bands finished before the walk's last wave
            # go by the copy engines, the last wave's tiles from the SMs (which have nothing left to do by then)
            last_wave = (sync.size * own_tiles - 1) // programs * programs - (sync.size - 1) * own_tiles
            out_bands = bands_before(row_bands, last_wave)
            if out_bands:
                sent = ctx.workspaces.peer_flags(caller + ".sent", sync.ranks, 1)  # row i: member i's bands
        schedule = CopySchedule(ctx, sync, caller)
        _send_partials(schedule, staging, outbox, row_bands, band_counts, band_flags, config.num_warps)
        # then our reduced rows (row block sync.index of out)
        schedule.send_bands(out, out_bands, band_counts[(sync.size - 1) * len(row_bands):], sent, config.num_warps,
                            row_offset=sync.index * m_local)
    else:
        outbox, band_counts, band_flags = staging, tile_flags, tile_flags
    described = fingerprint(ctx, caller, (a, b, out), launch=dict(programs=programs, tile=(block_m, block_n, block_k),
                                                                  group_m=config.group_m, lag=lag,
                                                                  copy_engine=copy_engine, out_bands=len(out_bands)),
                            sync=sync)
    launch = launches.OperandLaunch(
        _matmul_reduce_kernel, (programs,),
        (strides(a, b, out), (m_local, N, a.shape[1]), sync.args(ctx, described), (staging, tile_flags, call, lag),
         (outbox, band_counts, band_flags, band_cols, sum(band.tiles for band in out_bands))),
        dict(GROUP_SIZE=sync.size, TILE=(block_m, block_n, block_k, config.group_m), TMA=tma, ALL_REDUCE=all_reduce,
             VEC=(common.row_vector_width(staging[0]), common.row_vector_width(out)), COPY_ENGINE=copy_engine,
             WARPS=config.num_warps, num_warps=config.num_warps, num_stages=config.stages()),
        leading_operands(operand_maker((block_m, block_k), tma), operand_maker((block_k, block_n), tma)))
    if schedule:  # the copy engines' queue is per call: never remembered
        with schedule.launch(band_counts):
            launch(out, a, b)
        # our outbox is free again once the side stream has copied it; all_reduce's out is whole once every peer's
        # side stream has copied its bands here; the band flags on our heap, all seen by the kernel, are cleared
        schedule.join(arrived=sent, consumed=[band_flags])
    else:  # all_reduce's peers store into out: a hit must find it in the heap again
        common.remember(ctx, key, group, given, launch, sync,
                        (caller + ".staging", caller + ".flags", caller + ".call"),
                        symmetric=((0, common.span_bytes(out), ctx.heap_bases),) if all_reduce else ())(out, a, b)
    return out


def _send_partials(schedule, staging, outbox, bands, band_counts, band_flags, warps):
    """The copy engines' part of the fused reduce-scatter, queued before the kernel that counts the bands: our
    partials of each peer's row block, band by band as the kernel counts them (once per tile and warp), go from
    our outbox into our staging slot on that peer, and then the band's flag there, set to 1, lets the peer's
    kernel add them."""
    sync = schedule.sync
    for step in range(1, sync.size):
        index = (sync.index + step) % sync.size
        their_staging = schedule.peer(staging, sync.ranks[index])[sync.index]
        their_flags = schedule.peer(band_flags, sync.ranks[index])[sync.index]
        for i, band in enumerate(bands):
            slot = (step - 1) * len(bands) + i
            schedule.after(band_counts[slot:slot + 1], band.tiles * warps)
            schedule.copy(their_staging[band.rows, band.cols], outbox[index][band.rows, band.cols])
            schedule.signal(their_flags[i:i + 1])


def matmul_all_reduce(ctx: Context, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                      bias: torch.Tensor | None = None, group: dist.ProcessGroup | None = None,
                      config: AnyOpsConfig | None = None) -> torch.Tensor:
    """``out`` ([M, N]) = ``sum over r of A_r @ B_r (+ bias)``; ``A`` [M, K / W] and ``B`` [K / W, N] are this
    rank's slices. Collective; stream-ordered. Partials are summed in fp32 and rounded once (fused), or rounded
    to the dtype first and summed in fp32 by the collective (bulk). The fused kernel needs ``out`` on the heap
    and block_m dividing M / W; otherwise "auto" runs the bulk pair.

        ref = sum(A_r @ B_r for r in group) + bias

    Raises ``ValueError`` for an ``out`` that shares bytes with ``A``, ``B`` or ``bias``, operands that are not 2-D, of
    other dtypes (float16, bfloat16 or float32, all alike), devices or shapes, an M the group size does not divide, a
    ``bias`` of another shape, or ``variant="fused"`` where the fused kernel cannot run; ``TypeError`` for a ``config``
    that is neither ``OpsConfig`` nor ``FusedConfig``; ``NotImplementedError`` from ``ctx.ops`` across nodes;
    ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        A, B = ctx.randn(64, 32), ctx.randn(32, 32)  # the whole operands: the same on every rank here
        out = ctx.empty(64, 32)  # on the heap: the fused kernel
        ctx.ops.matmul_all_reduce(out, A.chunk(world_size, dim=1)[rank], B.chunk(world_size)[rank])  # A_r, B_r
        assert torch.allclose(out, A @ B, atol=1e-2)
    """
    caller, given = "ops.matmul_all_reduce", config  # config is resolved below; the key holds the object passed
    common.bias_apart(caller, out, bias)
    key = common.launch_key(ctx, caller, group, given, (out, a, b))
    if ctx.launches.run(ctx, key, group, given, (out, a, b)):  # a remembered launch (iris/host/launches.py)
        return common.add_bias(ctx, out, bias, caller)
    config = common.resolve_config(config, caller)
    common.check_operands(caller, out, a, b)
    common.expect_shape(caller, "out", out, (a.shape[0], b.shape[1]), "[A rows, B columns]")
    _run(ctx, caller, out, a, b, group, config, all_reduce=True, key=key, given=given)
    return common.add_bias(ctx, out, bias, caller)


def matmul_reduce_scatter(ctx: Context, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                          bias: torch.Tensor | None = None, group: dist.ProcessGroup | None = None,
                          config: AnyOpsConfig | None = None) -> torch.Tensor:
    """``out`` ([M / W, N], anywhere) = rows ``group_rank`` of ``sum over r of A_r @ B_r (+ bias)``. Collective;
    stream-ordered. The fused kernel needs block_m dividing M / W; otherwise "auto" runs the bulk pair.

        ref = sum(A_r @ B_r for r in group).chunk(W)[group_rank] + bias

    Raises ``ValueError`` for an ``out`` that shares bytes with ``A``, ``B`` or ``bias``, operands that are not 2-D, of
    other dtypes (float16, bfloat16 or float32, all alike), devices or shapes, an M the group size does not divide, a
    ``bias`` of another shape, or ``variant="fused"`` where the fused kernel cannot run; ``TypeError`` for a ``config``
    that is neither ``OpsConfig`` nor ``FusedConfig``; ``NotImplementedError`` from ``ctx.ops`` across nodes;
    ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        A, B = ctx.randn(64, 32), ctx.randn(32, 32)  # the whole operands: the same on every rank here
        out = ctx.empty(64 // world_size, 32)
        ctx.ops.matmul_reduce_scatter(out, A.chunk(world_size, dim=1)[rank], B.chunk(world_size)[rank])
        assert torch.allclose(out, (A @ B).chunk(world_size)[rank], atol=1e-2)  # this rank's rows of the sum
    """
    caller, given = "ops.matmul_reduce_scatter", config  # config is resolved below; the key holds the object passed
    common.bias_apart(caller, out, bias)
    key = common.launch_key(ctx, caller, group, given, (out, a, b))
    if ctx.launches.run(ctx, key, group, given, (out, a, b)):  # a remembered launch (iris/host/launches.py)
        return common.add_bias(ctx, out, bias, caller)
    config = common.resolve_config(config, caller)
    common.check_operands(caller, out, a, b)
    size = ctx.group_sync(group, caller).size
    m_local = common.divisible(caller, "M (rows of A)", a.shape[0], size)
    common.expect_shape(caller, "out", out, (m_local, b.shape[1]), f"[A rows / group size {size}, B columns]")
    _run(ctx, caller, out, a, b, group, config, all_reduce=False, key=key, given=given)
    return common.add_bias(ctx, out, bias, caller)


declare("matmul_all_reduce", matmul_all_reduce, reference.matmul_all_reduce,
        "the sum over ranks of A_r @ B_r (the fused kernel: out on the heap)", "A [M, K / W], B [K / W, N], out [M, N]",
        compile_op="matmul_all_reduce")
declare("matmul_reduce_scatter", matmul_reduce_scatter, reference.matmul_reduce_scatter,
        "this rank's rows of the sum over ranks of A_r @ B_r", "A [M, K / W], B [K / W, N], out [M / W, N]",
        compile_op="matmul_reduce_scatter")
