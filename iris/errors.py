"""The exceptions a rank sees when something outside its own code fails: a peer, a wait, a launched rank. Defined
here, at the bottom, so that any layer can raise or catch them without importing the machinery that detects them."""

from collections.abc import Iterable


class PeerError(RuntimeError):
    """A peer rank raised or died while this rank's context was open, or left (closed its context, or returned from
    the function the launcher ran on it) while this rank waited for it; the message names it and how. Raised
    asynchronously in the thread that created the context, then by every later call that talks to peers.

    Example::

        # not run by the tests: it needs a peer that fails
        try:
            ctx.barrier()
        except iris.PeerError as e:  # iris.MismatchError too, its subclass
            ctx.error(f"giving up: {e}")  # names the peer and how it failed
            raise
    """

    message = "a peer rank failed (see the iris watchdog's log line)"

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or (self.message,)))

    def __reduce__(self):  # the carrier subclasses made by _raise_in are not importable; travel as PeerError
        return PeerError, self.args


class MismatchError(PeerError):
    """The ranks of a group made different calls: another collective, dtype, shape (``[1024]`` and ``[32, 32]``
    differ, though their element counts agree) or root, tensors at other heap offsets (a heap allocated
    differently), or calls in different groups that wait for each other. Raised on every rank the kernels' barriers
    (or the watchdog, for groups) found in disagreement, naming both calls; the context then refuses further calls,
    like a peer failure. On GPUs the host learns of it after the kernel ran: the next call raises it, or, under
    ``iris.run``, the rank's function's return when no call came after (an error the function caught is not raised
    again there). ``docs/debugging.md``, "When something goes wrong", lists what is compared and what is not.

    Example::

        # not run by the tests: the ranks' calls must disagree
        x = ctx.zeros(1024 if rank == 0 else 2048)
        try:
            ctx.ccl.all_reduce(ctx.zeros_like(x), x)  # a shape that differs by rank
        except iris.MismatchError as e:
            assert "[1024]" in str(e) and "[2048]" in str(e)  # both calls, on every rank
    """

    message = "the ranks of a group made different calls (see the iris watchdog's log line)"

    def __reduce__(self):
        return MismatchError, self.args


class RankTimeoutError(TimeoutError):
    """A host-side wait gave up; ``missing`` lists the ranks that did not arrive (empty for a wait on no rank: a copy
    engine's queue).

    Example::

        # not run by the tests: it needs a rank that never arrives
        try:
            ctx.barrier(timeout_s=30)
        except iris.RankTimeoutError as e:
            ctx.error(f"ranks {e.missing} did not arrive")
            raise
    """

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class RankError(RuntimeError):
    """One or more ranks of ``iris.launch`` / ``iris.run`` / ``iris.RankPool`` raised, died or ran out of time; the
    message holds each failing rank's traceback.

    Example::

        # not run by the tests: it starts rank processes
        def main():  # at module level: the ranks import it
            raise ValueError("bad input")

        if __name__ == "__main__":
            try:
                iris.launch(main, 2)
            except iris.RankError as e:
                assert "2 of 2 ranks failed" in str(e) and "ValueError: bad input" in str(e)
    """


class ClosedError(RuntimeError):
    """A call on a context after ``ctx.close()``: raised on the host, before any kernel or allocation, since its heap
    is unmapped. ``ClosedError(caller)`` words the message; ``caller`` is the call that refused.

    Example::

        # not run by the tests: it closes the context the examples share
        ctx.close()
        try:
            ctx.barrier()
        except iris.ClosedError as e:
            assert e.caller == "Iris.barrier"
    """

    def __init__(self, caller: str) -> None:
        self.caller = caller
        super().__init__(f"{caller}: this iris context is closed (ctx.close() was called, or the `with` block that "
                         "made it has ended); its heap is unmapped, so no collective, copy or allocation can run on it: "
                         "make a new context with iris.iris(...)")

    def __reduce__(self):
        return ClosedError, (self.caller,)


class RaceError(RuntimeError):
    """The race detector (``IRIS_SANITIZE=race``, cpu backend) reported data races while the context was open:
    raised by ``ctx.close()``; the message counts them and repeats the first report (each was printed as it
    happened). ``races``: the reports it raises.

    Example::

        # not run by the tests: it makes a context of its own, with the race detector on
        ctx = iris.iris(1 << 24, sanitize="race")
        ...  # kernels that read and write heap memory on several ranks
        try:
            ctx.close()
        except iris.RaceError as e:
            print(f"{len(e.races)} races; the first: {e.races[0]}")
    """

    def __init__(self, message: str, races: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.races = list(races)

    def __reduce__(self):
        return RaceError, (str(self), self.races)
