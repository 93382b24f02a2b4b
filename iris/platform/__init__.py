"""What iris runs on, importing nothing above it: the backend choice, the CUDA driver and private torch / Triton
bindings, CUDA-graph capture state, device queries, and AMD-only launch options accepted on NVIDIA."""
