"""Configuration of the fused GEMM + communication ops: one frozen dataclass, validated on creation."""

from dataclasses import dataclass

VARIANTS = ("auto", "fused", "bulk")


def _power_of_two(value):
    return value >= 16 and value & (value - 1) == 0


@dataclass(frozen=True)
class OpsConfig:
    """Tile sizes of the shared GEMM mainloop, and the variant.

    ``variant``: ``"fused"`` moves each output tile (or operand tile) across the link inside the GEMM
    kernel, so communication overlaps compute at tile granularity; ``"bulk"`` runs the GEMM, then the
    collective (the baseline, and the fallback where fusion cannot win or the shape does not tile evenly);
    ``"auto"`` picks fused where the op has a fused kernel and the shape allows it. ``None`` block sizes pick
    by backend (128 x 128 x 64 on GPUs; 32 x 32 x 32 in the interpreter)."""

    variant: str = "auto"
    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3

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
        if not 1 <= self.num_stages <= 8:
            raise ValueError(f"OpsConfig: num_stages={self.num_stages} is outside [1, 8]")

    def blocks(self, on_cpu):
        default = 32 if on_cpu else None
        return (self.block_m or default or 128, self.block_n or default or 128, self.block_k or default or 64)
