"""The inter-node stage: torch.distributed on this rank's rail (the ranks with its local rank on every node).

iris moves nothing between nodes itself and opens no connection of its own: every byte that leaves a node goes
through the rail group's engine (NCCL on GPUs, gloo on the cpu backend; ``IRIS_RAIL_BACKEND`` overrides), which
``iris/host/topology.py`` makes once per context. ``ctx.rail`` counts what each rank hands to it: the bytes of
the inputs of its calls, so a test can check the hierarchical algorithms hand over only the rank's share.

On NCCL the calls queue on NCCL's stream after the current stream's work and the current stream waits for
them: stream-ordered and CUDA-graph capturable, as NCCL is. On gloo the host waits; CUDA tensors (a GPU job
whose rail falls back to gloo) travel through host copies; the wait polls the work and ``ctx``'s peer check,
so a failed peer raises ``PeerError`` rather than holding the rank in gloo until its timeout.
"""

import time

import torch
import torch.distributed as dist

from iris.host.distributed import CHECK_INTERVAL_S, FIRST_INTERVAL_S
from iris.errors import PeerError

REPORT_WAIT_S = 1.0  # five of the watchdog's 0.2 s polls
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
# torch 2.13 names the tensor forms *_single and warns on the old names, which 2.11 (the GPU image) still needs
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class Rail:
    """``ctx.rail``: the rail group's collectives over this context's nodes (``num_nodes`` ranks, by node).
    ``bytes_handed`` and ``calls`` count this rank's inputs; ``reset()`` zeroes them."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.group, self.engine = ctx.rail_group, ctx.rail_engine
        self.ranks = ctx.topology.rail_ranks()
        self.bytes_handed = self.calls = 0

    def reset(self):
        self.bytes_handed = self.calls = 0

    def _count(self, tensor):
        self.bytes_handed += tensor.numel() * tensor.element_size()
        self.calls += 1

    def _staged(self, *tensors):
        """The tensors as the engine takes them: host copies of CUDA tensors for gloo; int16, which neither NCCL
        nor gloo reduces, widened to int32 (the sum narrowed back wraps as int16 arithmetic does)."""
        device = "cpu" if self.engine == "gloo" else tensors[0].device
        dtype = torch.int32 if tensors[0].dtype == torch.int16 else tensors[0].dtype
        return [t.to(device=device, dtype=dtype) for t in tensors]

    def _wait(self, work):
        """Wait for ``work``; an engine error (a rail peer's connection gone: its whole node died, so no rank of
        that node could report it) becomes ``PeerError`` naming the rail."""
        try:
            if self.engine == "nccl":
                work.wait()  # the current stream waits; the host does not
                return
            interval = FIRST_INTERVAL_S
            while not work.is_completed():
                self.ctx.groups.check("iris.ccl (inter-node stage)")
                time.sleep(interval)
                interval = min(2 * interval, CHECK_INTERVAL_S / 10)
            work.wait()  # raises what the engine raised
        except RuntimeError as e:
            text = str(e).lower()
            if isinstance(e, PeerError) or not (self.ctx.failure or "connection" in text or "timed out" in text):
                raise  # the engine refused the call itself
            # The engine often sees a dead peer's socket close before the watchdog's report arrives (a poll or two):
            # wait for it, so the error names the failed rank.
            deadline = time.monotonic() + REPORT_WAIT_S
            while self.ctx.failure is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.ctx.failure is not None:
                raise PeerError(self.ctx.failure) from e
            raise PeerError(f"iris.ccl: the inter-node stage ({self.engine} on the rail of ranks {self.ranks}) failed "
                            f"on rank {self.ctx.cur_rank}: {e}; a rank of another node has likely died") from e

    def _back(self, dst, staged):
        if staged is not dst:
            dst.copy_(staged)

    def all_reduce(self, tensor, op):
        """``tensor`` = ``op`` over the rail (in place). NCCL and gloo give every member the same bits."""
        self._count(tensor)
        (t,) = self._staged(tensor)
        self._wait(dist.all_reduce(t, op=_OPS[op], group=self.group, async_op=True))
        self._back(tensor, t)

    def all_gather(self, out, inp):
        """``out`` = the rail's ``inp`` by node."""
        self._count(inp)
        o, i = self._staged(out, inp)
        self._wait(_all_gather(o, i, group=self.group, async_op=True))
        self._back(out, o)

    def reduce_scatter(self, out, inp, op):
        """``out`` = slice ``node`` of ``op`` over the rail's ``inp``. gloo's reduce-scatter work never reports
        completion to a poll (torch 2.13), so on gloo it is an all-to-all and a local reduction over the nodes in
        node order: the same bytes on the wire, and the same sum on every call."""
        self._count(inp)
        if self.engine == "nccl" and inp.dtype != torch.int16:
            self._wait(_reduce_scatter(out, inp, op=_OPS[op], group=self.group, async_op=True))
            return
        parts = torch.empty_like(inp)
        p, i = self._staged(parts, inp)
        self._wait(dist.all_to_all_single(p, i, group=self.group, async_op=True))
        rows = p.view(len(self.ranks), -1)  # [node, n]: what each node sent us
        acc = rows[0].float() if rows.dtype in (torch.float16, torch.bfloat16) else rows[0].clone()
        for row in rows[1:]:
            row = row.to(acc.dtype)
            acc = acc + row if op == "sum" else torch.maximum(acc, row) if op == "max" else torch.minimum(acc, row)
        out.copy_(acc.view(out.shape))

    def all_to_all(self, out, inp):
        """Slice m of ``inp`` goes to the rail's node m, arriving as slice ``node`` of its ``out``."""
        self._count(inp)
        o, i = self._staged(out, inp)
        self._wait(dist.all_to_all_single(o, i, group=self.group, async_op=True))
        self._back(out, o)

    def broadcast(self, tensor, node):
        """``tensor`` = node ``node``'s (in place); only that node's member hands bytes over."""
        if node == self.ctx.node:
            self._count(tensor)
        (t,) = self._staged(tensor)
        self._wait(dist.broadcast(t, src=self.ranks[node], group=self.group, async_op=True))
        self._back(tensor, t)

    def barrier(self):
        """Every member of the rail has arrived: a one-word all-reduce (stream-ordered on NCCL, capturable)."""
        word = self.ctx.workspaces.get("rail.barrier", range(self.ctx.num_ranks), (1,), torch.int32)
        self.all_reduce(word, "max")
        self.bytes_handed -= word.element_size()  # a handshake, not data
        self.calls -= 1
