"""ccl.all_reduce_rmsnorm against its float64 reference: odd hidden sizes, row counts that are not a multiple of
the grid, in-place residual, 2 and 4 ranks, a subgroup, CUDA-graph replay, and bad input."""

import pytest
import torch

from iris.ccl import CollectiveConfig
from iris.ccl import reference as ref_ops
from conftest import on_gpu, world_sizes
from rank_utils import GPU_SCALE, SEED, error_message, new_context

# Relative error against the float64 reference: fp32 rounds the sum in another order, bf16 rounds each output once.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 8e-3, torch.float16: 1e-3}
# (rows, hidden): rows past the grid (4 programs on the cpu backend, 64 on GPUs) and hidden sizes that are not
# powers of two nor multiples of 16
SHAPES = ([(1, 4096), (8, 8192), (64, 4096), (67, 4099), (5, 8191), (3, 40, 1000)] if GPU_SCALE
          else [(1, 16), (7, 33), (2, 3, 40)])
EPS = 1e-5


def data(rank, shape, dtype, salt):
    gen = torch.Generator().manual_seed(SEED + 101 * salt + rank)
    return torch.randn(shape, generator=gen).to(dtype)


def relative_error(tri, ref):
    return ((tri.cpu().double() - ref).norm() / ref.norm()).item()


def _check(ctx, shape, dtype, in_place, salt, group=None, ranks=None):
    """Run once on fresh data with poisoned outputs; return the failures, worded."""
    ranks = ranks or list(range(ctx.get_num_ranks()))
    rank, dev = ctx.get_rank(), ctx.get_device()
    me = ranks.index(rank)
    inputs = [data(r, shape, dtype, salt) for r in range(len(ranks))]
    residual = data(100, shape, dtype, salt).to(dev)
    weight = (1 + data(200, shape[-1:], torch.float32, salt)).to(dtype).to(dev)
    ref_out, ref_residual = ref_ops.all_reduce_rmsnorm(inputs, residual.cpu(), weight.cpu(), EPS)
    inp = ctx.empty(shape, dtype=dtype)
    inp.copy_(inputs[me].to(dev))
    out = torch.full(shape, float("nan"), dtype=dtype, device=dev)  # poison: a skipped element stays NaN
    residual_out = residual if in_place else torch.full(shape, float("nan"), dtype=dtype, device=dev)
    ctx.barrier()
    tri_out, tri_residual = ctx.ccl.all_reduce_rmsnorm(out, residual_out, inp, residual, weight, EPS, group=group)
    ctx.barrier()
    fails = []
    if tri_out is not out or tri_residual is not residual_out:
        fails.append("does not return (out, residual_out)")
    for name, tri, ref in (("out", out, ref_out), ("residual_out", residual_out, ref_residual)):
        err = relative_error(tri, ref)
        if not err <= TOLERANCE[dtype]:  # NaN fails too
            fails.append(f"{name} {shape} {dtype} in_place={in_place}: relative error {err:.2e}")
    return fails


def cases(world_size):
    """(shape, dtype, in_place) to run: every combination on GPUs; on the cpu backend, where each call costs
    seconds of interpreter time, every shape in bf16 and one shape each in fp32 and in place (at 4 ranks: two)."""
    if GPU_SCALE:
        return [(s, d, p) for s in SHAPES for d in (torch.bfloat16, torch.float32) for p in (False, True)]
    if world_size > 2:
        return [(SHAPES[1], torch.bfloat16, False), (SHAPES[2], torch.float32, True)]
    return [(s, torch.bfloat16, False) for s in SHAPES] + [(SHAPES[1], torch.float32, False),
                                                          (SHAPES[2], torch.bfloat16, True)]


def _correctness_body(world_size):
    ctx = new_context(1 << 26 if GPU_SCALE else 1 << 22)
    fails = []
    for salt, (shape, dtype, in_place) in enumerate(cases(world_size)):
        fails += _check(ctx, shape, dtype, in_place, salt)
    return fails


@pytest.mark.parametrize("world_size", world_sizes())
def test_all_reduce_rmsnorm(pools, world_size):
    results = pools(world_size).run(_correctness_body, world_size)
    assert results == [[]] * world_size, results


def _subgroup_body():
    import torch.distributed as dist

    ctx = new_context()
    rank = ctx.get_rank()
    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])  # every rank creates every group
    members, group = ([0, 2], evens) if rank % 2 == 0 else ([1, 3], odds)
    return _check(ctx, (5, 24), torch.float32, False, 9, group=group, ranks=members)


def test_subgroup(pools):
    results = pools(4).run(_subgroup_body)
    assert results == [[]] * 4, results


def _graph_body():
    ctx = new_context(1 << 26)
    rank, dev = ctx.get_rank(), ctx.get_device()
    shape, dtype = (8, 4096), torch.bfloat16
    inp = ctx.empty(shape, dtype=dtype)
    residual = torch.empty(shape, dtype=dtype, device=dev)
    out, residual_out = torch.empty_like(residual), torch.empty_like(residual)
    weight = data(200, shape[-1:], dtype, 0).to(dev)
    ctx.ccl.all_reduce_rmsnorm(out, residual_out, inp, residual, weight, EPS)  # first call: sync state
    torch.cuda.synchronize()
    ctx.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ctx.ccl.all_reduce_rmsnorm(out, residual_out, inp, residual, weight, EPS)
    fails = []
    for step in range(3):  # fresh data each replay: a replay must not read an earlier replay's flags
        inputs = [data(r, shape, dtype, 50 + step) for r in range(ctx.get_num_ranks())]
        inp.copy_(inputs[rank].to(dev))
        residual.copy_(data(100, shape, dtype, 50 + step).to(dev))
        out.fill_(float("nan"))
        residual_out.fill_(float("nan"))
        torch.cuda.synchronize()
        ctx.barrier()
        graph.replay()
        torch.cuda.synchronize()
        ctx.barrier()
        ref_out, ref_residual = ref_ops.all_reduce_rmsnorm(inputs, residual.cpu(), weight.cpu(), EPS)
        for name, tri, ref in (("out", out, ref_out), ("residual_out", residual_out, ref_residual)):
            err = relative_error(tri, ref)
            if not err <= TOLERANCE[dtype]:
                fails.append(f"replay {step} {name}: relative error {err:.2e}")
    return fails


@pytest.mark.skipif(not on_gpu(), reason="CUDA graphs need a GPU; the cpu backend runs the same kernel eagerly")
def test_replay_in_cuda_graph(pools):
    results = pools(2).run(_graph_body)
    assert results == [[]] * 2, results


def _bad_input_body():
    ctx = new_context()
    dev = ctx.get_device()
    inp = ctx.randn(4, 32)
    local = torch.randn(4, 32, device=dev)
    weight = torch.ones(32, device=dev)
    out, res = torch.empty_like(local), torch.empty_like(local)
    call = ctx.ccl.all_reduce_rmsnorm
    return {
        "not on heap": error_message(call, out, res, local, local, weight),
        "out is inp": error_message(call, inp, res, inp, local, weight),
        "weight shape": error_message(call, out, res, inp, local, torch.ones(31, device=dev)),
        "shape": error_message(call, out[:3], res, inp, local, weight),
        "dtype": error_message(call, out.half(), res, inp, local, weight),
        "int": error_message(call, out.int(), res.int(), ctx.zeros(4, 32, dtype=torch.int32), local.int(), weight),
        "hidden": error_message(call, *(torch.empty(1, 40000, device=dev),) * 2, ctx.zeros(1, 40000),
                                torch.empty(1, 40000, device=dev), torch.ones(40000, device=dev)),
        "config": error_message(call, out, res, inp, local, weight, config="fast"),
        "eps": error_message(call, out, res, inp, local, weight, -1.0),
    }


def test_bad_input(pools):
    messages = pools(2).run(_bad_input_body)[0]
    expected = {
        "not on heap": "inp is not on the symmetric heap",
        "out is inp": "ccl.all_reduce_rmsnorm: out overlaps inp (out starts +0 bytes from inp's start",
        "weight shape": "weight is (31,)",
        "shape": "out is (3, 32) but inp is (4, 32)",
        "dtype": "out has dtype torch.float16 but inp has torch.float32",
        "int": "use float16, bfloat16 or float32",
        "hidden": "hidden size 40000 is outside [1, 32768]",
        "config": "config must be an iris.ccl.CollectiveConfig",
        "eps": "eps=-1.0 must be a number >= 0",
    }
    for case, text in expected.items():
        assert text in messages[case] and "ccl.all_reduce_rmsnorm" in messages[case], (case, messages[case])
    assert CollectiveConfig  # the type the config error names
