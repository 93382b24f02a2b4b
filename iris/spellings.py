"""Upstream Iris's spellings of our arguments, declared where they apply.

``@accepts(from_tensor="src_tensor", ...)`` at a method's ``def`` lets a call use upstream's keyword for one of ours
(the decorated method is what runs; its signature shows both names); ``ops_arguments`` at the fused ops' binding
takes upstream's positional form of their call. The decorators record what they declare in ``KEYWORDS``, the one
table (``iris/upstream.py`` re-exports it beside upstream's module paths). This module sits
at the bottom layer so that the context and the ops can import it.
"""

import functools
import inspect

# Upstream's names for our keyword arguments, as declared by @accepts: "Class.method" -> {upstream's: ours}.
# Passing both names of one argument is a TypeError.
KEYWORDS = {}

# The fused ops' upstream signature, (out, A, B, bias, async_op, config, workspace), and ours, (out, A, B, bias,
# *, config, group, ...): upstream's async_op (ours are stream-ordered and end with an in-kernel barrier either way)
# and workspace (ours live in ctx.workspaces) select nothing here; a positional async_op must not land in ``group``.
# Upstream also passes the context once more after B.
OPS_POSITIONAL = ("bias", "async_op", "config", "workspace")
OPS_IGNORED = ("async_op", "workspace")


def accepts(**renames):
    """Decorate a method so that it also takes upstream's keyword ``theirs`` for ``ours`` (``theirs="ours"``)."""

    def decorate(method):
        caller = method.__qualname__
        signature = inspect.signature(method)
        position = {name: i for i, name in enumerate(signature.parameters)}  # where ours sits among the positionals
        for ours in renames.values():
            assert ours in position, f"accepts: {caller} has no parameter {ours}"

        @functools.wraps(method)
        def spelled(*args, **kwargs):
            for theirs, ours in renames.items():
                if theirs in kwargs:
                    if ours in kwargs or len(args) > position[ours]:
                        raise TypeError(f"{caller}: got both {ours} and {theirs}; they name the same argument, "
                                        f"pass one")
                    kwargs[ours] = kwargs.pop(theirs)
            return method(*args, **kwargs)

        # each of upstream's keywords takes what ours takes (None: not given)
        extra = [inspect.Parameter(theirs, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=signature.parameters[ours].annotation)
                 for theirs, ours in renames.items()]
        spelled.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *extra])
        KEYWORDS[caller] = dict(renames)
        return spelled

    return decorate


def ops_arguments(ctx, args, kwargs):
    """The arguments after ``(out, A, B)`` of a fused op's call (``ctx.ops.<op>``) in our form, from upstream's forms
    as well: the context passed again after B, and the positional ``OPS_POSITIONAL``."""
    if args and args[0] is ctx:
        args = args[1:]
    if len(args) >= 2 and isinstance(args[1], bool):  # upstream's positional async_op
        kwargs.update(zip(OPS_POSITIONAL[1:], args[1:]))
        args = args[:1]
    for name in OPS_IGNORED:
        kwargs.pop(name, None)
    return args, kwargs
