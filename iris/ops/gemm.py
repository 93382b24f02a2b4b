"""The GEMM every fused op shares: a persistent tile loop with grouped tile order and an fp32 accumulator.

    tile map:  tile t -> (pid_m, pid_n), GROUP_M row-blocks at a time, so programs running together share
               A row-blocks and B column-blocks in L2
    K loop:    acc[BLOCK_M, BLOCK_N] += A[BLOCK_M, BLOCK_K] @ B[BLOCK_K, BLOCK_N]

``mainloop`` reads A either locally or, for the pull variant of all_gather_matmul, from the rank that owns
the tile's rows (``A_RANK``), through the one ``translate``.
"""

import triton
import triton.language as tl

from iris.device.translate import translate


@triton.jit
def tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped ("swizzled") order: walk GROUP_M row-blocks down a column before moving right."""
    tiles_per_group = GROUP_M * num_pid_n
    group = tile // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % tiles_per_group) % group_rows
    pid_n = (tile % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def mainloop(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, rank, a_rank, heap_bases,
             REMOTE_A: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             A_VEC: tl.constexpr = 1):
    """acc = A[pid_m rows, :] @ B[:, pid_n cols] in fp32. With ``REMOTE_A`` the A rows are read from rank
    ``a_rank``'s heap (``a`` then points into our own heap at the same offset); ``A_VEC`` (16 when A's rows are
    16-byte aligned: ``iris.ops.common.row_vector_width``) keeps those remote loads vectorised."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak  # [BLOCK_M, BLOCK_K]
    b_ptrs = b + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn  # [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < k_left)
        if REMOTE_A:
            a_tile = tl.load(translate(a_ptrs, rank, a_rank, heap_bases, hint=(1, A_VEC), mask=a_mask, op="mainloop"),
                             mask=a_mask, other=0.0)
        else:
            a_tile = tl.load(a_ptrs, mask=a_mask, other=0.0)
        b_tile = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a_tile, b_tile, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def _matmul_kernel(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = mainloop(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, 0, 0, None,
                       False, BLOCK_M, BLOCK_N, BLOCK_K)  # [BLOCK_M, BLOCK_N] fp32
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c.dtype.element_ty), mask=mask)


def num_programs(device, tiles):
    """Persistent grid: one program per SM at most (every program resident, so in-kernel waits are safe)."""
    if device.type == "cuda":
        import torch

        return max(1, min(tiles, torch.cuda.get_device_properties(device).multi_processor_count))
    return max(1, min(tiles, 4))


def matmul(out, a, b, config):
    """``out = a @ b`` with the shared mainloop (fp32 accumulation); any device, any strides."""
    M, K = a.shape
    N = b.shape[1]
    block_m, block_n, block_k = config.blocks(a.device.type == "cpu")
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    _matmul_kernel[(num_programs(a.device, tiles),)](
        a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=config.group_m, num_warps=config.num_warps,
        num_stages=config.num_stages)
    return out
