#!/usr/bin/env bash
# Several nodes on one GPU machine: ranks share the GPUs (simulation mode) as two nodes of two, one host id per
# node (IRIS_NODE_ID and NCCL_HOSTID, set by iris.launch(..., nodes=2)).
#   bash scripts/gpu_nodes.sh [OUT_DIR]
# 1. tests/test_nodes.py at GPU sizes (the layouts' rail on gloo: one pool serves several layouts, and NCCL reads
#    its host id once per process), 2. scripts/nodes_check.py: every hierarchical collective at 4 Ki and 4 Mi
#    elements, bytes handed to the rail, a CUDA graph replay, timings, with the rail on NCCL over loopback
#    sockets; if NCCL refuses co-located ranks, again on gloo. Prints which engine ran, then a short table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation
unset TRITON_INTERPRET
log="$OUT_DIR/gpu_nodes.log"
{
  echo "commit: ${IRIS_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
} > "$log" 2>&1

IRIS_RAIL_BACKEND=gloo timeout 140 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/test_nodes.py \
  >> "$log" 2>&1
tests_rc=$?
tests_line=$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1)

engine_rc=1
for engine in nccl gloo; do
  echo "=== nodes_check, rail on $engine" >> "$log"
  text=$(mktemp)
  NCCL_SOCKET_IFNAME=lo IRIS_RAIL_BACKEND=$engine timeout 90 python3 scripts/nodes_check.py \
    "$OUT_DIR/nodes_check_$engine.json" > "$text" 2>&1
  engine_rc=$?
  tail -60 "$text" >> "$log"
  [ "$engine_rc" = 0 ] && grep -q "ALL OK" "$text" && break
done

echo
echo "tests/test_nodes.py (rail on gloo): exit $tests_rc, $tests_line"
grep -E "^(FAIL|time|ENGINE|ALL OK|FAILED)" "$text"
echo "nodes_check: exit $engine_rc with the rail on $engine (full log: $log)"
[ "$tests_rc" = 0 ] && [ "$engine_rc" = 0 ]
