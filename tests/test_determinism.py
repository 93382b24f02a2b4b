"""Every reduction gives every rank the same bits, and the same inputs give the same bits again.

The inputs are floats of mixed magnitude (2**-12 to 2**12 apart), so a sum taken in another order rounds
differently: small integers would hide that. Each reduction runs twice on each rank with poisoned outputs;
the ranks' results are then compared bit for bit with each other and with the first run. The ranks sum in
group order (member 0, 1, ..., W - 1, in fp32 for 16-bit types) in every algorithm, so the one-shot, two-shot,
reduce_scatter + all_gather and rooted reduce results are also the same bits as one another.
"""

import pytest
import torch

from iris.ccl import CollectiveConfig
from iris.ops import OpsConfig
from rank_utils import GPU_SCALE, SEED, new_context

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ROWS, COLS = (4099, 515) if GPU_SCALE else (23, 11)  # rows: a multiple of no block and of no group size
M_LOCAL, N, K_LOCAL = (256, 384, 640) if GPU_SCALE else (32, 32, 40)
TILES = {} if GPU_SCALE else dict(block_m=32, block_n=32, block_k=32)


def mixed(seed, shape, dtype):
    """randn scaled by 2**e, e uniform in [-12, 12] (fp16: [-6, 6], so that four ranks' sums stay finite)."""
    gen = torch.Generator().manual_seed(seed)
    span = 6 if dtype == torch.float16 else 12
    scale = torch.exp2(torch.randint(-span, span + 1, shape, generator=gen).float())
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def bits(t):
    """The tensor's bytes, comparable across processes (NaN compares equal to itself)."""
    t = t.detach().cpu().contiguous()
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32).clone()


def _reductions_body(dtype):
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    shape = (world * ROWS, COLS)
    inp = ctx.empty(shape, dtype=dtype)
    inp.copy_(mixed(SEED + rank, shape, dtype).to(dev))
    out = ctx.empty(shape, dtype=dtype)
    piece = ctx.empty((ROWS, COLS), dtype=dtype)
    gathered = ctx.empty(shape, dtype=dtype)
    ctx.barrier()

    def poisoned(t):
        t.fill_(float("nan"))
        ctx.barrier()
        return t

    def all_reduce(algorithm, op="sum"):
        ctx.ccl.all_reduce(poisoned(out), inp, op=op, config=CollectiveConfig(algorithm=algorithm))
        return out

    def reduce_scatter_all_gather(algorithm):
        ctx.ccl.reduce_scatter(poisoned(piece), inp, config=CollectiveConfig(algorithm=algorithm))
        ctx.ccl.all_gather(poisoned(gathered), piece)
        return gathered

    def reduce_to(root):
        ctx.ccl.reduce(poisoned(out), inp, dst=root)
        ctx.ccl.broadcast(out, src=root)
        return out

    hidden = COLS
    residual = mixed(SEED + 999, shape, dtype).to(dev)  # the same on every rank, as in a decoder
    weight = (1 + mixed(SEED + 998, (hidden,), torch.float32) / 4096).to(dtype).to(dev)
    norm_out, residual_out = torch.empty_like(residual), torch.empty_like(residual)

    def rmsnorm():
        ctx.ccl.all_reduce_rmsnorm(poisoned(norm_out), poisoned(residual_out), inp, residual, weight, 1e-5)
        return torch.cat([norm_out, residual_out])

    calls = {
        "all_reduce one_shot": lambda: all_reduce("one_shot"),
        "all_reduce two_shot": lambda: all_reduce("two_shot"),
        "all_reduce auto": lambda: all_reduce("auto"),
        "all_reduce avg one_shot": lambda: all_reduce("one_shot", "avg"),
        "all_reduce avg two_shot": lambda: all_reduce("two_shot", "avg"),
        "reduce_scatter pull + all_gather": lambda: reduce_scatter_all_gather("pull"),
        "reduce_scatter push + all_gather": lambda: reduce_scatter_all_gather("push"),
        "reduce to rank 0 + broadcast": lambda: reduce_to(0),
        f"reduce to rank {world - 1} + broadcast": lambda: reduce_to(world - 1),
        "all_reduce_rmsnorm": rmsnorm,
    }
    results = {}
    for name, call in calls.items():
        first = bits(call())
        ctx.barrier()
        results[name] = (first, bits(call()))
        ctx.barrier()
    return results


def _fused_body(dtype):
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    m = world * M_LOCAL
    a = mixed(SEED + 10 + rank, (m, K_LOCAL), dtype).to(dev)
    b = mixed(SEED + 20 + rank, (K_LOCAL, N), dtype).div(64).to(dtype).to(dev)
    out = ctx.empty((m, N), dtype=dtype)
    piece = ctx.empty((M_LOCAL, N), dtype=dtype)
    gathered = ctx.empty((m, N), dtype=dtype)
    results = {}
    for variant in ("fused", "bulk"):
        config = OpsConfig(variant=variant, **TILES)

        def matmul_all_reduce():
            out.fill_(float("nan"))
            ctx.barrier()
            ctx.ops.matmul_all_reduce(out, a, b, config=config)
            return out

        def matmul_reduce_scatter_all_gather():
            piece.fill_(float("nan"))
            ctx.barrier()
            ctx.ops.matmul_reduce_scatter(piece, a, b, config=config)
            ctx.ccl.all_gather(gathered, piece)
            return gathered

        for name, call in (("matmul_all_reduce", matmul_all_reduce),
                           ("matmul_reduce_scatter + all_gather", matmul_reduce_scatter_all_gather)):
            first = bits(call())
            ctx.barrier()
            results[f"{name} {variant}"] = (first, bits(call()))
            ctx.barrier()
    return results


def _torch_body(dtype):
    """The torch.distributed backend (its staging in chunks, its in-place all_reduce) and torch.ops.iris."""
    import torch.distributed as dist

    import iris.compile
    import iris.distributed

    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    iris.distributed.set_context(ctx, (1 << 20) if GPU_SCALE else 1024)  # staged in several chunks
    iris.compile.set_context(ctx)
    group = dist.new_group(backend="iris")
    shape = (world * ROWS, COLS)
    x = mixed(SEED + rank, shape, dtype).to(dev)
    piece = torch.empty((ROWS, COLS), dtype=dtype, device=dev)

    def backend_all_reduce():
        t = x.clone()
        dist.all_reduce(t, group=group)
        return t

    def backend_reduce_scatter_all_gather():
        gathered = torch.full(shape, float("nan"), dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(piece.fill_(float("nan")), x, group=group)
        dist.all_gather_into_tensor(gathered, piece, group=group)
        return gathered

    calls = {
        "dist.all_reduce": backend_all_reduce,
        "dist.reduce_scatter_tensor + all_gather_into_tensor": backend_reduce_scatter_all_gather,
        "torch.ops.iris.all_reduce": lambda: torch.ops.iris.all_reduce(x),
        "torch.ops.iris.reduce_scatter + all_gather": lambda: torch.ops.iris.all_gather(torch.ops.iris.reduce_scatter(x)),
    }
    results = {}
    for name, call in calls.items():
        first = bits(call())
        results[name] = (first, bits(call()))
    dist.destroy_process_group(group)
    return results


def check(results, same_as=()):
    """Failures, worded: a run that differs from its first, a rank that differs from rank 0, and a name of
    ``same_as``'s groups whose bits differ from the group's first."""
    fails = []
    for name, (first, second) in results[0].items():
        for rank, by_name in enumerate(results):
            again = by_name[name][1]
            if not torch.equal(by_name[name][0], again):
                fails.append(f"{name}: rank {rank}'s second call differs from its first in "
                             f"{int((by_name[name][0] != again).sum())} of {again.numel()} elements")
            if rank and not torch.equal(by_name[name][0], first):
                fails.append(f"{name}: rank {rank} differs from rank 0 in "
                             f"{int((by_name[name][0] != first).sum())} of {first.numel()} elements")
    for group in same_as:
        for name in group[1:]:
            a, b = results[0][group[0]][0], results[0][name][0]
            if not torch.equal(a, b):
                fails.append(f"{name} differs from {group[0]} in {int((a != b).sum())} of {a.numel()} elements")
    return fails


SUM_GROUP = ("all_reduce one_shot", "all_reduce two_shot", "all_reduce auto", "reduce_scatter pull + all_gather",
             "reduce_scatter push + all_gather", "reduce to rank 0 + broadcast")


# Every dtype at 3 ranks and on GPUs; bf16 at every size on the cpu backend, where each call costs seconds.
CASES = [(w, d) for w in (2, 3, 4) for d in DTYPES if GPU_SCALE or w == 3 or d == torch.bfloat16]


@pytest.mark.parametrize("world_size, dtype", CASES, ids=str)
def test_reductions_same_bits_everywhere(pools, world_size, dtype):
    results = pools(world_size).run(_reductions_body, dtype)
    fails = check(results, same_as=[SUM_GROUP + (f"reduce to rank {world_size - 1} + broadcast",),
                                    ("all_reduce avg one_shot", "all_reduce avg two_shot")])
    assert not fails, "\n".join(fails)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_fused_ops_same_bits_everywhere(pools, world_size):
    results = pools(world_size).run(_fused_body, torch.bfloat16)
    fails = check(results)
    assert not fails, "\n".join(fails)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_torch_paths_same_bits_everywhere(pools, world_size):
    results = pools(world_size).run(_torch_body, torch.float32)
    fails = check(results, same_as=[tuple(results[0])])
    assert not fails, "\n".join(fails)
