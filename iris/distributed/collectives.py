"""Collectives on ordinary tensors, staged through the context's heap buffer (``staging.py``) and run by
``ctx.ccl``: what the torch.distributed backend and the ``torch.ops.iris`` ops both call.

Every function is collective over its group, runs on the current stream (stream-ordered, no host
synchronisation except the uneven all_to_all's size exchange), and allocates nothing, so it replays in a
CUDA graph once a first call has made the group's flags. Tensors must be on the heap's device.
"""

import itertools

import torch
import torch.distributed as dist

from iris.ccl import CollectiveConfig
from iris.ccl.all_reduce import all_reduce_staged
from iris.host import launches

ONE_SHOT = CollectiveConfig(algorithm="one_shot")
TWO_SHOT = CollectiveConfig(algorithm="two_shot")
PULL = CollectiveConfig(algorithm="pull")  # the push reduce_scatter allocates a workspace of each group's own
_MOVED_AS_IS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32)
_REDUCE_OPS = {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min"}
# names and torch's RedOpType members (a ReduceOp's ``op``) to our names
_OP_NAMES = {**{name.lower(): name.lower() for name in _REDUCE_OPS},
             **{getattr(dist.ReduceOp, name): name.lower() for name in _REDUCE_OPS}}


def movable(tensor):
    """A flat view the data-movement kernels can carry: the tensor itself in a dtype the collectives take,
    else its bytes as the signed integer of the same width (float64, bool, complex: moved, never computed on)."""
    flat = tensor.view(-1)
    if flat.dtype in _MOVED_AS_IS:
        return flat
    width = {1: torch.int8, 2: torch.int16, 4: torch.int32}.get(flat.element_size(), torch.int64)
    return flat.view(width)


def reduce_op_name(op, caller):
    """torch's ReduceOp (or its RedOpType, or a name) as one of the ops our kernels run; the others raise."""
    name = _OP_NAMES.get(op if isinstance(op, str) else getattr(op, "op", op))  # the common ones, in one lookup
    if name is not None:
        return name
    given = op if isinstance(op, str) else str(getattr(op, "op", op)).split(".")[-1]
    name = _REDUCE_OPS.get(given.upper())
    if name is None:
        raise ValueError(f"{caller}: reduce op {given} is not supported by the iris backend; use SUM, AVG, MAX or "
                         "MIN (or a gloo or NCCL group for this op)")
    return name


class _HeapRoute:
    """A remembered all_reduce on tensors as they are: the input (and for the two-shot the output) must still be on
    the heap, which a key cannot know."""

    __slots__ = ("ctx", "launch", "checks")

    def __init__(self, ctx, launch, checks):
        self.ctx, self.launch, self.checks = ctx, launch, checks  # (index in (tensor, out), bytes) each

    def __call__(self, tensor, out, caller):
        pair, heap = (tensor, out), self.ctx.heap
        for index, nbytes in self.checks:
            if not heap.holds(pair[index].data_ptr(), nbytes):
                return False  # the general path decides (stages, or raises)
        self.ctx.groups.check(caller)
        self.launch(out, tensor)
        return True


class _StagedRoute:
    """A remembered all_reduce of one staged chunk: the one-shot kernel copies the input into the staging buffer
    (peers read it there) and writes the caller's ``out`` directly (``iris/ccl/all_reduce.py``,
    ``all_reduce_staged``)."""

    __slots__ = ("ctx", "launch", "staged")

    def __init__(self, ctx, launch, staged):
        self.ctx, self.launch, self.staged = ctx, launch, staged

    def __call__(self, tensor, out, caller):
        self.ctx.groups.check(caller)
        self.launch(out, self.staged, tensor)
        return True


class GroupCollectives:
    """The collectives of one group of ranks of ``ctx``: ``ranks`` are global ranks, ascending (torch sorts a
    group's ranks too, so group rank i is ``ranks[i]``); ``group`` is what ``ctx.ccl`` takes for it (None for
    the whole world)."""

    def __init__(self, ctx, staging, ranks, group):
        self.ctx, self.staging, self.ranks, self.group = ctx, staging, list(ranks), group
        self.size = len(self.ranks)
        self.index = self.ranks.index(ctx.get_rank())
        device = ctx.get_device()
        self.on_cuda = device.type == "cuda"
        # the Work of a call holds its stream there
        self.device_index = (torch.cuda.current_device() if device.index is None else device.index) if self.on_cuda \
            else None
        self._routes = {}  # all_reduce's route key -> _HeapRoute or _StagedRoute
        self.hits = 0  # all_reduce calls that took a remembered route

    # ------------------------------------------------------------------ remembered routes
    # A call's route (the tensors as they are, or one staged chunk) and the launch it runs are functions of its key
    # (``_route_key``), so a repeated call skips the checks and the second key ``ctx.ccl`` would build: on the host a
    # hit is one key, one dict lookup, the heap's address compares (or the staging copy), the peer-failure check
    # and the launch.

    def _route_key(self, op, tensor, out):
        """What an all_reduce's route and launch depend on: both tensors' shapes, dtypes, contiguity, devices (the
        index, -1 for the CPU) and 16-byte alignment, and whether they alias; one tensor's when ``out`` is
        ``tensor`` (in place: torch.distributed's call). None in check mode (never cached) or for a non-tensor."""
        if type(tensor) is not torch.Tensor or type(out) is not torch.Tensor or launches.CHECK_ALL:
            return None
        start = tensor.data_ptr()
        if out is tensor:
            return op, tensor.shape, tensor.dtype, tensor.get_device(), tensor.is_contiguous(), start & 15
        out_start = out.data_ptr()
        return (op, tensor.shape, tensor.dtype, tensor.get_device(), tensor.is_contiguous(), start & 15, out.shape,
                out.dtype, out.get_device(), out.is_contiguous(), out_start & 15, start == out_start)

    def _remember(self, key, route):
        if key is not None and route is not None:
            if len(self._routes) >= launches.LIMIT:
                self._routes.clear()
            self._routes[key] = route

    def _launch_of(self, out, inp, op, config):
        """The launch ``ctx.ccl.all_reduce`` just stored for these tensors (None if it stored none)."""
        key = launches.key_of("ccl.all_reduce", self.group, config, (out, inp), op)
        return self.ctx.launches.stored(key, self.group, config)

    # ------------------------------------------------------------------ helpers
    def check(self, caller, *tensors):
        device = self.ctx.get_device()
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{caller}: expected a torch.Tensor, got {type(t).__name__}")
            if t.device != device:
                raise ValueError(f"{caller}: a tensor is on {t.device} but this rank's iris heap is on {device}; move "
                                 f"it to {device} (on GPUs, 'cpu:gloo,cuda:iris' sends CPU tensors to gloo)")
            if not t.is_contiguous():
                raise ValueError(f"{caller}: tensors must be contiguous, got shape {tuple(t.shape)} with strides "
                                 f"{t.stride()}; call .contiguous() first")

    def reducible(self, caller, dtype):
        if dtype not in _MOVED_AS_IS:
            raise ValueError(f"{caller}: the iris kernels do not reduce {dtype}; use one of "
                             f"{', '.join(str(d) for d in _MOVED_AS_IS)}, or a gloo or NCCL group for it")

    def on_heap(self, *tensors):
        """Every tensor lies on the heap (allocated collectively, so at the same offset on every rank): then the
        kernels take them as they are, and nothing is staged."""
        return all(self.ctx.is_symmetric(t) for t in tensors)

    def staged_chunks(self, flat):
        """(start, part, staged) for each chunk of the 1-D ``flat``: ``staged`` is the staging buffer viewed with
        ``part``'s dtype and length; what it holds is the caller's to fill or read."""
        chunk = self.chunk(flat.dtype)
        for start in range(0, flat.numel(), chunk):
            part = flat[start:start + chunk]
            yield start, part, self.staging.view(flat.dtype, part.numel())

    def chunk(self, dtype, per_element_slots=1):
        """Elements per chunk when a chunk takes ``per_element_slots`` buffer elements per element."""
        chunk = self.staging.elements(dtype) // per_element_slots
        if chunk < 1:
            raise ValueError(f"iris staging: {self.staging.nbytes} bytes cannot hold one {dtype} element for each "
                             f"of {per_element_slots} slots; raise IRIS_STAGING_BYTES")
        return chunk

    def spans_nodes(self, caller):
        """Whether the group holds ranks of several nodes (then ctx.ccl runs its hierarchical forms)."""
        return self.ctx.num_nodes > 1 and self.ctx.spans_nodes(self.group, caller)

    def global_rank(self, group_rank, caller, name):
        if not 0 <= group_rank < self.size:
            raise ValueError(f"{caller}: {name}={group_rank} is outside the group of {self.size} ranks")
        return self.ranks[group_rank]

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, tensor, op="sum", caller="iris all_reduce", out=None):
        """``tensor`` (or ``out``, of the same shape, leaving ``tensor`` as it was) becomes ``op`` over the group's
        tensors."""
        out = tensor if out is None else out
        op = reduce_op_name(op, caller)
        key = self._route_key(op, tensor, out)
        route = self._routes.get(key) if key is not None else None
        if route is not None and route(tensor, out, caller):
            self.hits += 1
            return
        self.check(caller, tensor, out)
        if out.shape != tensor.shape or out.dtype != tensor.dtype:
            raise ValueError(f"{caller}: out is {tuple(out.shape)} {out.dtype}, expected {tuple(tensor.shape)} "
                             f"{tensor.dtype}")
        self.reducible(caller, tensor.dtype)
        one_shot_max = TWO_SHOT.one_shot_max_bytes // tensor.element_size()
        nbytes = tensor.numel() * tensor.element_size()
        if self.on_heap(tensor) and (self.on_heap(out) or tensor.numel() <= one_shot_max):
            # as they are: the one-shot (up to 1 MiB) writes out anywhere; the two-shot needs out on the heap
            self.ctx.ccl.all_reduce(out, tensor, op=op, group=self.group)
            launch = self._launch_of(out, tensor, op, None)
            checks = ((0, nbytes),) if tensor.numel() <= one_shot_max else ((0, nbytes), (1, nbytes))
            self._remember(key, launch and _HeapRoute(self.ctx, launch, checks))
            return
        flat, flat_out = tensor.view(-1), out.view(-1)
        if self.spans_nodes(caller):  # ctx.ccl's form across nodes, on the staged copy
            for start, part, staged in self.staged_chunks(flat):
                staged.copy_(part)
                self.ctx.ccl.all_reduce(staged, staged, op=op, group=self.group)
                flat_out[start:start + part.numel()].copy_(staged)
            return
        if tensor.numel() <= min(one_shot_max, self.chunk(flat.dtype)):  # one chunk, staged and one-shot
            staged = self.staging.view(flat.dtype, flat.numel()).view(tensor.shape)
            launch = all_reduce_staged(self.ctx, out, tensor, staged, op=op, group=self.group, config=ONE_SHOT)
            self._remember(key, _StagedRoute(self.ctx, launch, staged))
            return
        for start, part, staged in self.staged_chunks(flat):
            part_out = flat_out[start:start + part.numel()]
            if part.numel() <= one_shot_max:  # the kernel stages part; the reduction lands in out directly
                all_reduce_staged(self.ctx, part_out, part, staged, op=op, group=self.group, config=ONE_SHOT)
            else:
                staged.copy_(part)
                self.ctx.ccl.all_reduce(staged, staged, op=op, group=self.group, config=TWO_SHOT)
                part_out.copy_(staged)

    def all_gather(self, out, inp, caller="iris all_gather"):
        """``out`` ([size * n]) = cat of every rank's ``inp`` ([n]) along dim 0."""
        self.check(caller, out, inp)
        n = inp.numel()
        if out.numel() != self.size * n or out.dtype != inp.dtype:
            raise ValueError(f"{caller}: output has {out.numel()} {out.dtype} elements, expected group size "
                             f"{self.size} * input's {n} {inp.dtype}")
        if self.on_heap(out):
            self.ctx.ccl.all_gather(movable(out), movable(inp), group=self.group)
            return
        flat = movable(inp)
        rows, n = movable(out).view(self.size, -1), flat.numel()
        chunk = self.chunk(flat.dtype, self.size)
        for start in range(0, n, chunk):
            part = flat[start:start + chunk]
            staged = self.staging.view(flat.dtype, self.size * part.numel())
            self.ctx.ccl.all_gather(staged, part, group=self.group)
            rows[:, start:start + part.numel()].copy_(staged.view(self.size, -1))

    def reduce_scatter(self, out, inp, op="sum", caller="iris reduce_scatter"):
        """``out`` ([n]) = slice ``group rank`` of ``op`` over every rank's ``inp`` ([size * n])."""
        self.check(caller, out, inp)
        if inp.numel() != self.size * out.numel() or out.dtype != inp.dtype:
            raise ValueError(f"{caller}: input has {inp.numel()} {inp.dtype} elements, expected group size "
                             f"{self.size} * output's {out.numel()} {out.dtype}")
        self.reducible(caller, inp.dtype)
        if self.on_heap(inp):
            self.ctx.ccl.reduce_scatter_tensor(out, inp, op=reduce_op_name(op, caller), group=self.group, config=PULL)
            return
        self.reduce_scatter_rows(out, inp.view(self.size, -1), op, caller)

    def reduce_scatter_rows(self, out, rows, op, caller):
        """``reduce_scatter`` of the input whose slices are ``rows``: a [size, n] tensor, or a list of flat tensors
        (one per group rank)."""
        self.check(caller, out, *(rows if isinstance(rows, list) else []))
        op = reduce_op_name(op, caller)
        self.reducible(caller, out.dtype)
        flat, n = out.view(-1), out.numel()
        chunk = self.chunk(out.dtype, self.size)
        for start in range(0, n, chunk):
            part = flat[start:start + chunk]
            staged = self.staging.view(out.dtype, self.size * part.numel()).view(self.size, -1)
            if isinstance(rows, torch.Tensor):  # one strided copy
                staged.copy_(rows[:, start:start + part.numel()])
            else:
                for j, row in enumerate(rows):
                    staged[j].copy_(row[start:start + part.numel()])
            self.ctx.ccl.reduce_scatter_tensor(part, staged.view(-1), op=op, group=self.group, config=PULL)

    def reduce_scatter_v(self, out, inputs, op, caller):
        """Uneven splits: ``out`` (this rank's count) = its range of ``op`` over the group of the concatenation of
        ``inputs`` (one tensor per group rank, ``inputs[i]`` of rank i's count, the same counts on every rank),
        staged through the buffer in chunks of the concatenation (``ctx.ccl.reduce_scatter_v`` on each)."""
        self.check(caller, out, *inputs)
        op = reduce_op_name(op, caller)
        self.reducible(caller, out.dtype)
        if len(inputs) != self.size or any(t.dtype != out.dtype for t in inputs) or (
                inputs[self.index].numel() != out.numel()):
            raise ValueError(f"{caller}: expected {self.size} input tensors of dtype {out.dtype}, the one of this "
                             f"rank ({self.index}) of output's {out.numel()} elements; got "
                             f"{[(tuple(t.shape), t.dtype) for t in inputs]}")
        bounds = list(itertools.accumulate([t.numel() for t in inputs], initial=0))
        flat_out, mine = out.view(-1), (bounds[self.index], bounds[self.index + 1])
        for first in range(0, bounds[-1], self.chunk(out.dtype)):
            last = min(first + self.chunk(out.dtype), bounds[-1])
            staged, splits = self.staging.view(out.dtype, last - first), []
            for j, t in enumerate(inputs):
                lo, hi = max(bounds[j], first), min(bounds[j + 1], last)
                splits.append(max(hi - lo, 0))
                if hi > lo:
                    staged[lo - first:hi - first].copy_(t.view(-1)[lo - bounds[j]:hi - bounds[j]])
            lo, hi = max(mine[0], first), min(mine[1], last)
            part = flat_out[lo - mine[0]:hi - mine[0]] if hi > lo else flat_out[:0]
            self.ctx.ccl.reduce_scatter_v(part, staged, splits, op=op, group=self.group)

    def all_to_all(self, out, inp, caller="iris all_to_all"):
        """Equal splits: slice j of our ``inp`` becomes slice ``group rank`` of rank j's ``out``."""
        self.check(caller, out, inp)
        if out.numel() != inp.numel() or out.dtype != inp.dtype or inp.numel() % self.size:
            raise ValueError(f"{caller}: input ({inp.numel()} {inp.dtype}) and output ({out.numel()} {out.dtype}) "
                             f"must match and split into {self.size} equal slices")
        flat_in, flat_out = movable(inp), movable(out)
        if self.on_heap(out):
            self.ctx.ccl.all_to_all_single(flat_out, flat_in, group=self.group)
            return
        n = flat_in.numel() // self.size
        if self.size * n <= self.staging.elements(flat_in.dtype):  # one chunk: the input is read where it is
            staged = self.staging.view(flat_in.dtype, self.size * n)
            self.ctx.ccl.all_to_all_single(staged, flat_in, group=self.group)
            flat_out.copy_(staged)
            return
        self.all_to_all_segments(list(flat_out.view(self.size, n).unbind(0)),
                                 list(flat_in.view(self.size, n).unbind(0)), caller, max_segment=n)

    def all_to_all_segments(self, outs, inps, caller="iris all_to_all", max_segment=None):
        """Uneven splits: our flat ``inps[j]`` goes to rank j, arriving as its ``outs[group rank]``. Every segment
        is padded to the longest one of any rank, which the ranks agree on first (a max all_reduce and a host
        synchronisation), unless the caller knows it (``max_segment``)."""
        if len(outs) != self.size or len(inps) != self.size:
            raise ValueError(f"{caller}: expected {self.size} input and output segments, got {len(inps)} and "
                             f"{len(outs)}")
        self.check(caller, *outs, *inps)
        if any(t.dtype != inps[0].dtype for t in (*outs, *inps)):
            raise ValueError(f"{caller}: every tensor must have dtype {inps[0].dtype}")
        outs, inps = [movable(t) for t in outs], [movable(t) for t in inps]
        dtype = inps[0].dtype
        if max_segment is None:
            words = self.staging.words
            words[0] = max(t.numel() for t in (*outs, *inps))
            self.ctx.ccl.all_reduce(words[1:], words[:1], op="max", group=self.group, config=ONE_SHOT)
            max_segment = int(words[1].item())
        if max_segment == 0:
            return
        chunk = self.chunk(dtype, 2 * self.size)  # the staged input and output, each [size, chunk]
        for start in range(0, max_segment, chunk):
            width = min(chunk, max_segment - start)
            staged_in = self.staging.view(dtype, self.size * width).view(self.size, width)
            staged_out = self.staging.view(dtype, self.size * width, self.size * chunk).view(self.size, width)
            for j, src in enumerate(inps):
                piece = src.view(-1)[start:start + width]
                staged_in[j, :piece.numel()].copy_(piece)
            self.ctx.ccl.all_to_all_single(staged_out.view(-1), staged_in.view(-1), group=self.group)
            for j, dst in enumerate(outs):
                piece = dst.view(-1)[start:start + width]
                piece.copy_(staged_out[j, :piece.numel()])

    def broadcast(self, tensor, root, caller="iris broadcast"):
        """``tensor`` on every rank becomes group rank ``root``'s."""
        self.check(caller, tensor)
        src = self.global_rank(root, caller, "root")
        flat = movable(tensor)
        if self.on_heap(tensor):
            self.ctx.ccl.broadcast(flat, src=src, group=self.group)
            return
        for _, part, staged in self.staged_chunks(flat):
            if self.index == root:
                staged.copy_(part)
            self.ctx.ccl.broadcast(staged, src=src, group=self.group)
            if self.index != root:
                part.copy_(staged)

    def reduce(self, tensor, root, op="sum", caller="iris reduce"):
        """On group rank ``root``, ``tensor`` becomes ``op`` over the group's tensors; elsewhere it is unchanged."""
        self.check(caller, tensor)
        op = reduce_op_name(op, caller)
        self.reducible(caller, tensor.dtype)
        dst = self.global_rank(root, caller, "root")
        flat = tensor.view(-1)
        for _, part, staged in self.staged_chunks(flat):
            staged.copy_(part)
            self.ctx.ccl.reduce(part, staged, dst=dst, op=op, group=self.group)

    def send(self, tensor, peer, caller="iris send"):
        """Rendezvous with ``recv`` on group rank ``peer``: returns to the stream once the peer has the data."""
        self.check(caller, tensor)
        dst = self.global_rank(peer, caller, "dst")
        flat = movable(tensor)
        for _, part, staged in self.staged_chunks(flat):
            staged.copy_(part)
            self.ctx.ccl.send(staged, dst)

    def recv(self, tensor, peer, caller="iris recv"):
        self.check(caller, tensor)
        src = self.global_rank(peer, caller, "src")
        flat = movable(tensor)
        for _, part, staged in self.staged_chunks(flat):
            self.ctx.ccl.recv(staged, src)
            part.copy_(staged)

    def barrier(self):
        """Device-side barrier over the group, on the current stream."""
        self.ctx.device_barrier(self.group)
