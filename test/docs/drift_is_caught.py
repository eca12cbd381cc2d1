"""docs/check_drift.py catches drift (ctest docs_drift_catches_drift): the real configuration and CLI pages with
one variable's row moved to a name no code reads and one option taken out, and a guide naming a Python and a C++
name that do not exist, give exactly those five problems (two for the row).
    drift_is_caught.py HSNN_JIT"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
guide = os.path.join(ROOT, "docs", "guide")
with tempfile.TemporaryDirectory() as tmp:
    configuration = open(os.path.join(guide, "configuration.md")).read().replace("| `HSNN_LINKER` |", "| `HSNN_LINKR` |")
    cli = re.sub(r"\[?--row-shape[^\]\n]*\]?", "", open(os.path.join(guide, "cli.md")).read())
    pages = {"configuration.md": configuration, "cli.md": cli,
             "page.md": "Call `hsnn.no_such_function(x)` or `hsnn::NoSuchClass::run` (and `hsnn.Loss`, which exists).\n"}
    for name, text in pages.items():
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "check_drift.py"), "--hsnn-jit", sys.argv[1],
                        "--configuration", os.path.join(tmp, "configuration.md"), "--cli", os.path.join(tmp, "cli.md"),
                        "--guides", os.path.join(tmp, "page.md")], capture_output=True, text=True)
print(r.stdout, r.stderr)
expected = ["reads HSNN_LINKER, which the table in", "lists HSNN_LINKR, which no code reads",
            "hsnn-jit compile takes --row-shape, which", "hsnn.no_such_function is not in the Python package",
            "NoSuchClass not in include/hsnn", ": 5 problem(s)"]
missing = [e for e in expected if e not in r.stdout]
if r.returncode != 1 or missing:
    sys.exit(f"drift not caught as expected (exit {r.returncode}); missing: {missing}")
print("drift caught: 5 problems, exit 1")
