"""The cpu backend's race detector (``IRIS_SANITIZE=race``): racy kernels are reported with both accesses and their
lines, their correct forms are not, and ``ctx.close()`` raises ``iris.RaceError`` after a report.

Each case runs on 2 ranks in one pool; a racy case's ranks run the kernel, close the context and return what
``close`` raised (the report's text), so the assertions see every rank's reports. The reports come from
happens-before, not from the values the run happened to read: each racy case is reported on every run."""

import pytest
import torch
import triton
import triton.language as tl

import iris
from conftest import on_gpu

pytestmark = pytest.mark.skipif(on_gpu(), reason="the race detector runs on the cpu backend only")

N = 64
BLOCK = 64


@triton.jit
def _push_kernel(data, flag, heap_bases, rank, peer, n, BARRIER: tl.constexpr, SEM: tl.constexpr,
                 SCOPE: tl.constexpr, BLOCK: tl.constexpr):
    """Rank 0 stores its data into rank 1's buffer, then raises rank 1's flag; rank 1 waits for the flag, then
    reads its buffer back into its own data[n:]."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    if rank == 0:
        iris.store(data + offs, tl.load(data + offs, mask=mask), rank, peer, heap_bases, mask=mask)  # racy write
        if BARRIER:
            iris.atomic_add(flag, 1, rank, peer, heap_bases, sem=SEM, scope=SCOPE)
    else:
        if BARRIER:
            iris.wait_until(flag, 1, rank, peer)
        value = tl.load(data + offs, mask=mask)  # racy read
        tl.store(data + n + offs, value, mask=mask)


def _run_push(barrier, sem="release", scope="sys"):
    ctx = iris.iris(heap_size=1 << 20, sanitize="race")
    rank = ctx.get_rank()
    data = ctx.arange(2 * N, dtype=torch.float32)
    data.add_(1000 * rank)
    flag = ctx.zeros(1, dtype=torch.int64)
    ctx.barrier()
    _push_kernel[(1,)](data, flag, ctx.get_heap_bases(), rank, 1 - rank, N, BARRIER=barrier, SEM=sem, SCOPE=scope,
                       BLOCK=BLOCK)
    ctx.barrier()
    return _close(ctx)


def _close(ctx):
    try:
        ctx.close()
    except iris.RaceError as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def pool(pools):
    return pools(2)


def _line(fn, text):
    """The line number of the first line of ``fn``'s source that holds ``text``."""
    import inspect

    lines, first = inspect.getsourcelines(getattr(fn, "fn", fn))  # a kernel's Python function
    return first + next(i for i, line in enumerate(lines) if text in line)


def _one_report(reports):
    """The one report of a race, from whichever rank made the second of its two accesses."""
    found = [r for r in reports if r is not None]
    assert len(found) == 1 and "data race" in found[0].splitlines()[1], reports
    return found[0]


def test_a_push_without_a_flag_is_a_race(pool):
    report = _one_report(pool.run(_run_push, False))
    write_line, read_line = _line(_push_kernel, "# racy write"), _line(_push_kernel, "# racy read")
    assert f"read by rank 1, program 0 of _push_kernel, at tests/test_race.py:{read_line}" in report, report
    assert f"write by rank 0, program 0 of _push_kernel, at tests/test_race.py:{write_line}" in report, report
    assert "rank 1's heap, element 0 (4-byte elements) of the 512-byte allocation" in report and "nothing orders them" in report, report


def test_a_release_flag_and_an_acquire_wait_order_the_push(pool):
    assert pool.run(_run_push, True) == [None, None]


@pytest.mark.parametrize("sem, scope", [("relaxed", "sys"), ("release", "gpu")])
def test_a_flag_that_does_not_release_to_the_peer_orders_nothing(pool, sem, scope):
    _one_report(pool.run(_run_push, True, sem, scope))


def _host_reads_a_peer_store(barrier):
    ctx = iris.iris(heap_size=1 << 20, sanitize="race")
    rank = ctx.get_rank()
    data = ctx.arange(2 * N, dtype=torch.float32)
    flag = ctx.zeros(1, dtype=torch.int64)
    ctx.barrier()
    if rank == 0:
        _push_kernel[(1,)](data, flag, ctx.get_heap_bases(), rank, 1, N, BARRIER=False, SEM="release", SCOPE="sys",
                           BLOCK=BLOCK)
    if barrier:
        ctx.barrier()
    if rank == 1:
        total = float(data[:N].sum())  # the host reads what rank 0 stored
    ctx.barrier()
    return _close(ctx)


def test_a_host_read_of_a_peer_store_needs_a_barrier(pool):
    report = _one_report(pool.run(_host_reads_a_peer_store, False))
    line = _line(_host_reads_a_peer_store, "the host reads")
    assert f"read by rank 1, the host, at tests/test_race.py:{line}" in report, report
    assert pool.run(_host_reads_a_peer_store, True) == [None, None]


@triton.jit
def _overlap_kernel(out, n, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    """Program p writes elements [p * STRIDE, p * STRIDE + BLOCK): they overlap when STRIDE < BLOCK."""
    offs = tl.program_id(0) * STRIDE + tl.arange(0, BLOCK)
    tl.store(out + offs, offs.to(tl.float32), mask=offs < n)


def _programs_writing(stride):
    ctx = iris.iris(heap_size=1 << 20, sanitize="race")
    out = ctx.zeros(4 * BLOCK, dtype=torch.float32)
    _overlap_kernel[(3,)](out, 4 * BLOCK, STRIDE=stride, BLOCK=BLOCK)
    ctx.barrier()
    return _close(ctx)


def test_programs_of_one_kernel_writing_the_same_elements(pool):
    reports = pool.run(_programs_writing, BLOCK // 2)
    for rank, report in enumerate(reports):
        assert report is not None and "programs of one kernel run in no order" in report, report
        assert f"write by rank {rank}, program 1 of _overlap_kernel" in report, report
        assert f"write by rank {rank}, program 0 of _overlap_kernel" in report, report
    assert pool.run(_programs_writing, BLOCK) == [None, None]


@triton.jit
def _read_peer_kernel(data, heap_bases, rank, peer, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    value = iris.load(data + offs, rank, peer, heap_bases, mask=mask)
    tl.store(data + n + offs, value, mask=mask)


def _read_while_peer_writes(barrier):
    """Rank 0 overwrites its data[:n] on the host while rank 1 reads it with iris.load (after it, with a barrier
    between them)."""
    ctx = iris.iris(heap_size=1 << 20, sanitize="race")
    rank = ctx.get_rank()
    data = ctx.arange(2 * N, dtype=torch.float32)
    ctx.barrier()
    if rank == 0:
        data[:N].fill_(7.0)  # the host writes
    if barrier:
        ctx.barrier()
    if rank == 1:
        _read_peer_kernel[(1,)](data, ctx.get_heap_bases(), rank, 0, N, BLOCK=BLOCK)
        assert not barrier or torch.equal(data[N:], torch.full((N,), 7.0))
    ctx.barrier()
    return _close(ctx)


def test_a_read_while_a_peer_writes(pool):
    report = _one_report(pool.run(_read_while_peer_writes, False))
    assert "read by rank 1, program 0 of _read_peer_kernel" in report, report
    line = _line(_read_while_peer_writes, "the host writes")
    assert f"write by rank 0, the host, at tests/test_race.py:{line}" in report, report
    assert pool.run(_read_while_peer_writes, True) == [None, None]


def _clean_collectives():
    ctx = iris.iris(heap_size=1 << 22, sanitize="race")
    rank = ctx.get_rank()
    inp = ctx.full((1000,), rank + 1.0, dtype=torch.float32)
    out = ctx.zeros(1000, dtype=torch.float32)
    for algorithm in ("one_shot", "two_shot"):
        ctx.ccl.all_reduce(out, inp, config=iris.ccl.CollectiveConfig(algorithm=algorithm))
        assert torch.equal(out, torch.full_like(out, 3.0))
        inp.add_(0)  # the host touches the input the peers read
    gathered = ctx.zeros(2000, dtype=torch.float32)
    ctx.ccl.all_gather(gathered, inp)
    ctx.device_barrier()
    ctx.barrier()
    return _close(ctx)


def test_the_collectives_report_nothing(pool):
    assert pool.run(_clean_collectives) == [None, None]


OFF = """
import sys
import torch
import iris


def main():
    ctx = iris.iris(heap_size=1 << 20)
    assert ctx.sanitizer is None
    x = ctx.ones(64)
    ctx.ccl.all_reduce(x, x, config=iris.ccl.CollectiveConfig(algorithm="two_shot"))  # its barriers fence
    assert torch.equal(x, torch.ones(64))
    print("race modules:", sorted(m for m in sys.modules if m.startswith("iris.interpreter.race")))


if __name__ == "__main__":
    iris.run(main, 1)
"""


def test_off_imports_nothing_of_it(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "off.py"
    script.write_text(OFF)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "IRIS_SANITIZE": ""})
    assert done.returncode == 0, done.stderr
    assert "race modules: []" in done.stdout, done.stdout


def test_sanitize_names_the_choices():
    with pytest.raises(ValueError, match="sanitize='thread' is not a sanitizer; use 'race'"):
        iris.host.sanitize.mode("thread", "cpu")
    with pytest.raises(ValueError, match="runs on the cpu backend"):
        iris.host.sanitize.mode("race", "cuda")


def _copy_engine_put(barrier):
    """Rank 0 puts a block into rank 1's buffer through the copy engine (a lane of its own, asynchronous); rank 1's
    host reads the buffer. ``ctx.barrier()`` waits for this rank's device work, the copy engine's included: with
    one between them, the read comes after the lane's write; without, nothing orders them."""
    import time

    ctx = iris.iris(heap_size=1 << 20, engines=("ce",), sanitize="race")
    rank = ctx.get_rank()
    src = ctx.full((N,), 5.0, dtype=torch.float32)
    dst = ctx.zeros(N, dtype=torch.float32)
    ctx.barrier()
    if rank == 0:
        ctx.put(src, 1, dst, async_op=True)  # the copy engine writes rank 1's dst
    if barrier:
        ctx.barrier()
    else:
        time.sleep(0.5)  # the lane has most likely written by now: a race all the same
    if rank == 1:
        total = float(dst.sum())  # rank 1 reads what the copy engine wrote
        assert not barrier or total == 5.0 * N
    ctx.barrier()
    return _close(ctx)


def test_a_copy_engine_put_needs_a_barrier_before_the_peer_reads(pool):
    report = _one_report(pool.run(_copy_engine_put, False))
    line = _line(_copy_engine_put, "rank 1 reads what")
    assert "by rank 0, a copy lane" in report and f"read by rank 1, the host, at tests/test_race.py:{line}" in report
    assert pool.run(_copy_engine_put, True) == [None, None]
