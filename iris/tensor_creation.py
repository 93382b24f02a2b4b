"""``iris.tensor_creation``, upstream Iris's module path: tensor creation as functions of a heap and its device.
Generated from ``iris/upstream.py``."""

from iris.host.memory.creation import (parse_size, is_valid_device, throw_if_invalid_device, apply_layout,
                                       throw_if_invalid_output_tensor, create, empty, zeros, ones, full, zeros_like)

__all__ = ["parse_size", "is_valid_device", "throw_if_invalid_device", "apply_layout", "throw_if_invalid_output_tensor",
           "create", "empty", "zeros", "ones", "full", "zeros_like"]
