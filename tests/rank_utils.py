"""Helpers for test bodies that run inside rank processes."""

import contextlib
import os
import sys
import time

import torch

SEED = 1234
# Sizes: small on the cpu backend (the interpreter runs each program in Python), real on GPUs.
GPU_SCALE = os.environ.get("IRIS_TEST_SCALE", "") == "gpu"

INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES
SEMS = ["relaxed", "acquire", "release", "acq_rel"]
SCOPES = ["cta", "gpu", "sys"]


def rank_data(rank, n, dtype, device, salt=0):
    """Deterministic non-zero data for ``rank``: any rank can regenerate any other rank's values."""
    gen = torch.Generator().manual_seed(SEED + 7919 * salt + rank)
    if dtype.is_floating_point:
        # Small integers are exact in every float type, so data movement and adds compare exactly.
        values = torch.randint(-60, 60, (n,), generator=gen).to(dtype)
    else:
        info = torch.iinfo(dtype)
        values = torch.randint(max(info.min, -(1 << 20)), min(info.max, 1 << 20), (n,), generator=gen,
                               dtype=torch.int64).to(dtype)
    values[values == 0] = 3
    return values.to(device)


def wait_until_in(thread_id, function, timeout_s=30.0):
    """Until the thread ``thread_id`` is inside ``function`` (a name; e.g. blocked on a lock there), at most
    ``timeout_s``; True if it got there. Orders a test's threads by where they are, not by sleeps."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread_id)
        while frame is not None:
            if frame.f_code.co_name == function:
                return True
            frame = frame.f_back
        time.sleep(0.01)
    return False


def poison_value(dtype):
    return -77 if dtype.is_floating_point or dtype.is_signed else 77


def new_context(heap_size=1 << 22):
    import iris

    return iris.iris(heap_size)


def error_message(fn, *args, **kwargs):
    """``"Type: message"`` of what ``fn(*args, **kwargs)`` raises, followed by its chained causes (the
    compiler reports a call site and chains the real error), or ``"no error"``."""
    try:
        fn(*args, **kwargs)
    except Exception as e:
        messages = []
        while e is not None and len(messages) < 20:
            messages.append(f"{type(e).__name__}: {e}")
            e = e.__cause__ or e.__context__
        return "\n".join(messages)
    return "no error"


def on_stream(stream):
    """A context that makes ``stream`` current, or none where ``stream`` is None (the cpu backend)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def warmed_graph(ctx, fn, stream):
    """``fn`` called once on ``stream`` outside any capture (it compiles the kernels and makes the group flags and
    workspaces), then captured into a CUDA graph on ``stream``; returns what runs it again: the graph's replay, or
    ``fn`` itself where ``stream`` is None (the cpu backend, which cannot capture)."""
    with on_stream(stream):
        fn()
    if stream is None:
        return fn
    stream.synchronize()
    ctx.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return graph.replay


def int64(value):
    """``value`` wrapped to a signed 64-bit integer, as the sync words wrap."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def preset_sync_words(ctx, signals):
    """Every member's word in every row of every group's sync flags on this rank as after ``signals`` signals with
    mark 0 (``signals << 32``, wrapping; ``iris/device/sync.py``); the mismatch records stay empty."""
    from iris.host.groups import slot_words

    world = ctx.get_num_ranks()
    rows = ctx.groups.region[:ctx.groups.slots * slot_words(world)].view(-1, world + 1)
    rows[:, :world].fill_(int64(signals << 32))
    return rows
