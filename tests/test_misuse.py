"""Used wrong, iris says so: every rank raises a clear error on the host, in bounded time, and none returns a result.
Each case asserts the wording (the function, the value, the fix), that every rank raised and how long it took."""

import pathlib
import re
import time

import pytest
import torch
import triton
import triton.language as tl

import iris
import iris.ccl  # noqa: F401  (the rooms' configs, in rank processes that run one test's bodies alone)
import iris.ops  # noqa: F401
from conftest import on_gpu
from rank_utils import error_message, new_context

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _after_close_body():
    ctx = new_context()
    inp, out = ctx.ones(64), ctx.zeros(64)
    ctx.ccl.all_reduce(out, inp)  # a remembered launch: the fast path must check too
    ctx.close()
    messages = {}
    start = time.monotonic()
    messages["all_reduce"] = error_message(ctx.ccl.all_reduce, out, inp)
    messages["barrier"] = error_message(ctx.barrier)
    messages["device_barrier"] = error_message(ctx.device_barrier)
    messages["zeros"] = error_message(ctx.zeros, 8)
    return messages, time.monotonic() - start


def test_a_closed_context_refuses_work(pools):
    for rank, (messages, seconds) in enumerate(pools(3).run(_after_close_body)):
        for call, message in messages.items():
            assert message.startswith("ClosedError: ") and "this iris context is closed" in message, (rank, call,
                                                                                                    message)
            assert "make a new context with iris.iris(...)" in message, message
        assert seconds < 5, f"rank {rank}: the refusals took {seconds:.1f} s"


def _all_reduce_and_settle(ctx, out, inp):
    """The call; on GPUs also the wait for its kernel and for the watchdog's next reads (the error comes from its
    thread there, as a ``PeerError`` does), on the cpu backend the call raises itself."""
    ctx.ccl.all_reduce(out, inp)
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.05)


def _mismatch_body(case):
    """One rank's call differs from the others' (``case``); every rank all_reduces 1000 elements of its rank + 1."""
    ctx = new_context()
    rank = ctx.get_rank()
    n, dtype = 1000, torch.float32
    if case == "an extra allocation" and rank == 0:
        ctx.zeros(256)  # a tensor only rank 0 needs: every later allocation of rank 0 sits 1 KiB further on
    if case == "element count" and rank != 0:
        n = 1001
    if case == "dtype" and rank != 0:
        dtype = torch.bfloat16
    inp = ctx.full((n,), rank + 1.0, dtype=dtype)
    out = ctx.full((n,), -7.0, dtype=dtype)  # poisoned: a returned result would show
    ctx.barrier()
    start = time.monotonic()
    message = error_message(_all_reduce_and_settle, ctx, out, inp)
    seconds = time.monotonic() - start
    later = error_message(ctx.ccl.all_reduce, out, inp)  # the context refuses what follows
    ctx.close()
    return message, seconds, later


@pytest.mark.parametrize("case", ["an extra allocation", "element count", "dtype"])
def test_calls_that_do_not_match_fail_on_every_rank(pools, case):
    results = pools(3).run(_mismatch_body, case)
    for rank, (message, seconds, later) in enumerate(results):
        # the call itself raises (no rank returns a result), naming this rank's call and another rank's
        assert message.startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree: rank "), (rank, message)
        assert f"rank {rank} called ccl.all_reduce(" in message, (rank, message)
        assert "on tensors at the same heap offsets" in message, message
        assert later.startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree"), (rank, later)
        assert seconds < 30, f"rank {rank}: the error took {seconds:.1f} s"
    if case == "an extra allocation":
        assert "so their tensors lie at different heap offsets" in results[0][0], results[0][0]
    if case == "dtype":
        assert "ccl.all_reduce(float32[1000], float32[1000], 'sum'" in results[0][0], results[0][0]
        assert "ccl.all_reduce(bfloat16[1000], bfloat16[1000], 'sum'" in results[1][0], results[1][0]
    if case == "element count":
        assert "float32[1001]" in results[0][0] and "float32[1000]" in results[1][0], results[0][0]


def _main(value):
    return value


@pytest.mark.parametrize("world_size", [0, -1, 2.0, True])
def test_run_refuses_a_world_size_below_one(world_size):
    message = error_message(iris.run, _main, world_size, 1)
    assert message.startswith("ValueError: iris.run: world_size=") and "must be an int of at least 1" in message


def test_run_under_torchrun_says_which_world_size_wins(monkeypatch, caplog):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with caplog.at_level("WARNING", logger="iris"):
        assert iris.run(_main, 4, "ran") == ["ran"]
    assert "iris.run: world_size=4 is ignored: torchrun started WORLD_SIZE=3 ranks" in caplog.text
    assert "--nproc_per_node=4" in caplog.text


UNGUARDED = """
import iris


def main():
    return 1


iris.run(main, 2)  # not under if __name__ == "__main__": every rank imports this file and would start ranks too
"""


def test_functions_the_ranks_cannot_import_are_named(tmp_path):
    import os
    import subprocess
    import sys

    # a user's default streams: under PYTHONUNBUFFERED=1 (the GPU scripts set it) the two ranks' tracebacks, written
    # piece by piece at once, interleave within lines
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "IRIS_BACKEND": "cpu"}
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    for command, says in (
            ([sys.executable, "-c", "import iris\ndef main():\n    return 1\niris.run(main, 2)"],
             ["ValueError: iris.run: main is defined in an interactive session (a notebook, the REPL, python -c"]),
            ([sys.executable, str(script)],
             ["RuntimeError: iris: ranks are being started from a rank that is itself starting",
              "rank 0 died (exit code 1); it printed why above (a script whose iris.run is not under if __name__"])):
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0
        for line in says:
            assert line in proc.stderr, proc.stderr[-3000:]


def _heap_size_body():
    ctx = iris.iris(heap_size=1e6)
    whole = ctx.heap.size
    refused = error_message(iris.iris, heap_size=1.5e6 + 0.5)
    return whole, refused


def test_heap_size_takes_a_whole_float(pools):
    for whole, refused in pools(2).run(_heap_size_body):
        assert whole == 1_000_000
        assert "iris.iris: heap_size must be a positive number of bytes, got 1500000.5" in refused


@triton.jit
def _store_to_null_kernel(ptr):
    tl.store(ptr - ptr.to(tl.int64) + 64, 1.0)  # the address 64: never mapped


def _bad_address_body():
    ctx = new_context()
    if ctx.get_rank() == 1:
        _store_to_null_kernel[(1,)](ctx.zeros(4))
    ctx.barrier()


def test_a_bad_address_points_to_debug_mode():
    start = time.monotonic()
    message = error_message(iris.launch, _bad_address_body, 2, timeout_s=120)
    died = "rank 1 died: killed by signal 11" in message or "illegal memory access" in message  # cpu / GPU
    assert died and "rerun with IRIS_DEBUG=1, which checks every translated address" in message, message
    # the peer's own line: on the cpu backend it saw the process vanish, on a GPU rank 1 raised (watchdog.py)
    assert "rank 0" in message and ("rerun with IRIS_DEBUG=1 to have the address named" in message
                                    or "illegal memory access" in message), message
    assert time.monotonic() - start < 60


LATE_RANK = """
import time
import iris


def main():
    ctx = iris.iris(1 << 20)
    if ctx.get_rank() == 2:
        time.sleep(3)
    ctx.barrier()


if __name__ == "__main__":
    iris.run(main, 3)
"""


def _notices(path, *args):
    """The stderr of the script at ``path`` run on 3 cpu-backend ranks with a 1 s notice, which must succeed."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "IRIS_NOTICE_S": "1", "IRIS_BACKEND": "cpu"}
    proc = subprocess.run([sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_a_late_rank_is_named_before_the_timeout(tmp_path):
    path = tmp_path / "late_rank.py"
    path.write_text(LATE_RANK)
    stderr = _notices(path)
    for rank in (0, 1):
        line = (rf"WARNING \[Iris\] \[{rank}/3\] Iris.barrier \(call \d+ of ranks \[0, 1, 2\]\): rank {rank} has "
                r"waited 1 s for rank\(s\) \[2\], which have not arrived; it gives up at 300 s \(IRIS_TIMEOUT_S\)")
        assert re.search(line, stderr), stderr[-3000:]


def test_a_rank_missing_from_a_collective_is_named_while_the_others_wait():
    # scripts/stalled_call.py: rank 2 sleeps 4 s before the second all_reduce; the others wait inside the kernel
    stderr = _notices(ROOT / "scripts" / "stalled_call.py", "--world-size", "3")
    for rank in (0, 1):
        line = (rf"WARNING \[Iris\] \[{rank}/3\] ccl.all_reduce \(this rank's last call to its peers\): "
                rf"rank {rank} has waited \d+ s in program \d+ of a collective kernel of the group \[0, 1, 2\] for "
                r"rank\(s\) \[2\], which have not arrived")
        assert re.search(line, stderr), stderr[-3000:]
    assert "[Iris] [2/3]" not in stderr, stderr[-3000:]  # the late rank itself waits for no one


# ---------------------------------------------------------------------------------------------- the host's refusals
# Provider maps, closed contexts, shapes, ranks that have gone and calls in other groups: each case asserts the error
# on every rank, that the tensors it names are untouched, and how long the error took.


def _stale_map_body():
    """Rank 0 leaves a map of its tensor alive whose table points at another allocation's peers (every rank 100 +
    rank there), then every rank maps the tensor with the right table."""
    from test_providers import segment_provider_tensor

    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    tensor, bases, memory = segment_provider_tensor(ctx, 64, torch.float32)
    other, other_bases, other_memory = segment_provider_tensor(ctx, 64, torch.float32)
    tensor.fill_(rank + 1.0)
    other.fill_(100.0 + rank)
    stale = [b if r == rank else other_bases[r] for r, b in enumerate(bases)] if rank == 0 else bases
    first = iris.wrap_symmetric(tensor, stale)
    ctx.barrier()
    start = time.monotonic()
    refused = error_message(iris.wrap_symmetric, tensor, bases)
    seconds = time.monotonic() - start
    dev = ctx.get_device()
    untouched = torch.equal(tensor, torch.full((64,), rank + 1.0, device=dev)) and \
        torch.equal(other, torch.full((64,), 100.0 + rank, device=dev))
    del first
    right = iris.wrap_symmetric(tensor, bases)
    reused = iris.wrap_symmetric(tensor, bases) is right
    out = torch.full((64,), -7.0, device=dev)
    ctx.ccl.all_reduce(out, tensor)
    ctx.barrier()
    total = torch.equal(out, torch.full((64,), sum(r + 1.0 for r in range(world)), device=dev))
    del right, memory, other_memory
    return refused, seconds, untouched, reused, total


@pytest.mark.skipif(on_gpu(), reason="the test's provider is the cpu backend's shared memory (test_providers.py); "
                    "the refusal is host code, the same on every backend")
def test_a_second_map_with_another_table_is_refused(pools):
    for rank, (refused, seconds, untouched, reused, total) in enumerate(pools(3).run(_stale_map_body)):
        # every rank refuses, naming rank 0's first map: its maker, shape and table
        assert refused.startswith("ValueError: iris.wrap_symmetric: rank 0: bytes ["), (rank, refused)
        assert "already have a live map, made by iris.wrap_symmetric for a tensor of shape (64,)" in refused, refused
        assert "with the table [0x" in refused and "drop the first map" in refused, refused
        assert "rank 1:" not in refused and "rank 2:" not in refused, refused  # their first maps had the right table
        assert untouched, f"rank {rank}: the refusal wrote a tensor"
        assert seconds < 5, f"rank {rank}: the refusal took {seconds:.1f} s"
        assert reused, f"rank {rank}: the same table again made a second map"
        assert total, f"rank {rank}: all_reduce on the right map gave a wrong sum"


# What still answers after close(): facts about the process that read no memory (Iris.close's docstring).
ANSWERS_AFTER_CLOSE = {
    "ctx": {"get_rank", "get_num_ranks", "get_device", "get_device_id", "get_cu_count", "get_agreed_cu_count",
            "check_rank", "group_ranks", "spans_nodes", "check_direct", "init_random", "debug", "info", "warning",
            "error", "close"},
    "heap": {"holds"},
    "workspaces": {"stamp"},  # a remembered launch's guard: dictionary reads (the hit's peer check refuses first)
}


def _closed_rooms_body():
    """Every public method of a closed context and of its rooms, with arguments that work on an open one."""
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    ranks, peer = list(range(world)), (rank + 1) % world
    n, rows, hidden, m, k = 8 * world, 4, 32, 8 * world, 16 * world
    t, out, piece = ctx.ones(n), ctx.zeros(n), ctx.zeros(n // world)
    square, square_out = ctx.ones(rows, 4 * world), ctx.zeros(rows, 4 * world)
    dev = ctx.get_device()
    x, residual, weight = ctx.ones(rows, hidden), ctx.ones(rows, hidden), torch.ones(hidden, device=dev)
    normed, residual_out = ctx.zeros(rows, hidden), ctx.zeros(rows, hidden)
    a_cols, b_rows = torch.ones(m, k // world, device=dev), torch.ones(k // world, hidden, device=dev)
    a_rows, b = torch.ones(m // world, k, device=dev), torch.ones(k, hidden, device=dev)
    full_out, slice_out = ctx.zeros(m, hidden), ctx.zeros(m // world, hidden)
    ctx.tracing.enable(64)
    rooms = {"ctx": ctx, "ccl": ctx.ccl, "ops": ctx.ops, "provider": ctx.provider, "tracing": ctx.tracing,
             "workspaces": ctx.workspaces, "heap": ctx.heap}
    arguments = {
        "ctx": {"allocate_symmetric": (8,), "arange": (8,), "as_symmetric": (torch.ones(8),), "barrier": (),
                "broadcast": (1,), "check_symmetric": (t, "caller"), "device_barrier": (), "empty": (8,),
                "empty_cache": (), "full": ((8,), 1.0), "get_copy_engine_ctx": (), "get_device_context": (),
                "get_heap_bases": (), "group_sync": (None, "caller"), "is_symmetric": (t,), "linspace": (0, 1, 8),
                "memory_stats": (), "ones": (8,), "put": (t, peer), "put_tile": (None, peer, 0, 0),
                "put_tiles": ([], peer, [], []), "quiet": (), "rand": (8,), "randint": (5, (8,)), "randn": (8,),
                "symmetric_table": (t, "caller"), "on_heap": (t, "caller"), "uniform": ((8,),), "zeros": (8,),
                "zeros_like": (t,), "empty_like": (t,), "ones_like": (t,), "full_like": (t, 2.0), "rand_like": (t,),
                "randn_like": (t,),
                "get_rank": (), "get_num_ranks": (), "get_device": (), "get_device_id": (), "get_cu_count": (),
                "get_agreed_cu_count": (), "check_rank": (0, "caller"), "group_ranks": (None, "caller"),
                "spans_nodes": (None, "caller"), "check_direct": (peer, "caller"), "init_random": (1,),
                "debug": ("closed",), "info": ("closed",), "warning": ("closed",), "error": ("closed",),
                "close": (), "check_open": ("caller",)},
        "ccl": {"all_reduce": (out, t), "all_gather": (out, piece), "all_gather_into_tensor": (out, piece),
                "reduce_scatter": (piece, t), "reduce_scatter_tensor": (piece, t), "all_to_all": (square_out, square),
                "reduce_scatter_v": (piece, t, [piece.numel()] * world),
                "all_to_all_single": (out, t), "broadcast": (t, 0), "reduce": (out, t, 0), "scatter": (piece, t, 0),
                "gather": (out, piece, 0), "send": (t, peer), "recv": (t, peer), "barrier": (),
                "all_reduce_rmsnorm": (normed, residual_out, x, residual, weight),
                "moe_dispatcher": (hidden, 2 * world, 2, 8)},
        "ops": {"matmul_all_reduce": (full_out, a_cols, b_rows), "matmul_reduce_scatter": (slice_out, a_cols, b_rows),
                "all_gather_matmul": (full_out, a_rows, b), "matmul_all_gather": (full_out, a_rows, b)},
        "provider": {"symmetric_address_map": (t,), "allocate_symmetric": (8,), "allocate_symmetric_map": (8,)},
        "tracing": {"enable": (64,), "reset": (), "device_args": (), "events": (), "device_events": (),
                    "export": ("/dev/null",), "disable": ()},
        "workspaces": {"get": ("closed", ranks, (4,), torch.float32), "peer_flags": ("closed", ranks, 4),
                       "views": ("closed",), "release": (None,), "bytes": (), "watch": (tuple(ranks),),
                       "stamp": (("closed",), tuple(ranks))},
        "heap": {"allocate": (8, torch.float32), "allocate_tensor": ((8,), torch.float32, "caller"),
                 "contains": (t,), "hold": (t, None), "holds": (t.data_ptr(), 4), "offset_of": (t,),
                 "on_grow": (print,), "on_release": (print,), "allocation_at": (0,), "reclaim": (), "ride": ("closed", list, print), "view": (0, 64),
                 "memory_stats": ()},
    }
    ctx.barrier()
    ctx.close()
    found, start = {}, time.monotonic()
    for room_name, room in rooms.items():
        for name in (name for name in dir(room) if not name.startswith("_")):
            method = getattr(room, name)
            if not callable(method) or isinstance(method, type):
                continue
            if name not in arguments[room_name]:
                found[f"{room_name}.{name}"] = "missing from the test's arguments"
                continue
            found[f"{room_name}.{name}"] = error_message(method, *arguments[room_name][name])
    return (found, time.monotonic() - start, torch.equal(out, torch.zeros(n, device=dev)),
            torch.equal(t, torch.ones(n, device=dev)))


def test_a_closed_context_refuses_every_method(pools):
    for rank, (found, seconds, out_zero, inp_one) in enumerate(pools(3).run(_closed_rooms_body)):
        for call, message in found.items():
            room, name = call.split(".")
            if name in ANSWERS_AFTER_CLOSE.get(room, ()):
                assert message == "no error", (rank, call, message)
            else:
                assert message.startswith("ClosedError: ") and "this iris context is closed" in message, (rank, call,
                                                                                                        message)
        assert len(found) > 90, sorted(found)
        assert out_zero and inp_one, f"rank {rank}: a refused call wrote a tensor"
        assert seconds < 5, f"rank {rank}: the refusals took {seconds:.1f} s"


def _shape_body():
    """Every rank all_reduces 1024 elements of rank + 1; rank 0 shapes them [32, 32], the others [1024]."""
    ctx = new_context()
    rank = ctx.get_rank()
    shape = (32, 32) if rank == 0 else (1024,)
    inp = ctx.full(shape, rank + 1.0)
    out = ctx.full(shape, -7.0)  # poisoned: a returned result would show
    ctx.barrier()
    start = time.monotonic()
    message = error_message(_all_reduce_and_settle, ctx, out, inp)
    seconds = time.monotonic() - start
    later = error_message(ctx.ccl.all_reduce, out, inp)  # the context refuses what follows
    untouched = bool((out == -7.0).all())
    ctx.close()
    return message, seconds, later, untouched


def test_the_same_element_count_in_another_shape_is_a_mismatch(pools):
    # shapes are compared, not element counts: [32, 32] where the others pass [1024] is a mistake in the program
    results = pools(3).run(_shape_body)
    for rank, (message, seconds, later, untouched) in enumerate(results):
        assert message.startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree: rank "), (rank, message)
        assert untouched, f"rank {rank}: the refused call wrote out"
        assert "same op, dtypes, shapes and root" in message, message
        assert later.startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree"), (rank, later)
        assert seconds < 30, f"rank {rank}: the error took {seconds:.1f} s"
    assert "ccl.all_reduce(float32[32, 32], float32[32, 32], 'sum'" in results[0][0], results[0][0]
    assert "ccl.all_reduce(float32[1024], float32[1024], 'sum'" in results[1][0], results[1][0]


_LEFT_OPEN = []  # contexts that a rank left open by returning early, closed at the start of its next such call


def _settle(ctx):
    """On GPUs the wait for the call's kernel and for the watchdog's next reads (the error comes from its thread
    there, between two short sleeps); nothing on the cpu backend, where the call raises itself."""
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.05)


def _all_reduce_in(ctx, out, inp, group):
    """``_all_reduce_and_settle`` on ``group``."""
    ctx.ccl.all_reduce(out, inp, group=group)
    _settle(ctx)


def _device_barrier_settled(ctx):
    ctx.device_barrier()
    _settle(ctx)


def _gone_body(case):
    """Rank 1 skips the all_reduce (or the barrier) the others make next: it returns with its context open
    ("returns", "barrier") or closes it first ("closes")."""
    while _LEFT_OPEN:
        _LEFT_OPEN.pop().close()
    ctx = new_context()
    rank = ctx.get_rank()
    inp, out = ctx.full((1000,), rank + 1.0), ctx.full((1000,), -7.0)
    ctx.ccl.all_reduce(out, inp)  # compiled, and the world's flags in use, on every rank
    out.fill_(-7.0)  # poisoned: a returned result would show
    ctx.barrier()
    if rank == 1:
        if case == "closes":
            ctx.close()
        else:
            _LEFT_OPEN.append(ctx)
        return None
    start = time.monotonic()
    if case == "barrier":
        message = error_message(ctx.barrier)
    else:
        message = error_message(_all_reduce_in, ctx, out, inp, None)
    seconds = time.monotonic() - start
    # on GPUs the released wait lets the kernel run on and write (docs/debugging.md, "What is matched"); on the cpu
    # backend the error stops the kernel in its wait
    untouched = bool((out == -7.0).all()) or ctx.get_device().type == "cuda"
    later = None if case == "barrier" else error_message(ctx.ccl.all_reduce, out, inp)
    ctx.close()
    return message, seconds, untouched, later


@pytest.mark.parametrize("case", ["returns", "closes", "barrier"])
def test_a_wait_for_a_rank_that_has_left_ends(pools, case):
    results = pools(3).run(_gone_body, case)
    assert results[1] is None
    how = ("closed its iris context (ctx.close(), the end of its `with` block, or its exit)" if case == "closes" else
           "returned from the function the launcher ran on it (its main), its iris context still open")
    for rank in (0, 2):
        message, seconds, untouched, later = results[rank]
        if case == "barrier":
            assert message.startswith(f"PeerError: Iris.barrier: rank 1 {how} without arriving at this barrier"), \
                (rank, message)
        else:
            # raised in the waiting thread, naming the rank that left, how, and the call this rank waits in
            starts = ("PeerError: peer rank 1 (pid ", "PeerError: ccl.all_reduce: peer rank 1 (pid ")
            assert message.startswith(starts), (rank, message)
            assert f"{how} while rank {rank} waits for it in ccl.all_reduce(float32[1000], float32[1000], 'sum'" \
                in message, (rank, message)
            assert "of a collective kernel of the group [0, 1, 2]" in message, message
            assert later.startswith("PeerError: ccl.all_reduce: peer rank 1"), (rank, later)
        assert untouched, f"rank {rank}: the call wrote its output"
        assert seconds < 8, f"rank {rank}: the error took {seconds:.1f} s"


def _other_group_body(first_use):
    """Rank 0 all_reduces in the group [0, 1], ranks 1 and 2 in the world: rank 0 waits for rank 1 (inside the
    kernel, or with ``first_use`` in the agreement on the pair's flags), which waits for rank 0 (and rank 2 for
    rank 0)."""
    import torch.distributed as dist

    ctx = new_context()
    rank = ctx.get_rank()
    pair = dist.new_group([0, 1])
    inp, out = ctx.full((64,), rank + 1.0), ctx.full((64,), -7.0)
    if rank < 2 and not first_use:
        ctx.ccl.all_reduce(out, inp, group=pair)  # the pair's flags agreed on and in use
    ctx.ccl.all_reduce(out, inp)
    out.fill_(-7.0)
    ctx.barrier()
    start = time.monotonic()
    message = error_message(_all_reduce_in, ctx, out, inp, pair if rank == 0 else None)
    seconds = time.monotonic() - start
    untouched = bool((out == -7.0).all()) or ctx.get_device().type == "cuda"  # as in _gone_body
    later = error_message(ctx.ccl.all_reduce, out, inp)
    ctx.close()
    return message, seconds, untouched, later


@pytest.mark.parametrize("first_use", [False, True])
def test_a_call_in_another_group_is_named_with_both_groups(pools, first_use):
    results = pools(3).run(_other_group_body, first_use)
    # the call as its fingerprint describes it: the launch shape after the arguments, then the group
    call = re.escape("ccl.all_reduce(float32[64], float32[64], 'sum', 'one_shot')") + r"(?: with [^;]*?)?"
    world, pair = call + re.escape(" in the group [0, 1, 2]"), call + re.escape(" in the group [0, 1]")
    for rank, (message, seconds, untouched, later) in enumerate(results):
        assert message.startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree: "), (rank, message)
        # both calls and both groups named, each group once
        if rank == 1:
            assert re.search(f"rank 1 called {world}, but rank 0 called {pair};", message), (rank, message)
        else:
            assert re.search(f"rank 0 called {pair}, but rank 1 called {world};", message), (rank, message)
        assert "each wait for the next" in message, message
        if rank == 2:  # not in the cycle: it says where it waits and for whom
            assert "rank 2 waits in ccl.all_reduce(" in message and "of the group [0, 1, 2] for rank 0" in message
        assert later.startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree"), (rank, later)
        assert untouched, f"rank {rank}: the call wrote its output"
        assert seconds < 15, f"rank {rank}: the error took {seconds:.1f} s"  # the notice comes at 30 s


def _barrier_beside_a_collective_body():
    """Rank 0 calls device_barrier while ranks 1 and 2 all_reduce: the same group, different rows of its flags."""
    ctx = new_context()
    rank = ctx.get_rank()
    inp, out = ctx.full((64,), rank + 1.0), ctx.full((64,), -7.0)
    ctx.ccl.all_reduce(out, inp)
    ctx.device_barrier()
    out.fill_(-7.0)
    ctx.barrier()
    start = time.monotonic()
    if rank == 0:
        message = error_message(_device_barrier_settled, ctx)
    else:
        message = error_message(_all_reduce_in, ctx, out, inp, None)
    seconds = time.monotonic() - start
    untouched = bool((out == -7.0).all()) or ctx.get_device().type == "cuda"  # as in _gone_body
    ctx.close()
    return message, seconds, untouched


def test_a_device_barrier_beside_a_collective_is_named(pools):
    results = pools(3).run(_barrier_beside_a_collective_body)
    for rank, (message, seconds, untouched) in enumerate(results):
        assert message.startswith("MismatchError: ") and "the ranks' calls disagree: " in message, (rank, message)
        # both calls named (rank 0's cycle may run through rank 1 or rank 2)
        call = re.escape("ccl.all_reduce(float32[64], float32[64], 'sum', 'one_shot')") + r"(?: with [^;]*?)?" + \
            re.escape(" in the group [0, 1, 2]")
        barrier = re.escape("Iris.device_barrier in the group [0, 1, 2]")
        assert re.search(f"rank 0 called {barrier}, but rank [12] called {call}", message) or \
            re.search(f"rank {rank} called {call}, but rank 0 called {barrier}", message), (rank, message)
        assert untouched, f"rank {rank}: the call wrote its output"
        assert seconds < 15, f"rank {rank}: the error took {seconds:.1f} s"


def test_advice_fits_the_debug_setting(monkeypatch, caplog):
    """The watchdog's notice and the launcher's words for a killed rank, with debug mode off and on."""
    from types import SimpleNamespace

    import triton.language as tl

    from iris.device import debug
    from iris.host.launcher import bad_address_hint
    from iris.host.watchdog import Watchdog

    lines = {}
    for on in (False, True):
        monkeypatch.setattr(debug, "ENABLED", tl.constexpr(on))
        waiting = SimpleNamespace(groups=SimpleNamespace(last_call="ccl.all_reduce"), rank=0, world_size=2,
                                  _waits={((0, 1), 1): ([1], 5, 0.0, False)})
        caplog.clear()
        with caplog.at_level("WARNING", logger="iris"):
            Watchdog._notice(waiting, 31.0)
        lines[on] = caplog.text
        assert waiting._waits[((0, 1), 1)][3], "the notice is given once"
    assert "rank 0 has waited 31 s in program 0 of a collective kernel of the group [0, 1] for rank(s) [1]" in \
        lines[False], lines[False]
    assert f"IRIS_DEBUG=1 bounds device waits at IRIS_DEBUG_SPIN_LIMIT polls, {debug.SPIN_LIMIT.value} by default" \
        in lines[False], lines[False]
    assert "debug mode is on: the kernel stops after IRIS_DEBUG_SPIN_LIMIT = " in lines[True], lines[True]
    assert "IRIS_DEBUG=1" not in lines[True], lines[True]
    assert "rerun with IRIS_DEBUG=1" in bad_address_hint(False)
    assert "IRIS_DEBUG=1" not in bad_address_hint(True) and "debug mode, which was on" in bad_address_hint(True)


# ---- every operand, every config: a call that differs on one rank is refused on every rank and writes nothing ----
#
# Each case makes a fresh context (a refused call leaves its context refusing), then the call; rank 0 allocates a
# small tensor that the others do not (``_extra``) just before the operand the case moves, or passes another config.
# Every tensor the call could write is poisoned first and compared after.

N = 1000
TILE = dict(block_m=32, block_n=32, block_k=32)  # the fused ops' interpreter tiles (tests/test_ops.py)


def _extra(ctx):
    """1 KiB that only rank 0 allocates: every later heap allocation of rank 0 sits 1 KiB further on."""
    if ctx.get_rank() == 0:
        ctx.zeros(256)


def _collective_case(ctx, case):
    """``(call, watched)`` for ``case``: the call to make and the tensors it must leave as they are."""
    rank, ccl = ctx.get_rank(), ctx.ccl
    Config = iris.ccl.CollectiveConfig
    if case in ("all_reduce one_shot", "all_reduce two_shot"):
        algorithm = case.split()[1]
        first = ctx.empty(N)  # one-shot: peers read inp only, so inp is the one moved; two-shot: out, written
        _extra(ctx)
        second = ctx.empty(N)
        out, inp = (first, second) if algorithm == "one_shot" else (second, first)
        out.fill_(-7.0)
        inp.fill_(rank + 1.0)
        return lambda: ccl.all_reduce(out, inp, config=Config(algorithm=algorithm)), [out, inp]
    if case in ("all_gather", "all_gather gluon", "all_to_all", "all_to_all gluon"):
        gluon = case.endswith("gluon")
        config = Config(use_gluon=True, num_warps=4, block_size=128) if gluon else None
        inp = ctx.full((2 * 128,), rank + 1.0)  # (the Gluon kernels' block of 128 fits each rank's part)
        _extra(ctx)
        if case.startswith("all_gather"):
            out = ctx.full((4 * 128,), -7.0)
            return lambda: ccl.all_gather(out, inp, config=config), [out, inp]
        out = ctx.full((2 * 128,), -7.0)
        return lambda: ccl.all_to_all(out, inp, config=config), [out, inp]
    if case in ("reduce_scatter pull", "reduce_scatter push"):
        out = ctx.full((N,), -7.0)
        _extra(ctx)  # moves inp (pull) and the push's staging, made at its first call
        inp = ctx.full((2 * N,), rank + 1.0)
        algorithm = case.split()[1]
        return lambda: ccl.reduce_scatter(out, inp, config=Config(algorithm=algorithm)), [out, inp]
    if case == "reduce_scatter tiles":
        out = ctx.full((64, 64), -7.0)
        _extra(ctx)
        inp = ctx.full((64, 64), rank + 1.0)
        return lambda: ccl.reduce_scatter(out, inp), [out, inp]
    if case == "all_reduce_rmsnorm":
        out, residual_out = ctx.full((8, 32), -7.0), ctx.full((8, 32), -7.0)
        _extra(ctx)
        inp, residual, weight = ctx.full((8, 32), rank + 1.0), ctx.full((8, 32), 1.0), ctx.full((32,), 1.0)
        return lambda: ccl.all_reduce_rmsnorm(out, residual_out, inp, residual, weight), [out, residual_out, inp]
    if case == "broadcast":
        _extra(ctx)
        tensor = ctx.full((N,), rank + 1.0)
        return lambda: ccl.broadcast(tensor, src=0), [tensor]
    if case in ("scatter", "gather", "reduce"):
        out = ctx.full((N,) if case == "scatter" else (2 * N,) if case == "gather" else (N,), -7.0)
        _extra(ctx)
        inp = ctx.full((2 * N,) if case == "scatter" else (N,), rank + 1.0)
        call = getattr(ccl, case)
        return (lambda: call(out, inp, src=0)) if case == "scatter" else (lambda: call(out, inp, dst=0)), [out, inp]
    if case == "send/recv":
        _extra(ctx)
        tensor = ctx.full((N,), rank + 1.0)
        call = (lambda: ccl.send(tensor, dst=1)) if rank == 0 else (lambda: ccl.recv(tensor, src=0))
        return call, [tensor]
    raise ValueError(case)


def _fused_case(ctx, case):
    """``(call, watched)`` for a fused op, the MoE dispatch or a copy-engine transfer (``_collective_case``)."""
    rank, world, ops = ctx.get_rank(), ctx.get_num_ranks(), ctx.ops
    M_LOCAL, N_LOCAL, K = 32, 32, 32
    M, N = world * M_LOCAL, world * N_LOCAL
    fused = iris.ops.OpsConfig(variant="fused", copy_engine=False, **TILE)
    if case == "matmul_all_gather":  # peers write out
        a, b = ctx.full((M, K), 1.0), ctx.full((K, N_LOCAL), rank + 1.0)
        _extra(ctx)
        out = ctx.full((M, N), -7.0)
        return lambda: ops.matmul_all_gather(out, a, b, config=fused), [out]
    if case in ("all_gather_matmul", "all_gather_matmul copy engine"):  # peers write the gathered workspace
        config = iris.ops.OpsConfig(variant="fused", copy_engine=case.endswith("engine"), **TILE)
        out = torch.full((M, N), -7.0, device=ctx.get_device())
        a, b = ctx.full((M_LOCAL, K), rank + 1.0), ctx.full((K, N), 1.0)
        _extra(ctx)
        return lambda: ops.all_gather_matmul(out, a, b, config=config), [out]
    if case in ("matmul_all_reduce", "matmul_reduce_scatter"):  # peers write out (all_reduce) and the staging
        a, b = ctx.full((M, K), rank + 1.0), ctx.full((K, N), 1.0)
        _extra(ctx)
        if case == "matmul_all_reduce":
            out = ctx.full((M, N), -7.0)
            return lambda: ops.matmul_all_reduce(out, a, b, config=fused), [out]
        out = torch.full((M_LOCAL, N), -7.0, device=ctx.get_device())
        return lambda: ops.matmul_reduce_scatter(out, a, b, config=fused), [out]
    if case == "moe_dispatch":  # peers write the dispatcher's count table, rows and origins
        _extra(ctx)
        d = ctx.ccl.moe_dispatcher(20, 4, 2, 4)
        d._buf.fill_(-7.0)
        dev = ctx.get_device()
        tokens = torch.full((4, 20), rank + 1.0, dtype=torch.bfloat16, device=dev)
        idx = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]], dtype=torch.int32, device=dev)
        weights = torch.full((4, 2), 0.5, device=dev)
        return lambda: d.dispatch(tokens, idx, weights), [d._buf, d._meta.slice_sizes, d._meta.slice_offs]
    raise ValueError(case)


def _config_case(ctx, case):
    """``(call, watched)`` for a call whose config differs on rank 0 (``_collective_case``)."""
    rank, Config = ctx.get_rank(), iris.ccl.CollectiveConfig
    out, inp = ctx.full((N,), -7.0), ctx.full((N,), rank + 1.0)
    if case == "all_reduce comm_sms":  # rank 0 launches 4 programs, rank 1 two: two of rank 0's have no namesake
        # (8 Ki elements in blocks of 256: 32 blocks, so the cap decides the grid on either backend; the GPU's
        # default block would make two programs of them on both ranks, a launch alike and right)
        out, inp = ctx.full((8 * 1024,), -7.0), ctx.full((8 * 1024,), rank + 1.0)
        config = Config(comm_sms=4 if rank == 0 else 2, block_size=256)
        return lambda: ctx.ccl.all_reduce(out, inp, config=config), [out, inp]
    if case == "all_reduce algorithm":  # two kernels, one barrier each of a different kind
        config = Config(algorithm="one_shot" if rank == 0 else "two_shot")
        return lambda: ctx.ccl.all_reduce(out, inp, config=config), [out, inp]
    if case == "all_gather block_size":
        gathered = ctx.full((2 * N,), -7.0)
        config = Config(block_size=256 if rank == 0 else 128)
        return lambda: ctx.ccl.all_gather(gathered, inp, config=config), [gathered, inp]
    if case == "reduce_scatter algorithm":
        half = ctx.full((N // 2,), -7.0)
        config = Config(algorithm="pull" if rank == 0 else "push")
        return lambda: ctx.ccl.reduce_scatter(half, inp, config=config), [half, inp]
    if case == "matmul_all_reduce variant":  # fused on rank 0; GEMM then ccl.all_reduce on rank 1
        a, b, reduced = ctx.full((64, 32), rank + 1.0), ctx.full((32, 64), 1.0), ctx.full((64, 64), -7.0)
        config = iris.ops.OpsConfig(variant="fused" if rank == 0 else "bulk", copy_engine=False, **TILE)
        return lambda: ctx.ops.matmul_all_reduce(reduced, a, b, config=config), [reduced]
    raise ValueError(case)


def _call_and_settle(ctx, call):
    """The call; on GPUs, where its kernels run after it returns, also the wait for them and the context's next
    call, which raises what they found (the watchdog's error may land anywhere in here first)."""
    call()
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
        ctx.barrier()


def _refused_body(build, cases, watchdog=True):
    """Each case on a fresh context: ``{case: (error, tensors written, seconds)}``."""
    import os

    if not watchdog:
        os.environ["IRIS_WATCHDOG"] = "0"  # read as the context starts
    results = {}
    try:
        for case in cases:
            ctx = new_context()
            call, watched = build(ctx, case)
            before = [t.clone() for t in watched]
            ctx.barrier()
            start = time.monotonic()
            message = error_message(_call_and_settle, ctx, call)
            seconds = time.monotonic() - start
            written = [i for i, (t, b) in enumerate(zip(watched, before)) if not torch.equal(t, b)]
            later = error_message(ctx.barrier)  # the context refuses what follows
            results[case] = (message, written, seconds, later)
            ctx.close()
    finally:
        os.environ.pop("IRIS_WATCHDOG", None)
    return results


def _assert_refused(results, cases):
    for rank, found in enumerate(results):
        for case in cases:
            message, written, seconds, later = found[case]
            assert message.startswith("MismatchError: ") and "the ranks' calls disagree: rank " in message, \
                (rank, case, message)
            assert written == [], f"rank {rank}, {case}: the refused call wrote its tensors {written}"
            assert seconds < 20, f"rank {rank}, {case}: the error took {seconds:.1f} s"
            assert later.startswith("MismatchError: "), (rank, case, later)


COLLECTIVE_CASES = ["all_reduce one_shot", "all_reduce two_shot", "all_gather", "all_gather gluon", "all_to_all",
                    "all_to_all gluon", "reduce_scatter pull", "reduce_scatter push", "reduce_scatter tiles",
                    "all_reduce_rmsnorm", "broadcast", "scatter", "gather", "reduce", "send/recv"]


def test_collectives_refuse_an_operand_at_another_offset(pools):
    results = pools(2).run(_refused_body, _collective_case, COLLECTIVE_CASES)
    _assert_refused(results, COLLECTIVE_CASES)
    # the message names both calls, alike but for the offsets
    message = results[0]["all_reduce two_shot"][0]
    assert "rank 0 called ccl.all_reduce(float32[1000], float32[1000], 'sum', 'two_shot') with programs=" in message
    assert "so their tensors lie at different heap offsets" in message, message


FUSED_CASES = ["matmul_all_gather", "all_gather_matmul", "all_gather_matmul copy engine", "matmul_all_reduce",
               "matmul_reduce_scatter", "moe_dispatch"]


def test_fused_ops_moe_and_copy_engines_refuse_an_operand_at_another_offset(pools):
    # On GPUs a refused call through the copy engines leaves its side stream waiting for good (a stream wait cannot
    # be called off without letting its copies go, into a peer's heap at this rank's offsets): docs/debugging.md says
    # so; the cpu backend's copy queue is a thread whose waits check the context, so there the case runs
    cases = [case for case in FUSED_CASES if not (on_gpu() and case.endswith("copy engine"))]
    _assert_refused(pools(2).run(_refused_body, _fused_case, cases), cases)


CONFIG_CASES = ["all_reduce comm_sms", "all_reduce algorithm", "all_gather block_size", "reduce_scatter algorithm",
                "matmul_all_reduce variant"]


def test_calls_whose_configs_differ_are_refused(pools):
    results = pools(2).run(_refused_body, _config_case, CONFIG_CASES)
    _assert_refused(results, CONFIG_CASES)
    message = results[1]["all_reduce comm_sms"][0]
    assert re.search(r"with programs=2, block=\d+, but rank 0 called", message), message
    assert re.search(r"rank 0 called ccl.all_reduce\(.*\) with programs=4, block=\d+", message), message


def _any_case(ctx, case):
    build = _collective_case if case in COLLECTIVE_CASES else _fused_case if case in FUSED_CASES else _config_case
    return build(ctx, case)


def test_mismatches_are_refused_without_the_watchdog(pools):
    # IRIS_WATCHDOG=0: no thread reads the records; each call's check reads the alarm the kernels raise
    cases = ["all_reduce two_shot", "all_reduce comm_sms", "matmul_all_gather"]
    _assert_refused(pools(2).run(_refused_body, _any_case, cases, watchdog=False), cases)


def _triggered_offsets_body():
    import iris.triggered as tr

    ctx = iris.iris(1 << 21, timeout_s=15)
    _extra(ctx)
    buffer = ctx.full((8, 16), -1, dtype=torch.int32)
    schedules = [tr.whole(buffer[4 * r:4 * (r + 1)], base=buffer) for r in range(ctx.get_num_ranks())]
    start = time.monotonic()
    message = error_message(tr.TriggeredPlan, ctx, buffer, schedules)
    return message, time.monotonic() - start, bool((buffer == -1).all())


def test_a_triggered_plan_refuses_buffers_at_other_offsets(pools):
    for rank, (message, seconds, untouched) in enumerate(pools(2).run(_triggered_offsets_body)):
        assert message.startswith("ValueError: TriggeredPlan: the ranks' buffers lie at different heap offsets"), \
            (rank, message)
        assert "allocate symmetric tensors in the same order and sizes on every rank" in message, message
        assert untouched and seconds < 10, (rank, untouched, seconds)


def _call_and_check(ctx, call, *args, **kwargs):
    """``call``; on GPUs also the wait for its kernel and the host check the context's next call makes, which
    raises what the kernel found (rank 1 makes no call here, so no collective can be that next call)."""
    call(*args, **kwargs)
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
        ctx.groups.check("ccl.all_reduce", entering=False)


def _ahead_body():
    """Rank 0 alone calls, with rank 1's words preset past its count (as if rank 1 had been through the barrier and
    signalled again): the wait cannot compare them and reads the group's summary record, which rank 1 would have
    written had the calls differed. Empty, the call runs; set, it is refused and writes nothing."""
    import os

    os.environ["IRIS_WATCHDOG"] = "0"  # no thread reading the preset records before the call does
    try:
        ctx = new_context()
    finally:
        os.environ.pop("IRIS_WATCHDOG", None)
    rank = ctx.get_rank()
    inp, out = ctx.full((N,), rank + 1.0), ctx.full((N,), -7.0)
    flags = ctx.groups.get([0, 1], "test").flags  # [ROWS, world + 1]: words, then the row's record
    # The store barrier alone (no context check, which would read the records): what every rank wrote before it
    # comes before what rank 0's call reads of rank 1's heap, for the race detector too (a gloo barrier is not its)
    ctx._host_barrier()
    ran = refused = None
    if rank == 0:
        one_shot = iris.ccl.CollectiveConfig(algorithm="one_shot")
        flags[:, 1] = 3 << 32  # both barriers of the call find rank 1 a signal or more ahead
        ran = (error_message(_call_and_check, ctx, ctx.ccl.all_reduce, out, inp, config=one_shot),
               bool((out == 3.0).all()))
        out.fill_(-7.0)
        flags[:, 1] = 5 << 32
        flags[0, 2] = flags[1, 2] = (1 << 62) | (1 << 32) | 123  # the summary and program 0's record
        refused = (error_message(_call_and_check, ctx, ctx.ccl.all_reduce, out, inp, config=one_shot),
                   bool((out == -7.0).all()))
    ctx._host_barrier()
    return ran, refused


def test_a_member_past_our_count_is_matched_through_its_record(pools):
    ran, refused = pools(2).run(_ahead_body)[0]
    assert ran == ("no error", True), ran
    assert refused[0].startswith("MismatchError: ccl.all_reduce: the ranks' calls disagree: rank 0 called"), refused
    assert refused[1], "the refused call wrote out"


# ---- operands that share bytes: refused unless the call's documented in-place form ----


def test_overlap_is_exact_for_contiguous_operands_and_column_blocks():
    from iris.host.memory.overlap import overlap

    buf = torch.zeros(8, 12)
    assert overlap(buf[:4], buf[3:]) and not overlap(buf[:4], buf[4:])
    assert overlap(buf.view(-1)[5:20], buf.view(-1)[19:30]) and not overlap(buf.view(-1)[5:20], buf.view(-1)[20:])
    assert not overlap(buf[:, :4], buf[:, 4:10])  # column blocks of one buffer: apart
    assert overlap(buf[:, :5], buf[:, 4:10]) and overlap(buf[:, 2:6], buf[1:, :3])
    assert overlap(buf[:, :4].t(), buf[:, 3:6].t()) and not overlap(buf[:, :4].t(), buf[:, 4:6])
    assert not overlap(buf[:0], buf) and not overlap(buf[:2], torch.zeros(2, 12))


def _overlap_body():
    """Each rank makes the same calls: ``({case: error}, {case: (got, expected)})``."""
    ctx = new_context(1 << 23)
    rank, world, ccl, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.ccl, ctx.get_device()
    Config = iris.ccl.CollectiveConfig
    n = 64

    def ramp(size, dtype=torch.float32):  # different on every rank, never zero
        return torch.arange(1, size + 1, dtype=dtype) * (rank + 1)

    every = [torch.arange(1, world * n + 1, dtype=torch.float32) * (r + 1) for r in range(world)]
    total = sum(every)
    refused, checked = {}, {}

    def refuse(case, call, *args, **kwargs):
        refused[case] = error_message(call, *args, **kwargs)

    big = ctx.zeros(2 * n)
    big.copy_(ramp(2 * n))
    refuse("all_reduce one_shot", ccl.all_reduce, big[4:4 + n], big[:n])
    refuse("all_reduce two_shot", ccl.all_reduce, big[4:4 + n], big[:n], config=Config(algorithm="two_shot"))
    ccl.all_reduce(big[n:], big[:n])  # apart: remembered; the same shapes overlapping must not take it
    refuse("all_reduce remembered", ccl.all_reduce, big[4:4 + n], big[:n])
    gathered = ctx.zeros(world * n)
    refuse("all_gather", ccl.all_gather, gathered, gathered[1:n + 1])
    flat = ctx.zeros(world * n)
    other = (rank + 1) % world
    refuse("reduce_scatter_tensor", ccl.reduce_scatter_tensor, flat[other * n:(other + 1) * n], flat)
    tiles = ctx.zeros(world * n + 8)
    refuse("reduce_scatter tiles", ccl.reduce_scatter, tiles[8:].view(world, n), tiles[:world * n].view(world, n))
    splits = [n + 8 * r for r in range(world)]
    parts = ctx.zeros(sum(splits))
    mine_elsewhere = parts[sum(splits[:other]):][:splits[rank]]  # this rank's count, at another rank's part
    refuse("reduce_scatter_v", ccl.reduce_scatter_v, mine_elsewhere, parts, splits)
    a2a = ctx.zeros(world * n + 1)
    refuse("all_to_all", ccl.all_to_all_single, a2a[1:], a2a[:world * n])
    rows = ctx.zeros(9, 32)
    weight = ctx.ones(32)
    refuse("rmsnorm residual_out on inp", ccl.all_reduce_rmsnorm, ctx.zeros(8, 32), rows[1:], rows[:8], ctx.zeros(8, 32),
           weight)
    both = ctx.zeros(8, 32)
    refuse("rmsnorm out is residual_out", ccl.all_reduce_rmsnorm, both, both, rows[:8], ctx.zeros(8, 32), weight)
    refuse("scatter", ccl.scatter, flat[other * n:(other + 1) * n], flat, src=0)
    refuse("gather in place", ccl.gather, gathered, gathered[rank * n:(rank + 1) * n], dst=0)
    refuse("reduce", ccl.reduce, big[1:n + 1], big[:n], dst=0)
    fused = iris.ops.OpsConfig(variant="fused", copy_engine=False, **TILE)
    shared = ctx.zeros(64, 96)
    refuse("matmul_all_reduce out on A", ctx.ops.matmul_all_reduce, shared[:, :64], shared[:, 32:64],
           ctx.ones(32, 64), config=fused)
    refuse("all_gather_matmul out on B", ctx.ops.all_gather_matmul, shared[:, :32], ctx.ones(64 // world, 32),
           shared[:32, :32], config=fused)
    refuse("matmul_all_reduce bias on out", ctx.ops.matmul_all_reduce, shared[:, :64], ctx.ones(64, 32),
           ctx.ones(32, 64), bias=shared[0, :64], config=fused)

    # the in-place forms, poisoned first, against the reference
    x = ctx.zeros(world * n)
    x.copy_(ramp(world * n))
    ccl.all_reduce(x, x)
    checked["all_reduce in place"] = (x.clone(), total)
    out = ctx.full((world * n,), -777.0)
    out[rank * n:(rank + 1) * n] = ramp(n)
    ccl.all_gather(out, out[rank * n:(rank + 1) * n])
    checked["all_gather in place"] = (out.clone(), torch.cat([e[:n] for e in every]))
    for algorithm in ("pull", "push"):
        x.copy_(ramp(world * n))
        ccl.reduce_scatter_tensor(x[rank * n:(rank + 1) * n], x, config=Config(algorithm=algorithm))
        checked[f"reduce_scatter_tensor {algorithm} in place"] = (x[rank * n:(rank + 1) * n].clone(),
                                                                   total[rank * n:(rank + 1) * n])
    square = ctx.zeros(world * 32, 64)
    square.copy_(ramp(world * 32 * 64).view(world * 32, 64))
    ccl.reduce_scatter(square, square)
    mine = slice(32 * rank, 32 * rank + 32)  # one 32 x 64 tile a rank (the collective's docstring)
    checked["reduce_scatter tiles in place"] = (square[mine].clone(), sum(
        torch.arange(1, world * 32 * 64 + 1, dtype=torch.float32).view(world * 32, 64) * (r + 1)
        for r in range(world))[mine])
    parts.copy_(ramp(sum(splits)))
    start = sum(splits[:rank])
    ccl.reduce_scatter_v(parts[start:start + splits[rank]], parts, splits)
    checked["reduce_scatter_v in place"] = (parts[start:start + splits[rank]].clone(), sum(
        torch.arange(1, sum(splits) + 1, dtype=torch.float32) * (r + 1) for r in range(world))[start:start + splits[rank]])
    x.copy_(ramp(world * n))
    ccl.scatter(x[rank * n:(rank + 1) * n], x, src=0)
    checked["scatter in place"] = (x[rank * n:(rank + 1) * n].clone(), every[0][rank * n:(rank + 1) * n])
    y = ctx.zeros(n)
    y.copy_(ramp(n))
    ccl.reduce(y, y, dst=0)
    if rank == 0:
        checked["reduce in place"] = (y.clone(), total[:n])
    inp, residual = ctx.zeros(8, 32), ctx.zeros(8, 32)
    inp.copy_(ramp(256).view(8, 32))
    residual.copy_(torch.linspace(-1, 1, 256).view(8, 32))
    summed = sum(torch.arange(1, 257, dtype=torch.float32).view(8, 32) * (r + 1) for r in range(world)) + \
        residual.cpu()
    normed = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + 1e-6)
    residual_out = ctx.full((8, 32), -777.0)
    ccl.all_reduce_rmsnorm(residual, residual_out, inp, residual, weight)  # out is residual
    checked["rmsnorm out is residual"] = (torch.cat([residual, residual_out]), torch.cat([normed, summed]))
    # column blocks of one buffer are apart: out and A side by side, a transposed out through the bulk pair
    block = ctx.zeros(64, 96)
    block.fill_(-777.0)
    a = block[:, 64:96]
    a.copy_(torch.linspace(-1, 1, 64 * 32).view(64, 32) * (rank + 1))
    b = torch.linspace(1, 2, 32 * 64).view(32, 64)
    ref = sum(torch.linspace(-1, 1, 64 * 32).view(64, 32) * (r + 1) for r in range(world)) @ b
    b = b.to(dev)
    ctx.ops.matmul_all_reduce(block[:, :64], a, b, config=fused)
    checked["matmul_all_reduce beside A"] = (block[:, :64].clone(), ref)
    for variant in ("fused", "bulk"):
        transposed = ctx.full((64, 64), -777.0).t()  # fused: on the heap, where peers store
        ctx.ops.matmul_all_reduce(transposed, a.clone(), b, config=iris.ops.OpsConfig(variant=variant,
                                                                                      copy_engine=False, **TILE))
        checked[f"matmul_all_reduce {variant} transposed out"] = (transposed.clone(), ref)
        scattered = torch.full((64, 64 // world), -777.0, device=dev).t()
        ctx.ops.matmul_reduce_scatter(scattered, a.clone(), b, config=iris.ops.OpsConfig(variant=variant,
                                                                                    copy_engine=False, **TILE))
        checked[f"matmul_reduce_scatter {variant} transposed out"] = (scattered.clone(), ref.chunk(world)[rank])
    ctx.barrier()
    ctx.close()
    return refused, checked


def test_operands_that_overlap_are_refused_and_the_in_place_forms_are_right(pools):
    for rank, (refused, checked) in enumerate(pools(2).run(_overlap_body)):
        for case, message in refused.items():
            assert message.startswith("ValueError: ") and " overlaps " in message and "; " in message, \
                (rank, case, message)
            assert message.split(":")[1].strip().startswith(("ccl.", "ops.")), (rank, case, message)
        assert "gather reads every rank's inp at the same heap offset" in refused["gather in place"]
        assert len(refused) == 16 and len(checked) >= 10, (sorted(refused), sorted(checked))
        for case, (got, expected) in checked.items():
            # the fused GEMMs multiply fp32 in TF32 on GPUs
            tolerance = dict(rtol=1e-2, atol=1e-2) if "matmul" in case else dict(rtol=1e-4, atol=1e-3)
            got = got.cpu()
            assert torch.allclose(got, expected, **tolerance), (rank, case, (got - expected).abs().max())
