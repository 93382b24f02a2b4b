"""Models built on iris: a tensor-parallel Llama-style decoder and its communication providers, and an
expert-parallel MoE layer."""

from iris.models.comm import IrisComm, NoComm, SymmMemComm, TorchDistComm
from iris.models.llama_tp import KVCache, LlamaConfig, TensorParallelLlama
from iris.models.moe import ExpertParallelMoE, MoEConfig

__all__ = ["IrisComm", "NoComm", "SymmMemComm", "TorchDistComm", "KVCache", "LlamaConfig", "TensorParallelLlama",
           "ExpertParallelMoE", "MoEConfig"]
