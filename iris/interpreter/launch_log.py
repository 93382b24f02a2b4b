"""A log of the kernel specialisations the Triton interpreter runs, so that they can be compiled for a GPU too.

The cpu backend runs kernels in Triton's interpreter, which accepts programs the GPU compiler refuses (a ptxas
error, an MLIR verifier failure). With ``IRIS_LAUNCH_LOG=<directory>`` in the environment, every interpreted
launch is recorded, once per specialisation, the way Triton's GPU launcher would specialise it: the signature
(``*fp32``, ``i32``, ``constexpr``, ...), the constexpr values, the alignment and divisibility attributes and
the launch options. ``tests/compile_launches.py`` then compiles each record for sm_90 without a GPU.
"""

import os
import pickle

_seen = set()


def _by_type(spec, value):
    """``spec`` (type, attribute) of an argument with its integers specialised by type alone, inside tuples too."""
    ty, attr = spec
    if isinstance(ty, tuple):  # a tuple argument: one (type, attribute) per element
        pairs = [_by_type(element, v) for element, v in zip(zip(ty, attr), value)]
        return tuple(t for t, _ in pairs), tuple(a for _, a in pairs)
    if type(value) is not int:
        return spec
    if ty == "constexpr":  # the launcher's constant 1
        return ("i32", None)
    return (ty, None)


def _leaves(specs, values, path=()):
    """(path, type, attribute, value) of every argument, a tuple's elements one by one (path: their indices)."""
    for i, ((ty, attr), value) in enumerate(zip(specs, values)):
        if isinstance(ty, tuple):
            yield from _leaves(list(zip(ty, attr)), value, path + (i,))
        else:
            yield path + (i,), ty, attr, value


def _specialise(jit_fn, backend, args, kwargs):
    """(signature, constexprs, attrs, options) as ``JITFunction.run`` computes them before compiling."""
    from triton.runtime.jit import create_function_from_signature

    binder = jit_fn.__dict__.get("_iris_binder")
    if binder is None:
        binder = jit_fn._iris_binder = create_function_from_signature(jit_fn.signature, jit_fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    # Integer arguments are recorded by type alone: the launcher also specialises an int equal to 1 into a constant
    # and one divisible by 16 into an attribute, which multiplies the variants by the ranks' values (rank, peer) with
    # the same code compiled (1567 specialisations of test_atomics' kernel instead of 288). Pointers keep their
    # alignment, which decides vector widths. Tuple arguments (a group's sync arguments, a GEMM's strides) are
    # specialised element by element, at paths of indices.
    values = list(bound.values())
    specialization = [spec if param.is_constexpr else _by_type(spec, value)
                      for spec, param, value in zip(specialization, jit_fn.params, values)]
    names = [p.name for p in jit_fn.params]
    signature = {name: spec[0] for name, spec in zip(names, specialization)}
    leaves = list(_leaves(specialization, values))
    constexprs = {path: value for path, ty, _, value in leaves if ty == "constexpr"}
    attrs = {path: backend.parse_attr(attr) for path, _, attr, _ in leaves if isinstance(attr, str)}
    options = {k: v for k, v in options.items() if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
    return signature, constexprs, attrs, options


def install(directory):
    """Record every interpreted launch of this process into ``directory`` (one file per process)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    from iris.errors import PeerError

    run = interpreter.InterpretedFunction.run
    if getattr(run, "_iris_logged", False):
        return
    backend = make_backend(GPUTarget("cuda", 90, 32))
    path = os.path.join(directory, f"launches-{os.getpid()}.pkl")

    def logged_run(self, *args, grid, warmup, **kwargs):
        try:
            jit_fn = self.__dict__.get("_iris_jit")
            if jit_fn is None:
                jit_fn = self._iris_jit = JITFunction(self.fn)
            record = (self.fn.__code__.co_filename, self.fn.__qualname__,
                      *_specialise(jit_fn, backend, args, kwargs))
            key = repr(record)
        except Exception as e:  # a launch the log cannot describe still runs; the compile check reports it
            if isinstance(e, PeerError):  # raised into this thread by the watchdog: it belongs to the caller
                raise
            record = (self.fn.__code__.co_filename, self.fn.__qualname__, None, f"{type(e).__name__}: {e}", None,
                      None)
            key = repr(record[:2])
        result = run(self, *args, grid=grid, warmup=warmup, **kwargs)
        # Only launches the interpreter ran to the end: one that raised (a test of a refused dtype, say) is
        # expected to fail on GPUs too.
        if key not in _seen:
            _seen.add(key)
            with open(path, "ab") as f:
                f.write(pickle.dumps(record))
        return result

    logged_run._iris_logged = True
    interpreter.InterpretedFunction.run = logged_run
