"""Expert-parallel MoE dispatch and combine on the symmetric heap: ``ctx.ccl.moe_dispatcher(...)``.

``dispatch`` sends each token's row to the shards that own its top-k experts; each shard receives its experts'
rows grouped by expert, in (source shard, source token) order within an expert. ``combine`` sends each expert's
output row back and sums a token's rows over its experts, in the top-k slot order, in fp32, rounded once.
Upstream Iris's names and call shapes (``MoEDispatcher``, ``MoEDispatchConfig``, ``DispatchHandle``).

Memory: every buffer is the library's, made once when the dispatcher is made and reused by every call: a receive
buffer of ``capacity = W * max_tokens * k`` rows (the most one shard can receive: every token of every shard
routed to it k times), their origins, a ``[W, E]`` count table and a ``max_tokens * k``-row combine buffer. At
the DeepSeek shape on 8 shards (4096 tokens, H 7168, k 8, bf16) the receive buffer is 3.8 GB per rank.
"""

import itertools
from dataclasses import dataclass

import torch
import triton

from iris.ccl.moe_kernels import _combine_push_kernel, _combine_reduce_kernel, _counts_kernel, _dispatch_rows_kernel
from iris.ccl.moe_utils import RaggedTensorMetadata, make_expt_assignment, make_expt_dict_uniform, owners
from iris.host.groups import MAX_COMM_PROGRAMS

ID_DTYPES = (torch.int16, torch.int32, torch.int64)
FP8 = getattr(torch, "float8_e4m3fn", None)
DTYPES = (torch.bfloat16, torch.float16, torch.float32) + ((FP8,) if FP8 is not None else ())
SCALE_COLUMNS = 128  # FP8 rows carry one fp32 scale per 128 columns (DeepEP's recipe)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}  # rows travel as integers of their width
_SERIAL = itertools.count()


@dataclass(frozen=True)
class MoEDispatchConfig:
    """``dispatch_block_size`` / ``combine_block_size``: elements of a row each program moves per step (powers of
    two); 1024 bf16 over ``num_warps=4`` (128 threads) is one 16-byte vector per thread. ``comm_sms``: programs
    per kernel (None: 128 on GPUs, about one per SM of an H100/H200; 2 on the cpu backend, where every
    program runs in Python); the same on every
    rank, since the kernels' barriers pair programs of the same number.
    ``validate``: check on the host that every expert id is in ``[-1, E)`` and that ``expert_out`` has the rows
    in use, one host synchronisation per call; off, dispatch and combine never wait for the host (capture them in
    a CUDA graph), ids outside the range count as -1, and ``expert_out`` must have ``capacity`` rows. Inside a
    capture the checks are skipped either way."""

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
    """What ``combine`` needs from its ``dispatch``: where each of our (token, slot) rows went (``dest_row`` int32
    ``[T * k]``, -1 for no expert), the gate weights (fp32 ``[T, k]``), the receive metadata, and the call it
    belongs to (a later dispatch invalidates it)."""

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
    up to ``max_tokens``, 0 included), stream-ordered, and never block the host beyond ``config.validate``'s
    one check; with ``validate=False`` they are graph-capturable after a first call. A dispatch invalidates the
    previous call's ``buf`` and handle. Making a dispatcher is collective too (it allocates on the heap)."""

    def __init__(self, ctx, hidden_dim, num_experts, topk, max_tokens, group=None, config=None,
                 expt_assignment=None, dtype=torch.bfloat16):
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
        self._owner, self._perm = owner.to(dev), perm.to(dev)
        self._segment_first = first[owner[perm]].to(dev)  # [E]: position in perm of the shard's first expert
        self._local = (owner == me).nonzero().flatten().to(dev)  # our experts, by local id

        serial = next(_SERIAL)
        self._counts = torch.zeros(num_experts, dtype=torch.int32, device=dev)
        self._count_table = self._heap(serial, "counts", (world, num_experts), torch.int32)
        self._buf = self._heap(serial, "recv", (self.capacity, hidden_dim), dtype)
        self._origins = self._heap(serial, "origins", (max(self.capacity, 1),), torch.int32)
        self._scales = self._heap(serial, "scales", (self.capacity, self.n_scales), torch.float32) if self.fp8 else None
        self._combine = self._heap(serial, "combine", (self.slots, hidden_dim), self.combine_dtype)
        self._call = 0
        on_cpu = dev.type == "cpu"
        self._programs = config.comm_sms or (2 if on_cpu else 128)

    def _heap(self, serial, name, shape, dtype):
        """A buffer of this dispatcher on the heap: for the whole world an ordinary heap tensor (freed with the
        dispatcher), for a subgroup a workspace of its members (``iris/host/workspaces.py``), since allocations
        that only the members make must stay out of the world's heap."""
        if self._sync.size == self._ctx.get_num_ranks():
            return self._ctx.empty(shape, dtype=dtype)
        return self._ctx.workspaces.get(f"moe{serial}.{name}", self._sync.ranks, shape, dtype)

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, tokens, topk_idx, topk_weight, scales=None):
        """Rows of ``tokens [T, H]`` (``T <= max_tokens``, any count per rank) to the owners of ``topk_idx [T, k]``
        (int16/32/64, -1 = no expert); ``topk_weight [T, k]`` is kept for a weighted combine. With an FP8 dtype,
        ``scales [T, ceil(H / 128)]`` fp32 travel with their rows and ``buf`` is the pair ``(rows, row_scales)``.

        Returns ``(buf, meta, handle)``: ``buf`` ``[capacity, H]`` on the heap, where expert l (this shard's l-th
        expert in ascending global id) has rows ``meta.slice_offs[l] : meta.slice_offs[l + 1]``, the routed tokens'
        rows bit for bit, ordered by (source shard, source token, slot); rows past ``meta.slice_offs[-1]`` are
        unspecified. ``meta`` holds int32 device tensors (no host synchronisation). Collective.

            ref: for each expert e of ours, cat over shards s, tokens t, slots j with topk_idx_s[t, j] == e of
                 tokens_s[t]"""
        caller = "moe_dispatch"
        T = self._check_dispatch(caller, tokens, topk_idx, topk_weight, scales)
        k, E, me, dev = self.topk, self.num_experts, self._sync.index, self._ctx.get_device()
        self._call += 1

        # Local routing: each (token, slot)'s position among our rows for its expert, in (token, slot) order
        flat = topk_idx.reshape(-1).to(torch.int64)
        valid = (flat >= 0) & (flat < E)
        key = torch.where(valid, flat, E)  # E: no expert, sorted last
        counts = torch.zeros(E + 1, dtype=torch.int32, device=dev)
        counts.scatter_add_(0, key, torch.ones_like(key, dtype=torch.int32))
        order = torch.sort(key, stable=True).indices
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.empty_like(key)
        pos[order] = torch.arange(key.numel(), device=dev) - starts[key[order]]
        self._counts.copy_(counts[:E])

        sync_args = self._sync.args(self._ctx)
        _counts_kernel[(1,)](self._count_table, self._counts, E, sync_args, GROUP_SIZE=self._sync.size,
                             BLOCK=min(1024, triton.next_power_of_2(E)))

        # Offsets from the count table, the same on every shard: expert e's rows start at ``base[e]`` in its owner's
        # buffer (the owner's experts end to end in local-id order), shard s's rows for e after those of shards < s
        table = self._count_table.to(torch.int64)  # [W, E]
        totals = table.sum(0)
        in_perm = totals[self._perm]
        excl = torch.cumsum(in_perm, 0) - in_perm
        base = torch.empty_like(excl)
        base[self._perm] = excl - excl[self._segment_first]
        before_us = (torch.cumsum(table, 0) - table)[me]  # [E]
        kc = key.clamp(max=E - 1)
        dest_row = torch.where(valid, base[kc] + before_us[kc] + pos, -1).to(torch.int32)
        dest_shard = torch.where(valid, self._owner[kc], me).to(torch.int32)
        sizes = totals[self._local].to(torch.int32)
        offs = torch.zeros(sizes.numel() + 1, dtype=torch.int32, device=dev)
        offs[1:] = torch.cumsum(sizes, 0)
        meta = RaggedTensorMetadata(sizes, offs)

        fp8 = self.fp8
        hint = _hint(self.hidden_dim * tokens.element_size(), tokens, self._buf)
        _dispatch_rows_kernel[(self._grid(),)](
            _bits(self._buf), self._origins, _bits(tokens), dest_row, dest_shard, T, self.hidden_dim, self.slots,
            _bits(self._scales) if fp8 else self._origins, _bits(scales) if fp8 else self._origins, self.n_scales,
            sync_args, K=k, GROUP_SIZE=self._sync.size, HAS_SCALES=fp8, HINT=hint,
            BLOCK=min(self._config.dispatch_block_size, triton.next_power_of_2(self.hidden_dim)),
            BLOCK_S=triton.next_power_of_2(max(self.n_scales, 1)), num_warps=self._config.num_warps)
        self._ctx.groups.check("iris.ccl.moe_dispatch")
        handle = DispatchHandle(dest_row, topk_weight.detach().to(torch.float32).contiguous(), meta, T,
                                self.hidden_dim, k, self._call)
        buf = (self._buf, self._scales) if fp8 else self._buf
        return buf, meta, handle

    # ------------------------------------------------------------------ combine

    def combine(self, expert_out, handle, weighted=False):
        """``out [T, H]`` for this shard's tokens of ``handle``'s dispatch: ``out[t]`` = the sum over t's slots j
        with an expert of that expert's output row (``expert_out`` row-aligned with ``buf``), times
        ``topk_weight[t, j]`` when ``weighted``; fp32 in slot order j = 0 .. k-1, rounded once. Tokens with no
        expert get zero rows. Collective; the result's bits do not depend on which shard computes them.

            ref: out[t] = sum_j [topk_idx[t, j] valid] * (w[t, j] if weighted else 1) * expert_out[row(t, j)]"""
        caller = "moe_combine"
        self._check_combine(caller, expert_out, handle)
        H, k, T = self.hidden_dim, self.topk, handle.n_tokens
        hint = _hint(H * expert_out.element_size(), expert_out, self._combine)
        block = min(self._config.combine_block_size, triton.next_power_of_2(H))
        _combine_push_kernel[(self._grid(),)](
            _bits(self._combine), _bits(expert_out), self._origins, handle.meta.slice_offs[-1:], H, self.slots,
            self._sync.args(self._ctx), GROUP_SIZE=self._sync.size, HINT=hint, BLOCK=block,
            num_warps=self._config.num_warps)
        out = torch.empty((T, H), dtype=expert_out.dtype, device=expert_out.device)
        if T:
            _combine_reduce_kernel[(T, triton.cdiv(H, block))](
                out, self._combine, handle.dest_row, handle.topk_weight, H, K=k, WEIGHTED=bool(weighted), BLOCK=block,
                num_warps=self._config.num_warps)
        self._ctx.groups.check("iris.ccl.moe_combine")
        return out

    # ------------------------------------------------------------------ checks

    def _grid(self):
        return max(1, min(self._programs, self.max_tokens * self.topk if self.max_tokens else 1, MAX_COMM_PROGRAMS))

    def _checking(self):
        capturing = self._ctx.get_device().type == "cuda" and torch.cuda.is_current_stream_capturing()
        return self._config.validate and not capturing

    def _check_dispatch(self, caller, tokens, topk_idx, topk_weight, scales):
        H, k, E = self.hidden_dim, self.topk, self.num_experts
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
        if self._checking() and topk_idx.numel():
            low, high = torch.stack([topk_idx.min(), topk_idx.max()]).tolist()  # one host synchronisation
            if low < -1 or high >= E:
                bad = low if low < -1 else high
                raise ValueError(f"{caller}: topk_idx holds expert id {bad}, outside [-1, {E}) (num_experts={E}; "
                                 "-1 means no expert)")
        return T

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


def _bits(tensor):
    """``tensor`` viewed as integers of its element width: moved bit for bit, NaN payloads and fp8 codes too."""
    return tensor.view(_BITS[tensor.element_size()])


def _hint(row_bytes, *tensors):
    """16 when every row starts on a 16-byte boundary, so translated stores stay 16-byte vectors."""
    return 16 if row_bytes % 16 == 0 and all(t.data_ptr() % 16 == 0 for t in tensors) else None
