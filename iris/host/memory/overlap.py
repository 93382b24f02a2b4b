"""Whether two operands share bytes. A kernel that reads one operand while it, or a peer, writes another gets the
wrong answer when the two overlap without being what the call expects (``out`` two elements past ``inp`` in one
allocation, say): nothing faults, the numbers are wrong. The collectives and fused ops refuse such operands
here, before any launch; the in-place forms each call documents (``out`` is ``inp``, ``inp`` is this rank's slot
of ``out``) are told apart from the rest by their exact bytes.

Exact for contiguous operands and for 2-D views that step through memory with the same row pitch (column blocks of
one buffer); any other strided pair counts as overlapping when the spans from first to last byte meet, so a layout
this cannot prove apart is refused with the same message, never run.
"""


def span(t):
    """First byte and one past the last byte of ``t`` (a strided view's gaps included)."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _rows(t):
    """``(pitch, width)`` in bytes of a 2-D view whose elements are unit-strided along one dim, else None."""
    if t.dim() != 2:
        return None
    (rows, cols), (row_step, col_step) = t.shape, t.stride()
    if col_step != 1:
        rows, cols, row_step, col_step = cols, rows, col_step, row_step
    if col_step != 1 or rows < 2:
        return None
    return row_step * t.element_size(), cols * t.element_size()


def overlap(a, b):
    """True when tensors ``a`` and ``b`` may share a byte (see the module docstring for how exact this is)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    a0, a1 = span(a)
    b0, b1 = span(b)
    if a1 <= b0 or b1 <= a0:
        return False
    if a.is_contiguous() and b.is_contiguous():
        return True
    ra, rb = _rows(a), _rows(b)
    if ra is None or rb is None or ra[0] != rb[0] or ra[1] + rb[1] > ra[0]:
        return True
    pitch = ra[0]  # the same row pitch: apart when their columns (offsets within a pitch) are apart
    return (b0 - a0) % pitch < ra[1] or (a0 - b0) % pitch < rb[1]


def check_apart(caller, a, a_name, b, b_name, fix, inside=None):
    """``a`` and ``b`` share no byte (False), or ``a`` is exactly ``b``'s elements from element ``inside`` on, an
    in-place call the caller allows (True); any other overlap raises ``ValueError`` naming both and ``fix``.
    Both contiguous when ``inside`` is given."""
    if not overlap(a, b):
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    if (inside is not None and a.dtype == b.dtype and a0 == b0 + inside * b.element_size()
            and inside + a.numel() <= b.numel()):
        return True
    raise ValueError(f"{caller}: {a_name} overlaps {b_name} ({a_name} starts {a0 - b0:+d} bytes from {b_name}'s start, "
                     f"{a.numel()} and {b.numel()} elements): a kernel would read bytes after they were overwritten "
                     f"and the result would be wrong; {fix}")
