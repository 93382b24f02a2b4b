#!/usr/bin/env bash
# Upstream Iris's copy-engine tests and host-initiated example, unchanged, against this library:
#   scripts/upstream_copy_engine.sh UPSTREAM_CHECKOUT [OUT_DIR]
# UPSTREAM_CHECKOUT is a checkout of ROCm/iris holding tests/unittests/test_copy_engine_ops.py,
# tests/unittests/test_optional_sdma.py and examples/06_message_passing/message_passing_host_initiated.py. They are
# copied into a scratch tree (so that their own paths never put upstream's package on the path) and run with this
# checkout's iris first on PYTHONPATH, two ranks under torchrun (gloo on the cpu backend, one process per rank):
# - test_copy_engine_ops.py comes from the era when the copy engine was always on, so it runs with
#   IRIS_ENABLE_COPY_ENGINE=1 (upstream's own switch). Eleven of its fifteen cases pass copy_engine_ctx to the
#   device put as the sixth positional argument, where the contract (and upstream's later put) has mask, and then
#   mask= again: that call cannot bind, and a case failing on one rank leaves the other in a barrier. So by default
#   only the four that bind run (host put, copy-engine atomic_add and atomic_cas); UPSTREAM_ALL=1 runs all;
# - test_optional_sdma.py runs with the default (off);
# - the example starts its own two ranks (mp.spawn) and binds rank r's process group to cuda:r, so on GPUs it needs
#   two (with one it is not run); it runs with a small heap (-p) and passes when it logs "Validation successful";
# - without a GPU everything runs on the cpu backend, scripts/upstream_cuda_shim.py answering the files' torch.cuda
#   calls (device="cuda" tensors on the CPU, nccl and its device_id as gloo with none).
# Prints one line per file with its pass/fail/skip counts, and a total.
set -uo pipefail
UP=${1:?usage: scripts/upstream_copy_engine.sh UPSTREAM_CHECKOUT [OUT_DIR]}
UP=$(cd "$UP" && pwd)
cd "$(dirname "$0")/.."
OUT_DIR=${2:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/upstream_copy_engine.log"
: > "$LOG"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)  # before the stand-in
# shellcheck source=scripts/upstream_harness.sh
source scripts/upstream_harness.sh
harness_init iris-upstream  # without a GPU: the cpu backend and the CUDA stand-in
SCRATCH=$work
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/tests/unittests" "$SCRATCH/examples"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export IRIS_LOG_LEVEL=INFO  # the example reports through iris's logger (ctx.info)
summary=""
port=29611

run_tests() {  # name, pytest -k expression (or ""), env assignments...
  local name=$1 select=$2; shift 2
  local src="$UP/tests/unittests/$name"
  if [ ! -f "$src" ]; then summary+="$name: missing in $UP"$'\n'; return; fi
  cp "$src" "$SCRATCH/tests/unittests/"
  port=$((port + 1))
  echo "=== $name ($* ${select:+-k $select})" >> "$LOG"
  (cd "$SCRATCH" && env "$@" timeout ${UPSTREAM_TIMEOUT_S:-300} torchrun --nproc-per-node=2 --master-port=$port \
      -m pytest -q -p no:cacheprovider ${select:+-k "$select"} "tests/unittests/$name" >> "$LOG" 2>&1)
  # each rank prints its own pytest summary; report rank 0's (the first)
  local line
  line=$(grep -E "[0-9]+ (passed|failed|skipped|error)" "$LOG" | tail -n 2 | head -n 1)
  summary+="$name: ${line:-no pytest summary (see $LOG)}"$'\n'
}

bound="host_put or atomic_add or atomic_cas"
run_tests test_copy_engine_ops.py "$([ "${UPSTREAM_ALL:-0}" = 1 ] || echo "$bound")" IRIS_ENABLE_COPY_ENGINE=1
run_tests test_optional_sdma.py "" IRIS_ENABLE_COPY_ENGINE=

example="$UP/examples/06_message_passing/message_passing_host_initiated.py"
if [ "$gpus" -eq 1 ]; then
  summary+="message_passing_host_initiated.py: not run (it binds rank 1 to cuda:1: two GPUs)"$'\n'
elif [ -f "$example" ]; then
  cp "$example" "$SCRATCH/examples/"
  echo "=== message_passing_host_initiated.py" >> "$LOG"
  (cd "$SCRATCH" && IRIS_ENABLE_COPY_ENGINE=1 IRIS_BACKEND=${IRIS_BACKEND:-cuda} timeout 300 \
      python examples/message_passing_host_initiated.py -p $((1 << 26)) -s 1048576 -b 4096 >> "$LOG" 2>&1)
  if grep -q "Validation successful" "$LOG"; then
    summary+="message_passing_host_initiated.py: passed"$'\n'
  else
    summary+="message_passing_host_initiated.py: FAILED (see $LOG)"$'\n'
  fi
fi
printf "%s" "$summary" | tee -a "$LOG"
