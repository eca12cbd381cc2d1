#!/usr/bin/env bash
# hsnn's Python package on today's stack: Debian 13 "trixie" (Python 3.13,
# NumPy 2, PyTorch 2.6), in a root made with debootstrap and kept in the
# build tree. The package goes in as a user's would: `pip install` of the
# source distribution (target python-sdist) into a root that has no LLVM,
# TBB or fmt; then the package's tests and examples run there.
#
#   trixie.sh SDIST FAKE_CUDA_LIBRARY TESTS_DIR EXAMPLES_DIR ROOT
#
# Exits 77 (ctest: skipped), saying why, where it cannot run: not root (chroot
# needs it), no debootstrap, or the Debian archive out of reach.
# HSNN_TRIXIE_MIRROR names the archive; by default the one apt uses here.
set -euo pipefail
sdist=$1 fake_cuda=$2 tests=$3 examples=$4 root=$5

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "making and entering a Debian root needs root (chroot); run as root or in CI"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
[ -f "$sdist" ] || { echo "no source distribution at $sdist (cmake --build BUILD --target python-sdist)"; exit 1; }

# Everything the tests and examples use, and what building the bindings
# needs: a compiler, Python's headers and pybind11. Not LLVM, TBB or fmt.
packages=(g++ python3-dev python3-venv python3-pip python3-setuptools python3-wheel python3-pybind11
          python3-numpy python3-pytest python3-torch libtorch-dev python3-sympy python3-mpmath
          python3-sklearn python3-matplotlib)
stamp="$root/.hsnn-root"
want="trixie ${packages[*]}"

# Runs a command inside the root with /proc and /dev mounted in a mount
# namespace of its own: the mounts end with it, whatever happens.
in_root() {
  unshare --mount --propagation private -- bash -c '
    set -e
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --rbind /dev "$r/dev"
    exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      ${http_proxy:+http_proxy=$http_proxy} "$@"' in_root "$root" "$@"
}

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  mirror=${HSNN_TRIXIE_MIRROR:-}
  if [ -z "$mirror" ]; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
             awk -v c="$codename" '$2 == c { print $1; exit }')
  fi
  [ -n "$mirror" ] || skip "no Debian archive in apt's sources here (set HSNN_TRIXIE_MIRROR)"
  start=$SECONDS
  if [ ! -f "$root/.hsnn-base" ]; then
    echo "making a Debian 13 root in $root from $mirror (once; kept in the build tree)"
    rm -rf "$root"
    mkdir -p "$(dirname "$root")"
    if ! debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.log" 2>&1; then
      tail -n 5 "$root.log"
      skip "debootstrap of trixie from $mirror failed (the archive out of reach?); its log: $root.log"
    fi
    touch "$root/.hsnn-base"
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  if ! in_root sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends ${packages[*]} && apt-get clean" >>"$root.log" 2>&1; then
    tail -n 5 "$root.log"
    skip "installing the test packages into the trixie root failed (the archive out of reach?); its log: $root.log"
  fi
  echo "$want" >"$stamp"
  echo "root made in $((SECONDS - start)) s"
fi

# A fresh copy of what is tested, in the root.
work="$root/hsnn-test"
rm -rf "$work"
mkdir -p "$work"
cp "$sdist" "$work/"
cp -r "$tests" "$work/tests"
cp -r "$examples" "$work/examples"
cp "$fake_cuda" "$work/libhsnn_fake_cuda.so"
name=$(basename "$sdist")

# Inside the root: no LLVM, TBB or fmt; pip installs the package into a venv
# (PEP 668 keeps pip out of the system's site-packages) that sees Debian's
# NumPy and PyTorch; then the tests as ctest runs them on Debian 12.
in_root bash -c '
  set -euo pipefail
  cd /hsnn-test
  # What building against LLVM 19, TBB or fmt would need is absent. (PyTorch
  # brings a libLLVM-17.so and a libfmt.so.10 of its own: neither is used.)
  if ls -d /usr/lib/llvm-* /usr/lib/*/libLLVM.so.19* /usr/include/llvm* /usr/include/fmt /usr/include/tbb \
      /usr/include/oneapi /usr/lib/*/libtbb.so* /usr/lib/*/libfmt.so.9* 2>/dev/null; then
    echo "the root has LLVM 19, TBB or fmt 9: not the machine this test is about"; exit 1
  fi
  python3 -c "import sys, numpy, torch; print(\"trixie: Python\", sys.version.split()[0], \"NumPy\", numpy.__version__, \"PyTorch\", torch.__version__)"
  python3 -m venv --system-site-packages venv
  start=$(date +%s)
  venv/bin/pip install -q --no-build-isolation --no-index "/hsnn-test/$1"
  echo "pip install of $1: $(( $(date +%s) - start )) s"
  py=/hsnn-test/venv/bin/python
  export HSNN_CACHE_DIR=/hsnn-test/cache MPLBACKEND=Agg
  $py -c "import hsnn, hsnn._torch; print(\"hsnn\", hsnn.__version__, \"from\", hsnn.__file__, \"with hsnn._torch\")"
  $py -m pytest -q -p no:cacheprovider tests
  # The cuda method needs only a driver (no toolkit, no libdevice): the stand-in one here.
  HSNN_CUDA_LIBRARY=/hsnn-test/libhsnn_fake_cuda.so HSNN_FAKE_CUDA_DEVICES=9.0 \
    $py -m pytest -q -p no:cacheprovider -rs tests/test_cuda_dlpack.py tests/test_backends.py tests/test_backend_interface.py
  $py examples/digits_mlp.py --epochs 5 | tail -n 2
  $py examples/pinn.py | tail -n 2
  $py examples/plot_activation.py gelu /hsnn-test/gelu.png
' trixie "$name"
echo "trixie: the source distribution installed and its tests and examples passed"
