#!/usr/bin/env bash
# The fused all-reduce + RMSNorm and the tensor-parallel decoder on a GPU machine, in one call:
#   benchmarks/tp_model_gpu.sh OUT_DIR [benchmarks/tp_model.py arguments...]
# 1. tests/test_rmsnorm.py and tests/test_tp_model.py at GPU sizes, 2. benchmarks/all_reduce_rmsnorm.py,
# 3. benchmarks/tp_model.py with the arguments given (default: Llama-3-8B shapes, 8 layers, every provider).
# With one GPU the two ranks share it (IRIS_BACKEND=simulation): correct results and relative figures only.
# Each step runs under its own limit (TESTS_S, NORM_S, MODEL_S seconds), so a slow step cannot hide the others.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
shift || true
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
export IRIS_TIMEOUT_S=${IRIS_TIMEOUT_S:-90} IRIS_TEST_WORLD_SIZES=2
unset TRITON_INTERPRET
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
[ "$gpus" -lt 2 ] && export IRIS_BACKEND=simulation
LOG="$OUT_DIR/log.txt"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: ${IRIS_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)} backend: ${IRIS_BACKEND:-cuda}"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$LOG"
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit} s)" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$LOG"
}
step tests "${TESTS_S:-120}" python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/test_rmsnorm.py \
  tests/test_tp_model.py -k "not subgroup"
# Where ranks share a GPU their kernels take turns on it (a few ms a call, each waiting for the other's time
# slice): fewer calls there, so the step ends in its limit.
norm_args=()
[ "${IRIS_BACKEND:-cuda}" = simulation ] && norm_args=(--calls 2 --reps 5)
step all_reduce_rmsnorm "${NORM_S:-50}" python3 benchmarks/all_reduce_rmsnorm.py --out "$OUT_DIR" ${norm_args[@]+"${norm_args[@]}"}
step tp_model "${MODEL_S:-120}" python3 benchmarks/tp_model.py --out "$OUT_DIR" "$@"
grep -E "^=== .*exit|passed|failed" "$LOG"
