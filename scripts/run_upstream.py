"""Run upstream Iris's examples and torch.compile / process-group tests, unchanged, against this repository's iris.

    python scripts/run_upstream.py /path/to/upstream/iris [--world-size 2] [--timeout 300] [--jobs 4] [--json out.json]
                                   [--cuda-shim] [--small]

Takes a tree of upstream Iris's ``examples/`` and ``tests/`` (nothing of it is copied here). Each
``examples/NN_name`` directory's entry (``example.py``, else its ``example_run*.py``, else its one file) runs under
``torchrun --nproc_per_node=W --standalone`` with ``--validate`` when it takes one, then
``tests/compile/test_functional.py`` and every ``tests/**/test_process_group*.py`` run under torchrun with pytest
(a small plugin initialises torch.distributed from torchrun's environment first, as upstream's own runner does);
``--jobs`` of them at once. ``PYTHONPATH`` puts this repository first, so ``import iris`` is ours, then the tree
(its ``examples.common`` helpers). Everything that stands in for hardware is the harness's, in a
``sitecustomize``, not a change to the library: with ``IRIS_BACKEND=simulation`` (ranks sharing one GPU)
``torch.cuda.set_device(r)`` and ``cuda:r`` name device ``r % device_count`` and ``nccl`` becomes gloo (NCCL
refuses two ranks on one device); on the cpu backend upstream code stops at its first ``torch.cuda`` call unless
``--cuda-shim`` lets those calls land on the CPU (``scripts/upstream_cuda_shim.py``). The compile tests run
without either stand-in (a global TorchFunctionMode and dynamo do not mix; their tensors are heap tensors).
``--small`` gives the GPU-sized examples the small problem sizes of ``SMALL`` (their own options; the examples are
unchanged), which the interpreter runs in seconds to a minute. On a GPU at their own sizes, the options of
``GPU_SIZED`` size what an example sizes for AMD's MI300X to the GPU's multiprocessors. With ``IRIS_SANITIZE=race``
in the environment (cpu backend) iris's race detector watches every run; a run it reports on fails with the reason
"data race: <access> at <file:line>, <access> at <file:line>", the first report's two accesses.

Prints one row per run (ran / passed / failed with the reason) and a count table last.
"""

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Reasons, first match wins: (pattern in the output, reason)
REASONS = [
    (r"Torch not compiled with CUDA|No CUDA GPUs|Found no NVIDIA driver|CUDA driver|cudaGetDevice|"
     r"invalid device ordinal", "calls torch.cuda (no GPU here)"),
    (r"libamdhip64|hipError|\brocm\b|HIP_|gfx9|is_hip|tl\.extra\.hip|\bamd\b|AMDGCN|s_waitcnt|s_memrealtime",
     "AMD hardware or HIP only"),
    (r"ModuleNotFoundError: No module named '([\w.]+)'", "missing module {0}"),
    (r"ImportError: cannot import name '(\w+)' from '([\w.]+)'", "missing name {1}.{0}"),
    (r"AttributeError: module '([\w.]+)' has no attribute '(\w+)'", "missing name {0}.{1}"),
    (r"AttributeError: '(\w+)' object has no attribute '(\w+)'", "missing attribute {0}.{1}"),
    (r"KeyError: 'Keyword argument (\w+) was specified but unrecognised'", "launch option {0} refused"),
    (r"out of memory|OutOfMemory", "out of memory"),
    (r"(?m)^E\s+(\w+(?:Error|Exception): [^\n]{0,100})", "{0}"),  # pytest's first error line
]
# A race the detector reported (IRIS_SANITIZE=race) is the run's reason before any rank's first error: a rank with a
# report exits 1 at its end, and a peer still in a barrier then raises PeerError, an error the race explains.
RACE = re.compile(r"iris: data race \(IRIS_SANITIZE=race\)[^\n]*\n\s+(\w[\w ]*?) by rank \d+,[^\n]*? at (\S+)\n"
                  r"\s+(\w[\w ]*?) by rank \d+,[^\n]*? at (\S+)")

# --small: the GPU-sized examples' own options at sizes the interpreter runs at 2 ranks (a rank's share at least 2
# tiles); a leading NAME=value is the run's environment (IRIS_UPSTREAM_SMS: the multiprocessors the CUDA stand-in
# reports, 4 unless set; 11 and 12 give the GEMM the largest power of two at most it and communication the rest).
_GEMM = "-m 128 -n 128 -k 256 --BLK_M 64 --BLK_N 64 --BLK_K 64"
SMALL = {
    "examples/08_gemm_all_scatter/example.py": _GEMM,
    "examples/09_gemm_all_reduce_atomics/example.py": _GEMM,
    "examples/10_gemm_one_shot_all_reduce/example.py": _GEMM,
    "examples/11_gemm_all_scatter_wg_specialization/example.py": "IRIS_UPSTREAM_SMS=6 " + _GEMM,
    "examples/12_gemm_all_scatter_producer_consumer/example.py": "IRIS_UPSTREAM_SMS=6 " + _GEMM,
    "examples/13_gemm_all_scatter_bulk_synchronous/example.py": _GEMM,
    "examples/14_gemm_all_reduce_ring_based/example.py": _GEMM + " --gemm_sms 4 --comm_sms 2",
    "examples/15_gemm_all_scatter_independent/example.py": _GEMM + " --comm_sms 2",
    "examples/16_gemm_one_shot_all_reduce_independent/example.py": _GEMM + " --comm_sms 2",
    "examples/17_gemm_one_shot_reduce_scatter_wg_specialization/example.py": _GEMM + " --gemm_sms 2",
    "examples/18_gemm_all_scatter_tracing/example.py": _GEMM + " --trace_tiles",
    "examples/19_flash_decode/example_run.py": "--kv_len_per_rank 256 --num_heads 16 --head_dim 64 --num_seqs 2",
    "examples/21_all_reduce_ring_based/example.py": "-m 128 -n 128 --BLK_M 64 --BLK_N 64 --num_sms 2",
    # its 1024 x 512 fp32 output is 2 x 524288 words that both ranks add into atomically, past the 262144 atomic
    # words IRIS_SANITIZE=race can follow
    "examples/29_x_all_reduce/example.py": "-m 256 -n 256",
}

# On a GPU at the examples' own sizes: options an example sizes for AMD's MI300X (304 compute units), given here
# sized to the GPU's multiprocessors ({pow2}: the largest power of two below their count). 17 gives the GEMM the first
# --gemm_sms (default 256) of its one-program-per-multiprocessor grid and communication the rest: on an H200's 132
# SMs no program would communicate and tiles past the 132nd would never be computed.
GPU_SIZED = {
    "examples/17_gemm_one_shot_reduce_scatter_wg_specialization/example.py": "--gemm_sms {pow2}",
}

FAILED_CHECK = re.compile(r"validation failed|mismatch|\bFAILED\b|\bfailed\b|assert(ion)?error", re.I)

PLUGIN = '''
import os, torch, torch.distributed as dist
def pytest_configure(config):
    if "RANK" in os.environ and not dist.is_initialized():
        cuda = torch.cuda.is_available() and os.environ.get("IRIS_BACKEND") != "cpu"
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl" if cuda else "gloo")
'''

SITECUSTOMIZE = '''
import os
if os.environ.get("IRIS_BACKEND") == "simulation":
    import torch
    import torch.distributed as dist
    _set_device = torch.cuda.set_device
    def set_device(device):
        count = torch.cuda.device_count()
        index = torch.device(device).index if not isinstance(device, int) else device
        return _set_device(index % count if count and index is not None else device)
    torch.cuda.set_device = set_device
    # NCCL refuses two ranks on one device; gloo carries the examples' own torch.distributed checks instead.
    _init = dist.init_process_group
    def init_process_group(backend=None, *args, **kwargs):
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if backend == "nccl" and torch.cuda.device_count() < world:
            backend = "gloo"
        return _init(backend, *args, **kwargs)
    dist.init_process_group = init_process_group
if os.environ.get("IRIS_UPSTREAM_CUDA_SHIM"):
    import upstream_cuda_shim  # noqa: F401  (its docstring says what each mode stands in for)
'''


def reason(text):
    """The first race reported (its two lines), else the first error a rank raised (torchrun's own summary
    skipped), named by REASONS where one matches."""
    race = RACE.search(text)
    if race:
        return "data race: {0} at {1}, {2} at {3}".format(*race.groups())
    errors = [m.group(1) for m in re.finditer(r"(?m)^(?:\[rank\d+\]:\s*)?(?:E\s+)?((?:[\w.]+\.)?\w*(?:Error|Exception)\b[^\n]*)",
                                             text) if "ChildFailedError" not in m.group(1)]
    for candidate in errors[:1] + [text]:
        for pattern, why in REASONS:
            found = re.search(pattern, candidate)
            if found:
                return why.format(*found.groups())
    if errors:
        return errors[0][:160]
    if re.search(r"SIGSEGV|Signal 11", text):
        return "segmentation fault"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1][:120] if lines else "no output")


def first_traceback(text):
    """The first race report, else the first rank's traceback (what the row keeps), else the output's end."""
    race = RACE.search(text)
    if race:
        return text[race.start():race.start() + 4000]
    start = text.find("Traceback (most recent call last)")
    return text[start:start + 4000] if start >= 0 and "ChildFailedError" not in text[start:start + 600] else text[-4000:]


def example_entries(root):
    """Each ``examples/NN_name`` directory's entry points: ``example.py``, else its ``example_run*.py`` files, else
    its one Python file (upstream's advanced examples name theirs ``example_run.py`` or after the kernel)."""
    entries = []
    for folder in sorted(glob.glob(os.path.join(root, "examples", "[0-9][0-9]_*"))):
        if os.path.isfile(os.path.join(folder, "example.py")):
            entries.append(os.path.join(folder, "example.py"))
            continue
        runs = sorted(glob.glob(os.path.join(folder, "example_run*.py")))
        files = sorted(glob.glob(os.path.join(folder, "*.py")))
        entries += runs or (files if len(files) == 1 else [])
    return entries


def world_size_of(source, default):
    """The rank count an example's docstring asks for (``--nproc_per_node=N``), else ``default``."""
    found = re.search(r"--nproc_per_node[= ](\d+)", source)
    return int(found.group(1)) if found else default


RUNNING = set()  # the torchrun processes under way, each the leader of its own process group


def run(cmd, env, cwd, timeout):
    """(exit status or None on timeout, stdout + stderr); a run that times out loses torchrun and its ranks, so no
    rank keeps the GPU (or the pipe this reads) after its run is over."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    RUNNING.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, _ = proc.communicate()
        return None, (out or "") + f"\n(timed out after {timeout} s)"
    finally:
        RUNNING.discard(proc)


def _descendants(pid):
    """Every process below ``pid`` (from /proc), children first found first."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            continue
        found += children
        todo += children
    return found


def _kill(proc):
    """The run's process group and every process below it: torchrun starts each rank in a session of its own."""
    below = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", help="path of an upstream Iris checkout")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per example")
    parser.add_argument("--test-timeout", type=int, default=600, help="seconds per upstream test file")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once (on one GPU each run's ranks share it with the other runs' ranks)")
    parser.add_argument("--only", default="", help="regex: run only the examples / tests whose path matches")
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--cuda-shim", action="store_true",
                        help="cpu backend only: let torch.cuda calls and 'cuda' tensors land on the CPU "
                             "(scripts/upstream_cuda_shim.py), so the examples' iris calls run in the interpreter")
    parser.add_argument("--small", action="store_true",
                        help="run the GPU-sized examples at the small sizes of SMALL (their own options)")
    args = parser.parse_args()
    root = os.path.abspath(args.upstream)
    helper = tempfile.mkdtemp(prefix="iris-upstream-")
    with open(os.path.join(helper, "iris_upstream_dist.py"), "w") as f:
        f.write(PLUGIN)
    with open(os.path.join(helper, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    shutil.copy(os.path.join(HERE, "scripts", "upstream_cuda_shim.py"), helper)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, helper, root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("IRIS_LOG_LEVEL", "INFO")  # upstream's default: its examples report through ctx.info
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    on_cpu = env.get("IRIS_BACKEND") == "cpu" or not _gpu_visible()
    shim = False
    if on_cpu:
        env.update(IRIS_BACKEND="cpu", TRITON_INTERPRET="1")  # before the examples import triton
        shim = args.cuda_shim
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    sized = {} if on_cpu or args.small else {name: options.format(pow2=_below_pow2(_gpu_sms())).split()
                                             for name, options in GPU_SIZED.items()}

    jobs = []
    for path in example_entries(root):
        with open(path) as f:
            source = f.read()
        extra = ["--validate"] if "--validate" in source else []
        ranks = world_size_of(source, args.world_size)
        name = os.path.relpath(path, root)
        key = name.replace(os.sep, "/")
        small = SMALL.get(key, "").split() if args.small else sized.get(key, [])
        small_env = [word for word in small if re.match(r"[A-Z_]+=", word)]
        jobs.append(("example", name, torchrun + [f"--nproc_per_node={ranks}", path] + extra + small[len(small_env):],
                     (dict(word.split("=", 1) for word in small_env), small)))
    tests = glob.glob(os.path.join(root, "tests", "compile", "test_functional.py"))
    tests += glob.glob(os.path.join(root, "tests", "**", "test_process_group*.py"), recursive=True)
    for path in sorted(set(tests)):
        jobs.append(("test", os.path.relpath(path, root),
                     torchrun + [f"--nproc_per_node={args.world_size}", "-m", "pytest", "-q", "-p",
                                 "iris_upstream_dist", "-p", "no:cacheprovider", path], ({}, [])))
    if args.only:
        jobs = [job for job in jobs if re.search(args.only, job[1])]

    def one(job):
        kind, name, cmd, (small_env, small) = job
        timeout = args.test_timeout if kind == "test" else args.timeout
        # torch.compile traces through a global TorchFunctionMode badly, and upstream's compile tests make
        # their tensors on the heap, so they run without the shim.
        mode = "1" if shim else "shared" if env.get("IRIS_BACKEND") == "simulation" else ""
        run_env = dict(env, **small_env)
        rc, out = run(cmd, dict(run_env, IRIS_UPSTREAM_CUDA_SHIM=mode) if mode and "compile" not in name else run_env,
                      root, timeout)
        row = {"kind": kind, "name": name, "rc": rc}
        if small:
            row["args"] = " ".join(small)
        if kind == "test":
            counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", out))
            row["counts"] = counts
            row["status"] = "passed" if rc == 0 and counts.get("passed") else "failed"
        else:
            row["status"] = "passed" if rc == 0 and not FAILED_CHECK.search(out) else "failed"
        if row["status"] != "passed":
            row["reason"] = ("timeout" if rc is None else
                             "a check failed" if rc == 0 else reason(out))
            row["tail"] = first_traceback(out)
        detail = f" {row.get('counts')}" if kind == "test" else f" [{row['args']}]" if small else ""
        print(f"{row['status']:7s} {name}{detail}{'  -- ' + row['reason'] if 'reason' in row else ''}", flush=True)
        return row

    # Tests first: they are the longest runs, so a pool of --jobs finishes soonest with them started early.
    jobs.sort(key=lambda job: job[0] != "test")
    # An outer `timeout` (scripts/gpu_compat.sh) ends us with SIGTERM: report what finished, end what did not.
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt))
    rows, pool = [], concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
    futures = {pool.submit(one, job): job for job in jobs}
    try:
        for future in concurrent.futures.as_completed(futures):
            rows.append(future.result())
    except KeyboardInterrupt:
        for proc in list(RUNNING):
            _kill(proc)
        done = {row["name"] for row in rows}
        rows += [{"kind": kind, "name": name, "rc": None, "status": "failed", "reason": "not finished (outer timeout)"}
                 for kind, name, _, _ in jobs if name not in done]
    pool.shutdown(wait=False, cancel_futures=True)
    rows.sort(key=lambda row: (row["kind"], row["name"]))

    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print_table(rows, "cpu" if on_cpu else env.get("IRIS_BACKEND", "cuda"))
    return 0


def print_table(rows, backend):
    print(f"\nupstream Iris against this iris ({backend} backend)")
    print(f"{'kind':8s} {'ran':>4s} {'passed':>7s} {'failed':>7s}")
    for kind in ("example", "test"):
        mine = [r for r in rows if r["kind"] == kind]
        passed = sum(r["status"] == "passed" for r in mine)
        print(f"{kind:8s} {len(mine):4d} {passed:7d} {len(mine) - passed:7d}")
    reasons = {}
    for r in rows:
        if "reason" in r:
            reasons.setdefault(r["reason"], []).append(os.path.basename(os.path.dirname(r["name"])) or r["name"])
    for why, names in sorted(reasons.items(), key=lambda item: -len(item[1])):
        print(f"  {len(names):3d} failed: {why}  ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})")
    for r in rows:
        if r["kind"] == "test":
            print(f"  {r['name']}: {r.get('counts')}")


def _gpu_sms():
    import torch

    return torch.cuda.get_device_properties(0).multi_processor_count


def _below_pow2(count):
    """The largest power of two below ``count`` (at least 1): 128 for 132."""
    return max(1, 1 << ((count - 1).bit_length() - 1))


def _gpu_visible():
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


if __name__ == "__main__":
    sys.exit(main())
