"""Launches remembered from call to call: an eager collective's host path at the cost of one kernel launch.

A launcher's general path checks its arguments, resolves the group and the config, picks the grid and the
constexprs, and lets Triton's ``JITFunction.run`` bind, specialise and look up the compiled kernel: ~80 us of
Python before Triton's part on a loaded 2-core host for an 8 KiB all_reduce (3.6 us on a hit), whose kernel runs
in 2.3 us on an H200. Everything it computes is a function
of the call's key (op, shapes, dtypes, which tensors alias, their 16-byte alignment, group, config), so the
general path ends by storing a ``Launch`` under that key in the context's ``LaunchCache``, and the next call with
the same key does only what must be done per call:

    key = key_of(op, group, config, (out, inp))      # shapes, dtypes, aliasing, alignment, ids
    if ctx.launches.run(ctx, key, group, config, (out, inp)):   # a hit: checks, then the compiled kernel
        return
    ... general path ...; ctx.launches.put(key, group, config, Launch(kernel, grid, static, meta))(out, inp)

What a hit still does: the per-call checks whose answer is not in the key (a tensor in the allocation whose table
the launch bakes in: one address compare on the heap, a look through the live maps for another provider's memory),
the peer-failure check, the current stream, and the launch. Triton's CUDA launcher is called directly with the tuple
of arguments ``JITFunction.run`` would pass (``private.compiled_launcher``); with a launch hook set (a profiler such
as proton), a kernel needing a scratch allocation, another current device, or on the cpu backend
(the Triton interpreter, which compiles nothing), the launch goes through ``kernel[grid](...)`` with the same
arguments: the key is honoured either way, and only the last step differs.

Keys hold ``id(group)`` and ``id(config)``; a hit is taken only when the stored group (held weakly: a dropped
ProcessGroup gives its sync slot back) and config (held: a config is small) are the objects passed, so an id that
the garbage collector reuses is never a stale hit. The cache is bounded (``LIMIT`` keys, then it starts afresh):
a server with varying shapes does not grow it without end.
"""

import inspect
import os
import weakref

import torch

from iris.host.memory import overlap, providers
from iris.platform import private

# Keys before the cache starts afresh: each entry is a few hundred bytes; a model's distinct (op, shape) pairs
# number in the tens.
LIMIT = 4096


# extras a key holds; anything else (a ReduceOp, a bad eps) takes the general path
_PLAIN = (str, int, float, torch.device)


def _none():
    return None


# ``IRIS_CCL_CHECK=1`` as the process started: read once, since ``os.environ.get`` costs ~1 us on a 2-core host, half
# of a key (``iris/ccl/common.py``'s precheck reads the same value)
CHECK_ALL = os.environ.get("IRIS_CCL_CHECK") == "1"


def checking(config):
    """Check mode (``config.check`` or ``IRIS_CCL_CHECK=1``) compares every call across ranks: never cached."""
    return CHECK_ALL or getattr(config, "check", False)  # a bad config: not cached


def key_of(name, group, config, tensors, *extra):
    """The key of a call on ``tensors`` (a tuple) with ``extra`` (hashable: an op name, an eps) under ``group`` and
    ``config``: each tensor's shape, dtype, device, contiguity and 16-byte alignment, which tensors' bytes meet
    another's and where (in place, a slot of it, columns of one buffer), and the ids. None when the call is not
    cached: check mode, or an argument not a tensor (the general path then raises its error)."""
    if checking(config):
        return None
    for value in extra:
        if type(value) not in _PLAIN:
            return None
    key = [name, id(group), id(config), *extra]
    spans = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            return None
        # Triton specialises a pointer on its 16-byte alignment (vector widths); the address mod 16, not only
        # whether it is 0, since a launch may pass an offset into the tensor (``SlicedLaunch``)
        contiguous = t.is_contiguous()
        start = t.data_ptr()
        end = start + t.nbytes if contiguous else overlap.span(t)[1]
        # where these bytes meet an earlier tensor's (-1: nowhere): calls that differ here differ in what aliases
        # what (in place, a slot of it, an overlap the general path refuses), and so never share a launch
        meets = -1
        for index, (s, e) in enumerate(spans):
            if start < e and s < end:
                meets = index, start - s
                break
        key += (t.shape, t.dtype, t.device, contiguous, start & 15, meets)
        spans.append((start, end))
    return tuple(key)


def _in_allocation(ctx, tensor, nbytes, table):
    """``tensor`` (``nbytes`` from its start) lies in the allocation ``table`` translates: the heap (one address
    compare), or the still-live map of another provider whose table it is."""
    if table is ctx.heap_bases:
        return ctx.heap.holds(tensor.data_ptr(), nbytes)
    address = providers.find(tensor)
    return address is not None and address.peer_bases is table


class Launch:
    """One kernel launch of fixed grid and arguments but for the leading tensors: ``launch(*tensors)`` launches
    ``kernel[grid](*tensors, *static, **meta)``."""

    __slots__ = ("kernel", "grid", "static", "meta", "_tail", "_direct", "_device", "__weakref__")

    def __init__(self, kernel, grid, static, meta):
        self.kernel, self.grid, self.static, self.meta = kernel, tuple(grid), tuple(static), meta
        self._tail = None    # the arguments after the tensors, as Triton's launcher takes them
        self._direct = None  # (launch, prefix, grid0, grid1, grid2), once compiled
        self._device = None

    def __call__(self, *tensors):
        direct = self._ready()
        if direct is not None:
            launch, prefix, g0, g1, g2 = direct
            launch(g0, g1, g2, private.current_stream(self._device), *prefix, *tensors, *self._tail)
            return
        self._general(tensors)

    def _ready(self):
        """The direct launch when it can be taken now (module docstring), else None."""
        direct = self._direct
        if direct is not None and private.no_launch_hooks() and private.current_device() == self._device:
            return direct
        return None

    def _general(self, tensors):
        compiled = self.kernel[self.grid](*tensors, *self.static, **self.meta)
        if self._direct is None and compiled is not None:
            self._bind(compiled, len(tensors))

    def _bind(self, compiled, n_tensors):
        """Take the compiled kernel's launcher for the calls to come (nothing on the interpreter)."""
        launcher = private.compiled_launcher(compiled)
        if launcher is None:
            return
        parameters = list(inspect.signature(self.kernel.fn).parameters.values())
        # JITFunction.run passes every parameter in order, constexprs and defaults included.
        tail = list(self.static)
        for p in parameters[n_tensors + len(self.static):]:
            tail.append(self.meta[p.name] if p.name in self.meta else p.default)
        grid = self.grid + (1, 1)
        self._tail = tuple(tail)
        self._device = private.current_device()
        self._direct = (launcher[0], launcher[1], grid[0], grid[1], grid[2])


class OperandLaunch(Launch):
    """A ``Launch`` whose leading arguments ``operands(*tensors)`` makes per call from the call's tensors: a fused
    op's TMA descriptors, which hold the tensor's address and so cannot be stored."""

    __slots__ = ("operands",)

    def __init__(self, kernel, grid, static, meta, operands):
        super().__init__(kernel, grid, static, meta)
        self.operands = operands

    def __call__(self, *tensors):
        super().__call__(*self.operands(*tensors))


class SlicedLaunch(Launch):
    """A ``Launch`` that passes its second tensor as elements [start, stop) of its flat view (reduce_scatter's
    pull reads this rank's slice of its input). The direct launch passes the slice's address, which Triton's
    launcher takes for a pointer as it takes a tensor's ``data_ptr()``: the view and the slice were two tensor
    constructions per call, ~1 us each on a 2-core host."""

    __slots__ = ("start", "stop")

    def __init__(self, kernel, grid, static, meta, start, stop):
        super().__init__(kernel, grid, static, meta)
        self.start, self.stop = start, stop

    def __call__(self, first, second):
        direct = self._ready()
        if direct is not None:
            launch, prefix, g0, g1, g2 = direct
            address = second.data_ptr() + self.start * second.element_size()
            launch(g0, g1, g2, private.current_stream(self._device), *prefix, first, address, *self._tail)
            return
        self._general((first, second.view(-1)[self.start:self.stop]))


class LaunchCache:
    """A context's launches by key (the module docstring)."""

    def __init__(self, groups, limit=LIMIT):
        """``groups``: the context's ``GroupTable``, whose ``last_text`` (the call described, for the error that
        names it) each entry keeps from its general path and each hit puts back."""
        self.groups = groups
        self.limit = limit
        self._entries = {}  # key -> (launch, group weakref or _none, config, symmetric, text, guard)
        self.hits = self.misses = 0

    def _entry(self, key, group, config):
        """The entry ``(launch, group reference, config, symmetric, text)`` stored under ``key`` for these ``group``
        and ``config`` objects, or None."""
        entry = self._entries.get(key)
        if entry is None or entry[1]() is not group or entry[2] is not config:
            return None
        return entry

    def stored(self, key, group, config):
        """The launch stored under ``key`` for these ``group`` and ``config`` objects, or None; counts nothing (for a
        caller that remembers a route of its own around a launch)."""
        entry = self._entry(key, group, config)
        return None if entry is None else entry[0]

    def put(self, key, group, config, launch, symmetric=(), guard=None):
        """Store ``launch`` under ``key`` (nothing when the key is None) and return it. ``symmetric``: (index, bytes,
        table) of each tensor peers reach, where ``table`` is the bases table the launch translates it with
        (``ctx.symmetric_table``): a hit must find the tensor in that table's allocation again (the heap, or the
        same live map of another provider; a tensor elsewhere takes the general path, which stores its own).
        ``guard``: a function that must return True for a hit (what the launch holds beyond the key is unchanged)."""
        if key is not None:
            if len(self._entries) >= self.limit:
                self._entries.clear()
            self._entries[key] = (launch, _none if group is None else weakref.ref(group), config, tuple(symmetric),
                                  self.groups.last_text, guard)
        return launch

    def run(self, ctx, key, group, config, tensors):
        """Launch what is stored under ``key`` on ``tensors`` and return True; False on a miss (the general path
        then runs, and raises where a check fails). Raises ``PeerError`` once a peer has failed."""
        if key is None:
            return False
        entry = self._entry(key, group, config)
        if entry is None:
            self.misses += 1
            return False
        launch, _, _, symmetric, text, guard = entry
        ctx.groups.check(key[0])
        ctx.groups.last_text = text
        for index, nbytes, table in symmetric:
            if not _in_allocation(ctx, tensors[index], nbytes, table):
                self.misses += 1
                return False
        if guard is not None and not guard():
            self.misses += 1
            return False
        self.hits += 1
        launch(*tensors)
        return True
