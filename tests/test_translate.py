"""The context's check behind translate()'s alignment claim: heap bases that are not multiples of 256 bytes are
refused with an error naming the rank and the address, before any kernel could run on them."""

import pytest

from iris.device.translate import BASE_ALIGNMENT, check_base_alignment, misaligned_bases


def test_aligned_bases_pass():
    bases = [0x7F0000000000, 0x7F0000400000, 0x7F0000000000 + 17 * BASE_ALIGNMENT.value]
    assert misaligned_bases(bases) == []
    check_base_alignment([])


def test_misaligned_base_is_refused_naming_rank_and_address():
    bases = [0x7F0000000000, 0x7F0000000080]  # rank 1 only 128-byte aligned
    bad = [(0, *entry) for entry in misaligned_bases(bases)]
    assert bad == [(0, 1, 0x7F0000000080)]
    with pytest.raises(RuntimeError, match=r"iris.iris: .*multiples of 256 bytes.*rank 1 at 0x7f0000000080"):
        check_base_alignment(bad)
