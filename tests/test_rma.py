"""load / store / get / put / copy between ranks: every dtype, masks, odd sizes, exact equality."""

import pytest
import torch
import triton
import triton.language as tl

import iris
from conftest import world_sizes
from rank_utils import ALL_DTYPES, GPU_SCALE, new_context, poison_value, rank_data

SIZES = [1, 777, (1 << 22) + 3] if GPU_SCALE else [1, 777]
BLOCK = 1024 if GPU_SCALE else 256


@triton.jit
def _rma_kernel(src, dst, n, heap_bases, rank, peer, third, OP: tl.constexpr, LOAD_CM: tl.constexpr,
                STORE_CM: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if OP == "load":  # dst (here) <- src (peer)
        value = iris.load(src + offs, rank, peer, heap_bases, mask=mask, cache_modifier=LOAD_CM, hint=HINT)
        tl.store(dst + offs, value, mask=mask)
    elif OP == "load_volatile":  # volatile wins over a cache modifier (PTX has no ld.volatile.ca)
        value = iris.load(src + offs, rank, peer, heap_bases, mask=mask, cache_modifier=LOAD_CM, volatile=True)
        tl.store(dst + offs, value, mask=mask)
    elif OP == "store":  # dst (peer) <- src (here)
        value = tl.load(src + offs, mask=mask)
        iris.store(dst + offs, value, rank, peer, heap_bases, mask=mask, hint=HINT, cache_modifier=STORE_CM)
    elif OP == "get":  # dst (here) <- src (peer)
        iris.get(src + offs, dst + offs, rank, peer, heap_bases, mask=mask, load_cache_modifier=LOAD_CM,
                 store_cache_modifier=STORE_CM, hint=HINT)
    elif OP == "put":  # dst (peer) <- src (here)
        iris.put(src + offs, dst + offs, rank, peer, heap_bases, mask=mask, load_cache_modifier=LOAD_CM,
                 store_cache_modifier=STORE_CM, hint=HINT)
    elif OP == "copy":  # dst (third) <- src (peer), issued by this rank
        iris.copy(src + offs, dst + offs, peer, third, rank, heap_bases, mask=mask, load_cache_modifier=LOAD_CM,
                  store_cache_modifier=STORE_CM, hint=HINT)


# Who writes whose dst: for each op, the rank whose src ends up in rank r's dst.
def _source_of(op, rank, world_size):
    if op in ("load", "load_volatile", "get"):
        return (rank + 1) % world_size  # r reads from r + 1
    if op in ("store", "put"):
        return (rank - 1) % world_size  # r - 1 writes into r
    return (rank - 1) % world_size  # copy: rank r - 2 moves (r - 1)'s src into r's dst


VARIANTS = [
    # (op, load cache modifier, store cache modifier, hint)
    ("load", None, None, None), ("load", ".cg", None, None), ("load", ".cv", None, 16),
    ("load_volatile", None, None, None), ("load_volatile", ".ca", None, None), ("load_volatile", ".cg", None, None),
    ("store", None, None, None), ("store", None, ".wt", None), ("store", None, ".cs", 16),
    ("get", None, None, None), ("get", ".cg", ".cs", 16),
    ("put", None, None, None), ("put", ".ca", ".wb", 16),
    ("copy", None, None, None), ("copy", ".cg", ".cg", 16),
]


def _rma_body(dtype, n):
    ctx = new_context(1 << 27 if GPU_SCALE else 1 << 20)  # two buffers of up to 4 Mi int64
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    src = ctx.empty(n + BLOCK, dtype=dtype)
    dst = ctx.empty(n + BLOCK, dtype=dtype)
    src[:n] = rank_data(rank, n, dtype, ctx.get_device())
    src[n:] = 5
    failures = []
    for op, load_cm, store_cm, hint in VARIANTS:
        dst.fill_(poison_value(dtype))
        ctx.barrier()
        peer = (rank + 1) % world
        third = (rank + 2) % world
        grid = (triton.cdiv(n, BLOCK),)
        _rma_kernel[grid](src, dst, n, ctx.get_heap_bases(), rank, peer, third, OP=op, LOAD_CM=load_cm,
                          STORE_CM=store_cm, HINT=hint, BLOCK=BLOCK)
        ctx.barrier()
        expect = rank_data(_source_of(op, rank, world), n, dtype, ctx.get_device())
        if not torch.equal(dst[:n], expect):
            bad = (dst[:n] != expect).nonzero().flatten()[:5].tolist()
            failures.append(f"{op} lcm={load_cm} scm={store_cm} hint={hint}: wrong at {bad}")
        if not bool((dst[n:] == poison_value(dtype)).all()):
            failures.append(f"{op}: wrote past n={n} (mask ignored)")
    ctx.barrier()
    return failures


@pytest.mark.parametrize("world_size", world_sizes())
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_rma(pools, world_size, n, dtype):
    results = pools(world_size).run(_rma_body, dtype, n)
    failures = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not failures, "\n".join(failures)
