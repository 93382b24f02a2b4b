#!/usr/bin/env bash
# The whole GPU tier in one call, for a machine with 2+ NVIDIA GPUs:
#   scripts/gpu_tier.sh [OUT_DIR]
# 1. the test suite at real sizes on the cuda backend (same test bodies as the CPU tier),
# 2. the microbenchmarks (benchmarks/run_all.py), including the 1 GiB put/get/store check,
# then a short summary table last. Full logs and results go to OUT_DIR (default $OUT or results-local).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
# NVLink multicast stays off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
export IRIS_TEST_WORLD_SIZES=${IRIS_TEST_WORLD_SIZES:-2}
unset TRITON_INTERPRET IRIS_BACKEND

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: ${IRIS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
} 2>&1 | tee "$OUT_DIR/environment.txt"

python3 -m pytest -q tests --ignore=tests/test_examples.py -p no:cacheprovider --junitxml="$OUT_DIR/gpu_tests.xml" \
  2>&1 | tee "$OUT_DIR/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}

bench_rc=0
if [ -f benchmarks/run_all.py ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 benchmarks/run_all.py --out "$OUT_DIR/microbench" 2>&1 | tee "$OUT_DIR/bench.log"
  bench_rc=${PIPESTATUS[0]}
fi

echo
echo "==================== GPU tier summary ===================="
cat "$OUT_DIR/environment.txt" | head -4
grep -E "passed|failed|error" "$OUT_DIR/gpu_tests.log" | tail -1
echo "tests exit code: $tests_rc, benchmarks exit code: $bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))
