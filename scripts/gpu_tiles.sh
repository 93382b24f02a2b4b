#!/usr/bin/env bash
# The tile API (iris.x) on one GPU:
#   scripts/gpu_tiles.sh [UPSTREAM_CHECKOUT]
# 1. tests/test_x.py at GPU sizes (1031 x 517, 64 x 64 tiles) with IRIS_BACKEND=simulation: 2 and 3 ranks share
#    the GPU; then at world size 1 on the cuda backend;
#    then tests/test_rma.py (remote accesses without hint, now 16-byte vectors) with two ranks on the GPU;
# 2. examples/38_tile_api.py at 2 ranks (simulation) and at world size 1;
# 3. with UPSTREAM_CHECKOUT (a checkout of upstream Iris; nothing of it is copied here): each of its examples that
#    imports iris.x, unchanged, under torchrun at world size 1 with --validate (its own main calls
#    torch.cuda.set_device(LOCAL_RANK), which on one GPU only rank 0 can satisfy).
# Full logs go to $OUT (or results-local/tiles): tests.log, examples.log, upstream.log, summary.txt; the table last.
set -uo pipefail
cd "$(dirname "$0")/.."
UPSTREAM=${1:-}
OUT_DIR=${OUT:-results-local/tiles}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
unset TRITON_INTERPRET
rows=()
: > "$OUT_DIR/tests.log"; : > "$OUT_DIR/examples.log"; : > "$OUT_DIR/upstream.log"

run_tests() {  # label, backend, world sizes
  echo "=== tests/test_x.py $1" >> "$OUT_DIR/tests.log"
  IRIS_BACKEND=$2 IRIS_X_WORLD_SIZES=$3 timeout 150 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider \
    tests/test_x.py >> "$OUT_DIR/tests.log" 2>&1
  rows+=("tests $1|exit $?|$(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/tests.log" | tail -1)")
}
run_tests "simulation W=2,3" simulation 2,3
run_tests "cuda W=1" cuda 1
# translate() without a hint now emits 16-byte remote accesses: the RMA tests on real pointers, two ranks on the GPU
echo "=== tests/test_rma.py tests/test_translate.py simulation" >> "$OUT_DIR/tests.log"
IRIS_BACKEND=simulation timeout 90 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/test_rma.py \
  tests/test_translate.py >> "$OUT_DIR/tests.log" 2>&1
rows+=("tests rma+translate simulation|exit $?|$(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/tests.log" | tail -1)")

for w in 2 1; do
  backend=$([ "$w" = 1 ] && echo cuda || echo simulation)
  echo "=== examples/38_tile_api.py W=$w ($backend)" >> "$OUT_DIR/examples.log"
  IRIS_BACKEND=$backend timeout 60 python3 examples/38_tile_api.py --world-size "$w" --m 1000 --n 520 --k 1024 \
    --rounds 3 >> "$OUT_DIR/examples.log" 2>&1
  rows+=("38_tile_api W=$w|exit $?|$(grep -o 'tile_api: .*' "$OUT_DIR/examples.log" | tail -1 | cut -c1-60)")
done

if [ -n "$UPSTREAM" ]; then
  for path in $(grep -l "^import iris.x" "$UPSTREAM"/examples/*/*.py 2>/dev/null | sort); do
    name=$(basename "$(dirname "$path")")/$(basename "$path")
    echo "=== $name" >> "$OUT_DIR/upstream.log"
    (cd "$(dirname "$path")" && timeout 60 torchrun --nproc-per-node=1 --standalone "$(basename "$path")" --validate) \
      >> "$OUT_DIR/upstream.log" 2>&1
    rc=$?
    why=$(grep -E "Validation passed|Error|error" "$OUT_DIR/upstream.log" | tail -1 | cut -c1-70)
    rows+=("upstream $name W=1|exit $rc|$why")
  done
fi

{
  echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  printf '%-48s | %-7s | %s\n' what result detail
  for row in "${rows[@]}"; do IFS='|' read -r a b c <<< "$row"; printf '%-48s | %-7s | %s\n' "$a" "$b" "$c"; done
} | tee "$OUT_DIR/summary.txt"
