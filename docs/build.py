#!/usr/bin/env python3
"""Builds hsnn's documentation site with warnings as errors.

    python3 docs/build.py OUTDIR      (PYTHONPATH must reach the built hsnn package)

Doxygen reads the public headers into OUTDIR/doxygen/xml, Breathe turns that into the C++ reference, autodoc
reads the Python package's docstrings, and Sphinx writes OUTDIR/html. Exits 77 (ctest's "skipped") when
Debian's packages for this are missing, and says which; cmake/install-deps.sh installs them.
"""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

NEEDED = {"sphinx": "python3-sphinx", "myst_parser": "python3-myst-parser",
          "sphinx_rtd_theme": "python3-sphinx-rtd-theme", "breathe": "python3-breathe"}

DOXYFILE = """
PROJECT_NAME = hsnn
INPUT = {include}/hsnn
INCLUDE_PATH = {include}
# Classes name their header as a user includes it: <hsnn/Layer.h>.
FULL_PATH_NAMES = YES
STRIP_FROM_PATH = {include}
STRIP_FROM_INC_PATH = {include}
FILE_PATTERNS = *.h
OUTPUT_DIRECTORY = {out}
GENERATE_XML = YES
GENERATE_HTML = NO
GENERATE_LATEX = NO
EXTRACT_ALL = YES
JAVADOC_AUTOBRIEF = YES
QUIET = YES
WARN_AS_ERROR = YES
WARN_IF_UNDOCUMENTED = NO
EXCLUDE_SYMBOLS = hsnn::detail
# kNumOps counts the X-macro table of Ops.def: its initializer is not C++ a reader (or Breathe) can use.
MAX_INITIALIZER_LINES = 0
"""


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    missing = [pkg for mod, pkg in NEEDED.items() if importlib.util.find_spec(mod) is None]
    if shutil.which("doxygen") is None:
        missing.append("doxygen")
    if missing:
        print(f"skipped: the documentation needs Debian's {', '.join(missing)} (cmake/install-deps.sh installs them)")
        return 77
    docs = pathlib.Path(__file__).resolve().parent
    out = pathlib.Path(argv[1]).resolve()
    doxygen = out / "doxygen"
    doxygen.mkdir(parents=True, exist_ok=True)
    config = DOXYFILE.format(include=docs.parent / "include", out=doxygen)
    r = subprocess.run(["doxygen", "-"], input=config, text=True)
    if r.returncode != 0:
        print("error: doxygen failed on the public headers (its warnings are errors here)", file=sys.stderr)
        return 1
    os.environ["HSNN_DOXYGEN_XML"] = str(doxygen / "xml")  # read by conf.py
    from sphinx.cmd.build import build_main
    # -W: warnings are errors (a broken toctree entry, page link or docstring); -E: read every page again.
    # Not -n: references to NumPy's and PyTorch's classes would need their inventories (intersphinx), which
    # a machine without a network cannot fetch.
    return build_main(["-W", "--keep-going", "-E", "-q", "-b", "html", str(docs), str(out / "html")])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
