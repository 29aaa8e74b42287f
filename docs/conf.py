"""Sphinx configuration: Markdown pages (MyST), numpydoc docstrings, the alabaster theme.

Build with ``make docs`` (HTML in ``docs/_build/html``, warnings are errors).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the project's packages, installed or not

project = "SubZero on Spark"
author = "the SubZero developers"
copyright = "the SubZero developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "numpydoc",
    "subzero_cli",
    "subzero_results",
    "subzero_operators",
    "subzero_settings",
    "subzero_layers",
    "subzero_refs",
]

# Every cross-reference must resolve. A Python reference to a real object that the
# reference does not document (an internal module, a helper class, an attribute without a
# doc comment) renders as code without a link (subzero_refs); one that names nothing
# fails the build.
nitpicky = True

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # numpydoc's Parameters section says the types
numpydoc_show_class_members = False  # each page lists members with :members:
numpydoc_class_members_toctree = False

html_theme = "alabaster"
html_title = "SubZero on Spark"
html_static_path: list[str] = []
autosummary_generate = False  # numpydoc loads autosummary; no page asks it for stub files
