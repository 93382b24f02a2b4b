"""The GEMM every fused op shares: a persistent tile loop with grouped tile order and an fp32 accumulator.

    tile map:  tile t -> (pid_m, pid_n), GROUP_M row-blocks at a time, so programs running together share
               A row-blocks and B column-blocks in L2
    K loop:    acc[BLOCK_M, BLOCK_N] += A[BLOCK_M, BLOCK_K] @ B[BLOCK_K, BLOCK_N]

Operands arrive either as tensor descriptors (``TMA``: the copy engine of each SM fetches whole tiles into
shared memory, out of bounds filled with zeros) or as pointers with strides. Descriptors go wherever the layouts
allow them: 16-byte aligned rows and a contiguous last dimension (``descriptors_fit``; 2-4 points of cuBLAS over
the pointer path on the large shapes); anything else takes the pointer path. Persistent tile loops are flattened
(``tl.range(..., flatten=True)``), so the compiler software-pipelines across tile boundaries: 2-3 points of cuBLAS.
``mainloop`` can also read A from the rank that owns the tile's rows (``REMOTE_A``: the pull of
examples/36_all_gather_gemm_pull.py), through the one ``translate``.

Arguments travel in groups, one kernel argument each (Triton specialises the integers inside a tuple as it does
single ones: a unit stride becomes a constant, a multiple of 16 is marked divisible):

    strides  ((stride_am, stride_ak), (stride_bk, stride_bn), (stride_cm, stride_cn))   (``strides``)
    shape    (M, N, K), or the op's local sizes
    TILE     (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M), a constexpr tuple; read by index (``TILE[0]``): Triton 3.6
             does not unpack a constexpr tuple by assignment in compiled code
"""

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from iris.device.sync import wait_until
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
def first_unit(p, programs, lo):
    """The first index at or after ``lo`` that program ``p`` of ``programs`` takes in a round-robin deal
    (``p``, ``p + programs``, ...): where a loop that continues one deal from an earlier loop starts."""
    return p + tl.cdiv(tl.maximum(lo - p, 0), programs) * programs


@triton.jit
def band_of(pid_m, pid_n, num_pid_n, GROUP_M: tl.constexpr, band_cols):
    """The copy engines' band holding tile (pid_m, pid_n): ``GROUP_M`` tile rows by ``band_cols`` tile columns,
    numbered in the grouped tile order, which finishes one band's tiles one after another
    (``iris.host.copy_engine.schedule.output_bands`` lists them on the host)."""
    return (pid_m // GROUP_M) * tl.cdiv(num_pid_n, band_cols) + pid_n // band_cols


@triton.jit
def corner(base, row, col, stride_row, stride_col):
    """``base + row * stride_row + col * stride_col`` in 64-bit arithmetic: the first element of a tile. A matrix
    can pass 2^31 elements (a 3.6 GB int8 all_gather over three ranks does), so a tile's offset is taken in 64 bits
    once per tile; the offsets inside a tile (a block of rows times a stride) stay 32-bit, per element."""
    return base + tl.cast(row, tl.int64) * stride_row + tl.cast(col, tl.int64) * stride_col


@triton.jit
def mainloop(a, b, strides, M, N, K, pid_m, pid_n, TILE: tl.constexpr, TMA: tl.constexpr = False, k_first=0,
             k_stop=-1, REMOTE_A: tl.constexpr = False, remote=None, A_VEC: tl.constexpr = 1):
    """acc = A[pid_m rows, :] @ B[:, pid_n cols] in fp32; with ``k_first`` / ``k_stop`` (in BLOCK_K steps; -1:
    to the end) only that part of the K range, for a tile shared between programs (stream-K: ``split_tail``).
    ``strides``: A's and B's, first in the tuple (a kernel's whole ``strides`` will do).

    With ``TMA`` the operands are tensor descriptors (A only when it is local) and the strides go unused.
    With ``REMOTE_A`` the A rows are read from rank ``a_rank``'s heap, ``remote`` = (rank, a_rank, heap_bases)
    (``a`` then points into our own heap at the same offset); ``A_VEC`` (16 when A's rows are 16-byte aligned:
    ``iris.ops.common.row_vector_width``) keeps those remote loads vectorised."""
    BLOCK_M: tl.constexpr = TILE[0]
    BLOCK_N: tl.constexpr = TILE[1]
    BLOCK_K: tl.constexpr = TILE[2]
    a_strides, b_strides = strides[0], strides[1]
    stride_am, stride_ak = a_strides
    stride_bk, stride_bn = b_strides
    POINTER_A: tl.constexpr = REMOTE_A or not TMA
    if k_stop < 0:
        k_stop = tl.cdiv(K, BLOCK_K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if POINTER_A:
        a_ptrs = corner(a, pid_m * BLOCK_M, k_first * BLOCK_K, stride_am, stride_ak) + \
            tl.arange(0, BLOCK_M)[:, None] * stride_am + offs_k[None, :] * stride_ak  # [BM, BK]
    if not TMA:
        b_ptrs = corner(b, k_first * BLOCK_K, pid_n * BLOCK_N, stride_bk, stride_bn) + \
            offs_k[:, None] * stride_bk + tl.arange(0, BLOCK_N)[None, :] * stride_bn  # [BK, BN]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_stop):
        k_left = K - k * BLOCK_K
        if POINTER_A:
            a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < k_left)
            if REMOTE_A:
                rank, a_rank, heap_bases = remote
                a_tile = tl.load(translate(a_ptrs, rank, a_rank, heap_bases, hint=(1, A_VEC), mask=a_mask,
                                           op="mainloop"), mask=a_mask, other=0.0)
            else:
                a_tile = tl.load(a_ptrs, mask=a_mask, other=0.0)
            a_ptrs += BLOCK_K * stride_ak
        else:
            a_tile = a.load([pid_m * BLOCK_M, k * BLOCK_K])
        if TMA:
            b_tile = b.load([k * BLOCK_K, pid_n * BLOCK_N])
        else:
            b_tile = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            b_ptrs += BLOCK_K * stride_bk
        acc = tl.dot(a_tile, b_tile, acc)
    return acc


@triton.jit
def stream_share(p, stream, tail_steps):
    """[first, stop): the K steps of a stream-K last wave (``split_tail``) that program ``p`` takes, counted
    tile after tile over the tail's tiles: ``stream`` even shares, none for programs past them."""
    first = tl.cast(tl.cast(tl.minimum(p, stream), tl.int64) * tail_steps // stream, tl.int32)
    stop = tl.cast(tl.cast(tl.minimum(p + 1, stream), tl.int64) * tail_steps // stream, tl.int32)
    return first, stop


@triton.jit
def stream_program(step, stream, tail_steps):
    """The program whose stream-K share holds tail step ``step``. Shares are at least one step long (the host
    keeps ``stream`` <= tail_steps), so the estimate below is the program or the one before it."""
    p = tl.cast(tl.cast(step, tl.int64) * stream // tail_steps, tl.int32)
    _, stop = stream_share(p, stream, tail_steps)
    return tl.where(stop <= step, p + 1, p)


@triton.jit
def leave_partial(acc, p, partials, part_flags, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A stream-K helper: program ``p``'s share ends inside a tile; leave its fp32 partial in slot ``p`` and
    raise the slot's flag for the tile's owner."""
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(partials + p * BLOCK_M * BLOCK_N + offs, acc)
    tl.debug_barrier()  # every warp's part of the partial is written before the flag is raised
    tl.atomic_xchg(part_flags + p, 1, sem="release", scope="gpu")


@triton.jit
def add_partials(acc, helpers, p, partials, part_flags, rank, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A stream-K owner (the program that holds a tile's last K step): add the partials of programs
    ``helpers`` .. p - 1, whose shares end inside this tile, lowering each flag for the next launch. Each helper
    computes its partial first thing in the last wave and never waits, so the wait is short and any order of
    resident programs completes; programs run one at a time (the interpreter) run the helpers first."""
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    for q in range(helpers, p):
        wait_until(part_flags + q, 1, rank, rank, "stream-K tile")
        acc += tl.load(partials + q * BLOCK_M * BLOCK_N + offs)
        tl.atomic_xchg(part_flags + q, 0, sem="relaxed", scope="gpu")
    return acc


def split_tail(tiles, programs, k_iters, max_split=4):
    """(full, stream) for a persistent loop of ``programs`` over ``tiles`` of ``k_iters`` K steps: when the last
    wave would leave at least half the programs idle, the first ``full`` tiles run whole and the K steps of the
    rest are shared evenly by ``stream`` programs (stream-K; at most ``max_split`` programs per tail tile, at most
    one per K step), so the last wave lasts tail * k_iters / stream steps instead of a whole tile. A fuller last
    wave runs whole: sharing its 116 tiles over 132 programs measured 1% slower, and ending it in tiles shared by
    2-6 programs each, so that less data finishes with the GEMM, 7-10% slower (docs/perf-notes.md).
    ``stream`` 0: no stream-K wave."""
    tail = tiles % programs if tiles > programs else 0
    stream = min(programs, tail * max_split, tail * k_iters)
    if tail > programs // 2 or stream <= tail:  # whole waves, a grid no larger than the tiles, single-step tiles
        return tiles, 0
    return tiles - tail, stream


@triton.jit
def store_tile(c, tile, pid_m, pid_n, M, N, c_strides, TILE: tl.constexpr, TMA: tl.constexpr):
    """c[pid_m block, pid_n block] = tile, rounded to c's dtype; a descriptor store clips at the edges."""
    BLOCK_M: tl.constexpr = TILE[0]
    BLOCK_N: tl.constexpr = TILE[1]
    stride_cm, stride_cn = c_strides
    if TMA:
        c.store([pid_m * BLOCK_M, pid_n * BLOCK_N], tile.to(c.dtype))
    else:
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        ptrs = corner(c, pid_m * BLOCK_M, pid_n * BLOCK_N, stride_cm, stride_cn) + \
            tl.arange(0, BLOCK_M)[:, None] * stride_cm + tl.arange(0, BLOCK_N)[None, :] * stride_cn
        tl.store(ptrs, tile.to(c.dtype.element_ty), mask=mask)


@triton.jit
def _matmul_kernel(a, b, c, strides, shape, TILE: tl.constexpr, TMA: tl.constexpr):
    M, N, K = shape
    num_pid_m = tl.cdiv(M, TILE[0])
    num_pid_n = tl.cdiv(N, TILE[1])
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=True):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, TILE[3])
        acc = mainloop(a, b, strides, M, N, K, pid_m, pid_n, TILE, TMA=TMA)  # [BLOCK_M, BLOCK_N] fp32
        store_tile(c, acc, pid_m, pid_n, M, N, strides[2], TILE, TMA)


def num_programs(device, tiles, spare=0, sms=None):
    """Persistent grid: one program per SM at most (every program resident, so in-kernel waits are safe), and
    ``spare`` SMs left free for work the kernel waits on that needs one (``iris.host.copy_engine.schedule.copy_sms``).
    ``sms``: the SM count to size from, ``ctx.get_agreed_cu_count()`` for a kernel whose ranks must launch the
    same grid (default: this GPU's)."""
    if device.type == "cuda":
        import torch

        sms = torch.cuda.get_device_properties(device).multi_processor_count if sms is None else sms
        return max(1, min(tiles, sms - spare))
    return max(1, min(tiles, 4))


def descriptors_fit(*tensors):
    """True when every tensor can back a TMA descriptor: 2-D, contiguous rows, 16-byte aligned start and rows."""
    return all(t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0
               and (t.stride(0) * t.element_size()) % 16 == 0 for t in tensors)


def strides(*tensors):
    """The kernels' ``strides`` argument: each 2-D tensor's (row stride, column stride), in order."""
    return tuple((t.stride(0), t.stride(1)) for t in tensors)


def operand(tensor, block_shape, tma):
    """``tensor`` as a kernel argument: a tensor descriptor with ``block_shape`` tiles, or itself."""
    return TensorDescriptor.from_tensor(tensor, list(block_shape)) if tma else tensor


def operand_maker(block_shape, tma):
    """``operand(t, block_shape, tma)`` for a remembered launch's calls, whose key fixes every tensor's shape, dtype
    and strides: the last descriptor again while the tensor starts where the last one did (the descriptor holds that
    tensor, so its memory cannot have gone to another meanwhile), a new one otherwise (~2 us)."""
    if not tma:
        return lambda tensor: tensor
    last = [None, None]  # address, descriptor

    def make(tensor):
        address = tensor.data_ptr()
        if address != last[0]:
            last[0], last[1] = address, TensorDescriptor.from_tensor(tensor, list(block_shape))
        return last[1]
    return make


def leading_operands(a_operand, b_operand):
    """A remembered launch's leading arguments from the call's (out, A, B): A's and B's operands (``operand_maker``),
    then out."""
    return lambda out, a, b: (a_operand(a), b_operand(b), out)


def matmul(out, a, b, config):
    """``out = a @ b`` with the shared mainloop (fp32 accumulation); any device, any strides (TMA where the
    layouts allow)."""
    M, K = a.shape
    N = b.shape[1]
    block_m, block_n, block_k = config.blocks(a.device.type, a.dtype)
    tma = descriptors_fit(a, b, out)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    _matmul_kernel[(num_programs(a.device, tiles),)](
        operand(a, (block_m, block_k), tma), operand(b, (block_k, block_n), tma), operand(out, (block_m, block_n), tma),
        strides(a, b, out), (M, N, K), TILE=(block_m, block_n, block_k, config.group_m), TMA=tma,
        num_warps=config.num_warps, num_stages=config.stages())
    return out
