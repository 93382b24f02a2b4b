"""Triton's interpreter, mended: the cpu backend runs kernels in it (``TRITON_INTERPRET=1``, set by
``iris/platform/backend.py`` before Triton is imported), and ``install`` makes it run what GPUs run.

``install`` is called once by the package's face, ``iris/__init__.py``, on the cpu backend, before any module
decorates a kernel: it mends the interpreter (``fix_interpreter``), puts Gluon in it (``iris/interpreter/gluon.py``),
records launches for the sm_90 compile check when ``IRIS_LAUNCH_LOG`` names a file (``launch_log.py``), names polls
that nothing ends (``spins.py``), and in debug mode makes device asserts fire.
"""

import os

from iris.interpreter.conversions import bf16_to_fp32 as _bf16_to_fp32
from iris.interpreter.conversions import fp32_to_bf16 as _fp32_to_bf16


def install(debug=False):
    """Everything the cpu backend changes in Triton and Gluon; once per process, before kernels are decorated."""
    fix_interpreter()
    from iris.interpreter import spins
    from iris.interpreter.gluon import install as interpret_gluon
    from iris.platform.private import triton_interpreter

    spins.install(triton_interpreter())

    interpret_gluon()
    if os.environ.get("IRIS_LAUNCH_LOG"):
        from iris.interpreter.launch_log import install as log_launches

        log_launches(os.environ["IRIS_LAUNCH_LOG"])
    if debug:
        patch_interpreter_asserts()


def fix_interpreter():
    """Bugs and gaps of Triton 3.6's interpreter that the cpu backend runs into, mended in place, and one habit:

    - it turns a scalar into a Python int with ``int(array)`` on a one-element 1-D numpy array, which numpy
      2.4 refuses ("only 0-dimensional arrays can be converted"), so any loop with a runtime bound
      (``for b in range(pid, n_blocks, n_programs)``) fails: index the element instead;
    - it keeps bfloat16 as raw uint16 bits and ``tl.dot`` multiplies those integers (a 16 x 16 bf16 dot is
      off by a factor of 1e9): widen the bits to float32 first, which holds every bf16 value exactly;
    - its atomics refuse what GPUs run ("Unsupported data type"): ``atomic_xchg`` on fp32/fp64 (exchange the
      same bits as int32/int64) and ``atomic_add`` on bf16 (a compare-and-swap loop per lane on the 16-bit
      word, the sum rounded to nearest even as the GPU's ``atom.add.noftz.bf16`` does); and it has no bf16
      constants and does bf16 arithmetic on the raw bits (computed in float32 and rounded back instead);
    - its conversions are not the GPU's: ``.to(tl.bfloat16)`` truncates where the GPU rounds to nearest even,
      integers and float64 reach bfloat16 as raw bits, float -> integer wraps where the GPU clamps; every ``.to``
      and ``tl.cast`` converts as the GPU's ``cvt`` instead (``_fix_interpreter_conversions``, ``conversions.py``);
    - ``libdevice``'s functions are stubs that return None there: its float functions get numpy's meaning, the
      rest raise naming themselves (``_fix_interpreter_libdevice``);
    - it refuses inline assembly: a fence (``fence.acq_rel.sys``, ``iris.device.sync.fence_release_sys``) runs
      as nothing (every access there is a plain CPU access, seen by the other processes in program order), and
      the race detector counts it (``_fix_interpreter_fences``);
    - it wraps whatever a kernel raises in ``InterpreterError(repr(e))``, once per nested device function:
      let ``iris.PeerError`` (raised into a spinning kernel by the watchdog) out as itself, so that
      ``except iris.PeerError`` works as on GPUs;
    - it parses a device function from the *last* line of its source that starts with ``def ``, so a docstring
      whose example defines a kernel (the device API's do) is read as the function: from the first, as the
      compiler does (``_fix_interpreter_definition_line``)."""
    import numpy as np
    import triton.language as tl
    from iris.platform.private import triton_interpreter
    interpreter = triton_interpreter()

    run_grid = interpreter.GridExecutor.__call__
    if not getattr(run_grid, "_iris_fixed", False):
        def run_grid_unwrapping_peer_errors(self, *args, **kwargs):
            from iris.errors import PeerError

            try:
                return run_grid(self, *args, **kwargs)
            except interpreter.InterpreterError as e:
                cause = e
                while isinstance(cause, interpreter.InterpreterError):
                    cause = cause.__cause__
                if not isinstance(cause, PeerError):
                    raise
            # raised here, outside the handler, so that its context is not the wrapper (which chains back to it)
            raise cause from None

        run_grid_unwrapping_peer_errors._iris_fixed = True
        interpreter.GridExecutor.__call__ = run_grid_unwrapping_peer_errors

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is not None and not getattr(original, "_iris_fixed", False):
        def patched(tensor, scope):
            original(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

        patched._iris_fixed = True
        interpreter._patch_lang_tensor = patched

    _fix_interpreter_definition_line(interpreter)
    builder = interpreter.InterpreterBuilder
    _fix_interpreter_atomics(builder, interpreter)
    _fix_interpreter_fences(builder, interpreter)
    _fix_interpreter_conversions(builder, interpreter)
    _fix_interpreter_libdevice(interpreter)
    create_dot = builder.create_dot
    if getattr(create_dot, "_iris_fixed", False):
        return

    def widen(handle):
        if handle.dtype.scalar == tl.bfloat16:
            bits = handle.data.astype(np.uint32) << 16
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return handle

    def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return create_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    dot._iris_fixed = True
    builder.create_dot = dot


def _fix_interpreter_definition_line(interpreter):
    """``FunctionRewriter._find_def``: the line number (from 1) of the first source line that starts with ``def ``
    (after the decorators), where Triton 3.6's interpreter takes the last one."""
    rewriter = interpreter.FunctionRewriter
    if getattr(rewriter._find_def, "_iris_fixed", False):
        return

    def first_def(self, lines):
        return next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("def ")), 0)

    first_def._iris_fixed = True
    rewriter._find_def = first_def


# libdevice's elementwise float functions that the interpreter gives a meaning: numpy's, in the argument's precision
# (float16 and bfloat16 widened to float32, as a kernel must widen them for CUDA's libdevice)
def _libdevice_numpy():
    import math

    import numpy as np

    erf = np.vectorize(math.erf, otypes=[np.float32])
    same = {name: getattr(np, name) for name in (
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "sinh", "cosh",
        "tanh", "floor", "ceil", "trunc", "fmod", "fmax", "fmin", "hypot", "cbrt")}
    arcs = {name: getattr(np, "arc" + name[1:]) for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh",
                                                               "atan2")}
    return same | arcs | {
        "fast_expf": np.exp, "fast_exp10f": lambda x: np.power(np.float32(10), x), "exp10": lambda x: 10 ** x,
        "fast_logf": np.log, "fast_log2f": np.log2, "fast_log10f": np.log10, "fast_sinf": np.sin,
        "fast_cosf": np.cos, "fast_tanf": np.tan, "fast_powf": np.power, "pow": np.power, "powf": np.power,
        "fast_dividef": np.divide, "div_rn": np.divide, "rsqrt": lambda x: 1 / np.sqrt(x), "erf": erf,
        "abs": np.abs, "fabs": np.abs, "rint": np.rint, "nearbyint": np.rint,
        "round": lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x),  # halves away from zero, as CUDA's round
        "saturatef": lambda x: np.clip(x, 0, 1), "fma": lambda a, b, c: a * b + c,
    }


def _fix_interpreter_libdevice(interpreter):
    """``triton.language.extra.libdevice`` is a module of stubs that the compiler replaces by the backend's
    libdevice; the interpreter calls the stubs, which return None, so ``libdevice.tanh(x)`` gave None and a
    kernel failed far from the cause (or stored nothing). Here the float functions compute in numpy, and every
    other stub raises, naming itself."""
    import inspect

    import numpy as np
    import triton.language as tl
    from triton.language.extra import libdevice

    if getattr(libdevice, "_iris_interpreted", False):
        return

    def to_float32(value):
        if isinstance(value, tl.tensor):
            data = value.handle.data
            if value.dtype.scalar == tl.bfloat16:
                return _bf16_to_fp32(data)
            return data.astype(np.float32) if value.dtype.scalar.is_fp16() else data
        return value

    def elementwise(name, fn):
        def call(*args, **kwargs):
            ref = next((a for a in args if isinstance(a, tl.tensor)), None)
            if ref is None or not ref.dtype.scalar.is_floating():
                raise NotImplementedError(f"libdevice.{name}: the cpu backend interprets it on float tensors only, "
                                          f"got {[type(a).__name__ for a in args]}")
            with np.errstate(all="ignore"):  # inf and nan as the GPU gives them, without numpy's warnings
                out = np.asarray(fn(*(to_float32(a) for a in args)))
            scalar = ref.dtype.scalar
            data = _fp32_to_bf16(out) if scalar == tl.bfloat16 else out.astype(ref.handle.data.dtype)
            return tl.tensor(interpreter.TensorHandle(data, scalar), ref.type)
        call.__name__, call.__module__ = name, libdevice.__name__  # still a stub to the compiler's hashing
        return call

    def missing(name):
        def call(*args, **kwargs):
            raise NotImplementedError(f"libdevice.{name}: the cpu backend (Triton's interpreter) has no version of "
                                      "it; compile the kernel for a GPU, or write it with triton.language")
        call.__name__, call.__module__ = name, libdevice.__name__
        return call

    numpy_versions = _libdevice_numpy()
    for name, stub in inspect.getmembers(libdevice, inspect.isfunction):
        if stub.__module__ == libdevice.__name__:
            setattr(libdevice, name, elementwise(name, numpy_versions[name]) if name in numpy_versions
                    else missing(name))
    libdevice._iris_interpreted = True


def _bf16_add(native, ptrs, vals, mask, sem):
    """``*ptr += val`` on bf16 words, lane by lane, each a compare-and-swap loop (atomic against other processes
    too: the CAS is a real 16-bit atomic on the shared page); returns the old bits."""
    import numpy as np

    shape = ptrs.shape
    ptrs, vals = np.atleast_1d(ptrs).reshape(-1), np.broadcast_to(vals, shape).reshape(-1)
    mask = np.broadcast_to(mask, shape).reshape(-1)
    old = np.zeros(ptrs.shape, np.uint16)
    for i in np.flatnonzero(mask):
        addend = _bf16_to_fp32(vals[i:i + 1])
        expected = np.zeros(1, np.uint16)  # a guess; a failed swap returns the value to retry from
        while True:
            rounded = _fp32_to_bf16(_bf16_to_fp32(expected) + addend)
            seen = native.atomic_cas(ptrs[i:i + 1], expected, rounded, sem)
            if seen[0] == expected[0]:
                break
            expected = seen.astype(np.uint16)
        old[i] = expected[0]
    return old.reshape(shape)


def _fix_interpreter_atomics(builder, interpreter):
    import numpy as np
    import triton.language as tl

    create_atomic_rmw = builder.create_atomic_rmw
    if getattr(create_atomic_rmw, "_iris_fixed", False):
        return
    native = interpreter._interpreter
    as_bits = {tl.float32: (np.int32, tl.int32), tl.float64: (np.int64, tl.int64)}

    def atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        op = self.ir_rmw_op_to_interpreter_rmw_op.get(rmwOp)
        scalar = val.dtype.scalar
        if op == native.RMW_OP.XCHG and scalar in as_bits:
            np_bits, tl_bits = as_bits[scalar]
            bits = interpreter.TensorHandle(val.data.view(np_bits), tl_bits)
            old = create_atomic_rmw(self, rmwOp, ptr, bits, mask, sem, scope)
            return interpreter.TensorHandle(old.data.view(val.data.dtype), scalar)
        if op == native.RMW_OP.FADD and scalar == tl.bfloat16:
            old = _bf16_add(native, ptr.data, val.data, mask.data, self.ir_sem_to_interpreter_sem[sem])
            return interpreter.TensorHandle(old, scalar)
        return create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope)

    atomic_rmw._iris_fixed = True
    builder.create_atomic_rmw = atomic_rmw

    # bf16 constants and arithmetic: the interpreter has no get_bf16 (``tl.full(shape, 1, tl.bfloat16)`` fails), and
    # its binary operations add the raw uint16 bits as integers; compute in float32 and round back.
    binary_op = builder.binary_op

    def bf16_binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar != tl.bfloat16:
            return binary_op(self, lhs, rhs, op)
        out = op(_bf16_to_fp32(lhs.data), _bf16_to_fp32(rhs.data))
        if out.dtype == np.bool_:
            return interpreter.TensorHandle(out, tl.int1)
        return interpreter.TensorHandle(_fp32_to_bf16(out), tl.bfloat16)

    builder.binary_op = bf16_binary_op
    builder.get_bf16 = lambda self, value: interpreter.TensorHandle(_fp32_to_bf16(np.array([value], np.float32)),
                                                                    tl.bfloat16)


on_fence = None  # called at a kernel's fence.acq_rel: the race detector's, once installed (iris/interpreter/race)


def _fix_interpreter_fences(builder, interpreter):
    """Inline assembly that is only fences, with no operands (the library's ``fence.acq_rel.sys``), returns zeros
    instead of raising; under ``IRIS_SANITIZE=race`` an ``acq_rel`` fence orders what the race detector sees
    (``iris/interpreter/race/clocks.py``). Any other assembly still raises: it has no meaning on a CPU."""
    import numpy as np

    create_inline_asm = builder.create_inline_asm
    if getattr(create_inline_asm, "_iris_fixed", False):
        return

    class Results:
        def __init__(self, handles):
            self.handles = handles

        def get_result(self, i):
            return self.handles[i]

    def inline_asm(self, asm, constraints, values, types, is_pure, pack):
        statements = [part.strip() for part in asm.split(";") if part.strip()]
        if values or not all(st.startswith(("fence.", "mov.u32 $")) for st in statements):
            return create_inline_asm(self, asm, constraints, values, types, is_pure, pack)
        if on_fence is not None and any(st.startswith("fence.acq_rel") for st in statements):
            on_fence()
        return Results([interpreter.TensorHandle(np.zeros(1, dtype=np.int32), ty) for ty in types])

    inline_asm._iris_fixed = True
    builder.create_inline_asm = inline_asm


def _fix_interpreter_conversions(builder, interpreter):
    """Triton 3.6's interpreter converts numbers unlike the GPU, which rounds every narrowing once, to nearest even
    (``cvt.rn``; ``iris/interpreter/conversions.py`` lists what Triton emits): float32 -> bfloat16 truncated (1154 of
    2145 sums of a 2-rank bf16 all_reduce of randn data came out one unit off), float64 and integers -> bfloat16 wrote
    the number itself into the 16 bits (47 became 4.3e-39), bfloat16 -> integer converted the raw bits, bfloat16
    subnormals widened wrong, float -> integer wrapped where ``cvt.rzi`` clamps (NaN gave int min, not 0), and
    rounding toward zero (``fp_downcast_rounding="rtz"``) gave NaN for a float16 overflow. Each cast method below
    converts as the GPU does; float8 conversions stay Triton's."""
    import numpy as np

    from iris.interpreter import conversions

    if getattr(builder.create_fp_trunc, "_iris_fixed", False):
        return
    handle = interpreter.TensorHandle

    def values(src):
        return conversions.values_of(src.data, src.dtype.scalar)

    def round_float(self, src, dst_type):
        """``x.to(narrower float)``: once, to nearest even (the interpreter truncated to bfloat16)."""
        return handle(conversions.round_float(values(src), dst_type.scalar), dst_type.scalar)

    def widen_float(self, src, dst_type):
        """``x.to(wider float)``: exact (the interpreter widened bfloat16 subnormals wrong)."""
        scalar = dst_type.scalar  # float32 or float64: Triton casts 16-bit floats to each other through float32
        with np.errstate(invalid="ignore"):  # numpy warns of NaN payloads it quiets; the GPU quiets them too
            return handle(values(src).astype(np.float64 if scalar.is_fp64() else np.float32), scalar)

    def int_to_float(self, src, dst_type):
        """``ints.to(float)``: once, to nearest even (the interpreter wrote integers into bfloat16's bits as is)."""
        return handle(conversions.int_to_float(src.data, dst_type.scalar), dst_type.scalar)

    def float_to_int(self, src, dst_type):
        """``x.to(int)``: toward zero, clamped, NaN as 0 (the interpreter wrapped, and read bfloat16's raw bits)."""
        scalar = dst_type.scalar
        np_int = np.dtype(f"{'int' if scalar.is_int_signed() else 'uint'}{scalar.int_bitwidth}")
        return handle(conversions.float_to_int(values(src), np_int), scalar)

    create_fp_to_fp = builder.create_fp_to_fp

    def fp_to_fp(self, src, dst_type, rounding_mode):
        """``tl.cast(x, dtype, fp_downcast_rounding=...)`` between the standard float types: rounded to nearest
        even, or toward zero (``"rtz"``) as ``cvt.rz`` does, from float32 only, as Triton compiles it for NVIDIA
        GPUs (the interpreter gave NaN for a float16 overflow and wrong bfloat16 subnormals)."""
        source, scalar = src.dtype.scalar, dst_type.scalar
        if source.is_fp8() or scalar.is_fp8():
            return create_fp_to_fp(self, src, dst_type, rounding_mode)
        toward_zero = getattr(rounding_mode, "name", None) == "RTZ"
        if toward_zero and not source.is_fp32():
            raise NotImplementedError(
                f"tl.cast(x, {scalar}, fp_downcast_rounding='rtz') from {source}: Triton compiles rounding toward "
                "zero from float32 only (to float16 or bfloat16) for NVIDIA GPUs; cast to float32 first")
        return handle(conversions.round_float(values(src), scalar, toward_zero), scalar)

    for function in (round_float, widen_float, int_to_float, float_to_int, fp_to_fp):
        function._iris_fixed = True
    builder.create_fp_trunc, builder.create_fp_ext, builder.create_fp_to_fp = round_float, widen_float, fp_to_fp
    builder.create_si_to_fp = builder.create_ui_to_fp = int_to_float
    builder.create_fp_to_si = builder.create_fp_to_ui = float_to_int


def patch_interpreter_asserts():
    """Triton 3.6's interpreter skips ``tl.device_assert`` (its options never set ``debug``) and would test
    the truth of a handle object, not of the values. Debug mode needs both to work on the cpu backend."""
    import dataclasses

    import numpy as np
    from iris.platform.private import triton_interpreter
    interpreter = triton_interpreter()

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_iris_asserts", False):
        return
    original_init = builder.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.options = dataclasses.replace(self.options, debug=True)

    def create_assert(self, condition, message):
        if not np.all(condition.data):
            raise AssertionError(message)

    builder.__init__ = init
    builder.create_assert = create_assert
    builder._iris_asserts = True
    shared = getattr(interpreter, "interpreter_builder", None)  # the instance made at triton's import
    if shared is not None:
        shared.options = dataclasses.replace(shared.options, debug=True)
