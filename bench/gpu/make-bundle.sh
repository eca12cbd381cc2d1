#!/usr/bin/env bash
# Builds what a GPU machine without LLVM needs to run hsnn's GPU tests and
# benchmarks: hsnn-jit, CUDATests and the code generator module (LLVM linked
# statically into it and into CUDATests),
# stripped and gzip'd, with libtbb/libzstd beside them and run.sh, in
# gpu-bundle/ (git-ignored). It stays under the 64 MiB a device session can
# carry. On the GPU machine: bash gpu-bundle/run.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/../.."
# Tests on explicitly: a build-static configured for the CLI alone has them off.
cmake -S . -B build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSNN_LLVM_STATIC=ON -DHSNN_BUILD_TESTS=ON >/dev/null
cmake --build build-static --target hsnn-jit CUDATests hsnnCodeGenModule
rm -rf gpu-bundle
mkdir -p gpu-bundle
# The code generator module (LLVM) goes beside the programs, where they look first.
for binary in build-static/bin/hsnn-jit build-static/test/CUDATests build-static/lib/hsnn/libhsnn-codegen.so; do
  name=$(basename "$binary")
  strip -o "gpu-bundle/$name" "$binary"
  gzip -9 "gpu-bundle/$name"
done
for lib in libtbb.so.12 libzstd.so.1; do
  cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')" gpu-bundle/
done
cp bench/gpu/run.sh bench/gpu/table.py bench/gpu/torch_peers.py bench/gpu/torch_check.py gpu-bundle/
# The Python package as a source distribution over prebuilt libraries (its
# own LLVM-static code generator inside), for hsnn.torch on the GPU
# machine's Python and PyTorch: run.sh builds the bindings there (~1 min).
if [ -f build/CMakeCache.txt ] && cmake --build build --target python-sdist >/dev/null; then
  cp build/dist/hsnn-*.tar.gz gpu-bundle/
else
  echo "make-bundle: no build/ to make the Python sdist in: the device script's hsnn.torch checks will be skipped" >&2
fi
du -sh gpu-bundle
[ "$(du -sm gpu-bundle | cut -f1)" -lt 64 ] || echo "make-bundle: gpu-bundle is over the 64 MiB a device session carries" >&2
