"""Start N ranks of a function on one machine, for scripts, examples and tests.

``launch(fn, world_size)`` runs ``fn(*args)`` once in each of ``world_size`` fresh processes (the
environment torchrun would give them: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT``) and
returns the per-rank results. As under torchrun, no default process group exists when ``fn`` starts:
``iris.iris()`` makes one from the environment, or ``fn`` makes its own (``dist.init_process_group("iris")``).
``RankPool`` keeps such processes alive and runs many functions on them, which is how the tests avoid paying
process start-up (interpreter import, process group) per test; its ranks make the default group (gloo on the
cpu backend) as they start.
``run(main)`` is the one-liner for scripts: under torchrun it calls ``main()``; otherwise it launches.

Processes are spawned, not forked: CUDA and the Triton interpreter both need a fresh interpreter.
"""

import multiprocessing as mp
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from iris.device import debug
from iris.errors import RankError
from iris.logging import logger
from iris.platform.backend import Backend, choose_backend, require_gpus
from iris.host import sanitize
from iris.host.watchdog import mark_failed, mark_returned, mark_running

# Multicast (NVLS) stays off in every process we start.
_ALWAYS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Once a rank has failed, how long the others may still take: with the watchdog they fail within a second
# or so; without it (IRIS_WATCHDOG=0) a rank spinning on the failed one is stopped here.
FAILURE_GRACE_S = 15


def bad_address_hint(debug_on):
    """What a rank killed by a bad address most likely did, and how to see it (``iris/device/debug.py``), for the
    debug setting the rank ran with."""
    if debug_on:
        return ("; a kernel touched an address outside every mapped heap, and debug mode, which was on, checks every "
                "address iris translates: look for an access that bypasses iris's device functions (a tl.load or "
                "tl.store on a pointer computed by hand)")
    return ("; a kernel touched an address outside every mapped heap (a pointer not on the heap, or a peer out of "
            "range): rerun with IRIS_DEBUG=1, which checks every translated address and names the kernel's ranks, the "
            "address and the heap's range")


def check_world_size(world_size, caller):
    """A ``ValueError`` naming ``caller`` unless ``world_size`` is an int of at least 1."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"{caller}: world_size={world_size!r} must be an int of at least 1 (the number of rank "
                         "processes to start)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _spawn_environment(backend, env=None):
    """Children inherit os.environ at start, and read IRIS_BACKEND / TRITON_INTERPRET (and IRIS_DEBUG) when
    they import iris (before any of our code runs in them), so set those here around the start."""
    saved = dict(os.environ)
    os.environ.update(_ALWAYS)
    os.environ.update(env or {})
    backend = backend or os.environ.get("IRIS_BACKEND") or choose_backend()
    os.environ["IRIS_BACKEND"] = backend
    if backend == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield backend
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _set_rank_environment(rank, world_size, port, nodes=1):
    """torchrun's variables for ``rank``; with ``nodes`` > 1 also ``IRIS_NODE_ID`` (the simulated node's host id,
    ``iris/host/topology.py``) and, on GPUs, ``NCCL_HOSTID``, so that NCCL also sees the nodes apart."""
    local = world_size // nodes
    node, local_rank = divmod(rank, local)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(local), GROUP_RANK=str(node), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    if nodes > 1:
        host = f"{socket.gethostname()}-node{node}"
        os.environ.update(IRIS_NODE_ID=host, NCCL_HOSTID=host)


class _RankLines:
    """A rank's ``sys.stdout`` / ``sys.stderr``: each whole line written at once with ``[rank R] `` before it, so the
    ranks' prints stay apart (as torchrun's ``--tee`` labels them). A partial line waits for its newline, or for the
    end of the rank's call. On by default where the stream is a terminal (a person reading);
    ``IRIS_RANK_PREFIX=1`` turns it on for pipes and files too, ``IRIS_RANK_PREFIX=0`` off everywhere."""

    def __init__(self, stream, prefix):
        self._stream, self._prefix, self._pending = stream, prefix, ""

    def write(self, text):
        *lines, self._pending = (self._pending + text).split("\n")
        if lines:
            self._stream.write("".join(f"{self._prefix}{line}\n" for line in lines))
            self._stream.flush()
        return len(text)

    def flush(self):  # a partial line still waits for its newline: the line stays whole
        self._stream.flush()

    def finish(self):
        """The partial last line, at the end of the rank's call."""
        if self._pending:
            self._stream.write(f"{self._prefix}{self._pending}\n")
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding, ...: the stream's
        return getattr(self._stream, name)


def _label_prints(rank):
    asked = os.environ.get("IRIS_RANK_PREFIX", "")
    if asked == "0":
        return
    if asked == "1" or sys.stdout.isatty():
        sys.stdout = _RankLines(sys.stdout, f"[rank {rank}] ")
    if asked == "1" or sys.stderr.isatty():
        sys.stderr = _RankLines(sys.stderr, f"[rank {rank}] ")


def _call(payload):
    """Run one call of ``RankPool.run`` in this rank; a context it leaves open reads as RETURNED to its peers until
    the next call (a peer still waiting for this rank then raises, ``iris/host/watchdog.py``)."""
    try:
        fn, args, kwargs = pickle.loads(payload)
    except Exception:
        return "err", (f"{traceback.format_exc()}iris: this rank could not import the function to run or its "
                       "arguments: define the function at the top level of a module the ranks can import (the "
                       "script itself, with iris.run under if __name__ == '__main__':), not in a notebook or inside "
                       "another function\n")
    mark_running()
    try:
        result = fn(*args, **kwargs)
        sanitize.raise_undelivered(getattr(fn, "__name__", "the rank's function"))  # IRIS_SANITIZE=race
        mark_returned()
        return "ok", result
    except BaseException as e:
        mark_failed(e)  # first: peers waiting for this rank fail now, not at their timeout
        text = traceback.format_exc()
        if "illegal memory access" in text or "illegal address" in text:  # a GPU's bad address
            text += f"iris{bad_address_hint(debug.ENABLED.value)}\n"
        return "err", text
    finally:
        for stream in (sys.stdout, sys.stderr):
            getattr(stream, "finish", stream.flush)()  # a partial last line (_RankLines)


def _worker(rank, world_size, port, conn, nodes=1, process_group=True):
    _set_rank_environment(rank, world_size, port, nodes)
    _label_prints(rank)
    from iris.platform import backend as _backend
    from iris.host.distributed import ensure_process_group

    if _backend.BACKEND != "cpu":
        import torch

        from iris.platform.device_info import get_device_id_for_rank

        torch.cuda.set_device(torch.device("cuda", get_device_id_for_rank(rank)))
    if process_group:
        ensure_process_group(_backend.BACKEND)
    conn.send(("ready", None))
    while True:
        try:
            payload = conn.recv()
        except EOFError:
            break
        if payload is None:
            break
        status, value = _call(payload)
        try:
            conn.send((status, value))
        except Exception:  # an unpicklable result
            conn.send(("err", traceback.format_exc()))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


STARTING = "starting the ranks"


def _stopped_by_a_peer(text):
    """Whether a rank's error text ends in a ``PeerError``: another rank's failure, seen here."""
    lines = text.strip().splitlines()
    return bool(lines) and "PeerError" in lines[-1].split(":")[0]


class RankPool:
    """``world_size`` long-lived rank processes (``env`` added to their environment); ``pool.run(fn, *args)``
    runs ``fn`` on all of them and returns the list of results, rank by rank. A failure on any rank raises
    ``RankError`` and tears the pool down (the other ranks may be stuck waiting for the failed one); the next
    ``run`` starts it afresh. ``nodes`` > 1 simulates that many nodes of ``world_size // nodes`` ranks each
    (contiguous ranks, one ``IRIS_NODE_ID`` per node: ``iris/host/topology.py``). With ``process_group=False`` the
    ranks start without a default process group, as torchrun's do (``launch``). The ranks start at the first
    ``run``; ``close`` (or the end of a ``with`` block) stops them.

    Raises ``ValueError`` for a ``world_size`` below 1 or a ``nodes`` that does not divide it.

    Example::

        # not run by the tests: it starts rank processes
        def rank_of_context():  # at module level: the ranks import it
            return iris.iris(1 << 24).get_rank()

        if __name__ == "__main__":  # a rank imports this module too, which must not start ranks again
            with iris.RankPool(2) as pool:
                assert pool.run(rank_of_context) == [0, 1]
    """

    def __init__(self, world_size: int, backend: Backend | None = None, start_timeout_s: float = 300,
                 env: dict[str, str] | None = None, nodes: int = 1, process_group: bool = True) -> None:
        check_world_size(world_size, "RankPool")
        if not isinstance(nodes, int) or nodes < 1 or world_size % nodes:
            raise ValueError(f"RankPool: nodes={nodes!r} must be a positive divisor of world_size={world_size} (every "
                             "node runs the same number of ranks)")
        self.nodes = nodes
        self.process_group = process_group
        self.world_size = world_size
        self.backend = backend
        self.env = env
        self.start_timeout_s = start_timeout_s
        self._procs = []
        self._conns = []

    def _start(self):
        if getattr(mp.current_process(), "_inheriting", False):  # a spawned rank importing the script's __main__
            raise RuntimeError("iris: ranks are being started from a rank that is itself starting: the script starts "
                               "them when it is imported, and every rank imports it; put the call (iris.run, "
                               "iris.launch, RankPool) under if __name__ == '__main__':")
        port = _free_port()
        ctx = mp.get_context("spawn")
        with _spawn_environment(self.backend, self.env) as backend:
            require_gpus(backend, "iris.launch")  # before any rank starts: one error, not one per rank
            if sys.stderr.isatty():  # a person waiting at a terminal: each rank imports torch and triton first
                print(f"iris: starting {self.world_size} ranks ({backend} backend)...", file=sys.stderr, flush=True)
            for rank in range(self.world_size):
                parent, child = ctx.Pipe()
                args = (rank, self.world_size, port, child, self.nodes, self.process_group)
                proc = ctx.Process(target=_worker, args=args, daemon=True)
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
        self._collect(self.start_timeout_s, STARTING)

    def _answer(self, rank):
        """``(status, value)`` once ``rank`` has answered or died, else None."""
        conn, proc = self._conns[rank], self._procs[rank]
        try:
            if conn.poll(0.01):
                return conn.recv()
            if proc.is_alive():
                return None
        except (EOFError, OSError):  # the pipe closed under us: the process is gone
            pass
        proc.join(timeout=5)
        code = proc.exitcode
        if code is not None and code < 0:
            debug_on = {**os.environ, **(self.env or {})}.get("IRIS_DEBUG", "") == "1"
            hint = bad_address_hint(debug_on) if -code in (signal.SIGSEGV, signal.SIGBUS) else ""
            return "err", f"rank {rank} died: killed by signal {-code} ({signal.strsignal(-code)}){hint}"
        return "err", f"rank {rank} died (exit code {code})"

    def _collect(self, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        results, errors = [None] * self.world_size, {}
        pending = set(range(self.world_size))
        first_failure = None  # (rank, when): the others may be waiting on it
        while pending:
            for rank in sorted(pending):
                answer = self._answer(rank)
                if answer is None:
                    continue
                pending.discard(rank)
                status, value = answer
                if status != "err":  # "ok", or "ready" at start-up
                    results[rank] = value
                    continue
                if what == STARTING and value.startswith(f"rank {rank} died"):
                    value += ("; it printed why above (a script whose iris.run is not under if __name__ == "
                              "'__main__': starts ranks again in every rank)")
                errors[rank] = value
                if first_failure is None:
                    first_failure = (rank, time.monotonic())
                    deadline = min(deadline, first_failure[1] + FAILURE_GRACE_S)
            if pending and time.monotonic() > deadline:
                for rank in pending:
                    if first_failure is None:
                        errors[rank] = f"rank {rank} did not finish within the time limit ({timeout_s:g} s)"
                    else:
                        failed, when = first_failure
                        errors[rank] = (f"rank {rank} was still running {time.monotonic() - when:.0f} s after rank "
                                        f"{failed} failed (likely waiting for it)")
                self.close(force=True)
                break
        if errors:
            # A failed rank may have skipped collective calls the others made; start afresh next time.
            self.close(force=True)
            # the causes first: ranks that raised or died before those stopped by a peer's failure (a PeerError),
            # each kind in the order found
            ranks = sorted(errors, key=lambda r: _stopped_by_a_peer(errors[r]))
            detail = "\n".join(f"--- rank {r} ---\n{errors[r]}" for r in ranks)
            first = f" (rank {ranks[0]} first)" if len(errors) > 1 else ""
            raise RankError(f"{what}: {len(errors)} of {self.world_size} ranks failed{first}\n{detail}")
        return results

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 600, **kwargs: Any) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank (``fn`` importable, its arguments and results picklable); the
        results by rank. Starts the ranks at the first call. Host-blocking.

        Raises ``iris.RankError`` with every failing rank's traceback when a rank raises, dies, or passes
        ``timeout_s`` (the pool is then torn down; the next ``run`` starts it afresh), or when the ranks fail to
        start; ``RuntimeError`` when a GPU backend finds no GPU.

        Example::

            # not run by the tests: it starts rank processes
            def scaled_world_size(scale):  # at module level: the ranks import it
                return scale * dist.get_world_size()

            if __name__ == "__main__":
                with iris.RankPool(2) as pool:
                    assert pool.run(scaled_world_size, 10) == [20, 20]
        """
        if not self._procs:
            self._start()
        main = sys.modules.get("__main__")
        if getattr(fn, "__module__", None) == "__main__" and not os.path.isfile(getattr(main, "__file__", None) or ""):
            raise ValueError(f"iris.run: {getattr(fn, '__qualname__', fn)} is defined in an interactive session (a "
                             "notebook, the REPL, python -c or python - < file), which the rank processes, started "
                             "fresh, cannot import; save the code as a .py file and run that, with iris.run under "
                             "if __name__ == '__main__':")
        payload = pickle.dumps((fn, args, kwargs))
        for conn in self._conns:
            conn.send(payload)
        return self._collect(timeout_s, getattr(fn, "__name__", "run"))

    def close(self, force: bool = False) -> None:
        """Stop the ranks: each leaves its loop and destroys its process group, or with ``force`` is killed at
        once; one still alive after 10 s is killed. The pool can ``run`` again (it starts new ranks).

        Example::

            # not run by the tests: it starts rank processes
            def rank():  # at module level: the ranks import it
                return dist.get_rank()

            if __name__ == "__main__":
                pool = iris.RankPool(2)
                try:
                    assert pool.run(rank) == [0, 1]
                finally:
                    pool.close()
        """
        for conn in self._conns:
            try:
                if not force:
                    conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=0 if force else 10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: Backend | None = None, timeout_s: float = 600,
           nodes: int = 1, **kwargs: Any) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` fresh rank processes and return the results by rank.
    ``fn`` must be importable (defined at module level). ``backend`` overrides ``IRIS_BACKEND``; ``nodes``
    simulates that many nodes (``RankPool``). No default process group exists when ``fn`` starts, as under
    torchrun: ``iris.iris()`` makes one, or ``fn`` calls ``dist.init_process_group`` (``"iris"`` included).

    Raises ``ValueError`` for a ``world_size`` below 1 or a ``nodes`` that does not divide it, ``RuntimeError`` when
    a GPU backend finds no GPU, and ``iris.RankError`` with every failing rank's traceback when a rank raises, dies
    or passes ``timeout_s``.

    Example::

        # not run by the tests: it starts rank processes
        def main(n):  # at module level: the ranks import it
            ctx = iris.iris(1 << 24)
            out = ctx.zeros(n)
            ctx.ccl.all_reduce(out, ctx.ones(n))
            return out.sum().item()

        if __name__ == "__main__":  # a rank imports this module too, which must not start ranks again
            assert iris.launch(main, 2, 16) == [32.0, 32.0]
    """
    with RankPool(world_size, backend=backend, nodes=nodes, process_group=False) as pool:
        return pool.run(fn, *args, timeout_s=timeout_s, **kwargs)


def run(main: Callable[..., Any], world_size: int | None = None, *args: Any, **kwargs: Any) -> list[Any]:
    """For scripts: under torchrun (``RANK`` is set) call ``main(*args)`` in this process; otherwise start
    ``world_size`` ranks of it (default 2) with ``launch`` (``nodes=N``: as N simulated nodes). Either way ``main``
    starts with no default process group (``iris.iris()`` makes one, or ``dist.init_process_group``). Under torchrun,
    torchrun's ``WORLD_SIZE`` wins: its processes are already running, and no rank can be added or taken away;
    a ``world_size`` that disagrees is named in a warning on rank 0.

    Raises ``launch``'s errors (``ValueError`` for a ``world_size`` below 1 under torchrun too).

    Example::

        # not run by the tests: it starts rank processes (a script: python prog.py, or torchrun prog.py)
        def main():
            ctx = iris.iris(1 << 24)
            ctx.barrier()
            return ctx.get_rank()

        if __name__ == "__main__":
            print(iris.run(main))  # [0, 1] as a plain script; under torchrun, [this rank] on each
    """
    if world_size is not None:
        check_world_size(world_size, "iris.run")
    if "RANK" in os.environ:
        kwargs.pop("nodes", None)  # torchrun made the nodes
        started = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size is not None and world_size != started and os.environ["RANK"] == "0":
            logger.warning(f"iris.run: world_size={world_size} is ignored: torchrun started WORLD_SIZE={started} "
                           f"ranks, which cannot change now; start torchrun with --nproc_per_node={world_size} "
                           "(and --nnodes) for that many")
        return [main(*args, **kwargs)]
    return launch(main, 2 if world_size is None else world_size, *args, **kwargs)
