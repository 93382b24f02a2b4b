"""Remote memory access: load, store, get, put, copy.

Which rank is which follows upstream Iris's code: in ``load`` the calling rank is ``to_rank`` and the
peer read is ``from_rank``; in ``store``, ``put`` and ``get`` the calling rank is ``from_rank`` and the peer
is ``to_rank`` (``get`` reads the peer's ``from_ptr`` into the caller's ``to_ptr``); ``copy`` may move data
between any two ranks and takes the caller as ``cur_rank``. Pointers that get translated point into the
calling rank's heap.

These are plain (weak) accesses: they carry no ordering. To publish data to a peer, follow the stores
with a release atomic on a flag (``atomic_xchg(..., sem="release", scope="sys")``) and have the reader
acquire that flag before it loads; see ``examples/07_message_passing.py``.

Cache modifiers are passed to Triton unchanged. On NVIDIA loads accept ``".ca"`` (cache in L1 and L2),
``".cg"`` (L2 only), ``".cv"`` (do not cache, fetch again); stores accept ``".wb"``, ``".cg"``, ``".cs"``
(streaming) and ``".wt"``. ``None`` keeps the compiler's default. A ``volatile=True`` load ignores its cache
modifier: it reads memory every time whatever the modifier says, and PTX has no volatile load with a cache
operator.
"""

import triton
import triton.language as tl

from iris.device.translate import translate


@triton.jit
def _ld(ptr, mask, other, cache_modifier: tl.constexpr, volatile: tl.constexpr):
    # volatile wins: ptxas refuses ld.volatile with a cache operator ("Modifier '.volatile' cannot be combined
    # with modifier '.ca'"), and a volatile load bypasses the caches anyway
    if cache_modifier is None or volatile:
        return tl.load(ptr, mask=mask, other=other, volatile=volatile)
    else:
        return tl.load(ptr, mask=mask, other=other, cache_modifier=cache_modifier, volatile=volatile)


@triton.jit
def _st(ptr, value, mask, cache_modifier: tl.constexpr):
    if cache_modifier is None:
        tl.store(ptr, value, mask=mask)
    else:
        tl.store(ptr, value, mask=mask, cache_modifier=cache_modifier)


@triton.jit
def load(pointer, to_rank, from_rank, heap_bases, mask=None, other=None, cache_modifier: tl.constexpr = None,
         volatile: tl.constexpr = False, hint: tl.constexpr = None):
    """Read ``pointer`` from ``from_rank``'s heap into registers of the calling rank (``to_rank``). ``volatile``
    wins over ``cache_modifier`` (a volatile load is never served from a cache, so the modifier is dropped).

    Example::

        @triton.jit
        def read_peer(data, out, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(out + offs, iris.load(data + offs, rank, peer, heap_bases))  # the peer's data, here

        data, out = ctx.full((16,), float(rank)), ctx.zeros(16)
        ctx.barrier()  # every rank's data is written before a peer reads it
        peer = (rank + 1) % world_size
        read_peer[(1,)](data, out, rank, peer, ctx.get_heap_bases(), BLOCK=16)
        assert torch.all(out == peer)
    """
    remote = translate(pointer, to_rank, from_rank, heap_bases, hint, mask, "load")
    return _ld(remote, mask, other, cache_modifier, volatile)


@triton.jit
def store(pointer, value, from_rank, to_rank, heap_bases, mask=None, hint: tl.constexpr = None,
          cache_modifier: tl.constexpr = None):
    """Write ``value`` from the calling rank (``from_rank``) to ``pointer`` in ``to_rank``'s heap. In debug mode
    (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s heap stops the kernel
    (``translate``).

    Example::

        @triton.jit
        def write_to_peer(data, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            iris.store(data + offs, offs.to(tl.float32) + rank, rank, peer, heap_bases)  # into the peer's data

        data = ctx.zeros(16)
        ctx.barrier()  # every rank's data is zeroed before a peer writes it
        peer = (rank + 1) % world_size
        write_to_peer[(1,)](data, rank, peer, ctx.get_heap_bases(), BLOCK=16)
        ctx.barrier()  # the peers' stores have landed
        left = (rank - 1) % world_size  # the rank that wrote ours
        assert torch.equal(data.cpu(), torch.arange(16.0) + left)
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "store")
    _st(remote, value, mask, cache_modifier)


@triton.jit
def get(from_ptr, to_ptr, from_rank, to_rank, heap_bases, mask=None, other=None,
        load_cache_modifier: tl.constexpr = None, store_cache_modifier: tl.constexpr = None,
        hint: tl.constexpr = None):
    """Copy ``from_ptr`` in the peer ``to_rank``'s heap to ``to_ptr`` in the calling rank's (``from_rank``)
    memory: ``get(data, result, me, peer, heap_bases)``, the order upstream Iris's code and tests use. In debug mode
    (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside the peer's heap stops the kernel
    (``translate``).

    Example::

        @triton.jit
        def fetch_from_peer(data, out, n, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            iris.get(data + offs, out + offs, rank, peer, heap_bases, mask=offs < n)  # the peer's data, into out

        data, out = ctx.full((10,), float(rank)), ctx.zeros(10)
        ctx.barrier()  # every rank's data is written before a peer reads it
        peer = (rank + 1) % world_size
        fetch_from_peer[(1,)](data, out, 10, rank, peer, ctx.get_heap_bases(), BLOCK=16)
        assert torch.all(out == peer)
    """
    remote = translate(from_ptr, from_rank, to_rank, heap_bases, hint, mask, "get")
    value = _ld(remote, mask, other, load_cache_modifier, False)
    _st(to_ptr, value, mask, store_cache_modifier)


@triton.jit
def put(from_ptr, to_ptr, from_rank, to_rank, heap_bases, mask=None, other=None,
        load_cache_modifier: tl.constexpr = None, store_cache_modifier: tl.constexpr = None,
        hint: tl.constexpr = None, copy_engine_ctx=None, from_row_stride: tl.constexpr = 0,
        to_row_stride: tl.constexpr = 0, use_copy_engine: tl.constexpr = False, contiguous_copy: tl.constexpr = False,
        from_base_ptr=None, to_base_ptr=None, USE_COPY_ENGINE: tl.constexpr = False, IS_2D_COPY: tl.constexpr = False,
        stride_fm: tl.constexpr = 0, stride_tm: tl.constexpr = 0):
    """Copy ``from_ptr`` in the calling rank's (``from_rank``) memory to ``to_ptr`` in ``to_rank``'s heap.

    The copy-engine arguments after ``hint`` are upstream Iris's (``copy_engine_ctx`` from
    ``ctx.get_copy_engine_ctx()``, ``use_copy_engine``, ``contiguous_copy``, the row strides and base pointers of a
    2-D block, and the older ``USE_COPY_ENGINE`` / ``IS_2D_COPY`` / ``stride_fm`` / ``stride_tm``). On NVIDIA a
    kernel cannot drive a copy engine, so the block is copied by this program's loads and stores either way
    (``iris/device/copy_engine.py``): the pointer blocks already say where every element goes. In debug mode
    (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s heap stops the kernel
    (``translate``).

    Example::

        @triton.jit
        def push_to_peer(data, out, n, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            iris.put(data + offs, out + offs, rank, peer, heap_bases, mask=offs < n)  # our data, into the peer's out

        data, out = ctx.full((10,), float(rank)), ctx.zeros(10)
        ctx.barrier()  # every rank's out is zeroed before a peer writes it
        peer = (rank + 1) % world_size
        push_to_peer[(1,)](data, out, 10, rank, peer, ctx.get_heap_bases(), BLOCK=16)
        ctx.barrier()  # the peers' puts have landed
        assert torch.all(out == (rank - 1) % world_size)
    """
    value = _ld(from_ptr, mask, other, load_cache_modifier, False)
    remote = translate(to_ptr, from_rank, to_rank, heap_bases, hint, mask, "put")
    _st(remote, value, mask, store_cache_modifier)


@triton.jit
def copy(src_ptr, dst_ptr, from_rank, to_rank, cur_rank, heap_bases, mask=None, other=None,
         load_cache_modifier: tl.constexpr = None, store_cache_modifier: tl.constexpr = None,
         hint: tl.constexpr = None):
    """Copy ``src_ptr`` on ``from_rank`` to ``dst_ptr`` on ``to_rank``; both pointers are given in the
    calling rank's (``cur_rank``) heap, and either end may be the caller or a third rank. In debug mode
    (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside either rank's heap stops the kernel
    (``translate``).

    Example::

        @triton.jit
        def copy_between_peers(data, out, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            # both ends on the peer: its data into its out, moved by this rank
            iris.copy(data + offs, out + offs, peer, peer, rank, heap_bases)

        data, out = ctx.full((16,), float(rank)), ctx.zeros(16)
        ctx.barrier()  # every rank's data and out are initialised before a peer touches them
        peer = (rank + 1) % world_size
        copy_between_peers[(1,)](data, out, rank, peer, ctx.get_heap_bases(), BLOCK=16)
        ctx.barrier()  # the peers' copies have landed
        assert torch.all(out == rank)  # our own data, copied here by another rank
    """
    src = translate(src_ptr, cur_rank, from_rank, heap_bases, hint, mask, "copy")
    dst = translate(dst_ptr, cur_rank, to_rank, heap_bases, hint, mask, "copy")
    value = _ld(src, mask, other, load_cache_modifier, False)
    _st(dst, value, mask, store_cache_modifier)
