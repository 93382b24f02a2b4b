# Sourced by the one-GPU scripts that run test files at GPU sizes (scripts/gpu_owed.sh, scripts/gpu_recheck.sh):
#   source "$(dirname "$0")/gpu_harness.sh" "$@"
# Moves to the checkout, sets OUT_DIR (the first argument, else $OUT, else results-local) and the environment every
# GPU run keeps (NVLink multicast off), and defines `tests LABEL SECONDS FILES_AND_OPTIONS...`: pytest at GPU sizes
# with ranks sharing the GPU (IRIS_BACKEND=simulation), its log in OUT_DIR/LABEL.log and one line in `summary`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
PYTEST="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider"
summary=()
tests() {  # label, seconds, files and options
  local label=$1 seconds=$2; shift 2
  IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation timeout "$seconds" $PYTEST "$@" > "$OUT_DIR/$label.log" 2>&1
  summary+=("$label: exit $?, $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/$label.log" | tail -1)")
}
