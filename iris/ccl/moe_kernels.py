"""The MoE dispatch and combine kernels (``iris/ccl/moe_dispatch.py`` launches them).

One call of dispatch + combine, every rank of the group running the same kernels on the same grids:

    counts  | barrier (no member still reads the last call's buffers) | store our per-expert counts into row
            | ``me`` of every member's count table | barrier (release / acquire: every row has landed)
    (torch, on each rank's stream: offsets from the count table, identical on every rank)
    rows    | store each routed token row into its owner's receive buffer, at the row the offsets give, with
            | its origin (source shard, slot t * k + j) | barrier (every row sent to us has landed)
    push    | barrier (every source has reduced the last combine) | store each received row's expert output
            | into slot t * k + j of its source's combine buffer | barrier
    reduce  | local: out[t] = sum over j = 0 .. k-1 of the valid slots, fp32, rounded once

The barriers are ``group_barrier``: each member adds one to its own counter on every member's heap (release,
sys scope) and waits for every member's counter to reach the same generation (acquire, sys scope). The counts
only grow, so a call never reads an earlier call's signal. Rows and payloads move as integers of their width,
so every bit (fp8 codes and their fp32 scales included) arrives as sent.
"""

import triton
import triton.language as tl

from iris.ccl.device import program_row, store_to_group
from iris.device.rma import store
from iris.device.sync import group_barrier
from iris.device.translate import INTERPRETED


@triton.jit
def _counts_kernel(count_table, counts, n_experts, sync, GROUP_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    """One program: our ``counts [E]`` become row ``group_index`` of every member's ``count_table [W, E]``."""
    flags, heap_bases, members, rank, group_index, world_size = sync  # GroupSync.args
    row = program_row(flags, world_size)
    # no member still reads its table, receive buffer or origins from the last call: it has reached this call
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE, RELAXED=True)
    for start in range(0, n_experts, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_experts
        c = tl.load(counts + offs, mask=mask)  # [BLOCK] int32
        store_to_group(count_table + group_index * n_experts + offs, c, rank, heap_bases, members, group_index,
                       GROUP_SIZE, mask=mask)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every member's row has landed in our table


@triton.jit
def _push_row(dst, src, width, rank, peer, heap_bases, HINT: tl.constexpr, BLOCK: tl.constexpr):
    """``dst[:width]`` on ``peer`` = our ``src[:width]`` (both already offset to the row)."""
    for start in range(0, width, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < width
        store(dst + offs, tl.load(src + offs, mask=mask), rank, peer, heap_bases, mask=mask, hint=HINT)


@triton.jit
def _dispatch_rows_kernel(buf, origins, tokens, dest_row, dest_shard, n_tokens, hidden, slots, buf_scales, scales,
                          n_scales, sync, K: tl.constexpr, GROUP_SIZE: tl.constexpr, HAS_SCALES: tl.constexpr,
                          HINT: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    """Token t's row goes to ``buf[dest_row[t*K + j]]`` on shard ``dest_shard[t*K + j]`` for each slot j with a
    row >= 0, with its origin ``group_index * slots + t*K + j`` (``slots`` = max_tokens * K) and, with
    ``HAS_SCALES``, its ``n_scales`` scales. Programs take tokens in turn; each token's row is read once per
    block and stored to each of its destinations."""
    flags, heap_bases, members, rank, group_index, world_size = sync  # GroupSync.args
    row = program_row(flags, world_size)
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)  # row offsets pass 2**31 elements: 32 K rows x 7168 columns x 8 ranks
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < hidden
            x = tl.load(tokens + t64 * hidden + offs, mask=mask)  # [BLOCK], loaded once for all K slots
            for j in tl.static_range(K):
                d = tl.load(dest_row + t64 * K + j)
                if d >= 0:
                    peer = tl.load(members + tl.load(dest_shard + t64 * K + j))
                    store(buf + tl.cast(d, tl.int64) * hidden + offs, x, rank, peer, heap_bases, mask=mask, hint=HINT)
        for j in tl.static_range(K):
            d = tl.load(dest_row + t64 * K + j)
            if d >= 0:
                peer = tl.load(members + tl.load(dest_shard + t64 * K + j))
                if HAS_SCALES:
                    d64 = tl.cast(d, tl.int64)
                    _push_row(buf_scales + d64 * n_scales, scales + t64 * n_scales, n_scales, rank, peer, heap_bases,
                              None, BLOCK_S)
                store(origins + d, tl.cast(group_index * slots + t * K + j, tl.int32), rank, peer, heap_bases)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every row sent to us has landed


@triton.jit
def _combine_push_kernel(combine_buf, expert_out, origins, n_received, hidden, slots, sync,
                         GROUP_SIZE: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    """Received row r (``r < *n_received``) goes back to slot ``origins[r] % slots`` of ``combine_buf`` on shard
    ``origins[r] // slots``, as ``expert_out[r]``."""
    flags, heap_bases, members, rank, group_index, world_size = sync  # GroupSync.args
    row = program_row(flags, world_size)
    # every source has reduced the last combine out of its combine buffer: it has reached this call
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE, RELAXED=True)
    n = tl.load(n_received)
    for r in range(tl.program_id(0), n, tl.num_programs(0)):
        origin = tl.load(origins + r)
        source = origin // slots
        slot = tl.cast(origin - source * slots, tl.int64)
        peer = tl.load(members + source)
        _push_row(combine_buf + slot * hidden, expert_out + tl.cast(r, tl.int64) * hidden, hidden, rank, peer,
                  heap_bases, HINT, BLOCK)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every row of ours has come back


@triton.jit
def _combine_reduce_kernel(out, combine_buf, dest_row, weights, hidden, K: tl.constexpr, WEIGHTED: tl.constexpr,
                           BLOCK: tl.constexpr):
    """``out[t] = sum_j [dest_row[t*K+j] >= 0] * (weights[t*K+j] if WEIGHTED) * combine_buf[t*K+j]``: fp32, the
    slots added in order j = 0 .. K-1 whichever rank runs it, one rounding to ``out``'s dtype. Local."""
    t = tl.cast(tl.program_id(0), tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < hidden
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in tl.static_range(K):
        valid = tl.load(dest_row + t * K + j) >= 0
        x = tl.load(combine_buf + (t * K + j) * hidden + offs, mask=mask & valid, other=0.0).to(tl.float32)
        if WEIGHTED:
            x = x * tl.load(weights + t * K + j).to(tl.float32)
        acc += tl.where(valid, x, 0.0)  # a slot with no expert adds +0 even when its weight is not finite
    tl.store(out + t * hidden + offs, _round(acc, out.dtype.element_ty), mask=mask)


@triton.jit
def _round(acc, DTYPE: tl.constexpr):
    """fp32 ``acc`` rounded to nearest even in ``DTYPE``, as torch rounds. Compiled, ``.to`` is one cvt.rn; the
    interpreter's fp32 -> bf16 conversion does not round to nearest (it differs from torch in about half of random
    values), so there the rounding is done on the bits: add 0x7fff plus the kept lowest bit, keep the top half."""
    if INTERPRETED and DTYPE == tl.bfloat16:
        bits = acc.to(tl.uint32, bitcast=True)
        rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        rounded = tl.where(acc != acc, 0x7FC0, rounded)  # NaN stays NaN (the add could carry it to infinity)
        return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return acc.to(DTYPE)
