"""``ctx.tracing``: per-tile device events, exported as one Chrome / Perfetto trace for all ranks.

    ctx.tracing.enable(max_events=1 << 16)   # before the kernels to trace
    ctx.ops.matmul_all_gather(out, A, B)     # instrumented kernels record as they run
    ctx.tracing.export("trace.json")         # collective; rank 0 writes; open it in ui.perfetto.dev

Every rank's clock is read once right after a device barrier when tracing is enabled (or reset); times in
the export are relative to that moment, which puts all ranks on one time axis to within the barrier's
skew (about a microsecond on NVLink). On the cpu backend the clock is logical (event order only).
"""

import json

import torch

from iris.device.tracing import EVENT_WORDS, OP_GEMM_TILE, OP_SCATTER_TILE, _read_clock_kernel
from iris.host.distributed import all_gather_object

OPS = {OP_GEMM_TILE.value: "gemm tile", OP_SCATTER_TILE.value: "scatter tile"}


class Tracing:
    def __init__(self, ctx):
        self.ctx = ctx
        self.enabled = False
        self._args = torch.zeros(4, dtype=torch.int64, device=ctx.get_device())  # what kernels get when off

    def enable(self, max_events=1 << 16):
        """Collective. Allocate room for ``max_events`` events on this rank and start recording."""
        if not isinstance(max_events, int) or max_events <= 0:
            raise ValueError(f"tracing.enable: max_events must be a positive int, got {max_events!r}")
        dev = self.ctx.get_device()
        self.buffer = torch.zeros(max_events, EVENT_WORDS.value, dtype=torch.int64, device=dev)
        self.counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.clock = torch.zeros(1, dtype=torch.int64, device=dev)
        self._args = torch.tensor([max_events, self.counter.data_ptr(), self.buffer.data_ptr(),
                                   self.clock.data_ptr()], dtype=torch.int64, device=dev)
        self.enabled = True
        # Compile the clock read now: reset's first launch after its barrier would otherwise read each rank's
        # clock only after that rank's compile, tens of ms apart.
        _read_clock_kernel[(1,)](self._args, torch.zeros(1, dtype=torch.int64, device=dev), num_warps=1)
        self.reset()

    def reset(self):
        """Collective. Drop recorded events and take a new common time origin."""
        self._require("reset")
        self.counter.zero_()
        self.clock.zero_()
        origin = torch.zeros(1, dtype=torch.int64, device=self.ctx.get_device())
        self.ctx.device_barrier()
        _read_clock_kernel[(1,)](self._args, origin, num_warps=1)  # back to back with the barrier on the stream
        self.origin = int(origin.item())

    def device_args(self):
        """The int64 tensor instrumented kernels take (``iris/device/tracing.py``)."""
        return self._args

    def events(self):
        """This rank's events as dicts (host-blocking)."""
        self._require("events")
        count = int(self.counter.item())
        rows = self.buffer[:min(count, self.buffer.shape[0])].cpu().tolist()
        keys = ("op", "target", "bytes", "program", "sm", "start", "end", "rank")
        return [dict(zip(keys, row)) for row in rows], max(0, count - self.buffer.shape[0])

    def export(self, path):
        """Collective, host-blocking. Gather every rank's events; rank 0 writes Chrome trace JSON to ``path``
        and returns it (other ranks return None). One process row per rank, one thread row per SM
        (per program on the cpu backend)."""
        self._require("export")
        if self.ctx.get_device().type == "cuda":
            torch.cuda.synchronize(self.ctx.get_device())
        mine, dropped = self.events()
        everyone = all_gather_object((mine, dropped, self.origin))
        if self.ctx.get_rank() != 0:
            return None
        gpu = self.ctx.get_device().type == "cuda"
        trace = []
        for rank, (events, lost, origin) in enumerate(everyone):
            trace.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
            for e in events:
                scale = 1e-3 if gpu else 1.0  # ns -> us on GPUs; logical ticks on the cpu backend
                trace.append({
                    "name": OPS.get(e["op"], f"op {e['op']}"), "ph": "X", "pid": rank,
                    "tid": e["sm"] if gpu else e["program"],
                    "ts": (e["start"] - origin) * scale, "dur": max(e["end"] - e["start"], 0) * scale,
                    "args": {"target": e["target"], "bytes": e["bytes"], "program": e["program"], "sm": e["sm"]},
                })
            if lost:
                trace.append({"name": f"{lost} events dropped (raise max_events)", "ph": "i", "pid": rank,
                              "ts": 0, "s": "p"})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ns"}, f)
        return path

    def _require(self, what):
        if not self.enabled:
            raise RuntimeError(f"tracing.{what}: tracing is not enabled; call ctx.tracing.enable(max_events=...) "
                               "first")
