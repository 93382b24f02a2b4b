#!/usr/bin/env bash
# Code written for upstream Iris, on one H200 (ranks share it: IRIS_BACKEND=simulation) and at world size 1:
#   bash scripts/gpu_compat.sh                          # ~2 minutes
#   UPSTREAM=.upstream bash scripts/gpu_compat.sh       # + upstream's examples and tests: at most 5 minutes in all
# QUICK=1 runs 2 at world size 1 and 3 only; UPSTREAM_TIMEOUT_S bounds 3 (150 s).
# (UPSTREAM: a tree of upstream Iris's examples/ and tests/, relative to the repository root or absolute.)
# 1. tests/test_compat.py at GPU sizes (upstream's and torch's layouts, both shardings of the gather ops, a dropped
#    context freed, upstream's names, AMD-only launch options through the CUDA launcher), 2 and 3 ranks sharing;
# 2. twelve 8 GiB contexts made and dropped (scripts/compat_dropped_contexts.py), 2 ranks sharing and 1 rank;
# 3. with UPSTREAM set: upstream's examples and its test_functional.py / test_process_group.py, unchanged
#    (scripts/run_upstream.py), 2 ranks sharing the GPU, UPSTREAM_JOBS (4) runs at once, each under its own timeout
#    (60 s an example, 140 s a test file; the compile test makes 24 contexts of 8 GiB and compiles 24 graphs; at 6
#    runs at once example 12 once ran out of memory beside it: 8 GiB heaps a rank).
# Writes under $OUT (tests.log, dropped.log, upstream.log, upstream.json); prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-results-local}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
unset TRITON_INTERPRET

: > "$OUT_DIR/tests.log"
: > "$OUT_DIR/dropped.log"
t_sim="skipped (QUICK=1)"; t_drop=$t_sim
if [ "${QUICK:-0}" != 1 ]; then
  IRIS_BACKEND=simulation timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_compat.py \
    >> "$OUT_DIR/tests.log" 2>&1
  t_sim="exit $?, $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/tests.log" | head -1)"
  IRIS_BACKEND=simulation timeout 35 python3 scripts/compat_dropped_contexts.py --world-size 2 --count 12 \
    --heap-mib 8192 >> "$OUT_DIR/dropped.log" 2>&1
  t_drop="exit $?, $(grep 'dropped contexts' "$OUT_DIR/dropped.log")"
fi
IRIS_BACKEND=cuda timeout 90 python3 scripts/compat_dropped_contexts.py --world-size 1 --count 12 \
  --heap-mib 8192 >> "$OUT_DIR/dropped.log" 2>&1
t_one=$?
t_up="skipped (UPSTREAM unset)"
if [ -n "${UPSTREAM:-}" ]; then
  IRIS_BACKEND=simulation timeout "${UPSTREAM_TIMEOUT_S:-150}" python3 scripts/run_upstream.py "$UPSTREAM" \
    --world-size 2 --jobs "${UPSTREAM_JOBS:-4}" --timeout 60 --test-timeout 140 --json "$OUT_DIR/upstream.json" \
    > "$OUT_DIR/upstream.log" 2>&1
  t_up="exit $?"
fi

echo
echo "=== gpu_compat summary"
printf '%-44s %s\n' "tests/test_compat.py (2 ranks share the GPU)" "$t_sim"
printf '%-44s %s\n' "12 dropped 8 GiB contexts, 2 ranks sharing" "$t_drop"
printf '%-44s %s\n' "12 dropped 8 GiB contexts, world size 1" \
  "exit $t_one, $(grep 'dropped contexts' "$OUT_DIR/dropped.log" | tail -1)"
grep -E "^round" "$OUT_DIR/dropped.log" | tail -12
printf '%-44s %s\n' "upstream examples and tests" "$t_up"
[ -s "$OUT_DIR/upstream.log" ] && sed -n '/^upstream Iris against/,$p' "$OUT_DIR/upstream.log"
exit 0
