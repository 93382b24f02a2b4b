"""Models built on iris: a tensor-parallel Llama-style decoder and its communication providers."""

from iris.models.comm import IrisComm, NoComm, SymmMemComm, TorchDistComm
from iris.models.llama_tp import KVCache, LlamaConfig, TensorParallelLlama

__all__ = ["IrisComm", "NoComm", "SymmMemComm", "TorchDistComm", "KVCache", "LlamaConfig", "TensorParallelLlama"]
