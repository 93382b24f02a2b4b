"""Copy-engine transfers that a running kernel asks for: the kernel posts a descriptor to a ring, a host proxy
thread turns it into a real copy-engine transfer and its signal (NVSHMEM's design for peers it cannot reach with
SM instructions, and NCCL 2.30's zero-SM path): no SM moves the bytes.

    kernel (iris.copy_engine.put_async)            proxy thread (here)                     queue (peer, channel 0)
    ticket = head++ (device atomic)
    wait until ticket - consumed < SLOTS
    slot[ticket % SLOTS] = src, dst, bytes, signal
    slot.seq = ticket + 1 (release, sys)   ->  sees seq, reads the slot, consumed += 1  ->  copy, signal add,
                                                                                           done = ticket + 1
    iris.copy_engine.quiet: spin until done reaches head (acquire, sys)

The ring and ``consumed`` are in pinned host memory (the GPU writes and reads it over PCIe; the host polls it
without a copy), ``head`` and ``done`` in device memory (device atomics on host memory need PCIe atomics, which
hosts do not all have). A proxied transfer costs the proxy's poll and a copy's ~5 us issue: worth it for large
regions a kernel does not want to spend SMs on; small ones stay on the SMs (``iris.put``). On one GPU (simulation,
world size 1) the copy is the driver's kernel and the signal a one-thread kernel: a grid that spins in ``quiet``
must leave an SM free. On the cpu backend the same thread serves the interpreted kernels.
"""

import threading
import time

import torch

from iris.host.copy_engine.lanes import Signal

SLOTS = 1024
WORDS = 8  # seq, src, dst, bytes, signal address, signal value, signal bits, unused


class CopyProxy:
    def __init__(self, engines):
        self.engines = engines
        pin = engines.lane_type.PINNED
        self.ring = torch.zeros(SLOTS, WORDS, dtype=torch.int64, pin_memory=pin)
        self.consumed = torch.zeros(1, dtype=torch.int64, pin_memory=pin)
        self.counters = torch.zeros(2, dtype=torch.int32, device=engines.device)  # head, done (wrap-safe int32)
        self._bind = engines.lane_type.bind_thread()  # the proxy thread issues the lanes' driver calls
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iris-copy-proxy", daemon=True)
        self._thread.start()

    def words(self):
        """The proxy's part of the device context: ring, slots, head, consumed, done addresses."""
        head = self.counters.data_ptr()
        return [self.ring.data_ptr(), SLOTS, head, self.consumed.data_ptr(), head + 4]

    def _run(self):
        self._bind()
        ticket, pause = 0, 1e-6
        ring, consumed = self.ring.numpy(), self.consumed.numpy()  # numpy views: a poll is ~0.1 us of the GIL,
        done = self.counters[1:2]                                  # a torch index and int() ~5 us
        while not self._stop.is_set():
            slot = ring[ticket % SLOTS]
            if int(slot[0]) != ticket + 1:
                time.sleep(pause)
                pause = min(pause * 2, 1e-4)
                continue
            pause = 1e-6
            _, src, dst, nbytes, signal, value, bits, _ = slot.tolist()
            ticket += 1
            consumed[0] = ticket
            try:
                self.engines.proxied(src, dst, nbytes, signal=None if signal == 0 else Signal(signal, bits, value),
                                     done=done, ticket=ticket)
            except BaseException as e:  # a failing transfer: leave the error where quiet finds it
                self.engines.proxy_error = e
                return

    def close(self):
        self._stop.set()
        self._thread.join(timeout=1.0)
