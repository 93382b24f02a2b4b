"""all_gather in Gluon through Hopper's bulk tensor copies (TMA): ``CollectiveConfig(use_gluon=True,
gluon_path="tma")``, or upstream's ``Config(use_gluon=True, all_gather_variant="tma")``.

The flat slot of ``n`` elements is viewed as ``[rows, COLS]`` (``COLS``: the largest power of two up to 256 that
divides ``n``, so no element is left over). Each program owns tiles ``pid, pid + programs, ...`` of ``[BLOCK_M,
COLS]`` rows: it loads a tile into registers, writes it to one of ``STAGES`` shared-memory buffers, and issues one
bulk tensor store per member (``cp.async.bulk.tensor.2d.global.shared::cta``) through a tensor map the host built over
that member's mapped heap (our slot in its ``out``). The copy engine of the SM moves the tile while the threads load
the next one; a store past the last row is clipped by the tensor map's bounds, so no tile needs a mask on the peer.

    barrier  ->  for each tile: registers -> smem[stage] -> one TMA store per member  ->  wait  ->  barrier

What orders what (PTX ISA, "asynchronous proxy" and ``cp.async.bulk.wait_group``):
- ``fence.proxy.async.shared::cta`` after the threads' ``st.shared`` and before the ``bar.sync`` that precedes the
  issue: the copy engine reads shared memory through the async proxy, which does not see generic-proxy writes
  without the fence.
- ``cp.async.bulk.wait_group.read N`` before a stage is written again: its earlier stores have finished *reading*
  it (their writes to the peers may still be in flight).
- ``cp.async.bulk.wait_group 0`` (no ``.read``) at the end, by the issuing thread: every store's writes are
  performed and visible to that thread, and ``fence.proxy.async.global`` orders those async-proxy writes before its
  generic-proxy accesses. The ``bar.sync`` that opens the closing barrier's release orders them before the
  releasing thread's ``fence.acq_rel.sys`` and ``sys``-scope flag atomics (``iris.device.sync.group_barrier``), so
  a peer that acquires our flag sees the whole slot. The ``.read`` wait alone (Triton 3.6's ``tma.store_wait``)
  would let the release overtake the writes.
- ``fence.proxy.async.global`` after the entry barrier, so that the bulk stores into a peer's ``out`` come after
  the acquire that saw the peer done with it.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from triton.experimental.gluon.language.nvidia.hopper import tma

from iris.device.group import program_row
from iris.device.sync import call_match, group_barrier, open_call
from iris.device.translate import INTERPRETED

MAX_MEMBERS = 8  # tensor maps are kernel parameters, one per member (d0..d7): the GPUs of one node
MAX_COLS = 256  # a tensor map's box is at most 256 elements along each dimension
STAGES = 3  # shared-memory buffers in flight a program: 3 x 32 KiB at the GPU block (16384 bf16)


if hasattr(gl, "thread_barrier"):  # the CTA-wide barrier's name in Triton 3.6; gl.barrier from 3.8
    @gluon.jit
    def _cta_barrier():
        gl.thread_barrier()
else:
    @gluon.jit
    def _cta_barrier():
        gl.barrier()


@gluon.jit
def _wait_writes():
    """``cp.async.bulk.wait_group 0``: this thread's bulk stores have completed their writes (Triton 3.6's
    ``tma.store_wait`` waits for their reads of shared memory only), then ``fence.proxy.async.global``: those
    async-proxy writes ordered before this thread's later generic-proxy accesses. In the interpreter every store is
    complete when it returns."""
    if not INTERPRETED:
        gl.inline_asm_elementwise("cp.async.bulk.wait_group 0; fence.proxy.async.global; mov.u32 $0, 0;", "=r", [],
                                  dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _proxy_fence():
    """``fence.proxy.async.global``: this thread's generic-proxy accesses so far (the entry barrier's acquires)
    ordered before the bulk stores it issues next, which the async proxy performs."""
    if not INTERPRETED:
        gl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)


@gluon.jit
def _all_gather_tma_kernel(inp, out, rows, sync, d0, d1, d2, d3, d4, d5, d6, d7, GROUP_SIZE: gl.constexpr,
                           BLOCK_M: gl.constexpr, COLS: gl.constexpr, VEC: gl.constexpr, LANES_N: gl.constexpr,
                           BITS: gl.constexpr, STAGES: gl.constexpr):
    # d<i>: the tensor map over member (group_index + i) % GROUP_SIZE's out slot ``group_index``, [rows, COLS];
    # out: our out, which the descriptors write on every member (its offset is matched; nothing else reads it)
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((out, heap_bases),))  # peers write out (iris/device/sync.py)
    row = program_row(flags, world_size)
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match)[1]:  # no rank still uses its out
        _proxy_fence()  # ... and the copy engine's writes into it come after that
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // LANES_N, LANES_N], [gl.num_warps(), 1], [1, 0])
        smem_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=BITS, rank=2)
        smem = gl.allocate_shared_memory(inp.dtype.element_ty, [STAGES, BLOCK_M, COLS], smem_layout)
        offs_m = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
        offs_n = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
        offs = offs_m[:, None] * COLS + offs_n[None, :]  # [BLOCK_M, COLS] int32 within a tile
        tiles = gl.cdiv(rows, BLOCK_M)
        step = 0
        for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
            row0 = tile * BLOCK_M
            mask = (offs_m < rows - row0)[:, None] & (offs_n < COLS)[None, :]
            x = gl.load(inp + row0.to(gl.int64) * COLS + offs, mask=mask)  # [BLOCK_M, COLS]
            buf = smem.index(step % STAGES)
            # the stores issued STAGES tiles ago, GROUP_SIZE of them, have read this buffer; then every thread may write
            tma.store_wait((STAGES - 1) * GROUP_SIZE)
            _cta_barrier()
            buf.store(x)
            hopper.fence_async_shared()  # our st.shared before the copy engine's reads (async proxy)
            _cta_barrier()  # every thread's part of the tile is in buf before the store is issued
            tma.async_copy_shared_to_global(d0, [row0, 0], buf)  # ourselves first, then the members after us
            if GROUP_SIZE > 1:
                tma.async_copy_shared_to_global(d1, [row0, 0], buf)
            if GROUP_SIZE > 2:
                tma.async_copy_shared_to_global(d2, [row0, 0], buf)
            if GROUP_SIZE > 3:
                tma.async_copy_shared_to_global(d3, [row0, 0], buf)
            if GROUP_SIZE > 4:
                tma.async_copy_shared_to_global(d4, [row0, 0], buf)
            if GROUP_SIZE > 5:
                tma.async_copy_shared_to_global(d5, [row0, 0], buf)
            if GROUP_SIZE > 6:
                tma.async_copy_shared_to_global(d6, [row0, 0], buf)
            if GROUP_SIZE > 7:
                tma.async_copy_shared_to_global(d7, [row0, 0], buf)
            step += 1
        _wait_writes()  # the writes, not only the reads of shared memory, before the barrier releases them
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, call=match)  # every rank's slot has landed in our out


TILE_BYTES = 32 << 10  # a tile's shared buffer at most: STAGES of them stay under the 227 KiB an H200 SM offers
SMEM_ALIGNMENT = 128  # bytes: cp.async.bulk.tensor's shared-memory operand


class _MappedSlot:
    """What a ``TensorDescriptor`` reads of its base: an address (our slot in a member's ``out``, as that member's
    heap is mapped in this process) and a dtype."""

    def __init__(self, address, dtype):
        self.address, self.dtype = address, dtype

    def data_ptr(self):
        return self.address

    def element_size(self):
        return self.dtype.itemsize


def tile_shape(n, block, element_size):
    """``(rows, BLOCK_M, COLS)``: the ``[rows, COLS]`` view of a slot of ``n`` elements and the ``[BLOCK_M, COLS]``
    tile of ``block`` elements (at most ``TILE_BYTES``) each program moves a step."""
    cols = min(MAX_COLS, n & -n)  # the largest power of two dividing n: no element left over
    tile = max(cols, min(block, TILE_BYTES // element_size))
    # a bulk tensor copy's shared-memory address must be 128-byte aligned, and the stages sit back to back: every
    # tile at least 128 bytes (all sizes are powers of two, so then a multiple of 128)
    block_m = max(tile // cols, SMEM_ALIGNMENT // (cols * element_size))
    return n // cols, min(MAX_COLS, block_m), cols


def launch(ctx, out_flat, inp_flat, n, plan, fingerprint):
    """Launch the TMA all_gather on at most ``plan``'s programs; ``n`` > 0 elements a rank."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    caller, sync, element_size = "ccl.all_gather", plan.sync, inp_flat.element_size()
    if (n * element_size) % 16 or out_flat.data_ptr() % 16:
        raise ValueError(f"{caller}: gluon_path='tma' needs every slot of out 16-byte aligned (a tensor map's base "
                         f"and row pitch are): inp has {n} elements of {element_size} bytes = {n * element_size} "
                         f"bytes and out starts at {out_flat.data_ptr()} (mod 16 = {out_flat.data_ptr() % 16}); pad "
                         f"inp to a multiple of 16 bytes or use gluon_path='registers'")
    if sync.size > MAX_MEMBERS:
        raise ValueError(f"{caller}: gluon_path='tma' takes groups of at most {MAX_MEMBERS} ranks (one tensor map "
                         f"each, the GPUs of one node), got {sync.size}; use gluon_path='registers'")
    rows, block_m, cols = tile_shape(n, plan.block, element_size)
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * element_size, rank=2)
    bases = ctx.heap.bases
    offset = out_flat.data_ptr() - bases[ctx.cur_rank] + sync.index * n * element_size  # our slot, heap-relative
    descriptors = [TensorDescriptor(_MappedSlot(bases[sync.ranks[(sync.index + i) % sync.size]] + offset,
                                                out_flat.dtype), [rows, cols], [cols, 1], [block_m, cols], layout)
                   for i in range(sync.size)]  # ourselves first, then the members after us
    descriptors += [None] * (MAX_MEMBERS - sync.size)
    vec = min(16 // element_size, cols)  # one 16-byte vector a thread, as the register path's layout
    programs = min(plan.programs, -(-rows // block_m))
    _all_gather_tma_kernel[(programs,)](inp_flat, out_flat, rows, sync.args(ctx, fingerprint), *descriptors,
                                        GROUP_SIZE=sync.size,
                                        BLOCK_M=block_m, COLS=cols, VEC=vec, LANES_N=min(32, cols // vec),
                                        BITS=8 * element_size, STAGES=STAGES, num_warps=plan.warps)
