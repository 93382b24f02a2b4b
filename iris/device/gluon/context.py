"""``IrisDeviceCtx``: the device API for ``@gluon.jit`` kernels (upstream Iris's Gluon context)::

    @gluon.jit
    def kernel(IrisDeviceCtx: gl.constexpr, context_tensor, buf, peer, BLOCK: gl.constexpr):
        ctx = IrisDeviceCtx.initialize(context_tensor)
        layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
        offs = gl.arange(0, BLOCK, layout=layout)
        ctx.store(buf + offs, offs, peer)

    kernel[(1,)](IrisDeviceCtx, shmem.get_device_context(), buf, peer, BLOCK=1024, num_warps=4)

``initialize(context_tensor, tracing=True)`` makes ``ctx.tracing.record_event_start`` / ``record_event_end`` record
the same events as the Triton context's (``iris/device/user_tracing.py``). The rank and world size are runtime values read from the context tensor (Triton's ``DeviceContext`` takes them
as constexprs). Every method is the ``iris.device`` function of the same name with the heap bases and the calling
rank filled in: one translate and one memory model for Triton and Gluon. So ``sem`` / ``scope`` mean what they
mean there (a release or acq_rel atomic first synchronises the program, ``bar.sync``, so that every warp's earlier
stores are ordered before it), ``volatile`` drops a load's cache modifier, ``hint`` keeps translated accesses
vectorised, and debug mode (``IRIS_DEBUG=1``) bounds-checks every translated address.

Beyond upstream: ``hint`` (last, keyword) on every method, as in the Triton API; scalar ``val`` / ``cmp``
operands are broadcast to the pointer block's shape and layout (raw ``gl.atomic_*`` refuses a scalar beside a
block: "expected expand_dims input to be a distributed_type"); and ``atomic_sub`` is an add of ``-val`` (Triton
has no ``atomic_sub``, in ``gl`` or ``tl``).

The compiler needs a Triton aggregate; in the interpreter (cpu backend) the same bodies live on a plain class.
"""

import os

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.device import atomics, rma
from iris.device.context import CONTEXT_HEADER
from iris.device.user_tracing import DeviceTracing

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@gluon.jit
def _like(pointer, value):
    """``value`` broadcast to ``pointer``'s block shape and layout (a scalar pointer keeps a scalar)."""
    if pointer.type.is_block():
        return gl.full(pointer.shape, 0, pointer.dtype.element_ty, pointer.type.layout) + value
    else:
        return value


class _Methods:
    """The method bodies of both forms."""

    def initialize(context_tensor, tracing: gl.constexpr = False):
        cur_rank = gl.load(context_tensor + 0).to(gl.int32)
        num_ranks = gl.load(context_tensor + 1).to(gl.int32)
        heap_bases = context_tensor + CONTEXT_HEADER
        return IrisDeviceCtx(cur_rank, num_ranks, heap_bases, DeviceTracing(tracing, heap_bases))

    def load(self, pointer, from_rank, mask=None, other=None, cache_modifier: gl.constexpr = None,
             volatile: gl.constexpr = False, hint: gl.constexpr = None):
        return rma.load(pointer, self.cur_rank, from_rank, self.heap_bases, mask, other, cache_modifier, volatile,
                        hint)

    def store(self, pointer, value, to_rank, mask=None, cache_modifier: gl.constexpr = None,
              hint: gl.constexpr = None):
        rma.store(pointer, _like(pointer, value), self.cur_rank, to_rank, self.heap_bases, mask, hint, cache_modifier)

    def get(self, from_ptr, to_ptr, from_rank, mask=None, other=None, load_cache_modifier: gl.constexpr = None,
            store_cache_modifier: gl.constexpr = None, hint: gl.constexpr = None):
        rma.get(from_ptr, to_ptr, self.cur_rank, from_rank, self.heap_bases, mask, other, load_cache_modifier,
                store_cache_modifier, hint)

    def put(self, from_ptr, to_ptr, to_rank, mask=None, other=None, load_cache_modifier: gl.constexpr = None,
            store_cache_modifier: gl.constexpr = None, hint: gl.constexpr = None):
        rma.put(from_ptr, to_ptr, self.cur_rank, to_rank, self.heap_bases, mask, other, load_cache_modifier,
                store_cache_modifier, hint)

    def copy(self, src_ptr, dst_ptr, from_rank, to_rank, mask=None, other=None,
             load_cache_modifier: gl.constexpr = None, store_cache_modifier: gl.constexpr = None,
             hint: gl.constexpr = None):
        rma.copy(src_ptr, dst_ptr, from_rank, to_rank, self.cur_rank, self.heap_bases, mask, other,
                 load_cache_modifier, store_cache_modifier, hint)

    def atomic_add(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_add(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                  scope, hint)

    def atomic_sub(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_sub(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                  scope, hint)

    def atomic_xchg(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                    hint: gl.constexpr = None):
        return atomics.atomic_xchg(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                   scope, hint)

    def atomic_xor(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_xor(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                  scope, hint)

    def atomic_and(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_and(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                  scope, hint)

    def atomic_or(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                  hint: gl.constexpr = None):
        return atomics.atomic_or(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                 scope, hint)

    def atomic_min(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_min(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                  scope, hint)

    def atomic_max(self, pointer, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_max(pointer, _like(pointer, val), self.cur_rank, to_rank, self.heap_bases, mask, sem,
                                  scope, hint)

    def atomic_cas(self, pointer, cmp, val, to_rank, sem: gl.constexpr = None, scope: gl.constexpr = None,
                   hint: gl.constexpr = None):
        return atomics.atomic_cas(pointer, _like(pointer, cmp), _like(pointer, val), self.cur_rank, to_rank,
                                  self.heap_bases, sem, scope, hint)


_METHOD_NAMES = [name for name in vars(_Methods) if not name.startswith("_")]


def _interpreted_class():
    class IrisDeviceCtx:
        def __init__(self, cur_rank, num_ranks, heap_bases, tracing):
            self.cur_rank = cur_rank
            self.num_ranks = num_ranks
            self.heap_bases = heap_bases
            self.tracing = DeviceTracing(False, heap_bases) if tracing is None else tracing

    for name in _METHOD_NAMES:
        fn = vars(_Methods)[name]
        setattr(IrisDeviceCtx, name, staticmethod(fn) if name == "initialize" else fn)
    return IrisDeviceCtx


def _compiled_class():
    from triton.language.core import _aggregate

    class IrisDeviceCtx:
        cur_rank: gl.tensor
        num_ranks: gl.tensor
        heap_bases: gl.tensor
        tracing: DeviceTracing

        @gluon.constexpr_function
        def __init__(self, cur_rank, num_ranks, heap_bases, tracing):
            self.cur_rank = cur_rank
            self.num_ranks = num_ranks
            self.heap_bases = heap_bases
            self.tracing = DeviceTracing(False, heap_bases) if tracing is None else tracing

    for name in _METHOD_NAMES:
        fn = gluon.jit(vars(_Methods)[name])
        setattr(IrisDeviceCtx, name, staticmethod(fn) if name == "initialize" else fn)
    return _aggregate(IrisDeviceCtx)


def _device_code_key():
    """A hash of the device code the methods run: the methods' source and the key of every ``iris.device`` function
    they call. Triton keys a kernel's compiled binary by its constexpr arguments' ``cache_key`` (``str`` when they
    have none), and it does not follow a class passed as a constexpr into the code it reaches, so without this key
    a kernel taking ``IrisDeviceCtx`` would be served a binary compiled from older ``iris.device`` sources."""
    import hashlib
    import inspect

    called = [getattr(rma, name) for name in ("load", "store", "get", "put", "copy")]
    called += [getattr(atomics, name) for name in _METHOD_NAMES if name.startswith("atomic_")]
    called += [_like] + [fn for fn in DeviceTracing.hash_attrs if hasattr(fn, "cache_key")]
    text = inspect.getsource(_Methods) + "".join(fn.cache_key for fn in called)
    return hashlib.sha256(text.encode()).hexdigest()


IrisDeviceCtx = _interpreted_class() if INTERPRETED else _compiled_class()
if not INTERPRETED:
    IrisDeviceCtx.cache_key = _device_code_key()
IrisDeviceCtx.__doc__ = __doc__
# Kernels take the class as a constexpr argument, which the cpu tier's launch log pickles: by this name, so that the
# sm_90 compile finds the compiled form of the class.
IrisDeviceCtx.__qualname__ = "IrisDeviceCtx"
