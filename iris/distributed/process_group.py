"""``IrisProcessGroup``: a torch.distributed process group whose collectives run iris kernels.

``import iris.distributed`` registers it as the backend ``"iris"``: ``dist.new_group(backend="iris")``,
``dist.init_process_group("iris")`` or ``"cpu:gloo,cuda:iris"``. Ordinary tensors are staged through the
context's heap buffer (``staging.py``); each call runs on the current stream and returns a ``Work`` whose
``wait()`` makes the then-current stream wait for it, as NCCL's does (``barrier``'s also blocks the host); a
synchronous ``all_reduce`` returns none, which torch's ``dist.all_reduce`` takes as already waited for.

The iris context: the one given to ``set_context(ctx)`` on every rank, else one the backend creates with its
first group (``IRIS_HEAP_SIZE`` bytes, default 256 MiB on GPUs and 16 MiB on the cpu backend). Creation is
collective over the world, so that first group must span the world; a subgroup made before any context exists
is refused. A user's own ``iris.iris()`` context is not found by itself: without ``set_context`` the program
holds two heaps. When the iris group is itself the default group, the context is made at its first collective
(torch has not finished making the group before), and the context's own set-up (handle and object exchanges)
goes through a gloo group beside it; nothing of the caller's does.

Tensors that are not on the heap's device (CPU tensors of a program on GPUs) go to that gloo group, which is
what ``"cpu:gloo,cuda:iris"`` asks for: torch hands a Python process group every device's tensors.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

from iris.distributed.collectives import GroupCollectives
from iris.distributed.staging import staging_for
from iris.iris import Iris
from iris.platform import private

BACKEND_NAME = "iris"
DEFAULT_HEAP_BYTES = {"cpu": 16 << 20, "cuda": 256 << 20}
_bound = None  # the context the backend uses


def set_context(ctx: Iris, staging_bytes: int | None = None) -> None:
    """Use ``ctx`` (an ``iris.Iris``) for every iris process group made from now on, instead of a context of the
    backend's own. Collective (every rank, before its first iris group): allocates the staging buffer on
    ``ctx``'s heap (``staging_bytes``; see ``iris.distributed.staging.staging_for``).

    Raises ``TypeError`` when ``ctx`` is not an ``iris.Iris``; ``ValueError`` for a ``staging_bytes`` below 256, or
    other than that of the staging buffer the context already has.

    Example::

        import iris.distributed  # registers the backend "iris"
        iris.distributed.set_context(ctx)  # every rank, before its first iris group
        group = dist.new_group(backend="iris")
        x = torch.ones(8, device=ctx.get_device())  # an ordinary tensor
        dist.all_reduce(x, group=group)  # an iris kernel
        assert torch.all(x == world_size)
        dist.destroy_process_group(group)
    """
    global _bound
    if not isinstance(ctx, Iris):
        raise TypeError(f"iris.distributed.set_context: expected an iris context (iris.iris(...)), got "
                        f"{type(ctx).__name__}")
    staging_for(ctx, staging_bytes)
    _bound = ctx


def get_context() -> Iris | None:
    """The context the iris process groups use: the one ``set_context`` gave, else the backend's own once its first
    group has made it, else None.

    Example::

        import iris.distributed  # registers the backend "iris"
        iris.distributed.set_context(ctx)
        assert iris.distributed.get_context() is ctx
    """
    return _bound


def _create_context():
    global _bound
    from iris.iris import iris
    from iris.platform.backend import BACKEND as backend

    heap = int(os.environ.get("IRIS_HEAP_SIZE", DEFAULT_HEAP_BYTES["cpu" if backend == "cpu" else "cuda"]))
    _bound = iris(heap)
    staging_for(_bound)
    return _bound


class Work(dist._Work):
    """The handle of one call. The kernels are already queued on ``stream`` (the raw handle of the stream current at
    the call; None on the cpu backend, where kernels have run by then). ``wait()`` makes the then-current stream
    wait for them: nothing to do when it is that stream (what torch's synchronous calls do right after the call),
    else an event recorded on the call's stream then, which the current stream waits on. That event also covers
    work queued on the call's stream after the call (a longer wait, never a shorter one): recording one at every
    call instead cost an event record and a capture query on the host per call. ``blocking`` (barrier) also blocks
    the host in ``wait()``."""

    def __init__(self, device, stream, result=(), blocking=False):
        super().__init__()
        self._device, self._stream, self._result, self._blocking = device, stream, result, blocking

    def _external(self):
        return torch.cuda.ExternalStream(self._stream, device=self._device)

    def wait(self, timeout=None):
        stream = self._stream
        if stream is None:
            return True
        if self._blocking:
            self._external().synchronize()
        elif stream != private.current_stream(self._device):
            event = torch.cuda.Event()
            event.record(self._external())
            torch.cuda.current_stream().wait_event(event)
        return True

    def is_completed(self):
        return self._stream is None or self._external().query()

    def is_success(self):
        return True

    def result(self):
        return list(self._result)

    def get_future(self):
        future = torch.futures.Future()
        if self._stream is not None:
            self._external().synchronize()
        future.set_result(list(self._result))
        return future


def _unsupported(name):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"iris process group: {name} is not supported by the iris backend; use a gloo or "
                                  "NCCL group for it (dist.new_group(backend='gloo'))")

    method.__name__ = name
    return method


class IrisProcessGroup(dist.ProcessGroup):
    """The process group of the ``"iris"`` backend: ``IrisProcessGroup(store, rank, world_size, timeout)``, as
    torch's backend creators are called (``rank`` and ``world_size`` within the group); ``global_ranks`` are
    the members' ranks in the world (default: the first ``world_size``)."""

    def __init__(self, store, rank, world_size, timeout=timedelta(minutes=5), global_ranks=None):
        super().__init__(rank, world_size)
        self._store, self._timeout = store, timeout
        self._ranks = sorted(global_ranks) if global_ranks else list(range(world_size))
        self._collectives = None
        self._gloo = None
        self._bootstrapping = False
        self._group_name = None
        if _bound is None and dist.is_initialized():  # new_group: every rank of the world is here
            if len(self._ranks) != dist.get_world_size():
                raise RuntimeError(f"iris process group: a group of ranks {self._ranks} cannot create the iris "
                                   "context, which every rank of the world must create together; make a world-wide "
                                   "iris group first, or call iris.distributed.set_context(iris.iris(...)) on every "
                                   "rank")
            _create_context()

    def getBackendName(self):
        return BACKEND_NAME

    @property
    def group_name(self):
        """torch's name of this group, by which functional collectives find it (the C++ getter does not see
        the name torch sets on a Python subclass, so it is kept here)."""
        if self._group_name is None:
            return dist.distributed_c10d._world.pg_names[self]
        return self._group_name

    def _set_group_name(self, name):
        self._group_name = name
        super()._set_group_name(name)

    # ------------------------------------------------------------------ dispatch
    def _gloo_group(self):
        if self._gloo is None:
            self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("iris-gloo/", self._store), self.rank(), self.size(),
                                               self._timeout)
        return self._gloo

    def _ops(self, tensors):
        """Our collectives for ``tensors``, or None when gloo takes them: during the context's own set-up, and
        for tensors off the heap's device."""
        if self._bootstrapping:
            return None
        if self._collectives is None:
            ctx = _bound
            if ctx is None:
                self._bootstrapping = True
                try:
                    ctx = _create_context()
                finally:
                    self._bootstrapping = False
            world = list(range(ctx.get_num_ranks()))
            group = None if self._ranks == world else self
            self._collectives = GroupCollectives(ctx, staging_for(ctx), self._ranks, group)
        device = self._collectives.ctx.get_device()
        if device.type == "cuda" and any(t.device.type == "cpu" for t in tensors):
            return None
        return self._collectives

    def _done(self, ops, result=(), blocking=False):
        """The call's Work: on GPUs it holds the current stream's raw handle (``Work``)."""
        device = ops.device_index
        return Work(device, private.current_stream(device) if device is not None else None, result, blocking)

    # ------------------------------------------------------------------ collectives
    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else "sum"
        ops = self._collectives
        if ops is None or ops.on_cuda and (len(tensors) != 1 or tensors[0].is_cpu):  # ``_ops`` decides
            ops = self._ops(tensors)
            if ops is None:
                return self._gloo_group().allreduce(tensors, _options(c10d.AllreduceOptions, reduceOp=op))
        for t in tensors:
            ops.all_reduce(t, op, "iris allreduce")
        if opts is not None and not opts.asyncOp:
            # torch's synchronous call (dist.all_reduce, async_op=False) waits on the Work only when it gets one back,
            # and that wait does nothing here (the current stream is the call's): the Work and the wait cost ~1.2 us
            # of a call on a 2-core host. Callers from C++ (functional collectives, DDP) leave asyncOp true.
            return None
        return self._done(ops, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        ops = self._ops(tensors)
        if ops is None:
            return self._gloo_group().allreduce_coalesced(tensors, opts)
        for t in tensors:
            ops.all_reduce(t, opts.reduceOp, "iris allreduce_coalesced")
        return self._done(ops, tensors)

    def broadcast(self, tensors, opts):
        ops = self._ops(tensors)
        if ops is None:
            return self._gloo_group().broadcast(tensors, opts)
        ops.broadcast(tensors[opts.rootTensor], opts.rootRank, "iris broadcast")
        return self._done(ops, tensors)

    def reduce(self, tensors, opts):
        ops = self._ops(tensors)
        if ops is None:
            return self._gloo_group().reduce(tensors, opts)
        ops.reduce(tensors[opts.rootTensor], opts.rootRank, opts.reduceOp, "iris reduce")
        return self._done(ops, tensors)

    def allgather(self, output_lists, input_tensors, opts=None):
        ops = self._ops([*input_tensors, *output_lists[0]])
        if ops is None:
            return self._gloo_group().allgather(output_lists, input_tensors, _options(c10d.AllgatherOptions))
        inp, outs = input_tensors[0], output_lists[0]
        if len(outs) != ops.size or any(o.shape != inp.shape or o.dtype != inp.dtype for o in outs):
            raise ValueError(f"iris allgather: expected {ops.size} output tensors of shape {tuple(inp.shape)} and "
                             f"dtype {inp.dtype}, got {[tuple(o.shape) for o in outs]}")
        # An all_to_all whose every segment is our whole input: the list outputs need no gathered buffer.
        ops.all_to_all_segments(outs, [inp] * ops.size, "iris allgather", max_segment=inp.numel())
        return self._done(ops, outs)

    def all_gather_single(self, output, input, opts=None):
        ops = self._ops([output, input])
        if ops is None:
            return self._gloo_group()._allgather_base(output, input, _options(c10d.AllgatherOptions))
        ops.all_gather(output, input, "iris all_gather_into_tensor")
        return self._done(ops, [output])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """One all_gather per pair (torch's functional all_gather_tensor comes here, with one pair)."""
        ops = self._ops([*outputs, *inputs])
        if ops is None:
            return self._gloo_group().allgather_into_tensor_coalesced(outputs, inputs, _options(c10d.AllgatherOptions))
        for out, inp in zip(outputs, inputs, strict=True):
            ops.all_gather(out, inp, "iris all_gather_into_tensor_coalesced")
        return self._done(ops, outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts):
        ops = self._ops([*outputs, *input_lists[0]])
        if ops is None:
            return self._gloo_group().reduce_scatter(outputs, input_lists, opts)
        out, inps = outputs[0], input_lists[0]
        if len(inps) == ops.size and all(i.shape == out.shape and i.dtype == out.dtype for i in inps):
            ops.reduce_scatter_rows(out, [i.view(-1) for i in inps], opts.reduceOp, "iris reduce_scatter")
        else:  # uneven splits (every rank passes the same shapes, so every rank takes this path)
            ops.reduce_scatter_v(out, list(inps), opts.reduceOp, "iris reduce_scatter")
        return self._done(ops, outputs)

    def reduce_scatter_single(self, output, input, opts):
        ops = self._ops([output, input])
        if ops is None:
            return self._gloo_group()._reduce_scatter_base(output, input, opts)
        ops.reduce_scatter(output, input, opts.reduceOp, "iris reduce_scatter_tensor")
        return self._done(ops, [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        """One reduce_scatter per pair (torch's functional reduce_scatter_tensor comes here, with one pair)."""
        ops = self._ops([*outputs, *inputs])
        if ops is None:
            return self._gloo_group().reduce_scatter_tensor_coalesced(outputs, inputs, opts)
        for out, inp in zip(outputs, inputs, strict=True):
            ops.reduce_scatter(out, inp, opts.reduceOp, "iris reduce_scatter_tensor_coalesced")
        return self._done(ops, outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        ops = self._ops([output, input])
        if ops is None:
            return self._gloo_group().alltoall_base(output, input, output_split_sizes, input_split_sizes,
                                                    _options(c10d.AllToAllOptions))
        caller = "iris all_to_all_single"
        if not output_split_sizes and not input_split_sizes:
            ops.all_to_all(output, input, caller)
        else:
            outs = _split(output, output_split_sizes, ops.size, caller, "output")
            inps = _split(input, input_split_sizes, ops.size, caller, "input")
            ops.all_to_all_segments(outs, inps, caller)
        return self._done(ops, [output])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        ops = self._ops([*output_tensors, *input_tensors])
        if ops is None:
            return self._gloo_group().alltoall(output_tensors, input_tensors, _options(c10d.AllToAllOptions))
        ops.all_to_all_segments(list(output_tensors), list(input_tensors), "iris alltoall")
        return self._done(ops, output_tensors)

    def barrier(self, opts=None):
        ops = self._ops([])
        if ops is None:
            return self._gloo_group().barrier(_options(c10d.BarrierOptions))
        ops.barrier()
        return self._done(ops, blocking=True)

    def send(self, tensors, dst, tag=0):
        ops = self._ops(tensors)
        if ops is None:
            return self._gloo_group().send(tensors, dst, tag)
        _no_tag(tag, "send")
        ops.send(tensors[0], dst, "iris send")
        return self._done(ops, tensors)

    def recv(self, tensors, src, tag=0):
        ops = self._ops(tensors)
        if ops is None:
            return self._gloo_group().recv(tensors, src, tag)
        _no_tag(tag, "recv")
        ops.recv(tensors[0], src, "iris recv")
        return self._done(ops, tensors)

    recv_anysource = _unsupported("recv_anysource (recv without a source rank)")
    gather = _unsupported("gather")
    scatter = _unsupported("scatter")
    allgather_coalesced = _unsupported("allgather_coalesced")
    _start_coalescing = _unsupported("coalescing (batch_isend_irecv, coalescing_manager)")
    _end_coalescing = _start_coalescing


def _options(cls, **fields):
    opts = cls()
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


def _no_tag(tag, op):
    if tag != 0:
        raise ValueError(f"iris {op}: tag={tag}; the iris backend matches sends and receives by order, not tag; pass "
                         "tag=0")


def _split(tensor, split_sizes, size, caller, name):
    """``tensor``'s flat segments along dim 0 by ``split_sizes`` rows (equal when empty)."""
    rows = tensor.shape[0] if tensor.dim() else 1
    if not split_sizes:
        if rows % size:
            raise ValueError(f"{caller}: {name} has {rows} rows, which {size} ranks do not divide; pass split sizes")
        split_sizes = [rows // size] * size
    if len(split_sizes) != size or sum(split_sizes) != rows:
        raise ValueError(f"{caller}: {name} split sizes {list(split_sizes)} must be {size} numbers summing to its "
                         f"{rows} rows")
    return [segment.reshape(-1) for segment in torch.split(tensor, list(split_sizes), dim=0)]


def _create_backend(options, backend_options=None):
    """torch's extended creator: the members' global ranks come with the options."""
    return IrisProcessGroup(options.store, options.group_rank, options.group_size, options.timeout,
                            list(options.global_ranks_in_group))


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])
