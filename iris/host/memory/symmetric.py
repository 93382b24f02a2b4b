"""The context's methods on the symmetric heap (a part of ``Iris``): the device-side tables kernels take, whether a
tensor is on the heap (or on another provider's memory) and the table that translates it, the heap's statistics, and
the heap as a provider. They read ``self.heap``, ``self.heap_bases`` and ``self._device_context``."""

import functools
from typing import NamedTuple

import torch

from iris.host.memory.providers import HeapProvider, find


class HeapOperand(NamedTuple):
    """A tensor checked once to lie on this rank's heap (``ctx.on_heap``): its offset into the heap, and so its
    address on any rank whose heap is mapped here (``at``). A call passes it down instead of asking again."""

    tensor: torch.Tensor
    offset: int
    bases: list  # every rank's heap base in this process (Python ints, fixed for the context's life)

    def at(self, rank: int) -> int:
        """The address of the tensor's counterpart on ``rank`` (a rank whose heap is mapped here: the caller has
        checked it, ``ctx.check_direct``)."""
        return self.bases[rank] + self.offset


class SymmetricMethods:
    """Mixed into ``Iris`` (module docstring)."""

    def get_heap_bases(self) -> torch.Tensor:
        """int64[world_size] on the device: entry r is where rank r's heap appears in this process.
        Pass it to kernels that call the free device functions (``iris.load``, ``iris.put``, ...). Local.

        Example::

            bases = ctx.get_heap_bases()
            x = ctx.zeros(16)
            assert bases.shape == (world_size,) and int(bases[rank]) <= x.data_ptr()
        """
        self.check_open("Iris.get_heap_bases")
        return self.heap_bases

    def get_device_context(self) -> torch.Tensor:
        """int64 tensor for ``iris.DeviceContext.initialize`` and Gluon's ``IrisDeviceCtx.initialize``, laid out as
        upstream Iris's: ``[rank, world_size, heap_base_0, ..., heap_base_{W-1}, trace_enabled, max_events,
        event counter address, operation counter address, 13 trace buffer addresses]`` (the tracing words are
        zero until ``tracing.enable``), then the bytes each base addresses (read by debug mode). Local.

        Example::

            context = ctx.get_device_context()  # a kernel's iris.DeviceContext.initialize(context) reads it
            assert context[:2].tolist() == [rank, world_size]
            assert torch.equal(context[2:2 + world_size], ctx.get_heap_bases())
        """
        self.check_open("Iris.get_device_context")
        return self._device_context

    def is_symmetric(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` lies entirely in this rank's symmetric heap (a tensor of no elements does, wherever it
        is: it addresses no byte). Local.

        Example::

            assert ctx.is_symmetric(ctx.zeros(16))
            assert not ctx.is_symmetric(torch.zeros(16, device=ctx.get_device()))
        """
        self.check_open("Iris.is_symmetric")
        return self.heap.contains(tensor)

    def check_symmetric(self, tensor: torch.Tensor, caller: str, name: str = "tensor") -> torch.Tensor:
        """``tensor``, checked to lie on the heap: the first line of a host function whose kernel reaches a peer's
        counterpart of ``tensor``. Local.

        Raises ``ValueError`` naming ``caller`` and ``name`` when ``tensor`` is not on the heap (kernels would read a
        peer's garbage), ``iris.ClosedError`` once the context is closed.

        Example::

            x = ctx.zeros(16)
            assert ctx.check_symmetric(x, "mylib.exchange", "x") is x
            try:
                ctx.check_symmetric(torch.zeros(16), "mylib.exchange", "x")
                assert False, "unreachable: check_symmetric raises"
            except ValueError as e:
                assert str(e).startswith("mylib.exchange: x is not on the symmetric heap")
        """
        self.check_open(caller)
        if not self.heap.contains(tensor):
            where = f"on {tensor.device}" if isinstance(tensor, torch.Tensor) else f"a {type(tensor).__name__}"
            raise ValueError(f"{caller}: {name} is not on the symmetric heap ({where}); allocate it with "
                             "ctx.zeros(...) / ctx.empty(...), copy it there with ctx.as_symmetric(t), or map memory "
                             "of another provider with iris.TorchSymmMemProvider or iris.wrap_symmetric")
        return tensor

    def on_heap(self, tensor: torch.Tensor, caller: str, name: str = "tensor") -> HeapOperand:
        """``tensor`` checked to lie on the heap, as a ``HeapOperand``: its offset into the heap, and ``at(rank)``, the
        address of its counterpart on a rank whose heap is mapped here. Local. Raises ``check_symmetric``'s errors.

        Example::

            x = ctx.zeros(16)
            operand = ctx.on_heap(x, "mylib.exchange", "x")
            assert operand.at(rank) == x.data_ptr() and operand.offset == x.data_ptr() - int(ctx.get_heap_bases()[rank])
        """
        self.check_symmetric(tensor, caller, name)
        bases = self.heap.bases
        return HeapOperand(tensor, tensor.data_ptr() - bases[self.heap.rank], bases)

    def symmetric_table(self, tensor: torch.Tensor, caller: str, name: str = "tensor") -> torch.Tensor:
        """The bases table kernels translate ``tensor`` with: ``heap_bases`` for a heap tensor; for memory of another
        provider (``TorchSymmMemProvider``, ``wrap_symmetric``), the ``peer_bases`` of the live map whose allocation
        holds it, which must span the whole world in rank order. Local.

        Raises ``check_symmetric``'s errors for a tensor in neither, and ``ValueError`` for provider memory mapped
        over other ranks than the world.

        Example::

            x = ctx.zeros(16)
            assert torch.equal(ctx.symmetric_table(x, "mylib.exchange", "x"), ctx.get_heap_bases())
        """
        self.check_open(caller)
        if self.heap.contains(tensor) or not isinstance(tensor, torch.Tensor):
            self.check_symmetric(tensor, caller, name)
            return self.heap_bases
        address = find(tensor)
        if address is None:
            self.check_symmetric(tensor, caller, name)
        if address.world_size != self.num_ranks or address.local_rank != self.cur_rank:
            raise ValueError(f"{caller}: {name} comes from a provider's allocation over {address.world_size} ranks with "
                             f"this rank at {address.local_rank}; the collectives take provider memory mapped over "
                             f"the whole world ({self.num_ranks} ranks, this one at {self.cur_rank}): make it over "
                             "the default group")
        return address.peer_bases

    def memory_stats(self) -> dict[str, int]:
        """This rank's heap in the spirit of ``torch.cuda.memory_stats``: ``allocated_bytes.all.current`` /
        ``.peak`` (bytes in live tensors and whole-world workspaces, including tensors dropped here but not yet
        on every rank), ``reserved_bytes.all.current`` / ``.peak`` (bytes mapped: the heap's size, which grows
        with ``allocator_type="vmem"``), counts of allocations, frees, agreements and growths, ``held_by_graphs``
        (allocations made during CUDA graph captures whose graphs live: not reused, dropped or not), and
        ``workspace_bytes`` (whole-world ones on the heap, subgroup ones in the workspace area). Local, cheap.

        Example::

            before = ctx.memory_stats()["allocated_bytes.all.current"]
            x = ctx.zeros(1024)  # 4 KiB
            assert ctx.memory_stats()["allocated_bytes.all.current"] >= before + 4096
        """
        self.check_open("Iris.memory_stats")
        stats = self.heap.memory_stats()
        stats["workspace_bytes"] = self.workspaces.bytes()
        return stats

    def empty_cache(self) -> None:
        """Collective over every rank. Collect this rank's garbage (tensors in reference cycles) and return to
        the heap every tensor all ranks have dropped, and the workspaces and sync flags of every group whose
        ProcessGroups every member has dropped; ``memory_stats`` then shows what is live.

        Raises ``RuntimeError`` during a CUDA graph capture (returning bytes is an agreement between ranks, which a
        capture cannot record).

        Example::

            x = ctx.zeros(1024)
            del x  # on every rank
            ctx.empty_cache()
            assert ctx.memory_stats()["dropped_awaiting_peers"] == 0
        """
        import gc

        self.check_open("Iris.empty_cache")
        gc.collect()
        self.heap.reclaim("Iris.empty_cache")

    def allocate_symmetric(self, *size: int,
                           dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Collective. An uninitialised heap tensor and int64[world_size] ``peer_bases`` on the device:
        entry r is the address of this tensor on rank r (entry ``cur_rank`` is its own ``data_ptr()``). The same
        shape as every provider's (``iris/host/memory/providers.py``), so one kernel serves them all. Raises the
        errors of ``empty``.

        Example::

            x, peer_bases = ctx.allocate_symmetric(4, 8, dtype=torch.float16)
            assert x.shape == (4, 8) and peer_bases.shape == (world_size,)
            assert int(peer_bases[rank]) == x.data_ptr()
        """
        return self.provider.allocate_symmetric(*size, dtype=dtype)

    @functools.cached_property
    def provider(self):
        """This context's heap as a symmetric-memory provider (``iris/host/memory/providers.py``):
        ``allocate_symmetric_map`` and ``symmetric_address_map(tensor)`` give a tensor's ``SymmetricAddressMap``."""
        return HeapProvider(self)
