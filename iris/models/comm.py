"""How the tensor-parallel model talks: one provider class per library, one interface.

    column(h, w, sp)                  -> h @ w for every token (sp: h holds our 1/W of the tokens; gather them)
    row(a, w, x, norm_w, eps, sp)     -> (rmsnorm(x + reduce(a @ w)), x + reduce(a @ w)); reduce sums over
                                         the ranks (sp: and keeps our 1/W of the tokens); x may be updated
                                         in place
    sequence_parallel(rows)           -> whether a forward pass of this many tokens runs sequence-parallel
    scatter_rows(x), gather_rows(h)   -> our 1/W of the tokens, all tokens

| provider      | decode (all-reduce)                               | prefill (sequence-parallel)              |
| ------------- | ------------------------------------------------- | ---------------------------------------- |
| NoComm        | nothing: the reference at W = 1, compute at W > 1 | -                                        |
| TorchDistComm | mm, dist.all_reduce, add, rms_norm                | - (all-reduced, as Megatron without SP)  |
| SymmMemComm   | mm into symmetric memory, one_shot_all_reduce,    | fused_all_gather_matmul,                 |
|               | add, rms_norm                                     | fused_matmul_reduce_scatter              |
| IrisComm      | mm into the heap, ccl.all_reduce_rmsnorm          | ops.all_gather_matmul,                   |
|               |                                                   | ops.matmul_reduce_scatter                |

Buffers a provider owns are made on the first call of each shape and reused, so warm up once before capturing
a CUDA graph; a buffer ``row`` returns is overwritten by the next ``row`` of that shape.
"""

import socket
import warnings

import torch
import torch.distributed as dist

from iris.models.llama_tp import rms_norm

# From this many tokens (by default) a forward pass is a prefill: sequence-parallel where the provider supports it.
PREFILL_MIN_ROWS = 256
# Past 2 ranks, partials larger than this are all-reduced two-shot and normalised by torch (IrisComm.row).
FUSED_NORM_MAX_BYTES = 1 << 20


class NoComm:
    """No communication. With one rank, the single-device reference; with more, the same compute as the others
    with the communication left out (the numbers are wrong): what a step costs without its communication."""

    name = "none"
    graph_capturable = True

    def __init__(self, rank=0, world_size=1):
        self.rank, self.world_size = rank, world_size

    def sequence_parallel(self, rows):
        return False

    def column(self, h, w, sp):
        return h @ w

    def row(self, a, w, x, norm_w, eps, sp):
        x += self.reduce(a @ w)
        return rms_norm(x, norm_w, eps), x

    def reduce(self, y):
        return y


class TorchDistComm(NoComm):
    """``torch.distributed``: NCCL on GPUs (gloo on the cpu backend), all-reduce after the attention output and
    the MLP's down projection. Graph-capturable where the group's backend is NCCL."""

    name = "nccl"

    def __init__(self, group=None):
        self.group = group
        super().__init__(dist.get_rank(group), dist.get_world_size(group))
        self.graph_capturable = dist.get_backend(group) == "nccl"

    def reduce(self, y):
        dist.all_reduce(y, group=self.group)
        return y


class _SequenceParallelPrefill(NoComm):
    """A provider whose prefill runs sequence-parallel (fused all-gather / reduce-scatter GEMMs) from
    ``prefill_min_rows`` rows that split evenly over the ranks."""

    prefill_min_rows = PREFILL_MIN_ROWS

    def sequence_parallel(self, rows):
        return rows >= self.prefill_min_rows and rows % self.world_size == 0


class SymmMemComm(_SequenceParallelPrefill):
    """PyTorch symmetric memory (``torch.ops.symm_mem``): ``one_shot_all_reduce`` for decode, the fused
    all-gather-matmul and matmul-reduce-scatter for prefill. CUDA only."""

    name = "symm_mem"

    def __init__(self, group=None, device=None, prefill_min_rows=PREFILL_MIN_ROWS):
        if device is None or torch.device(device).type != "cuda":
            raise RuntimeError(f"SymmMemComm: torch symmetric memory needs CUDA tensors, got device {device}; use "
                               "TorchDistComm or IrisComm on the cpu backend")
        try:
            import torch.distributed._symmetric_memory as symm_mem
        except ImportError as e:
            raise RuntimeError(f"SymmMemComm: torch {torch.__version__} has no symmetric memory ({e})") from e
        missing = [op for op in ("one_shot_all_reduce", "fused_all_gather_matmul", "fused_matmul_reduce_scatter")
                   if not hasattr(torch.ops.symm_mem, op)]
        if missing:
            raise RuntimeError(f"SymmMemComm: torch {torch.__version__} lacks torch.ops.symm_mem.{missing[0]}")
        group = group or dist.group.WORLD
        super().__init__(dist.get_rank(group), dist.get_world_size(group))
        # torch's allocator refuses ranks on one GPU at the first rendezvous ("allocations from overlapping
        # devices"); say so here, on every rank alike
        places = [None] * self.world_size
        dist.all_gather_object(places, (socket.gethostname(), str(torch.cuda.get_device_properties(device).uuid)),
                               group=group)
        if len(set(places)) < len(places):
            raise RuntimeError(f"SymmMemComm: torch symmetric memory needs a GPU per rank, and ranks of this group "
                               f"share one ({self.world_size} ranks on {len(set(places))} GPUs); use IrisComm or "
                               "TorchDistComm there")
        self.symm_mem, self.group, self.group_name, self.device = symm_mem, group, group.group_name, device
        self.prefill_min_rows = prefill_min_rows
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before torch 2.9; deprecated, a no-op since
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(self.group_name)
        self._buffers = {}

    def column(self, h, w, sp):
        if not sp:
            return h @ w
        _, (out,) = torch.ops.symm_mem.fused_all_gather_matmul(h, [w], 0, self.group_name)
        return out

    def row(self, a, w, x, norm_w, eps, sp):
        if sp:
            x += torch.ops.symm_mem.fused_matmul_reduce_scatter(a, w, "sum", 0, self.group_name)
        else:
            partial, _ = self._symmetric("partial", (a.shape[0], w.shape[1]), a.dtype)
            torch.mm(a, w, out=partial)
            x += torch.ops.symm_mem.one_shot_all_reduce(partial, "sum", self.group_name)
        return rms_norm(x, norm_w, eps), x

    def scatter_rows(self, rows):
        return rows.chunk(self.world_size)[self.rank].clone()

    def gather_rows(self, h):
        """Through the peers' symmetric buffers (the group's own backend may be gloo, where ranks share a GPU)."""
        rows, handle = self._symmetric("gather", tuple(h.shape), h.dtype)
        rows.copy_(h)
        handle.barrier(channel=0)  # every rank's rows have landed
        out = torch.cat([handle.get_buffer(r, tuple(h.shape), h.dtype) for r in range(self.world_size)])
        handle.barrier(channel=0)  # no rank still reads ours
        return out

    def _symmetric(self, role, shape, dtype):
        """A symmetric-memory buffer and its handle, made (collectively) on first use."""
        key = (role, shape, dtype)
        if key not in self._buffers:
            buf = self.symm_mem.empty(shape, dtype=dtype, device=self.device)
            self._buffers[key] = buf, self.symm_mem.rendezvous(buf, self.group_name)
        return self._buffers[key]


class IrisComm(_SequenceParallelPrefill):
    """iris: for decode, the partial product lands on the symmetric heap and ``ccl.all_reduce_rmsnorm`` sums it,
    adds the residual and normalises in one kernel (``fused_norm=False``: ``ccl.all_reduce``, then torch's add
    and norm); for prefill, ``ops.all_gather_matmul`` and ``ops.matmul_reduce_scatter``. Graph-capturable
    after a warm-up call of each shape."""

    name = "iris"

    def __init__(self, ctx, group=None, fused_norm=True, prefill_min_rows=PREFILL_MIN_ROWS):
        self.ctx, self.group, self.fused_norm, self.prefill_min_rows = ctx, group, fused_norm, prefill_min_rows
        ranks = ctx.group_sync(group, "IrisComm").ranks
        super().__init__(ranks.index(ctx.get_rank()), len(ranks))
        self._buffers = {}

    def column(self, h, w, sp):
        if not sp:
            return h @ w
        out = self._buffer("column", (h.shape[0] * self.world_size, w.shape[1]), h.dtype)
        return self.ctx.ops.all_gather_matmul(out, h, w, group=self.group)

    def row(self, a, w, x, norm_w, eps, sp):
        if sp:
            y = self._buffer("row", (a.shape[0] // self.world_size, w.shape[1]), a.dtype)
            x += self.ctx.ops.matmul_reduce_scatter(y, a, w, group=self.group)
            return rms_norm(x, norm_w, eps), x
        partial = self._buffer("partial", (a.shape[0], w.shape[1]), a.dtype, heap=True)
        torch.mm(a, w, out=partial)
        # The fused kernel is one-shot: each rank reads every peer's whole partial. With more than 2 ranks, above
        # decode sizes, the two-shot all_reduce moves fewer bytes (2 (W - 1) / W of the partial against W - 1).
        one_shot = self.world_size == 2 or partial.numel() * partial.element_size() <= FUSED_NORM_MAX_BYTES
        if not (self.fused_norm and one_shot):
            self.ctx.ccl.all_reduce(partial, partial, group=self.group)
            x += partial
            return rms_norm(x, norm_w, eps), x
        h = self._buffer("h", x.shape, x.dtype)
        return self.ctx.ccl.all_reduce_rmsnorm(h, x, partial, x, norm_w, eps, group=self.group)

    def scatter_rows(self, rows):
        return rows.chunk(self.world_size)[self.rank].clone()

    def gather_rows(self, h):
        out = self._buffer("gather", (h.shape[0] * self.world_size, h.shape[1]), h.dtype, heap=True)
        self.ctx.ccl.all_gather(out, h.contiguous(), group=self.group)
        return out

    def _buffer(self, role, shape, dtype, heap=False):
        key = (role, tuple(shape), dtype)
        if key not in self._buffers:
            # every rank runs the same calls, so heap buffers are made in the same order everywhere
            self._buffers[key] = (self.ctx.empty(shape, dtype=dtype) if heap
                                  else torch.empty(shape, dtype=dtype, device=self.ctx.get_device()))
        return self._buffers[key]
