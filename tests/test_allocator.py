"""The heap's offset allocator with its blocks filed by size (``OffsetAllocator(binned=True)``): what an agreement
returns is reused at once by a request of the same size, every byte stays accounted for (used, free or filed), a
request fails only when no free range fits it even with the filed blocks merged in, and two ranks fed the same calls
hand out the same offsets. Pure host code: no ranks."""

import random

from iris.host.memory.allocator import ALIGNMENT, OffsetAllocator, align_up

START, END = 4096, 4096 + 64 * 1024


def _check_accounting(a):
    """Used blocks and free ranges tile [START, END) exactly, without overlap."""
    blocks = sorted([(o, s, "used") for o, s in a.used.items()] + [(o, s, "free") for o, s in a.free_ranges()])
    at = START
    for offset, size, kind in blocks:
        assert offset == at, f"{kind} block at {offset}, expected {at}: {blocks}"
        at += size
    assert at == END, (at, END)
    assert a.used_bytes == sum(a.used.values())


def _fits(a, nbytes, alignment):
    size = align_up(max(nbytes, 1))
    return any(align_up(o, alignment) + size <= o + s for o, s in a.free_ranges())


def _run(seed, binned):
    rng = random.Random(seed)
    a, live, offsets = OffsetAllocator(START, END, binned=binned), [], []
    for step in range(400):
        if live and rng.random() < 0.4:  # an agreement returns some of the live blocks, ascending
            dropped = sorted(rng.sample(live, rng.randint(1, len(live))))
            for offset in dropped:
                live.remove(offset)
            a.release_many(dropped)
        else:
            nbytes = rng.choice([1, 256, 300, 1024, 1024, 4096, 5000, 9000])
            alignment = rng.choice([ALIGNMENT, ALIGNMENT, 1024])
            could = _fits(a, nbytes, alignment)
            offset = a.reserve(nbytes, alignment)
            offsets.append(offset)
            if offset is None:
                assert not could, f"seed {seed} step {step}: {nbytes} bytes refused while a free range fits"
            else:
                assert offset % alignment == 0 and a.used[offset] == align_up(nbytes)
                live.append(offset)
        _check_accounting(a)
    return offsets


def test_binned_allocator_accounts_for_every_byte():
    for seed in range(60):
        first, again = _run(seed, binned=True), _run(seed, binned=True)
        assert first == again, f"seed {seed}: the same calls gave other offsets"
        _run(seed, binned=False)  # the plain free list keeps the same invariants


def test_a_returned_block_is_reused_by_its_size():
    a = OffsetAllocator(START, END, binned=True)
    blocks = [a.reserve(1024) for _ in range(6)]
    a.release_many(sorted(blocks[1::2]))  # three 1 KiB holes between live blocks
    assert a.reserve(1024) == blocks[1]  # the lowest filed block of that size, no walk of the free list
    assert a.reserve(1000) == blocks[3]  # rounded up to the same size
    assert a.largest_free() == END - blocks[5]  # the tail with the filed block beside it
    a.release_many(sorted([blocks[0], blocks[2], blocks[4]]))
    assert a.largest_free() == END - blocks[4]
    assert a.reserve(END - blocks[4] + 1) is None  # blocks 1 and 3 are live: no longer run, filed blocks merged
    assert not a.bins and a.free_ranges() == [(START, 1024), (blocks[2], 1024), (blocks[4], END - blocks[4])]
    a.release_many(sorted([blocks[1], blocks[3]]))
    assert a.reserve(END - START) == START and not a.bins  # everything merged back into one range
