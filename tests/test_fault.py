"""Peer failure without debug mode (iris/host/watchdog.py): when a rank raises or is killed, the ranks
waiting for it in a device wait fail within seconds with PeerError naming it; a rank that closes cleanly
is no failure; IRIS_WATCHDOG=0 starts no thread.

Each failing case takes a fresh pool: a pool whose rank failed is torn down by RankPool._collect."""

import os
import signal
import threading
import time

import pytest
import torch
import triton

import iris
from conftest import on_gpu
from iris.device.sync import wait_until
from rank_utils import error_message, int64, new_context, preset_sync_words, wait_until_in

# Far above what the failing call takes with the watchdog (1 to 3 s: context, warm-up compile on GPUs, a 0.2 s
# poll), below the pool's FAILURE_GRACE_S (15 s), after which a rank spinning without it would be stopped anyway.
FAST_S = 10.0
POOL_TIMEOUT_S = 120


def _wait_for_device(ctx):
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()  # on GPUs the wait happens here; the kernels above only queue


def _ready():
    return os.getpid()


def _rank_section(message, rank):
    """Rank ``rank``'s part of a RankError message (``--- rank r ---`` then its traceback text)."""
    start = message.index(f"--- rank {rank} ---")
    end = message.find("--- rank ", start + 1)
    return message[start:] if end < 0 else message[start:end]


def _failing_run(body, world_size=2, *args):
    """Run ``body(*args)`` on a fresh started pool; return the RankError message and the seconds the call took."""
    with iris.RankPool(world_size) as pool:
        pool.run(_ready)  # start the processes first: only the failing call is timed
        start = time.monotonic()
        with pytest.raises(iris.RankError) as info:
            pool.run(body, *args, timeout_s=POOL_TIMEOUT_S)
        return str(info.value), time.monotonic() - start


def _raise_before_barrier_body():
    ctx = new_context(heap_size=1 << 16)
    ctx.device_barrier()  # compiled (on GPUs), so the failure finds rank 0 waiting, not compiling
    _wait_for_device(ctx)
    if ctx.get_rank() == 1:
        time.sleep(0.5)  # rank 0 is inside the barrier by now, waiting for us
        raise ValueError("rank 1 gives up before the barrier")
    ctx.device_barrier()  # without the watchdog: spins until the pool stops it
    _wait_for_device(ctx)
    return "passed the barrier"


@pytest.mark.parametrize("world_size", [2, 4])
def test_peer_that_raises_fails_the_waiting_ranks_fast(world_size):
    message, elapsed = _failing_run(_raise_before_barrier_body, world_size)
    assert "rank 1 gives up before the barrier" in _rank_section(message, 1)
    # the cause first: the rank that raised, then the ranks it stopped
    assert f"{world_size} of {world_size} ranks failed (rank 1 first)\n--- rank 1 ---" in message, message[:300]
    for rank in set(range(world_size)) - {1}:
        # Every rank names rank 1, not a rank that failed with PeerError because of it.
        waiting = _rank_section(message, rank)
        assert "PeerError" in waiting and "peer rank 1 " in waiting and "raised an exception" in waiting, waiting
        assert ("synchronize" if on_gpu() else "device_barrier") in waiting, waiting  # raised where it waited
    assert elapsed < FAST_S, f"the ranks failed after {elapsed:.1f} s\n{message}"


def _killed_in_all_reduce_body():
    ctx = new_context()
    inp, out = ctx.ones(1024), ctx.zeros(1024)
    ctx.ccl.all_reduce(out, inp)  # compiled (on GPUs), so the failure finds rank 0 waiting, not compiling
    ctx.barrier()
    if ctx.get_rank() == 1:
        time.sleep(1.0)  # rank 0 is inside the all_reduce by now, waiting for us
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.ccl.all_reduce(out, inp)
    _wait_for_device(ctx)
    return "all_reduce returned"


def test_killed_peer_fails_the_collective_fast():
    message, elapsed = _failing_run(_killed_in_all_reduce_body)
    assert "rank 1 died: killed by signal 9" in _rank_section(message, 1), message
    waiting = _rank_section(message, 0)
    assert "PeerError" in waiting and "peer rank 1" in waiting and "died" in waiting, waiting
    assert ("synchronize" if on_gpu() else "all_reduce") in waiting, waiting
    assert elapsed < FAST_S, f"rank 0 failed after {elapsed:.1f} s\n{message}"


def _later_calls_body():
    """Rank 1 marks itself failed (what RankPool does when a call raises) and returns, so the pool keeps
    rank 0's answer: the PeerError in its barrier, then what later calls that talk to peers do."""
    from iris.host.watchdog import mark_failed

    ctx = new_context(heap_size=1 << 16)
    inp, out = ctx.ones(64), ctx.zeros(64)
    ctx.barrier()
    if ctx.get_rank() == 1:
        mark_failed(ValueError("as if this call had raised"))
        return None
    start = time.monotonic()
    try:
        ctx.device_barrier()
        _wait_for_device(ctx)
        first = "no error"
    except iris.PeerError as e:
        first = f"{type(e).__name__}: {e}"
    waited = time.monotonic() - start
    later = {}
    for name, call in [("barrier", ctx.barrier), ("device_barrier", ctx.device_barrier),
                       ("all_reduce", lambda: ctx.ccl.all_reduce(out, inp)), ("broadcast", lambda: ctx.broadcast(1))]:
        start = time.monotonic()
        later[name] = (error_message(call), time.monotonic() - start)
    return first, waited, later, ctx.failure


def test_later_calls_raise_peer_error_at_once():
    with iris.RankPool(2) as pool:
        results = pool.run(_later_calls_body, timeout_s=POOL_TIMEOUT_S)
    first, waited, later, failure = results[0]
    assert first.startswith("PeerError") and "peer rank 1" in first, first
    assert waited < FAST_S, waited
    assert "peer rank 1" in failure
    for name, (error, took) in later.items():
        assert error.startswith("PeerError") and "peer rank 1" in error, (name, error)
        assert took < 5.0, (name, took)  # at once: no wait for a peer (a loaded 2-core CI machine can stall ~1 s)


def _failing_as_a_peer_fails_body():
    """This rank fails (``mark_failed``, as RankPool does when a call raises) just as the watchdog raises a peer's
    failure in this thread: the raise is held until ``mark_failed`` waits on the watchdogs' lock, so it lands inside
    it. ``mark_failed`` must absorb it (this rank is failing already), and leave none queued to land later."""
    from iris.host import watchdog

    ctx = new_context(heap_size=1 << 16)
    owner, holding = threading.get_ident(), threading.Event()

    def raise_while_held():
        with watchdog._lock:
            holding.set()
            wait_until_in(owner, "_finish")  # mark_failed waits for the lock there
            watchdog._raise_in(owner, "a peer failing as this rank does")

    helper = threading.Thread(target=raise_while_held)
    helper.start()
    holding.wait()
    try:
        watchdog.mark_failed(ValueError("this rank's own failure"))
        landed = None
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # Python running: where a queued copy would land
            pass
    except iris.PeerError as e:
        landed = str(e)
    helper.join()
    return landed, ctx.watchdog._thread.is_alive()


def test_failing_rank_absorbs_a_peer_failure_raised_meanwhile():
    with iris.RankPool(1) as pool:
        [(landed, watching)] = pool.run(_failing_as_a_peer_fails_body, timeout_s=POOL_TIMEOUT_S)
    assert landed is None, landed
    assert not watching  # mark_failed finished: the watchdog stopped


def _clean_close_body(linger_s):
    ctx = new_context(heap_size=1 << 16)
    if ctx.get_rank() == 1:
        ctx.close()
        return None
    time.sleep(linger_s)  # several polls see rank 1 closed; its process stays alive in the pool
    x = ctx.arange(10)
    watching = ctx.watchdog._thread is not None and ctx.watchdog._thread.is_alive()
    failure = ctx.failure
    ctx.close()
    return failure, watching, int(x.sum())


def test_clean_close_is_not_a_failure(pools):
    failure, watching, total = pools(2).run(_clean_close_body, 1.5)[0]
    assert failure is None
    assert watching  # the watchdog was running, and saw nothing wrong
    assert total == 45


def _watchdog_threads_body():
    ctx = new_context(heap_size=1 << 16)
    names = [t.name for t in threading.enumerate() if t.name.startswith("iris-watchdog")]
    ctx.close()
    return names


def test_watchdog_off_starts_no_thread(pools):
    assert all(len(names) == 1 for names in pools(2).run(_watchdog_threads_body))  # on by default
    with iris.RankPool(2, env={"IRIS_WATCHDOG": "0"}) as pool:
        assert pool.run(_watchdog_threads_body) == [[], []]


# Ranks started by hand, as torchrun would, so that rank 1's interpreter really exits: with an uncaught exception
# (the exit hook publishes FAILED before the context's __del__ could publish CLOSED and leave rank 0 spinning) or
# normally (CLOSED: no failure).
_EXIT_SCRIPT = """
import atexit, sys, time
import torch
import torch.distributed as dist
import iris

# gloo on every tier: this test is about the exit, not about how NCCL tears down beside a dead peer
dist.init_process_group("gloo")
atexit.register(dist.destroy_process_group)
ctx = iris.iris(1 << 16)
if ctx.get_rank() == 1:
    if sys.argv[1] == "raise":
        raise ValueError("rank 1 fails uncaught")
    sys.exit(0)  # leaves without ctx.close()
if sys.argv[1] == "raise":
    ctx.device_barrier()
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
else:
    time.sleep(1.5)  # several polls see rank 1 gone
print("rank 0 done, failure:", ctx.failure)
"""


@pytest.mark.parametrize("case", ["raise", "exit"])
def test_exit_of_a_peer_process(tmp_path, case):
    import subprocess
    import sys

    from iris.host.launcher import _free_port

    script = tmp_path / "exit_case.py"
    script.write_text(_EXIT_SCRIPT)
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, str(script), case], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=POOL_TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()  # a rank still waiting after the time limit (no effect on one that has exited)
    if case == "raise":
        assert "rank 1 fails uncaught" in outputs[1]
        assert procs[0].returncode != 0, outputs[0]
        assert "PeerError" in outputs[0] and "peer rank 1" in outputs[0], outputs[0]
        assert "raised an exception" in outputs[0], outputs[0]
    else:
        assert procs[1].returncode == 0, outputs[1]
        assert procs[0].returncode == 0 and "rank 0 done, failure: None" in outputs[0], outputs[0]


def _killed_in_fused_op_body():
    from iris.ops import OpsConfig

    ctx = new_context(1 << 24)
    m, n, k = 256, 256, 64  # M / W a multiple of the GPU's 128-row tile, so the fused kernel runs there too
    dev = ctx.get_device()
    a = torch.randn(m, k, device=dev)
    b = torch.randn(k, n, device=dev)
    out = torch.empty(m // ctx.get_num_ranks(), n, device=dev)
    fused = OpsConfig(variant="fused")
    ctx.ops.matmul_reduce_scatter(out, a, b, config=fused)  # compiled, and its per-tile flags registered
    _wait_for_device(ctx)
    ctx.barrier()
    if ctx.get_rank() == 1:
        time.sleep(1.0)  # rank 0 is waiting on rank 1's tile flags by now
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.ops.matmul_reduce_scatter(out, a, b, config=fused)
    _wait_for_device(ctx)
    return "matmul_reduce_scatter returned"


def test_killed_peer_fails_a_fused_op_fast():
    """A fused op's own per-tile flags (outside the collectives' sync region) are released too."""
    message, elapsed = _failing_run(_killed_in_fused_op_body)
    waiting = _rank_section(message, 0)
    assert "PeerError" in waiting and "peer rank 1" in waiting and "died" in waiting, waiting
    assert elapsed < FAST_S + 10, f"rank 0 failed after {elapsed:.1f} s\n{message}"


@triton.jit
def _wait_kernel(flag, target):
    wait_until(flag, target, 0, 0, "test")


def _poison_body(start):
    """Flags at ``start`` (as after that many calls); each rank poisons the other by hand (the watchdog would on
    a failure) and then waits alone, on its sync flags and on a registered flag, for targets one past ``start``:
    the waits must return. The peer's column and row advance by POISON_STEP, wrapping; ours stay."""
    ctx = new_context(heap_size=1 << 16)
    peer = 1 - ctx.get_rank()
    flags = ctx.ops.workspaces.peer_flags("test.flags", [0, 1], 5)
    flags.fill_(start)
    region = preset_sync_words(ctx, start)  # [slots * ROWS, world + 1]: the whole slots, no tail
    ctx.barrier()
    ctx.groups.poison(peer)
    ctx.device_barrier()  # alone: the peer's count on our heap is poisoned
    _wait_kernel[(1,)](flags[peer], (start + 1 + (1 << 31)) % (1 << 32) - (1 << 31))
    _wait_for_device(ctx)
    ctx.barrier()
    row0 = ctx.group_sync(None, "test").flags[0]
    return flags[:, :5].cpu().tolist(), region[1:, peer].unique().tolist(), int(row0[peer])


@pytest.mark.parametrize("start", [0, (1 << 30) + 5, (1 << 31) - 2])
def test_poison_releases_registered_peer_flags(pools, start):
    from iris.host.groups import PEER_FLAGS_STEP, POISON_STEP

    def int32(v):
        return (v + (1 << 31)) % (1 << 32) - (1 << 31)

    word = int64(start << 32)
    for rank, (flags, peer_column, row0) in enumerate(pools(2).run(_poison_body, start, timeout_s=120)):
        peer = 1 - rank
        assert flags[peer] == [int32(start + PEER_FLAGS_STEP)] * 5 and flags[rank] == [start] * 5, flags
        assert peer_column == [int64(word + POISON_STEP)], peer_column
        # The peer's signal of its solo barrier lands after our poison (one more signal) or between the poison's
        # read and its write-back (overwritten: the add is not atomic with the device's); either way past start.
        assert row0 in (int64(word + POISON_STEP + (1 << 32)), int64(word + POISON_STEP)), row0


def _killed_in_device_barrier_body(preset):
    """Words preset as after ``preset`` signals, then rank 1 dies while rank 0 waits for it."""
    ctx = new_context(heap_size=1 << 16)
    ctx.device_barrier()  # compiled (on GPUs), so the failure finds rank 0 waiting, not compiling
    _wait_for_device(ctx)
    ctx.barrier()
    preset_sync_words(ctx, preset)
    ctx.barrier()
    if ctx.get_rank() == 1:
        time.sleep(1.0)  # rank 0 is inside the barrier by now, waiting for us
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.device_barrier()
    _wait_for_device(ctx)
    return "passed the barrier"


@pytest.mark.parametrize("preset", [(1 << 30) + 5, (1 << 31) - 1])
def test_poison_releases_waits_at_any_count(preset):
    """Past 2**30 signals (a fixed poison of 1 << 62 no longer releases) and at the wrap (the target is negative)."""
    message, elapsed = _failing_run(_killed_in_device_barrier_body, 2, preset)
    waiting = _rank_section(message, 0)
    assert "PeerError" in waiting and "peer rank 1" in waiting and "died" in waiting, waiting
    assert elapsed < FAST_S, f"rank 0 failed after {elapsed:.1f} s\n{message}"


def _killed_in_host_barrier_body():
    ctx = new_context(heap_size=1 << 16)
    ctx.barrier()
    if ctx.get_rank() == 1:
        time.sleep(1.0)  # rank 0 is inside the host barrier by now, waiting for us
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.barrier()
    return "passed the barrier"


def test_killed_peer_fails_the_host_barrier_fast():
    """A host barrier polls the watchdog's view of peers: PeerError within about a second of the death, not when
    the barrier's timeout (300 s) or the pool's grace period (15 s) runs out."""
    message, elapsed = _failing_run(_killed_in_host_barrier_body)
    waiting = _rank_section(message, 0)
    assert "PeerError" in waiting and "peer rank 1" in waiting and "died" in waiting, waiting
    assert "barrier" in waiting, waiting
    assert elapsed < 1.0 + 3.0, f"rank 0 failed {elapsed - 1.0:.1f} s after rank 1 died\n{message}"
