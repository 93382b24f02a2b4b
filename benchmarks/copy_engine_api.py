"""The copy-engine API (``ctx.put / put_tile / put_tiles``, ``put_async``) at world size 1 by default (the peer is the
rank itself: a copy within one GPU, which the driver runs as a kernel of its own), or ``--world-size 2`` on two GPUs
(each rank puts to the next, over NVLink):

- ``put`` of 4 KiB to 1 GiB against ``torch.Tensor.copy_`` of the same bytes (both timed with CUDA events around
  back-to-back calls, the puts' queue joined to the stream once per sample; median of 5 samples);
- what ``wait_flag`` (already met) and ``signal_flag`` add to a 4 KiB put: the host's time to issue it, and the
  device's time per put with the host left out (puts captured in a CUDA graph and replayed);
- ``put_tiles`` of 64 tiles (one submission) against 64 ``put_tile`` calls: host time to issue, device time to land;
- a kernel releasing a pre-armed transfer: ``%globaltimer`` at the kernel's publish and at the landing signal, and
  the SMs the kernel kept computing (every program of its grid: none moves data);
- a kernel's own transfer through the proxy (``iris.copy_engine.put_async`` + ``quiet``, one program) against the
  SMs storing it (``iris.put`` on every SM): from which size handing it over pays.

    python benchmarks/copy_engine_api.py [--out DIR] [--max-bytes 1073741824] [--world-size 1]
"""

import argparse
import os
import statistics
import sys
import time

import iris  # first: it picks the backend
import torch
import triton
import triton.language as tl

from iris.bench.report import environment, format_table, write_results
import iris.copy_engine
from iris.copy_engine import Tile
from iris.host.memory.peers import peer_view


def _events_ms(fn, repeat, samples, finish=None):
    """Median over ``samples`` of the time per call of ``repeat`` back-to-back ``fn()`` on the stream (then
    ``finish()``, which joins other streams' work to it)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    if finish is not None:
        finish()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(repeat):
            fn()
        if finish is not None:
            finish()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / repeat)
    return statistics.median(times)


_JOIN_EVENTS = {}


def _join(main, lane):
    """``main.wait_stream(lane)`` through one re-recorded event per lane: wait_stream creates an event per call
    (cudaEventCreate, a few us of host time that ``Tensor.copy_`` does not pay), which would be charged to the put."""
    event = _JOIN_EVENTS.setdefault(lane, torch.cuda.Event())
    event.record(lane)
    main.wait_event(event)


def _row(op, provider, nbytes, ms, env, **extra):
    row = {"op": op, "provider": provider, "world_size": 1, "dtype": "uint8", "bytes": nbytes, "ms_p50": ms,
           "algbw_GBps": nbytes / ms / 1e6 if ms else None, "timing": "events", "gpu": env["gpu"],
           "commit": env["commit"], "date": env["date"]}
    row.update(extra)
    return row


def _peer(ctx):
    return (ctx.get_rank() + 1) % ctx.get_num_ranks()


def put_sweep(ctx, max_bytes, env):
    rows, me = [], _peer(ctx)
    main = torch.cuda.current_stream()
    lane = ctx.copy_engines.lanes[(me, 0)].stream
    src = ctx.empty(max_bytes, dtype=torch.uint8).random_(0, 255)
    dst = ctx.empty(max_bytes, dtype=torch.uint8)
    nbytes = 4096
    while nbytes <= max_bytes:
        s, d = src[:nbytes], dst[:nbytes]
        repeat = 50 if nbytes <= 1 << 22 else (10 if nbytes <= 1 << 26 else 3)

        def put():
            ctx.put(s, me, d, async_op=True)

        theirs = peer_view(ctx, d, me)
        # back-to-back puts as back-to-back copy_ calls, joined once per sample: the events on the main stream see
        # the last transfer land
        ours = _events_ms(put, repeat, 5, finish=lambda: _join(main, lane))
        torch_ms = _events_ms(lambda: theirs.copy_(s), repeat, 5)
        ctx.barrier()
        if ctx.get_num_ranks() == 1:
            assert torch.equal(dst[:nbytes], src[:nbytes]), f"put of {nbytes} bytes: data differs"
        rows.append(_row("put", "iris", nbytes, ours, env, variant="ctx.put"))
        rows.append(_row("put", "torch", nbytes, torch_ms, env, variant="Tensor.copy_"))
        nbytes *= 4
    return rows


def flag_overhead(ctx, env):
    me = _peer(ctx)
    lane = ctx.copy_engines.lanes[(me, 0)].stream
    src, dst = ctx.zeros(4096, dtype=torch.uint8), ctx.zeros(4096, dtype=torch.uint8)
    gate, flag = ctx.ones(1, dtype=torch.int32), ctx.zeros(1, dtype=torch.int32)
    rows = []
    for variant, kwargs in (("plain", {}), ("wait", {"wait_flag": gate, "wait_value": 1}),
                            ("signal", {"signal_flag": flag}),
                            ("wait+signal", {"wait_flag": gate, "wait_value": 1, "signal_flag": flag})):
        def put():
            ctx.put(src, me, dst, async_op=True, **kwargs)
            _join(torch.cuda.current_stream(), lane)  # the capture's stream inside a graph capture

        ms = _events_ms(put, 200, 7)
        t0 = time.perf_counter()
        for _ in range(200):
            ctx.put(src, me, dst, async_op=True, **kwargs)
        host_us = (time.perf_counter() - t0) / 200 * 1e6
        ctx.quiet(me)
        rows.append(_row("put_4KiB_flags", "iris", 4096, ms, env, variant=variant, host_us=host_us,
                         graph_us=_graph_us(ctx, put)))
    return rows


def _graph_us(ctx, put, count=50):
    """Device time per put, host time left out: ``count`` puts captured in one CUDA graph, replayed. None where the
    driver refuses to capture one of its steps."""
    try:
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(count):
                put()
        graph.replay()
        torch.cuda.synchronize()
    except RuntimeError as e:
        print(f"graph capture of a put refused: {e}")
        torch.cuda.synchronize()
        return None
    return _events_ms(graph.replay, 5, 5) / count * 1e3


def tiles(ctx, env):
    me, main = _peer(ctx), torch.cuda.current_stream()
    lane = ctx.copy_engines.lanes[(me, 0)].stream
    block, grid = 128, 8  # 64 tiles of 128 x 128 fp32 (64 KiB each) of a 1024 x 1024 matrix
    a = ctx.empty(grid * block, grid * block, dtype=torch.float32).normal_()
    b = ctx.zeros(grid * block, grid * block, dtype=torch.float32)
    pitch = a.stride(0) * 4
    all_tiles = [Tile(m, n, block, block, 4, pitch, a.data_ptr()) for m in range(grid) for n in range(grid)]
    target = iris.copy_engine.peer_address(ctx, b, me)
    rows = []
    for variant in ("put_tiles x1", "put_tile x64"):
        def issue():
            if variant == "put_tiles x1":
                ctx.put_tiles(all_tiles, me, [target] * 64, [pitch] * 64, async_op=True)
            else:
                for t in all_tiles:
                    ctx.put_tile(t, me, target, pitch, async_op=True)
            _join(main, lane)

        ms = _events_ms(issue, 5, 5)
        host = []
        for _ in range(20):
            t0 = time.perf_counter()
            issue()
            host.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        ctx.barrier()
        assert torch.equal(a, b) or ctx.get_num_ranks() > 1, f"{variant}: data differs"
        b.zero_()
        rows.append(_row("tiles_64", "iris", a.numel() * 4, ms, env, variant=variant,
                         host_us=statistics.median(host)))
    return rows


@triton.jit
def _release_kernel(data, gate, landed, stamps, n, spin_ns, BLOCK: tl.constexpr):
    # program 0: write the batch, stamp, publish the gate, wait for the landing signal, stamp; the rest compute
    # (spin for spin_ns) and never touch the batch: the SMs the copy engine leaves to the kernel
    pid = tl.program_id(0)
    t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    if pid == 0:
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(data + offs, (offs & 127).to(tl.uint8), mask=offs < n)
        tl.debug_barrier()
        published = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                              pack=1)
        tl.atomic_xchg(gate, 1, sem="release", scope="sys")
        while tl.atomic_add(landed, 0, sem="acquire", scope="sys") < 1:
            pass
        arrived = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                            pack=1)
        tl.store(stamps, published)
        tl.store(stamps + 1, arrived)
    else:
        now = t0
        while now - t0 < spin_ns:
            now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                            pack=1)


def released(ctx, env):
    """A transfer armed on the host (``put`` with ``wait_flag``) that a running kernel releases."""
    me = ctx.get_rank()
    sms = ctx.get_cu_count()
    programs = sms - 1  # one SM left for the driver's copy kernel within one GPU (docs/perf-notes.md)
    side = torch.cuda.Stream()
    rows = []
    for nbytes in (1 << 20, 16 << 20, 256 << 20):
        data, out = ctx.zeros(nbytes, dtype=torch.uint8), ctx.zeros(nbytes, dtype=torch.uint8)
        gate, landed = ctx.zeros(1, dtype=torch.int32), ctx.zeros(1, dtype=torch.int32)
        stamps = torch.zeros(2, dtype=torch.int64, device=ctx.get_device())
        latencies = []
        for _ in range(5):
            gate.zero_(), landed.zero_(), out.zero_()
            torch.cuda.synchronize()
            with torch.cuda.stream(side):  # the producer; the put orders after the (idle) default stream
                _release_kernel[(programs,)](data, gate, landed, stamps, nbytes, 200_000, BLOCK=4096, num_warps=8)
            ctx.put(data, me, out, wait_flag=gate, wait_value=1, signal_flag=landed, async_op=True)
            ctx.quiet(me)
            side.synchronize()
            published, arrived = stamps.tolist()
            latencies.append((arrived - published) / 1e6)
        assert torch.equal(out, data), "released transfer: data differs"
        rows.append(_row("released", "iris", nbytes, statistics.median(latencies), env, variant="put(wait_flag)",
                         timing="globaltimer", sms_kept=f"{programs}/{sms}"))
    return rows


@triton.jit
def _proxy_kernel(src, dst, nbytes, rank, peer, heap_bases, copy_engine_ctx, stamps):
    # one program hands the region to the copy engine through the host proxy and waits for it to land
    t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    iris.copy_engine.put_async(src, dst, nbytes, rank, peer, heap_bases, copy_engine_ctx)
    iris.quiet(copy_engine_ctx, peer)
    t1 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(stamps, t1 - t0)


@triton.jit
def _sm_put_kernel(src, dst, n, rank, peer, heap_bases, BLOCK: tl.constexpr):
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        iris.put(src + offs, dst + offs, rank, peer, heap_bases, mask=offs < n, hint=16)


def proxied(ctx, env):
    """A kernel's own transfer: through the proxy onto a copy engine (one program, no SM time for the bytes)
    against the SMs storing it (every SM)."""
    rank, me, sms = ctx.get_rank(), _peer(ctx), ctx.get_cu_count()
    rows = []
    stamps = torch.zeros(1, dtype=torch.int64, device=ctx.get_device())
    for nbytes in (64 << 10, 1 << 20, 16 << 20, 256 << 20):
        src = ctx.empty(nbytes, dtype=torch.uint8).random_(0, 255)
        dst = ctx.zeros(nbytes, dtype=torch.uint8)
        latencies = []
        for _ in range(7):
            _proxy_kernel[(1,)](src, dst, nbytes, rank, me, ctx.get_heap_bases(), ctx.get_copy_engine_ctx(), stamps)
            torch.cuda.synchronize()
            latencies.append(stamps.item() / 1e6)
        ctx.barrier()
        assert torch.equal(src, dst) or ctx.get_num_ranks() > 1, "put_async: data differs"
        dst.zero_()
        sm_ms = _events_ms(lambda: _sm_put_kernel[(sms,)](src, dst, nbytes, rank, me, ctx.get_heap_bases(),
                                                          BLOCK=4096, num_warps=8), 5, 5)
        ctx.barrier()
        assert torch.equal(src, dst) or ctx.get_num_ranks() > 1, "SM put: data differs"
        rows.append(_row("kernel_put", "iris", nbytes, statistics.median(latencies), env, variant="put_async (proxy)",
                         timing="globaltimer", sms_kept=f"{sms - 1}/{sms}"))
        rows.append(_row("kernel_put", "iris", nbytes, sm_ms, env, variant="iris.put (SMs)", sms_kept=f"0/{sms}"))
    return rows


def body(out, max_bytes):
    ctx = iris.iris(heap_size=2 * max_bytes + (1 << 28), engines=("sdma",))
    if ctx.get_device().type != "cuda":
        raise SystemExit("benchmarks/copy_engine_api.py: needs a GPU")
    env = environment(ctx.get_device())
    rows = put_sweep(ctx, max_bytes, env) + flag_overhead(ctx, env) + tiles(ctx, env)
    if ctx.get_num_ranks() == 1:  # the kernel waits for its own transfer: the rank must be its own peer
        rows += released(ctx, env)
    rows += proxied(ctx, env)
    for row in rows:
        row["world_size"] = ctx.get_num_ranks()
    if ctx.get_rank() != 0:
        return
    write_results(rows, out, "copy_engine_api")
    columns = ("op", "provider", "variant", "bytes", "ms_p50", "algbw_GBps", "host_us", "graph_us", "sms_kept")
    print(format_table(rows, columns, title=f"copy-engine API, {env['gpu']}, world size {ctx.get_num_ranks()}"))
    torch_bw = {r["bytes"]: r["algbw_GBps"] for r in rows if r["op"] == "put" and r["provider"] == "torch"}
    ratio = [f"{r['bytes'] >> 20} MiB {100 * r['algbw_GBps'] / torch_bw[r['bytes']]:.0f}%" for r in rows
             if r["op"] == "put" and r["provider"] == "iris" and r["bytes"] >= 64 << 20]
    print("put / Tensor.copy_ bandwidth from 64 MiB: " + ", ".join(ratio))
    flags = {r["variant"]: r.get("graph_us") for r in rows if r["op"] == "put_4KiB_flags"}
    if flags.get("plain") is not None:
        print("device time a flag adds to a 4 KiB put (graph replay): " + ", ".join(
            f"{name} {flags[name] - flags['plain']:+.2f} us" for name in ("wait", "signal", "wait+signal")
            if flags.get(name) is not None))
    sys.stdout.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "results-local"))
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--world-size", type=int, default=1, help="2 on two GPUs: each rank puts to the next")
    args = parser.parse_args()
    iris.run(body, args.world_size, args.out, args.max_bytes)
