"""Vector clocks, epochs and what orders what: the race detector's model of the GPU memory model.

Threads. Each rank has ``SLOTS`` threads: slot 0 its host thread, slots 1.. the programs of the kernel it runs
(program p in slot ``1 + p % (SLOTS - 1)``; programs that share a slot look ordered to each other, one way a race
can go unseen). A thread's vector clock ``C`` has one component per thread of every rank.

An access is stamped with an epoch, one int64: ``clock << 16 | thread << 1 | atomic``. An earlier access (epoch
``e``) happens before thread ``t``'s access when ``C_t[thread(e)] >= clock(e)``.

What orders (``docs/design.md``, "The race detector"):

- program order within a thread;
- a kernel launch: its programs start from the host's clock (fork), the host continues from all of them after
  (join): a rank's stream runs its kernels in order, and the cpu backend runs them synchronously;
- a release (``sem`` release or acq_rel) read by an acquire (acquire or acq_rel) at a scope that holds both threads:
  ``cta`` only the same program, ``gpu`` the same rank, ``sys`` every rank;
- a fence (``fence.acq_rel``, what ``iris.device.sync.fence_release_sys`` compiles to) makes this thread's later
  relaxed atomic writes releases of what came before the fence, and its earlier relaxed atomic reads acquires; a
  kernel's start is such a fence for the writes (every earlier kernel of the rank is complete at sys scope
  before it starts) and its end for the reads (a later kernel or the host sees what the kernel's relaxed reads
  observed);
- a host barrier (``ctx.barrier``): every member's host before it, before every member's host after it.

Relaxed atomics order nothing else, with one exception drawn from what GPUs do and the library relies on: a
load has returned its value before a later store of the same thread is performed, so a relaxed write also
carries the thread's *reads* (``L``, the clock a write-after-read check uses): a rank that sees a peer's relaxed
signal may overwrite what the peer read before it (the closing barrier of a collective, which is relaxed).
"""

import numpy as np

SLOTS = 32
# sync-object rows: (full, reads) x (sys scope, gpu scope)
FULL_SYS, READS_SYS, FULL_GPU, READS_GPU = range(4)
ROWS = 4


def epoch_of(clock, thread, atomic):
    return (int(clock) << 16) | (thread << 1) | int(atomic)


def split(epochs):
    """(thread, clock, atomic) arrays of an array of epochs."""
    return (epochs >> 1) & 0x7FFF, epochs >> 16, (epochs & 1).astype(bool)


class Thread:
    """One thread's clocks: ``C`` what happened before it, ``L`` (at least ``C``) the reads that did, ``F`` its
    clock at its last fence (what a relaxed write releases), ``pending_full``/``pending_reads`` what its relaxed
    reads observed, which the next fence acquires. ``program``: the program id it runs, -1 for the host."""

    __slots__ = ("tid", "rank", "program", "C", "L", "F", "pending_full", "pending_reads")

    def __init__(self, tid, rank, components, program=-1):
        self.tid, self.rank, self.program = tid, rank, program
        self.C = np.zeros(components, np.int64)
        self.C[tid] = 1
        self.L = self.C.copy()
        self.F = self.C.copy()
        self.pending_full = np.zeros(components, np.int64)
        self.pending_reads = np.zeros(components, np.int64)

    def epoch(self, atomic=False):
        return epoch_of(self.C[self.tid], self.tid, atomic)

    def tick(self):
        """After a release: later accesses are not covered by what was released."""
        self.C[self.tid] += 1
        self.L[self.tid] = self.C[self.tid]

    def fork(self, tid, program, after=0):
        """A program of a kernel this (host) thread launches: it starts from our clocks, at the kernel's start fence.
        ``after``: the clock the last program in its slot reached in this kernel (it continues from there)."""
        child = Thread.__new__(Thread)
        child.tid, child.rank, child.program = tid, self.rank, program
        child.C = self.C.copy()
        child.C[tid] = max(child.C[tid], after) + 1
        child.F = child.C.copy()  # what a relaxed write releases: everything before the kernel, nothing of it
        child.C[tid] += 1
        child.L = np.maximum(self.L, child.C)
        child.pending_full = np.zeros_like(self.C)
        child.pending_reads = np.zeros_like(self.C)
        return child

    def join(self, child):
        """The kernel's end: a fence for the child's relaxed reads, then the host continues after the child."""
        np.maximum(self.C, child.C, out=self.C)
        np.maximum(self.C, child.pending_full, out=self.C)
        np.maximum(self.L, child.L, out=self.L)
        np.maximum(self.L, child.pending_reads, out=self.L)
        np.maximum(self.L, self.C, out=self.L)

    def fence(self):
        """``fence.acq_rel``: earlier relaxed reads become acquires; later relaxed writes release up to here."""
        np.maximum(self.C, self.pending_full, out=self.C)
        np.maximum(self.L, self.pending_reads, out=self.L)
        np.maximum(self.L, self.C, out=self.L)
        self.F = self.C.copy()
        self.tick()


def release(rows, gpu_owner, thread, scope, relaxed):
    """``thread``'s atomic write to a sync object (``rows``: its four clocks; ``gpu_owner``: a one-element array, the
    rank whose gpu-scope releases the gpu rows hold, -1 for none). A relaxed write releases the clock of the
    thread's last fence and its reads."""
    if scope == "cta":
        return
    full = thread.F if relaxed else thread.C
    if scope == "sys":
        np.maximum(rows[FULL_SYS], full, out=rows[FULL_SYS])
        np.maximum(rows[READS_SYS], thread.L, out=rows[READS_SYS])
    owner = gpu_owner[0]
    if owner != thread.rank:
        if owner != -1 and scope == "sys":
            return  # another rank's gpu-scope releases stay; this one is seen at sys scope
        rows[FULL_GPU] = 0
        rows[READS_GPU] = 0
        gpu_owner[0] = thread.rank
    np.maximum(rows[FULL_GPU], full, out=rows[FULL_GPU])
    np.maximum(rows[READS_GPU], thread.L, out=rows[READS_GPU])


def acquire(rows, gpu_owner, thread, scope, relaxed):
    """``thread``'s atomic read of a sync object: an acquire joins what was released to a scope that holds it; a
    relaxed read keeps it for the thread's next fence."""
    if scope == "cta":
        return
    full, reads = (thread.pending_full, thread.pending_reads) if relaxed else (thread.C, thread.L)
    if scope == "sys":
        np.maximum(full, rows[FULL_SYS], out=full)
        np.maximum(reads, rows[READS_SYS], out=reads)
        np.maximum(reads, rows[FULL_SYS], out=reads)
    if gpu_owner[0] == thread.rank:
        np.maximum(full, rows[FULL_GPU], out=full)
        np.maximum(reads, rows[READS_GPU], out=reads)
        np.maximum(reads, rows[FULL_GPU], out=reads)
    if not relaxed:
        np.maximum(thread.L, thread.C, out=thread.L)
