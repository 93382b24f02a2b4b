"""``DeviceContext`` methods do what the free functions do, with the rank and heap table bound once."""

import pytest
import torch
import triton
import triton.language as tl

import iris
from conftest import world_sizes
from rank_utils import new_context, poison_value, rank_data

BLOCK = 128


@triton.jit
def _context_kernel(context, src, loaded, stored, got, put_dst, counter, olds, n, RANK: tl.constexpr,
                    WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    right = (RANK + 1) % WORLD_SIZE
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(loaded + offs, ctx.load(src + offs, right, mask=mask), mask=mask)       # loaded <- src(right)
    ctx.store(stored + offs, tl.load(src + offs, mask=mask), right, mask=mask)      # stored(right) <- src
    ctx.get(src + offs, got + offs, right, mask=mask)                               # got <- src(right)
    ctx.put(src + offs, put_dst + offs, right, mask=mask, hint=16)                  # put_dst(right) <- src
    old = ctx.atomic_add(counter, 1, 0, sem="acq_rel", scope="sys")                 # counter(0) += 1
    tl.store(olds + 0, old)
    tl.store(olds + 1, ctx.atomic_cas(counter + 1, 0, RANK + 1, 0, sem="acq_rel", scope="sys"))
    tl.store(olds + 2, ctx.atomic_max(counter + 2, RANK, 0, scope="sys"))
    tl.store(olds + 3, ctx.atomic_xchg(counter + 3, RANK, right, sem="release", scope="sys"))


def _context_body():
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    n = 100
    src = ctx.empty(BLOCK, dtype=torch.float32)
    src[:n] = rank_data(rank, n, torch.float32, dev)
    bufs = [ctx.full((BLOCK,), float(poison_value(torch.float32))) for _ in range(4)]
    counter = ctx.zeros(4, dtype=torch.int32)
    olds = ctx.full((4,), -1, dtype=torch.int32)
    ctx.barrier()
    _context_kernel[(1,)](ctx.get_device_context(), src, *bufs, counter, olds, n, RANK=rank, WORLD_SIZE=world,
                          BLOCK=BLOCK)
    ctx.barrier()
    right_data = rank_data((rank + 1) % world, n, torch.float32, dev)
    left_data = rank_data((rank - 1) % world, n, torch.float32, dev)
    loaded, stored, got, put_dst = bufs
    ok = {
        "load": torch.equal(loaded[:n], right_data), "store": torch.equal(stored[:n], left_data),
        "get": torch.equal(got[:n], right_data), "put": torch.equal(put_dst[:n], left_data),
        "mask": all(bool((b[n:] == poison_value(torch.float32)).all()) for b in bufs),
    }
    return ok, counter.cpu().tolist(), olds.cpu().tolist()


@pytest.mark.parametrize("world_size", world_sizes())
def test_device_context_methods(pools, world_size):
    results = pools(world_size).run(_context_body)
    for rank, (ok, _, _) in enumerate(results):
        assert all(ok.values()), f"rank {rank}: {ok}"
    counter = results[0][1]
    assert counter[0] == world_size  # every rank added one on rank 0
    assert counter[1] in range(1, world_size + 1)  # exactly one rank won the election ...
    winners = [r for r, (_, _, olds) in enumerate(results) if olds[1] == 0]
    assert winners == [counter[1] - 1]  # ... and it is the one whose value is there
    assert counter[2] == world_size - 1
    assert sorted(olds[0] for _, _, olds in results) == list(range(world_size))
    for rank, (_, counters, _) in enumerate(results):
        assert counters[3] == (rank - 1) % world_size  # xchg from the left neighbour
