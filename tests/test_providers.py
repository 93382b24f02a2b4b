"""Symmetric memory from other providers (iris/host/memory/providers.py): the device API on a table per allocation.

The test provider maps every allocation as a shared-memory segment of its own, at an address unrelated to the heap
and different on every rank, as torch's symmetric memory does on GPUs: code that silently assumed one heap base (or
one offset for every allocation) would move the wrong bytes here."""

import pytest
import torch
import triton
import triton.language as tl

import iris
from conftest import on_gpu
from rank_utils import error_message, new_context, poison_value, rank_data

N = 300
BLOCK = 128
# The test provider is the cpu backend's shared memory; on GPUs test_torch_symmetric_memory runs torch's (and
# scripts/gpu_symm_mem.py times it).
ON_CPU_ONLY = pytest.mark.skipif(on_gpu(), reason="the test provider is the cpu backend's shared memory; GPUs: "
                                 "test_torch_symmetric_memory")


def segment_provider_tensor(ctx, n, dtype):
    """Collective. A tensor of ``n`` ``dtype`` elements on a shared-memory segment of its own, mapped by every rank
    of the node (iris's cpu backing memory, outside the heap), and its peers' addresses."""
    import torch.distributed as dist

    from iris.host.distributed import all_gather_object
    from iris.host.memory.backing import SharedMemory

    nbytes = n * dtype.itemsize
    memory = SharedMemory(nbytes, ctx.get_rank(), ctx.get_num_ranks(), all_gather_object, dist.barrier)
    return memory.local[:nbytes].view(dtype), memory.bases, memory


@triton.jit
def _provider_kernel(src, dst, got, counter, src_bases, dst_bases, counter_bases, n, rank, peer,
                     BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # push our src into the peer's dst, then read the peer's src into got: each pointer translated with its own
    # allocation's table
    iris.put(src + offs, dst + offs, rank, peer, dst_bases, mask=mask)
    values = iris.load(src + offs, rank, peer, src_bases, mask=mask)
    tl.store(got + offs, values, mask=mask)
    iris.atomic_add(counter, 1, rank, peer, counter_bases, sem="release", scope="sys")


@triton.jit
def _store_kernel(dst, dst_bases, n, rank, peer, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.store(dst + offs, value + offs.to(tl.float32), rank, peer, dst_bases, mask=offs < n)


def _device_api_body():
    ctx = new_context(heap_size=1 << 20)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    peer, left = (rank + 1) % world, (rank - 1) % world
    src, src_bases, src_memory = segment_provider_tensor(ctx, N, torch.float32)
    dst, dst_bases, dst_memory = segment_provider_tensor(ctx, N, torch.float32)
    counter, counter_bases, counter_memory = segment_provider_tensor(ctx, 64, torch.int32)
    maps = [iris.wrap_symmetric(t, bases) for t, bases in ((src, src_bases), (dst, dst_bases),
                                                           (counter, counter_bases))]
    src.copy_(rank_data(rank, N, torch.float32, "cpu"))
    dst.fill_(poison_value(torch.float32))
    counter.zero_()
    got = torch.full((N,), poison_value(torch.float32))
    heap_distances = {b - ctx.heap.bases[r] for r, b in enumerate(dst_bases)}
    ctx.barrier()
    grid = (triton.cdiv(N, BLOCK),)
    _provider_kernel[grid](src, dst, got, counter, maps[0].peer_bases, maps[1].peer_bases, maps[2].peer_bases, N,
                           rank, peer, BLOCK=BLOCK)
    ctx.barrier()
    pushed = torch.equal(dst, rank_data(left, N, torch.float32, "cpu"))
    pulled = torch.equal(got, rank_data(peer, N, torch.float32, "cpu"))
    arrived = int(counter[0])
    ctx.barrier()
    _store_kernel[grid](dst, maps[1].peer_bases, N, rank, peer, 1000.0 * rank, BLOCK=BLOCK)
    ctx.barrier()
    stored = torch.equal(dst, 1000.0 * left + torch.arange(N, dtype=torch.float32))
    del src_memory, dst_memory, counter_memory
    return pushed, pulled, arrived, stored, len(heap_distances), maps[1].bases == tuple(dst_bases)


@ON_CPU_ONLY
@pytest.mark.parametrize("world_size", [2, 3])
def test_device_api_on_a_table_per_allocation(pools, world_size):
    for rank, (pushed, pulled, arrived, stored, distances, same_bases) in enumerate(
            pools(world_size).run(_device_api_body)):
        assert pushed, f"rank {rank}: iris.put through the provider's table did not land in the peer's tensor"
        assert pulled, f"rank {rank}: iris.load through the provider's table did not read the peer's tensor"
        assert arrived == triton.cdiv(N, BLOCK), f"rank {rank}: iris.atomic_add through a table counted {arrived}"
        assert stored, f"rank {rank}: iris.store through the provider's table"
        assert distances > 1, "the test provider mapped the segment at the heap's offset everywhere: not a test"
        assert same_bases


def _collectives_body():
    """Every collective whose operands peers read or write, and one fused op, on tensors of the test provider (each
    its own segment, mapped at a different address on every rank), element by element against torch."""
    ctx = new_context(heap_size=1 << 20)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    kept = []  # the segments and their maps, alive while the calls run

    def provider(n, dtype=torch.float32):
        tensor, bases, memory = segment_provider_tensor(ctx, n, dtype)
        kept.append((memory, iris.wrap_symmetric(tensor, bases)))
        tensor.fill_(poison_value(dtype))
        return tensor

    def data(r, n, salt):
        return rank_data(r, n, torch.float32, "cpu", salt=salt)

    m = 40  # elements per rank's slice
    n = m * world
    total = sum(data(q, n, 1) for q in range(world))
    results = {}

    def check(name, out, ref):
        ctx.barrier()
        results[name] = torch.equal(out, ref)

    inp = provider(n)
    inp.copy_(data(rank, n, 1))
    ctx.barrier()
    for algorithm in ("one_shot", "two_shot"):
        out = provider(n) if algorithm == "two_shot" else torch.full((n,), -77.0)
        ctx.ccl.all_reduce(out, inp, config=iris.ccl.CollectiveConfig(algorithm=algorithm))
        check(f"all_reduce {algorithm}", out, total)
    out = torch.full((m,), -77.0)
    ctx.ccl.reduce_scatter(out, inp)
    check("reduce_scatter", out, total[rank * m:(rank + 1) * m])
    gathered = provider(n)
    ctx.ccl.all_gather(gathered, data(rank, m, 2))
    check("all_gather", gathered, torch.cat([data(q, m, 2) for q in range(world)]))
    exchanged = provider(n)
    ctx.ccl.all_to_all_single(exchanged, data(rank, n, 3))
    check("all_to_all_single", exchanged, torch.cat([data(q, n, 3)[rank * m:(rank + 1) * m] for q in range(world)]))
    shared = provider(n)
    shared.copy_(data(rank, n, 4))
    ctx.barrier()
    ctx.ccl.broadcast(shared, src=world - 1)
    check("broadcast", shared, data(world - 1, n, 4))
    piece = torch.full((m,), -77.0)
    ctx.ccl.scatter(piece, inp, src=1)
    check("scatter", piece, data(1, n, 1)[rank * m:(rank + 1) * m])
    part = provider(m)
    part.copy_(data(rank, m, 5))
    ctx.barrier()
    everything = torch.full((n,), -77.0)
    ctx.ccl.gather(everything, part, dst=0)
    if rank == 0:
        check("gather", everything, torch.cat([data(q, m, 5) for q in range(world)]))
    else:
        ctx.barrier()
    summed = torch.full((m,), -77.0)
    ctx.ccl.reduce(summed, part, dst=0)
    if rank == 0:
        check("reduce", summed, sum(data(q, m, 5) for q in range(world)))
    else:
        ctx.barrier()
    # the fused GEMM + all-gather: every rank's tiles stored into every rank's provider tensor
    M, K, cols = 32, 32, 16
    a = rank_data(0, M * K, torch.float32, "cpu", salt=6).view(M, K)
    b = [rank_data(q, K * cols, torch.float32, "cpu", salt=7).view(K, cols) for q in range(world)]
    fused = provider(M * world * cols).view(M, world * cols)
    ctx.ops.matmul_all_gather(fused, a, b[rank])
    check("ops.matmul_all_gather", fused, torch.cat([(a.double() @ bq.double()).float() for bq in b], dim=1))
    heap_distances = len({t[1].bases[rank] - ctx.heap.bases[rank] for t in kept})
    del kept
    return results, heap_distances


@ON_CPU_ONLY
@pytest.mark.parametrize("world_size", [2, 3])
def test_collectives_and_a_fused_op_on_a_table_per_allocation(pools, world_size):
    for rank, (results, distances) in enumerate(pools(world_size).run(_collectives_body)):
        wrong = [name for name, right in results.items() if not right]
        assert not wrong, f"rank {rank}: wrong results on provider memory: {wrong}"
        expected = 10 if rank == 0 else 8  # gather and reduce are checked on their root
        assert len(results) == expected, (rank, sorted(results))
        assert distances > 1, "the provider's tensors sat at one offset from the heap: not a test"


def _remembered_body():
    """A collective's launch is remembered on provider memory as on the heap: the same tensors again are a hit, a
    tensor of the same shape in another allocation (another table) or on the heap is not, and every result is right."""
    ctx = new_context(heap_size=1 << 20)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = 48
    kept = []

    def provider(salt):
        tensor, bases, memory = segment_provider_tensor(ctx, n, torch.float32)
        kept.append((memory, iris.wrap_symmetric(tensor, bases)))
        tensor.copy_(rank_data(rank, n, torch.float32, "cpu", salt=salt))
        return tensor

    first, second = provider(1), provider(2)
    on_heap = ctx.zeros(n, dtype=torch.float32)
    on_heap.copy_(rank_data(rank, n, torch.float32, "cpu", salt=3))
    ctx.barrier()
    config = iris.ccl.CollectiveConfig(algorithm="one_shot")
    rounds = []
    for inp, salt in ((first, 1), (first, 1), (second, 2), (second, 2), (on_heap, 3), (first, 1)):
        out = torch.full((n,), poison_value(torch.float32), dtype=torch.float32)
        hits = ctx.launches.hits
        ctx.ccl.all_reduce(out, inp, config=config)
        ctx.barrier()
        expected = sum(rank_data(q, n, torch.float32, "cpu", salt=salt) for q in range(world))
        rounds.append((ctx.launches.hits - hits, torch.equal(out, expected)))
    del kept
    return rounds


@ON_CPU_ONLY
def test_launches_are_remembered_on_provider_memory(pools):
    for rank, rounds in enumerate(pools(2).run(_remembered_body)):
        assert all(right for _, right in rounds), f"rank {rank}: wrong sums {rounds}"
        # hit, not hit: first again; second (another table); second again; the heap; first (the entry is second's)
        assert [hit for hit, _ in rounds] == [0, 1, 0, 1, 0, 0], f"rank {rank}: {rounds}"


def _heap_map_body():
    ctx = new_context(heap_size=1 << 20)
    tensor, peer_bases = ctx.allocate_symmetric(40, dtype=torch.float32)
    address = ctx.provider.symmetric_address_map(tensor)
    return (peer_bases.cpu().tolist(), address.peer_bases.cpu().tolist(), tensor.data_ptr(),
            address.bases[ctx.get_rank()], address.nbytes)


def test_the_heap_is_one_provider_among_others(pools):
    for peer_bases, mapped, ptr, own, nbytes in pools(2).run(_heap_map_body):
        assert peer_bases == mapped and own == ptr and nbytes == 160


def _refusals_body():
    ctx = new_context(heap_size=1 << 20)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    tensor, bases, memory = segment_provider_tensor(ctx, 64, torch.float32)
    odd = torch.zeros(64 + rank, dtype=torch.float32)  # a different shape on every rank
    wrong = list(bases)
    wrong[rank] += 256
    misaligned = list(bases)
    misaligned[(rank + 1) % world] += 4
    return {
        "shape": error_message(iris.wrap_symmetric, odd, [odd.data_ptr()] * world),
        "own": error_message(iris.wrap_symmetric, tensor, wrong),
        "count": error_message(iris.wrap_symmetric, tensor, bases[:1]),
        "aligned": error_message(iris.wrap_symmetric, tensor, misaligned),
    }


@ON_CPU_ONLY
def test_wrap_symmetric_refuses_on_every_rank(pools):
    for rank, m in enumerate(pools(3).run(_refusals_body)):
        assert "ValueError: iris.wrap_symmetric: the tensor differs across the ranks (rank 0: (64,)" in m["shape"]
        assert "is not the tensor's own address" in m["own"] and "rank 0:" in m["own"], m["own"]
        assert "peer_addresses has 1 entries, the group 3 ranks" in m["count"], m["count"]
        assert "do not lie a multiple of 256 bytes from this rank's" in m["aligned"], m["aligned"]


def _torch_symm_mem_body():
    """PyTorch's symmetric memory through ``iris.TorchSymmMemProvider``: the device API (put, load, atomic_add, store)
    on three of its allocations, each with its own table; all_reduce (one-shot and two-shot) on them, element by
    element against torch; a map asked for again is the live one; at two ranks or more a second table over the
    same bytes is refused."""
    ctx = new_context(heap_size=1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    peer, left = (rank + 1) % world, (rank - 1) % world
    provider = iris.TorchSymmMemProvider()
    src, src_map = provider.allocate_symmetric_map(N, dtype=torch.float32)
    dst, dst_map = provider.allocate_symmetric_map(N, dtype=torch.float32)
    counter, counter_map = provider.allocate_symmetric_map(64, dtype=torch.int32)
    src.copy_(rank_data(rank, N, torch.float32, dev))
    dst.fill_(poison_value(torch.float32))
    counter.zero_()
    got = torch.full((N,), poison_value(torch.float32), device=dev)
    torch.cuda.synchronize()
    ctx.barrier()
    grid = (triton.cdiv(N, BLOCK),)
    _provider_kernel[grid](src, dst, got, counter, src_map.peer_bases, dst_map.peer_bases, counter_map.peer_bases, N,
                           rank, peer, BLOCK=BLOCK)
    torch.cuda.synchronize()
    ctx.barrier()
    results = {"put": torch.equal(dst, rank_data(left, N, torch.float32, dev)),
               "load": torch.equal(got, rank_data(peer, N, torch.float32, dev)),
               "atomic_add": int(counter[0]) == triton.cdiv(N, BLOCK),
               "own entry": dst_map.bases[rank] == dst.data_ptr(),
               "map again": provider.symmetric_address_map(dst) is dst_map}
    ctx.barrier()
    _store_kernel[grid](dst, dst_map.peer_bases, N, rank, peer, 1000.0 * rank, BLOCK=BLOCK)
    torch.cuda.synchronize()
    ctx.barrier()
    results["store"] = torch.equal(dst, 1000.0 * left + torch.arange(N, dtype=torch.float32, device=dev))
    total = sum(rank_data(q, N, torch.float32, dev) for q in range(world))
    for algorithm in ("one_shot", "two_shot"):
        out, _ = provider.allocate_symmetric_map(N, dtype=torch.float32)
        out.fill_(poison_value(torch.float32))
        ctx.barrier()
        ctx.ccl.all_reduce(out, src, config=iris.ccl.CollectiveConfig(algorithm=algorithm))
        torch.cuda.synchronize()
        ctx.barrier()
        results[f"all_reduce {algorithm}"] = torch.equal(out, total)
    if world > 1:  # a table of another allocation's peers over dst's bytes
        stale = [b if r == rank else src_map.bases[r] for r, b in enumerate(dst_map.bases)]
        results["refused"] = error_message(iris.wrap_symmetric, dst, stale)
    ctx.barrier()
    return results


@pytest.mark.skipif(not on_gpu(), reason="torch's symmetric memory needs CUDA (it has no CPU backend); the cpu tier "
                    "runs the same device API and collectives on the test provider above")
@pytest.mark.parametrize("world_size", [1, 2])
def test_torch_symmetric_memory(pools, world_size):
    import torch as torch_host

    if world_size > torch_host.cuda.device_count():
        pytest.skip(f"torch's symmetric memory needs a GPU per rank; {torch_host.cuda.device_count()} visible")
    for rank, results in enumerate(pools(world_size).run(_torch_symm_mem_body)):
        refused = results.pop("refused", None)
        wrong = [name for name, right in results.items() if not right]
        assert not wrong, f"rank {rank}: wrong on torch's symmetric memory: {wrong}"
        assert len(results) == 8, sorted(results)
        if world_size > 1:
            assert refused.startswith("ValueError: iris.wrap_symmetric: rank 0: bytes ["), refused
            assert "made by TorchSymmMemProvider.symmetric_address_map for a tensor of shape (300,)" in refused, refused
