# Sourced by scripts/upstream_gluon.sh and scripts/upstream_unittests.sh: what they share to run upstream Iris's test
# files, copied out of its checkout, against this checkout's iris.
#   harness_init NAME      $here (this checkout), $work (a scratch folder), $world (WORLD_SIZE, default 1), and
#                          without a GPU the cpu backend with the interpreter on from the start (upstream's files
#                          import triton before iris) and scripts/upstream_cuda_shim.py answering their torch.cuda calls
#   harness_run LIMIT ARGS...
#                          python ARGS (a script, or -m pytest ...) as $world ranks: under torchrun when $world > 1,
#                          else as rank 0 of 1; killed after LIMIT seconds
#   run_part PART COPY FILE...
#                          copies each FILE into $work/PART with COPY (cp, or a function that changes the copy), adds
#                          the runner's conftest and runs pytest there (harness_run); prints "UPSTREAM PART: <pytest
#                          summary>" (rank 0's)

harness_init() {
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  work=$(mktemp -d "/tmp/$1-XXXX")
  world=${WORLD_SIZE:-1}
  export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
  if ! { command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; }; then
    export TRITON_INTERPRET=1 IRIS_BACKEND=cpu IRIS_UPSTREAM_CUDA_SHIM=1
    mkdir -p "$work/site"
    cp "$here/scripts/upstream_cuda_shim.py" "$work/site/"
    printf 'import upstream_cuda_shim  # noqa: F401\n' > "$work/site/sitecustomize.py"
    export PYTHONPATH="$PYTHONPATH:$work/site"
  fi
}

runner_conftest() {  # upstream's test runner, not its code: the process group from torchrun's environment
  cat <<'PY'
import os

import torch
import torch.distributed as dist


def pytest_configure(config):
    if "RANK" in os.environ and not dist.is_initialized():
        world, gpus = int(os.environ["WORLD_SIZE"]), torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % gpus)
        dist.init_process_group("nccl" if gpus >= world else "gloo")  # NCCL refuses two ranks on one GPU
PY
}

harness_run() {
  local limit=$1; shift
  local port=$((29500 + RANDOM % 1000))
  if [ "$world" -gt 1 ]; then
    timeout "$limit" torchrun --nproc-per-node="$world" --master-port=$port "$@"
  else
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout "$limit" python "$@"
  fi
}

run_part() {
  local part=$1 copy=$2; shift 2
  [ $# -eq 0 ] && { echo "UPSTREAM $part: no files"; return; }
  mkdir -p "$work/$part"
  for f in "$@"; do "$copy" "$f" "$work/$part/$(basename "$f")"; done
  runner_conftest > "$work/$part/conftest.py"
  local log="$work/$part.log"
  (cd "$work/$part" && harness_run "${UPSTREAM_TIMEOUT_S:-600}" -m pytest -q -p no:cacheprovider .) > "$log" 2>&1
  echo "UPSTREAM $part: $(grep -E '[0-9]+ (passed|failed|error|skipped)' "$log" | head -1)"
}
