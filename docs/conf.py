# Sphinx configuration of hsnn's documentation site (built by the ctest
# `docs` with warnings as errors; see docs/CMakeLists.txt).
project = "hsnn"
author = "the hsnn developers"
copyright = "2026, the hsnn developers"

extensions = [
    "myst_parser",          # the Markdown pages (ARCHITECTURE.md, MIGRATING.md)
    "sphinx.ext.autodoc",   # the Python API reference, from the docstrings
    "sphinx.ext.viewcode",
    "breathe",              # the C++ API reference, from Doxygen's XML of the public headers
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# The guides link to each other as Markdown files (so they read on GitHub too); the README, snippets.py and
# CMakeLists.txt are not pages.
exclude_patterns = ["_build", "CMakeLists.txt"]
myst_heading_anchors = 3  # links to a page's sections by their titles

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}

html_theme = "sphinx_rtd_theme"
html_title = "hsnn"

# docs/build.py runs Doxygen first and says where its XML is.
import os  # noqa: E402

breathe_projects = {"hsnn": os.environ.get("HSNN_DOXYGEN_XML", "_build/doxygen/xml")}
breathe_default_project = "hsnn"
breathe_default_members = ("members", "undoc-members")
