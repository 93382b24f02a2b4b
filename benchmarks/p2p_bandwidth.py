"""Point-to-point bandwidth: load / store / get / put between every pair of GPUs.

    python benchmarks/p2p_bandwidth.py --out DIR [--quick]

A curve over buffer size (4 KiB .. 2 GiB) for rank 0 with rank 1, and the rank x rank matrix at 1 GiB
(row = the rank that runs the transfer, column = the peer whose memory it reads or writes), each for
iris, the copy engine (tensor.copy_ to/from a view of the peer's heap) and a raw-pointer Triton kernel.
Writes DIR/p2p.{csv,json,md} and DIR/p2p_curves.png.
"""

from iris.bench.suite import cli

if __name__ == "__main__":
    cli(parts=("p2p",), stem="p2p", description=__doc__)
