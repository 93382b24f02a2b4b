"""Copy-engine throughput of the transfers the fused ops queue (``iris/host/copy_engine/queue.py``), 2 GPUs, both
ranks copying to each other at once as the ops do: one copy per band of matmul_all_gather's column block (2-D,
rows narrower than the pitch) against contiguous copies of the same bytes, on one side stream and spread over
several.

    python benchmarks/copy_engine.py          # needs 2 GPUs
"""

import iris  # first: it picks the backend
import torch

from iris.platform import cuda_driver
from iris.host.memory.peers import peer_view

# (name, bytes per row, rows per copy, pitch (None: one contiguous copy), copies, side streams)
CASES = (
    ("1-D 3.67 MB x8", 1792 * 2 * 1024, 1, None, 8, 1),
    ("2-D 1024 x 3584 B, pitch 7168 x8", 1792 * 2, 1024, 3584 * 2, 8, 1),
    ("2-D 1024 x 8192 B, pitch 16384 x4", 4096 * 2, 1024, 8192 * 2, 4, 1),
    ("2-D 1024 x 3584 B, pitch 7168 x8, 2 streams", 1792 * 2, 1024, 3584 * 2, 8, 2),
    ("2-D 1024 x 3584 B, pitch 7168 x8, 4 streams", 1792 * 2, 1024, 3584 * 2, 8, 4),
    ("2-D 128 x 3584 B, pitch 7168 x64", 1792 * 2, 128, 3584 * 2, 64, 1),
)


def body():
    ctx = iris.iris(heap_size=1 << 30)
    if ctx.get_device().type != "cuda" or ctx.get_num_ranks() != 2:
        raise SystemExit("benchmarks/copy_engine.py: needs the cuda backend and 2 ranks")
    rank, peer = ctx.get_rank(), 1 - ctx.get_rank()
    out = ctx.empty(8192, 8192, dtype=torch.bfloat16).normal_()  # room for every case's rows
    theirs = peer_view(ctx, out, peer)
    streams = [torch.cuda.Stream() for _ in range(4)]
    main = torch.cuda.current_stream()
    rows = []
    for name, width, height, pitch, count, used in CASES:
        src0, dst0 = out.data_ptr() + rank * width, theirs.data_ptr() + rank * width

        def issue():
            for s in streams[:used]:
                s.wait_stream(main)
            for i in range(count):
                stream, offset = streams[i % used], i * height * (pitch or width)
                cuda_driver.copy_2d(dst0 + offset, pitch or width, src0 + offset, pitch or width, width, height,
                                    stream.cuda_stream)
            for s in streams[:used]:
                main.wait_stream(s)

        for _ in range(3):
            issue()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(10):
            ctx.barrier()  # both ranks copy at once
            start.record()
            issue()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        ms = sorted(times)[len(times) // 2]
        nbytes = count * width * height
        rows.append(f"rank {rank} {name:45s} {nbytes / 1e6:7.2f} MB {ms * 1e3:8.1f} us {nbytes / ms / 1e6:7.1f} GB/s")
    ctx.barrier()
    return rows


if __name__ == "__main__":
    for lines in iris.host.launcher.run(body, 2):
        print("\n".join(lines))
