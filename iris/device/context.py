"""``DeviceContext``: the device API as methods, with the calling rank and heap table bound once::

    @triton.jit
    def kernel(context, buf, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr):
        ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
        offs = tl.arange(0, 64)
        x = ctx.load(buf + offs, from_rank=(RANK + 1) % WORLD_SIZE)

``context`` is ``Iris.get_device_context()``: an int64 tensor laid out as upstream Iris's, ``[rank, world_size,
heap_base_0, ..., heap_base_{W-1}, trace_enabled, max_events, event counter, operation counter, 13 trace buffer
addresses]`` (the tracing words zero until ``ctx.tracing.enable``), then one word of ours, the bytes each base
addresses, which debug mode reads. ``initialize(..., tracing=True)`` makes ``ctx.tracing`` record
(``iris/device/user_tracing.py``).
Each method is the free function of the same name with ``heap_bases`` and the calling rank filled in,
so the memory-ordering contracts are those of ``iris.device.rma`` and ``iris.device.atomics``.

The compiler needs a Triton aggregate; the interpreter (CPU backend) loses an aggregate's jitted methods,
so there the same methods live on a plain class. Both are built from the one body below.
"""

import os

import triton
import triton.language as tl

from iris.device import atomics, rma
from iris.device.user_tracing import DeviceTracing

# Length of the header in the context tensor, before the heap bases: [rank, world_size].
CONTEXT_HEADER = tl.constexpr(2)


class _Methods:
    """The method bodies shared by both forms; kept free of anything the compiler cannot parse."""

    def initialize(context, rank: tl.constexpr, world_size: tl.constexpr, tracing: tl.constexpr = False):
        heap_bases = context + CONTEXT_HEADER
        return DeviceContext(rank, world_size, heap_bases, DeviceTracing(tracing, heap_bases))

    def load(self, pointer, from_rank, mask=None, other=None, cache_modifier: tl.constexpr = None,
             volatile: tl.constexpr = False, hint: tl.constexpr = None):
        return rma.load(pointer, self.rank, from_rank, self.heap_bases, mask, other, cache_modifier, volatile, hint)

    def store(self, pointer, value, to_rank, mask=None, hint: tl.constexpr = None, cache_modifier: tl.constexpr = None):
        rma.store(pointer, value, self.rank, to_rank, self.heap_bases, mask, hint, cache_modifier)

    def get(self, from_ptr, to_ptr, from_rank, mask=None, other=None, load_cache_modifier: tl.constexpr = None,
            store_cache_modifier: tl.constexpr = None, hint: tl.constexpr = None):
        rma.get(from_ptr, to_ptr, self.rank, from_rank, self.heap_bases, mask, other, load_cache_modifier,
                store_cache_modifier, hint)

    def put(self, from_ptr, to_ptr, to_rank, mask=None, other=None, load_cache_modifier: tl.constexpr = None,
            store_cache_modifier: tl.constexpr = None, hint: tl.constexpr = None):
        rma.put(from_ptr, to_ptr, self.rank, to_rank, self.heap_bases, mask, other, load_cache_modifier,
                store_cache_modifier, hint)

    def copy(self, src_ptr, dst_ptr, from_rank, to_rank,
             mask=None, other=None, load_cache_modifier: tl.constexpr = None,
             store_cache_modifier: tl.constexpr = None, hint: tl.constexpr = None):
        rma.copy(src_ptr, dst_ptr, from_rank, to_rank, self.rank, self.heap_bases, mask, other,
                 load_cache_modifier, store_cache_modifier, hint)

    def atomic_add(self, pointer, val, to_rank,
                   mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_add(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_sub(self, pointer, val, to_rank,
                   mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_sub(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_xchg(self, pointer, val, to_rank,
                    mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_xchg(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_and(self, pointer, val, to_rank,
                   mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_and(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_or(self, pointer, val, to_rank,
                  mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_or(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_xor(self, pointer, val, to_rank,
                   mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_xor(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_min(self, pointer, val, to_rank,
                   mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_min(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_max(self, pointer, val, to_rank,
                   mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_max(pointer, val, self.rank, to_rank, self.heap_bases, mask, sem, scope, hint)

    def atomic_cas(self, pointer, cmp, val, to_rank,
                   sem: tl.constexpr = None, scope: tl.constexpr = None, hint: tl.constexpr = None):
        return atomics.atomic_cas(pointer, cmp, val, self.rank, to_rank, self.heap_bases, sem, scope, hint)


_METHOD_NAMES = [name for name in vars(_Methods) if not name.startswith("_")]


def _interpreted_class():
    class DeviceContext:
        def __init__(self, rank, world_size, heap_bases, tracing=None):
            self.rank = tl.constexpr(rank)
            self.world_size = tl.constexpr(world_size)
            self.heap_bases = heap_bases
            self.tracing = DeviceTracing(False, heap_bases) if tracing is None else tracing

    for name in _METHOD_NAMES:
        fn = vars(_Methods)[name]
        setattr(DeviceContext, name, staticmethod(fn) if name == "initialize" else fn)
    return DeviceContext


def _compiled_class():
    from triton.language.core import _aggregate

    class DeviceContext:
        rank: tl.constexpr
        world_size: tl.constexpr
        heap_bases: tl.tensor
        tracing: DeviceTracing

        @triton.constexpr_function
        def __init__(self, rank, world_size, heap_bases, tracing=None):
            self.rank = tl.constexpr(rank)
            self.world_size = tl.constexpr(world_size)
            self.heap_bases = heap_bases
            self.tracing = DeviceTracing(False, heap_bases) if tracing is None else tracing

    for name in _METHOD_NAMES:
        fn = triton.jit(vars(_Methods)[name])
        setattr(DeviceContext, name, staticmethod(fn) if name == "initialize" else fn)
    return _aggregate(DeviceContext)


DeviceContext = _interpreted_class() if os.environ.get("TRITON_INTERPRET") == "1" else _compiled_class()
DeviceContext.__doc__ = __doc__
