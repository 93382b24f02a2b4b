#!/usr/bin/env bash
# Upstream Iris's expert-sharded MoE example (examples/31_expert_sharded_moe) and its test
# (tests/examples/test_expert_sharded_moe.py, the unfused and the fused grouped-matmul + combine modes) run against
# this repository's iris:
#   scripts/upstream_moe_example.sh UPSTREAM_DIR [OUT_DIR]
# UPSTREAM_DIR is a checkout of ROCm/iris (or a folder holding those two paths). They are copied to a scratch folder
# and run there with this checkout first on PYTHONPATH; nothing of them enters this repository. RANKS (default 2)
# ranks; the example's own launcher (mp.spawn, NCCL, one GPU per rank) and the test under torchrun.
#   - One GPU per rank: everything unchanged.
#   - Fewer GPUs than ranks (one H200): IRIS_BACKEND=simulation, and a harness sitecustomize (the stand-in for a
#     machine with RANKS GPUs, not a change to the library or to the example): torch.cuda.set_device(r) picks
#     r % GPUs, the process group is gloo instead of NCCL (NCCL refuses two ranks on one GPU) and its collectives
#     on CUDA tensors go through host copies. One textual change to the copies, printed below:
#     torch.device(f"cuda:{rank}") becomes cuda:{rank % GPUs}. The example also runs unchanged at world size 1.
#   - No GPU: the cpu backend; only the test runs (the example's launcher needs NCCL and CUDA), with the harness
#     making device="cuda..." tensors on the cpu and torch.cuda.synchronize a no-op.
# Prints one "UPSTREAM <what>: <result>" line per run; a correct run on one H200 prints
#   UPSTREAM example W=1: PASSED: sharded MoE matches reference
#   UPSTREAM example W=2: PASSED: sharded MoE matches reference
#   UPSTREAM test W=2: 2 passed
set -uo pipefail
src=${1:?usage: scripts/upstream_moe_example.sh UPSTREAM_DIR [OUT_DIR]}
src=$(cd "$src" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${2:-${OUT:-$repo/results-local}}
mkdir -p "$OUT_DIR"
ranks=${RANKS:-2}
work=$(mktemp -d /tmp/upstream-moe-XXXX)
trap 'rm -rf "$work"' EXIT
example=examples/31_expert_sharded_moe
test=tests/examples/test_expert_sharded_moe.py
for path in "$example/example_run.py" "$example/moe.py" "$test"; do
  [ -f "$src/$path" ] || { echo "UPSTREAM: $src has no $path"; exit 1; }
done
for tree in tree shared; do  # tree: as upstream has it; shared: with the one change for ranks sharing a GPU
  mkdir -p "$work/$tree/examples" "$work/$tree/tests/examples"
  cp -r "$src/$example" "$work/$tree/examples/"
  cp "$src/$test" "$work/$tree/tests/examples/"
done
mkdir -p "$work/site"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$repo:$work/site"
unset TRITON_INTERPRET
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
[ "$gpus" -ge 1 ] || export IRIS_BACKEND=cpu TRITON_INTERPRET=1  # upstream's files import triton before iris
sharing=$([ "$gpus" -ge 1 ] && [ "$gpus" -lt "$ranks" ] && echo 1 || echo 0)

cat > "$work/site/sitecustomize.py" <<'PY'
# The harness (scripts/upstream_moe_example.sh), not upstream's code and not iris: the machine it stands in for.
import os

if os.environ.get("MOE_HARNESS") == "share":  # fewer GPUs than ranks
    import functools

    import torch
    import torch.distributed as dist

    _set_device = torch.cuda.set_device

    def set_device(device):
        index = device if isinstance(device, int) else torch.device(device).index
        return _set_device(index % torch.cuda.device_count())

    torch.cuda.set_device = set_device
    _init = dist.init_process_group

    def init_process_group(*args, **kwargs):
        kwargs.pop("backend", None)
        kwargs.pop("device_id", None)
        return _init("gloo", *args[1:], **kwargs)  # NCCL refuses two ranks on one GPU

    dist.init_process_group = init_process_group

    def _through_host(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            cuda = [a for a in args if isinstance(a, torch.Tensor) and a.is_cuda]
            if not cuda:
                return fn(*args, **kwargs)
            host = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
            result = fn(*host, **kwargs)
            for a, h in zip(args, host):
                if isinstance(a, torch.Tensor) and a.is_cuda:
                    a.copy_(h)
            return result
        return call

    for _name in ("broadcast", "all_gather_into_tensor", "all_reduce"):
        setattr(dist, _name, _through_host(getattr(dist, _name)))
elif os.environ.get("MOE_HARNESS") == "cpu":  # no GPU: device="cuda..." tensors on the cpu
    import functools

    import torch

    def _on_cpu(fn):
        @functools.wraps(fn)
        def made(*args, **kwargs):
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return fn(*args, **kwargs)
        return made

    for _name in ("ones", "zeros", "full", "empty", "tensor", "arange", "randn", "rand", "randint"):
        setattr(torch, _name, _on_cpu(getattr(torch, _name)))
    _to = torch.Tensor.to

    def to(self, *args, **kwargs):
        args = tuple("cpu" if str(a).startswith("cuda") else a for a in args)
        return _to(self, *args, **kwargs)

    torch.Tensor.to = to
    torch.cuda.synchronize = lambda *args, **kwargs: None
PY

# The test's process group, initialised from torchrun's environment (upstream's own runner does this)
cat > "$work/site/moe_upstream_dist.py" <<'PY'
import os

import torch
import torch.distributed as dist


def pytest_configure(config):
    if "RANK" in os.environ and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
PY

for f in "$work/shared/$example/example_run.py" "$work/shared/$test"; do
  sed -i -E 's/torch\.device\(f"cuda:\{rank\}"\)/torch.device(f"cuda:{rank % torch.cuda.device_count()}")/' "$f"
  [ "$sharing" = 1 ] && grep -n 'rank % torch.cuda.device_count()' "$f" | sed "s|^|changed ${f#$work/shared/}:|"
done
harness=none; tree=tree
if [ "$sharing" = 1 ]; then
  harness=share; tree=shared
elif [ "$gpus" -lt 1 ]; then
  harness=cpu
fi

log="$OUT_DIR/upstream_moe.log"
: > "$log"
rc=0
run_example() {  # world size
  local w=$1 out="$work/example_w$1.log" where=tree mode=none backend=cuda
  [ "$w" -gt "$gpus" ] && { where=shared; mode=share; backend=simulation; }
  (cd "$work/$where/$example" && MOE_HARNESS=$mode IRIS_BACKEND=$backend \
     timeout 45 python3 example_run.py --num_ranks "$w") > "$out" 2>&1
  cat "$out" >> "$log"
  local verdict
  verdict=$(grep -E "^(PASSED|FAILED)" "$out" | tail -1)
  echo "UPSTREAM example W=$w: ${verdict:-no verdict (see $log)}"
  [[ "$verdict" == PASSED* ]] || rc=1
}
if [ "$gpus" -ge 1 ]; then
  run_example 1
  run_example "$ranks"
fi
backend=${IRIS_BACKEND:-}
[ "$sharing" = 1 ] && backend=simulation
(cd "$work/$tree" && MOE_HARNESS=$harness IRIS_BACKEND=$backend timeout 70 \
   python3 -m torch.distributed.run --standalone --nproc_per_node="$ranks" \
   -m pytest -q -p moe_upstream_dist -p no:cacheprovider "$test") > "$work/test.log" 2>&1
cat "$work/test.log" >> "$log"
summary=$(grep -E "[0-9]+ (passed|failed|error)" "$work/test.log" | tail -1)
echo "UPSTREAM test W=$ranks: ${summary:-no summary (see $log)}"
[[ "$summary" == *passed* && "$summary" != *failed* && "$summary" != *error* ]] || rc=1
exit $rc
