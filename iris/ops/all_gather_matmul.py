"""all_gather_matmul: ``out = cat_r(A_r, dim=0) @ B`` on every rank, without materialising the gathered A.

Fused pull schedule: the tile of rows owned by rank q reads its A rows straight from q's heap inside the K
loop, so the gather overlaps the tensor-core work tile by tile.

    program p:  barrier(A ready) | tile (rows of rank q) -> K loop over A_q (remote) @ B -> store | ... |
                barrier(nobody still reads our A)
"""

import triton
import triton.language as tl

from iris.ccl.device import program_row
from iris.device.sync import group_barrier
from iris.ops import common
from iris.ops.gemm import descriptors_fit, mainloop, num_programs, operand, store_tile, tile_coords


@triton.jit
def _all_gather_matmul_kernel(a, b, out, M, N, K, M_local, stride_am, stride_ak, stride_bk, stride_bn, stride_om,
                              stride_on, flags, heap_bases, members, rank, group_index, world_size,
                              GROUP_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, A_VEC: tl.constexpr, TMA: tl.constexpr):
    row = program_row(flags, world_size)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # every rank's A is ready
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        # ---- the rank that owns these rows (BLOCK_M divides M_local, so a tile has one owner)
        owner_index = (pid_m * BLOCK_M) // M_local
        owner = tl.load(members + owner_index)
        a_owner = a - owner_index * M_local * stride_am  # global row r sits at local row r - owner_index * M_local
        acc = mainloop(a_owner, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, pid_m, pid_n, rank, owner,
                       heap_bases, True, BLOCK_M, BLOCK_N, BLOCK_K, A_VEC, TMA)  # [BLOCK_M, BLOCK_N] fp32
        store_tile(out, acc, pid_m, pid_n, M, N, stride_om, stride_on, BLOCK_M, BLOCK_N, TMA)
    group_barrier(row, heap_bases, members, rank, GROUP_SIZE)  # nobody still reads our A


def all_gather_matmul(ctx, out, a, b, bias=None, group=None, config=None):
    """``out`` ([M, N], anywhere) = ``cat([A_r for r in group], dim=0) @ B (+ bias)``; ``A`` [M / W, K] (on the
    heap) is this rank's row block, ``B`` [K, N] the same on every rank. Collective; stream-ordered. The fused
    pull needs block_m to divide M / W; otherwise (or with variant="bulk") A is gathered first.

        ref = torch.cat([A_r for r in group], dim=0) @ B + bias
    """
    caller = "ops.all_gather_matmul"
    config = common.resolve_config(config, caller)
    common.check_operands(caller, out, a, b)
    ctx.check_symmetric(a, caller, "A")
    sync = ctx.group_sync(group, caller)
    m_local, K = a.shape
    N = b.shape[1]
    M = sync.size * m_local
    common.expect_shape(caller, "out", out, (M, N), f"[group size {sync.size} * A rows, B columns]")
    block_m, block_n, block_k = config.blocks(ctx.get_device().type, a.dtype)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    needs = [] if m_local % block_m == 0 else [f"block_m={block_m} to divide M / W = {m_local}"]
    if not common.choose_fused(caller, config, ctx, tiles, needs):
        gathered = ctx.ops.workspaces.get("all_gather_matmul", (M, K), a.dtype)
        ctx.ccl.all_gather(gathered, a, group=group)
        common.bulk_gemm(out, gathered, b, config)
        return common.add_bias(out, bias, caller)
    tma = config.tma and descriptors_fit(b, out)
    programs = min(num_programs(ctx.get_device(), tiles), 128)
    _all_gather_matmul_kernel[(programs,)](
        a, operand(b, (block_k, block_n), tma), operand(out, (block_m, block_n), tma), M, N, K, m_local, a.stride(0),
        a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1), sync.flags, ctx.heap_bases, sync.members,
        ctx.cur_rank, sync.index, ctx.num_ranks, GROUP_SIZE=sync.size, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, GROUP_M=config.group_m, A_VEC=common.row_vector_width(a, block_k), TMA=tma,
        num_warps=config.num_warps, num_stages=config.stages(a.dtype))
    return common.add_bias(out, bias, caller)
