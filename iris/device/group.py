"""Device helpers shared by the collective kernels."""

import triton
import triton.language as tl

from iris.device.rma import load, store


@triton.jit
def first_block(BLOCK: tl.constexpr):
    """Where this program's first block starts, as int64. Element offsets pass 2**31 in large calls (an int8
    all_gather of 1.2e9 elements per rank over three ranks ends at 3.6e9), so the kernels loop over block starts
    in 64 bits and address a block as ``(ptr + start) + tl.arange(0, BLOCK)``: the 64-bit work is one scalar add
    per block, and the per-element offsets and masks stay 32-bit (``tail_mask``)."""
    return tl.program_id(0).to(tl.int64) * BLOCK


@triton.jit
def tail_mask(start, end, BLOCK: tl.constexpr):
    """[BLOCK] mask of the block at ``start`` (int64) that stays below ``end``, compared in 32 bits."""
    return tl.arange(0, BLOCK) < tl.minimum(end - start, BLOCK).to(tl.int32)


@triton.jit
def program_row(flags, world_size):
    """This program's row of the group's sync flags (row 0 belongs to ``device_barrier``): ``world_size`` words
    and a mismatch record (``iris/device/sync.py``)."""
    return flags + (tl.program_id(0) + 1) * (world_size + 1)


@triton.jit
def peer_at(members, group_index, i, GROUP_SIZE: tl.constexpr):
    """The ``i``-th member counting from ourselves: each rank starts on a different peer, spreading links."""
    return tl.load(members + (group_index + i) % GROUP_SIZE)


@triton.jit
def store_to_group(ptr, value, rank, heap_bases, members, group_index, GROUP_SIZE: tl.constexpr, mask=None,
                   hint: tl.constexpr = None, PEERS_FIRST: tl.constexpr = False):
    """``ptr[...] = value`` on every member's heap (``ptr`` in ours): ourselves first, then the members after
    us in turn (``peer_at``); with ``PEERS_FIRST``, ourselves last. ``hint`` keeps the remote stores
    vectorised, as for ``iris.store``. Unrolled, so a tile loop around it can still be flattened."""
    for i in tl.static_range(GROUP_SIZE):
        j = (i + 1) % GROUP_SIZE if PEERS_FIRST else i
        store(ptr, value, rank, peer_at(members, group_index, j, GROUP_SIZE), heap_bases, mask=mask, hint=hint)


@triton.jit
def combine(acc, x, OP: tl.constexpr):
    if OP == "max":
        return tl.maximum(acc, x)
    elif OP == "min":
        return tl.minimum(acc, x)
    else:  # sum, avg
        return acc + x


@triton.jit
def finish(acc, OP: tl.constexpr, GROUP_SIZE: tl.constexpr):
    if OP == "avg":
        return acc / GROUP_SIZE
    else:
        return acc


@triton.jit
def reduce_from_group(ptr, offs, mask, heap_bases, members, rank, group_index, GROUP_SIZE: tl.constexpr,
                      OP: tl.constexpr, ACC_FP32: tl.constexpr, HINT: tl.constexpr):
    """``OP`` over every member of ``ptr[offs]`` (``ptr`` the block's start, ``offs`` 32-bit), finished (avg
    divides) and in the accumulation type: fp32 when ``ACC_FP32`` (fp16/bf16 inputs), else the input type.

    The members are combined in group order (member 0's block, then 1's, ... on every rank, ours among them),
    so every rank that reduces the same block rounds the same way and gets the same bits: the order rule of
    every reduction in iris (``docs/design.md``). Unrolled, so that the members' loads are all in flight before
    the first add; alone in its group, a rank reads its block directly (no translation: the member and heap-base
    loads a translated address waits for cost 0.05-0.12 us of a world-size-1 one-shot all_reduce on one H200)."""
    if GROUP_SIZE == 1:
        acc = tl.load(ptr + offs, mask=mask)  # [BLOCK]
    else:
        acc = load(ptr + offs, rank, tl.load(members), heap_bases, mask=mask, hint=HINT)  # [BLOCK]
    if ACC_FP32:
        acc = acc.to(tl.float32)
    for i in tl.static_range(1, GROUP_SIZE):
        x = load(ptr + offs, rank, tl.load(members + i), heap_bases, mask=mask, hint=HINT)  # [BLOCK]
        acc = combine(acc, x.to(acc.dtype), OP)
    return finish(acc, OP, GROUP_SIZE)


@triton.jit
def reduce_blocks(out, inp, n, heap_bases, members, rank, group_index, GROUP_SIZE: tl.constexpr, OP: tl.constexpr,
                  ACC_FP32: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    """``out[:n]`` = ``OP`` over every member of ``inp[:n]`` (``reduce_from_group``), in ``out``'s dtype: this
    program's blocks, a grid-stride loop (the one-shot all_reduce's data phase, and reduce_scatter_v's)."""
    for start in range(first_block(BLOCK), n, tl.num_programs(0) * BLOCK):
        offs = tl.arange(0, BLOCK)
        mask = tail_mask(start, n, BLOCK)
        acc = reduce_from_group(inp + start, offs, mask, heap_bases, members, rank, group_index, GROUP_SIZE, OP,
                                ACC_FP32, HINT)  # [BLOCK]
        tl.store(out + start + offs, acc.to(out.dtype.element_ty), mask=mask)
