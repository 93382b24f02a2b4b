"""AMD-only launch options in kernels written for upstream Iris, accepted on NVIDIA.

Upstream's kernels launch with ``waves_per_eu``, ``matrix_instr_nonkdim`` and ``kpack`` (occupancy and MFMA
shape hints of the AMD backend). Triton's CUDA backend has no such options and raises ``KeyError: Keyword argument
waves_per_eu was specified but unrecognised``, so such a kernel cannot launch on NVIDIA at all. They are tuning
hints with no meaning here (no wavefronts per EU, no MFMA), not semantics, so a kernel written for Iris should run
as it is: on a non-AMD GPU ``install()`` drops them from a launch's keywords before Triton sees them, and logs
one note per option and process (WARNING, so a porter knows the hint is not applied). The interpreter (cpu
backend) already ignores unknown options, and on AMD nothing changes.

One wrapper around ``JITFunction.run``, the entry point of every launch (``kernel[grid](...)``, the autotuner,
``warmup``) in triton 3.6 and 3.8; a kernel that declares a parameter of one of these names keeps it.
"""

import functools

AMD_ONLY = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")
_noted = set()


def _on_amd():
    import triton

    try:
        return triton.runtime.driver.active.get_current_target().backend == "hip"
    except Exception:  # no GPU driver: nothing launches through the CUDA backend either
        return False


def _drop(fn, kwargs):
    params = {p.name for p in getattr(fn, "params", ())}
    for name in AMD_ONLY:
        if name in kwargs and name not in params:
            value = kwargs.pop(name)
            if name not in _noted:
                _noted.add(name)
                from iris.logging import logger

                logger.warning(f"{name}={value!r} is an AMD-only launch option (kernel {getattr(fn, '__name__', fn)}); "
                               "ignored on this GPU")


def install():
    """Wrap ``triton.runtime.jit.JITFunction.run`` once so that AMD-only options are dropped on other GPUs."""
    from triton.runtime.jit import JITFunction

    run = JITFunction.run
    if getattr(run, "_iris_amd_options", False):
        return
    on_amd = functools.cache(_on_amd)

    @functools.wraps(run)
    def run_without_amd_options(self, *args, **kwargs):
        if not on_amd():
            _drop(self, kwargs)
        return run(self, *args, **kwargs)

    run_without_amd_options._iris_amd_options = True
    JITFunction.run = run_without_amd_options
