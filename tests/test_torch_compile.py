"""torch.ops.iris (iris.compile) against torch references: each op eager and inside torch.compile(fullgraph=True)
on ordinary tensors, CUDA-graph replay (mode="reduce-overhead") on GPUs, and the errors before set_context."""

import pytest
import torch

from iris.ccl import reference as ref_ops
from iris.ops import reference as fused_ref
from conftest import on_gpu
from rank_utils import GPU_SCALE, error_message, new_context, rank_data

ROWS, COLS = (4099, 257) if GPU_SCALE else (37, 7)
M, N, K = (4096, 3584, 2048) if GPU_SCALE else (64, 48, 32)  # per-rank slices of M, N or K below
GEMM_TOLERANCE = {torch.float32: 5e-3, torch.bfloat16: 2e-2}


def data(rank, shape, dtype, device, salt=0):
    n = 1
    for d in shape:
        n *= d
    return rank_data(rank, n, dtype, device, salt).view(shape)


def close(fails, name, tri, ref, tolerance=None):
    tri, ref = tri.cpu(), ref.cpu()
    if tri.shape != ref.shape:
        fails.append(f"{name}: shape {tuple(tri.shape)} != {tuple(ref.shape)}")
    elif tolerance is None:
        if not torch.equal(tri, ref.to(tri.dtype)):
            fails.append(f"{name}: {(tri != ref.to(tri.dtype)).sum().item()} elements differ")
    else:
        err = ((tri.double() - ref.double()).norm() / ref.double().norm()).item()
        if err > tolerance:
            fails.append(f"{name}: relative error {err:.2e}")


def _cases(rank, world, dtype, dev):
    """(name, fn, operands, reference) for every op: ``fn`` takes this rank's operands."""
    x = [data(r, (world * ROWS, COLS), dtype, dev) for r in range(world)]
    a_k = [data(r, (M, K // world), dtype, dev, 1) / 8 for r in range(world)]
    b_k = [data(r, (K // world, N), dtype, dev, 2) / 8 for r in range(world)]
    a_m = [data(r, (M // world, K), dtype, dev, 3) / 8 for r in range(world)]
    b = data(0, (K, N), dtype, dev, 4) / 8
    b_n = [data(r, (K, N // world), dtype, dev, 5) / 8 for r in range(world)]
    ops = torch.ops.iris
    tol = GEMM_TOLERANCE[dtype]
    return [
        ("all_reduce", ops.all_reduce, (x[rank],), ref_ops.all_reduce(x), None),
        ("all_gather", ops.all_gather, (x[rank],), ref_ops.all_gather(x), None),
        ("reduce_scatter", ops.reduce_scatter, (x[rank],), ref_ops.reduce_scatter(x, rank), None),
        ("all_to_all", ops.all_to_all, (x[rank],), ref_ops.all_to_all_single(x, rank), None),
        ("matmul_all_reduce", ops.matmul_all_reduce, (a_k[rank], b_k[rank]), fused_ref.matmul_all_reduce(a_k, b_k),
         tol),
        ("all_gather_matmul", ops.all_gather_matmul, (a_m[rank], b), fused_ref.all_gather_matmul(a_m, b), tol),
        ("matmul_all_gather", ops.matmul_all_gather, (a_m[0], b_n[rank]), fused_ref.matmul_all_gather(a_m[0], b_n),
         tol),
        ("matmul_reduce_scatter", ops.matmul_reduce_scatter, (a_k[rank], b_k[rank]),
         fused_ref.matmul_reduce_scatter(a_k, b_k, rank), tol),
    ]


def _ops_body(compiled, dtype, staging_bytes):
    import iris.compile
    from iris.distributed import staging_for

    ctx = new_context(1 << 29 if GPU_SCALE else 1 << 23)
    iris.compile.set_context(ctx, staging_bytes)
    staging = staging_for(ctx)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    fails = []
    for name, fn, operands, ref, tol in _cases(rank, world, dtype, dev):
        # aot_eager: torch.compile's graph and its fake tensors, without inductor's C++ compile (minutes on 2 cores)
        run = torch.compile(lambda *t: fn(*t) * 1, fullgraph=True, backend="aot_eager") if compiled else fn
        staging.buffer.fill_(0x7F)  # stale staged bytes cannot pass for a result
        ctx.barrier()
        tri = run(*operands)
        if any(tri.data_ptr() == t.data_ptr() for t in operands) or ctx.is_symmetric(tri):
            fails.append(f"{name}: the result is not a new ordinary tensor")
        close(fails, name, tri, ref, tol)
    return fails


# Compiled only: the compiled function runs each op itself, once traced with fake tensors.
@pytest.mark.parametrize("compiled, staging_bytes", [(True, None), (True, (8 << 20) if GPU_SCALE else 2048)],
                         ids=["compiled", "compiled-chunked"])
def test_ops(pools, compiled, staging_bytes):
    for rank, fails in enumerate(pools(2).run(_ops_body, compiled, torch.float32, staging_bytes)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _errors_body():
    import iris.compile

    iris.compile.functional._iris_ctx = None  # as before set_context
    x = torch.ones(4)
    traced = torch.compile(lambda t: torch.ops.iris.all_gather(t), fullgraph=True, backend="aot_eager")
    found = {"eager": error_message(torch.ops.iris.all_reduce, x), "traced": error_message(traced, x),
             "type": error_message(iris.compile.set_context, object())}
    ctx = new_context()
    iris.compile.set_context(ctx)
    found["rows"] = error_message(torch.ops.iris.reduce_scatter, torch.ones(ctx.get_num_ranks() + 1, 2))
    return found


def test_errors(pools):
    for found in pools(2).run(_errors_body):
        assert found["eager"].startswith("RuntimeError: torch.ops.iris.all_reduce: Iris context not set; call "
                                         "iris.compile.set_context(ctx)"), found["eager"]
        assert "torch.ops.iris.all_gather: Iris context not set" in found["traced"], found["traced"]
        assert found["type"].startswith("TypeError: iris.compile.set_context: Expected an Iris instance"), found["type"]
        assert "torch.ops.iris.reduce_scatter: dim 0 of shape (3, 2) must split into 2" in found["rows"], found["rows"]


def _reduce_overhead_body(replays, ops):
    """mode="reduce-overhead": inductor captures the ops in a CUDA graph and replays it with fresh inputs."""
    import iris.compile

    ctx = new_context(1 << 30)
    iris.compile.set_context(ctx)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()

    def step(x, a, b):
        reduced = torch.ops.iris.all_reduce(x) * 2 if "all_reduce" in ops else x
        return reduced, torch.ops.iris.matmul_all_reduce(a, b) if "matmul_all_reduce" in ops else a

    run = torch.compile(step, fullgraph=True, mode="reduce-overhead")
    fails = []
    for i in range(replays):
        x = [data(r, (world * ROWS, COLS), torch.bfloat16, dev, 10 + i) for r in range(world)]
        a = [data(r, (M, K // world), torch.bfloat16, dev, 20 + i) / 8 for r in range(world)]
        b = [data(r, (K // world, N), torch.bfloat16, dev, 30 + i) / 8 for r in range(world)]
        reduced, product = run(x[rank], a[rank], b[rank])
        torch.cuda.synchronize()
        if "all_reduce" in ops:
            close(fails, f"all_reduce call {i}", reduced, ref_ops.all_reduce(x) * 2)
        if "matmul_all_reduce" in ops:
            close(fails, f"matmul_all_reduce call {i}", product, fused_ref.matmul_all_reduce(a, b), 2e-2)
        ctx.barrier()
    return fails


@pytest.mark.skipif(not on_gpu(), reason="CUDA graphs need a GPU (GPU tier)")
@pytest.mark.parametrize("ops", [("all_reduce",), ("matmul_all_reduce",), ("all_reduce", "matmul_all_reduce")],
                         ids="+".join)
def test_reduce_overhead_replays(pools, ops):
    for rank, fails in enumerate(pools(2).run(_reduce_overhead_body, 6, ops)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)
