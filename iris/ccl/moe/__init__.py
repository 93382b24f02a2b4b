"""Expert-parallel MoE dispatch and combine: routing descriptions, the kernels, their launcher and a torch
reference."""
