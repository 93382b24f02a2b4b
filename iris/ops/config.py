"""Configuration of the fused GEMM + communication ops: one frozen dataclass, validated on creation."""

from dataclasses import dataclass

import torch

VARIANTS = ("auto", "fused", "bulk")


def _power_of_two(value):
    return value >= 16 and value & (value - 1) == 0


@dataclass(frozen=True)
class OpsConfig:
    """Tile sizes of the shared GEMM mainloop, and the variant: what a caller may tune. Choices that measured one
    way on every shape are not options but constants beside the code that makes them (``gemm.descriptors_fit``,
    ``common.COMM_SMS``, ``copy_schedule.BAND_BYTES``, ``gemm.split_tail``, ``reduce_ops._walk_order``).

    ``variant``: ``"fused"`` moves each output tile (or operand tile) across the link inside the GEMM
    kernel, so communication overlaps compute at tile granularity; ``"bulk"`` runs the GEMM, then the
    collective (the baseline, and the fallback where fusion cannot win or the shape does not tile evenly);
    ``"auto"`` picks fused where it measured faster: at least one output tile per SM, and traffic worth at
    least 4% of the GEMM's time (``iris.ops.common.choose_fused``); bulk otherwise.

    ``None`` block sizes and stages pick by backend and dtype (``blocks``, ``stages``). ``group_m``: tile rows the
    grouped tile order walks down before moving right (and the rows of a copy-engine band).
    ``copy_engine`` (every fused op): store each output tile (each partial tile for a peer's row block) locally,
    and let the copy engines carry each finished band of ``group_m`` tile rows to the peers (a side stream waits
    for the band's count: ``iris/host/copy_engine/queue.py``), so no SM time goes to the link; all_gather_matmul's
    engines carry its A rows instead. matmul_reduce_scatter and matmul_all_reduce then take every peer unit first.
    matmul_all_gather needs a contiguous ``out`` (else the SMs store every tile), matmul_all_reduce one with
    contiguous rows; for both the last wave of tiles still leaves from the SMs, which have nothing else left to do
    by then. ``None`` is the measured choice (``uses_copy_engine``): on GPUs in groups of 2, except in traced calls
    and on ranks sharing a GPU.

    Raises ``ValueError`` naming the field for a value outside its range.

    Example::

        config = iris.ops.OpsConfig(variant="bulk")  # the GEMM, then the collective
        A, B = ctx.randn(64, 32), ctx.randn(32, 32)
        out = ctx.zeros(64, 32)
        ctx.ops.matmul_all_reduce(out, A.chunk(world_size, dim=1)[rank], B.chunk(world_size)[rank], config=config)
        assert torch.allclose(out, A @ B, atol=1e-2)
    """

    variant: str = "auto"
    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    group_m: int = 8
    num_warps: int = 8
    num_stages: int | None = None
    copy_engine: bool | None = None

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"OpsConfig: variant={self.variant!r}; use one of {VARIANTS}")
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value is not None and not _power_of_two(value):
                raise ValueError(f"OpsConfig: {name}={value} must be a power of two >= 16 (tl.dot needs 16)")
        if self.group_m < 1:
            raise ValueError(f"OpsConfig: group_m={self.group_m} must be >= 1")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"OpsConfig: num_warps={self.num_warps}; use 1, 2, 4, 8 or 16")
        if self.num_stages is not None and not 1 <= self.num_stages <= 8:
            raise ValueError(f"OpsConfig: num_stages={self.num_stages} is outside [1, 8]")

    def blocks(self, device_type: str, dtype: torch.dtype) -> tuple[int, int, int]:
        """(block_m, block_n, block_k): 32 cubed in the interpreter; on GPUs the tile that fills an H100/H200
        SM's shared memory at ``stages()`` deep (fp32 goes through tf32 at twice the bytes: half of N and K).

        Example::

            config = iris.ops.OpsConfig(block_n=64)  # the others by backend and dtype
            assert config.blocks("cpu", torch.float32) == (32, 64, 32)
            assert config.blocks("cuda", torch.bfloat16) == (128, 64, 64)
        """
        if device_type == "cpu":
            default = (32, 32, 32)
        else:
            default = (128, 128, 32) if dtype.itemsize == 4 else (128, 256, 64)
        return tuple(value or fallback for value, fallback in zip((self.block_m, self.block_n, self.block_k), default))

    def uses_copy_engine(self, device_type: str, group_size: int, traced: bool = False,
                         shared_gpu: bool = False) -> bool:
        """Whether a fused kernel leaves the peers' copies to the copy engines. By default on GPUs in groups of 2,
        where it measured 3-6% faster than stores from the SMs alone (docs/perf-notes.md); not in larger groups,
        where one side stream copies to every peer in turn while the SMs store to all of them at once (not yet
        measured there); not in a traced call, whose device trace records a tile's scatter only when the SMs
        do it; and not when ranks share a GPU (more ranks than GPUs: ``Iris.shares_gpu``), where a copy between
        two ranks is a copy within one GPU, which the driver runs on the SMs, not on a copy engine, so nothing is
        gained (asked for there, the fused kernel leaves an SM free for those copies: ``copy_schedule.copy_sms``).

        Example::

            config = iris.ops.OpsConfig()
            assert config.uses_copy_engine("cuda", 2) and not config.uses_copy_engine("cuda", 4)
            assert not config.uses_copy_engine("cuda", 2, shared_gpu=True)
            assert iris.ops.OpsConfig(copy_engine=True).uses_copy_engine("cpu", 4)  # asked for: always
        """
        if self.copy_engine is not None:
            return self.copy_engine
        return device_type == "cuda" and group_size == 2 and not traced and not shared_gpu

    def stages(self) -> int:
        """Pipeline depth of the K loop: 3 unless set (4 does not fit a 128 x 256 bf16 tile's shared memory).

        Example::

            assert iris.ops.OpsConfig().stages() == 3 and iris.ops.OpsConfig(num_stages=2).stages() == 2
        """
        return self.num_stages or 3


FUSED_VARIANTS = ("atomic", "ring", "one_shot", "two_shot", "spinlock")


@dataclass
class FusedConfig:
    """Upstream Iris's config of the fused GEMM + collective ops (``iris.ops.FusedConfig``), its fields and
    defaults; ``ctx.ops.*(..., config=FusedConfig(...))`` takes it in place of an ``OpsConfig``.

    What carries over (``to_ops_config``): the tile (``block_size_m/n/k``; ours must be powers of two >= 16, which
    upstream's defaults 256 x 64 x 64 are) and ``group_size_m`` (our ``group_m``). What has no meaning here and is
    accepted and ignored: ``num_sms`` (our fused kernels size their grid from the tile count and the SMs),
    ``num_xcds`` / ``chunk_size`` (AMD chiplets; NVIDIA GPUs have one L2 domain), ``cache_modifier_a/b`` and
    ``allow_tf32`` (our GEMM mainloop's choices: fp32 inputs go through tf32), ``all_reduce_variant`` /
    ``all_reduce_num_rings`` (matmul_all_reduce reduces in rank order in one schedule of ours, deterministic),
    ``ksplit``. ``validate`` raises upstream's ``ValueError`` for the same bad values.

    Example::

        config = iris.ops.FusedConfig(block_size_m=32, block_size_n=32, block_size_k=32)  # upstream's config
        A, B = ctx.randn(64, 32), ctx.randn(32, 32)
        out = ctx.zeros(64, 32)
        ctx.ops.matmul_all_gather(out, A, B.chunk(world_size, dim=1)[rank], config=config)
        assert torch.allclose(out, A @ B, atol=1e-2)
    """

    block_size_m: int = 256
    block_size_n: int = 64
    block_size_k: int = 64
    group_size_m: int = 1
    num_sms: int | None = None
    num_xcds: int = 1
    chunk_size: int = 1
    cache_modifier_a: str = ".ca"
    cache_modifier_b: str = ".ca"
    allow_tf32: bool = True
    all_reduce_variant: str = "two_shot"
    all_reduce_num_rings: int = 1
    ksplit: bool = False

    def validate(self, world_size: int | None = None) -> None:
        """Upstream's checks: positive sizes, a known all-reduce variant, and for ``ring`` a ``block_size_n``
        that ``world_size`` divides.

        Raises ``ValueError`` naming the field when one fails.

        Example::

            config = iris.ops.FusedConfig(all_reduce_variant="ring", block_size_n=64)
            config.validate(world_size=2)  # 2 divides block_size_n
            try:
                config.validate(world_size=3)
                assert False, "3 does not divide 64"
            except ValueError as e:
                assert "block_size_n (64) must be divisible by world_size (3)" in str(e)
        """
        for name in ("block_size_m", "block_size_n", "block_size_k", "group_size_m", "num_xcds", "chunk_size",
                     "all_reduce_num_rings"):
            if getattr(self, name) <= 0:
                raise ValueError(f"FusedConfig: {name} must be positive, got {getattr(self, name)}")
        if self.num_sms is not None and self.num_sms <= 0:
            raise ValueError(f"FusedConfig: num_sms must be positive, got {self.num_sms}")
        if self.all_reduce_variant not in FUSED_VARIANTS:
            raise ValueError(f"FusedConfig: all_reduce_variant must be one of {list(FUSED_VARIANTS)}, "
                             f"got {self.all_reduce_variant!r}")
        if self.all_reduce_variant == "ring" and world_size is not None and self.block_size_n % world_size:
            raise ValueError(f"FusedConfig: for the ring variant, block_size_n ({self.block_size_n}) must be "
                             f"divisible by world_size ({world_size})")

    def to_ops_config(self) -> OpsConfig:
        """The ``OpsConfig`` this asks for (validated here; an ``OpsConfig`` error names the field it came from).

        Raises ``ValueError`` for what ``validate`` refuses, and for a block size that is not a power of two >= 16.

        Example::

            config = iris.ops.FusedConfig(block_size_m=64, block_size_n=64, block_size_k=32, group_size_m=4)
            assert config.to_ops_config() == iris.ops.OpsConfig(block_m=64, block_n=64, block_k=32, group_m=4)
        """
        self.validate()
        return OpsConfig(block_m=self.block_size_m, block_n=self.block_size_n, block_k=self.block_size_k,
                         group_m=self.group_size_m)


# what a fused op's ``config`` takes: ours, or upstream's, which it translates
AnyOpsConfig = OpsConfig | FusedConfig
