"""What the race detector hears from the interpreter: each kernel's start and end, each program's start, and every
load, store and atomic the builder performs (plain ``tl.load``/``tl.store``, block pointers and tensor descriptors
come down to the same two builder methods; ``iris.load/store/get/put/copy`` and the atomics are made of them).

Installed once, when the first sanitized context is made (``install``); each mend asks ``current.detector`` and
does nothing more when no sanitized context is open.
"""

import functools

from iris.interpreter.race import current

_SEM = {"ACQUIRE": "acquire", "RELEASE": "release", "RELAXED": "relaxed", "ACQUIRE_RELEASE": "acq_rel"}
_SCOPE = {"GPU": "gpu", "CTA": "cta", "SYSTEM": "sys"}


def _bytes(pointers):
    """Bytes per element of a pointer handle's pointee."""
    return max(1, pointers.get_element_ty().primitive_bitwidth // 8)


def _name(enum_value, table):
    return table[enum_value.name]


def install():
    from iris.platform.private import triton_interpreter

    interpreter = triton_interpreter()
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_iris_race", False):
        return
    builder._iris_race = True
    from iris.interpreter import triton as mended

    mended.on_fence = fence
    _hear_kernels(interpreter)
    _hear_programs(builder)
    _hear_memory(builder)
    _hear_atomics(builder)


def _hear_kernels(interpreter):
    """A launch: the kernel's programs fork from the host's clocks at its start and join them at its end (which
    comes after the interpreter copies the arguments back, so those copies are not the host's accesses)."""
    run_grid = interpreter.GridExecutor.__call__

    def run_grid_heard(self, *args, **kwargs):
        detector = current.detector
        if detector is None or detector.current is not detector.host:  # a thread the detector does not follow
            return run_grid(self, *args, **kwargs)
        detector.begin_kernel(getattr(self.fn, "__name__", "kernel"))
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            detector.end_kernel()

    interpreter.GridExecutor.__call__ = run_grid_heard


def _hear_programs(builder):
    set_grid_idx = builder.set_grid_idx

    def set_grid_idx_heard(self, x, y, z):
        set_grid_idx(self, x, y, z)
        detector = current.detector
        if detector is not None and detector.kernel is not None:
            gx, gy, _ = self.grid_dim
            detector.begin_program(x + gx * (y + gy * z))

    builder.set_grid_idx = set_grid_idx_heard


def _listening():
    """The detector, when one follows the calling thread (a program of a kernel it heard start); else None."""
    detector = current.detector
    return detector if detector is not None and detector.current is not None else None


def _hear_memory(builder):
    masked_load, masked_store = builder.create_masked_load, builder.create_masked_store

    def load_heard(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        load = functools.partial(masked_load, self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)
        detector = _listening()
        if detector is None:
            return load()
        # a volatile load is a relaxed atomic read: it never races with atomics, and orders nothing by itself
        return detector.access(ptrs.data, _bytes(ptrs), mask.data, write=False, atomic=bool(is_volatile),
                               sem="relaxed", scope="sys", perform=load)

    def store_heard(self, ptrs, value, mask, cache_modifier, eviction_policy):
        detector = _listening()
        if detector is not None:
            detector.access(ptrs.data, _bytes(ptrs), mask.data, write=True, atomic=False)
        return masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy)

    builder.create_masked_load, builder.create_masked_store = load_heard, store_heard


def _hear_atomics(builder):
    atomic_rmw, atomic_cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def heard(perform, ptr, mask, sem, scope):
        detector = _listening()
        if detector is None:
            return perform()
        return detector.access(ptr.data, _bytes(ptr), mask, write=True, atomic=True, sem=_name(sem, _SEM),
                               scope=_name(scope, _SCOPE), perform=perform)

    def rmw_heard(self, rmwOp, ptr, val, mask, sem, scope):
        return heard(functools.partial(atomic_rmw, self, rmwOp, ptr, val, mask, sem, scope), ptr, mask.data, sem,
                     scope)

    def cas_heard(self, ptr, cmp, val, sem, scope):
        return heard(functools.partial(atomic_cas, self, ptr, cmp, val, sem, scope), ptr, None, sem, scope)

    builder.create_atomic_rmw, builder.create_atomic_cas = rmw_heard, cas_heard


def fence():
    """A kernel's ``fence.acq_rel`` (``iris/interpreter/triton.py`` runs the inline assembly as this)."""
    detector = current.detector
    if detector is not None:
        detector.fence()

