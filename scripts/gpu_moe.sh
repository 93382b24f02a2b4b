#!/usr/bin/env bash
# MoE dispatch + combine on one H200: the tests at GPU sizes with 2, 3 and 4 ranks sharing the GPU (simulation;
# the CUDA-graph replay with new routing among them), then benchmarks/moe.py at world size 1 (NCCL baseline beside
# iris) and 2 (simulation), at the DeepSeek shape (4096 tokens per rank) and decode (128):
#   scripts/gpu_moe.sh [OUT_DIR]
# Writes moe_tests.log, moe_bench.log and moe_w1.json / moe_w2.json under OUT_DIR (default $OUT or
# results-local); prints the table last (ms per dispatch + combine, host syncs, host us = the time an eager call
# takes to return with the device drained first, GPU ops = kernels and copies per call) and the host time per eager
# call. About 2 minutes on one H200. A correct run: "10 passed"; at W 1 iris's eager decode row (128 tokens) below
# torch_a2a's, with host us well under 1000 and 5 GPU ops for iris and iris_nosync alike (the id check is in the
# route kernel).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MOE_HEAP=$((6 << 30))
unset TRITON_INTERPRET
rc=0
IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation timeout 100 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider \
  tests/test_moe.py 2>&1 | tee "$OUT_DIR/moe_tests.log" | tail -3
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
: > "$OUT_DIR/moe_bench.log"
for w in 1 2; do
  backend=$([ "$w" = 1 ] && echo cuda || echo simulation)
  mkdir -p "$OUT_DIR/w$w"
  IRIS_BACKEND=$backend timeout 40 python3 benchmarks/moe.py --world "$w" --out "$OUT_DIR/w$w" \
    >> "$OUT_DIR/moe_bench.log" 2>&1 || { rc=1; echo "benchmark at world size $w failed" >> "$OUT_DIR/moe_bench.log"; }
  [ -f "$OUT_DIR/w$w/moe.json" ] && mv "$OUT_DIR/w$w/moe.json" "$OUT_DIR/moe_w$w.json"
  rmdir "$OUT_DIR/w$w" 2>/dev/null
done
echo "== summary"
grep -E "passed|failed|error" "$OUT_DIR/moe_tests.log" | tail -2
grep -E "^(provider|iris|torch)|max diff|failed" "$OUT_DIR/moe_bench.log"
[ -f "$OUT_DIR/moe_w1.json" ] && python3 - "$OUT_DIR/moe_w1.json" <<'PY'
import json, sys
rows = {(r["provider"], r["tokens"]): r for r in json.load(open(sys.argv[1]))}
for T in sorted({t for _, t in rows}, reverse=True):
    parts = [f"{p} {rows[p, T]['host_us']:.0f} us" for p in ("iris", "iris_nosync", "torch_a2a")
             if (p, T) in rows and rows[p, T]["host_us"] is not None]
    print(f"host time per eager call, W 1, {T} tokens: " + ", ".join(parts))
PY
exit $rc
