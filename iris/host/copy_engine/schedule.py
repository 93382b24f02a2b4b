"""The copy-engine side of a fused op: one object for the protocol every op that hands its traffic to the copy
engines follows, on the context's copy queue (``iris/host/copy_engine/queue.py``).

    schedule = CopySchedule(ctx, sync, caller)   # fork: the side stream starts after the work queued so far
    schedule.after(count, value)                 # send: side-stream work waits for the kernel's counts,
    schedule.copy(peer_dst, src)                 #       copies into peers' heaps,
    schedule.signal(peer_flag)                   #       then raises a flag on the peer (set to 1)
    with schedule.launch(counts):                # counted launch: the kernel adds to ``counts`` as it stores
        kernel[grid](...)
    schedule.join(arrived=flags, consumed=flags) # join, and reset

One reset rule for every op: a count is cleared by the side stream once its wait is met (``after``); a flag a
peer's side stream raises on our heap is cleared by us, after the op, by ``join``: on the compute stream after
waiting for it (``arrived``), or after the kernel that waited for it (``consumed``). Flags are set to 1 and
cleared, never stamped with a call number: a replayed CUDA graph writes the numbers it was captured with, so a
stamp left by the last replay would satisfy the next one's wait.

The bands: a fused kernel's output (or a rank's row block of one) is carried in bands of ``group_m`` tile rows
by as many tile columns as keep a band within ``BAND_BYTES``. The grouped tile order finishes one
band's tiles one after another (``iris.ops.gemm.band_of`` numbers them on the device), so a band leaves soon
after its tiles are done; one copy costs ~5 us however small, which is why bands are not single tiles.
"""

import collections
import contextlib

import triton

from iris.host.memory.peers import peer_view
from iris.host.groups import POISON

# A band's size: one copy costs ~5 us however small and the engines move 235-270 GB/s per direction with both
# ranks copying (2 x H200), so a 4 MiB band is ~16 us of link time against 5 us of overhead, and 4096x8192x8192's
# 16 MB rows of tiles leave in four pieces instead of one (docs/perf-notes.md, matmul_all_gather; other sizes were
# not timed). Read at each call, so a test can cut the interpreter's small outputs into several bands.
BAND_BYTES = 4 << 20

Band = collections.namedtuple("Band", "first tiles rows cols")  # first tile in the grouped order, count, slices


def output_bands(config, M, N, block_m, block_n, element_size):
    """(band_cols, [Band]): the copy engines' units of an [M, N] output in the grouped tile order; ``rows`` and
    ``cols`` are element slices."""
    num_pid_m, num_pid_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    band_cols = max(1, min(num_pid_n, BAND_BYTES // (config.group_m * block_m * block_n * element_size)))
    found, first = [], 0
    for m in range(0, num_pid_m, config.group_m):
        rows = slice(m * block_m, min(M, (m + config.group_m) * block_m))
        for n in range(0, num_pid_n, band_cols):
            tiles = (min(num_pid_m, m + config.group_m) - m) * (min(num_pid_n, n + band_cols) - n)
            found.append(Band(first, tiles, rows, slice(n * block_n, min(N, (n + band_cols) * block_n))))
            first += tiles
    return band_cols, found


def bands_before(bands, tile):
    """The ``bands`` whose tiles all come before ``tile`` in the grouped order: with ``tile`` the first of the
    walk's last wave, those the copy engines carry. The last wave's tiles all finish at the end, when the programs
    have nothing left to do, and their stores from the SMs cross the link sooner (~370 GB/s against ~240 for the
    copy engines with both directions busy, 2 x H200) and without the streams' waits."""
    return [band for band in bands if band.first + band.tiles <= tile]


def copy_sms(ctx, copy_engine):
    """SMs a fused kernel that waits on its copy queue leaves free: one where ranks share a GPU, none otherwise.
    Between GPUs the queue's copies run on the copy engines; between two ranks of one GPU they are copies within
    that GPU, which the driver runs as kernels of its own: each waits for room on an SM, so a grid that fills
    every SM and spins on flags raised after such copies never ends (``scripts/shared_gpu_copy_probe.py``;
    docs/perf-notes.md, "Copy engines on a shared GPU")."""
    return 1 if copy_engine and ctx.shares_gpu else 0


class CopySchedule:
    """One fused op's work on the copy queue, from fork to join (the module docstring gives the protocol).
    Queue everything before the launch: on the cpu backend a launch returns only once the interpreted kernel has
    finished, and a host thread runs the queued work beside it; on GPUs ``join`` issues it after the launch."""

    def __init__(self, ctx, sync, caller):
        self.ctx, self.sync, self.caller = ctx, sync, caller
        self.queue = ctx.copy_queue
        self.peers = [r for r in sync.ranks if r != ctx.cur_rank]
        self.queue.fork()

    def peer(self, tensor, rank):
        """``tensor``'s counterpart on ``rank`` (a view whose writes land there)."""
        return peer_view(self.ctx, tensor, rank)

    def after(self, count, value):
        """Later side-stream work waits until the one-element int32 ``count`` reaches ``value``; then clears it."""
        self.queue.consume(count, value, self.caller)

    def copy(self, dst, src):
        self.queue.copy(dst, src)

    def signal(self, flag):
        """Set the one-element int32 ``flag`` (a peer's) to 1 once the copies queued before it have landed."""
        self.queue.write(flag, 1)

    def send_bands(self, out, bands, counts, sent, warps, row_offset=0, col_offset=0):
        """Each of ``bands`` of ``out`` (offset by ``row_offset``, ``col_offset``) into every peer's ``out`` once
        the kernel has counted all its tiles on ``counts`` (once per tile and warp), then row ``sync.index`` of
        ``sent`` on each peer says that its ``out`` holds them. Nothing if no bands."""
        if not bands:
            return
        peer_outs = [self.peer(out, r) for r in self.peers]
        for i, band in enumerate(bands):
            self.after(counts[i:i + 1], band.tiles * warps)
            rows = slice(row_offset + band.rows.start, row_offset + band.rows.stop)
            cols = slice(col_offset + band.cols.start, col_offset + band.cols.stop)
            for peer_out in peer_outs:
                self.copy(peer_out[rows, cols], out[rows, cols])
        for peer in self.peers:
            self.signal(self.peer(sent, peer)[self.sync.index])

    @contextlib.contextmanager
    def launch(self, counts):
        """Around the launch of the kernel that adds to ``counts``: if the launch fails, raise every count past its
        target so that the side stream, and the peers waiting for its flags, do not block for good, and let the
        queue finish before the error goes on."""
        try:
            yield
        except BaseException:
            _poison(self.ctx, counts)
            self.queue.join([], self.caller)
            raise

    def join(self, arrived=None, consumed=()):
        """The compute stream continues after the side stream's work and, with ``arrived`` (a [W, 1] flag table
        whose row i member i's side stream sets on our heap), once every peer's row is set; it clears those rows,
        and then every tensor of ``consumed`` (flags peers raised that our kernel waited for, so all are set)."""
        flags = [] if arrived is None else [arrived[i] for i, r in enumerate(self.sync.ranks) if r != self.ctx.cur_rank]
        self.queue.join(flags, self.caller)
        for flag in consumed:
            flag.zero_()


def _poison(ctx, counts):
    """Raise every one of ``counts`` (int32) past any target, each a release as a kernel's count is (what the race
    detector, under ``IRIS_SANITIZE=race``, is told): the side stream's waits on them end."""
    sanitizer = getattr(ctx, "sanitizer", None)
    if sanitizer is None:
        counts.fill_(POISON)
        return
    words = counts.view(-1).numpy()  # the cpu backend's: written through numpy, which the detector's torch hook
    # does not hear (it would take the lock the atomic holds)
    for i in range(len(words)):
        sanitizer.detector.atomic_word(counts.data_ptr() + 4 * i, 4, write=True, sem="release",
                                       perform=lambda i=i: words.__setitem__(i, POISON))
