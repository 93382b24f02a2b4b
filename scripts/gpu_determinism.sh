#!/usr/bin/env bash
# The order rule on one GPU: the determinism tests at GPU sizes (2, 3 and 4 ranks sharing the GPU), the fused
# ops' tests, and the one-shot all_reduce latency at world size 1 and 2, before and after, when a copy of the
# previous package lies in .before/iris (``git archive <commit> iris | tar -x -C .before``):
#   scripts/gpu_determinism.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
log="$OUT_DIR/determinism.log"
: > "$log"
IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation PYTHONPATH="$PWD" timeout 300 python3 -m pytest -q -rfE --tb=short \
  -p no:cacheprovider tests/test_determinism.py 2>&1 | tee -a "$log" | tail -3
IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation IRIS_TEST_WORLD_SIZES=2 PYTHONPATH="$PWD" timeout 240 python3 -m pytest \
  -q -rfE --tb=short -p no:cacheprovider tests/test_ops.py -k "fused_ops" 2>&1 | tee -a "$log" | tail -3
for tree in .before .; do
  [ -d "$tree/iris" ] || continue
  tag=$([ "$tree" = . ] && echo after || echo before)
  PYTHONPATH="$PWD/$tree" timeout 60 python3 scripts/all_reduce_latency.py "$tag" 1 2>&1 | tee -a "$log" | grep LAT
  IRIS_BACKEND=simulation PYTHONPATH="$PWD/$tree" timeout 90 python3 scripts/all_reduce_latency.py "$tag" 2 2>&1 \
    | tee -a "$log" | grep LAT
done
echo "== summary"; grep -E "^LAT|passed|failed" "$log"
