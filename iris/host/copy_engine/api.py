"""The documented copy-engine API: ``ctx.put / put_tile / put_tiles / quiet`` (upstream Iris's SDMA methods) on
this platform's copy engines.

Each (peer, channel) has a lane of its own (``lanes.py``): a CUDA stream made with the context (creating a stream
while a kernel spins can block), or on the cpu backend a host thread standing in for it. A transfer is, in queue order:

    wait   until our local flag reaches ``wait_value``       cuStreamWaitValue32/64 (GEQ: the stream's front end polls)
    copy   the bytes into the peer's heap                    cuMemcpyAsync / cuMemcpy2DAsync (a copy engine over NVLink)
    signal add ``signal_value`` to the peer's flag           a one-program release/sys atomic kernel (CUDA 13.0 has no
                                                             stream atomic; NVSHMEM and TE userbuffers do the same),
                                                             launched through its compiled handle

Channels are independent orderings, not extra bandwidth: two streams per peer by default (``IRIS_CE_CHANNELS``).
Every transfer is ordered after the work already queued on the caller's current stream (an event), so a copy never
reads a tensor that a queued kernel is still writing; the one deadlock this adds is a kernel already queued on
that stream which waits for this transfer's own signal. Likewise a ``wait_flag`` must be raised by something not
queued behind the wait: streams share the device's few hardware queues, so a fill kernel on the current stream can
stand behind the lane's stream wait that only it would release. Raise it from a kernel already running, another
GPU, or the host through pinned host memory (a raw address). The fused ops' copy queue (``copy_engine.CopyQueue``) runs
on the same primitives: the same driver calls, the same host-thread stand-in and the same bounded flag wait.

Graph capture: ``put``, ``put_tile`` and ``put_tiles`` are capturable (stream waits, 2-D copies and kernels all
capture; the queue is forked from and joined back into the capturing stream); ``async_op=False`` then joins
instead of blocking. ``put_tiles`` queues its tiles in one batched driver call (``cuMemcpy3DBatchAsync``, CUDA
12.8 and later; the tiles of one call land in no particular order among themselves), but under a capture, which
the batched calls refuse (``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` on an H200): there one 2-D copy per tile.

The common put (contiguous tensors, a peer on this node) is checked in one frame (``_plain_copy``): the checks it
skips are the ones whose answer it already has (a heap tensor's range is one address compare); anything else takes
every check, with its error.
"""

import dataclasses
import operator
import os
import time
from typing import Iterable

import torch

from iris.platform import private
from iris.host.copy_engine.lanes import Copy, Signal, Transfer, Wait, lane_type
from iris.host.copy_engine.proxy import CopyProxy
from iris.errors import RankTimeoutError
from iris.host.distributed import DEFAULT_TIMEOUT_S
from iris.spellings import accepts

ENGINE_NAMES = ("sdma", "ce")  # upstream's name for AMD's engines, and NVIDIA's: both mean this platform's
CHANNELS = int(os.environ.get("IRIS_CE_CHANNELS", 2))
SPIN_S = 200e-6  # a blocking put polls its stream without sleeping this long, then backs off (2 us doubling to 1 ms)
_TRUE, _FALSE, _AUTO = ("1", "true", "yes", "on"), ("0", "false", "no", "off"), ("", "auto")


def disabled_error(method):
    return RuntimeError(f"{method}: the copy engine is disabled; create the context with engines=(\"sdma\",) (older "
                        f"Iris: copy_engine=\"sdma\" or enable_copy_engine=True, or IRIS_ENABLE_COPY_ENGINE=1)")


def resolve_engines(engines=(), copy_engine=None, enable_copy_engine=None):
    """Whether the copy engine is on, from any of upstream's spellings: ``engines=("sdma",)``, ``"sdma"`` or
    ``("ce",)``; ``copy_engine="sdma"``; ``enable_copy_engine=True/False``; ``IRIS_ENABLE_COPY_ENGINE``. Off by
    default (``engines=()``, as the reference's contract)."""
    if enable_copy_engine is not None and not isinstance(enable_copy_engine, bool):
        raise TypeError(f"iris.iris: enable_copy_engine must be True, False or None, got {enable_copy_engine!r}")
    names = []
    for given in (engines, copy_engine):
        if given is None:
            continue
        names += [given] if isinstance(given, str) else list(given)
    for name in names:
        if name not in ENGINE_NAMES:
            raise ValueError(f"iris.iris: unknown copy engine {name!r}; use one of {ENGINE_NAMES} (all mean this "
                             "platform's copy engines), or engines=() for none")
    if enable_copy_engine is not None:
        if names and not enable_copy_engine:
            raise ValueError(f"iris.iris: engines={tuple(names)} contradicts enable_copy_engine=False; pass one")
        return enable_copy_engine
    env = os.environ.get("IRIS_ENABLE_COPY_ENGINE", "").strip().lower()
    if env not in _TRUE + _FALSE + _AUTO:
        raise ValueError(f"iris.iris: IRIS_ENABLE_COPY_ENGINE={env!r}; use 1/true/yes/on, 0/false/no/off or auto")
    return bool(names) or env in _TRUE


# A flag argument: a one-element int32/int64 tensor, or a raw address (32 bits, upstream's rule)
Flag = torch.Tensor | int

TILE_FIELDS = ("pid_m", "pid_n", "block_m", "block_n", "elem_size", "src_stride", "data")
_TILE_FIELDS = operator.attrgetter(*TILE_FIELDS)  # one C call for the seven reads of a tile
_INT_TYPES = frozenset((int, bool))


@dataclasses.dataclass
class Tile:
    """One 2-D tile of a row-major matrix, upstream's ``sdma_ep.Tile``: ``data`` is the matrix's address,
    ``src_stride`` its row pitch in bytes; the tile is rows ``pid_m * block_m`` on and columns ``pid_n * block_n``
    on, ``block_m`` rows of ``block_n * elem_size`` bytes. Any object with these fields is accepted.

    Example::

        from iris.copy_engine import Tile

        a = ctx.zeros(64, 64)
        tile = Tile(pid_m=1, pid_n=0, block_m=32, block_n=32, elem_size=a.element_size(),
                    src_stride=a.stride(0) * a.element_size(), data=a.data_ptr())  # a[32:, :32]
    """
    pid_m: int
    pid_n: int
    block_m: int
    block_n: int
    elem_size: int
    src_stride: int
    data: int


def _flag(ctx, flag, caller, *, name, remote_to=None):
    """(address, bits) of a one-element int32/int64 flag tensor, or of a raw address (32 bits, upstream's rule);
    with ``remote_to`` the tensor must be on the heap and its counterpart on that rank is addressed."""
    if isinstance(flag, int) and not isinstance(flag, bool):
        return flag, 32
    if not isinstance(flag, torch.Tensor):
        raise TypeError(f"{caller}: {name} must be a one-element int32/int64 tensor or an address, got "
                        f"{type(flag).__name__}")
    if flag.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{caller}: Unsupported flag tensor dtype {flag.dtype} for {name}; use torch.int32 or "
                         "torch.int64")
    if flag.numel() != 1:
        raise ValueError(f"{caller}: {name} has {flag.numel()} elements; pass a one-element view (flags[i:i + 1])")
    bits = 8 * flag.element_size()
    if remote_to is None:
        return flag.data_ptr(), bits
    return ctx.on_heap(flag, caller, name).at(remote_to), bits  # remote_to: the put's lane has checked it


def _flag_value(value, bits, caller, name):
    """``value`` as an int that the flag's ``bits`` hold (a value that does not fit would wrap, or fail in the copy
    queue's thread)."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{caller}: {name} must be an int, got {type(value).__name__} {value!r}") from None
    low, high = -(1 << bits - 1), (1 << bits - 1) - 1
    if not low <= number <= high:
        raise ValueError(f"{caller}: {name}={number} does not fit the flag's int{bits} [{low}, {high}]; use a smaller "
                         "value or an int64 flag")
    return number


class _SignalLauncher:
    """The queue's signal kernel, compiled and loaded with the context once per (flag bits, 16-byte alignment) (a
    kernel loaded later, while a kernel of ours spins, can wait for the device: lazy module loading), and launched
    through Triton's C launcher with the address as an int: ``JITFunction.__getitem__`` would bind the arguments,
    compute the specialisation key and look the kernel up (~30 us of Python on the H200's host)."""

    def __init__(self, device):
        from iris.device.copy_engine import _signal_add_kernel

        self._jit, self._compiled = _signal_add_kernel, {}
        scratch = torch.zeros(4, dtype=torch.int64, device=device)  # 16-byte aligned, and 4/8 bytes past it
        self._direct = {}
        for view in (scratch[:1], scratch[1:2], scratch.view(torch.int32)[:1], scratch.view(torch.int32)[1:2]):
            key = (8 * view.element_size(), view.data_ptr() % 16 == 0)
            compiled = self._jit[(1,)](view, 0, num_warps=1)  # adds 0: compiles, loads, and runs once
            compiled._init_handles()
            self._compiled[key] = compiled
            direct = private.compiled_launcher(compiled)  # Triton's C launcher itself, when this Triton has one
            if direct is not None:
                self._direct[key] = direct
        torch.cuda.synchronize(device)

    @staticmethod
    def check(value, caller):
        if not -(1 << 31) <= value < (1 << 31):  # the compiled kernels take an int32 value
            raise ValueError(f"{caller}: signal_value={value} is outside int32; the copy engine's signal adds an "
                             "int32 (sign-extended on an int64 flag)")

    def launch(self, stream_handle, signal):
        key = (signal.bits, signal.address % 16 == 0)
        direct = self._direct.get(key)
        if direct is not None and private.no_launch_hooks():
            launch, prefix = direct
            launch(1, 1, 1, stream_handle, *prefix, signal.address, signal.value)
            return
        self._compiled[key][(1, 1, 1)](signal.address, signal.value, stream=stream_handle)


class CopyEngines:
    """The copy-engine queues of one context and the host methods upstream Iris puts on the context."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.device = ctx.get_device()
        self.device_index = -1 if self.device.type == "cpu" else self.device.index  # as Tensor.get_device() says
        self.channels = CHANNELS
        self.lane_type = lane_type(self.device)
        self.capabilities = self.lane_type.capabilities(ctx)
        # a CUDA lane's signal is a kernel, compiled and loaded now (_SignalLauncher says why); a host lane's an atomic
        signal = _SignalLauncher(self.device) if self.lane_type.ADDS_BY_KERNEL else None
        self.lanes = {(peer, ch): self.lane_type(ctx, signal=signal) for peer in range(ctx.num_ranks)
                      for ch in range(self.channels)}
        # the lanes a put may take as asked: peers whose heaps are mapped here; any other key takes _lane's checks
        self.direct_lanes = {key: lane for key, lane in self.lanes.items() if ctx.topology.direct[key[0]]}
        self.proxy_error = None
        self.proxy = CopyProxy(self)
        # The device context kernels pass through, [num_ranks, 6] uint64 as upstream's (queue, rptr, wptr, doorbell,
        # cached wptr, committed wptr there). Opaque: row 0 holds the proxy's ring (iris/host/copy_engine/proxy.py).
        table = torch.zeros(ctx.num_ranks, 6, dtype=torch.int64)
        table[0, :5] = torch.tensor(self.proxy.words())
        self.device_ctx = table.to(self.device).view(torch.uint64)

    def describe(self):
        extra = ", ".join(f"{k}={v}" for k, v in self.capabilities.items() if k != "engines")
        return (f"copy engine on: {self.lane_type.ENGINES}, {self.channels} channel(s) to each of "
                f"{self.ctx.num_ranks} rank(s)" + (f" ({extra})" if extra else ""))

    # ------------------------------------------------------------------ checks
    def _lane(self, to_rank, channel, caller):
        self.ctx.check_direct(to_rank, caller, "to_rank")  # another node's heap is not mapped
        if not isinstance(channel, int) or not 0 <= channel < self.channels:
            raise ValueError(f"{caller}: channel={channel!r} is outside [0, {self.channels}); set IRIS_CE_CHANNELS "
                             "for more")
        return self.lanes[(to_rank, channel)]

    def _wait_arg(self, wait_flag, wait_value, caller):
        if wait_flag is None:
            return None
        if wait_value is None:
            raise ValueError(f"{caller}: wait_flag was given without wait_value; pass the value the local flag must "
                             "reach (the copy starts once flag >= wait_value)")
        address, bits = _flag(self.ctx, wait_flag, caller, name="wait_flag")
        return Wait(address, bits, _flag_value(wait_value, bits, caller, "wait_value"))

    def _signal_arg(self, signal_flag, signal_value, caller, *, remote_to):
        if signal_flag is None:
            return None
        address, bits = _flag(self.ctx, signal_flag, caller, name="signal_flag", remote_to=remote_to)
        return Signal(address, bits, _flag_value(signal_value, bits, caller, "signal_value"))

    # ------------------------------------------------------------------ the queue's operations
    def _submit(self, lane, transfer, *, async_op, caller):
        """``transfer`` queued on ``lane``; with ``async_op=False`` the host then waits for it to land."""
        capturing = lane.capturing()
        lane.transfer(transfer, caller, capturing)
        if capturing:  # a capture must end joined: the graph orders the rest
            lane.join_current((), caller)
            return
        if not async_op:
            self._drain([lane], caller)

    def proxied(self, src, dst, nbytes, *, signal, done, ticket):
        """The proxy's half of a transfer a kernel posted (``dst`` and ``signal``, a ``Signal`` or None, already the
        peer's): queued on the peer's channel 0 (found from ``dst``), then ``done`` set to ``ticket``."""
        lane = self.lanes[(self._owner(dst), 0)]
        if nbytes > 0:
            lane.copy(Copy(dst, nbytes, src, nbytes, nbytes, 1))
        if signal is not None:
            lane.add(signal)
        lane.write(done, ticket)

    def _owner(self, address):
        extent = self.ctx.heap.memory.size
        for rank, base in enumerate(self.ctx.heap.bases):
            if base <= address < base + extent:
                return rank
        raise RuntimeError(f"iris.copy_engine.put_async: destination {address:#x} is in no rank's heap")

    def _drain(self, lanes, caller):
        """Host-blocking: until ``lanes`` have run everything queued, with the context's timeout, raising
        ``PeerError`` once a peer has failed (never a bare synchronise on a flag nobody raises)."""
        timeout_s = DEFAULT_TIMEOUT_S if self.ctx.timeout_s is None else self.ctx.timeout_s
        deadline, pause = time.monotonic() + timeout_s, 2e-6
        if self.proxy_error is not None:  # the proxy stopped: kernels' transfers after it will never land
            raise RuntimeError(f"{caller}: the copy-engine proxy failed: {self.proxy_error}") from self.proxy_error
        spin_until = time.monotonic() + SPIN_S
        for lane in lanes:
            while not lane.drained():
                now = time.monotonic()
                if now < spin_until:  # a 4 KiB put lands in ~10 us; Linux's shortest sleep is ~55 us
                    continue
                self.ctx.groups.check(caller)
                if now > deadline:
                    raise RankTimeoutError(f"{caller}: the copy-engine queue has not drained after {timeout_s:g} s "
                                           "(a wait_flag nobody raised?); raise the limit with IRIS_TIMEOUT_S", [])
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)

    # ------------------------------------------------------------------ the host methods
    def put(self, src, to_rank, dst=None, wait_flag=None, wait_value=None, signal_flag=None, signal_value=1,
            async_op=False, channel=0):
        caller = "Iris.put"
        lane = self.direct_lanes.get((to_rank, channel)) if type(to_rank) is int and type(channel) is int else None
        dst = src if dst is None else dst
        copy = self._plain_copy(src, dst, to_rank) if lane is not None else None
        if copy is None:
            lane, copy = self._checked_copy(src, dst, to_rank, channel, caller)
        wait = self._wait_arg(wait_flag, wait_value, caller)
        signal = self._signal_arg(signal_flag, signal_value, caller, remote_to=to_rank)
        if copy.width == 0:  # upstream's rule: nothing queued, not even the wait or the signal
            return
        self._submit(lane, Transfer(wait, (copy,), signal), async_op=async_op, caller=caller)

    def _plain_copy(self, src, dst, to_rank):
        """The ``Copy`` of the common put, its checks in this one frame: contiguous plain tensors on the device of one
        dtype and size, ``dst`` on the heap (one address compare). None for anything else, which ``_checked_copy`` then
        checks (and names, where it is wrong)."""
        index = self.device_index
        if type(src) is not torch.Tensor or type(dst) is not torch.Tensor or src.dtype is not dst.dtype or \
                not src.is_contiguous() or not dst.is_contiguous() or src.get_device() != index or \
                dst.get_device() != index:
            return None
        nbytes, address, heap = src.numel() * src.element_size(), dst.data_ptr(), self.ctx.heap
        if dst.numel() * dst.element_size() != nbytes or not heap.holds(address, nbytes):
            return None
        bases = heap.bases
        return Copy(address - bases[heap.rank] + bases[to_rank], nbytes, src.data_ptr(), nbytes, nbytes, 1)

    def _checked_copy(self, src, dst, to_rank, channel, caller):
        """``(lane, copy)`` of a put after every check, each failing one raising with the argument named."""
        lane = self._lane(to_rank, channel, caller)
        for name, t in (("src_tensor", src), ("dst_tensor", dst)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{caller}: {name} must be a tensor, got {type(t).__name__}")
            if t.device != self.device:
                raise ValueError(f"{caller}: {name} is on {t.device}; the copy engine reads and writes {self.device}")
        if src.dtype != dst.dtype:
            raise ValueError(f"{caller}: src_tensor is {src.dtype} but dst_tensor is {dst.dtype}; the copy engine "
                             "copies bytes and converts nothing: pass tensors of one dtype (.view(dtype) both alike "
                             "to move raw bytes)")
        target = self.ctx.on_heap(dst, caller, "dst_tensor").at(to_rank)  # the lane has checked to_rank
        nbytes = src.numel() * src.element_size()
        if dst.numel() * dst.element_size() != nbytes:
            raise ValueError(f"{caller}: src_tensor has {nbytes} bytes ({tuple(src.shape)} {src.dtype}) but dst_tensor "
                             f"{dst.numel() * dst.element_size()} ({tuple(dst.shape)} {dst.dtype}); pass views of one "
                             "size")
        if nbytes == 0:
            return lane, Copy(0, 0, 0, 0, 0, 1)
        return lane, self._rows(src, dst, target, caller=caller)

    def _rows(self, src, dst, target, *, caller):
        """One copy into ``target`` (``dst``'s counterpart on the peer): contiguous tensors as one row, 2-D views with
        contiguous rows of one shape as a 2-D copy."""
        if src.is_contiguous() and dst.is_contiguous():
            nbytes = src.numel() * src.element_size()
            return Copy(target, nbytes, src.data_ptr(), nbytes, nbytes, 1)
        if src.dim() == dst.dim() == 2 and src.shape == dst.shape and src.dtype == dst.dtype and \
                src.stride(1) == dst.stride(1) == 1:
            size = src.element_size()
            return Copy(target, dst.stride(0) * size, src.data_ptr(), src.stride(0) * size, src.shape[1] * size,
                        src.shape[0])
        raise ValueError(f"{caller}: src_tensor {tuple(src.shape)} strides {src.stride()} and dst_tensor "
                         f"{tuple(dst.shape)} strides {dst.stride()}: pass contiguous tensors, or 2-D views of one "
                         "shape with contiguous rows (or put_tile for raw 2-D windows)")

    def _tile_copy(self, tile, to_ptr, to_stride, *, caller):
        try:
            values = _TILE_FIELDS(tile)
        except AttributeError:
            values = ()
        if not values or not _INT_TYPES.issuperset(map(type, values)):  # the exact check, only when that one fails
            for field in TILE_FIELDS:
                if not isinstance(getattr(tile, field, None), int):
                    raise TypeError(f"{caller}: tile.{field} must be an int (an iris.copy_engine.Tile or any object "
                                    "with pid_m, pid_n, block_m, block_n, elem_size, src_stride and data)")
        pid_m, pid_n, block_m, block_n, elem_size, src_stride, data = values
        width = block_n * elem_size
        if width > src_stride or width > to_stride:
            raise ValueError(f"{caller}: a tile row is {width} bytes but src_stride={src_stride} and "
                             f"to_stride={to_stride}; strides are row pitches in bytes, at least a row")
        row, col = pid_m * block_m, pid_n * width
        return Copy(to_ptr + row * to_stride + col, to_stride, data + row * src_stride + col, src_stride, width,
                    block_m)

    def put_tiles(self, tiles, to_rank, to_ptrs, to_strides, wait_flag=None, wait_value=None, signal_flag=None,
                  signal_value=1, async_op=False, channel=0, caller="Iris.put_tiles"):
        lane = self._lane(to_rank, channel, caller)
        tiles, to_ptrs, to_strides = list(tiles), list(to_ptrs), list(to_strides)
        if not len(tiles) == len(to_ptrs) == len(to_strides):
            raise ValueError(f"{caller}: {len(tiles)} tiles, {len(to_ptrs)} to_ptrs and {len(to_strides)} to_strides; "
                             "pass one destination address and stride per tile")
        copies = tuple(self._tile_copy(t, p, s, caller=caller) for t, p, s in zip(tiles, to_ptrs, to_strides))
        wait = self._wait_arg(wait_flag, wait_value, caller)
        # the low-level API: a raw signal address is already the peer's
        signal = self._signal_arg(signal_flag, signal_value, caller,
                                  remote_to=None if isinstance(signal_flag, int) else to_rank)
        if copies:
            self._submit(lane, Transfer(wait, copies, signal), async_op=async_op, caller=caller)

    def drain(self, caller):
        """Host-blocking: until every lane has run everything queued (what a GPU's device synchronise waits for,
        the copy engines' streams included; ``Iris.barrier`` on the cpu backend)."""
        self._drain(list(self.lanes.values()), caller)

    def quiet(self, to_rank=None, channel=0):
        caller = "Iris.quiet"
        ranks = range(self.ctx.num_ranks) if to_rank is None else [to_rank]
        lanes = [self._lane(r, channel, caller) for r in ranks]
        if self.lane_type.capturing():
            return  # every queued transfer was joined into the capture
        self._drain(lanes, caller)


class CopyEngineMethods:
    """The context's copy-engine methods (a part of ``Iris``), upstream's host API: ``put``, ``put_tile``,
    ``put_tiles``, ``quiet`` and the device context; each refuses when the context has no copy engines
    (``engines=()``), is closed, or a peer has failed, then hands the call to ``self.copy_engines``."""

    def get_copy_engine_ctx(self) -> torch.Tensor | None:
        """The device-side copy-engine context to pass to device ops as ``copy_engine_ctx`` (a uint64 [world_size, 6]
        tensor, opaque), or None when the context was made without ``engines=("sdma",)``. Local.

        Example::

            engines = ctx.get_copy_engine_ctx()  # a kernel's copy_engine_ctx argument (iris.put_signal, ...)
            assert engines is None or engines.shape == (world_size, 6)
        """
        self.check_open("Iris.get_copy_engine_ctx")
        return None if self.copy_engines is None else self.copy_engines.device_ctx

    def _engines(self, method):
        self.check_open(method)
        if self.copy_engines is None:
            raise disabled_error(method)
        self.groups.check(method)
        return self.copy_engines

    @accepts(from_tensor="src_tensor", dst_rank="to_rank", to_tensor="dst_tensor")
    def put(self, src_tensor: torch.Tensor, to_rank: int, dst_tensor: torch.Tensor | None = None,
            wait_flag: Flag | None = None, wait_value: int | None = None, signal_flag: Flag | None = None,
            signal_value: int = 1, async_op: bool = False, channel: int = 0) -> None:
        """Copy ``src_tensor`` into ``dst_tensor``'s counterpart (default: ``src_tensor``'s) on ``to_rank`` on a copy
        engine, after the work queued on the current stream and, with ``wait_flag``, once that local int32/int64
        flag reaches ``wait_value``; then add ``signal_value`` to ``signal_flag``'s counterpart on ``to_rank``
        (release: a kernel there that acquires the flag sees the data). ``async_op=False`` blocks the host until it
        has landed (the context's timeout; ``PeerError`` once a peer fails); ``async_op=True`` returns at once
        (``quiet`` waits). No SM is used for the copy; the signal is a one-thread kernel. Graph-capturable.
        ``dst_rank`` / ``to_tensor`` / ``from_tensor`` are upstream's other names (``iris/upstream.py``).

        Raises ``RuntimeError`` when the context was made without copy engines; ``ValueError`` for a ``to_rank`` out
        of range or on another node, a ``channel`` outside ``[0, IRIS_CE_CHANNELS)``, a flag that is not one
        int32/int64 element, a ``wait_flag`` without ``wait_value``, or tensors that are not of one dtype and size on
        this device, contiguous or 2-D with contiguous rows, with ``dst_tensor`` on the heap (``TypeError`` for a
        non-tensor); ``iris.RankTimeoutError`` when a blocking put has not landed within the context's timeout;
        ``iris.PeerError`` once a peer has failed.

        Example::

            # not run by the tests: it needs a context made with engines=("sdma",)
            src, dst = ctx.full((1024,), float(rank)), ctx.zeros(1024)
            flag = ctx.zeros(1, dtype=torch.int32)
            ctx.barrier()  # every rank's dst and flag are zeroed before a peer writes them
            ctx.put(src, (rank + 1) % world_size, dst, signal_flag=flag)  # host-blocking: it has landed
            ctx.barrier()
            assert torch.all(dst == (rank - 1) % world_size) and flag.item() == 1
        """
        self._engines("Iris.put").put(src_tensor, to_rank, dst_tensor, wait_flag, wait_value, signal_flag,
                                      signal_value, async_op, channel)

    def put_tile(self, tile: Tile, to_rank: int, to_ptr: int, to_stride: int, wait_flag: Flag | None = None,
                 wait_value: int | None = None, signal_flag: Flag | None = None, signal_value: int = 1,
                 async_op: bool = False, channel: int = 0) -> None:
        """Upstream's low-level 2-D put: ``tile`` (``iris.copy_engine.Tile``: a sub-window of the matrix at address
        ``tile.data``, row pitch ``tile.src_stride`` bytes) into the same window of the matrix at ``to_ptr`` (an
        address already in the peer's heap, e.g. ``iris.copy_engine.peer_address``), row pitch ``to_stride`` bytes.
        Flags as in ``put``, as tensors or raw addresses (32 bits; a raw ``signal_flag`` is already the peer's).

        Raises ``put``'s errors for the rank, channel, flags and timeout, ``TypeError`` for a tile field that is not
        an int, and ``ValueError`` for a row wider than ``tile.src_stride`` or ``to_stride``.

        Example::

            # not run by the tests: it needs a context made with engines=("sdma",)
            from iris.copy_engine import Tile, peer_address

            a, b = ctx.rand(64, 64), ctx.zeros(64, 64)  # a: the same on every rank
            tile = Tile(pid_m=1, pid_n=0, block_m=32, block_n=32, elem_size=4, src_stride=64 * 4, data=a.data_ptr())
            peer = (rank + 1) % world_size
            ctx.barrier()  # the peer's b is zeroed
            ctx.put_tile(tile, peer, peer_address(ctx, b, peer), 64 * 4)  # a[32:, :32] into the peer's b[32:, :32]
            ctx.barrier()
            assert torch.equal(b[32:, :32], a[32:, :32]) and not b[:32].any()
        """
        self._engines("Iris.put_tile").put_tiles([tile], to_rank, [to_ptr], [to_stride], wait_flag, wait_value,
                                                 signal_flag, signal_value, async_op, channel, caller="Iris.put_tile")

    def put_tiles(self, tiles: Iterable[Tile], to_rank: int, to_ptrs: Iterable[int], to_strides: Iterable[int],
                  wait_flag: Flag | None = None, wait_value: int | None = None, signal_flag: Flag | None = None,
                  signal_value: int = 1, async_op: bool = False, channel: int = 0) -> None:
        """``put_tile`` for a batch in one submission: one wait before the first tile, one 2-D copy per tile, one
        signal after the last. Raises ``put_tile``'s errors, and ``ValueError`` unless ``tiles``, ``to_ptrs`` and
        ``to_strides`` have one entry per tile.

        Example::

            # not run by the tests: it needs a context made with engines=("sdma",)
            from iris.copy_engine import Tile, peer_address

            a, b = ctx.rand(64, 64), ctx.zeros(64, 64)  # a: the same on every rank
            tiles = [Tile(m, m, 32, 32, 4, 64 * 4, a.data_ptr()) for m in (0, 1)]  # the two diagonal blocks
            peer = (rank + 1) % world_size
            ctx.barrier()
            ctx.put_tiles(tiles, peer, [peer_address(ctx, b, peer)] * 2, [64 * 4] * 2)
            ctx.barrier()
            assert torch.equal(b[:32, :32], a[:32, :32]) and torch.equal(b[32:, 32:], a[32:, 32:])
        """
        self._engines("Iris.put_tiles").put_tiles(tiles, to_rank, to_ptrs, to_strides, wait_flag, wait_value,
                                                  signal_flag, signal_value, async_op, channel)

    @accepts(dst_rank="to_rank")
    def quiet(self, to_rank: int | None = None, channel: int = 0) -> None:
        """Host-blocking: until every transfer queued to ``to_rank`` (every rank: None) on ``channel`` has landed,
        signals included; the context's timeout, ``PeerError`` once a peer fails. Inside a capture, nothing to do.
        ``dst_rank`` is upstream's other name (``iris/upstream.py``). Raises ``put``'s errors for the rank, channel
        and timeout.

        Example::

            # not run by the tests: it needs a context made with engines=("sdma",)
            src, dst = ctx.full((1024,), float(rank)), ctx.zeros(1024)
            peer = (rank + 1) % world_size
            ctx.barrier()
            ctx.put(src, peer, dst, async_op=True)  # returns at once
            ctx.quiet(peer)  # it has landed in the peer's dst
            ctx.barrier()
            assert torch.all(dst == (rank - 1) % world_size)
        """
        self._engines("Iris.quiet").quiet(to_rank, channel)
