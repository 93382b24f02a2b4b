"""Expert-parallel MoE dispatch and combine on the symmetric heap: ``ctx.ccl.moe_dispatcher(...)``.

``dispatch`` sends each token's row to the shards that own its top-k experts; each shard receives its experts'
rows grouped by expert, in (source shard, source token) order within an expert. ``combine`` sends each expert's
output row back and sums a token's rows over its experts, in the top-k slot order, in fp32, rounded once.
Upstream Iris's names and call shapes (``MoEDispatcher``, ``MoEDispatchConfig``, ``DispatchHandle``).

Memory: every buffer is the library's, made once when the dispatcher is made and reused by every call: a receive
buffer of ``capacity = W * max_tokens * k`` rows (the most one shard can receive: every token of every shard
routed to it k times), their origins, a ``[W, E]`` count table and a ``max_tokens * k``-row combine buffer on the
heap; local int32 scratch of a few ``max_tokens * k`` and ``E``-sized arrays (the route kernel's ranks and counts
per block of 128 entries, offsets, where each row goes) and the returned ``meta``. At the DeepSeek shape on 8 shards
(4096 tokens, H 7168, k 8, bf16) the receive buffer is 3.8 GB per rank.

Host path: a dispatch is three kernel launches and a combine two (``moe_kernels.py``), remembered per token count
and dtypes in the dispatcher's launch cache (``iris/host/launches.py``): nothing is computed, allocated or read back
on the host per call but the output of combine; the expert ids are checked by the route kernel, which writes one
outside the range into host memory that the next call reads (``MoEDispatchConfig.validate``), so no call waits.
"""

import itertools
from dataclasses import dataclass

import torch
import torch.distributed as dist
import triton

from iris.ccl import common
from iris.ccl.moe.kernels import (_combine_push_kernel, _combine_reduce_kernel, _counts_kernel, _dispatch_rows_kernel,
                                  _route_kernel)
from iris.ccl.moe.routing import (ExptAssignment, RaggedTensorMetadata, make_expt_assignment, make_expt_dict_uniform,
                                  owners)
from iris.host import launches
from iris.host.distributed import Context
from iris.host.groups import MAX_COMM_PROGRAMS

ID_DTYPES = (torch.int16, torch.int32, torch.int64)
FP8 = getattr(torch, "float8_e4m3fn", None)
DTYPES = (torch.bfloat16, torch.float16, torch.float32) + ((FP8,) if FP8 is not None else ())
SCALE_COLUMNS = 128  # FP8 rows carry one fp32 scale per 128 columns (DeepEP's recipe)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}  # rows travel as integers of their width
_SERIAL = itertools.count()
# (token, slot) entries per program of the route kernel: its [128, 128] compares are 128 per thread at 4 warps; the
# DeepSeek prefill shape (4096 tokens x 8) is 256 programs, decode (128 x 8) is 8
ROUTE_BLOCK = 128
# What a dispatch returns as ``buf``: the rows, or with an FP8 dtype the pair ``(rows, row_scales)``
Rows = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class MoEDispatchConfig:
    """``dispatch_block_size`` / ``combine_block_size``: elements of a row each program moves per step (powers of
    two); 1024 bf16 over ``num_warps=4`` (128 threads) is one 16-byte vector per thread. ``comm_sms``: programs
    per kernel (None: 128 on GPUs, about one per SM of an H100/H200; 2 on the cpu backend, where every
    program runs in Python); the same on every
    rank, since the kernels' barriers pair programs of the same number.
    ``validate``: report an expert id outside ``[-1, E)`` (the route kernel notes one in host memory: no
    synchronisation; the dispatch raises ``ValueError`` on the cpu backend, on GPUs the dispatcher's first call
    after the kernel has run, or ``check()``), and let combine take an ``expert_out`` shorter than the capacity if
    it has the rows in use (one host synchronisation, only then); off, such ids are dropped silently and
    ``expert_out`` must have ``capacity`` rows. Ids outside the range count as -1 either way: they never reach
    another expert's rows. Inside a CUDA graph capture the rows check is skipped.

    Raises ``ValueError`` for block sizes that are not powers of two >= 16, ``num_warps`` other than 1 to 32 in
    powers of two, or ``comm_sms`` outside ``[1, 256]``.

    Example::

        config = iris.ccl.MoEDispatchConfig(comm_sms=2, validate=False)  # the same on every rank
        d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=world_size, topk=1, max_tokens=8, config=config)
    """

    dispatch_block_size: int = 1024
    combine_block_size: int = 1024
    num_warps: int = 4
    comm_sms: int | None = None
    validate: bool = True

    def __post_init__(self):
        for name in ("dispatch_block_size", "combine_block_size"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"MoEDispatchConfig: {name}={value} must be a power of two >= 16")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"MoEDispatchConfig: num_warps={self.num_warps}; use 1, 2, 4, 8, 16 or 32")
        if self.comm_sms is not None and not 1 <= self.comm_sms <= MAX_COMM_PROGRAMS:
            raise ValueError(f"MoEDispatchConfig: comm_sms={self.comm_sms} is outside [1, {MAX_COMM_PROGRAMS}]")


@dataclass(frozen=True)
class DispatchHandle:
    """What ``combine`` needs from its ``dispatch``: where each of our (token, slot) rows went (``dest_row``, the
    dispatcher's int32 ``[max_tokens * k]``, first ``T * k`` in use, -1 for no expert), the gate weights (fp32
    ``[T, k]``), the receive metadata, and the call it belongs to (a later dispatch invalidates it).

    Example::

        d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=world_size, topk=2, max_tokens=4)
        tokens = ctx.randn(3, 32, dtype=torch.bfloat16)
        topk_idx = torch.tensor([[0, -1]] * 3, device=ctx.get_device())  # expert 0 only (-1: no expert)
        buf, meta, handle = d.dispatch(tokens, topk_idx, torch.ones(3, 2, device=ctx.get_device()))
        assert (handle.n_tokens, handle.topk) == (3, 2) and handle.topk_weight.dtype == torch.float32
        assert torch.equal(d.combine(buf, handle), tokens)  # the handle says where each token's row went
    """

    dest_row: torch.Tensor
    topk_weight: torch.Tensor
    meta: RaggedTensorMetadata
    n_tokens: int
    hidden_dim: int
    topk: int
    call: int


class MoEDispatcher:
    """``d = ctx.ccl.moe_dispatcher(hidden_dim, num_experts, topk, max_tokens)``, then per layer::

        buf, meta, handle = d.dispatch(tokens, topk_idx, topk_weight)   # buf[meta.slice_offs[l]:...] = expert l's
        out = d.combine(run_experts(buf, meta), handle, weighted=False)

    Both calls are collective over ``group`` (every member calls them, in the same order, with any token count
    up to ``max_tokens``, 0 included), stream-ordered, never block the host (but for a combine given fewer rows than
    the capacity, ``config.validate``), and are graph-capturable after a first call. A dispatch invalidates the
    previous call's ``buf`` and handle. Making a dispatcher is collective too (it allocates on the heap).

    Example::

        d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=2 * world_size, topk=2, max_tokens=8)
        tokens = ctx.randn(8, 32, dtype=torch.bfloat16)
        topk_idx = torch.tensor([[0, 2 * world_size - 1]] * 8, device=ctx.get_device())
        buf, meta, handle = d.dispatch(tokens, topk_idx, torch.full((8, 2), 0.5, device=ctx.get_device()))
        out = d.combine(buf, handle, weighted=True)  # identity experts: 0.5 * token + 0.5 * token
        assert torch.equal(out, tokens)
    """

    def __init__(self, ctx: Context, hidden_dim: int, num_experts: int, topk: int, max_tokens: int,
                 group: dist.ProcessGroup | None = None, config: MoEDispatchConfig | None = None,
                 expt_assignment: ExptAssignment | None = None, dtype: torch.dtype = torch.bfloat16) -> None:
        caller = "ccl.moe_dispatcher"
        for name, value in (("hidden_dim", hidden_dim), ("num_experts", num_experts), ("topk", topk)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{caller}: {name}={value!r} must be a positive int")
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"{caller}: max_tokens={max_tokens!r} must be an int >= 0")
        if dtype not in DTYPES:
            raise ValueError(f"{caller}: dtype={dtype} is not one of {DTYPES}")
        config = MoEDispatchConfig() if config is None else config
        if not isinstance(config, MoEDispatchConfig):
            raise TypeError(f"{caller}: config must be an iris.ccl.MoEDispatchConfig, got {type(config).__name__}")
        self._ctx, self._config, self._group = ctx, config, group
        self._sync = ctx.group_sync(group, caller)
        world, me, dev = self._sync.size, self._sync.index, ctx.get_device()
        if expt_assignment is None:
            expt_assignment = make_expt_assignment(world, num_experts, make_expt_dict_uniform(world, num_experts), dev)
        if tuple(expt_assignment.expt_boolmask.shape) != (world, num_experts):
            raise ValueError(f"{caller}: expt_assignment is for {tuple(expt_assignment.expt_boolmask.shape)} "
                             f"(shards, experts), expected ({world}, {num_experts})")
        self.hidden_dim, self.num_experts, self.topk, self.max_tokens = hidden_dim, num_experts, topk, max_tokens
        self.dtype, self.expt_assignment = dtype, expt_assignment
        self.fp8 = dtype == FP8
        self.combine_dtype = torch.bfloat16 if self.fp8 else dtype
        self.n_scales = triton.cdiv(hidden_dim, SCALE_COLUMNS) if self.fp8 else 0
        self.slots = max_tokens * topk  # (token, slot) pairs one shard can send
        self.capacity = world * self.slots
        if self.capacity >= 1 << 31:
            raise ValueError(f"{caller}: capacity {world} x {max_tokens} x {topk} rows passes int32 row numbers")

        # Per-expert constants: the owner, and the experts laid out shard by shard in local-id order
        owner = owners(expt_assignment)  # [E] int64
        perm = torch.sort(owner, stable=True).indices  # ascending global id within a shard = local-id order
        first = torch.zeros(world + 1, dtype=torch.int64)
        first[1:] = torch.cumsum(torch.bincount(owner, minlength=world), 0)
        i32 = dict(dtype=torch.int32, device=dev)
        self._owner, self._perm = owner.to(**i32), perm.to(**i32)
        self._segment_first = first[owner[perm]].to(**i32)  # [E]: position in perm of the shard's first expert
        self._local_first, self._n_local = int(first[me]), int(first[me + 1] - first[me])

        serial = next(_SERIAL)
        self._count_table = self._heap(serial, "counts", (world, num_experts), torch.int32)
        self._buf = self._heap(serial, "recv", (self.capacity, hidden_dim), dtype)
        self._origins = self._heap(serial, "origins", (max(self.capacity, 1),), torch.int32)
        self._scales = self._heap(serial, "scales", (self.capacity, self.n_scales), torch.float32) if self.fp8 else None
        self._combine = self._heap(serial, "combine", (self.slots, hidden_dim), self.combine_dtype)
        # Local scratch, reused by every call (each call rewrites all of it before reading it): the route kernel's
        # ranks and per-block counts, the offsets from the count table, where each (token, slot) row goes
        self._n_blocks = max(1, triton.cdiv(self.slots, ROUTE_BLOCK))
        self._rank_in_block = torch.empty(max(self.slots, 1), **i32)
        self._block_counts = torch.empty((self._n_blocks, num_experts), **i32)
        self._excl = torch.empty(num_experts, **i32)
        self._start = torch.empty(num_experts, **i32)
        self._dest_row = torch.empty(max(self.slots, 1), **i32)
        self._dest_shard = torch.empty(max(self.slots, 1), **i32)
        self._meta = RaggedTensorMetadata(torch.empty(self._n_local, **i32), torch.zeros(self._n_local + 1, **i32))
        # The launches, remembered per token count and dtypes; the dispatcher's own, since they hold its buffers
        self._launches = launches.LaunchCache(ctx.groups)
        self._call = 0
        # an expert id outside [-1, E) the route kernel found (config.validate), -1 for none: host memory the kernel
        # writes (pinned on GPUs), read without waiting for it
        self._bad = torch.full((1,), -1, dtype=torch.int64, pin_memory=dev.type == "cuda")
        self._bad_word = memoryview(self._bad.numpy())
        on_cpu = dev.type == "cpu"
        self._programs = config.comm_sms or (2 if on_cpu else 128)

    def _heap(self, serial, name, shape, dtype):
        """A buffer of this dispatcher on the heap: for the whole world an ordinary heap tensor (freed with the
        dispatcher), for a subgroup a workspace of its members (``iris/host/memory/workspaces.py``), since allocations
        that only the members make must stay out of the world's heap."""
        if self._sync.size == self._ctx.get_num_ranks():
            return self._ctx.empty(shape, dtype=dtype)
        return self._ctx.workspaces.get(f"moe{serial}.{name}", self._sync.ranks, shape, dtype)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, tokens: torch.Tensor, topk_idx: torch.Tensor, topk_weight: torch.Tensor,
                 scales: torch.Tensor | None = None) -> tuple[Rows, RaggedTensorMetadata, DispatchHandle]:
        """Rows of ``tokens [T, H]`` (``T <= max_tokens``, any count per rank) to the owners of ``topk_idx [T, k]``
        (int16/32/64, -1 = no expert); ``topk_weight [T, k]`` is kept for a weighted combine. With an FP8 dtype,
        ``scales [T, ceil(H / 128)]`` fp32 travel with their rows and ``buf`` is the pair ``(rows, row_scales)``.

        Returns ``(buf, meta, handle)``: ``buf`` ``[capacity, H]`` on the heap, where expert l (this shard's l-th
        expert in ascending global id) has rows ``meta.slice_offs[l] : meta.slice_offs[l + 1]``, the routed tokens'
        rows bit for bit, ordered by (source shard, source token, slot); rows past ``meta.slice_offs[-1]`` are
        unspecified. ``meta`` holds int32 device tensors (no host synchronisation); like ``buf`` they are the
        dispatcher's and the next dispatch rewrites them. Collective.

            ref: for each expert e of ours, cat over shards s, tokens t, slots j with topk_idx_s[t, j] == e of
                 tokens_s[t]

        Raises ``ValueError`` for ``tokens``, ``topk_idx`` or ``topk_weight`` of other shapes or dtypes, more than
        ``max_tokens`` tokens, ``scales`` missing or misshapen with an FP8 dtype (or given without one), and for an
        expert id outside ``[-1, num_experts)`` (``config.validate``: on the cpu backend this call, on GPUs a later
        call or ``check()``); ``iris.MismatchError`` on every rank when the ranks' calls differ;
        ``iris.PeerError`` once a peer has failed.

        Example::

            d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=world_size, topk=1, max_tokens=8, dtype=torch.float32)
            tokens = torch.full((8, 32), float(rank), device=ctx.get_device())
            topk_idx = torch.full((8, 1), (rank + 1) % world_size, device=ctx.get_device())  # the next shard's expert
            buf, meta, handle = d.dispatch(tokens, topk_idx, torch.ones(8, 1, device=ctx.get_device()))
            assert meta.slice_sizes.tolist() == [8] and torch.all(buf[:8] == (rank - 1) % world_size)
            out = d.combine(buf, handle)  # an identity expert: each token comes back as it left
            assert torch.equal(out, tokens)
        """
        caller = "moe_dispatch"
        T = self._check_dispatch(caller, tokens, topk_idx, topk_weight, scales)
        self._call += 1
        idx = topk_idx.contiguous()
        per_call = (tokens, idx, scales if self.fp8 else self._origins, T)
        key = launches.key_of(caller, self._group, self._config, per_call[:3])
        if not self._launches.run(self._ctx, key, self._group, self._config, per_call):  # iris/host/launches.py
            self._launches.put(key, self._group, self._config, self._dispatch_launches(tokens))(*per_call)
        self._ctx.groups.check("iris.ccl.moe_dispatch")  # a mismatch its kernels found (common.done)
        # after the launches, so that every rank makes the collective call: on the cpu backend this call's report
        # (its kernels have run), on GPUs an earlier one's
        self._raise_reported(caller)
        handle = DispatchHandle(self._dest_row, topk_weight.detach().to(torch.float32).contiguous(), self._meta, T,
                                self.hidden_dim, self.topk, self._call)
        buf = (self._buf, self._scales) if self.fp8 else self._buf
        return buf, self._meta, handle

    def _dispatch_launches(self, tokens):
        """The three launches of a dispatch (``moe_kernels.py``), for tokens aligned as ``tokens`` is."""
        E, k, fp8 = self.num_experts, self.topk, self.fp8
        # what every shard passes alike: the token counts may differ
        fp = common.fingerprint(self._ctx, "moe_dispatch", (), E, k, self.hidden_dim, str(tokens.dtype), fp8,
                                self.max_tokens, launch=dict(programs=self._grid()), sync=self._sync)
        sync = self._sync.args(self._ctx, fp)
        route = launches.Launch(_route_kernel, (self._n_blocks,),
                                (self._rank_in_block, self._block_counts, E, self._bad.data_ptr()),
                                dict(BLOCK=ROUTE_BLOCK, BLOCK_X=min(128, triton.next_power_of_2(E)),
                                     REPORT=self._config.validate))
        blocks = triton.next_power_of_2(self._n_blocks)  # the prefix tile's rows; BLOCK_X experts wide, 4 K in all
        meta = self._meta
        counts = launches.Launch(
            _counts_kernel, (1,),
            (self._count_table, self._block_counts, self._n_blocks, E, self._perm, self._segment_first, self._excl,
             self._start, meta.slice_sizes, meta.slice_offs, self._local_first, self._n_local, sync,
             (_bits(self._buf), self._origins, _bits(self._scales) if fp8 else self._origins)),
            dict(GROUP_SIZE=self._sync.size, N_BLOCKS=blocks,
                 BLOCK_X=max(1, min(triton.next_power_of_2(E), 4096 // blocks)),
                 BLOCK_P=min(1024, triton.next_power_of_2(E))))
        rows = launches.Launch(
            _dispatch_rows_kernel, (self._grid(),),
            (_bits(self._buf), self._origins, self._start, self._block_counts, self._rank_in_block, self._owner,
             self._dest_row, self._dest_shard, E, self.hidden_dim, self.slots,
             _bits(self._scales) if fp8 else self._origins, self.n_scales, sync),
            dict(K=k, GROUP_SIZE=self._sync.size, HAS_SCALES=fp8,
                 HINT=_hint(self.hidden_dim * tokens.element_size(), tokens, self._buf), ROUTE_BLOCK=ROUTE_BLOCK,
                 BLOCK=min(self._config.dispatch_block_size, triton.next_power_of_2(self.hidden_dim)),
                 BLOCK_S=triton.next_power_of_2(max(self.n_scales, 1)), num_warps=self._config.num_warps))
        return _Dispatch(route, counts, rows, self.topk)

    # ------------------------------------------------------------------ combine

    def combine(self, expert_out: torch.Tensor, handle: DispatchHandle, weighted: bool = False) -> torch.Tensor:
        """``out [T, H]`` for this shard's tokens of ``handle``'s dispatch: ``out[t]`` = the sum over t's slots j
        with an expert of that expert's output row (``expert_out`` row-aligned with ``buf``), times
        ``topk_weight[t, j]`` when ``weighted``; fp32 in slot order j = 0 .. k-1, rounded once. Tokens with no
        expert get zero rows. Collective; the result's bits do not depend on which shard computes them.

            ref: out[t] = sum_j [topk_idx[t, j] valid] * (w[t, j] if weighted else 1) * expert_out[row(t, j)]

        Raises ``TypeError`` when ``handle`` is not a ``DispatchHandle``; ``ValueError`` for a handle of an earlier
        dispatch, an ``expert_out`` of another width or dtype, not contiguous, or with fewer rows than the capacity
        (with ``config.validate``: than the rows dispatch delivered), and for an expert id a dispatch's route kernel
        reported; ``iris.MismatchError`` on every rank when the ranks' calls differ; ``iris.PeerError`` once a peer
        has failed.

        Example::

            d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=world_size, topk=2, max_tokens=8)
            tokens = ctx.randn(8, 32, dtype=torch.bfloat16)
            topk_idx = torch.tensor([[0, world_size - 1]] * 8, device=ctx.get_device())
            buf, meta, handle = d.dispatch(tokens, topk_idx, torch.full((8, 2), 0.25, device=ctx.get_device()))
            expert_out = 2 * buf  # every expert doubles its rows
            assert torch.equal(d.combine(expert_out, handle), 4 * tokens)  # 2 slots of 2 * token
            assert torch.equal(d.combine(expert_out, handle, weighted=True), tokens)  # 0.25 * 2 * token, twice
        """
        caller = "moe_combine"
        self._check_combine(caller, expert_out, handle)
        H, T = self.hidden_dim, handle.n_tokens
        out = torch.empty((T, H), dtype=expert_out.dtype, device=expert_out.device)
        per_call = (expert_out, out, handle.topk_weight)
        weighted = bool(weighted)
        key = launches.key_of(caller, self._group, self._config, per_call, int(weighted))
        if not self._launches.run(self._ctx, key, self._group, self._config, per_call):
            self._launches.put(key, self._group, self._config, self._combine_launches(expert_out, T, weighted))(
                *per_call)
        self._ctx.groups.check("iris.ccl.moe_combine")
        self._raise_reported(caller)  # a dispatch's, found by its route kernel since (after the launches, as there)
        return out

    def _combine_launches(self, expert_out, T, weighted):
        """The two launches of a combine of ``T`` tokens (the reduce only when T > 0)."""
        H, config = self.hidden_dim, self._config
        block = min(config.combine_block_size, triton.next_power_of_2(H))
        push = launches.Launch(
            _combine_push_kernel, (self._grid(),),
            (_bits(self._combine), self._origins, self._meta.slice_offs[-1:], H, self.slots,
             self._sync.args(self._ctx, common.fingerprint(self._ctx, "moe_combine", (), H, str(expert_out.dtype),
                                                           self.max_tokens, launch=dict(programs=self._grid()),
                                                           sync=self._sync))),
            dict(GROUP_SIZE=self._sync.size, HINT=_hint(H * expert_out.element_size(), expert_out, self._combine),
                 BLOCK=block, num_warps=config.num_warps))
        reduce = None if not T else launches.Launch(
            _combine_reduce_kernel, (T, triton.cdiv(H, block)), (self._combine, self._dest_row, H),
            dict(K=self.topk, WEIGHTED=weighted, BLOCK=block, num_warps=config.num_warps))
        return _Combine(push, reduce)

    # ------------------------------------------------------------------ checks

    def _grid(self):
        return max(1, min(self._programs, self.max_tokens * self.topk if self.max_tokens else 1, MAX_COMM_PROGRAMS))

    def _checking(self):
        capturing = self._ctx.get_device().type == "cuda" and torch.cuda.is_current_stream_capturing()
        return self._config.validate and not capturing

    def _check_dispatch(self, caller, tokens, topk_idx, topk_weight, scales):
        H, k = self.hidden_dim, self.topk
        for name, t in (("tokens", tokens), ("topk_idx", topk_idx), ("topk_weight", topk_weight)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise ValueError(f"{caller}: {name} must be a 2-D torch.Tensor, got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        T = tokens.shape[0]
        if T > self.max_tokens:
            raise ValueError(f"{caller}: tokens has {T} rows, more than max_tokens={self.max_tokens}; make the "
                             "dispatcher with a larger max_tokens or split the batch")
        if tokens.shape[1] != H:
            raise ValueError(f"{caller}: tokens has hidden size {tokens.shape[1]}, the dispatcher's is {H}")
        if tokens.dtype != self.dtype:
            raise ValueError(f"{caller}: tokens has dtype {tokens.dtype}, the dispatcher's is {self.dtype}")
        if not tokens.is_contiguous():
            raise ValueError(f"{caller}: tokens must be contiguous; call .contiguous() first")
        if tuple(topk_idx.shape) != (T, k) or tuple(topk_weight.shape) != (T, k):
            raise ValueError(f"{caller}: topk_idx {tuple(topk_idx.shape)} and topk_weight {tuple(topk_weight.shape)} "
                             f"must both be (tokens, topk) = ({T}, {k})")
        if topk_idx.dtype not in ID_DTYPES:
            raise ValueError(f"{caller}: topk_idx has dtype {topk_idx.dtype}; use one of {ID_DTYPES}")
        if not topk_weight.dtype.is_floating_point:
            raise ValueError(f"{caller}: topk_weight has dtype {topk_weight.dtype}; it must be floating point")
        if self.fp8:
            want = (T, self.n_scales)
            if not isinstance(scales, torch.Tensor) or tuple(scales.shape) != want or scales.dtype != torch.float32:
                got = f"{tuple(scales.shape)} {scales.dtype}" if isinstance(scales, torch.Tensor) else repr(scales)
                raise ValueError(f"{caller}: FP8 rows need scales of shape {want} (one per {SCALE_COLUMNS} columns), "
                                 f"fp32; got {got}")
            if not scales.is_contiguous():
                raise ValueError(f"{caller}: scales must be contiguous; call .contiguous() first")
        elif scales is not None:
            raise ValueError(f"{caller}: scales are for FP8 rows; this dispatcher moves {self.dtype}")
        return T

    def check(self) -> None:
        """Wait for the current stream (this dispatcher's kernels on GPUs) and raise what its route kernels reported:
        an expert id outside ``[-1, num_experts)`` (``config.validate``), which the calls after them raise
        otherwise. Local: no peer takes part.

        Raises ``ValueError`` for such an id (once per report).

        Example::

            d = ctx.ccl.moe_dispatcher(hidden_dim=32, num_experts=world_size, topk=1, max_tokens=4)
            tokens = ctx.randn(4, 32, dtype=torch.bfloat16)
            topk_idx = torch.zeros(4, 1, dtype=torch.int32, device=ctx.get_device())  # ids in [-1, num_experts)
            d.dispatch(tokens, topk_idx, torch.ones(4, 1, device=ctx.get_device()))
            d.check()  # nothing to report
        """
        if self._ctx.get_device().type == "cuda":
            torch.cuda.current_stream(self._ctx.get_device()).synchronize()
        self._raise_reported("moe_dispatch")

    def _raise_reported(self, caller):
        """Raise the expert id outside ``[-1, E)`` a route kernel has reported, once."""
        bad = self._bad_word[0]
        if bad == -1:
            return
        self._bad_word[0] = -1
        E = self.num_experts
        when = "" if self._ctx.get_device().type == "cpu" else \
            " (a dispatch's route kernel found it; on GPUs its dispatcher's next call or check() raises it)"
        raise ValueError(f"{caller}: topk_idx holds expert id {bad}, outside [-1, {E}) (num_experts={E}; -1 means "
                         f"no expert){when}; those entries went to no expert")

    def _check_combine(self, caller, expert_out, handle):
        if not isinstance(handle, DispatchHandle):
            raise TypeError(f"{caller}: handle must be the DispatchHandle dispatch returned, got "
                            f"{type(handle).__name__}")
        if handle.call != self._call:
            raise ValueError(f"{caller}: the handle is of dispatch call {handle.call}, but call {self._call} has "
                             "run since and reused the buffers; combine each dispatch before the next")
        if not isinstance(expert_out, torch.Tensor) or expert_out.dim() != 2 or \
                expert_out.shape[1] != self.hidden_dim:
            shape = tuple(expert_out.shape) if isinstance(expert_out, torch.Tensor) else type(expert_out).__name__
            raise ValueError(f"{caller}: expert_out must be (rows, {self.hidden_dim}), got {shape}")
        if expert_out.dtype != self.combine_dtype:
            raise ValueError(f"{caller}: expert_out has dtype {expert_out.dtype}, combine takes {self.combine_dtype}")
        if not expert_out.is_contiguous():
            raise ValueError(f"{caller}: expert_out must be contiguous; call .contiguous() first")
        rows = expert_out.shape[0]
        if rows < self.capacity:
            if not self._checking():
                raise ValueError(f"{caller}: expert_out has {rows} rows; without validation it needs the capacity, "
                                 f"{self.capacity} rows (buf's)")
            used = int(handle.meta.slice_offs[-1])  # one host synchronisation
            if rows < used:
                raise ValueError(f"{caller}: expert_out has {rows} rows, fewer than the {used} rows dispatch "
                                 "delivered (meta.slice_offs[-1])")


class _Dispatch:
    """A dispatch's launches, called as one remembered launch on ``(tokens, topk_idx, scales, T)``."""

    __slots__ = ("route", "counts", "rows", "topk")

    def __init__(self, route, counts, rows, topk):
        self.route, self.counts, self.rows, self.topk = route, counts, rows, topk

    def __call__(self, tokens, idx, scales, n_tokens):
        self.route(idx, n_tokens * self.topk)
        self.counts()
        self.rows(_bits(tokens), idx, _bits(scales), n_tokens)


class _Combine:
    """A combine's launches, called as one remembered launch on ``(expert_out, out, topk_weight)``."""

    __slots__ = ("push", "reduce")

    def __init__(self, push, reduce):
        self.push, self.reduce = push, reduce

    def __call__(self, expert_out, out, weights):
        self.push(_bits(expert_out))
        if self.reduce is not None:
            self.reduce(out, weights)


def _bits(tensor):
    """``tensor`` viewed as integers of its element width: moved bit for bit, NaN payloads and fp8 codes too."""
    return tensor.view(_BITS[tensor.element_size()])


def _hint(row_bytes, *tensors):
    """16 when every row starts on a 16-byte boundary, so translated stores stay 16-byte vectors."""
    return 16 if row_bytes % 16 == 0 and all(t.data_ptr() % 16 == 0 for t in tensors) else None
