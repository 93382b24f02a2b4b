"""The private torch and Triton APIs iris depends on, in one place, each behind a check with a clear error.

Nothing else in iris touches a private name of torch or Triton; it calls the functions here. Private APIs can
change in any release, so each accessor checks that the name is there and otherwise raises an error that names
the API, the installed version and the versions iris is tested with (``TESTED``: the ends of the range in
``pyproject.toml``, which ``.ci/run`` tests on the cpu backend, and the GPU tier's torch).

- ``construct_storage``: ``torch._C._construct_storage_from_data_pointer`` (a non-owning storage over a peer's
  mapped heap, for the copy queue's views), with the public array interfaces as the fallback.
- ``tensor_on_storage``: the legacy constructor ``Tensor.new(storage)`` (a 1-D tensor of the template's dtype
  over a whole untyped storage, in one call: the heap's allocation path), with ``empty(0).set_`` as the fallback.
- ``storage_slicer``: ``torch._C.StorageBase.__getitem__`` (an untyped storage's slice, without the Python
  wrapper's meta-device check), with the public slice as the fallback.
- ``compiled_launcher``: a Triton ``CompiledKernel``'s launcher (``CompiledKernel.run``, the backend's launcher
  object, and its C ``launch`` with the argument order of Triton 3.6's ``JITFunction.run``), for launches reused
  call to call (``iris/host/launches.py``); None where its attributes differ, and the caller then goes through
  ``kernel[grid]``. ``no_launch_hooks``, ``current_device`` and ``current_stream`` are what ``JITFunction.run``
  reads per launch (``triton.knobs.runtime`` and ``triton.runtime.driver.active``).
- ``default_store``: ``torch.distributed.distributed_c10d._get_default_store`` (the rendezvous store of the
  default process group, for host barriers and the watchdog's exchange).
- ``grouped_mm``: ``torch._grouped_mm`` (rows x per-group weights, group ends on the device: the MoE layer's
  experts), or None, for which the caller has a public fallback.
- ``triton_interpreter``: ``triton.runtime.interpreter``, whose classes the cpu backend mends in place
  (``iris/platform/backend.py``); the mended names are checked here first.
"""

import warnings

import torch

# (oldest, newest) major.minor tested: torch 2.11 by the GPU tier, 2.13 and 2.14 by .ci/run; triton 3.6 by both,
# 3.8 (what torch 2.14 requires) by .ci/run
TESTED = {"torch": ((2, 11), (2, 14)), "triton": ((3, 6), (3, 8))}

# what the cpu backend patches in triton.runtime.interpreter (iris/platform/backend.py)
_INTERPRETER_NAMES = ("GridExecutor", "InterpreterError", "InterpreterBuilder", "TensorHandle")


def _major_minor(version):
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def _tested(package):
    (lo_major, lo_minor), (hi_major, hi_minor) = TESTED[package]
    return f"{package} {lo_major}.{lo_minor} to {hi_major}.{hi_minor}"


def _missing(api, package, version, what):
    return RuntimeError(f"iris: {what} needs {package}'s private {api}, which {package} {version} does not have; "
                        f"iris is tested with {_tested(package)}; install a {package} in that range")


def check_versions(torch_version=None, triton_version=None):
    """The installed torch and triton outside ``TESTED``, as a list of lines (empty when both are inside)."""
    import triton

    found = []
    for package, version in (("torch", torch_version or torch.__version__),
                             ("triton", triton_version or triton.__version__)):
        low, high = TESTED[package]
        if not low <= _major_minor(version) <= high:
            found.append(f"{package} {version} is outside the tested {_tested(package)}")
    return found


def warn_untested():
    """One warning (not an error: the public APIs iris uses may still work) when torch or triton is untested."""
    problems = check_versions()
    if problems:
        warnings.warn("iris: " + "; ".join(problems) + "; report what fails", RuntimeWarning, stacklevel=3)


def construct_storage(address, device, nbytes):
    """A non-owning storage of ``nbytes`` at ``address`` on ``device``, or None when this torch cannot build one
    (the caller then goes through the public array interfaces)."""
    construct = getattr(torch._C, "_construct_storage_from_data_pointer", None)
    return None if construct is None else construct(address, device, nbytes)


def tensor_on_storage(template, storage):
    """A 1-D tensor of ``template``'s dtype and device over all of ``storage`` (an ``UntypedStorage`` whose byte
    count the dtype's size divides). ``Tensor.new(storage)`` takes 0.95 us on a 2-core host; ``new_empty(0)`` then
    ``set_`` takes 1.7 us."""
    if _LEGACY_NEW:
        return template.new(storage)
    return template.new_empty(0).set_(storage)


_LEGACY_NEW = hasattr(torch.Tensor, "new")


def storage_slicer():
    """``storage[start:stop]`` as the callable ``slicer(storage, slice(start, stop))``: a storage of its own over
    those bytes, holding ``storage`` alive; for the heap's allocation path (no Python frame of ours per call)."""
    return _STORAGE_GETITEM


def tensor_maker():
    """``tensor_on_storage`` as a callable ``maker(template, storage)``: ``Tensor.new`` itself where it exists."""
    return torch.Tensor.new if _LEGACY_NEW else tensor_on_storage


def cuda_tensor_constructor():
    """``construct(meta, storage)``: a CUDA tensor of ``meta``'s ``size``, ``stride``, ``storage_offset`` and
    ``dtype`` over ``storage``, made directly (torch's ``_construct_CUDA_Tensor_From_Storage_And_Metadata``, with
    which CUDA graph trees make their outputs), without ``Tensor.new``'s ``at::empty`` and ``set_`` and without a
    ``view`` to the shape; None where torch lacks it (the cpu build)."""
    return getattr(torch._C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", None)


_STORAGE_GETITEM = getattr(getattr(torch._C, "StorageBase", None), "__getitem__", torch.UntypedStorage.__getitem__)


def compiled_launcher(compiled):
    """``(launch, prefix)``: ``launch(grid0, grid1, grid2, stream, *prefix, *args)`` launches ``compiled`` as
    ``JITFunction.run`` does with no launch hook (``args``: every kernel parameter in order). None when the
    kernel needs a scratch allocation per launch (Triton's launcher object makes it) or the launcher is not the
    one this was written against."""
    run = getattr(compiled, "run", None)  # a property that loads the binary on first use
    launch = getattr(run, "launch", None)
    if launch is None or not all(hasattr(run, name) for name in _LAUNCHER_FIELDS):
        return None
    if run.global_scratch_size or run.profile_scratch_size:
        return None
    # function, cooperative grid, PDL, global scratch, profile scratch, packed metadata, launch metadata, hooks
    prefix = (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None, compiled.packed_metadata,
              None, None, None)
    return launch, prefix


_LAUNCHER_FIELDS = ("global_scratch_size", "profile_scratch_size", "launch_cooperative_grid", "launch_pdl")
_DRIVER = []


def _driver():
    if not _DRIVER:
        from triton.runtime import driver

        _DRIVER.append((driver.active.get_current_device, driver.active.get_current_stream))
    return _DRIVER[0]


def _unhooked(hook):
    """True for a launch hook slot that calls nothing: None (older Triton) or an empty ``HookChain`` (3.6 keeps
    one in each slot and passes it to every launch)."""
    if hook is None:
        return True
    calls = getattr(hook, "calls", None)
    return isinstance(calls, list) and not calls


def no_launch_hooks():
    """True when no launch hook is set (a profiler's, which needs Triton's own launch path). Every remembered
    launch asks, so triton's knobs are looked up once (an import statement per call cost ~0.3 us)."""
    if not _RUNTIME_KNOBS:
        from triton import knobs

        _RUNTIME_KNOBS.append(knobs.runtime)
    runtime = _RUNTIME_KNOBS[0]
    return _unhooked(runtime.launch_enter_hook) and _unhooked(runtime.launch_exit_hook)


_RUNTIME_KNOBS = []


def current_device():
    return _driver()[0]()


def current_stream(device):
    return _driver()[1](device)


def default_store():
    """The store of the default process group (``torch.distributed`` must be initialised)."""
    import torch.distributed as dist

    get = getattr(dist.distributed_c10d, "_get_default_store", None)
    if get is None:
        raise _missing("torch.distributed.distributed_c10d._get_default_store", "torch", torch.__version__,
                       "the host barrier")
    return get()


def triton_interpreter():
    """``triton.runtime.interpreter``, checked for the classes the cpu backend mends."""
    import triton
    from triton.runtime import interpreter

    lacking = [name for name in _INTERPRETER_NAMES if not hasattr(interpreter, name)]
    if lacking:
        raise _missing(f"triton.runtime.interpreter.{lacking[0]}", "triton", triton.__version__, "the cpu backend")
    return interpreter


def grouped_mm():
    """``torch._grouped_mm`` or None where this torch lacks it (the MoE layer then runs one matmul per expert)."""
    return getattr(torch, "_grouped_mm", None)
