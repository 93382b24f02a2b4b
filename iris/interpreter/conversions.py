"""Numeric conversions as an NVIDIA GPU makes them, on the values Triton's interpreter holds (numpy arrays; bfloat16
as its raw uint16 bits). What Triton emits for sm_90 (read in its PTX):

- float narrowing (``.to``, ``tl.cast``): ``cvt.rn``, round to nearest, ties to even, once from the source, even
  from float64 to bfloat16 (``cvt.rn.bf16.f64``); ``fp_downcast_rounding="rtz"``: ``cvt.rz``, toward zero, which
  Triton compiles from float32 only;
- integer to float: ``cvt.rn.<float>.<int>``, rounded once, to bfloat16 too (``cvt.rn.bf16.s64``);
- float to integer: ``cvt.rzi``, toward zero, NaN to 0, out-of-range values clamped to the ``cvt``'s range, which is
  16 bits for an 8-bit result (``cvt.rzi.s16.f32``, then the low byte is kept: 300.0 -> int8 44, 1e9 -> int8 -1).

Widening is exact everywhere. NaN stays NaN; its payload bits are not the GPU's (only NaN-ness is promised).
"""

import numpy as np

_FLOATS = {16: np.float16, 32: np.float32, 64: np.float64}


def bf16_to_fp32(bits):
    """float32 values of bfloat16 ``bits`` (exact: bfloat16 is float32's top half)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def fp32_to_bf16(values):
    """bfloat16 bits of float32 ``values``, rounded to nearest even as the GPU converts (NaN stays NaN)."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(values)] = 0x7FC0
    return rounded


def values_of(data, dtype):
    """The numbers a handle of Triton ``dtype`` holds: bfloat16 widened to float32, anything else as stored."""
    return bf16_to_fp32(data) if dtype.is_bf16() else np.asarray(data)


def round_float(values, dtype, toward_zero=False):
    """Float ``values`` (a numpy float array) in float ``dtype``'s storage, rounded once to nearest even, or toward
    zero. float64 reaches bfloat16 through a float32 rounded to odd, which keeps 16 bits more than bfloat16 and a
    sticky last bit, so the second rounding sees what the first dropped and the two give the one rounding's bits."""
    values = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype.is_bf16():
            out = fp32_to_bf16(_round_to_odd_fp32(values) if values.dtype == np.float64 else values)
        else:
            out = values.astype(_FLOATS[dtype.primitive_bitwidth])
        if toward_zero:
            # a nearest value further from zero than the value is one step too far: one less in magnitude is the
            # next value toward zero (magnitude and bits grow together; inf's predecessor is the largest finite)
            wider = bf16_to_fp32(out) if dtype.is_bf16() else out
            over = np.abs(wider.astype(values.dtype)) > np.abs(values)
            bits = out.view(np.uint16 if dtype.is_bf16() else np.dtype(f"uint{dtype.primitive_bitwidth}"))
            out = np.where(over, bits - 1, bits).astype(bits.dtype).view(out.dtype)
    return out


def int_to_float(ints, dtype):
    """Integer ``ints`` in float ``dtype``'s storage, rounded once to nearest even. float64 holds every integer of up
    to 53 bits; past that the bits below 2**11 are folded into a sticky bit first (odd rounding), which float32,
    float16 and bfloat16 round away anyway, so the one rounding to ``dtype`` sees them."""
    ints = np.asarray(ints)
    if ints.dtype == np.bool_:
        ints = ints.astype(np.uint8)
    if dtype.primitive_bitwidth == 64:
        return ints.astype(np.float64)
    if ints.dtype.itemsize < 8:
        return round_float(ints.astype(np.float64), dtype)
    magnitude = ints.astype(np.uint64)
    negative = ints < 0
    magnitude = np.where(negative, -magnitude, magnitude)  # two's complement: |int64 min| is 2**63, exact
    sticky = (magnitude & np.uint64(0x7FF)) != 0
    folded = ((magnitude >> np.uint64(11)) | sticky.astype(np.uint64)).astype(np.float64) * 2.0 ** 11
    exact = magnitude < np.uint64(1 << 53)
    wide = np.where(exact, magnitude.astype(np.float64), folded)
    return round_float(np.where(negative, -wide, wide), dtype)


def float_to_int(values, np_int):
    """Float ``values`` as integers of numpy type ``np_int``, as ``cvt.rzi`` gives them: truncated, NaN as 0, clamped
    to the range of the ``cvt`` (at least 16 bits wide), then wrapped to ``np_int``'s width."""
    with np.errstate(invalid="ignore"):
        values = np.asarray(values).astype(np.float64)  # exact from every float type (NaN stays NaN)
    bits = max(16, np.dtype(np_int).itemsize * 8)
    signed = np.issubdtype(np_int, np.signedinteger)
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    wide = np.int64 if signed else np.uint64
    with np.errstate(invalid="ignore"):
        t = np.trunc(np.where(np.isnan(values), 0.0, values))
        above = t >= float(high + 1)  # a power of two, exact in float64 (high itself may not be)
        out = np.where((t >= float(low)) & ~above, t, 0.0).astype(wide)
    out = np.where(t < float(low), wide(low), out)
    out = np.where(above, wide(high), out)
    return out.astype(np_int)


def _round_to_odd_fp32(values):
    """float64 ``values`` in float32 rounded to odd: toward zero, the last bit set where that dropped any bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = values.astype(np.float32)
        too_far = np.abs(nearest.astype(np.float64)) > np.abs(values)
        toward_zero = np.where(too_far, np.nextafter(nearest, np.float32(0)), nearest)
        inexact = toward_zero.astype(np.float64) != values  # NaN too, which stays NaN
    return (toward_zero.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)
