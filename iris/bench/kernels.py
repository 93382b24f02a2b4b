"""Kernels of the communication microbenchmarks, and their launchers.

Each bandwidth kernel is a grid-stride copy: a grid sized from the SM count (``programs_per_sm`` programs
per SM), each program walking ``BLOCK``-element tiles ``num_programs * BLOCK`` apart. Two versions of each
transfer, identical except for how the peer's address is formed:

- ``iris``: the library call (``iris.load/store/get/put`` and the atomics), which translates the pointer
  through ``heap_bases`` and restates the lost alignment with ``hint`` so the access stays 16-byte vectors;
- ``triton_raw``: what a user writes without the library: the peer address (``heap_bases[peer]`` +
  offset, computed on the host) passed as an int64 and cast to a pointer in the kernel. The cast drops the
  alignment the compiler knew (an int64 argument divisible by 16 does not make a 16-byte aligned
  pointer), so even this "plain" kernel needs ``tl.multiple_of`` to get ``st.global.v4``; without it the
  store is 32-bit and the baseline would be slower than a careful user's.

Loops over a runtime bound are ``while`` loops: Triton 3.6's interpreter (the cpu backend) cannot take a
runtime ``range`` bound under NumPy >= 2.4 (``int()`` of a one-element array). The compiled loop is the
same streaming loop either way.
"""

from dataclasses import dataclass

import triton
import triton.language as tl

from iris.device import atomics, rma
from iris.device.sync import behind

# A tile of 16 contiguous elements starting 16-byte aligned: enough for one 16-byte vector of any dtype we
# move (4 x fp32, 8 x bf16). True for every tile because buffers are 256-byte aligned (heap.ALIGNMENT,
# torch's allocator) and BLOCK is a multiple of 16.
HINT = 16
# Below this many tiles per SM the large block leaves SMs idle; small transfers use SMALL_BLOCK instead.
SMALL_BLOCK, SMALL_WARPS = 1024, 4
P2P_OPS = ("load", "store", "get", "put")
ATOMIC_OPS = ("add", "cas", "xchg")
PULL_OPS = ("load", "get")  # data flows peer -> caller; store and put push caller -> peer


@dataclass(frozen=True)
class CopyConfig:
    """Shape of the grid-stride copy kernels; the same on every rank and for every provider of one op."""

    block: int = 8192  # elements per tile (32 KiB of fp32)
    num_warps: int = 16  # 512 threads: 16 fp32 per thread, four 16-byte vectors in flight each
    programs_per_sm: int = 2

    def __post_init__(self):
        if self.block < 256 or self.block > 65536 or self.block & (self.block - 1):
            raise ValueError(f"CopyConfig: block={self.block} must be a power of two in [256, 65536]")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"CopyConfig: num_warps={self.num_warps} must be one of 1, 2, 4, 8, 16, 32")
        if not 1 <= self.programs_per_sm <= 32:
            raise ValueError(f"CopyConfig: programs_per_sm={self.programs_per_sm} must be in [1, 32]")

    def launch_shape(self, n, cu_count):
        """``(grid, BLOCK, num_warps)`` for ``n`` elements: the large block once every SM gets a tile of it."""
        block, warps = (self.block, self.num_warps) if n >= self.block * cu_count else (SMALL_BLOCK, SMALL_WARPS)
        grid = max(1, min(triton.cdiv(n, block), self.programs_per_sm * cu_count))
        return grid, block, warps


# ---------------------------------------------------------------------------------------------- iris
@triton.jit(do_not_specialize=["rank", "peer"])
def _p2p_kernel(local, remote, n, rank, peer, heap_bases, OP: tl.constexpr, BLOCK: tl.constexpr,
                HINT: tl.constexpr):
    """``load``/``get``: local[:n] = remote[:n] on ``peer``; ``store``/``put``: remote[:n] on ``peer`` = local."""
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)  # [BLOCK]
        mask = offs < n
        if OP == "load":
            x = rma.load(remote + offs, rank, peer, heap_bases, mask=mask, hint=HINT)
            tl.store(local + offs, x, mask=mask)
        elif OP == "store":
            x = tl.load(local + offs, mask=mask)
            rma.store(remote + offs, x, rank, peer, heap_bases, mask=mask, hint=HINT)
        elif OP == "get":
            rma.get(remote + offs, local + offs, rank, peer, heap_bases, mask=mask, hint=HINT)
        else:
            rma.put(local + offs, remote + offs, rank, peer, heap_bases, mask=mask, hint=HINT)
        start += step


@triton.jit(do_not_specialize=["rank"])
def _all_load_kernel(local, remote, n, rank, heap_bases, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr,
                     HINT: tl.constexpr):
    """local[:n] = sum over peers p != rank of remote[:n] on p; peers in the order rank+1, rank+2, ... so that
    the ranks do not all read the same GPU first."""
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)  # [BLOCK] fp32
        for k in tl.static_range(1, WORLD_SIZE):
            peer = (rank + k) % WORLD_SIZE
            acc += rma.load(remote + offs, rank, peer, heap_bases, mask=mask, hint=HINT).to(tl.float32)
        tl.store(local + offs, acc.to(local.dtype.element_ty), mask=mask)
        start += step


@triton.jit(do_not_specialize=["rank"])
def _all_store_kernel(local, remote_slot, n, rank, heap_bases, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr,
                      HINT: tl.constexpr):
    """remote_slot[:n] on every peer = local[:n]; ``remote_slot`` is this rank's own slot of the receive area,
    so the writers never overlap."""
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(local + offs, mask=mask)
        for k in tl.static_range(1, WORLD_SIZE):
            peer = (rank + k) % WORLD_SIZE
            rma.store(remote_slot + offs, x, rank, peer, heap_bases, mask=mask, hint=HINT)
        start += step


@triton.jit(do_not_specialize=["rank", "peer"])
def _atomic_kernel(remote, n, rank, peer, heap_bases, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr,
                   BLOCK: tl.constexpr, HINT: tl.constexpr):
    """One atomic per element of remote[:n] on ``peer``; n is a multiple of BLOCK (``atomic_cas`` has no mask).
    add: += 1; xchg: = 1; cas: 0 -> 1 (after the first pass the compare fails, still one round trip)."""
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        ptrs = remote + start + tl.arange(0, BLOCK)
        ones = tl.full([BLOCK], 1, remote.dtype.element_ty)  # [BLOCK]
        if OP == "add":
            atomics.atomic_add(ptrs, ones, rank, peer, heap_bases, sem=SEM, scope=SCOPE, hint=HINT)
        elif OP == "xchg":
            atomics.atomic_xchg(ptrs, ones, rank, peer, heap_bases, sem=SEM, scope=SCOPE, hint=HINT)
        else:
            atomics.atomic_cas(ptrs, ones - 1, ones, rank, peer, heap_bases, sem=SEM, scope=SCOPE, hint=HINT)
        start += step


# ---------------------------------------------------------------------------------------------- raw
@triton.jit
def _raw_copy_kernel(src, dst, n, PEER_IS_SRC: tl.constexpr, DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    """dst[:n] = src[:n] where one side is an int64 peer address cast to a pointer (no translation)."""
    if PEER_IS_SRC:
        src = tl.multiple_of(src.to(tl.pointer_type(DTYPE), bitcast=True), 16)
    else:
        dst = tl.multiple_of(dst.to(tl.pointer_type(DTYPE), bitcast=True), 16)
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)
        start += step


@triton.jit
def _raw_atomic_kernel(peer_addr, n, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr, DTYPE: tl.constexpr,
                       BLOCK: tl.constexpr):
    """``_atomic_kernel`` through a raw peer address."""
    remote = tl.multiple_of(peer_addr.to(tl.pointer_type(DTYPE), bitcast=True), 16)
    step = tl.num_programs(0) * BLOCK
    start = tl.program_id(0) * BLOCK
    while start < n:
        ptrs = remote + start + tl.arange(0, BLOCK)
        ones = tl.full([BLOCK], 1, DTYPE)
        if OP == "add":
            tl.atomic_add(ptrs, ones, sem=SEM, scope=SCOPE)
        elif OP == "xchg":
            tl.atomic_xchg(ptrs, ones, sem=SEM, scope=SCOPE)
        else:
            tl.atomic_cas(ptrs, ones - 1, ones, sem=SEM, scope=SCOPE)
        start += step


# ---------------------------------------------------------------------------------------------- latency
@triton.jit
def _poll(flag, RELAXED: tl.constexpr):
    if RELAXED:
        return tl.load(flag, volatile=True)
    else:
        return tl.atomic_add(flag, 0, sem="acquire", scope="sys")


@triton.jit
def _wait_at_least(flag, value, max_polls, RELAXED: tl.constexpr):
    """Spin on our own ``flag`` until it reaches ``value`` or ``max_polls`` polls pass; 1 if it did. Wrap-safe, as
    the library's waits (``behind``): the values are int32 counts of rounds, which wrap after 2**31 of them."""
    polls = 0
    seen = _poll(flag, RELAXED)
    while behind(seen, value) & (polls < max_polls):
        seen = _poll(flag, RELAXED)
        polls += 1
    return 1 - behind(seen, value).to(tl.int32)


@triton.jit(do_not_specialize=["rank", "peer", "is_ping"])
def _ping_pong_kernel(flag, peer_flag, epoch, status, n_rounds, max_polls, rank, peer, heap_bases, is_ping,
                      RAW: tl.constexpr, RELAXED: tl.constexpr):
    """One program. Round i: the ping side writes value=epoch+i+1 into the peer's flag and waits for the
    same value in its own; the pong side waits, then answers. Values only grow (``epoch`` is this rank's
    local count of rounds run so far; int32, wrapping, compared wrap-safe), so no round can read an earlier
    round's or call's flag. A side that
    waits ``max_polls`` polls in vain stops waiting and adds the rounds it gave up on to ``status``
    instead of hanging.

    RELAXED=False: release xchg (sys scope) and acquire polls: the protocol that publishes data.
    RELAXED=True: relaxed xchg and volatile polls: the flag alone, no ordering of other data."""
    base = tl.load(epoch)
    failed = 0
    i = 0
    while i < n_rounds:
        value = base + i + 1
        budget = tl.where(failed == 0, max_polls, 0)
        if is_ping == 0:
            failed += 1 - _wait_at_least(flag, value, budget, RELAXED)
        if RAW:
            target = peer_flag.to(tl.pointer_type(tl.int32), bitcast=True)
            if RELAXED:
                tl.atomic_xchg(target, value, sem="relaxed", scope="sys")
            else:
                tl.atomic_xchg(target, value, sem="release", scope="sys")
        else:
            if RELAXED:
                atomics.atomic_xchg(flag, value, rank, peer, heap_bases, sem="relaxed", scope="sys")
            else:
                atomics.atomic_xchg(flag, value, rank, peer, heap_bases, sem="release", scope="sys")
        if is_ping != 0:
            failed += 1 - _wait_at_least(flag, value, budget, RELAXED)
        i += 1
    tl.store(epoch, base + n_rounds)
    tl.store(status, tl.load(status) + failed)  # accumulates over calls; the host checks it once


# ---------------------------------------------------------------------------------------------- launchers
def p2p(op, local, remote, rank, peer, heap_bases, config, cu_count):
    """``op`` in ``P2P_OPS`` between ``local`` (this rank) and ``remote`` (a heap tensor, accessed on ``peer``)."""
    if op not in P2P_OPS:
        raise ValueError(f"p2p: op={op!r}; use one of {P2P_OPS}")
    n = local.numel()
    grid, block, warps = config.launch_shape(n, cu_count)
    _p2p_kernel[(grid,)](local, remote, n, rank, peer, heap_bases, OP=op, BLOCK=block, HINT=HINT, num_warps=warps)


def raw_copy(src, dst, n, peer_is_src, dtype, config, cu_count):
    """Copy ``n`` elements where the peer side (``src`` if ``peer_is_src`` else ``dst``) is an int address."""
    grid, block, warps = config.launch_shape(n, cu_count)
    _raw_copy_kernel[(grid,)](src, dst, n, PEER_IS_SRC=peer_is_src, DTYPE=_tl_dtype(dtype), BLOCK=block,
                              num_warps=warps)


def all_load(local, remote, rank, world_size, heap_bases, config, cu_count):
    n = local.numel()
    grid, block, warps = config.launch_shape(n, cu_count)
    _all_load_kernel[(grid,)](local, remote, n, rank, heap_bases, WORLD_SIZE=world_size, BLOCK=block, HINT=HINT,
                              num_warps=warps)


def all_store(local, remote_slot, rank, world_size, heap_bases, config, cu_count):
    n = local.numel()
    grid, block, warps = config.launch_shape(n, cu_count)
    _all_store_kernel[(grid,)](local, remote_slot, n, rank, heap_bases, WORLD_SIZE=world_size, BLOCK=block,
                               HINT=HINT, num_warps=warps)


def _atomic_shape(op, n, config, cu_count):
    if op not in ATOMIC_OPS:
        raise ValueError(f"atomic: op={op!r}; use one of {ATOMIC_OPS}")
    grid, block, warps = config.launch_shape(n, cu_count)
    block = min(block, n)
    if n % block or block & (block - 1):
        raise ValueError(f"atomic: n={n} elements must be a power of two or a multiple of {block} (atomic_cas "
                         "has no mask); pick a power-of-two buffer size")
    return max(1, min(grid, n // block)), block, warps


def atomic(op, remote, rank, peer, heap_bases, config, cu_count, sem="relaxed", scope="sys"):
    """One ``op`` atomic per element of the heap tensor ``remote``, performed on ``peer``'s copy."""
    grid, block, warps = _atomic_shape(op, remote.numel(), config, cu_count)
    _atomic_kernel[(grid,)](remote, remote.numel(), rank, peer, heap_bases, OP=op, SEM=sem, SCOPE=scope, BLOCK=block,
                            HINT=HINT, num_warps=warps)


def raw_atomic(op, peer_addr, n, dtype, config, cu_count, sem="relaxed", scope="sys"):
    grid, block, warps = _atomic_shape(op, n, config, cu_count)
    _raw_atomic_kernel[(grid,)](peer_addr, n, OP=op, SEM=sem, SCOPE=scope, DTYPE=_tl_dtype(dtype), BLOCK=block,
                                num_warps=warps)


def ping_pong(flag, peer_flag, epoch, status, n_rounds, rank, peer, heap_bases, is_ping, raw, relaxed,
              max_polls=1 << 26):
    """``n_rounds`` flag round trips with ``peer`` (one program); both sides must call it with the same
    ``n_rounds``. ``peer_flag`` is the peer's flag address as an int (used when ``raw``). ``max_polls``
    (2**26: tens of seconds of ~1 us polls on a GPU) only bounds a wait for a peer that never comes, such as
    one still compiling its first call."""
    _ping_pong_kernel[(1,)](flag, peer_flag, epoch, status, n_rounds, max_polls, rank, peer, heap_bases,
                            int(is_ping), RAW=raw, RELAXED=relaxed, num_warps=1)


def _tl_dtype(dtype):
    name = str(dtype).removeprefix("torch.")
    return getattr(tl, {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "int32": "int32",
                        "int64": "int64"}[name])
