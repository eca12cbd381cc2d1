#!/usr/bin/env bash
# Runs on the GPU machine from the bundle make-bundle.sh built, in one go of
# a few minutes: the GPU tests (every kernel against the interpreter), the
# GPU benchmark next to a device-to-device copy (W1-W4, compile, per-call
# latency, populations of new formulas), hsnn.torch on CUDA tensors checked (torch_check.py, with the
# package built here from the bundle's sdist) and PyTorch's eager and compiled
# versions of the same workloads where a CUDA PyTorch is installed
# (torch_peers.py), and the CPU benchmark
# for comparison. Its last lines are one side-by-side table (table.py).
# Results go to OUTDIR (default: $OUT, else ./gpu-results).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-./gpu-results}}
mkdir -p "$out"
cd "$here"
for f in *.gz; do gunzip -kf "$f"; done
chmod +x hsnn-jit CUDATests
export LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HSNN_CACHE_DIR="$out/kernel-cache"
./hsnn-jit info | tee "$out/info.txt"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
./CUDATests --duration=true > "$out/gpu-tests.txt" 2>&1
echo "CUDATests exit $?" >> "$out/gpu-tests.txt"
tail -4 "$out/gpu-tests.txt"
./hsnn-jit bench --device cuda --workload all --dtype both --reps 20 --json > "$out/bench-gpu.json" 2> "$out/bench-gpu.err"
echo "bench --device cuda exit $?"
cat "$out/bench-gpu.json" "$out/bench-gpu.err"
./hsnn-jit bench --method cuda --workload W1 --reps 5 > "$out/bench-gpu-host-arrays.txt" 2>&1
# Populations (issue 53): N new random formulas in one launch a call, f32.
./hsnn-jit bench --device cuda --workload population --dtype f32 --reps 5 > "$out/bench-gpu-population.txt" 2>&1
echo "bench population exit $?"
cat "$out/bench-gpu-population.txt"
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  # hsnn's Python package for this machine's Python and PyTorch, from the
  # bundle's source distribution (a C++ compiler and Python's headers;
  # pybind11 from PyTorch's headers where it is not installed), off the index.
  if ls hsnn-*.tar.gz > /dev/null 2>&1; then
    HSNN_BUILD_JOBS=$(nproc) timeout 300 python3 -m pip install --no-build-isolation --no-deps --no-index \
      --target "$out/pylib" hsnn-*.tar.gz > "$out/pip.txt" 2>&1
    echo "hsnn python package: pip exit $? (pip.txt)"
    export PYTHONPATH="$out/pylib${PYTHONPATH:+:$PYTHONPATH}"
  fi
  timeout 180 python3 torch_check.py > "$out/torch-check.txt" 2>&1
  echo "torch_check exit $?"
  grep -E "^(ok|FAIL) " "$out/torch-check.txt"
  timeout 240 python3 torch_peers.py --reps 20 > "$out/torch.json" 2> "$out/torch.err"
  echo "torch_peers exit $?"
else
  echo '{"skipped": "no PyTorch with CUDA here"}' > "$out/torch.json"
fi
./hsnn-jit bench --workload W1 --reps 5 > "$out/bench-cpu.txt" 2>&1
python3 table.py "$out/bench-gpu.json" "$out/torch.json" | tee "$out/table.txt"
