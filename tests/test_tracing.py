"""Device tracing: instrumented kernels record per-tile events; export merges every rank into one Chrome /
Perfetto trace."""

import json

import torch

from iris.ops import OpsConfig
from rank_utils import GPU_SCALE, error_message, new_context

M, N_LOCAL, K = (1024, 512, 512) if GPU_SCALE else (64, 32, 40)


def _trace_body(path, max_events):
    ctx = new_context(1 << 26 if GPU_SCALE else 1 << 22)
    world = ctx.get_num_ranks()
    dev = ctx.get_device()
    a, b = torch.randn(M, K, device=dev), torch.randn(K, N_LOCAL, device=dev)
    out = ctx.empty(M, world * N_LOCAL)
    not_enabled = error_message(ctx.tracing.export, path)
    ctx.tracing.enable(max_events=max_events)
    fused = OpsConfig(variant="fused")  # the instrumented kernel ("auto" picks bulk for so few tiles on GPUs)
    ctx.ops.matmul_all_gather(out, a, b, config=fused)  # recorded
    ctx.tracing.reset()  # ... and forgotten
    ctx.ops.matmul_all_gather(out, a, b, config=fused)  # recorded
    ctx.tracing.disable()
    ctx.ops.matmul_all_gather(out, a, b, config=fused)  # not recorded; what was recorded stays readable
    user_kernels_off = int(ctx.get_device_context()[2 + world]) == 0  # the word DeviceContext.initialize reads
    reset_when_off = error_message(ctx.tracing.reset)  # its clock read would follow the cleared arguments
    written = ctx.tracing.export(path)
    return not_enabled, written, user_kernels_off, reset_when_off


def test_trace_export_covers_every_rank_and_tile(pools, tmp_path):
    path = str(tmp_path / "trace.json")
    results = pools(2).run(_trace_body, path, 1 << 12)
    assert "tracing.export: tracing is not enabled" in results[0][0]
    assert results[0][1] == path and results[1][1] is None  # rank 0 writes
    assert results[0][2] and results[1][2]
    assert all("tracing.reset: tracing is not enabled" in r[3] for r in results), results[0][3]
    events = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    tiles = -(-M // 32) * -(-N_LOCAL // 32) if not GPU_SCALE else -(-M // 128) * -(-N_LOCAL // 128)
    for rank in range(2):
        mine = [e for e in events if e["pid"] == rank]
        # one gemm and one scatter event per tile: the reset dropped the first call's events, the third call ran
        # with tracing disabled
        assert sum(e["name"] == "gemm tile" for e in mine) == tiles
        assert sum(e["name"] == "scatter tile" for e in mine) == tiles
        assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in mine)
        for e in mine:
            if e["name"] == "scatter tile":
                assert e["args"]["target"] == -1 and e["args"]["bytes"] > 0
        # within a program, each tile's scatter starts after its gemm ended
        by_program = {}
        for e in sorted(mine, key=lambda e: e["ts"]):
            by_program.setdefault(e["args"]["program"], []).append(e)
        for seq in by_program.values():
            names = [e["name"] for e in seq]
            assert names == ["gemm tile", "scatter tile"] * (len(seq) // 2)
            for gemm, scatter in zip(seq[::2], seq[1::2]):
                assert scatter["ts"] >= gemm["ts"] + gemm["dur"]


def test_trace_overflow_is_reported(pools, tmp_path):
    path = str(tmp_path / "small.json")
    pools(2).run(_trace_body, path, 1)
    markers = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "i"]
    assert markers and "events dropped (raise max_events)" in markers[0]["name"]
