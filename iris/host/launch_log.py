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


def _specialise(jit_fn, backend, args, kwargs):
    """(signature, constexprs, attrs, options) as ``JITFunction.run`` computes them before compiling."""
    from triton.runtime.jit import create_function_from_signature

    binder = jit_fn.__dict__.get("_iris_binder")
    if binder is None:
        binder = jit_fn._iris_binder = create_function_from_signature(jit_fn.signature, jit_fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    names = [p.name for p in jit_fn.params]
    signature = {name: spec[0] for name, spec in zip(names, specialization)}
    values = list(bound.values())
    constexprs = {(i,): values[i] for i, spec in enumerate(specialization) if spec[0] == "constexpr"}
    attrs = {(i,): backend.parse_attr(spec[1]) for i, spec in enumerate(specialization) if isinstance(spec[1], str)}
    options = {k: v for k, v in options.items() if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
    return signature, constexprs, attrs, options


def install(directory):
    """Record every interpreted launch of this process into ``directory`` (one file per process)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

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
            signature, constexprs, attrs, options = _specialise(jit_fn, backend, args, kwargs)
            record = (self.fn.__code__.co_filename, self.fn.__qualname__, signature, constexprs, attrs, options)
            key = repr(record)
            if key not in _seen:
                _seen.add(key)
                data = pickle.dumps(record)
                with open(path, "ab") as f:
                    f.write(data)
        except Exception as e:  # a launch the log cannot describe still runs; the compile check reports it
            key = (self.fn.__qualname__, type(e).__name__)
            if key not in _seen:
                _seen.add(key)
                with open(path, "ab") as f:
                    f.write(pickle.dumps((self.fn.__code__.co_filename, self.fn.__qualname__, None,
                                          f"{type(e).__name__}: {e}", None, None)))
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    logged_run._iris_logged = True
    interpreter.InterpretedFunction.run = logged_run
