"""All-load / all-store: every rank reads from (writes to) all of its peers at once.

    python benchmarks/all_load_store.py --out DIR [--quick]

Beside the copy engine (one copy per peer, each on its own stream) and torch.distributed's all_gather.
Bandwidth counts the bytes one GPU receives (all-load) or sends (all-store) over all its links.
Writes DIR/all.{csv,json,md} and DIR/all_curves.png.
"""

from iris.bench.suite import cli

if __name__ == "__main__":
    cli(parts=("all",), stem="all", description=__doc__)
