"""Compile iris kernels for sm_90 without a GPU and print what the PTX shows (used by test_compile.py)."""

import json
import re

import iris
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def copy_kernel(src, dst, heap_bases, rank, peer, OP: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if OP == "load":
        tl.store(dst + offs, iris.load(src + offs, rank, peer, heap_bases, hint=HINT))
    elif OP == "store":
        iris.store(dst + offs, tl.load(src + offs), rank, peer, heap_bases, hint=HINT)
    elif OP == "get":
        iris.get(src + offs, dst + offs, peer, rank, heap_bases, hint=HINT)
    elif OP == "put":
        iris.put(src + offs, dst + offs, rank, peer, heap_bases, hint=HINT)
    else:
        iris.copy(src + offs, dst + offs, peer, rank, rank, heap_bases, hint=HINT)

@triton.jit
def atomic_kernel(flag, heap_bases, rank, peer, SEM: tl.constexpr, SCOPE: tl.constexpr):
    iris.atomic_add(flag, 1, rank, peer, heap_bases, sem=SEM, scope=SCOPE)
    iris.atomic_cas(flag + 1, 0, 1, rank, peer, heap_bases, sem=SEM, scope=SCOPE)

@triton.jit
def context_kernel(context, buf, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    offs = tl.arange(0, BLOCK)
    x = ctx.load(buf + offs, (RANK + 1) % WORLD_SIZE, hint=16)
    ctx.store(buf + offs, x + 1, (RANK + 1) % WORLD_SIZE, hint=16)
    ctx.atomic_add(buf, 1.0, 0, sem="release", scope="sys")

@triton.jit
def publish_kernel(data, flag, heap_bases, rank, peer, SEM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(data + offs, tl.load(data + offs) + 1, rank, peer, heap_bases, hint=16)
    iris.atomic_xchg(flag, 1, rank, peer, heap_bases, sem=SEM, scope="sys")


def ptx(fn, signature, constexprs):
    # Pointer arguments marked 16-byte aligned, as Triton's launcher specialises them for torch tensors.
    aligned = {(i,): [["tt.divisibility", 16]] for i, ty in enumerate(signature.values()) if ty.startswith("*")}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]

def global_accesses(text):
    return sorted(set(re.findall(r"\b(?:ld|st)\.global[\w.]*", text)))

out = {}
sig = {"src": "*fp32", "dst": "*fp32", "heap_bases": "*i64", "rank": "i32", "peer": "i32", "OP": "constexpr",
       "HINT": "constexpr", "BLOCK": "constexpr"}
for op in ["load", "store", "get", "put", "copy"]:
    for hint in [None, 16]:
        out[f"{op}/{hint}"] = global_accesses(ptx(copy_kernel, sig, {"OP": op, "HINT": hint, "BLOCK": 1024}))
sig = {"flag": "*i32", "heap_bases": "*i64", "rank": "i32", "peer": "i32", "SEM": "constexpr", "SCOPE": "constexpr"}
for sem in ["relaxed", "acquire", "release", "acq_rel"]:
    for scope in ["cta", "gpu", "sys"]:
        text = ptx(atomic_kernel, sig, {"SEM": sem, "SCOPE": scope})
        out[f"atom/{sem}/{scope}"] = sorted(set(re.findall(r"\batom\.[\w.]+", text)))
sig = {"context": "*i64", "buf": "*fp32", "RANK": "constexpr", "WORLD_SIZE": "constexpr", "BLOCK": "constexpr"}
text = ptx(context_kernel, sig, {"RANK": 0, "WORLD_SIZE": 2, "BLOCK": 1024})
out["context"] = global_accesses(text) + sorted(set(re.findall(r"\b(?:atom|red)\.[\w.]+", text)))
sig = {"data": "*fp32", "flag": "*i32", "heap_bases": "*i64", "rank": "i32", "peer": "i32", "SEM": "constexpr",
       "BLOCK": "constexpr"}
for sem in ["relaxed", "release", "acq_rel", "acquire"]:
    text = ptx(publish_kernel, sig, {"SEM": sem, "BLOCK": 1024})
    # the instruction stream between the data stores and the flag atomic
    between = text[text.rindex("st.global"):text.index("atom.global")]
    out[f"publish/{sem}"] = bool(re.search(r"\b(?:bar|barrier)\.sync", between))
print("RESULT" + json.dumps(out))
