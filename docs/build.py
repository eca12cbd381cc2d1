#!/usr/bin/env python3
"""Builds hsnn's documentation site with warnings as errors.

    python3 docs/build.py OUTDIR      (PYTHONPATH must reach the built hsnn package)

Exits 77 (ctest's "skipped") when Debian's Sphinx packages are missing, and
says which; cmake/install-deps.sh installs them.
"""
import importlib.util
import pathlib
import sys

NEEDED = {"sphinx": "python3-sphinx", "myst_parser": "python3-myst-parser", "sphinx_rtd_theme": "python3-sphinx-rtd-theme"}


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    missing = [pkg for mod, pkg in NEEDED.items() if importlib.util.find_spec(mod) is None]
    if missing:
        print(f"skipped: the documentation needs Debian's {', '.join(missing)} (cmake/install-deps.sh installs them)")
        return 77
    from sphinx.cmd.build import build_main
    docs = pathlib.Path(__file__).resolve().parent
    out = pathlib.Path(argv[1])
    # -W: warnings are errors (a broken toctree entry, page link or docstring); -E: read every page again.
    # Not -n: references to NumPy's and PyTorch's classes would need their inventories (intersphinx), which
    # a machine without a network cannot fetch.
    return build_main(["-W", "--keep-going", "-E", "-q", "-b", "html", str(docs), str(out / "html")])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
