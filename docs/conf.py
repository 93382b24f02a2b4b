"""The documentation site (Sphinx): ``python -m sphinx -W -b html docs docs/_build/html``.

Markdown pages through MyST, the API reference from the docstrings (autodoc), the tutorials from the runnable scripts
in ``tutorials/`` (sphinx-gallery, which renders them without running them: ``tests/test_tutorials.py`` runs them on
the cpu backend). iris is imported on the cpu backend, so no GPU is needed to build."""

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("IRIS_BACKEND", "cpu")

import iris  # noqa: E402  (before triton: it picks the backend)

project = "iris"
author = "the iris authors"
copyright = "2026, the iris authors"
release = version = getattr(iris, "__version__", "")
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx_gallery.gen_gallery"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "tutorials/*.ipynb", "tutorials/*.py", "tutorials/*.json", "tutorials/*.zip",
                    "tutorials/*.md5"]
html_theme = "furo"
html_title = "iris"
html_static_path = []
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
# Type hints in the signature, where a reader of a call looks first: the public host API annotates every parameter
# (tests/test_hints.py) with short types and named aliases, so a signature stays one readable line or two; a separate
# "Parameters" list ("description") would repeat what the docstrings already say about each argument.
autodoc_typehints = "signature"
autodoc_default_options = {"undoc-members": False}
nitpicky = False
suppress_warnings = ["myst.header"]  # the design notes start at level-2 headings under their title

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "tutorials"),
    "gallery_dirs": "tutorials",
    "plot_gallery": "False",  # rendered, not run: tests/test_tutorials.py runs every one on the cpu backend
    "filename_pattern": r"/\d\d_",
    "within_subsection_order": "FileNameSortKey",  # 01, 02, ...: the order they teach in
    "download_all_examples": False,
    # no notebook: a tutorial's rank function must be importable by the rank processes, which a notebook's is not
    # (iris.run says so); the page offers the script
    "notebook_extensions": set(),
    "show_signature": False,
    "remove_config_comments": True,
}


def _jit_functions(app, what, name, obj, options, lines):
    """A ``@triton.jit`` function documents as the Python function it wraps (autodoc sees Triton's wrapper, whose own
    docstring is empty)."""
    fn = getattr(obj, "fn", None)
    if not lines and fn is not None and fn.__doc__:
        from sphinx.util.docstrings import prepare_docstring

        lines.extend(prepare_docstring(fn.__doc__))


def _jit_signatures(app, what, name, obj, options, signature, return_annotation):
    fn = getattr(obj, "fn", None)
    if fn is not None and callable(fn) and signature in (None, "", "(*args, **kwargs)"):
        import inspect

        return str(inspect.signature(fn)), return_annotation
    return None


def _lambda_defaults(app, what, name, obj, options, signature, return_annotation):
    """A lambda default (``do_bench``'s no-op hooks) prints as ``lambda: ...``: its repr, ``<function <lambda>>``, is
    no Python, and Sphinx prints a signature it cannot parse raw, its type hints unlinked."""
    if signature and "<function <lambda>>" in signature:
        return signature.replace("<function <lambda>>", "lambda: ..."), return_annotation
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _jit_functions)
    app.connect("autodoc-process-signature", _jit_signatures)
    app.connect("autodoc-process-signature", _lambda_defaults)
