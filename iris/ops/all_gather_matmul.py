"""all_gather_matmul: ``out = cat_r(A_r, dim=0) @ B`` on every rank.

Fused schedule, workgroup-specialised: one persistent kernel whose first ``COMM_SMS`` programs move data
while the others compute, then compute too.

    communication programs:  barrier | push row block b of our A into every peer's gathered A -> flag[r, b]
                             | then GEMM tiles, as below
    GEMM programs:           tiles of our own rows (A is local, no wait) | tiles of rank q's rows, each after
                             flag[q, b] on our heap says the block has landed | ... -> out

Every A row crosses the link once per peer, by stores the communication SMs issue, and the GEMM starts on
our own rows at once, so the gather hides behind the first 1/W of the GEMM. Tiles are handed out by a
per-launch ticket counter, so the communication programs take their share of the GEMM once their blocks are
sent instead of idling (16 of 132 SMs, 12% of the GEMM, on a long K). (Pulling A tiles inside the K loop
instead re-reads each remote row block once per column of tiles: N / BLOCK_N times over the link.)
Flags are stamped with the call number (``call_epoch``), the same on every rank, so they are never reset.

By default on pairs of GPUs (``OpsConfig.copy_engine``) the copy engines carry A instead, and every program
computes from the start:

    side stream:  wait for the kernel's opening barrier | chunk c of our A (group_m row blocks, the rows the
                  tile order takes next) -> every peer's gathered A, then arrived[us, c] = 1 on that peer | ...
    every program: tiles of our own rows | for each peer's chunk: wait arrived[q, c], then its tiles

The arrived flags are set to 1 and cleared after the kernel, so a replayed CUDA graph waits for its own copies.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from iris.ccl.common import fingerprint
from iris.device.group import peer_at, program_row
from iris.device.atomics import atomic_xchg
from iris.device.rma import store
from iris.device.sync import call_epoch, call_match, fence_async_proxy, finish_call, next_tile, open_call, wait_until
from iris.host import launches
from iris.host.distributed import Context
from iris.ops import common, reference
from iris.ops.config import AnyOpsConfig
from iris.ops.record import declare
from iris.host.copy_engine.schedule import CopySchedule, copy_sms
from iris.ops.upstream_layouts import all_gather_matmul_k, is_k_sharded
from iris.ops.gemm import (corner, descriptors_fit, mainloop, num_programs, operand, operand_maker, store_tile,
                             strides, tile_coords)

COPY_K = 128  # columns per step of a communication program's copy: [BLOCK_M, COPY_K] per store


@triton.jit
def _all_gather_matmul_kernel(a, a_rows, gathered, gathered_rows, b, out, strides, shape, sync, ready, call,
                              GROUP_SIZE: tl.constexpr, COMM_PROGRAMS: tl.constexpr, TILE: tl.constexpr,
                              COPY_K: tl.constexpr, VEC: tl.constexpr, TMA: tl.constexpr):
    # a / gathered: descriptors (TMA) or pointers; a_rows / gathered_rows: the same as pointers, for the copies.
    # shape: (M_local, N, K); sync: the group's (GroupSync.args); call: int32[5], the launch counter, the programs
    # done, the tile tickets, and the verdict of the opening barrier (the epoch it was given at, a mismatch flag)
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync
    match = call_match(sync, ((gathered_rows, heap_bases), (ready, heap_bases)))  # peers write both
    M_local, N, K = shape
    BLOCK_M: tl.constexpr = TILE[0]
    stride_am = strides[0][0]
    pid = tl.program_id(0)
    M = GROUP_SIZE * M_local
    blocks = M_local // BLOCK_M  # row blocks per rank
    epoch = call_epoch(call)
    ok = pid >= 0  # the communication programs' own barrier decides; the others read its verdict (_verdict)
    if pid < COMM_PROGRAMS:
        # ---- communication: our A, row block by row block, into every peer's gathered A
        # peers' previous call no longer reads their gathered A
        ok = open_call(program_row(flags, world_size), heap_bases, members, rank, GROUP_SIZE, match)[1]
        if pid == 0:
            _publish_verdict(call + 3, epoch, ok)
        if ok:
            rows = tl.arange(0, BLOCK_M)
            for blk in range(pid, blocks, COMM_PROGRAMS):
                src = corner(a_rows, blk * BLOCK_M, 0, stride_am, 1)  # the block's first row, here and on the peers
                dst = corner(gathered_rows, group_index * M_local + blk * BLOCK_M, 0, K, 1)
                for step in range(1, GROUP_SIZE):
                    peer = peer_at(members, group_index, step, GROUP_SIZE)
                    for k0 in range(0, K, COPY_K):
                        cols = k0 + tl.arange(0, COPY_K)
                        mask = cols[None, :] < K
                        piece = tl.load(src + rows[:, None] * stride_am + cols[None, :], mask=mask)  # [BLOCK_M, COPY_K]
                        store(dst + rows[:, None] * K + cols[None, :], piece, rank, peer, heap_bases, mask=mask,
                              hint=(1, VEC))
                    atomic_xchg(ready + group_index * blocks + blk, epoch, rank, peer, heap_bases, sem="release",
                                scope="sys")
    # ---- GEMM, in every program (the communication programs join once their blocks are sent): output tiles
    # by ticket, our own row blocks first (local A), then rank group_index + 1's, and so on. A program that has
    # not opened the call itself reads the verdict before its first store or wait, after its first tile's K loop.
    known = pid < COMM_PROGRAMS
    num_pid_n = tl.cdiv(N, TILE[1])
    per_rank = blocks * num_pid_n
    t = next_tile(call)
    while t < GROUP_SIZE * per_rank:
        step = t // per_rank
        owner = (group_index + step) % GROUP_SIZE
        pid_m, pid_n = tile_coords(t % per_rank, blocks, num_pid_n, TILE[3])
        # one mainloop for both sources, so its shared-memory ring is allocated once
        src, src_m, src_rows, src_stride = a, pid_m, M_local, stride_am  # our own rows: local A, no wait
        if step != 0:
            if not known:
                ok = _verdict(call + 3, epoch, rank)
                known = pid >= 0
            if ok:
                wait_until(ready + owner * blocks + pid_m, epoch, rank, tl.load(members + owner), "all_gather_matmul")
                if TMA:  # the rows arrived by ordinary stores; the descriptor loads below read via the async proxy
                    fence_async_proxy()
            src, src_m, src_rows, src_stride = gathered, owner * blocks + pid_m, M, K
        acc = mainloop(src, b, ((src_stride, strides[0][1]), strides[1]), src_rows, N, K, src_m, pid_n, TILE,
                       TMA=TMA)
        if not known:
            ok = _verdict(call + 3, epoch, rank)
            known = pid >= 0
        if ok:
            store_tile(out, acc, owner * blocks + pid_m, pid_n, M, N, strides[2], TILE, TMA)
            t = next_tile(call)
        else:
            t = GROUP_SIZE * per_rank
    finish_call(call, TICKETS=True)


@triton.jit
def _publish_verdict(verdict, epoch, ok):
    """The opening barrier's verdict for this launch's other programs, in ``verdict`` (int32[2]): a mismatch flag
    (``verdict[1]``, which stays set: the context refuses later calls), then the launch's epoch (``verdict[0]``)."""
    if not ok:
        tl.atomic_xchg(verdict + 1, 1, sem="relaxed", scope="gpu")
    tl.atomic_xchg(verdict, epoch, sem="release", scope="gpu")


@triton.jit
def _verdict(verdict, epoch, rank):
    """Whether this launch's opening barrier matched the members' calls (``_publish_verdict``)."""
    wait_until(verdict, epoch, rank, rank, "all_gather_matmul verdict")
    return tl.atomic_add(verdict + 1, 0, sem="relaxed", scope="gpu") == 0


@triton.jit
def _tiles(src, src_rows, src_stride, src_block, b, out, strides, out_block, lo, hi, base, M, N, K, blocks,
           TILE: tl.constexpr, TMA: tl.constexpr):
    """This program's tiles among tiles ``lo`` .. ``hi`` of one rank's row blocks (grouped order), dealt round
    robin as if numbered from ``base`` on, so that consecutive calls continue one deal: A rows from ``src``
    (``src_rows`` rows, ``src_stride`` apart; row block ``src_block`` + pid_m), output rows at row block
    ``out_block`` + pid_m. The plain GEMM keeps its own loop: through this one it ran 4-5% slower on
    8192x3584x14336 (docs/perf-notes.md, "One tile loop")."""
    num_pid_n = tl.cdiv(N, TILE[1])
    src_strides = ((src_stride, strides[0][1]), strides[1])
    programs = tl.num_programs(0)
    first = lo + (tl.program_id(0) - (base + lo) % programs + programs) % programs
    for t in tl.range(first, hi, programs, flatten=True):
        pid_m, pid_n = tile_coords(t, blocks, num_pid_n, TILE[3])
        acc = mainloop(src, b, src_strides, src_rows, N, K, src_block + pid_m, pid_n, TILE, TMA=TMA)
        store_tile(out, acc, out_block + pid_m, pid_n, M, N, strides[2], TILE, TMA)


@triton.jit
def _all_gather_matmul_engines_kernel(a, gathered, gathered_rows, b, out, strides, shape, sync, arrived, go, call,
                                      GROUP_SIZE: tl.constexpr, TILE: tl.constexpr, TMA: tl.constexpr):
    # shape: (M_local, N, K); sync: the group's (GroupSync.args); call: int32[4], the launch counter, the programs
    # done and the opening barrier's verdict
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync
    # peers' copy engines write gathered_rows and arrived (iris/device/sync.py)
    match = call_match(sync, ((gathered_rows, heap_bases), (arrived, heap_bases)))
    epoch = call_epoch(call)
    if tl.program_id(0) == 0:
        # peers' previous call no longer reads their gathered A: the copy engines may write it (on a mismatch go
        # stays 0, so no copy leaves: the side stream waits until the context is given up)
        ok = open_call(program_row(flags, world_size), heap_bases, members, rank, GROUP_SIZE, match)[1]
        if ok:  # a release: what the peers did before their barrier (clearing their flags) precedes our copies
            tl.atomic_xchg(go, 1, sem="release", scope="sys")
        _publish_verdict(call + 2, epoch, ok)
    # every program learns the verdict before it stores a tile
    if _verdict(call + 2, epoch, rank):
        _engines_gemm(a, gathered, b, out, strides, shape, arrived, members, rank, group_index, GROUP_SIZE, TILE,
                      TMA)
    finish_call(call)


@triton.jit
def _engines_gemm(a, gathered, b, out, strides, shape, arrived, members, rank, group_index, GROUP_SIZE: tl.constexpr,
                  TILE: tl.constexpr, TMA: tl.constexpr):
    """``_all_gather_matmul_engines_kernel``'s GEMM: our own rows' tiles, then each peer's chunk as it arrives."""
    M_local, N, K = shape
    M = GROUP_SIZE * M_local
    blocks = M_local // TILE[0]  # row blocks per rank
    num_pid_n = tl.cdiv(N, TILE[1])
    per_rank = blocks * num_pid_n
    per_chunk = TILE[3] * num_pid_n  # the tiles of one chunk of rows, consecutive in the grouped order
    chunks = tl.cdiv(blocks, TILE[3])
    _tiles(a, M_local, strides[0][0], 0, b, out, strides, group_index * blocks, 0, per_rank, 0, M, N, K, blocks,
           TILE, TMA)
    for c in range((GROUP_SIZE - 1) * chunks):
        step = 1 + c // chunks
        owner = (group_index + step) % GROUP_SIZE
        lo = (c % chunks) * per_chunk
        wait_until(arrived + owner * chunks + c % chunks, 1, rank, tl.load(members + owner), "all_gather_matmul")
        if TMA:  # the rows arrived by copy-engine writes; the descriptor loads read via the async proxy
            fence_async_proxy()
        _tiles(gathered, M, K, owner * blocks, b, out, strides, owner * blocks, lo,
               tl.minimum(lo + per_chunk, per_rank), step * per_rank, M, N, K, blocks, TILE, TMA)


def all_gather_matmul(ctx: Context, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                      bias: torch.Tensor | None = None, group: dist.ProcessGroup | None = None,
                      config: AnyOpsConfig | None = None) -> torch.Tensor:
    """Two shardings of A, told apart by shape (``upstream_layouts.py``):

    - upstream Iris's: ``A`` [M, K / W] this rank's column block, ``out`` [M, N] = ``cat([A_r], dim=1) @ B
      (+ bias[:, None])``, bias one per row; run bulk-synchronous.
    - ours: ``A`` [M / W, K] this rank's row block, ``out`` ([M, N], anywhere) = ``cat([A_r for r in group], dim=0)
      @ B (+ bias)``, bias one per column. The fused kernel needs block_m to divide M / W; otherwise (or with
      variant="bulk") A is gathered first, then multiplied.

    ``B`` [K, N] is the same on every rank. Collective; stream-ordered.

        ref = torch.cat([A_r for r in group], dim=0) @ B + bias     # ours; dim=1 and bias[:, None] upstream's

    Raises ``ValueError`` for an ``out`` that shares bytes with ``A``, ``B`` or ``bias``, operands that are not 2-D, of
    other dtypes (float16, bfloat16 or float32, all alike), devices or shapes, a ``bias`` of another shape, or
    ``variant="fused"`` where the fused kernel cannot run; ``TypeError`` for a ``config`` that is neither ``OpsConfig``
    nor ``FusedConfig``; ``NotImplementedError`` from ``ctx.ops`` across nodes; ``iris.MismatchError`` on every rank
    when the ranks' calls differ; ``iris.PeerError`` once a peer has failed.

    Example::

        A, B = ctx.randn(64, 32), ctx.randn(32, 32)  # the whole operands: the same on every rank here
        out = ctx.empty(64, 32)
        ctx.ops.all_gather_matmul(out, A.chunk(world_size)[rank], B)  # this rank's rows of A
        assert torch.allclose(out, A @ B, atol=1e-2)
    """
    caller, given = "ops.all_gather_matmul", config  # config is resolved below; the key holds the object passed
    common.bias_apart(caller, out, bias)
    key = common.launch_key(ctx, caller, group, given, (out, a, b))
    if ctx.launches.run(ctx, key, group, given, (out, a, b)):  # a remembered launch (iris/host/launches.py)
        return common.add_bias(ctx, out, bias, caller)
    config = common.resolve_config(config, caller)
    if is_k_sharded(out, a, b, ctx.group_sync(group, caller).size):
        return all_gather_matmul_k(ctx, out, a, b, bias, group, config, caller)
    common.check_operands(caller, out, a, b)
    sync = ctx.group_sync(group, caller)
    m_local, K = a.shape
    N = b.shape[1]
    M = sync.size * m_local
    common.expect_shape(caller, "out", out, (M, N), f"[group size {sync.size} * A rows, B columns]")
    if out.numel() == 0:  # M or N is 0 on every rank (the shapes agree): nothing to compute or send
        return common.add_bias(ctx, out, bias, caller)
    block_m, block_n, block_k = config.blocks(ctx.get_device().type, a.dtype)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    needs = [] if m_local % block_m == 0 else [f"block_m={block_m} to divide M / W = {m_local}"]
    if a.stride(1) != 1:
        needs.append("A with contiguous rows")
    # the gather is 26%, 21% and 11.5% of the GEMM's time on the three large shapes of docs/results.md, where
    # the push beat cuBLAS + the iris all_gather by 22%, 17% and 13%
    sent = (sync.size - 1) * m_local * K * a.element_size()
    gathered = ctx.workspaces.get("all_gather_matmul", sync.ranks, (M, K), a.dtype)
    if not common.choose_fused(caller, config, ctx, tiles, needs, comm_bytes=sent, flops=2 * M * N * K):
        slot = gathered[sync.index * m_local:(sync.index + 1) * m_local]
        slot.copy_(a)
        ctx.ccl.all_gather(gathered, slot, group=group)
        common.bulk_gemm(out, gathered, b, config)
        return common.add_bias(ctx, out, bias, caller)
    tma = descriptors_fit(a, b, out)
    copy_engine = config.uses_copy_engine(out.device.type, sync.size, ctx.tracing.enabled, ctx.shares_gpu)
    programs = num_programs(ctx.get_device(), tiles, spare=copy_sms(ctx, copy_engine), sms=ctx.get_agreed_cu_count())
    if copy_engine:
        chunks = triton.cdiv(m_local // block_m, config.group_m)
        arrived = ctx.workspaces.peer_flags("all_gather_matmul.arrived", sync.ranks, chunks)  # row i: member i's
        go = ctx.workspaces.get("all_gather_matmul.go", sync.ranks, (1,), torch.int32, zero=True)
        call = ctx.workspaces.get("all_gather_matmul.engines_call", sync.ranks, (4,), torch.int32, zero=True)
        schedule = CopySchedule(ctx, sync, caller)
        _send_rows(schedule, a, gathered, arrived, go, config.group_m * block_m)
        described = fingerprint(ctx, caller, (a, b, out), launch=dict(programs=programs, engines=chunks,
                                                                      tile=(block_m, block_n, block_k),
                                                                      group_m=config.group_m), sync=sync)
        with schedule.launch(go):
            _all_gather_matmul_engines_kernel[(programs,)](
                operand(a, (block_m, block_k), tma), operand(gathered, (block_m, block_k), tma), gathered,
                operand(b, (block_k, block_n), tma), operand(out, (block_m, block_n), tma), strides(a, b, out),
                (m_local, N, K), sync.args(ctx, described), arrived, go, call,
                GROUP_SIZE=sync.size,
                TILE=(block_m, block_n, block_k, config.group_m), TMA=tma, num_warps=config.num_warps,
                num_stages=config.stages())
        schedule.join(consumed=[arrived])  # every peer's copies have landed: the kernel waited for each chunk
        return common.add_bias(ctx, out, bias, caller)
    ready = ctx.workspaces.peer_flags("all_gather_matmul.ready", sync.ranks, m_local // block_m)
    call = ctx.workspaces.get("all_gather_matmul.call", sync.ranks, (5,), torch.int32, zero=True)
    comm = common.comm_programs(programs)
    described = fingerprint(ctx, caller, (a, b, out), launch=dict(programs=programs, comm=comm,
                                                                  tile=(block_m, block_n, block_k),
                                                                  group_m=config.group_m), sync=sync)
    gathered_operand = operand(gathered, (block_m, block_k), tma)  # a workspace: the stamp below guards it
    launch = launches.OperandLaunch(
        _all_gather_matmul_kernel, (programs,), ((m_local, N, K), sync.args(ctx, described), ready, call),
        dict(GROUP_SIZE=sync.size, COMM_PROGRAMS=comm, TILE=(block_m, block_n, block_k, config.group_m), COPY_K=COPY_K,
             VEC=common.row_vector_width(gathered), TMA=tma, num_warps=config.num_warps, num_stages=config.stages()),
        _leading(operand_maker((block_m, block_k), tma), gathered_operand, gathered,
                 operand_maker((block_k, block_n), tma), operand_maker((block_m, block_n), tma)))
    common.remember(ctx, key, group, given, launch, sync,
                    ("all_gather_matmul", "all_gather_matmul.ready", "all_gather_matmul.call"))(out, a, b)
    return common.add_bias(ctx, out, bias, caller)


def _send_rows(schedule, a, gathered, arrived, go, chunk_rows):
    """The copy engines' part, queued before the kernel: once the kernel's opening barrier has raised ``go``
    (every peer is in this call, its gathered A free), each chunk of ``chunk_rows`` rows of our A goes to our slot
    of every peer's gathered A, and then its flag on that peer (set to 1, cleared by the peer after its kernel)."""
    sync, m_local = schedule.sync, a.shape[0]
    schedule.after(go, 1)
    slot = slice(sync.index * m_local, (sync.index + 1) * m_local)
    peers = [(schedule.peer(gathered, r)[slot], schedule.peer(arrived, r)[sync.index]) for r in schedule.peers]
    for chunk, start in enumerate(range(0, m_local, chunk_rows)):
        rows = slice(start, min(m_local, start + chunk_rows))
        for peer_gathered, peer_arrived in peers:
            schedule.copy(peer_gathered[rows], a[rows])
            schedule.signal(peer_arrived[chunk:chunk + 1])


def _leading(a_operand, gathered_operand, gathered, b_operand, out_operand):
    """The SM kernel's leading arguments from the call's (out, A, B)."""
    return lambda out, a, b: (a_operand(a), a, gathered_operand, gathered, b_operand(b), out_operand(out),
                              strides(a, b, out))


declare("all_gather_matmul", all_gather_matmul, reference.all_gather_matmul,
        "the rows of A gathered from every rank, times B", "A [M / W, K], B [K, N], out [M, N]",
        compile_op="all_gather_matmul")
