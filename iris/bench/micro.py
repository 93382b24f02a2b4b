"""The communication microbenchmarks as sweeps: point-to-point load/store/get/put (curve over size and a rank x
rank matrix), all-load/all-store, remote atomics, and the flag ping-pong; each beside what a user would
use instead. ``benchmarks/`` and ``examples/`` run them; see ``docs/perf-notes.md`` for what to expect.

Providers:

- ``iris``: the kernels of ``iris.bench.kernels`` through the device API;
- ``triton_raw``: the same kernels, with the peer address cast from an int64 (no ``iris.translate``);
- ``copy_engine``: ``tensor.copy_`` between this rank's tensor and a view of the peer's heap
  (``iris.host.memory.peers.peer_view``), i.e. ``cudaMemcpyAsync`` on a copy engine;
- ``torch_dist``: ``torch.distributed.all_gather_into_tensor`` (NCCL on GPUs), for all-load/all-store.

Bytes and bandwidth: a point-to-point op moves ``bytes`` one way over one link; all-load/all-store count
the bytes one rank receives (all-load) or sends (all-store) over all its links, ``(world_size - 1) x``
its buffer; an atomic op counts 4 bytes per element. busbw equals algbw for all of them, so that it is
what one GPU's links carry in one direction, comparable to the link rate (450 GB/s per direction on H200).
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from iris.bench import kernels
from iris.host.memory.peers import peer_address, peer_view
from iris.bench.harness import Point, Sweep, Timing, run_sweep

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PROVIDERS_P2P = ("iris", "triton_raw", "copy_engine")
PROVIDERS_ALL = ("iris", "copy_engine", "torch_dist")
PROVIDERS_ATOMIC = ("iris", "triton_raw")
ATOMIC_DTYPES = {"atomic_add": torch.float32, "atomic_cas": torch.int32, "atomic_xchg": torch.int32}
# torch 2.13 renamed all_gather_into_tensor (same semantics); take whichever this torch has.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass(frozen=True)
class Profile:
    """Sizes and repeat counts of one microbenchmark run."""

    sizes: tuple  # bytes per rank for the p2p curve and all-load/all-store
    matrix_bytes: int  # size of the rank x rank matrix
    atomic_sizes: tuple
    pingpong_rounds: int
    timing: Timing = field(default_factory=Timing)
    rotate_bytes: int = None  # rotate buffers until this many bytes are touched; None: 4 x L2 on GPUs
    dtype: torch.dtype = torch.float32

    def __post_init__(self):
        itemsize = torch.empty(0, dtype=self.dtype).element_size()
        for size in self.sizes + self.atomic_sizes + (self.matrix_bytes,):
            if size < 16 * itemsize or size & (size - 1):
                raise ValueError(f"Profile: size {size} bytes must be a power of two of at least 16 elements")
        if max(self.atomic_sizes + (self.matrix_bytes,)) > max(self.sizes):
            raise ValueError("Profile: atomic_sizes and matrix_bytes must not exceed the largest of sizes")
        if self.pingpong_rounds < 1:
            raise ValueError(f"Profile: pingpong_rounds={self.pingpong_rounds} must be >= 1")

    @property
    def max_bytes(self):
        return max(self.sizes)

    def heap_bytes(self, world_size):
        """Heap needed: one receive slot of ``max_bytes`` per rank, plus room for flags."""
        return world_size * self.max_bytes + 16 * MiB


# 4 KiB .. 1 GiB in x4 steps, then 2 GiB: 11 sizes. Repeats shrink with size (Timing.budget_ms): a 2 GiB
# transfer at ~390 GB/s takes 5.5 ms, so ~11 samples; sub-0.5 ms points are CUDA-graph batches.
FULL = Profile(sizes=tuple(4 * KiB * 4 ** k for k in range(10)) + (2 * GiB,), matrix_bytes=GiB,
               atomic_sizes=tuple(4 * KiB * 4 ** k for k in range(9)), pingpong_rounds=10000,
               timing=Timing(warmup=3, repeat=20, min_repeat=5, budget_ms=60.0))
# The cpu backend at tiny sizes: every code path, meaningless numbers.
QUICK = Profile(sizes=(4 * KiB, 16 * KiB), matrix_bytes=4 * KiB, atomic_sizes=(4 * KiB,), pingpong_rounds=3,
                timing=Timing(warmup=1, repeat=2, min_repeat=2, budget_ms=1.0, batch_ms=0.5, max_batch=2),
                rotate_bytes=32 * KiB)


class Buffers:
    """Every buffer the microbenchmarks use, allocated once (the heap never frees): collective.

    ``recv`` (heap, world_size slots of ``max_bytes``): the remote side of p2p ops and atomics (slot 0)
    and the receive area of all-store (slot r for writer r). ``src``/``dst``: local buffers, off the heap.
    Each rank's ``src`` holds rank + 1 and its ``recv`` holds -(rank + 1), so moved data is recognisable.
    """

    def __init__(self, ctx, profile):
        self.ctx, self.profile = ctx, profile
        self.rank, self.world_size = ctx.get_rank(), ctx.get_num_ranks()
        if self.world_size < 2:  # rank 0's peer, rank 1, would be read off the end of the heap table
            raise ValueError(f"micro.Buffers: the microbenchmarks move data between ranks and need at least 2, this "
                             f"run has {self.world_size}; start 2 ranks (--world-size 2; on one GPU with "
                             "IRIS_BACKEND=simulation)")
        self.dtype, device = profile.dtype, ctx.get_device()
        self.n_max = profile.max_bytes // self.itemsize
        self.recv = ctx.full((self.world_size * self.n_max,), -float(self.rank + 1), dtype=self.dtype)
        self.flag = ctx.zeros(64, dtype=torch.int32)[:1]  # its own 256-byte line
        self.src = torch.full((self.n_max,), float(self.rank + 1), dtype=self.dtype, device=device)
        self.dst = torch.zeros(self.n_max, dtype=self.dtype, device=device)
        self.epoch = torch.zeros(1, dtype=torch.int32, device=device)
        self.status = torch.zeros(1, dtype=torch.int32, device=device)
        self._gather = None
        self.cu_count = ctx.get_cu_count()
        self.heap_bases = ctx.get_heap_bases()
        rotate = profile.rotate_bytes
        if rotate is None:
            rotate = 4 * torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 0
        self.rotate_bytes = rotate
        self.pull_config = self.push_config = kernels.CopyConfig()
        ctx.barrier()  # every rank's recv is filled before a peer's first load reads it

    @property
    def itemsize(self):
        return torch.empty(0, dtype=self.dtype).element_size()

    def sets(self, nbytes):
        """How many disjoint buffer sets to rotate through at this size (at most 64)."""
        return max(1, min(64, -(-self.rotate_bytes // nbytes), self.profile.max_bytes // nbytes))

    def gather(self):
        """Local [world_size * n_max] output for all_gather and the copy engine's all-load."""
        if self._gather is None:
            self._gather = torch.empty(self.world_size * self.n_max, dtype=self.dtype, device=self.ctx.get_device())
        return self._gather


# ---------------------------------------------------------------------------------------------- p2p
def _p2p_fn(bufs, provider, op, n, offset, actor, target):
    local = (bufs.dst if op in kernels.PULL_OPS else bufs.src)[offset:offset + n]
    remote = bufs.recv[offset:offset + n]
    config = bufs.pull_config if op in kernels.PULL_OPS else bufs.push_config
    ctx = bufs.ctx
    if provider == "iris":
        return lambda: kernels.p2p(op, local, remote, actor, target, bufs.heap_bases, config, bufs.cu_count)
    if provider == "triton_raw":
        address = peer_address(ctx, remote, target)
        if op in kernels.PULL_OPS:
            return lambda: kernels.raw_copy(address, local, n, True, bufs.dtype, config, bufs.cu_count)
        return lambda: kernels.raw_copy(local, address, n, False, bufs.dtype, config, bufs.cu_count)
    if provider == "copy_engine":
        view = peer_view(ctx, remote, target)
        if op in kernels.PULL_OPS:
            return lambda: local.copy_(view)
        return lambda: view.copy_(local)
    raise ValueError(f"p2p: unknown provider {provider!r}; use one of {PROVIDERS_P2P}")


def _expect_equal(what, tri, ref):
    if not torch.equal(tri, ref):
        bad = int((tri != ref).nonzero()[0, 0])
        raise RuntimeError(f"{what}: wrong data after the warm-up: element {bad} is {tri[bad].item()}, expected "
                           f"{ref[bad].item()}")


def p2p_point(bufs, provider, op, nbytes, actor, target):
    """``actor`` runs ``op`` against ``target``'s memory; every other rank idles. After the warm-up the
    actor checks the first buffer set against the peer's memory (read through a peer view)."""
    n = nbytes // bufs.itemsize
    fns = None
    if bufs.rank == actor:
        fns = [_p2p_fn(bufs, provider, op, n, i * n, actor, target) for i in range(bufs.sets(nbytes))]

    def check():
        if bufs.rank == actor:
            theirs = peer_view(bufs.ctx, bufs.recv[:n], target)
            mine = (bufs.dst if op in kernels.PULL_OPS else bufs.src)[:n]
            pull = op in kernels.PULL_OPS  # the destination first, then the source it must equal
            _expect_equal(f"{op} {provider} {actor}->{target}", mine if pull else theirs, theirs if pull else mine)
    return Point(fns, bytes=nbytes, dtype=str(bufs.dtype).removeprefix("torch."), shape=(n,),
                 variant=f"{actor}->{target}", check=check)


def p2p_curve(bufs, ops=kernels.P2P_OPS, providers=PROVIDERS_P2P, sizes=None, pair=(0, 1), progress=True):
    """``ops`` from rank ``pair[0]`` against rank ``pair[1]`` over ``sizes``."""
    sizes = bufs.profile.sizes if sizes is None else sizes
    sweep = Sweep("p2p", {"op": tuple(ops), "bytes": tuple(sizes)}, tuple(providers),
                  lambda provider, op, bytes: p2p_point(bufs, provider, op, bytes, *pair), bufs.profile.timing)
    return run_sweep(bufs.ctx, sweep, progress)


def p2p_matrix(bufs, ops=kernels.P2P_OPS, providers=PROVIDERS_P2P, nbytes=None, skip=(), progress=True):
    """Every ordered pair (initiator, peer) of distinct ranks at one size; pairs in ``skip`` are left out
    (already measured by the curve)."""
    nbytes = bufs.profile.matrix_bytes if nbytes is None else nbytes
    pairs = tuple((a, b) for a in range(bufs.world_size) for b in range(bufs.world_size)
                  if a != b and (a, b) not in skip)
    if not pairs:
        return []
    sweep = Sweep("p2p matrix", {"op": tuple(ops), "pair": pairs}, tuple(providers),
                  lambda provider, op, pair: p2p_point(bufs, provider, op, nbytes, *pair), bufs.profile.timing)
    return run_sweep(bufs.ctx, sweep, progress)


# ---------------------------------------------------------------------------------------------- all
def _concurrently(device, fns):
    """Run ``fns`` on one side stream each, joined back into the current stream (serially on the cpu)."""
    if device.type != "cuda" or len(fns) == 1:
        def serial():
            for fn in fns:
                fn()
        return serial
    streams = [torch.cuda.Stream(device) for _ in fns]

    def fan_out():
        current = torch.cuda.current_stream(device)
        for stream, fn in zip(streams, fns):
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                fn()
        for stream in streams:
            current.wait_stream(stream)
    return fan_out


def _all_fn(bufs, provider, op, n, offset):
    ctx, rank, world = bufs.ctx, bufs.rank, bufs.world_size
    src = bufs.src[offset:offset + n]

    def slot(r):  # rank r's receive slot, at this rotation offset
        return bufs.recv[r * bufs.n_max + offset:r * bufs.n_max + offset + n]

    peers = [(rank + k) % world for k in range(1, world)]
    if provider == "iris":
        if op == "all_load":
            out, remote, config = bufs.dst[offset:offset + n], slot(0), bufs.pull_config
            return lambda: kernels.all_load(out, remote, rank, world, bufs.heap_bases, config, bufs.cu_count)
        remote, config = slot(rank), bufs.push_config
        return lambda: kernels.all_store(src, remote, rank, world, bufs.heap_bases, config, bufs.cu_count)
    if provider == "copy_engine":
        gather = bufs.gather()
        if op == "all_load":
            copies = [(gather[p * n:(p + 1) * n], peer_view(ctx, slot(0), p)) for p in peers]
        else:
            copies = [(peer_view(ctx, slot(rank), p), src) for p in peers]
        return _concurrently(ctx.get_device(), [lambda d=d, s=s: d.copy_(s) for d, s in copies])
    if provider == "torch_dist":
        out = bufs.gather()[:world * n]
        return lambda: _ALL_GATHER(out, src)
    raise ValueError(f"all-load/all-store: unknown provider {provider!r}; use one of {PROVIDERS_ALL}")


def all_point(bufs, provider, op, nbytes):
    n = nbytes // bufs.itemsize
    if provider == "torch_dist" and bufs.ctx.get_device().type == "cuda" and dist.get_backend() != "nccl":
        return None  # simulation mode (ranks share GPUs) runs gloo, which cannot gather CUDA tensors
    if provider == "torch_dist":
        sets = 1  # all_gather's output is world_size buffers: rotation would need world_size x the memory
    else:
        sets = bufs.sets(nbytes)
    fns = [_all_fn(bufs, provider, op, n, i * n) for i in range(sets)]
    check = None if provider == "torch_dist" else lambda: _check_all(bufs, provider, op, n)
    peers = bufs.world_size - 1
    moved = peers * nbytes
    # NCCL collectives are not captured: eager collectives (the harness's own exchanges) and graphed ones on
    # one communicator need care we do not need; small all_gathers are timed as back-to-back eager calls.
    return Point(fns, bytes=moved, dtype=str(bufs.dtype).removeprefix("torch."), shape=(n,),
                 variant=f"{peers} peer{'s' if peers > 1 else ''}", graph=provider != "torch_dist", check=check)


def _check_all(bufs, provider, op, n):
    """After the warm-up, the first buffer set: what this rank gathered (all-load) or what its peers hold in
    its slot (all-store), against the peers' memory read through peer views."""
    ctx, rank, world = bufs.ctx, bufs.rank, bufs.world_size
    peers = [(rank + k) % world for k in range(1, world)]
    what = f"{op} {provider} on rank {rank}"
    if op == "all_store":
        for p in peers:
            _expect_equal(f"{what}, slot {rank} on rank {p}",
                          peer_view(ctx, bufs.recv[rank * bufs.n_max:rank * bufs.n_max + n], p), bufs.src[:n])
    elif provider == "iris":
        ref = torch.zeros(n, dtype=torch.float32, device=ctx.get_device())
        for p in peers:
            ref += peer_view(ctx, bufs.recv[:n], p).float()
        _expect_equal(what, bufs.dst[:n], ref.to(bufs.dtype))
    else:
        for p in peers:
            _expect_equal(f"{what}, from rank {p}", bufs.gather()[p * n:(p + 1) * n],
                          peer_view(ctx, bufs.recv[:n], p))


def all_sweep(bufs, ops=("all_load", "all_store"), providers=PROVIDERS_ALL, sizes=None, progress=True):
    sizes = bufs.profile.sizes if sizes is None else sizes
    sweep = Sweep("all", {"op": tuple(ops), "bytes": tuple(sizes)}, tuple(providers),
                  lambda provider, op, bytes: all_point(bufs, provider, op, bytes), bufs.profile.timing)
    return run_sweep(bufs.ctx, sweep, progress)


# ---------------------------------------------------------------------------------------------- atomics
def atomic_point(bufs, provider, op, nbytes, actor=0, target=1):
    dtype = ATOMIC_DTYPES[op]
    name = op.removeprefix("atomic_")
    n = nbytes // 4
    fns = None
    if bufs.rank == actor:
        fns = []
        for i in range(bufs.sets(nbytes)):
            remote = bufs.recv.view(dtype)[i * n:(i + 1) * n]
            if provider == "iris":
                fns.append(lambda r=remote: kernels.atomic(name, r, actor, target, bufs.heap_bases, bufs.push_config,
                                                           bufs.cu_count))
            elif provider == "triton_raw":
                address = peer_address(bufs.ctx, remote, target)
                fns.append(lambda a=address: kernels.raw_atomic(name, a, n, dtype, bufs.push_config, bufs.cu_count))
            else:
                raise ValueError(f"atomics: unknown provider {provider!r}; use one of {PROVIDERS_ATOMIC}")
    return Point(fns, bytes=nbytes, dtype=str(dtype).removeprefix("torch."), shape=(n,),
                 variant=f"{actor}->{target} relaxed sys")


def atomic_sweep(bufs, ops=tuple(ATOMIC_DTYPES), providers=PROVIDERS_ATOMIC, sizes=None, progress=True):
    sizes = bufs.profile.atomic_sizes if sizes is None else sizes
    sweep = Sweep("atomics", {"op": tuple(ops), "bytes": tuple(sizes)}, tuple(providers),
                  lambda provider, op, bytes: atomic_point(bufs, provider, op, bytes), bufs.profile.timing)
    return run_sweep(bufs.ctx, sweep, progress)


# ---------------------------------------------------------------------------------------------- latency
def pingpong_point(bufs, provider, order, rounds, pair=(0, 1)):
    """One-way flag latency: ``rounds`` round trips per call, time / (2 x rounds)."""
    if provider not in PROVIDERS_ATOMIC:
        raise ValueError(f"ping-pong: unknown provider {provider!r}; use one of {PROVIDERS_ATOMIC}")
    fns = None
    if bufs.rank in pair:
        other = pair[1] if bufs.rank == pair[0] else pair[0]
        address = peer_address(bufs.ctx, bufs.flag, other)
        is_ping = bufs.rank == pair[0]

        def call():
            kernels.ping_pong(bufs.flag, address, bufs.epoch, bufs.status, rounds, bufs.rank, other,
                              bufs.heap_bases, is_ping, raw=provider == "triton_raw", relaxed=order == "relaxed")
        fns = [call]
    return Point(fns, bytes=4, dtype="int32", shape=(1,), variant=f"{order} one-way", ops_per_call=2 * rounds,
                 graph=False)


def pingpong_sweep(bufs, orders=("acq_rel", "relaxed"), providers=PROVIDERS_ATOMIC, progress=True):
    rounds = bufs.profile.pingpong_rounds
    sweep = Sweep("flag_pingpong", {"order": tuple(orders)}, tuple(providers),
                  lambda provider, order: pingpong_point(bufs, provider, order, rounds), bufs.profile.timing)
    rows = run_sweep(bufs.ctx, sweep, progress)
    failed = int(bufs.status.item())
    if failed:
        raise RuntimeError(f"flag ping-pong: rank {bufs.rank} gave up waiting for its peer's flag in {failed} "
                           "round(s); the peer never answered (is it running the same sweep?)")
    return rows


# ---------------------------------------------------------------------------------------------- tuning
TUNE_CANDIDATES = (kernels.CopyConfig(4096, 8, 4), kernels.CopyConfig(8192, 16, 2), kernels.CopyConfig(8192, 8, 4),
                   kernels.CopyConfig(16384, 16, 2), kernels.CopyConfig(16384, 32, 1))


def tune_copy(bufs, candidates=TUNE_CANDIDATES, nbytes=None, pair=(0, 1), progress=True):
    """Pick the copy-kernel shape for pulls (timing ``load``) and pushes (timing ``store``) with the iris
    provider at ``nbytes``, and set it on ``bufs`` for every later point of every provider. The choice is
    made from gathered results, so it is the same on every rank. Returns the rows, one per candidate."""
    nbytes = bufs.profile.matrix_bytes if nbytes is None else nbytes
    rows, best = [], {}
    for op in ("load", "store"):
        for config in candidates:
            bufs.pull_config = bufs.push_config = config
            row, = p2p_curve(bufs, ops=(op,), providers=("iris",), sizes=(nbytes,), pair=pair, progress=False)
            row["variant"] = describe_config(config)
            rows.append(row)
            if op not in best or row["busbw_GBps"] > best[op][0]:
                best[op] = (row["busbw_GBps"], config)
        if progress and bufs.rank == 0:
            print(f"[bench] tuned {op}: {describe_config(best[op][1])} ({best[op][0]:.4g} GB/s)", flush=True)
    bufs.pull_config, bufs.push_config = best["load"][1], best["store"][1]
    return rows


def describe_config(config):
    return f"block={config.block} warps={config.num_warps} programs/SM={config.programs_per_sm}"
