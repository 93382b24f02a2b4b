"""The documented copy-engine API (``iris/host/copy_engine/api.py``, ``iris/device/copy_engine.py``): engine selection,
host ``put / put_tile / put_tiles / quiet`` with their wait and signal flags, the errors, and the device operations
with ``use_copy_engine=True``. On the cpu backend host threads stand in for the copy queues; on GPUs the same
bodies run on the copy engines."""

import iris  # noqa: F401  (before triton)
import iris.copy_engine  # noqa: F401  (kernels below call iris.copy_engine.put_async)
import iris.triggered  # noqa: F401  (the producer kernel calls iris.triggered.publish)
import torch
import triton
import triton.language as tl

from conftest import world_sizes  # noqa: E402
from rank_utils import GPU_SCALE, error_message, poison_value, rank_data, wait_until_in  # noqa: E402

N = 1 << 20 if GPU_SCALE else 96  # elements per put
WORLD = min(world_sizes())  # 2 ranks by default (IRIS_TEST_WORLD_SIZES=1: a rank putting to itself)


RUN_S = 45  # each body's limit (about 10 s on one H200, 20 on the cpu tier): a hang fails here, not in a script's timeout


def _context(**kwargs):
    import iris

    kwargs.setdefault("timeout_s", 15)  # every blocking put / quiet gives up after 15 s (IRIS_TIMEOUT_S: 300)
    return iris.iris(1 << 26 if GPU_SCALE else 1 << 21, **kwargs)


def _host_gate(device):
    """A wait flag the host raises with a plain store: pinned host memory (device-visible) on GPUs. A gate on the
    heap would be raised by a fill kernel on the current stream, and that stream may share a hardware queue with
    the lane whose stream wait is holding it: the fill then never runs and the wait never ends."""
    return torch.zeros(1, dtype=torch.int32, pin_memory=device.type == "cuda")


def _host_body():
    from iris.copy_engine import Tile, peer_address

    ctx = _context(engines=("sdma",))
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    peer, left = (rank + 1) % world, (rank - 1) % world
    dev = ctx.get_device()
    got = {}
    # blocking put into the peer's copy of dst
    src = ctx.zeros(N, dtype=torch.float32)
    src.copy_(rank_data(rank, N, torch.float32, dev))
    dst = ctx.full((N,), float(poison_value(torch.float32)))
    ctx.barrier()
    ctx.put(src, peer, dst)
    ctx.barrier()
    got["blocking"] = torch.equal(dst.cpu(), rank_data(left, N, torch.float32, "cpu"))
    # upstream's names, async, a signal of 3 on an int32 flag, then quiet
    flag = ctx.zeros(1, dtype=torch.int32)
    dst2 = ctx.full((N,), -1, dtype=torch.int16)
    src2 = rank_data(rank, N, torch.int16, dev)
    src2 = ctx.zeros(N, dtype=torch.int16).copy_(src2)
    ctx.barrier()
    ctx.put(src2, dst_rank=peer, dst_tensor=dst2, signal_flag=flag, signal_value=3, async_op=True, channel=1)
    ctx.quiet(dst_rank=peer, channel=1)
    ctx.barrier()
    got["signal"] = (torch.equal(dst2.cpu(), rank_data(left, N, torch.int16, "cpu")), int(flag.item()))
    # a wait on a local flag (a raw address, as upstream's): nothing moves until the host raises it
    gate = _host_gate(dev)
    dst3 = ctx.zeros(N, dtype=torch.float32)
    ctx.barrier()
    ctx.put(src, peer, dst3, wait_flag=gate.data_ptr(), wait_value=2, signal_flag=flag, async_op=True)
    lane = ctx.copy_engines.lanes[(peer, 0)]
    import time
    time.sleep(0.05)
    got["held"] = not lane.drained()
    gate.fill_(1)
    time.sleep(0.02)
    got["held_below"] = not lane.drained()
    gate.fill_(2)
    ctx.quiet(peer)
    ctx.barrier()
    got["waited"] = (torch.equal(dst3.cpu(), rank_data(left, N, torch.float32, "cpu")), int(flag.item()))
    # a 2-D view with contiguous rows: columns 0..15 of ours into columns 16..31 of the peer's
    mat = ctx.zeros(8, 32, dtype=torch.int32)
    mat.copy_(rank_data(rank, 8 * 32, torch.int32, dev).view(8, 32))
    out = ctx.full((8, 32), -5, dtype=torch.int32)
    ctx.barrier()
    ctx.put(mat[:, :16], peer, out[:, 16:])
    ctx.barrier()
    ref = torch.full((8, 32), -5, dtype=torch.int32)
    ref[:, 16:] = rank_data(left, 8 * 32, torch.int32, "cpu").view(8, 32)[:, :16]
    got["rows"] = torch.equal(out.cpu(), ref)
    # put_tiles: six 3x4 tiles of a [6, 12] int32 matrix in one submission, one raw signal; put_tile: one more
    a = ctx.zeros(6, 12, dtype=torch.int32).copy_(rank_data(rank, 72, torch.int32, dev).view(6, 12))
    b = ctx.full((6, 12), -9, dtype=torch.int32)
    tile_flag = ctx.zeros(1, dtype=torch.int32)
    ctx.barrier()
    target = peer_address(ctx, b, peer)
    tiles = [Tile(pm, pn, 3, 4, 4, 48, a.data_ptr()) for pm in range(2) for pn in range(3) if (pm, pn) != (1, 2)]
    ctx.put_tiles(tiles, peer, [target] * len(tiles), [48] * len(tiles), signal_flag=peer_address(ctx, tile_flag, peer))
    ctx.put_tile(Tile(1, 2, 3, 4, 4, 48, a.data_ptr()), peer, target, 48, signal_flag=tile_flag, signal_value=10)
    ctx.barrier()
    got["tiles"] = (torch.equal(b.cpu(), rank_data(left, 72, torch.int32, "cpu").view(6, 12)), int(tile_flag.item()))
    # a zero-size put queues nothing, not even its signal
    zflag = ctx.zeros(1, dtype=torch.int32)
    ctx.barrier()
    ctx.put(src[:0], peer, dst[:0], signal_flag=zflag)
    ctx.quiet()
    ctx.barrier()
    got["zero"] = int(zflag.item())
    got["ctx"] = tuple(ctx.get_copy_engine_ctx().shape), ctx.enable_copy_engine
    ctx.barrier()
    return got


def test_host_put_wait_signal_tiles_quiet(pools):
    world = WORLD
    for rank, got in enumerate(pools(world).run(_host_body, timeout_s=RUN_S)):
        assert got["blocking"], f"rank {rank}: blocking put"
        assert got["signal"] == (True, 3), f"rank {rank}: async put + signal 3: {got['signal']}"
        assert got["held"] and got["held_below"], f"rank {rank}: a put with wait_flag ran before the flag reached 2"
        assert got["waited"] == (True, 4), f"rank {rank}: wait then put then +1: {got['waited']}"
        assert got["rows"], f"rank {rank}: 2-D view put"
        assert got["tiles"] == (True, 11), f"rank {rank}: put_tiles (one signal) + put_tile (+10): {got['tiles']}"
        assert got["zero"] == 0, f"rank {rank}: a zero-size put signalled"
        assert got["ctx"] == ((world, 6), True)


def _errors_body():
    import os

    import iris
    from iris.copy_engine import Tile
    from iris.host.copy_engine.api import resolve_engines

    messages = {}
    messages["bad_engine"] = error_message(resolve_engines, ("nvlink",))
    messages["bad_flag_type"] = error_message(resolve_engines, (), None, "yes")
    os.environ["IRIS_ENABLE_COPY_ENGINE"] = "maybe"
    messages["bad_env"] = error_message(resolve_engines)
    os.environ["IRIS_ENABLE_COPY_ENGINE"] = "1"
    messages["env_on"] = resolve_engines()
    del os.environ["IRIS_ENABLE_COPY_ENGINE"]
    messages["spellings"] = [resolve_engines("sdma"), resolve_engines(("ce",)), resolve_engines(None, "sdma"),
                             resolve_engines(enable_copy_engine=True), resolve_engines(), resolve_engines(None)]
    off = _context()
    t = off.zeros(4)
    messages["off"] = [off.enable_copy_engine, off.get_copy_engine_ctx()] + [
        error_message(fn, *args) for fn, args in ((off.put, (t, 0)), (off.quiet, ()),
                                                   (off.put_tile, (Tile(0, 0, 1, 1, 4, 4, t.data_ptr()), 0, 0, 4)),
                                                   (off.put_tiles, ([], 0, [], [])))]
    ctx = _context(enable_copy_engine=True, timeout_s=0.5)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    src, dst = ctx.zeros(8), ctx.zeros(8)
    flag = ctx.zeros(1, dtype=torch.int32)
    gate = _host_gate(ctx.get_device())
    ctx.barrier()
    messages["not_heap"] = error_message(ctx.put, src, 0, torch.zeros(8, device=ctx.get_device()))
    messages["size"] = error_message(ctx.put, src, 0, ctx.zeros(4))
    messages["flag_dtype"] = error_message(ctx.put, src, 0, dst, signal_flag=ctx.zeros(1))
    messages["flag_numel"] = error_message(ctx.put, src, 0, dst, signal_flag=ctx.zeros(2, dtype=torch.int32))
    messages["rank"] = error_message(ctx.put, src, world, dst)
    messages["float_rank"] = error_message(ctx.put, src, 1.0, dst)
    messages["dtype"] = error_message(ctx.put, src, 0, ctx.zeros(8, dtype=torch.int32))  # same bytes, other dtype
    messages["signal_value"] = error_message(ctx.put, src, 0, dst, signal_flag=flag, signal_value=2**40)
    messages["wait_type"] = error_message(ctx.put, src, 0, dst, wait_flag=flag, wait_value=1.5)
    messages["channel"] = error_message(ctx.put, src, 0, dst, channel=7)
    messages["wait_value"] = error_message(ctx.put, src, 0, dst, wait_flag=flag)
    messages["both_names"] = error_message(ctx.put, src, 0, dst_rank=1)
    messages["tiles_len"] = error_message(ctx.put_tiles, [Tile(0, 0, 1, 1, 4, 4, src.data_ptr())], 0, [], [])
    messages["tile_stride"] = error_message(ctx.put_tile, Tile(0, 0, 2, 4, 4, 8, src.data_ptr()), 0, dst.data_ptr(), 8)
    messages["untouched"] = torch.count_nonzero(dst).item() + int(flag.item())
    # the peer's put below writes into this dst once its gate opens: the count above must be done first
    ctx.barrier()
    # a wait that nobody releases: the blocking put gives up with the context's timeout instead of hanging
    messages["timeout"] = error_message(ctx.put, src, (rank + 1) % world, dst, wait_flag=gate.data_ptr(),
                                        wait_value=1, channel=1)
    gate.fill_(1)  # release the wait (a GPU stream would wait for it for good), then collect what is left
    error_message(ctx.quiet, (rank + 1) % world, 1)
    ctx.barrier()
    return messages


def test_errors_name_the_method_value_and_fix(pools):
    for rank, m in enumerate(pools(WORLD).run(_errors_body, timeout_s=RUN_S)):
        assert "ValueError" in m["bad_engine"] and "'nvlink'" in m["bad_engine"] and "'sdma'" in m["bad_engine"]
        assert "TypeError" in m["bad_flag_type"] and "enable_copy_engine" in m["bad_flag_type"]
        assert "ValueError" in m["bad_env"] and "IRIS_ENABLE_COPY_ENGINE" in m["bad_env"]
        assert m["env_on"] is True
        assert m["spellings"] == [True, True, True, True, False, False]
        assert m["off"][:2] == [False, None]
        for method, message in zip(("put", "quiet", "put_tile", "put_tiles"), m["off"][2:]):
            assert f"RuntimeError: Iris.{method}: the copy engine is disabled" in message, message
            assert 'copy_engine="sdma"' in message and 'engines=("sdma",)' in message
        assert "Iris.put: dst_tensor is not on the symmetric heap" in m["not_heap"]
        assert "Iris.put" in m["size"] and "32 bytes" in m["size"] and "16" in m["size"]
        assert "Unsupported flag tensor dtype torch.float32" in m["flag_dtype"]
        assert "one-element" in m["flag_numel"]
        assert f"to_rank={WORLD} is outside [0, {WORLD})" in m["rank"]
        assert f"to_rank=1.0 is a float, not a rank: pass an int in [0, {WORLD})" in m["float_rank"]
        assert "src_tensor is torch.float32 but dst_tensor is torch.int32" in m["dtype"], m["dtype"]
        assert "signal_value=1099511627776 does not fit the flag's int32" in m["signal_value"], m["signal_value"]
        assert "TypeError: Iris.put: wait_value must be an int, got float 1.5" in m["wait_type"], m["wait_type"]
        assert "channel=7 is outside [0, 2)" in m["channel"] and "IRIS_CE_CHANNELS" in m["channel"]
        assert "wait_value" in m["wait_value"]
        assert "TypeError" in m["both_names"] and "to_rank and dst_rank" in m["both_names"]
        assert "1 tiles, 0 to_ptrs and 0 to_strides" in m["tiles_len"]
        assert "16 bytes" in m["tile_stride"] and "src_stride=8" in m["tile_stride"]
        assert m["untouched"] == 0, f"rank {rank}: a refused call moved data"
        assert "RankTimeoutError" in m["timeout"] and "Iris.put" in m["timeout"], m["timeout"]


@triton.jit
def _device_kernel(src, dst, flags, rect_src, rect_dst, gate, n, rank, peer, heap_bases, copy_engine_ctx,
                   BLOCK: tl.constexpr, W: tl.constexpr, H: tl.constexpr, PITCH: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, rank, peer, heap_bases, mask=offs < n, copy_engine_ctx=copy_engine_ctx,
             use_copy_engine=True, contiguous_copy=True)
    iris.atomic_add(flags, 1, rank, peer, heap_bases, copy_engine_ctx=copy_engine_ctx, use_copy_engine=True)
    iris.quiet(copy_engine_ctx, peer)
    if pid == 0:
        # the rectangle helpers: W bytes x H rows at pitch PITCH, then +5 on the peer's second flag
        iris.put_signal_rect(rect_src, rect_dst, rank, peer, heap_bases, copy_engine_ctx, flags + 1, 5, W, H, PITCH,
                             PITCH)
        iris.wait_then_put_signal_rect(rect_src + H * PITCH, rect_dst + H * PITCH, rank, peer, heap_bases,
                                       copy_engine_ctx, gate, 1, flags + 2, 7, W, H, PITCH, PITCH)


@triton.jit
def _async_kernel(src, dst, flag, nbytes, rank, peer, heap_bases, copy_engine_ctx):
    # a region handed to the copy engine through the proxy, its signal, then quiet until it has landed
    iris.copy_engine.put_async(src, dst, nbytes, rank, peer, heap_bases, copy_engine_ctx, flag, 9)
    iris.copy_engine.put_async(src, dst, 0, rank, peer, heap_bases, copy_engine_ctx)  # nothing to move
    iris.quiet(copy_engine_ctx, peer)


def _device_body():
    ctx = _context(engines="sdma")
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    peer, left = (rank + 1) % world, (rank - 1) % world
    dev = ctx.get_device()
    n, block = (N, 1024) if GPU_SCALE else (N, 32)
    src = ctx.zeros(n, dtype=torch.float32).copy_(rank_data(rank, n, torch.float32, dev))
    dst = ctx.full((n,), -77.0)
    flags = ctx.zeros(3, dtype=torch.int32)
    w, h, pitch = 20, 3, 32  # bytes
    rect_src = ctx.zeros(2 * h * pitch, dtype=torch.uint8).copy_(
        rank_data(rank, 2 * h * pitch, torch.int16, dev).to(torch.uint8))
    rect_dst = ctx.full((2 * h * pitch,), 255, dtype=torch.uint8)
    gate = ctx.ones(1, dtype=torch.int32)
    ctx.barrier()
    blocks = triton.cdiv(n, block)
    _device_kernel[(blocks,)](src, dst, flags, rect_src, rect_dst, gate, n, rank, peer, ctx.get_heap_bases(),
                              ctx.get_copy_engine_ctx(), BLOCK=block, W=w, H=h, PITCH=pitch)
    ctx.barrier()
    big = ctx.full((n,), -77.0)
    async_flag = ctx.zeros(1, dtype=torch.int64)
    ctx.barrier()
    _async_kernel[(1,)](src, big, async_flag, n * 4, rank, peer, ctx.get_heap_bases(), ctx.get_copy_engine_ctx())
    ctx.barrier()
    proxied = (torch.equal(big.cpu(), rank_data(left, n, torch.float32, "cpu")), int(async_flag.item()))
    ref_rect = torch.full((2 * h, pitch), 255, dtype=torch.uint8)
    ref_rect[:, :w] = rank_data(left, 2 * h * pitch, torch.int16, "cpu").to(torch.uint8).view(2 * h, pitch)[:, :w]
    ok = (torch.equal(dst.cpu(), rank_data(left, n, torch.float32, "cpu")),
          torch.equal(rect_dst.cpu().view(2 * h, pitch), ref_rect), flags.tolist(), blocks, proxied)
    ctx.barrier()
    return ok


def test_device_ops_with_use_copy_engine(pools):
    for rank, (data, rect, flags, blocks, proxied) in enumerate(pools(WORLD).run(_device_body, timeout_s=RUN_S)):
        assert data, f"rank {rank}: put(use_copy_engine=True) data"
        assert rect, f"rank {rank}: put_signal_rect / wait_then_put_signal_rect data"
        assert flags == [blocks, 5, 7], f"rank {rank}: flags {flags}"
        assert proxied == (True, 9), f"rank {rank}: put_async through the proxy: {proxied}"


@triton.jit
def _producer_kernel(buffer, view, rank, ROWS: tl.constexpr, COLS: tl.constexpr, first):
    # program p writes row p of our block, publishes its batch (two rows per batch: two contributors each)
    pid = tl.program_id(0)
    cols = tl.arange(0, COLS)
    tl.store(buffer + (rank * ROWS + pid) * COLS + cols, (rank * 1000 + pid * COLS + cols).to(tl.int32))
    iris.triggered.publish(view, first + pid // 2)


def _triggered_body():
    import iris.triggered as tr

    ctx = _context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    rows, cols = 4, 16
    buffer = ctx.full((world * rows, cols), -1, dtype=torch.int32)
    row_bytes = cols * 4
    # rank r owns rows [r * rows, (r + 1) * rows): two batches of two rows, each released by two programs
    schedules = [[tr.Batch((tr.Segment((r * rows + 2 * i) * row_bytes, row_bytes, 2, row_bytes),), contributors=2)
                  for i in range(2)] for r in range(world)]
    plan = tr.TriggeredPlan(ctx, buffer, schedules)
    got = []
    for epoch in range(2):
        buffer.fill_(-1)
        ctx.barrier()
        view = plan.begin_device_epoch()
        if epoch == 0:
            busy = error_message(tr.TriggeredPlan(ctx, buffer, schedules).begin_device_epoch)
        _producer_kernel[(rows,)](buffer, view, rank, ROWS=rows, COLS=cols, first=plan.batch_id(rank, 0))
        plan.end_device_epoch()
        got.append(buffer.cpu().clone())
        plan.next_epoch()
    states = [plan.state.value, plan.epoch]
    misuse = error_message(plan.next_epoch)
    plan.destroy()
    wrong = error_message(tr.TriggeredPlan, ctx, buffer, schedules + schedules[:1])  # one too many at any size
    outside = error_message(tr.TriggeredPlan, ctx, buffer, [[tr.Batch((tr.Segment(0, 1 << 20),))]] * world)
    return got, states, misuse, wrong, outside, busy


def test_triggered_plan_kernel_released_transfers(pools):
    world, rows, cols = WORLD, 4, 16
    ref = torch.stack([torch.arange(rows * cols, dtype=torch.int32).view(rows, cols) + 1000 * r
                       for r in range(world)]).view(world * rows, cols)
    results = pools(world).run(_triggered_body, timeout_s=RUN_S)
    for rank, (got, states, misuse, wrong, outside, busy) in enumerate(results):
        for epoch, buffer in enumerate(got):
            assert torch.equal(buffer, ref), f"rank {rank} epoch {epoch}: {buffer}"
        assert states == ["armed", 2]
        assert "next_epoch" in misuse and "not complete" in misuse
        assert "needs one schedule per rank" in wrong
        assert "outside the buffer" in outside
        assert "CopyQueue.fork" in busy and "end_device_epoch" in busy, busy


def _killed_while_put_waits_body():
    import os
    import signal
    import time

    ctx = _context(engines=("sdma",))
    src, dst = ctx.zeros(8), ctx.zeros(8)
    gate = _host_gate(ctx.get_device())
    ctx.barrier()
    if ctx.get_rank() == 1:
        time.sleep(1.0)  # rank 0 is blocked in its put by now, on a gate nobody will raise
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        ctx.put(src, 1, dst, wait_flag=gate.data_ptr(), wait_value=1)  # raises PeerError once the watchdog sees rank 1 go
    finally:
        gate.fill_(1)  # a GPU stream would wait for the gate for good, and the process's exit with it
    return "put returned"


def test_blocking_put_raises_peer_error_when_the_peer_dies():
    import time

    import pytest

    with iris.RankPool(2) as pool:
        pool.run(_ready)  # the processes first: only the failing call is timed
        start = time.monotonic()
        with pytest.raises(iris.RankError) as info:
            pool.run(_killed_while_put_waits_body, timeout_s=RUN_S)
        elapsed = time.monotonic() - start
    message = str(info.value)
    assert "rank 1 died: killed by signal 9" in message, message
    waiting = message[message.index("--- rank 0 ---"):]
    assert "PeerError" in waiting and "peer rank 1" in waiting and "put" in waiting, waiting
    assert elapsed < 15, f"the blocked put failed after {elapsed:.1f} s"


def _failure_found_by_the_lane_body():
    """The watchdog records a failure while a blocking put's wait is on the lane thread; the lane's check raises it
    first and the put hands it to this thread (a fresh rank process, its put told to leave the checks to the lane);
    only then is the watchdog's own copy queued for this thread (an order its lock ``_failing`` allows, held open
    here). One PeerError must surface, not a second one later."""
    import threading
    import time

    from iris.host.copy_engine import api
    from iris.host.watchdog import _raise_in

    api.SPIN_S = 5.0  # the put's caller spins without checking for failures: only the lane's check finds it
    ctx = _context(engines=("sdma",))
    src, dst = ctx.zeros(8), ctx.zeros(8)
    gate = _host_gate(ctx.get_device())
    watchdog, owner, message = ctx.watchdog, threading.get_ident(), "peer rank 1 (pid 1) stood in for by this test"

    def record_then_raise():
        wait_until_in(owner, "_drain")  # the put's wait is on the lane
        with watchdog._failing:  # as Watchdog._fail: record, then queue the raise for the context's thread
            ctx.groups.failure = message
            # The lane's check finds the failure and the put hands it over: a caller that withdraws the queued
            # copy waits for this lock in _withdraw; one that does not is past it (then this waits 10 s in vain).
            wait_until_in(owner, "_withdraw", timeout_s=10.0)
            _raise_in(owner, message)

    watching = threading.Thread(target=record_then_raise)
    watching.start()
    try:
        ctx.put(src, 0, dst, wait_flag=gate.data_ptr(), wait_value=1)
        first = "put returned"
    except iris.PeerError as e:
        first = f"{type(e).__name__}: {e}"
    try:
        deadline = time.monotonic() + 0.5
        while watching.is_alive() or time.monotonic() < deadline:  # Python running: where a queued copy lands
            pass
        second = None
    except iris.PeerError as e:
        second = f"{type(e).__name__}: {e}"
    gate.fill_(1)
    return first, second


def test_a_failure_the_lane_finds_surfaces_once():
    with iris.RankPool(1) as pool:
        [(first, second)] = pool.run(_failure_found_by_the_lane_body, timeout_s=RUN_S)
    assert first.startswith("PeerError") and "stood in for" in first, first
    assert second is None, second


def _ready():
    return True


_SIGNAL_PROBE = """
import sys
sys.path.insert(0, "tests")
import torch
from iris.device.copy_engine import _signal_add_kernel
from sm90 import launch_compile
for dtype in (torch.int32, torch.int64):
    flags = torch.zeros(4, dtype=dtype)
    for view in (flags[:1], flags[1:2]):
        hashes = {launch_compile(_signal_add_kernel, view, v, num_warps=1).hash for v in (0, 1, 16, -7)}
        kernel = launch_compile(_signal_add_kernel, view, 1, num_warps=1)
        print(dtype, view.data_ptr() % 16 == 0, len(hashes), kernel.src.signature["value"],
              kernel.metadata.global_scratch_size + kernel.metadata.profile_scratch_size)
"""


def test_signal_kernel_compiles_once_per_flag_for_every_value():
    # The host launches the signal through compiled handles made with the context, one per (flag dtype, 16-byte
    # alignment): a value of 1 or a multiple of 16 must not select another specialisation, and the handle takes the
    # address and an int32 value with no scratch (iris/host/copy_engine/api.py, _SignalLauncher). Compiled for sm_90.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEBUG", "IRIS_DEBUG")}
    env["IRIS_BACKEND"] = "cuda"  # compile only: no context, no GPU
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_PROBE], env=env, cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split("\n")[:4]
    assert lines == [f"torch.{d} {a} 1 i32 0" for d in ("int32", "int64") for a in (True, False)], proc.stdout
