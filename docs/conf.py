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

import os  # noqa: E402

html_theme = "sphinx_rtd_theme"

# The version, from the one place it is written: CMakeLists.txt's project().
import re  # noqa: E402

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "CMakeLists.txt")) as _f:
    version = release = re.search(r"project\(hsnn VERSION ([0-9.]+)", _f.read()).group(1)
html_title = f"hsnn {version}"

# docs/build.py runs Doxygen first and says where its XML is.

breathe_projects = {"hsnn": os.environ.get("HSNN_DOXYGEN_XML", "_build/doxygen/xml")}
breathe_default_project = "hsnn"
breathe_default_members = ("members", "undoc-members")
