"""Configuration of the collectives: one frozen dataclass, validated on creation.

Every choice a config makes (algorithm, programs, block) must be the same on every rank of the group, or
the ranks launch different kernels and wait for each other forever. The automatic choices depend only on
the message size, the dtype and the group size, which all ranks share.
"""

from dataclasses import dataclass

from iris.host.groups import MAX_COMM_PROGRAMS

ALL_REDUCE_ALGORITHMS = ("auto", "one_shot", "two_shot")
REDUCE_SCATTER_ALGORITHMS = ("auto", "pull", "push")
ALGORITHMS = ALL_REDUCE_ALGORITHMS + REDUCE_SCATTER_ALGORITHMS[1:]


@dataclass(frozen=True)
class CollectiveConfig:
    """``algorithm``: for ``all_reduce``, ``"one_shot"`` (every rank reads every peer's whole input: least
    latency), ``"two_shot"`` (reduce-scatter then all-gather: each byte crosses the link once per peer,
    for bandwidth), or ``"auto"`` (one-shot up to ``one_shot_max_bytes``). For ``reduce_scatter``,
    ``"pull"`` (each rank reads its slice of every peer's input) or ``"push"`` (each rank stores each peer's
    slice of its input into a staging buffer on that peer, chunk by chunk behind flags, and reduces what
    arrives locally: stores cross the link faster than loads, and neither input nor output need be on
    the heap); ``"auto"`` pushes from output slices of 64 MiB on GPUs (``reduce_scatter.PUSH_MIN_BYTES``),
    and pulls below (fewer barriers and no flags: less latency, and faster up to 32 MiB slices). The other
    collectives have one algorithm each.
    ``comm_sms``: the most programs (one per SM) the kernel may use, so a collective can share the GPU with
    compute; ``block_size``: elements each program moves per step (a power of two); ``num_warps``: warps
    per program. ``None`` picks by size (``iris.ccl.common.plan``): 64 programs of 8 warps moving 4096
    elements for latency-bound messages; from ``LARGE_NUMEL`` elements on, 128 programs (about one per SM),
    32 warps and 16384 elements, which keep enough stores in flight to fill the link (the push reduce_scatter:
    256 programs of 16 warps moving 8192, ``reduce_scatter.PUSH_LARGE_SHAPE``).
    ``check``: compare shapes and dtypes across ranks first (a host collective, so not inside CUDA graphs);
    ``IRIS_CCL_CHECK=1`` turns it on everywhere.
    ``use_gluon``: run the Gluon kernel (``iris/ccl/gluon/``; all_gather and all_to_all have one, as upstream);
    its register layout is derived from ``threads_per_warp`` (32: the NVIDIA warp; upstream's default 64 is an
    AMD wavefront and is refused) and ``num_warps``, so ``block_size`` must be a multiple of ``32 * num_warps``.
    ``waves_per_eu`` (an AMD occupancy hint) must stay 0."""

    algorithm: str = "auto"
    comm_sms: int | None = None
    block_size: int | None = None
    num_warps: int | None = None
    one_shot_max_bytes: int = 1 << 20
    check: bool = False
    use_gluon: bool = False
    threads_per_warp: int = 32
    waves_per_eu: int = 0

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"CollectiveConfig: algorithm={self.algorithm!r}; use one of {ALGORITHMS}")
        if self.comm_sms is not None and not 1 <= self.comm_sms <= MAX_COMM_PROGRAMS:
            raise ValueError(f"CollectiveConfig: comm_sms={self.comm_sms} is outside [1, {MAX_COMM_PROGRAMS}]")
        if self.block_size is not None and (self.block_size < 16 or self.block_size & (self.block_size - 1)):
            raise ValueError(f"CollectiveConfig: block_size={self.block_size} must be a power of two >= 16")
        if self.num_warps not in (None, 1, 2, 4, 8, 16, 32):
            raise ValueError(f"CollectiveConfig: num_warps={self.num_warps}; use 1, 2, 4, 8, 16 or 32")
        if self.threads_per_warp != 32:
            raise ValueError(f"CollectiveConfig: threads_per_warp={self.threads_per_warp}; NVIDIA warps have 32 "
                             "threads (64 is an AMD wavefront): use threads_per_warp=32")
        if self.waves_per_eu != 0:
            raise ValueError(f"CollectiveConfig: waves_per_eu={self.waves_per_eu} is an AMD occupancy hint with no "
                             "NVIDIA meaning; leave it 0 and bound the SMs a collective takes with comm_sms")
        if self.one_shot_max_bytes < 0:
            raise ValueError(f"CollectiveConfig: one_shot_max_bytes={self.one_shot_max_bytes} must be >= 0")
