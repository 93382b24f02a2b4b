"""Gluon: ``IrisDeviceCtx`` in ``@gluon.jit`` kernels does what the Triton API does, the interpreter checks layouts as
the NVIDIA compiler does, and ``ccl.Config(use_gluon=True)`` runs the Gluon all_gather and all_to_all."""

import pytest
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
import iris.ccl
from conftest import on_gpu
from iris.device.trace_events import TraceEvent
from iris.gluon import IrisDeviceCtx
from rank_utils import error_message, new_context, poison_value, rank_data

BLOCK = 128  # four warps of 32 lanes, one element each
N = 100  # not a multiple of BLOCK: the mask matters


@gluon.jit
def _methods_kernel(IrisDeviceCtx: gl.constexpr, context_tensor, src, loaded, stored, got, put_dst, copied, counters,
                    olds, n, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    me = ctx.cur_rank
    right = (me + 1) % ctx.num_ranks
    offs = gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    gl.store(loaded + offs, ctx.load(src + offs, right, mask=mask, volatile=True), mask=mask)  # loaded <- src(right)
    ctx.store(stored + offs, gl.load(src + offs, mask=mask), right, mask=mask, cache_modifier=".wt")  # stored(right)
    ctx.get(src + offs, got + offs, right, mask=mask, hint=16)                                      # got <- src(right)
    ctx.put(src + offs, put_dst + offs, right, mask=mask)                                 # put_dst(right) <- src
    ctx.copy(src + offs, copied + offs, right, me, mask=mask)                             # copied <- src(right)
    # one lane per counter, every counter on rank 0; each rank's operand is its rank + 1
    lane = offs < 1
    v = gl.full([BLOCK], 1, gl.int32, layout) + me
    gl.store(olds + 0 * BLOCK + offs, ctx.atomic_add(counters + 0 + 0 * offs, v, 0, mask=lane, sem="acq_rel",
                                                     scope="sys"), mask=lane)
    ctx.atomic_sub(counters + 1 + 0 * offs, v, 0, mask=lane, sem="release", scope="gpu")
    ctx.atomic_xchg(counters + 2 + 0 * offs, v, right, mask=lane, scope="sys")  # on the right neighbour
    ctx.atomic_xor(counters + 3 + 0 * offs, v, 0, mask=lane)
    ctx.atomic_and(counters + 4 + 0 * offs, v, 0, mask=lane, sem="relaxed")
    ctx.atomic_or(counters + 5 + 0 * offs, v, 0, mask=lane, sem="acquire", scope="cta")
    ctx.atomic_min(counters + 6 + 0 * offs, v, 0, mask=lane)
    ctx.atomic_max(counters + 7 + 0 * offs, v, 0, mask=lane)
    # a scalar operand beside a block pointer: broadcast to the block's layout
    ctx.atomic_add(counters + 8 + 0 * offs, 1, 0, mask=lane)
    # CAS election on rank 0: exactly one rank finds 0. Every lane executes the CAS (it takes no mask), in an order
    # the GPU does not fix, so only lane 0 may succeed: the others compare with a value the counter never holds.
    cmp = gl.where(lane, 0, -12345)
    gl.store(olds + BLOCK + offs, ctx.atomic_cas(counters + 9 + 0 * offs, cmp, me + 1, 0, sem="acq_rel", scope="sys"),
             mask=lane)


def _methods_body():
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    src = ctx.empty(BLOCK, dtype=torch.float32)
    src[:N] = rank_data(rank, N, torch.float32, dev)
    bufs = [ctx.full((BLOCK,), float(poison_value(torch.float32))) for _ in range(5)]
    counters = ctx.zeros(16, dtype=torch.int32)
    counters[4] = -1  # the and's identity
    counters[6] = 1 << 30  # the min's
    olds = ctx.full((2 * BLOCK,), -7, dtype=torch.int32)
    ctx.barrier()
    _methods_kernel[(1,)](IrisDeviceCtx, ctx.get_device_context(), src, *bufs, counters, olds, N, BLOCK=BLOCK,
                          num_warps=4)
    ctx.barrier()
    right = rank_data((rank + 1) % world, N, torch.float32, dev)
    left = rank_data((rank - 1) % world, N, torch.float32, dev)
    loaded, stored, got, put_dst, copied = bufs
    ok = {"load": torch.equal(loaded[:N], right), "store": torch.equal(stored[:N], left),
          "get": torch.equal(got[:N], right), "put": torch.equal(put_dst[:N], left),
          "copy": torch.equal(copied[:N], right),
          "mask": all(bool((b[N:] == poison_value(torch.float32)).all()) for b in bufs)}
    return ok, counters.cpu().tolist(), olds.cpu().tolist()


@pytest.mark.parametrize("world_size", [3])  # left and right neighbours differ; one pool serves the file
def test_gluon_context_methods(pools, world_size):
    results = pools(world_size).run(_methods_body)
    for rank, (ok, _, _) in enumerate(results):
        assert all(ok.values()), f"rank {rank}: {ok}"
    counters = results[0][1]
    values = list(range(1, world_size + 1))  # rank r contributes r + 1
    xor = 0
    for v in values:
        xor ^= v
    expected_or, expected_and = 0, -1
    for v in values:
        expected_or, expected_and = expected_or | v, expected_and & v
    assert counters[0] == sum(values) and counters[1] == -sum(values)
    assert counters[3] == xor and counters[4] == expected_and and counters[5] == expected_or
    assert counters[6] == 1 and counters[7] == world_size and counters[8] == world_size
    for rank, (_, mine, _) in enumerate(results):
        assert mine[2] == (rank - 1) % world_size + 1  # xchg from the left neighbour
    olds = [olds for _, _, olds in results]
    assert len({o[0] for o in olds}) == world_size and all(0 <= o[0] < sum(values) for o in olds)  # running sums
    winners = [r for r, o in enumerate(olds) if o[BLOCK] == 0]
    assert len(winners) == 1 and counters[9] == winners[0] + 1
    assert all(o[1:BLOCK].count(-7) == BLOCK - 1 for o in olds)  # masked lanes left untouched


@gluon.jit
def _layout_kernel(out, BLOCK: gl.constexpr, LANES: gl.constexpr, WARPS: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([BLOCK // (LANES * WARPS)], [LANES], [WARPS], [0]))
    gl.store(out + offs, offs)


@pytest.mark.parametrize("lanes,warps,message", [
    (64, 1, "Layout has 64 threads per warp, but the module specifies 32 threads per warp"),
    (32, 2, "Layout has 2 warps per CTA, but the context requires 4 warps per CTA"),
])
def test_interpreter_checks_layouts_as_the_compiler(lanes, warps, message, capfd):
    # the same words as the compiler's on an H200: the one test body serves both tiers
    out = torch.zeros(128, dtype=torch.int32, device="cuda" if on_gpu() else "cpu")
    # the interpreter raises them; the compiler prints them as its diagnostic and raises a parse error
    raised = error_message(_layout_kernel[(1,)], out, BLOCK=128, LANES=lanes, WARPS=warps, num_warps=4)
    assert raised != "no error" and message in raised + capfd.readouterr().err
    _layout_kernel[(1,)](out, BLOCK=128, LANES=32, WARPS=4, num_warps=4)  # the layout an H200 takes
    assert torch.equal(out.cpu(), torch.arange(128, dtype=torch.int32))


@gluon.jit
def _standard_library_kernel(x_ptr, out, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    x = gl.load(x_ptr + offs)
    acc = gl.zeros([BLOCK], gl.float32, layout) + x  # gl.zeros reaches _core.full, not gl.full
    gl.store(out + offs, acc + gl.full_like(x, 1.0) + gl.zeros_like(x))
    gl.store(out + BLOCK + gl.arange(0, 1, layout=layout), gl.sum(x, axis=0) + gl.zeros([1], gl.float32, layout))


def test_gluon_standard_library(capfd):
    """Gluon's standard library (gl.zeros, zeros_like, full_like, sum) as upstream's kernels use it."""
    dev = "cuda" if on_gpu() else "cpu"
    x = torch.arange(128, dtype=torch.float32, device=dev) / 7
    out = torch.full((129,), float("nan"), device=dev)
    _standard_library_kernel[(1,)](x, out, BLOCK=128, num_warps=4)
    torch.testing.assert_close(out[:128].cpu(), x.cpu() + 1)
    torch.testing.assert_close(out[128].cpu(), x.sum().cpu(), rtol=1e-5, atol=1e-4)


def _collectives_body(numel, rows):
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    poison = float(poison_value(torch.float32))
    config = iris.ccl.CollectiveConfig(use_gluon=True, num_warps=4, block_size=128)
    upstream = iris.ccl.Config(use_gluon=True, num_warps=1, threads_per_warp=32)  # upstream's spelling
    inp = rank_data(rank, numel, torch.float32, dev)
    gathered = ctx.full((world * numel,), poison)
    ctx.ccl.all_gather(gathered, inp, config=config)
    gathered_upstream = ctx.full((world * numel,), poison)
    ctx.ccl.all_gather(gathered_upstream, inp, config=upstream)
    # upstream's all_to_all layout: (rows, numel * world), column block q to rank q
    a2a_inp = rank_data(rank, rows * world * numel, torch.float32, dev, salt=1).reshape(rows, world * numel)
    exchanged = ctx.full((rows, world * numel), poison)
    ctx.ccl.all_to_all(exchanged, a2a_inp, config=config)
    ctx.barrier()
    ref_gather = torch.cat([rank_data(r, numel, torch.float32, dev) for r in range(world)])
    ref_a2a = torch.cat([rank_data(r, rows * world * numel, torch.float32, dev, salt=1).reshape(
        rows, world * numel).chunk(world, dim=1)[rank] for r in range(world)], dim=1)
    errors = {}
    for name, collective in (("all_reduce", lambda: ctx.ccl.all_reduce(gathered, gathered, config=config)),
                             ("wide block", lambda: ctx.ccl.all_gather(gathered, inp, config=iris.ccl.CollectiveConfig(
                                 use_gluon=True, num_warps=8, block_size=128)))):
        try:
            collective()
        except ValueError as e:
            errors[name] = str(e)
    ok = {"all_gather": torch.equal(gathered.cpu(), ref_gather.cpu()),
          "all_gather Config": torch.equal(gathered_upstream.cpu(), ref_gather.cpu()),
          "all_to_all": torch.equal(exchanged.cpu(), ref_a2a.cpu())}
    return ok, errors


@pytest.mark.parametrize("world_size", [3])
def test_gluon_collectives(pools, world_size):
    # 300 elements: three blocks of 128, the last partial; all_to_all over 2 rows of 3 column blocks of 100
    for rank, (ok, errors) in enumerate(pools(world_size).run(_collectives_body, 300, 2)):
        assert all(ok.values()), f"rank {rank}: {ok}"
        assert "only all_gather, all_to_all, all_to_all_single have a Gluon kernel" in errors["all_reduce"]
        assert "multiple of 32 * num_warps = 256" in errors["wide block"]


# (dtype, elements a rank, block_size, comm_sms): the tensor map's row width is the largest power of two dividing n
# (8, 64, 16 here) and rows past the last are clipped; one program over 4 tiles of 8 rows reuses a shared buffer
TMA_CASES = [(torch.bfloat16, 200, 16, 1), (torch.float32, 1088, 256, 4), (torch.int8, 48, 16, 2)]
GUARD = 64  # poisoned elements after out: a store the tensor map failed to clip lands there


def _tma_body(cases):
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    ok, errors = {}, {}
    for dtype, numel, block, programs in cases:
        poison = poison_value(dtype)
        config = iris.ccl.CollectiveConfig(use_gluon=True, gluon_path="tma", block_size=block, comm_sms=programs,
                                           num_warps=4)
        inp = rank_data(rank, numel, dtype, dev)
        guarded = ctx.full((world * numel + GUARD,), poison, dtype=dtype)
        tri = guarded[:world * numel]
        ctx.ccl.all_gather(tri, inp, config=config)
        ctx.barrier()
        ref = torch.cat([rank_data(r, numel, dtype, dev) for r in range(world)])
        ok[str(dtype), numel] = torch.equal(tri.cpu(), ref.cpu()) and bool((guarded[world * numel:] == poison).all())
    upstream = iris.ccl.Config(use_gluon=True, all_gather_variant="tma", num_warps=4)  # upstream's spelling
    inp = rank_data(rank, 256, torch.bfloat16, dev)
    tri = ctx.full((world * 256,), poison_value(torch.bfloat16), dtype=torch.bfloat16)
    ctx.ccl.all_gather(tri, inp, config=upstream)
    ctx.barrier()
    ok["Config"] = torch.equal(tri.cpu(), torch.cat([rank_data(r, 256, torch.bfloat16, "cpu") for r in range(world)]))
    tma = iris.ccl.CollectiveConfig(use_gluon=True, gluon_path="tma", block_size=128, num_warps=4)
    odd = ctx.zeros(world * 100, dtype=torch.bfloat16)
    mine = ctx.zeros(100, dtype=torch.bfloat16)  # apart from odd: its slots, 200 bytes each, are what is unaligned
    for name, call in (("unaligned", lambda: ctx.ccl.all_gather(odd, mine, config=tma)),
                       ("all_to_all", lambda: ctx.ccl.all_to_all(odd.view(1, -1), odd.view(1, -1), config=tma))):
        try:
            call()
        except ValueError as e:
            errors[name] = str(e)
    return ok, errors


@pytest.mark.parametrize("world_size", [3])
def test_gluon_tma_all_gather(pools, world_size):
    # the interpreter writes each tile through the host-built tensor map of every member, as the copy engine does
    for rank, (ok, errors) in enumerate(pools(world_size).run(_tma_body, TMA_CASES)):
        assert all(ok.values()), f"rank {rank}: {ok}"
        assert "needs every slot of out 16-byte aligned" in errors["unaligned"] and "200 bytes" in errors["unaligned"]
        assert "only all_gather has a TMA path" in errors["all_to_all"]


@pytest.mark.parametrize("make,message", [
    (lambda: iris.ccl.CollectiveConfig(use_gluon=True, threads_per_warp=64), "NVIDIA warps have 32 threads"),
    (lambda: iris.ccl.Config(use_gluon=True, threads_per_warp=64), "NVIDIA warps have 32 threads"),
    (lambda: iris.ccl.Config(use_gluon=True, all_gather_variant="tdm"), "use all_gather_variant='persistent'"),
    (lambda: iris.ccl.CollectiveConfig(gluon_path="tma"), "set use_gluon=True with it"),
    (lambda: iris.ccl.CollectiveConfig(use_gluon=True, gluon_path="bulk"), "use one of"),
])
def test_gluon_config_refuses_amd_settings(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.fixture(scope="module")
def gluon_ptx():
    import json
    import os
    import subprocess
    import sys
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEBUG", "IRIS_DEBUG")}
    env["IRIS_BACKEND"] = "cuda"  # compile only: no GPU is needed
    # A fresh compile cache: Triton keys a Gluon kernel's cache entry without the device code it reaches through
    # the IrisDeviceCtx class it takes as a constexpr, so an entry compiled from older iris sources would be reused
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="iris-gluon-probe-")
    proc = subprocess.run([sys.executable, os.path.join(here, "gluon_probe.py")], env=env, capture_output=True,
                          text=True, timeout=900, cwd=here)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.mark.skipif(on_gpu(), reason="compiles without a GPU in a subprocess; the GPU tier runs the kernels")
def test_gluon_paths_compile_for_sm90_as_the_triton_paths(gluon_ptx):
    # The same remote store from Gluon and from Triton, and the same release (bar.sync, then atom.sys.release):
    # 16 fp32 a thread as four 16-byte vectors, with hint=16 or without (translate keeps the pointer's alignment and
    # contiguity, and Gluon's explicit layout gives the same vectors), instruction for instruction the same.
    for hint in ("None", "16"):
        gluon, triton_ = gluon_ptx[f"gluon_store/{hint}"], gluon_ptx[f"triton_store/{hint}"]
        assert triton_["st.global"] == 4 and gluon["st.global"] == 4, (gluon, triton_)
        assert {o for o in gluon["ops"] if o.startswith(("st.global", "atom"))} == \
            {o for o in triton_["ops"] if o.startswith(("st.global", "atom"))}
        assert "atom.global.sys.release.exch.b32" in gluon["ops"] and "bar.sync" in gluon["fences"]
    assert "st.global.v4.b32" in gluon_ptx["gluon_store/16"]["ops"]
    # the register layout: a thread's two 16-byte vectors a warp's 512 bytes apart (each warp instruction covers
    # contiguous bytes), as in Triton's all_gather, and as many instructions a copy step; upstream's layout puts them
    # side by side (16 bytes apart), so each warp store spreads over twice the 32-byte sectors
    ours, theirs, wide = (gluon_ptx[k] for k in ("gluon_all_gather", "triton_all_gather", "gluon_all_gather_wide"))
    assert ours["vector_step_bytes"] == theirs["vector_step_bytes"] == 4096 and wide["vector_step_bytes"] == 16
    assert abs(ours["loop_instructions"] - theirs["loop_instructions"]) <= 4, (ours, theirs)
    for name in ("gluon_all_gather", "gluon_all_to_all"):
        ops = gluon_ptx[name]["ops"]
        assert "st.global.v4.b32" in ops and "st.global.b32" not in ops, ops
        assert "fence.acq_rel.sys" in ops and "ld.global.sys.acquire.b64" in ops, ops  # the barriers (64-bit words)
    assert gluon_ptx["context_key_in_kernel_hash"]  # no binary compiled from older iris.device sources is reused
    # ctx.tracing compiles away without TRACING: none of its reductions or atomics is built (were they, an AMD layout
    # would reach the GPU compiler's reduction verifier even untraced: upstream's example 24 on NVIDIA)
    traced = gluon_ptx["traced_put"]
    assert traced["False"] == {"reduce": 0, "atomic": 0} and traced["True"]["reduce"] >= 1, traced
    # the TMA all_gather: one bulk tensor store from shared memory per member a tile, no register stores to global
    # memory, the shared source fenced for the async proxy, and the full wait (not only the .read one that frees
    # a stage) before the closing barrier's release
    tma_ptx = gluon_ptx["tma_all_gather"]
    assert tma_ptx["bulk_stores"] == 4 and tma_ptx["st.global"] == 0, tma_ptx
    assert {"cp.async.bulk.wait_group", "cp.async.bulk.wait_group.read", "fence.proxy.async.shared::cta",
            "fence.acq_rel.sys"} <= set(tma_ptx["ops"]), tma_ptx
    assert tma_ptx["proxy_fence_before_first_store"] and "fence.proxy.async.global" in tma_ptx["ops"], tma_ptx
    assert tma_ptx["full_wait_before_release"] and tma_ptx["shared_bytes"] >= 3 * 64 * 256 * 2, tma_ptx


def _docs_body(path):
    import runpy

    runpy.run_path(path, run_name="docs_gluon")  # the block asserts its own result
    return True


def test_docs_gluon_kernel_runs(pools, tmp_path):
    """The first Python block of the site's Gluon page (docs/api/gluon.md), as a reader would save and run it."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "api" / "gluon.md").read_text()
    block = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    assert "@gluon.jit" in block and "IrisDeviceCtx" in block
    path = tmp_path / "docs_gluon.py"
    path.write_text(block)
    assert pools(3).run(_docs_body, str(path)) == [True] * 3


def test_upstream_module_paths_are_one_class():
    from iris.device.gluon import IrisDeviceCtx as room
    from iris.experimental.iris_gluon import IrisDeviceCtx as oldest
    from iris.mem.gluon import Context
    from iris.mem.gluon.context import Context as newest

    assert room is oldest is Context is newest is IrisDeviceCtx


# Compiled for sm_90 after the CPU tier (test_compile.py's last test), with TRACING on and off: the interpreter runs
# ctx.tracing's reductions over a Gluon layout block that only the GPU compiler verifies.
@gluon.jit
def _traced_gluon_kernel(IrisDeviceCtx: gl.constexpr, context_tensor, buf, n, BLOCK: gl.constexpr,
                         TRACING: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor, tracing=TRACING)
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    peer = (ctx.cur_rank + 1) % ctx.num_ranks
    mask = offs < n
    handle = ctx.tracing.record_event_start(event_id=TraceEvent().put, target_rank=peer, address=buf + offs,
                                            pid_m=gl.program_id(0), pid_n=7, mask=mask)
    ctx.store(buf + offs, offs, peer, mask=mask)
    ctx.tracing.record_event_end(handle)


@triton.jit
def _traced_triton_kernel(context, buf, n, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr,
                          TRACING: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE, tracing=TRACING)
    offs = tl.arange(0, BLOCK)
    peer = (RANK + 1) % WORLD_SIZE
    mask = offs < n
    handle = ctx.tracing.record_event_start(event_id=TraceEvent().put, target_rank=peer, address=buf + offs,
                                            pid_m=tl.program_id(0), pid_n=7, mask=mask)
    ctx.store(buf + offs, offs, peer, mask=mask)
    ctx.tracing.record_event_end(handle)


def _tracing_body():
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    buf = ctx.zeros(BLOCK, dtype=torch.int32)
    ctx.tracing.enable(max_events=8)
    ctx.barrier()
    context = ctx.get_device_context()
    enabled_word = int(context[2 + world].item())
    for tracing in (False, True):  # compiled without tracing, the calls record nothing on a context that traces
        _traced_gluon_kernel[(1,)](IrisDeviceCtx, context, buf, N, BLOCK=BLOCK, TRACING=tracing, num_warps=4)
        _traced_triton_kernel[(1,)](context, buf, N, RANK=rank, WORLD_SIZE=world, BLOCK=BLOCK, TRACING=tracing,
                                    num_warps=4)
    ctx.barrier()
    events, dropped = ctx.tracing.device_events()
    return enabled_word, events, dropped, buf.data_ptr(), bool(torch.equal(buf[:N].cpu(), torch.arange(N).int()))


def _tracing_off_body():
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    buf = ctx.zeros(BLOCK, dtype=torch.int32)
    ctx.barrier()
    context = ctx.get_device_context()  # tracing never enabled: its words are zero, no buffers behind them
    _traced_gluon_kernel[(1,)](IrisDeviceCtx, context, buf, N, BLOCK=BLOCK, TRACING=True, num_warps=4)
    _traced_triton_kernel[(1,)](context, buf, N, RANK=rank, WORLD_SIZE=world, BLOCK=BLOCK, TRACING=True, num_warps=4)
    ctx.barrier()
    words = context[2 + world:2 + world + 17].tolist()
    return words, bool(torch.equal(buf[:N].cpu(), torch.arange(N).int()))


def test_kernels_compiled_with_tracing_run_on_a_context_without_it(pools):
    # upstream's contract: the words are zero, so the kernel writes no event and touches no counter (null pointers)
    for words, stored in pools(2).run(_tracing_off_body):
        assert stored and words == [0] * 17, words


def test_tracing_from_gluon_and_triton_kernels_records_the_same_events(pools):
    for rank, (enabled_word, events, dropped, address, stored) in enumerate(pools(3).run(_tracing_body)):
        assert enabled_word == 1 and dropped == 0 and stored
        # one from the traced Gluon kernel, one from the traced Triton kernel, same fields; none from the untraced
        assert len(events) == 2, events
        for e in events:
            assert e["name"] == "put" and e["cur_rank"] == rank and e["target_rank"] == (rank + 1) % 3, e
            assert e["pid_n"] == 7 and e["address"] == address and e["payload_size"] == N * 4, e
            # a clock (%globaltimer, or the host's in the interpreter) that ended no earlier than it started: its
            # ticks are coarser than one store on a GPU (both reads can fall in one tick)
            assert 0 < e["timestamp"] <= e["duration_cycles"], e
        assert events[0]["duration_cycles"] <= events[1]["timestamp"]  # the Gluon kernel ran first
        # the operations in order, upstream's numbering (the untraced kernels, launched first, counted none)
        assert [e["op_index"] for e in events] == [0, 1], events
