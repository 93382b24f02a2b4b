#!/usr/bin/env bash
# Upstream Iris's expert-sharded MoE example (examples/31_expert_sharded_moe of a ROCm/iris checkout) run against
# this repository's iris, on GPUs (the example starts one process per GPU with NCCL):
#   scripts/upstream_moe_example.sh UPSTREAM_CHECKOUT [NUM_RANKS]
# The example is copied to a temporary folder and run there; nothing of it enters this repository. Versions that
# import ``expert_assignment`` as a file of their own get it from ``iris.ccl.moe_utils``. A correct run ends with
# "PASSED: sharded MoE matches reference".
set -euo pipefail
upstream=${1:?usage: scripts/upstream_moe_example.sh UPSTREAM_CHECKOUT [NUM_RANKS]}
ranks=${2:-$(python3 -c "import torch; print(max(1, torch.cuda.device_count()))")}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
cp -r "$upstream/examples/31_expert_sharded_moe/." "$work/"
[ -f "$work/expert_assignment.py" ] || \
  echo "from iris.ccl.moe_utils import ExptAssignment, make_expt_assignment, make_expt_dict_uniform  # noqa: F401" \
    > "$work/expert_assignment.py"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset TRITON_INTERPRET
cd "$work"
PYTHONPATH="$repo" python3 example_run.py --num_ranks "$ranks" 2>&1 | tee "$work/log"
grep -q "^PASSED" "$work/log"
