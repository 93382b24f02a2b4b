"""The MoE dispatch and combine kernels (``iris/ccl/moe/dispatch.py`` launches them).

One call of dispatch + combine, every rank of the group running the same kernels on the same grids:

    route   | local, one program per block of ROUTE_BLOCK (token, slot) entries: each entry's rank among the
            | block's entries for the same expert, and the block's count per expert
    counts  | one program: the blocks' counts become exclusive prefixes (cumsum over blocks) and our count per
            | expert | barrier (no member still reads the last call's buffers) | store our counts into row
            | ``me`` of every member's count table | barrier (release / acquire: every row has landed) | from
            | the table, identical on every rank: where each expert's rows start in its owner's buffer, where
            | ours start among them (``start [E]``), and our experts' ``slice_sizes`` / ``slice_offs``
    rows    | each entry's row = start[e] + its block's prefix for e + its rank in the block (``dest_row``);
            | store each routed token row into its owner's receive buffer there, with its origin (source
            | shard, slot t * k + j) | barrier (every row sent to us has landed)
    push    | barrier (every source has reduced the last combine) | store each received row's expert output
            | into slot t * k + j of its source's combine buffer | barrier
    reduce  | local: out[t] = sum over j = 0 .. k-1 of the valid slots, fp32, rounded once

Nothing runs on the host between them and nothing is read back: five launches per dispatch + combine, which the
dispatcher remembers (``iris/host/launches.py``), so an eager call costs the host about what five launches cost.
The row of an entry is the same as a stable sort by expert would give: its rank among its own shard's entries
for that expert in (token, slot) order, after the rows of the shards before it.

The barriers are ``group_barrier``: each member adds one to its own counter on every member's heap (release,
sys scope) and waits for every member's counter to reach the same generation (acquire, sys scope). The counts
only grow, so a call never reads an earlier call's signal. Rows and payloads move as integers of their width,
so every bit (fp8 codes and their fp32 scales included) arrives as sent.
"""

import triton
import triton.language as tl

from iris.device.group import program_row, store_to_group
from iris.device.rma import store
from iris.device.sync import call_match, group_barrier, group_mismatched, open_call, store_host_word


@triton.jit(do_not_specialize=["n_entries"])
def _route_kernel(topk_idx, n_entries, rank_in_block, block_counts, n_experts, bad_id, BLOCK: tl.constexpr,
                  BLOCK_X: tl.constexpr, REPORT: tl.constexpr):
    """Block b = entries [b * BLOCK, (b + 1) * BLOCK) of the flat ``topk_idx``: ``rank_in_block[i]`` = how many
    entries of the block before i have i's expert, and ``block_counts[b, e]`` = the block's entries for e. Ids
    outside ``[0, n_experts)`` (-1 among them) count for no expert; entries past ``n_entries`` do not exist. With
    ``REPORT`` an id outside ``[-1, n_experts)`` is written to the host word at ``bad_id`` (an int address)."""
    b = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    offs = b * BLOCK + lane
    live = offs < n_entries
    ids = tl.load(topk_idx + offs, mask=live, other=-1)  # compared at its own width: int64 ids are not truncated
    key = tl.where((ids >= 0) & (ids < n_experts), ids, -1).to(tl.int32)
    if REPORT:
        wrong = live & ((ids < -1) | (ids >= n_experts))
        if tl.max(wrong.to(tl.int32), axis=0) > 0:
            first = tl.min(tl.where(wrong, lane, BLOCK), axis=0)
            store_host_word(bad_id, tl.sum(tl.where(lane == first, ids, 0).to(tl.int64), axis=0))
    # [BLOCK, BLOCK] compares: 16 K at 128 entries, a few per thread; a block is one decode step at T 16, k 8
    before = (key[:, None] == key[None, :]) & (lane[None, :] < lane[:, None])
    tl.store(rank_in_block + offs, tl.sum(before.to(tl.int32), axis=1), mask=live)
    for start in range(0, n_experts, BLOCK_X):
        experts = start + tl.arange(0, BLOCK_X)
        hits = tl.sum((key[:, None] == experts[None, :]).to(tl.int32), axis=0)
        tl.store(block_counts + b * n_experts + experts, hits, mask=experts < n_experts)


@triton.jit
def _counts_kernel(count_table, block_counts, n_blocks, n_experts, perm, segment_first, excl, start, sizes, offs,
                   local_first, n_local, sync, rows_to, GROUP_SIZE: tl.constexpr, N_BLOCKS: tl.constexpr,
                   BLOCK_X: tl.constexpr, BLOCK_P: tl.constexpr):
    """One program. ``block_counts [n_blocks, E]`` becomes its exclusive prefix over blocks, and the column sums
    (our count per expert) row ``group_index`` of every member's ``count_table [W, E]``. Then, from the table,
    for the experts in their owners' order (``perm``: shard by shard, local-id order; ``segment_first[p]``: the
    position of the first expert of p's shard): ``start[e]`` = the row where our rows for e begin in its owner's
    buffer (rows of e's owner's earlier experts, then of shards before us for e); and for our experts (positions
    ``local_first .. local_first + n_local``) ``sizes[l]`` and ``offs[l]`` (``offs[n_local]``: rows received).
    ``rows_to``: the buffers the rows kernel then writes on the members (rows, origins, scales), matched here with
    the count table, so that a mismatched dispatch stops before any row moves (``group_mismatched``)."""
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    buf, origins, buf_scales = rows_to
    match = call_match(sync, ((count_table, heap_bases), (buf, heap_bases), (origins, heap_bases),
                              (buf_scales, heap_bases)))  # what peers write in this dispatch (iris/device/sync.py)
    row = program_row(flags, world_size)
    blocks = tl.arange(0, N_BLOCKS)
    for first in range(0, n_experts, BLOCK_X):
        experts = first + tl.arange(0, BLOCK_X)
        mask = (blocks[:, None] < n_blocks) & (experts[None, :] < n_experts)
        at = block_counts + blocks[:, None] * n_experts + experts[None, :]
        counts = tl.load(at, mask=mask, other=0)  # [N_BLOCKS, BLOCK_X]
        tl.store(at, tl.cumsum(counts, 0) - counts, mask=mask)
        tl.store(excl + experts, tl.sum(counts, 0), mask=experts < n_experts)  # ours, staged locally
    tl.debug_barrier()  # the staged counts are read by other threads below
    # no member still reads its table, receive buffer or origins from the last call: it has reached this call
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        _exchange_counts(count_table, n_experts, perm, segment_first, excl, start, sizes, offs, local_first,
                         n_local, row, heap_bases, members, rank, group_index, match, GROUP_SIZE, BLOCK_X, BLOCK_P)


@triton.jit
def _exchange_counts(count_table, n_experts, perm, segment_first, excl, start, sizes, offs, local_first, n_local, row,
                     heap_bases, members, rank, group_index, match, GROUP_SIZE: tl.constexpr, BLOCK_X: tl.constexpr,
                     BLOCK_P: tl.constexpr):
    """``_counts_kernel`` past its opening barrier: our counts into every member's table, then the starts."""
    for first in range(0, n_experts, BLOCK_X):
        experts = first + tl.arange(0, BLOCK_X)
        mask = experts < n_experts
        store_to_group(count_table + group_index * n_experts + experts, tl.load(excl + experts, mask=mask), rank,
                       heap_bases, members, group_index, GROUP_SIZE, mask=mask)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every member's row has landed in our table
    tl.debug_barrier()  # excl is reused below: every thread has sent its staged counts
    carry = 0
    for first in range(0, n_experts, BLOCK_P):
        p = first + tl.arange(0, BLOCK_P)
        mask = p < n_experts
        e = tl.load(perm + p, mask=mask, other=0)
        total = tl.zeros([BLOCK_P], dtype=tl.int32)
        ahead = tl.zeros([BLOCK_P], dtype=tl.int32)  # rows of shards before us for e
        for s in tl.static_range(GROUP_SIZE):
            c = tl.load(count_table + s * n_experts + e, mask=mask, other=0)
            total += c
            if s < group_index:
                ahead += c
        before = carry + tl.cumsum(total, 0) - total  # rows of every expert earlier in perm order
        tl.store(excl + p, before, mask=mask)
        tl.debug_barrier()  # the segment's first position may be another thread's
        base = before - tl.load(excl + tl.load(segment_first + p, mask=mask, other=0), mask=mask, other=0)
        tl.store(start + e, base + ahead, mask=mask)
        l = p - local_first
        ours = mask & (l >= 0) & (l < n_local)
        tl.store(sizes + l, total, mask=ours)
        tl.store(offs + l, base, mask=ours)
        tl.store(offs + n_local + l * 0, base + total, mask=ours & (l == n_local - 1))
        carry += tl.sum(total, 0)


@triton.jit
def _push_row(dst, src, width, rank, peer, heap_bases, HINT: tl.constexpr, BLOCK: tl.constexpr):
    """``dst[:width]`` on ``peer`` = our ``src[:width]`` (both already offset to the row)."""
    for start in range(0, width, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < width
        store(dst + offs, tl.load(src + offs, mask=mask), rank, peer, heap_bases, mask=mask, hint=HINT)


@triton.jit(do_not_specialize=["n_tokens"])
def _dispatch_rows_kernel(tokens, topk_idx, scales, n_tokens, buf, origins, start, block_prefix, rank_in_block, owner,
                          dest_row, dest_shard, n_experts, hidden, slots, buf_scales, n_scales, sync, K: tl.constexpr,
                          GROUP_SIZE: tl.constexpr, HAS_SCALES: tl.constexpr, HINT: tl.constexpr,
                          ROUTE_BLOCK: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    """Token t's row goes to row ``d = start[e] + block_prefix[i // ROUTE_BLOCK, e] + rank_in_block[i]`` of
    ``buf`` on shard ``owner[e]`` for each slot j with an expert e (i = t*K + j), with its origin ``group_index *
    slots + i`` (``slots`` = max_tokens * K) and, with ``HAS_SCALES``, its ``n_scales`` scales; ``dest_row[i]`` =
    d, or -1 for no expert (combine's reduce reads it), and ``dest_shard[i]`` = the owner. Programs take tokens in
    turn; each token's row is read once per block and stored to each of its destinations."""
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((buf, heap_bases), (origins, heap_bases), (buf_scales, heap_bases)))
    if not group_mismatched(sync):  # the counts kernel matched this dispatch before any row moves
        _send_rows(tokens, topk_idx, scales, n_tokens, buf, origins, start, block_prefix, rank_in_block, owner,
                   dest_row, dest_shard, n_experts, hidden, slots, buf_scales, n_scales, members, rank, group_index,
                   heap_bases, K, HAS_SCALES, HINT, ROUTE_BLOCK, BLOCK, BLOCK_S)
        # every row sent to us has landed
        group_barrier(program_row(flags, world_size), heap_bases, members, rank, GROUP_SIZE, call=match)


@triton.jit
def _send_rows(tokens, topk_idx, scales, n_tokens, buf, origins, start, block_prefix, rank_in_block, owner, dest_row,
               dest_shard, n_experts, hidden, slots, buf_scales, n_scales, members, rank, group_index, heap_bases,
               K: tl.constexpr, HAS_SCALES: tl.constexpr, HINT: tl.constexpr, ROUTE_BLOCK: tl.constexpr,
               BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    """``_dispatch_rows_kernel``'s stores: this program's tokens' rows, scales and origins to their owners."""
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)  # row offsets pass 2**31 elements: 32 K rows x 7168 columns x 8 ranks
        for j in tl.static_range(K):
            i = t * K + j
            ids = tl.load(topk_idx + i)  # compared at its own width, as the route kernel counted it
            valid = (ids >= 0) & (ids < n_experts)
            e = tl.where(valid, ids, 0).to(tl.int32)
            d = tl.load(start + e) + tl.load(block_prefix + (i // ROUTE_BLOCK) * n_experts + e) + \
                tl.load(rank_in_block + i)
            tl.store(dest_row + i, tl.where(valid, d, -1))
            tl.store(dest_shard + i, tl.load(owner + e))
        tl.debug_barrier()  # the rows and shards just stored are read back below by every thread
        for start_h in range(0, hidden, BLOCK):
            offs = start_h + tl.arange(0, BLOCK)
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


@triton.jit
def _combine_push_kernel(expert_out, combine_buf, origins, n_received, hidden, slots, sync,
                         GROUP_SIZE: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    """Received row r (``r < *n_received``) goes back to slot ``origins[r] % slots`` of ``combine_buf`` on shard
    ``origins[r] // slots``, as ``expert_out[r]``."""
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((combine_buf, heap_bases),))  # peers write combine_buf (iris/device/sync.py)
    row = program_row(flags, world_size)
    # every source has reduced the last combine out of its combine buffer: it has reached this call
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        n = tl.load(n_received)
        for r in range(tl.program_id(0), n, tl.num_programs(0)):
            origin = tl.load(origins + r)
            source = origin // slots
            slot = tl.cast(origin - source * slots, tl.int64)
            peer = tl.load(members + source)
            _push_row(combine_buf + slot * hidden, expert_out + tl.cast(r, tl.int64) * hidden, hidden, rank, peer,
                      heap_bases, HINT, BLOCK)
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every row of ours has come back


@triton.jit
def _combine_reduce_kernel(out, weights, combine_buf, dest_row, hidden, K: tl.constexpr, WEIGHTED: tl.constexpr,
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
    tl.store(out + t * hidden + offs, acc.to(out.dtype.element_ty), mask=mask)


