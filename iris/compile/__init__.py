"""``torch.ops.iris.*`` for ``torch.compile`` (``iris.compile.functional``, upstream's module path). ``import
iris.compile`` registers the ops; ``iris.compile.set_context(ctx)`` binds them."""

from iris.compile.functional import (all_gather, all_gather_matmul, all_reduce, all_to_all, get_context,
                                     matmul_all_gather, matmul_all_reduce, matmul_reduce_scatter, reduce_scatter,
                                     set_context)

__all__ = ["set_context", "get_context", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "matmul_all_reduce", "all_gather_matmul", "matmul_all_gather", "matmul_reduce_scatter"]
