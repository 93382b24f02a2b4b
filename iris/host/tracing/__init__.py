"""``ctx.tracing``: per-tile device events, exported as one Chrome / Perfetto trace for all ranks.

    ctx.tracing.enable(max_events=1 << 16)   # before the kernels to trace
    ctx.ops.matmul_all_gather(out, A, B)     # instrumented kernels record as they run
    ctx.tracing.export("trace.json")         # collective; rank 0 writes; open it in ui.perfetto.dev

Every rank's clock is read once right after a device barrier when tracing is enabled (or reset); times in
the export are relative to that moment, which puts all ranks on one time axis to within the barrier's
skew (about a microsecond on NVLink). On the cpu backend the clock is logical (event order only).
"""

import json
import os

import torch

from iris.device.debug import TRACE_WORDS
from iris.device.trace_events import EVENT_NAMES
from iris.device.tracing import EVENT_WORDS, OP_GEMM_TILE, OP_SCATTER_TILE, _read_clock_kernel
from iris.host.distributed import Context, all_gather_object

OPS = {OP_GEMM_TILE.value: "gemm tile", OP_SCATTER_TILE.value: "scatter tile"}
# The buffers user kernels' ctx.tracing.record_event_* fill (iris/device/user_tracing.py), upstream's, in the order of
# their addresses in the device context's tracing words.
USER_BUFFERS = (("event_id", torch.int32), ("pid", torch.int32), ("pid_m", torch.int32), ("pid_n", torch.int32),
                ("cur_rank", torch.int32), ("target_rank", torch.int32), ("xcc_id", torch.int32),
                ("cu_id", torch.int32), ("timestamp", torch.int64), ("address", torch.int64),
                ("duration_cycles", torch.int64), ("op_index", torch.int32), ("payload_size", torch.int32))


class Tracing:
    """Device tracing of one context, ``ctx.tracing`` (module docstring): ``enable`` allocates the event buffers
    and starts recording; ``ctx.ops.matmul_all_gather`` (its column-sharded path) then records a gemm-tile and a
    scatter-tile event per tile, and user kernels whose ``DeviceContext`` was initialised with ``tracing=True`` record
    theirs (``iris/device/user_tracing.py``); ``events`` / ``device_events`` read this rank's, ``export`` writes every
    rank's as one trace; ``disable`` stops the recording, what was recorded still readable (``enable`` starts
    afresh). ``enabled`` is the switch the ops read.
    Every method raises ``iris.ClosedError`` once the context is closed.

    Example::

        ctx.tracing.enable(max_events=1024)  # collective; before the kernels to trace
        ctx.ops.matmul_all_gather(ctx.zeros(32, 16 * world_size), ctx.randn(32, 32), ctx.randn(32, 16))
        events, dropped = ctx.tracing.events()  # this rank's: a gemm tile and a scatter tile
        ctx.tracing.disable()  # what was recorded stays readable
        ctx.tracing.export("trace.json")  # collective; rank 0 writes every rank's
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.enabled = False
        self._off = torch.zeros(4, dtype=torch.int64, device=ctx.get_device())  # what kernels get when off
        self._args = self._off

    def enable(self, max_events: int = 1 << 16) -> None:
        """Collective. Allocate room for ``max_events`` events on this rank and start recording (a new time origin,
        ``reset``). Raises ``ValueError`` unless ``max_events`` is a positive int.

        Example::

            ctx.tracing.enable(max_events=1 << 12)  # before the kernels to trace
            assert ctx.tracing.enabled and ctx.tracing.events() == ([], 0)
            ctx.tracing.disable()  # off again: the calls that follow run untraced
        """
        self.ctx.check_open("tracing.enable")
        if not isinstance(max_events, int) or max_events <= 0:
            raise ValueError(f"tracing.enable: max_events must be a positive int, got {max_events!r}")
        dev = self.ctx.get_device()
        self.buffer = torch.zeros(max_events, EVENT_WORDS.value, dtype=torch.int64, device=dev)
        self.counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.clock = torch.zeros(1, dtype=torch.int64, device=dev)
        self._args = torch.tensor([max_events, self.counter.data_ptr(), self.buffer.data_ptr(),
                                   self.clock.data_ptr()], dtype=torch.int64, device=dev)
        # upstream's per-field buffers for user kernels, and the tracing words of the device context that point at them
        self.trace_buffers = {name: torch.zeros(max_events, dtype=dtype, device=dev) for name, dtype in USER_BUFFERS}
        self.trace_counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.op_index_counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.max_events = max_events
        words = [1, max_events, self.trace_counter.data_ptr(), self.op_index_counter.data_ptr()] + \
            [self.trace_buffers[name].data_ptr() for name, _ in USER_BUFFERS]
        assert len(words) == TRACE_WORDS.value
        at = 2 + self.ctx.get_num_ranks()
        self.ctx.get_device_context()[at:at + len(words)] = torch.tensor(words, dtype=torch.int64)
        self.enabled = True
        # Compile the clock read now: reset's first launch after its barrier would otherwise read each rank's
        # clock only after that rank's compile, tens of ms apart.
        _read_clock_kernel[(1,)](self._args, torch.zeros(1, dtype=torch.int64, device=dev), num_warps=1)
        self.reset()

    def reset(self) -> None:
        """Collective. Drop recorded events and take a new common time origin. Raises ``RuntimeError`` when tracing
        is off (never enabled, or disabled: the clock it reads is the recording's).

        Example::

            ctx.tracing.enable(max_events=1024)
            ctx.ops.matmul_all_gather(ctx.zeros(32, 16 * world_size), ctx.randn(32, 32), ctx.randn(32, 16))
            ctx.tracing.reset()  # e.g. after a warm-up call
            assert ctx.tracing.events() == ([], 0)
            ctx.tracing.disable()
        """
        self._require("reset", recording=True)
        self.counter.zero_()
        self.clock.zero_()
        self.trace_counter.zero_()
        self.op_index_counter.zero_()
        origin = torch.zeros(1, dtype=torch.int64, device=self.ctx.get_device())
        self.ctx.device_barrier()
        _read_clock_kernel[(1,)](self._args, origin, num_warps=1)  # back to back with the barrier on the stream
        self.origin = int(origin.item())

    def disable(self) -> None:
        """Stop recording: the fused ops and the user kernels whose ``DeviceContext`` was initialised with
        ``tracing=True`` record nothing more. What was recorded stays: ``events``, ``device_events`` and ``export``
        still read it; ``enable`` starts afresh. Local. Raises ``RuntimeError`` when tracing was never enabled.

        Example::

            ctx.tracing.enable(max_events=1024)
            ctx.tracing.disable()
            assert not ctx.tracing.enabled and ctx.tracing.events() == ([], 0)
        """
        self._require("disable")
        self.enabled = False
        self.ctx.get_device_context()[2 + self.ctx.get_num_ranks()] = 0  # the trace-enabled word user kernels read
        self._args = self._off

    def device_args(self) -> torch.Tensor:
        """The int64 tensor instrumented kernels take (``iris/device/tracing.py``): ``[max_events, counter address,
        buffer address, clock address]``, zeros while tracing is off. Local.

        Example::

            args = ctx.tracing.device_args()  # a kernel's trace argument
            assert args.dtype == torch.int64 and args.shape == (4,)
        """
        self.ctx.check_open("tracing.device_args")
        return self._args

    def events(self) -> tuple[list[dict[str, int]], int]:
        """This rank's events from the instrumented ops, as dicts (``op``, ``target``, ``bytes``, ``program``, ``sm``,
        ``start``, ``end``, ``rank``), and how many were dropped past ``max_events``. Local, host-blocking. Raises
        ``RuntimeError`` when tracing was never enabled.

        Example::

            ctx.tracing.enable(max_events=1024)
            ctx.ops.matmul_all_gather(ctx.zeros(32, 16 * world_size), ctx.randn(32, 32), ctx.randn(32, 16))
            events, dropped = ctx.tracing.events()
            assert events and dropped == 0 and all(e["rank"] == rank and e["end"] >= e["start"] for e in events)
            ctx.tracing.disable()
        """
        self._require("events")
        count = int(self.counter.item())
        rows = self.buffer[:min(count, self.buffer.shape[0])].cpu().tolist()
        keys = ("op", "target", "bytes", "program", "sm", "start", "end", "rank")
        return [dict(zip(keys, row)) for row in rows], max(0, count - self.buffer.shape[0])

    def device_events(self) -> tuple[list[dict[str, int | str]], int]:
        """This rank's events from user kernels (``ctx.tracing.record_event_start`` / ``end``) as dicts with
        upstream's fields and the event's name (``iris.TraceEvent``), and how many were dropped (host-blocking).
        Local. Raises ``RuntimeError`` when tracing was never enabled.

        Example::

            ctx.tracing.enable(max_events=1024)
            # ... kernels whose DeviceContext.initialize(..., tracing=True) records events (iris/device/user_tracing.py)
            events, dropped = ctx.tracing.device_events()  # [{"name": "put", "target_rank": 1, ...}, ...]
            assert events == [] and dropped == 0  # none ran here
            ctx.tracing.disable()
        """
        self._require("device_events")
        count = int(self.trace_counter.item())
        kept = min(count, self.max_events)
        columns = {name: buf[:kept].cpu().tolist() for name, buf in self.trace_buffers.items()}
        events = [{name: columns[name][i] for name in columns} for i in range(kept)]
        for e in events:
            e["name"] = EVENT_NAMES.get(e["event_id"], f"event {e['event_id']}")
        return events, count - kept

    def export(self, path: str | os.PathLike[str]) -> str | os.PathLike[str] | None:
        """Collective, host-blocking. Gather every rank's events; rank 0 writes Chrome trace JSON to ``path``
        and returns it (other ranks return None). One process row per rank, one thread row per SM
        (per program on the cpu backend). Raises ``RuntimeError`` when tracing was never enabled.

        Example::

            import os, tempfile

            ctx.tracing.enable(max_events=1024)
            ctx.ops.matmul_all_gather(ctx.zeros(32, 16 * world_size), ctx.randn(32, 32), ctx.randn(32, 16))
            with tempfile.TemporaryDirectory() as folder:
                path = ctx.tracing.export(os.path.join(folder, "trace.json"))  # open it in ui.perfetto.dev
                assert (path is not None) == (rank == 0)
            ctx.tracing.disable()
        """
        self._require("export")
        if self.ctx.get_device().type == "cuda":
            torch.cuda.synchronize(self.ctx.get_device())
        mine, dropped = self.events()
        user, user_dropped = self.device_events()
        everyone = all_gather_object((mine, dropped + user_dropped, self.origin, user))
        if self.ctx.get_rank() != 0:
            return None
        gpu = self.ctx.get_device().type == "cuda"
        trace = []
        for rank, (events, lost, origin, user) in enumerate(everyone):
            trace.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
            for e in events:
                scale = 1e-3 if gpu else 1.0  # ns -> us on GPUs; logical ticks on the cpu backend
                trace.append({
                    "name": OPS.get(e["op"], f"op {e['op']}"), "ph": "X", "pid": rank,
                    "tid": e["sm"] if gpu else e["program"],
                    "ts": (e["start"] - origin) * scale, "dur": max(e["end"] - e["start"], 0) * scale,
                    "args": {"target": e["target"], "bytes": e["bytes"], "program": e["program"], "sm": e["sm"]},
                })
            scale = 1e-3 if gpu else 1.0
            for e in user:  # user kernels' events, named as upstream's; an event never ended shows as an instant
                end = e["duration_cycles"] if e["duration_cycles"] else e["timestamp"]
                trace.append({
                    "name": e["name"], "ph": "X", "pid": rank, "tid": e["cu_id"] if gpu else e["pid"],
                    "ts": (e["timestamp"] - origin) * scale if gpu else e["timestamp"],
                    "dur": max(end - e["timestamp"], 0) * scale,
                    "args": {k: e[k] for k in ("pid", "pid_m", "pid_n", "target_rank", "address", "payload_size")},
                })
            if lost:
                trace.append({"name": f"{lost} events dropped (raise max_events)", "ph": "i", "pid": rank,
                              "ts": 0, "s": "p"})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ns"}, f)
        return path

    def _require(self, what, recording=False):
        """Tracing enabled once (its buffers stay after ``disable``, and are read), or with ``recording`` on now."""
        self.ctx.check_open(f"tracing.{what}")
        if not (self.enabled if recording else hasattr(self, "buffer")):
            raise RuntimeError(f"tracing.{what}: tracing is not enabled; call ctx.tracing.enable(max_events=...) "
                               "first")
