# Sphinx configuration of hsnn's documentation site (built by the ctest
# `docs` with warnings as errors; see test/docs/build_docs.sh).
project = "hsnn"
author = "the hsnn developers"
copyright = "2026, the hsnn developers"

extensions = [
    "myst_parser",          # the Markdown pages (ARCHITECTURE.md, MIGRATING.md)
    "sphinx.ext.autodoc",   # the Python API reference, from the docstrings
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to a page's sections by their titles

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}

html_theme = "sphinx_rtd_theme"
html_title = "hsnn"
