"""Spins that cannot end, named: the cpu backend's notice for a kernel polling a word that nothing changes.

The interpreter runs a launch's programs one at a time, in order: program 0 runs to its end before program 1 starts,
on every rank. A program that waits for another program of the same launch (a flag that program 1 raises, a count
of every program's arrivals) therefore waits for good, where a GPU, running them side by side, would finish. The
collectives never wait that way (each program meets only its namesake on other ranks), but a kernel of one's own
can, and nothing else sees it: the watchdog reads the collectives' flags only.

``install`` wraps the interpreter's atomics: a poll (an atomic add of 0, or a compare-and-swap that writes what it
compares) that reads the same value at the same address from the same program for ``IRIS_NOTICE_S`` seconds (30 by
default) logs one warning naming the kernel, the program, the word and the value, and what to do. Nothing stops:
a peer that is merely slow still arrives.
"""

import logging
import os
import threading
import time

logger = logging.getLogger("iris")
_local = threading.local()  # the launch this thread runs: (kernel name, grid)
_polls = {}  # address -> [program, value bytes, first poll's time, noticed]
MAX_TRACKED = 4096
NOTICE_S = float(os.environ.get("IRIS_NOTICE_S", 30))  # as the host's notices (iris/host/distributed.py)


def install(interpreter):
    """Once per process, on the cpu backend (``iris/interpreter/triton.py``'s ``install``)."""
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_iris_spins", False):
        return
    builder._iris_spins = True
    run_grid = interpreter.GridExecutor.__call__

    def run_grid_named(self, *args, **kwargs):
        # iris's own kernels wait only for their namesakes, and the watchdog names their waits: not watched
        own = getattr(self.fn, "__module__", "").startswith("iris.")
        _local.kernel = None if own else getattr(self.fn, "__name__", "kernel")
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            _local.kernel = None

    interpreter.GridExecutor.__call__ = run_grid_named
    atomic_rmw, atomic_cas = builder.create_atomic_rmw, builder.create_atomic_cas
    native = interpreter._interpreter

    def rmw_watched(self, rmwOp, ptr, val, mask, sem, scope):
        old = atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope)
        if self.ir_rmw_op_to_interpreter_rmw_op.get(rmwOp) in (native.RMW_OP.ADD, native.RMW_OP.FADD) and \
                not val.data.any():
            _polled(self, ptr.data, old.data)
        return old

    def cas_watched(self, ptr, cmp, val, sem, scope):
        old = atomic_cas(self, ptr, cmp, val, sem, scope)
        if (cmp.data == val.data).all():
            _polled(self, ptr.data, old.data)
        return old

    builder.create_atomic_rmw, builder.create_atomic_cas = rmw_watched, cas_watched


def _polled(builder, addresses, values):
    if getattr(_local, "kernel", None) is None:
        return
    address = int(addresses.reshape(-1)[0])
    value = values.tobytes()
    program = builder.grid_idx
    now = time.monotonic()
    entry = _polls.get(address)
    if entry is None or entry[0] != program or entry[1] != value:
        if len(_polls) >= MAX_TRACKED:
            _polls.clear()
        _polls[address] = [program, value, now, False]
        return
    if entry[3] or now - entry[2] < NOTICE_S:
        return
    entry[3] = True
    gx, gy, gz = builder.grid_dim
    x, y, z = program
    logger.warning(
        f"{_local.kernel}: program {x + gx * (y + gy * z)} of {gx * gy * gz} has polled "
        f"the word at {address:#x} for {now - entry[2]:.0f} s and it still reads {values.reshape(-1)[0].item()}. If it "
        "waits for another program of this launch, it never will: the cpu backend runs a launch's programs one at a "
        "time, in order, on every rank; let each program wait only for its namesake on other ranks (the same program "
        "id) or launch one program. If it waits for another rank, that rank has not signalled yet. IRIS_DEBUG=1 with "
        "IRIS_DEBUG_SPIN_LIMIT=<polls> turns the wait into an error.",
        extra={"iris_rank": os.environ.get("RANK", "?"), "iris_num_ranks": os.environ.get("WORLD_SIZE", "?")})
