#!/usr/bin/env bash
# What one H100/H200 still owes the CPU tier's latest changes, in two calls of about 6 minutes each:
#   PARTS=ccl bash scripts/gpu_recheck.sh [OUT_DIR]
#   PARTS=rest bash scripts/gpu_recheck.sh [OUT_DIR]
# ccl: the collectives at GPU sizes, ranks sharing the GPU (IRIS_BACKEND=simulation): reduce_scatter_v, the one-shot
#   all_reduce (its data phase in device/group.reduce_blocks; all_reduce and all_reduce_staged sharing their checks),
#   every collective x 6 dtypes at 2 and 4 ranks (about 20 s a case, most of it compiling);
# rest: the torch backend's uneven reduce_scatter and the records; the fused ops' records against their references,
#   the tracing switch (tracing.disable), iris.x (the spinlock's bounded turn), the device copy-engine functions
#   (wait_then_put_rect's bounded gate), the RMA tests; the tutorials as scripts.
# Logs under OUT_DIR (default $OUT or results-local); the summary last, within DEADLINE_S (default 540) seconds.
# shellcheck source=scripts/gpu_harness.sh
source "$(dirname "$0")/gpu_harness.sh" "$@"
PARTS=${PARTS:-ccl rest}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [[ " $PARTS " == *" ccl "* ]]; then
  tests ccl 420 tests/test_ccl.py -k "reduce_scatter_v or collectives or all_reduce"
fi
if [[ " $PARTS " == *" rest "* ]]; then
  tests torch_records 120 tests/test_distributed.py tests/test_records.py
  tests ops 60 tests/test_ops.py -k "every_fused_record or spare"
  tests tracing_x_rma 200 tests/test_tracing.py tests/test_x.py tests/test_copy_engine_api.py tests/test_rma.py
  for t in tutorials/0[1-7]_*.py; do
    left=$(( ${DEADLINE_S:-540} - SECONDS ))  # what the call has left, so that the summary below always prints
    [ "$left" -gt 20 ] || { summary+=("$(basename "$t"): not run, out of time"); continue; }
    IRIS_BACKEND=simulation timeout $(( left < 60 ? left - 10 : 60 )) python3 "$t" > "$OUT_DIR/$(basename "$t" .py).log" 2>&1
    summary+=("$(basename "$t"): exit $?")
  done
fi
grep -hE "^(FAILED|ERROR) " "$OUT_DIR"/*.log | head -20
printf '%s\n' "${summary[@]}"
