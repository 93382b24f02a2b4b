"""``iris.ccl.moe_utils``, upstream Iris's module path: the MoE expert assignment and routing metadata. Generated from
``iris/upstream.py``."""

from iris.ccl.moe.routing import (ExptAssignment, RaggedTensorMetadata, make_expt_dict_uniform, make_expt_assignment,
                                  make_ragged_tensor_metadata, topk)

__all__ = ["ExptAssignment", "RaggedTensorMetadata", "make_expt_dict_uniform", "make_expt_assignment",
           "make_ragged_tensor_metadata", "topk"]
