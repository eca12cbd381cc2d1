#!/usr/bin/env bash
# Installs hsnn's build and test dependencies from Debian 12 packages.
# Idempotent; runs apt-get through sudo when not root.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  build-essential cmake ninja-build ccache git
  llvm-19-dev libzstd-dev zlib1g-dev
  libtbb-dev libfmt-dev doctest-dev nlohmann-json3-dev
  clang-19 libclang-rt-19-dev
  python3 python3-dev python3-numpy python3-pytest pybind11-dev python3-torch libtorch-dev python3-sklearn python3-matplotlib
  python3-mpmath python3-numexpr python3-distributed
  python3-sphinx python3-myst-parser python3-sphinx-rtd-theme python3-breathe doxygen
  python3-venv python3-pip python3-setuptools python3-wheel
  debootstrap
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
