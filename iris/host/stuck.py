"""Device waits that can never end, told apart from slow ones by what every rank of the node is waiting for.

Each rank's watchdog reads its own sync flags every second (``GroupTable.waits``). A wait that has not moved for
``STUCK_S`` goes into the rank's record on the status page (``write``): the call the rank is in and, per group and
row, the members it waits for. From the records of its node's ranks (``read``) a watchdog draws who waits for whom
and follows its own waits (``cycle``): a wait that leads into a cycle, each rank of it waiting for the next, can
never end, since no rank of the cycle signals while it waits. A cycle through different calls or groups is a
disagreement (``disagreement`` words it: two ranks of the cycle, each call and group); a cycle of one call in one group
is left to the notice (a kernel's programs that are not all resident, not calls that differ).

A record is ``[sequence, length, JSON bytes]`` in the slot: the writer makes the sequence odd while it writes, the
reader takes a copy made between two equal even readings of it.
"""

import json
import time

import numpy as np

STUCK_S = 2.0  # a wait unchanged this long is recorded; a moving wait advances within microseconds
FRESH_S = 3.0  # a record older than this is ignored (its watchdog stopped, or its rank is in no wait now)
RECORD_BYTES = 1024
RECORD_WORDS = 2 + RECORD_BYTES // 8
CALL_CHARS = 240  # of a call's description in a record: room for a few groups' waits beside it


def write(area, call, waits):
    """Record this rank's stuck ``waits`` (``[(group ranks, row, members behind)]``) in ``call``; none clears it."""
    record = {"at": time.monotonic(), "call": call[:CALL_CHARS], "waits": [[list(r), w, list(b)] for r, w, b in waits]}
    data = json.dumps(record).encode() if waits else b""
    while len(data) > RECORD_BYTES:  # more waits than fit: the first ones (a cycle through this rank needs one)
        record["waits"].pop()
        data = json.dumps(record).encode()
    area[0] += 1  # odd: being written
    area[2:].view(np.uint8)[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    area[1] = len(data)
    area[0] += 1


def read(area, now):
    """The record in ``area``, or None (none, stale, or being written three times in a row)."""
    for _ in range(3):
        sequence = int(area[0])
        if sequence % 2 == 0:
            data = area[2:].view(np.uint8)[:int(area[1])].tobytes()
            if int(area[0]) == sequence:
                if not data:
                    return None
                try:
                    record = json.loads(data)
                except ValueError:
                    return None
                return record if now - record["at"] <= FRESH_S else None
        time.sleep(0.001)
    return None


def cycle(me, records):
    """``(path, loop)`` when the waits of ``me`` lead into a cycle of ``records`` (``{rank: record}``), else None.
    ``path`` holds the steps from ``me`` to the cycle and ``loop`` the cycle's, each ``(rank, group ranks, row)``:
    ``rank`` waits there for the next step's rank."""
    def steps(rank):
        record = records.get(rank)
        return [] if record is None else [(rank, tuple(g), row, peer) for g, row, behind in record["waits"]
                                         for peer in behind]

    trail, done = [], set()

    def visit(rank):
        at = [step[0] for step in trail]
        if rank in at:
            start = at.index(rank)
            return [s[:3] for s in trail[:start]], [s[:3] for s in trail[start:]]
        if rank in done:
            return None
        for step in steps(rank):
            trail.append(step)
            found = visit(step[3])
            if found is not None:
                return found
            trail.pop()
        done.add(rank)
        return None

    return visit(me)


def disagreement(me, records, found):
    """The words of a ``cycle`` that runs through different calls or groups, or None for a cycle of one call in one
    group: two ranks of it that wait for each other's progress in different calls, and ``me``'s own place."""
    path, loop = found
    labels = [(records[rank]["call"], group) for rank, group, _ in loop]
    if len(set(labels)) == 1:
        return None
    first = loop[0][0]  # named first: this rank, or the rank of the cycle its waits reach
    turns = [i for i in range(len(loop)) if labels[i] != labels[i - 1]]  # rank loop[i - 1] waits for loop[i]
    i = next((i for i in turns if first in (loop[i - 1][0], loop[i][0])), turns[0])
    (a, a_group, _), (b, b_group, _) = loop[i - 1], loop[i]
    if b == first:
        (a, a_group), (b, b_group) = (b, b_group), (a, a_group)

    def called(rank, group):
        call, where = records[rank]["call"], f" in the group {list(group)}"
        return f"rank {rank} called {call}{'' if call.endswith(where) else where}"  # a subgroup's call names it

    ranks = [rank for rank, _, _ in loop]
    text = (f"{called(a, a_group)}, but {called(b, b_group)}; ranks {ranks} each wait for the next "
            f"({' -> '.join(map(str, ranks + ranks[:1]))}), so none of those calls can end")
    if path:
        _, group, _ = path[0]
        text = (f"rank {me} waits in {records[me]['call']} of the group {list(group)} for rank "
                f"{(path[1:] + loop)[0][0]}, which cannot go on: " + text)
    return text
