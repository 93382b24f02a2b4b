"""The collectives across nodes: iris kernels inside each node (``hierarchical.py``), torch.distributed on each
rank's rail between them (``rail.py``)."""
