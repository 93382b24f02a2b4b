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
    wins over ``cache_modifier`` (a volatile load is never served from a cache, so the modifier is dropped)."""
    remote = translate(pointer, to_rank, from_rank, heap_bases, hint, mask, "load")
    return _ld(remote, mask, other, cache_modifier, volatile)


@triton.jit
def store(pointer, value, from_rank, to_rank, heap_bases, mask=None, hint: tl.constexpr = None,
          cache_modifier: tl.constexpr = None):
    """Write ``value`` from the calling rank (``from_rank``) to ``pointer`` in ``to_rank``'s heap."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "store")
    _st(remote, value, mask, cache_modifier)


@triton.jit
def get(from_ptr, to_ptr, from_rank, to_rank, heap_bases, mask=None, other=None,
        load_cache_modifier: tl.constexpr = None, store_cache_modifier: tl.constexpr = None,
        hint: tl.constexpr = None):
    """Copy ``from_ptr`` in the peer ``to_rank``'s heap to ``to_ptr`` in the calling rank's (``from_rank``)
    memory: ``get(data, result, me, peer, heap_bases)``, the order upstream Iris's code and tests use."""
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
    (``iris/device/copy_engine.py``): the pointer blocks already say where every element goes."""
    value = _ld(from_ptr, mask, other, load_cache_modifier, False)
    remote = translate(to_ptr, from_rank, to_rank, heap_bases, hint, mask, "put")
    _st(remote, value, mask, store_cache_modifier)


@triton.jit
def copy(src_ptr, dst_ptr, from_rank, to_rank, cur_rank, heap_bases, mask=None, other=None,
         load_cache_modifier: tl.constexpr = None, store_cache_modifier: tl.constexpr = None,
         hint: tl.constexpr = None):
    """Copy ``src_ptr`` on ``from_rank`` to ``dst_ptr`` on ``to_rank``; both pointers are given in the
    calling rank's (``cur_rank``) heap, and either end may be the caller or a third rank."""
    src = translate(src_ptr, cur_rank, from_rank, heap_bases, hint, mask, "copy")
    dst = translate(dst_ptr, cur_rank, to_rank, heap_bases, hint, mask, "copy")
    value = _ld(src, mask, other, load_cache_modifier, False)
    _st(dst, value, mask, store_cache_modifier)
