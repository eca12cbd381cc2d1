#!/usr/bin/env bash
# pip install into a venv made from Debian's python3 with --system-site-packages,
# reusing BUILD_DIR's CMake build; then the package is imported from the venv,
# outside the source and build trees.
set -euo pipefail
build="$1" src="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"; rm -rf "$src/build" "$src"/*.egg-info' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
HSNN_BUILD_DIR="$build" "$work/venv/bin/pip" install -q --no-build-isolation --no-index "$src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import numpy as np, hsnn
assert hsnn.__file__.startswith(__import__("sys").prefix), hsnn.__file__
layer = hsnn.ActivationLayer(["gelu", "relu"])
a = layer.forward(np.ones((2, 3), np.float32))
info = hsnn.runtime_info()
# The wheel's own code generator, not the build tree's.
assert info["code_generator"].startswith(__import__("sys").prefix), info["code_generator"]
print("pip-installed hsnn", hsnn.__version__, "ok:", a[0, 0])
PY
