"""Tile gather: one rank's tile, returned in registers for the caller to consume (a GEMM's K loop), not stored."""

import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it in every jitted module)

from iris.device.rma import load


@triton.jit
def gather(tile, src_view, source_rank, ctx):
    """``src_view``'s tile on ``source_rank`` (any rank, ours included; a value or a constexpr), masked elements 0.
    A plain load: the caller makes the source tile ready first (a barrier, or a lock it acquires)."""
    src_ptr, mask = src_view.tile_ptr(tile)
    return load(src_ptr, ctx.rank, source_rank, ctx.heap_bases, mask=mask, other=0)
