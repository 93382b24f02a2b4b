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
GLUON_PATHS = ("registers", "tma")


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
    ``IRIS_CCL_CHECK=1`` in the environment of the process turns it on everywhere.
    ``use_gluon``: run the Gluon kernel (``iris/ccl/gluon/``; all_gather and all_to_all have one, as upstream);
    its register layout is derived from ``threads_per_warp`` (32: the NVIDIA warp; upstream's default 64 is an
    AMD wavefront and is refused) and ``num_warps``, so ``block_size`` must be a multiple of ``32 * num_warps``.
    ``gluon_path``: how the Gluon all_gather moves data, ``"registers"`` (each thread stores its vectors to every
    member) or ``"tma"`` (tiles staged in shared memory, one Hopper bulk tensor store per member through tensor maps
    over the members' heaps: ``iris/ccl/gluon/all_gather_tma.py``; needs 16-byte aligned slots and sm_90).
    ``iris.ccl.Config`` (upstream's) translates to this.

    Raises ``ValueError`` naming the field for a value outside its range.

    Example::

        config = iris.ccl.CollectiveConfig(algorithm="two_shot", comm_sms=2)  # the same on every rank
        x = ctx.ones(4096)
        ctx.ccl.all_reduce(x, x, config=config)  # two-shot runs in place
        assert torch.all(x == world_size)
    """

    algorithm: str = "auto"
    comm_sms: int | None = None
    block_size: int | None = None
    num_warps: int | None = None
    one_shot_max_bytes: int = 1 << 20
    check: bool = False
    use_gluon: bool = False
    threads_per_warp: int = 32
    gluon_path: str = "registers"

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
        if self.gluon_path not in GLUON_PATHS:
            raise ValueError(f"CollectiveConfig: gluon_path={self.gluon_path!r}; use one of {GLUON_PATHS}")
        if self.gluon_path != "registers" and not self.use_gluon:
            raise ValueError(f"CollectiveConfig: gluon_path={self.gluon_path!r} is a path of the Gluon all_gather; "
                             "set use_gluon=True with it")
        if self.one_shot_max_bytes < 0:
            raise ValueError(f"CollectiveConfig: one_shot_max_bytes={self.one_shot_max_bytes} must be >= 0")


UPSTREAM_ALL_REDUCE = {"one_shot": "one_shot", "two_shot": "two_shot"}  # upstream's other variants: our "auto"


# Triton's store cache modifiers (``tl.store(..., cache_modifier=)``), and None for a kernel's own choice
STORE_CACHE_MODIFIERS = (None, "", ".wb", ".cg", ".cs", ".wt")


@dataclass
class Config:
    """Upstream Iris's collective config (``iris.ccl.Config``), with its fields and defaults, so code written for
    Iris passes it unchanged. What it means here:

    - ``block_size_m``, ``block_size_n``, ``swizzle_size``, ``all_reduce_distribution``: the tile map of
      ``reduce_scatter`` into a full-size output (``iris.ccl.reduce_scatter_tiles``), as upstream's.
    - ``comm_sms``: the most programs a collective launches (``CollectiveConfig.comm_sms``).
    - ``all_reduce_variant``: ``"one_shot"`` and ``"two_shot"`` pick ours of that name; upstream's
      ``"atomic"``, ``"ring"`` and ``"spinlock"`` give the same sums and take our automatic choice (ours are
      deterministic: every rank adds the ranks in one order).
    - ``num_xcds`` (AMD chiplets) is 1 on NVIDIA (``iris.hip.get_num_xcc()``); ``chunk_size``,
      ``num_stages``, ``threads_per_warp``, ``waves_per_eu``, the ring and gather variants and ``cache_modifier``
      (upstream's modifier for every kernel store; None: each kernel's own) are accepted, checked, and have no
      effect: our kernels choose their own shapes and their stores' cache behaviour.
    - ``use_gluon=True`` runs the Gluon all_gather and all_to_all (``iris/ccl/gluon/``) with ``num_warps`` warps of
      32 threads; other collectives raise, as upstream's do, and so do ``threads_per_warp`` other than 32 (an AMD
      wavefront) and an ``all_gather_variant`` other than ``"persistent"`` (register stores) or ``"tma"`` (ours:
      Hopper bulk tensor stores, ``CollectiveConfig.gluon_path``; upstream's TDM variants are gfx1250 code).

    A plain ``@dataclass`` like upstream's (its ``__post_init__`` fills ``num_xcds`` and ``chunk_size``).

    Raises ``ValueError`` naming the field for a value upstream's refuses, or that has no kernel here (a
    ``cache_modifier`` Triton does not know; with ``use_gluon``, ``threads_per_warp`` other than 32 or a TDM
    ``all_gather_variant``).

    Example::

        config = iris.ccl.Config(all_reduce_variant="one_shot")  # code written for upstream Iris passes it as is
        x, out = ctx.ones(1024), ctx.zeros(1024)
        ctx.ccl.all_reduce(out, x, config=config)
        assert torch.all(out == world_size)
    """

    block_size_m: int = 32
    block_size_n: int = 64
    swizzle_size: int = 4
    comm_sms: int = 64
    num_xcds: int | None = None
    chunk_size: int | None = None
    use_gluon: bool = False
    all_gather_variant: str = "persistent"
    all_to_all_variant: str = "default"
    all_reduce_variant: str = "two_shot"
    all_reduce_distribution: int = 1
    all_reduce_num_rings: int = 1
    all_reduce_ring_slice_n: int | None = None
    reduce_scatter_variant: str = "two_shot"
    num_stages: int = 1
    num_warps: int = 4
    threads_per_warp: int | None = None
    waves_per_eu: int = 0
    cache_modifier: str | None = None

    def __post_init__(self):
        if self.num_xcds is None:
            from iris.platform import device_info as hip  # noqa: PLC0415  (it imports torch.cuda lazily too)
            self.num_xcds = hip.get_num_xcc()
        if self.chunk_size is None:
            self.chunk_size = min(self.swizzle_size * self.swizzle_size, max(1, self.comm_sms // self.num_xcds))
        self._check("iris.ccl.Config")

    def _check(self, where):
        """Every field, as it is made and again as a call reads it (a plain dataclass: fields may change between)."""
        if self.cache_modifier not in STORE_CACHE_MODIFIERS:
            raise ValueError(f"{where}: cache_modifier={self.cache_modifier!r}; use None (each kernel's own) or "
                             f"one of Triton's store modifiers {STORE_CACHE_MODIFIERS[1:]}")
        if self.use_gluon and self.threads_per_warp not in (None, 32):
            raise ValueError(f"{where}: use_gluon=True with threads_per_warp={self.threads_per_warp}; NVIDIA "
                             "warps have 32 threads (64 is an AMD wavefront): use threads_per_warp=32")
        if self.use_gluon and self.all_gather_variant not in ("persistent", "tma"):
            raise ValueError(f"{where}: use_gluon=True with all_gather_variant={self.all_gather_variant!r}; "
                             "the Gluon all_gather is the persistent one (upstream's TDM variants are gfx1250 "
                             "tensor-data-mover code): use all_gather_variant='persistent' (register stores) or "
                             "'tma' (Hopper bulk tensor stores)")
        for name in ("block_size_m", "block_size_n"):
            value = getattr(self, name)
            if type(value) is not int or value < 1 or value & (value - 1):
                raise ValueError(f"{where}: {name}={value!r} must be a positive power of two (a Triton tile)")
        for name in ("swizzle_size", "comm_sms", "num_xcds", "all_reduce_num_rings", "num_warps"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{where}: {name}={value!r} must be a positive int")
        if self.all_reduce_variant not in ("atomic", "ring", "two_shot", "one_shot", "spinlock"):
            raise ValueError(f"{where}: all_reduce_variant={self.all_reduce_variant!r}; use one of "
                             "'atomic', 'ring', 'two_shot', 'one_shot', 'spinlock'")
        if self.all_reduce_distribution not in (0, 1):
            raise ValueError(f"{where}: all_reduce_distribution={self.all_reduce_distribution}; use 0 "
                             "(striding) or 1 (block)")

    def collective(self, caller: str) -> CollectiveConfig:
        """The ``CollectiveConfig`` our kernels read for ``caller``: the all_reduce variant only steers
        all_reduce, and ``comm_sms`` only when changed from upstream's default (64, tuned for MI300X: ours picks
        by size, and 4 programs on the cpu backend, where each program runs in Python). ``caller``:
        ``"ccl.<collective>"``.

        Example::

            config = iris.ccl.Config(all_reduce_variant="one_shot", comm_sms=8)
            assert config.collective("ccl.all_reduce") == iris.ccl.CollectiveConfig(algorithm="one_shot", comm_sms=8)
            assert config.collective("ccl.all_gather").algorithm == "auto"  # the variant steers all_reduce only
        """
        self._check(f"{caller}: config (iris.ccl.Config, changed since it was made)")
        algorithm = UPSTREAM_ALL_REDUCE.get(self.all_reduce_variant, "auto") if caller == "ccl.all_reduce" else "auto"
        comm_sms = None if self.comm_sms == Config.comm_sms else min(self.comm_sms, MAX_COMM_PROGRAMS)
        if self.use_gluon:  # upstream's Gluon kernels take num_warps from here; ours too
            tma = self.all_gather_variant == "tma" and caller == "ccl.all_gather"
            return CollectiveConfig(algorithm=algorithm, comm_sms=comm_sms, use_gluon=True, num_warps=self.num_warps,
                                    gluon_path="tma" if tma else "registers")
        return CollectiveConfig(algorithm=algorithm, comm_sms=comm_sms)
