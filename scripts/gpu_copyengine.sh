#!/usr/bin/env bash
# The copy-engine API on one GPU, in one call (about 3 minutes on one H200):
#   bash scripts/gpu_copyengine.sh [OUT_DIR]
# 1. tests/test_copy_engine_api.py and tests/test_copy_schedule.py at GPU sizes, in simulation (2 ranks on the one
#    GPU: their copies are the driver's copies within it) and at world size 1;
# 2. benchmarks/copy_engine_api.py (put 4 KiB..1 GiB against Tensor.copy_, the flags' cost at 4 KiB, put_tiles of 64
#    tiles against 64 put_tile, a transfer a running kernel releases);
# 3. upstream Iris's copy-engine tests and host-initiated example (scripts/upstream_copy_engine.sh), when
#    UPSTREAM_IRIS names a checkout of ROCm/iris;
# then a short table. Full output in OUT_DIR (default $OUT or results-local): copy_engine_gpu.log,
# copy_engine_api.csv / .json, upstream_copy_engine.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
unset TRITON_INTERPRET
LOG="$OUT_DIR/copy_engine_gpu.log"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: ${IRIS_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
} > "$LOG" 2>&1
table=""
run() {  # label, command...
  local label=$1; shift
  echo "=== $label: $*" >> "$LOG"
  local start=$SECONDS
  "$@" >> "$LOG" 2>&1
  local rc=$?
  local line
  line=$(tail -n 40 "$LOG" | grep -E "[0-9]+ (passed|failed|error)" | tail -n 1)
  table+=$(printf "%-34s rc=%-3s %4ss  %s" "$label" "$rc" "$((SECONDS - start))" "$line")$'\n'
}
TESTS="tests/test_copy_engine_api.py tests/test_copy_schedule.py"
run "tests, simulation, 2 ranks" env IRIS_BACKEND=simulation IRIS_TEST_WORLD_SIZES=2 \
  timeout 150 python3 -m pytest -q -x $TESTS
run "tests, world size 1" env IRIS_TEST_WORLD_SIZES=1 timeout 90 python3 -m pytest -q -x -k "not peer_error" \
  tests/test_copy_engine_api.py
run "benchmark copy_engine_api" timeout 150 python3 benchmarks/copy_engine_api.py --out "$OUT_DIR"
if [ -n "${UPSTREAM_IRIS:-}" ]; then
  run "upstream tests + example" env UPSTREAM_TIMEOUT_S=120 bash scripts/upstream_copy_engine.sh "$UPSTREAM_IRIS" "$OUT_DIR"
  table+=$(grep -E "^(test_|message_passing)" "$OUT_DIR/upstream_copy_engine.log" | tail -n 3)$'\n'
else
  table+="upstream tests + example: not run (set UPSTREAM_IRIS to a ROCm/iris checkout)"$'\n'
fi
echo
sed -n '/^copy-engine API/,$p' "$LOG" | grep -v "^===" | head -n 40
echo
printf "%s" "$table" | tee -a "$LOG"
