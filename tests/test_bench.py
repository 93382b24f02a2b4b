"""The benchmark harness, the microbenchmark kernels and commands, at tiny sizes.

- the kernels move exactly the right bytes (every provider, odd sizes, grid-stride loops, 2 and 4 ranks);
- the harness returns the result schema with positive finite numbers, the same rows on every rank;
- ``benchmarks/run_all.py --quick`` and ``examples/10_bandwidth_table.py`` run end to end and write files
  of that schema;
- compiled for sm_90 (no GPU needed), the translated loads and stores are 16-byte vectors.
"""

import csv
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import on_gpu, world_sizes

import iris
from iris.bench import harness, kernels, micro, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------- rank bodies
def _moves_right_data(block, num_warps, programs_per_sm):
    """Every transfer once, each rank against its next rank; returns the mismatches seen on this rank."""
    from iris.host.memory import peers as peer

    config = kernels.CopyConfig(block, num_warps, programs_per_sm)
    ctx = iris.iris(1 << 22)
    rank, world, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    cu, bases = ctx.get_cu_count(), ctx.get_heap_bases()
    n = 3000  # not a multiple of any block: the masks matter
    remote = ctx.zeros(world * n, dtype=torch.float32)
    src = torch.arange(n, dtype=torch.float32, device=device) + 1000 * rank
    dst = torch.zeros(n, dtype=torch.float32, device=device)
    bad = []

    def expect(name, tri, ref):
        if not torch.equal(tri.cpu(), ref.cpu()):
            bad.append(f"rank {rank} {name}: got {tri[:4].tolist()}..., expected {ref[:4].tolist()}...")

    def reset():
        remote.fill_(-(rank + 1))
        dst.zero_()
        ctx.barrier()

    for op in kernels.P2P_OPS:
        pull = op in kernels.PULL_OPS
        for provider in ("iris", "triton_raw", "copy_engine"):
            reset()
            mine = remote[:n]
            if provider == "iris":
                kernels.p2p(op, dst if pull else src, mine, rank, nxt, bases, config, cu)
            elif provider == "triton_raw":
                address = peer.peer_address(ctx, mine, nxt)
                if pull:
                    kernels.raw_copy(address, dst, n, True, torch.float32, config, cu)
                else:
                    kernels.raw_copy(src, address, n, False, torch.float32, config, cu)
            else:
                view = peer.peer_view(ctx, mine, nxt)
                dst.copy_(view) if pull else view.copy_(src)
            ctx.barrier()
            if pull:
                expect(f"{op} {provider}", dst, torch.full((n,), -(nxt + 1.0)))
            else:
                expect(f"{op} {provider}", remote[:n], torch.arange(n, dtype=torch.float32) + 1000 * prv)

    reset()
    kernels.all_load(dst, remote[:n], rank, world, bases, config, cu)
    ctx.barrier()
    expect("all_load", dst, torch.full((n,), float(sum(-(p + 1) for p in range(world) if p != rank))))
    reset()
    kernels.all_store(src, remote[rank * n:(rank + 1) * n], rank, world, bases, config, cu)
    ctx.barrier()
    for r in range(world):
        ref = torch.full((n,), -(rank + 1.0)) if r == rank else torch.arange(n, dtype=torch.float32) + 1000 * r
        expect(f"all_store slot {r}", remote[r * n:(r + 1) * n], ref)

    m = 1024  # atomics: a power of two (atomic_cas has no mask)
    for op, dtype in (("add", torch.float32), ("xchg", torch.int32), ("cas", torch.int32)):
        for provider in ("iris", "triton_raw"):
            buf = remote.view(dtype)[:m]
            buf.zero_()
            ctx.barrier()
            for _ in range(2):  # twice: add gives 2, xchg and cas stay 1
                if provider == "iris":
                    kernels.atomic(op, buf, rank, nxt, bases, config, cu)
                else:
                    kernels.raw_atomic(op, peer.peer_address(ctx, buf, nxt), m, dtype, config, cu)
            ctx.barrier()
            expect(f"atomic {op} {provider}", buf, torch.full((m,), 2 if op == "add" else 1, dtype=dtype))

    flag = ctx.zeros(64, dtype=torch.int32)[:1]
    epoch = torch.zeros(1, dtype=torch.int32, device=device)
    status = torch.zeros(1, dtype=torch.int32, device=device)
    ctx.barrier()  # every rank has zeroed its flag before the first ping lands in it (else the zeroing can erase it)
    rounds = 0
    if rank < 2:
        other = 1 - rank
        for raw in (False, True):
            for relaxed in (False, True):
                kernels.ping_pong(flag, peer.peer_address(ctx, flag, other), epoch, status, 3, rank, other, bases,
                                  rank == 0, raw, relaxed)
                rounds += 3
    ctx.barrier()
    if rank < 2:
        expect("ping-pong epoch/status/flag", torch.cat([epoch, status, flag]).cpu(),
               torch.tensor([rounds, 0, rounds], dtype=torch.int32))
    ctx.close()
    return bad


# Counts just below the int32 wrap: 2**31 - 1 is the largest int32; the next round's value wraps to -2**31.
NEAR_WRAP = (1 << 31) - 2


def _ping_pong_near_wrap_body(rounds):
    """One round trip per call, the flags and epochs preset just below the wrap; rank 1 (pong) answers late, so a
    ping whose wait compared across the wrap as reached returns before the answer and finds its flag stale."""
    import time

    from iris.host.memory import peers as peer

    ctx = iris.iris(1 << 20)
    rank, device, bases = ctx.get_rank(), ctx.get_device(), ctx.get_heap_bases()
    flag = ctx.zeros(64, dtype=torch.int32)[:1]
    epoch = torch.zeros(1, dtype=torch.int32, device=device)
    status = torch.zeros(1, dtype=torch.int32, device=device)
    flag.fill_(NEAR_WRAP)
    epoch.fill_(NEAR_WRAP)
    ctx.barrier()  # every rank has preset its flag before the first ping lands in it
    seen = []
    for _ in range(rounds):
        if rank == 1:
            time.sleep(0.5)
        kernels.ping_pong(flag, peer.peer_address(ctx, flag, 1 - rank), epoch, status, 1, rank, 1 - rank, bases,
                          rank == 0, False, False)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seen.append(int(flag[0]))
        ctx.barrier()
    ctx.close()
    return seen, int(status[0])


def test_ping_pong_waits_across_the_wrap(pools):
    expect = [torch.tensor(NEAR_WRAP + i + 1, dtype=torch.int64).to(torch.int32).item() for i in range(3)]
    assert expect[1] == -(1 << 31)  # the second round's value wraps
    for rank, (seen, status) in enumerate(pools(2).run(_ping_pong_near_wrap_body, 3)):
        assert seen == expect and status == 0, (rank, seen, status)


def _harness_rows():
    ctx = iris.iris(1 << 20)
    rank = ctx.get_rank()
    work = torch.zeros(1024, device=ctx.get_device())  # on GPUs a kernel, so graph capture has work to record

    def make(provider, op, bytes):
        if op == "skipped":
            return None
        active = provider == "every_rank" or rank == 0
        return harness.Point([lambda: work.add_(1.0)] * 2 if active else None, bytes=bytes, dtype="float32",
                             shape=(bytes // 4,), variant="unit", flops=bytes / 2 if op == "axpy" else 0.0)

    timing = harness.Timing(warmup=1, repeat=3, min_repeat=2, budget_ms=1.0)
    batched = harness.Timing(warmup=1, repeat=2, min_repeat=2, graph_below_ms=1e9, batch_ms=1e9, max_batch=3)
    rows = harness.run_sweep(ctx, harness.Sweep("unit", {"op": ("copy", "axpy", "skipped"), "bytes": (4096, 8192)},
                                                ("every_rank", "rank0_only"), make, timing), progress=rank == 0)
    rows += harness.run_sweep(ctx, harness.Sweep("batched", {"bytes": (4096,)}, ("every_rank",),
                                                 lambda provider, bytes: make(provider, "copy", bytes), batched))
    try:
        harness.measure(ctx, harness.Point(None, bytes=4), timing)
        idle_error = None
    except ValueError as e:
        idle_error = str(e)

    def wrong():
        raise AssertionError("checked before timing")

    try:
        harness.measure(ctx, harness.Point([_nothing], bytes=4, check=wrong), timing)
        check_error = None
    except AssertionError as e:
        check_error = str(e)
    ctx.close()
    return rows, idle_error, check_error


def _nothing():
    pass


def _rounds_log():
    """Which provider each call of a 3-round sweep came from, in order, the rows, and the device type."""
    ctx = iris.iris(1 << 20)
    log = []

    def make(provider, bytes):  # the 0-byte point: every provider skips it
        return harness.Point([lambda: log.append(provider)], bytes=bytes) if bytes else None

    timing = harness.Timing(warmup=1, repeat=2, min_repeat=2, graph_below_ms=0.0, rounds=3)
    rows = harness.run_sweep(ctx, harness.Sweep("turns", {"bytes": (64, 0)}, ("a", "b"), make, timing),
                             progress=False)
    device = ctx.get_device().type
    ctx.close()
    return log, [row["provider"] for row in rows], device


def _buffers_error():
    """What the microbenchmarks' buffers say on a world of one rank (None if they accept it)."""
    ctx = iris.iris(1 << 20)
    try:
        micro.Buffers(ctx, micro.QUICK)
    except ValueError as e:
        return str(e)
    finally:
        ctx.close()
    return None


# ---------------------------------------------------------------------------------------------- checks
def check_rows(rows):
    """Every row has the schema's columns, and every measured value is a positive finite number."""
    assert rows
    for row in rows:
        assert tuple(row) == report.SCHEMA, f"columns {tuple(row)}"
        for column in report.MEASURED:
            value = float(row[column])
            assert math.isfinite(value) and value > 0, f"{column}={row[column]!r} in {row}"
        assert float(row["ms_p20"]) <= float(row["ms_p50"]) <= float(row["ms_p80"]), row
        assert row["tflops"] in (None, "") or float(row["tflops"]) > 0, row
        assert int(row["bytes"]) > 0 and int(row["world_size"]) >= 2 and row["gpu"] and row["commit"] and row["date"]


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == report.SCHEMA
        return list(reader)


def _matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _run(args, timeout=300):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the launcher sets it for the rank processes on the cpu backend
    out = subprocess.run([sys.executable] + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                         check=False)
    assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("world_size", world_sizes())
@pytest.mark.parametrize("config", [(256, 4, 1), (8192, 16, 2)], ids=["grid-stride", "default"])
def test_kernels_move_the_right_data(pools, world_size, config):
    bad = pools(world_size).run(_moves_right_data, *config)
    assert bad == [[]] * world_size, "\n".join(m for rank in bad for m in rank)


def test_harness_rows_follow_the_schema(pools):
    results = pools(2).run(_harness_rows)
    (rows, idle_error, check_error), (rows_1, _, _) = results
    assert rows == rows_1, "ranks disagree on the results"
    check_rows(rows)
    assert len(rows) == 2 * 2 * 2 + 1  # ops without "skipped" x sizes x providers, plus the batched point
    assert {r["op"] for r in rows} == {"copy", "axpy", "batched"}
    assert all((r["tflops"] is None) == (r["op"] != "axpy") for r in rows)
    assert rows[-1]["timing"] in ("loop x3", "graph x3"), rows[-1]["timing"]
    assert idle_error and "no rank took part" in idle_error
    assert check_error == "checked before timing"


def test_providers_take_turns_over_rounds(pools):
    (log, providers, device), _ = pools(2).run(_rounds_log)
    assert providers == ["a", "b"]  # one row each, pooling three rounds of samples; none for the skipped point
    # each provider once: a warm-up call and the estimate, and on GPUs the call that sizes the idle sleep
    calls = 3 if device == "cuda" else 2
    prepare = ["a"] * calls + ["b"] * calls
    turn = {p: [p] * 3 for p in "ab"}  # a round: do_bench's warm-up call, then 2 samples
    assert log == prepare + turn["a"] + turn["b"] + turn["b"] + turn["a"] + turn["a"] + turn["b"], log


def test_run_all_quick_writes_results(tmp_path):
    out = tmp_path / "mb"
    proc = _run(["benchmarks/run_all.py", "--out", str(out), "--quick", "--world-size", "2"])  # one GPU too
    assert "load" in proc.stdout and "atomic_xchg" in proc.stdout and "one-way" in proc.stdout
    rows = read_csv(out / "microbench.csv")
    check_rows(rows)
    with open(out / "microbench.json") as f:
        records = json.load(f)
    check_rows(records)
    assert len(records) == len(rows)
    ops = {r["op"] for r in rows}
    assert set(kernels.P2P_OPS) | {"all_load", "all_store", "atomic_add", "atomic_cas", "atomic_xchg",
                                   "flag_pingpong"} <= ops
    providers = {r["provider"] for r in rows}  # torch_dist sits out where ranks share a GPU (gloo)
    assert {"iris", "triton_raw", "copy_engine"} <= providers <= {"iris", "triton_raw", "copy_engine", "torch_dist"}
    assert {r["variant"] for r in rows if r["op"] == "load"} == {"0->1", "1->0"}  # curve and matrix
    summary = (out / "microbench.md").read_text()
    for section in ("## Bandwidth", "## Atomics", "## Flag latency", "## load matrix", "## Copy-kernel shapes",
                    "command: `", "torch "):
        assert section in summary
    figures = {"p2p_curves.png", "all_curves.png", "atomics_curves.png", "heatmap.png"}
    if _matplotlib():
        assert figures <= set(os.listdir(out))
    else:
        assert "matplotlib is not installed" in proc.stderr


def test_microbenchmarks_refuse_a_single_rank(pools):
    # a lone rank's "peer" would be read off the end of the heap table (an illegal address on a GPU)
    [error] = pools(1).run(_buffers_error)
    assert error is not None and "micro.Buffers" in error and "this run has 1" in error and "--world-size 2" in error


def test_example_bandwidth_table():
    proc = _run(["examples/10_bandwidth_table.py", "--bytes", "4096", "--world-size", "2"])
    lines = proc.stdout.splitlines()
    # A fixed-width table whose variant column may be blank: read busbw by its column's place in the header.
    header = next(line for line in lines if "busbw_GBps" in line)
    start = header.index("busbw_GBps")
    for op in ("load", "store", "all_load", "all_store", "atomic_add", "atomic_xchg"):
        row = [line for line in lines if line.split()[:1] == [op]]
        assert row, f"no {op} row in\n{proc.stdout}"
        busbw = float(row[0][start:].split()[0])
        assert math.isfinite(busbw) and busbw > 0


_COMPILE_FOR_SM90 = r"""
import os, re
os.environ["IRIS_BACKEND"] = "cuda"
import iris, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from iris.bench import kernels as K

def ptx(fn, types, constexprs, num_warps):
    sig = {name: "constexpr" if name in constexprs else types.get(name, "i32") for name in fn.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
               if sig[name] != "constexpr" and (sig[name].startswith("*") or name in ("n", "src", "dst", "peer_addr"))}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]

def report(name, text):
    ops = sorted(set(re.findall(r"\b((?:ld|st|atom|red)(?:\.volatile)?\.global[\w.]*)", text)))
    print(name, " ".join(ops))

f32 = {"local": "*fp32", "remote": "*fp32", "remote_slot": "*fp32", "heap_bases": "*i64"}
for op in K.P2P_OPS:
    report(op, ptx(K._p2p_kernel, f32, {"OP": op, "BLOCK": 8192, "HINT": K.HINT}, 16))
for fn, name in ((K._all_load_kernel, "all_load"), (K._all_store_kernel, "all_store")):
    report(name, ptx(fn, f32, {"WORLD_SIZE": 4, "BLOCK": 8192, "HINT": K.HINT}, 16))
for peer_is_src, name in ((True, "raw_pull"), (False, "raw_push")):
    types = {"src": "i64" if peer_is_src else "*fp32", "dst": "*fp32" if peer_is_src else "i64"}
    report(name, ptx(K._raw_copy_kernel, types, {"PEER_IS_SRC": peer_is_src, "DTYPE": tl.float32, "BLOCK": 8192}, 16))
for op, ty in (("add", "*fp32"), ("xchg", "*i32"), ("cas", "*i32")):
    report("atomic_" + op, ptx(K._atomic_kernel, {"remote": ty, "heap_bases": "*i64"},
                               {"OP": op, "SEM": "relaxed", "SCOPE": "sys", "BLOCK": 1024, "HINT": K.HINT}, 4))
for raw in (False, True):
    for relaxed in (False, True):
        text = ptx(K._ping_pong_kernel, {"flag": "*i32", "epoch": "*i32", "status": "*i32", "heap_bases": "*i64",
                                         "peer_flag": "i64"}, {"RAW": raw, "RELAXED": relaxed}, 1)
        report(f"pingpong_{'raw' if raw else 'iris'}_{'relaxed' if relaxed else 'acq_rel'}", text)
"""


def test_kernels_compile_for_sm90_vectorised_and_ordered():
    """Without a GPU: compile for sm_90 in a process without the interpreter and read the PTX. Every data
    load/store must be a 16-byte vector (the 64-bit scalar loads are the heap-base lookups)."""
    env = dict(os.environ, IRIS_BACKEND="cuda")
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    found = {name: ops.split() for name, ops in (line.split(" ", 1) for line in out.stdout.strip().splitlines())}
    copies = set(kernels.P2P_OPS) | {"all_load", "all_store", "raw_pull", "raw_push"}
    for name in copies:
        data = [op for op in found.pop(name) if op != "ld.global.b64"]
        assert sorted(data) == ["ld.global.v4.b32", "st.global.v4.b32"], (name, data)
    # PTX has vector atomics for floating-point add only: exch and cas stay 32-bit.
    for name, atom in (("atomic_add", "atom.global.sys.relaxed.add.v4.f32"),
                       ("atomic_xchg", "atom.global.sys.relaxed.exch.b32"),
                       ("atomic_cas", "atom.global.relaxed.sys.cas.b32")):
        assert [op for op in found.pop(name) if op != "ld.global.b64"] == [atom], name
    # The flag protocol keeps its memory order: release xchg + acquire poll, or relaxed xchg + volatile poll.
    for name, ops in found.items():
        if name.endswith("acq_rel"):
            assert "atom.global.sys.release.exch.b32" in ops and "ld.global.sys.acquire.b32" in ops, (name, ops)
        else:
            assert "atom.global.sys.relaxed.exch.b32" in ops and "ld.volatile.global.b32" in ops, (name, ops)
    assert len(found) == 4, found


# ---------------------------------------------------------------------------------------------- host-only
def test_sleep_covers_the_hosts_enqueue(monkeypatch):
    """The sleep before each GPU sample lasts three times the host's time to enqueue the call, within bounds
    (the cuda calls around the measurement are stubbed: this machine may have no GPU)."""
    import time

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    assert harness._idle_cycles(True, lambda: None) == harness.IDLE_CYCLES
    assert harness._idle_cycles(False, lambda: time.sleep(0.02)) == harness.IDLE_CYCLES  # sits the point out
    cycles = harness._idle_cycles(True, lambda: time.sleep(0.01))  # 10 ms on the host: ~30 ms of sleep
    assert 3 * 0.01 * harness.SM_CLOCK_HZ <= cycles < 3 * 0.02 * harness.SM_CLOCK_HZ, cycles
    assert harness._idle_cycles(True, lambda: time.sleep(0.06)) == harness.MAX_IDLE_CYCLES


def test_configs_reject_bad_values():
    with pytest.raises(ValueError, match="block=1000"):
        kernels.CopyConfig(block=1000)
    with pytest.raises(ValueError, match="num_warps=3"):
        kernels.CopyConfig(num_warps=3)
    with pytest.raises(ValueError, match="min_repeat"):
        harness.Timing(repeat=2, min_repeat=3)
    with pytest.raises(ValueError, match="rounds=0"):
        harness.Timing(rounds=0)
    with pytest.raises(ValueError, match="power of two"):
        micro.Profile(sizes=(3000,), matrix_bytes=4096, atomic_sizes=(4096,), pingpong_rounds=1)
    with pytest.raises(ValueError, match="must not exceed"):
        micro.Profile(sizes=(4096,), matrix_bytes=8192, atomic_sizes=(4096,), pingpong_rounds=1)
    with pytest.raises(ValueError, match="n=3000 elements"):
        kernels._atomic_shape("add", 3000, kernels.CopyConfig(), 2)
    # the large block only once every SM gets a tile of it; the grid never exceeds programs_per_sm per SM
    assert kernels.CopyConfig().launch_shape(1 << 17, 132) == (128, kernels.SMALL_BLOCK, kernels.SMALL_WARPS)
    assert kernels.CopyConfig().launch_shape(1 << 28, 132) == (264, 8192, 16)


def test_format_and_files(tmp_path):
    assert [report.format_bytes(b) for b in (100, 4096, 1536, 1 << 30, 2 << 30)] == \
        ["100 B", "4 KiB", "1.5 KiB", "1 GiB", "2 GiB"]
    row = dict.fromkeys(report.SCHEMA, "x")
    row.update(bytes=4096, ms_p20=1.0, ms_p50=2.0, ms_p80=3.0, algbw_GBps=4.0, busbw_GBps=4.0, tflops=None,
               world_size=2)
    text = report.format_table([row])
    assert "4 KiB" in text and "2.0000" in text
    csv_path, json_path = report.write_results([row], tmp_path, "r")
    assert read_csv(csv_path)[0]["tflops"] == ""
    with open(json_path) as f:
        assert json.load(f)[0]["tflops"] is None


def test_plots_are_skipped_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    row = dict.fromkeys(report.SCHEMA, "")
    row.update(op="load", provider="iris", bytes=4096, busbw_GBps=1.0)
    assert report.plot_curves([row], str(tmp_path / "c.png"), ("load",)) is None
    assert report.plot_heatmap([row], str(tmp_path / "h.png"), ("load",), "iris", 2.0) is None
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def _timeline_module():
    import importlib

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        return importlib.import_module("timeline")
    finally:
        sys.path.pop(0)


def test_timeline_splits_calls_and_measures_the_tail():
    timeline = _timeline_module()

    def event(name, cat, ts, dur, stream=7):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}

    events = [  # two calls, 5 ms apart; each starts with the harness's sleep (as the CUDA trace names torch's
        # sleep kernel; it runs longer than the op) and device barrier
        event("at::cuda::(anonymous namespace)::spin_kernel(long)", "kernel", -990, 1000),
        event("_device_barrier_kernel", "kernel", 10, 2),
        event("Memset (Device)", "gpu_memset", 13, 1), event("_matmul_kernel", "kernel", 15, 100),
        event("Memcpy PtoP", "gpu_memcpy", 50, 20, 20), event("Memcpy PtoP", "gpu_memcpy", 60, 20, 21),
        event("Memcpy PtoP", "gpu_memcpy", 110, 20, 20), event("fill", "kernel", 131, 1),
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 3000, "dur": 900},  # host: not a device event
        event("spin_kernel", "kernel", 5000, 10), event("_matmul_kernel", "kernel", 5012, 100),
        event("Memcpy PtoP", "gpu_memcpy", 5112, 10),
    ]
    first, second = timeline.summarize(events)
    assert first["kernel"] == "_matmul_kernel" and first["kernel_us"] == 100
    assert first["span_us"] == 132 - 13 and first["tail_us"] == 132 - 115
    assert first["copy_us"] == 30 + 20  # 50-80 (two overlapping copies) and 110-130
    assert first["tail_copy_us"] == 130 - 115
    assert [e["name"] for e in first["events"]][0] == "Memset (Device)" and first["events"][0]["start_us"] == 0
    assert (second["span_us"], second["tail_us"], second["copy_us"]) == (110, 10, 10)
    assert timeline.table("op", (1, 2, 3), "iris", [[first, second]]).splitlines()[-1].startswith("0 | 2 | ")
    with pytest.raises(SystemExit, match="does not apply to matmul_all_gather"):
        timeline.provider_config("iris_fused_unknown", "matmul_all_gather")


def test_timeline_end_to_end(tmp_path):
    proc = _run(["benchmarks/timeline.py", "--out", str(tmp_path), "--op", "matmul_reduce_scatter", "--shape",
                 "64x64x64", "--calls", "2", "--warmup", "1", "--world-size", "2"])
    assert {"timeline.json", "timeline_rank0.json", "timeline_rank1.json"} <= set(os.listdir(tmp_path))
    with open(tmp_path / "timeline.json") as f:
        record = json.load(f)
    assert record["op"] == "matmul_reduce_scatter" and record["world_size"] == 2
    if not on_gpu():
        assert "no device events (cpu backend)" in proc.stdout and record["ranks"] == [[], []]
        return
    # on GPUs: each rank's two calls, each spanning at least its longest kernel; where the ranks share a GPU its
    # time slices leave the device idle for one rank while the other runs, which can split a call in the trace
    counts = [len(calls) for calls in record["ranks"]]
    assert counts == [2, 2] if torch.cuda.device_count() >= 2 else min(counts) >= 1, record["ranks"]
    for call in (call for calls in record["ranks"] for call in calls):
        assert not any(k in call["kernel"] for k in ("spin_kernel", "_device_barrier")), call  # the op's, not setup
        assert 0 < call["kernel_us"] <= call["span_us"] + 1e-3, call  # durations are rounded to the nanosecond
