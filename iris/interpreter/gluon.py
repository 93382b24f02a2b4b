"""Gluon in Triton's interpreter: what lets the cpu backend run ``@gluon.jit`` kernels.

Triton 3.6 (and 3.7, 3.8) interprets only ``@triton.jit``: ``gluon.jit`` always builds a compiler-bound
``GluonJITFunction``, whose launch asks for a GPU driver. ``install()`` (called by the cpu backend before any
user module imports Gluon) gives Gluon's language a meaning in the interpreter:

- ``gluon.jit`` returns an interpreted function (one that also binds as a method, and says ``is_gluon()``),
  ``gluon.constexpr_function`` runs its function as plain Python, and Gluon's standard library (``gl.sum``,
  ``gl.zeros``, ...) is rewrapped the same way;
- Gluon's builtins get an interpreter semantic: the memory and arithmetic builtins are Triton's own, and
  ``arange``, ``full``, ``convert_layout``, ``set_auto_layout``, ``num_warps``, ``thread_barrier`` take their
  layout argument and **check it as the NVIDIA compiler does** (its messages, word for word): a distributed
  layout must have 32 threads per warp (``ttg.threads-per-warp`` is ``CUDAOptions.warp_size``, 32) and as many
  warps per CTA as the launch's ``num_warps``, and its rank must be the tensor's. A 64-lane layout written for
  AMD fails here as it fails on an H200. Once checked, a layout has no further meaning in the interpreter: a
  program runs as one Python thread over whole blocks, so how elements are spread over threads cannot change a
  result (only its speed);
- a parameter annotated ``gl.constexpr`` is a constexpr.

- shared memory and Hopper's bulk tensor stores (``hopper.tma.async_copy_shared_to_global`` over a host-built
  ``TensorDescriptor``) are interpreted at the end of this module (its banner, "shared memory and TMA stores").

What is not interpreted: mbarriers, TMA loads, ``warp_specialize`` and MMA layouts raise ``NotImplementedError``
naming the construct; kernels that use them are compiled for sm_90 on the cpu tier instead
(``tests/compile_launches.py``).
"""

import functools
import inspect
import math
import threading

import numpy as np

_launch = threading.local()  # num_warps of the kernel launch the interpreter is running on this thread

WARP_SIZE = 32  # CUDAOptions.warp_size: Gluon's module attribute ttg.threads-per-warp on NVIDIA


def _num_warps():
    return getattr(_launch, "num_warps", 4)


def check_layout(layout, shape, what):
    """Raise as the NVIDIA compiler does when ``layout`` cannot hold a tensor of ``shape`` in this launch."""
    import triton.experimental.gluon.language as gl

    if layout is None or isinstance(layout, gl.AutoLayout):
        return
    if isinstance(layout, gl.SliceLayout):
        check_layout(layout.parent, list(shape[:layout.dim]) + [1] + list(shape[layout.dim:]), what)
        return
    if not isinstance(layout, gl.BlockedLayout):
        raise NotImplementedError(f"{what}: the cpu backend interprets BlockedLayout, SliceLayout and AutoLayout "
                                  f"only, not {type(layout).__name__}; compile this kernel for sm_90 instead")
    text = (f"#ttg.blocked<{{sizePerThread = {list(layout.size_per_thread)}, threadsPerWarp = "
            f"{list(layout.threads_per_warp)}, warpsPerCTA = {list(layout.warps_per_cta)}, order = "
            f"{list(layout.order)}}}>")
    threads, warps = math.prod(layout.threads_per_warp), math.prod(layout.warps_per_cta)
    if threads != WARP_SIZE:
        raise ValueError(f"{what}: Result has an invalid layout: {text}. Layout has {threads} threads per warp, "
                         f"but the module specifies {WARP_SIZE} threads per warp (NVIDIA warps have 32 lanes: "
                         f"64 is an AMD wavefront)")
    if warps != _num_warps():
        raise ValueError(f"{what}: Result has an invalid layout: {text}. Layout has {warps} warps per CTA, but the "
                         f"context requires {_num_warps()} warps per CTA")
    if len(layout.size_per_thread) != len(shape):
        raise ValueError(f"{what}: layout {text} has rank {len(layout.size_per_thread)}, the tensor {list(shape)} "
                         f"rank {len(shape)}")


def _semantic_class():
    from triton.language import core as tl_core
    from triton.language.semantic import TritonSemantic

    class GluonInterpreterSemantic(TritonSemantic):
        """Triton's interpreter semantic with Gluon's layout-taking entry points."""

        def arange(self, start, end, layout=None, *, ret_ty=None):
            check_layout(layout, [end - start], "gl.arange")
            return super().arange(start, end)

        def full(self, shape, value, dtype, layout=None):
            check_layout(layout, shape, "gl.full")
            return super().full(shape, value, dtype)

        def convert_layout(self, value, layout, assert_trivial=False):
            check_layout(layout, value.shape, "gl.convert_layout")
            return value

        def set_auto_layout(self, value, layout):
            check_layout(layout, value.shape, "gl.set_auto_layout")
            return value

        def num_warps(self, generator=None):
            return tl_core.constexpr(_num_warps())

        def num_ctas(self):
            return tl_core.constexpr(1)

        def debug_barrier(self):
            # one Python thread runs the whole program: every "thread" has already arrived
            return None

        def allocate_shared(self, element_ty, shape, layout, value=None):
            return allocate_shared(element_ty, shape, layout, value)

        def _unsupported(self, *args, **kwargs):
            raise NotImplementedError("the cpu backend does not interpret Gluon mbarriers, TMA loads or "
                                      "warp_specialize; compile the kernel for sm_90 (tests/compile_launches.py)")

        warp_specialize = _unsupported

    return GluonInterpreterSemantic


def _plain_range(start, end=None, step=None, **kwargs):
    """``gl.static_range`` / ``gl.range`` as the interpreter runs ``tl``'s: a Python range (the pipelining
    keywords only steer the compiler)."""
    start, end = (0, start) if end is None else (start, end)
    value = lambda v: v.value if hasattr(v, "value") else v
    return range(value(start), value(end), value(step or 1))


class _SeesTriton:
    """A stand-in function whose globals see triton.language (what the interpreter's _patch_lang looks for)."""
    import triton.language as tl
    __globals__ = {"tl": tl}


@functools.cache
def _semantic():
    """The one interpreter semantic Gluon's builtins run on (built once, on the first launch)."""
    from triton.runtime import interpreter

    return _semantic_class()(interpreter.interpreter_builder)


def patch_gl_builtins(scope):
    """Gluon's builtins (``gl.arange``, ``gl.load``, ...) are bound to a compiler semantic; run them on the
    interpreter's, also where Gluon's standard library reaches them (``gl.zeros`` calls ``_core.full``)."""
    import triton.experimental.gluon.language as gl
    import triton.experimental.gluon.language._core as gl_core
    import triton.language as tl

    semantic = _semantic()
    for module in (gl, gl_core):
        for name, member in inspect.getmembers(module):
            if tl.core.is_builtin(member):
                scope.set_attr(module, name, lambda *a, _m=member, **k: _m(
                    *a, **{key: v for key, v in k.items() if key not in ("_semantic", "_generator")},
                    _semantic=semantic))


def patch_gl_ranges(scope):
    """``gl.range`` / ``gl.static_range`` are compiler loop markers; the interpreter runs them as Python ranges."""
    import triton.experimental.gluon.language as gl

    for name in ("range", "static_range"):
        scope.set_attr(gl, name, _plain_range)


def patch_block_layout(scope):
    """Triton's ``block_type`` has no ``layout``; give it one (None) for kernels that build matching operands
    (``gl.full(p.shape, v, dt, p.type.layout)``)."""
    import triton.language as tl

    scope.set_attr(tl.core.block_type, "layout", property(lambda self: None))


def patch_gl(scope):
    """Everything ``gl`` means inside an interpreted launch, set in ``scope`` (restored when the launch ends)."""
    patch_gl_builtins(scope)
    patch_gl_ranges(scope)
    patch_block_layout(scope)
    install_shared(scope)


@functools.cache
def interpreted_function_class():
    """The class of an interpreted ``@gluon.jit`` function: Triton's ``InterpretedFunction`` that patches ``gl``
    for as long as it runs, says ``is_gluon()``, and binds as a method (Gluon kernels may be class members)."""
    from triton.runtime import interpreter

    class GluonInterpretedFunction(interpreter.InterpretedFunction):
        """A ``@gluon.jit`` function run by the interpreter; ``gl`` is patched for as long as it runs."""

        def is_gluon(self):
            return True

        def run(self, *args, grid, warmup, **kwargs):
            previous = getattr(_launch, "num_warps", None)
            _launch.num_warps = kwargs.get("num_warps") or 4
            scope = interpreter._LangPatchScope()
            patch_gl(scope)
            try:
                return super().run(*args, grid=grid, warmup=warmup, **kwargs)
            finally:
                scope.restore()
                _launch.num_warps = previous

        def __call__(self, *args, **kwargs):
            # a device function: called inside a running kernel, whose launch patched gl already
            scope = interpreter._LangPatchScope()
            patch_gl(scope)
            try:
                return super().__call__(*args, **kwargs)
            finally:
                scope.restore()

        def __get__(self, obj, objtype=None):
            if obj is None:
                return self
            return lambda *args, **kwargs: self(obj, *args, **kwargs)

    return GluonInterpretedFunction


def jit(fn=None, **kwargs):
    """``gluon.jit`` under the interpreter: an interpreted function (the compile options only steer a compiler)."""
    if fn is None:
        return lambda f: interpreted_function_class()(f)
    return interpreted_function_class()(fn)


def mend_gluon_jit():
    """``gluon.jit`` always builds a compiler-bound ``GluonJITFunction`` whose launch asks for a GPU driver; make it
    (and Gluon's runtime ``jit``) build interpreted functions, and run ``gluon.constexpr_function`` as plain
    Python."""
    import triton.experimental.gluon as gluon
    import triton.experimental.gluon._runtime as runtime

    gluon.jit = jit
    gluon.constexpr_function = lambda fn: fn
    runtime.jit = jit


def mend_gluon_standard_library():
    """Gluon's standard library (``gl.sum``, ``gl.zeros``, ...) was decorated with the compiler-bound ``jit`` when
    Gluon was imported; rewrap each of its functions as an interpreted one."""
    import triton.experimental.gluon.language as gl
    import triton.experimental.gluon.language._standard as gl_standard
    from triton.runtime.jit import JITFunction

    for module in (gl, gl_standard):
        for name, member in list(vars(module).items()):
            if isinstance(member, JITFunction):
                setattr(module, name, interpreted_function_class()(member.fn))


def mend_constexpr_annotations():
    """The interpreter marks a parameter constexpr only when annotated ``tl.constexpr``; ``gl.constexpr`` (a string
    in the rewritten source) marks one too."""
    from triton.runtime import interpreter

    init = interpreter.GridExecutor.__init__

    def grid_init(self, fn, arg_names, *args, **kwargs):
        init(self, fn, arg_names, *args, **kwargs)
        for name, ty in fn.__annotations__.items():
            if isinstance(ty, str) and ty.split(".")[-1] == "constexpr" and name not in self.constexprs:
                self.constexprs.append(name)

    interpreter.GridExecutor.__init__ = grid_init


def mend_tensor_methods():
    """The interpreter patches ``tl.tensor``'s methods only for functions whose globals see ``triton.language``,
    which a Gluon module need not import (it uses ``gl``'s tensor, the same class); patch them for those too."""
    import triton.language as tl
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang

    def patch_lang_gluon_too(fn):
        if any(inspect.ismodule(v) and v in (tl, tl.core) for v in fn.__globals__.values()):
            return patch_lang(fn)
        return patch_lang(_SeesTriton)

    interpreter._patch_lang = patch_lang_gluon_too


def mend_kernels_decorated_before():
    """Kernels decorated before iris was imported (a module that imports triton first, under
    ``TRITON_INTERPRET=1``) are ``GluonJITFunction``s: launching or calling one runs its interpreted twin."""
    import triton.experimental.gluon._runtime as runtime

    def twin(fn):
        if "_iris_twin" not in fn.__dict__:
            fn._iris_twin = interpreted_function_class()(fn.fn)
        return fn._iris_twin

    runtime.GluonJITFunction.run = lambda self, *args, grid, warmup, **kwargs: twin(self).run(
        *args, grid=grid, warmup=warmup, **kwargs)
    runtime.GluonJITFunction.__call__ = lambda self, *args, **kwargs: twin(self)(*args, **kwargs)


def install():
    """Teach the interpreter Gluon (idempotent). Call only when ``TRITON_INTERPRET=1``."""
    import triton.experimental.gluon as gluon

    if getattr(gluon, "_iris_interpreted", False):
        return
    mend_constexpr_annotations()
    mend_tensor_methods()
    mend_gluon_jit()
    mend_gluon_standard_library()
    mend_kernels_decorated_before()
    gluon._iris_interpreted = True


# ------------------------------------------------------------------ shared memory and TMA stores
# Gluon's shared memory and Hopper bulk tensor stores (TMA) in Triton's interpreter, for the cpu backend.
#
# A program runs as one Python thread over whole blocks (``iris/interpreter/gluon.py``), so shared memory is a
# numpy buffer private to the program, and the asynchronous parts of the hardware are synchronous here:
#
# - ``gl.allocate_shared_memory`` gives a buffer filled with a poison byte (0xA5), so that a tile read before it was
#   written shows; ``.index(i)`` is a view along dim 0, ``.store(x)`` / ``.load(layout)`` copy in and out (the layout
#   checked as the compiler checks it);
# - ``hopper.tma.async_copy_shared_to_global(desc, coord, smem)`` writes the box at ``coord`` of the host-built
#   tensor map ``desc`` (Gluon's ``TensorDescriptor``) straight to memory, clipped to the map's shape as TMA clips it;
#   the box must be the buffer's shape and the element size the map's;
# - ``hopper.fence_async_shared``, ``hopper.tma.store_wait`` and the full ``cp.async.bulk.wait_group`` have nothing to
#   wait for: each store is complete when the call returns.
#
# Kernels reach these through their modules (``hopper.fence_async_shared()``, ``tma.async_copy_shared_to_global``):
# ``patch_gl`` patches the module attributes for the length of a launch, as the interpreter patches ``tl``'s.
# mbarriers, TMA loads and ``warp_specialize`` are not interpreted.

POISON_BYTE = 0xA5


def _value(x):
    """An int from a constexpr, an interpreter scalar tensor or an int."""
    x = getattr(x, "value", x)
    handle = getattr(x, "handle", None)
    return int(handle.data.item()) if handle is not None else int(x)


class SharedMemory:
    """A Gluon ``shared_memory_descriptor`` in the interpreter: ``element_ty`` values in a numpy array of the
    interpreter's storage type (bf16 as uint16, as its loads and stores hold them)."""

    def __init__(self, element_ty, data, layout):
        self.element_ty, self.data, self.layout = element_ty, data, layout

    @property
    def shape(self):
        return list(self.data.shape)

    @property
    def dtype(self):
        return self.element_ty

    def index(self, index):
        return SharedMemory(self.element_ty, self.data[_value(index)], self.layout)

    def store(self, value):
        self.data[...] = np.broadcast_to(value.handle.data, self.data.shape)

    def load(self, layout):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle


        check_layout(layout, self.shape, "shared_memory_descriptor.load")
        ty = tl.block_type(self.element_ty, self.shape)
        return tl.tensor(TensorHandle(self.data.copy(), self.element_ty), ty)


def allocate_shared(element_ty, shape, layout, value=None):
    """``gl.allocate_shared_memory`` in the interpreter."""
    from triton.runtime.interpreter import _get_np_dtype

    np_dtype = _get_np_dtype(element_ty)
    shape = [_value(s) for s in shape]
    data = np.full(shape + [np_dtype.itemsize], POISON_BYTE, dtype=np.uint8).view(np_dtype).reshape(shape)
    smem = SharedMemory(element_ty, data, layout)
    if value is not None:
        smem.store(value)
    return smem


def tma_store(desc, coord, src, **_):
    """``tma.async_copy_shared_to_global``: the box of ``desc`` at ``coord`` <- ``src``, clipped to the map."""
    from triton._C.libtriton import interpreter as native

    coord = [_value(c) for c in coord]
    if list(desc.block_shape) != src.shape:
        raise ValueError(f"tma.async_copy_shared_to_global: the tensor map's box {list(desc.block_shape)} is not the "
                         f"shared buffer's shape {src.shape}; build the descriptor with block_shape={src.shape}")
    element_size = desc.base.element_size() if hasattr(desc.base, "element_size") else desc.base.dtype.itemsize
    if element_size != src.data.itemsize:
        raise ValueError(f"tma.async_copy_shared_to_global: the tensor map holds {element_size}-byte elements, the "
                         f"shared buffer {src.data.itemsize}-byte ones; use one dtype for both")
    index = np.indices(src.data.shape)  # [rank, *box]
    inside = np.ones(src.data.shape, dtype=bool)
    offset = np.zeros(src.data.shape, dtype=np.int64)
    for d, (start, extent, stride) in enumerate(zip(coord, desc.shape, desc.strides)):
        at = index[d] + start
        inside &= (at >= 0) & (at < extent)
        offset += at * int(stride)
    addresses = (np.int64(desc.base.data_ptr()) + offset * element_size).astype(np.uint64)
    native.store(addresses, np.ascontiguousarray(src.data), inside)


def install_shared(scope):
    """Patch the Hopper modules' bulk-copy entry points in ``scope`` (an interpreter ``_LangPatchScope``)."""
    from triton.experimental.gluon.language.nvidia import hopper
    from triton.experimental.gluon.language.nvidia.hopper import tma

    nothing = lambda *args, **kwargs: None
    scope.set_attr(hopper, "fence_async_shared", nothing)
    scope.set_attr(tma, "store_wait", nothing)
    scope.set_attr(tma, "async_copy_shared_to_global", tma_store)
