#!/usr/bin/python3
"""PyTorch's math functions next to hsnn's `math` rows, in one process, interleaved.

The `math` workload of `hsnn-jit bench` is one function over 2^24 elements in
its domain. This runs PyTorch's CPU kernels the same way (`torch.<f>(x, out=y)`
into a preallocated output) and hsnn's one-node layer through the Python
package, alternating per function, with a copy of the same bytes
(`torch.Tensor.copy_`) timed beside them, and prints the medians and each one's
ratio to the copy. Run it with HSNN_TARGET_CPU=znver3 to time hsnn's AVX2 code
(PyTorch picks its own kernels at run time).

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_math.py [--dtype f32|f64|both] [--reps N]
"""
import argparse
import os

import numpy as np
import torch

import hsnn
from hsnn.bench import _median_ms as median_ms  # warm-up call, then the median

FUNCTIONS = ["exp", "log", "log1p", "tanh", "sin", "erf", "erfc", "sigmoid"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=["f32", "f64", "both"], default="both")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    n = 1 << 24
    print(f"2^24 elements, {threads} threads, torch {torch.__version__}, medians of {args.reps} (ms; x = / copy)")
    print("function  dtype   copy    torch      x    hsnn      x")
    for dtype in (["f32", "f64"] if args.dtype == "both" else [args.dtype]):
        np_type = np.float32 if dtype == "f32" else np.float64
        rng = np.random.default_rng(5)
        for f in FUNCTIONS:
            # Each function's domain, as the bench's rows.
            lo = 0.01 if f == "log" else -0.9 if f == "log1p" else -4
            x = rng.uniform(lo, 4, n).astype(np_type)
            tx, ty = torch.from_numpy(x), torch.empty(n, dtype=torch.from_numpy(x).dtype)
            layer = hsnn.ActivationLayer([f"{f}(num)"], dtype=dtype, layout="nodes_major")
            x2, y2 = x.reshape(1, n), np.empty((1, n), np_type)
            op = torch.sigmoid if f == "sigmoid" else getattr(torch.special if f in ("erf", "erfc") else torch, f)
            layer.forward(x2, out=y2)
            op(tx, out=ty)
            tol = 1e-5 if dtype == "f32" else 1e-12
            assert np.allclose(y2[0], ty.numpy(), rtol=tol, atol=tol), f
            copy = median_ms(lambda: ty.copy_(tx), args.reps)
            t = median_ms(lambda: op(tx, out=ty), args.reps)
            h = median_ms(lambda: layer.forward(x2, out=y2), args.reps)
            print(f"{f:8s}  {dtype:5s} {copy:6.2f}  {t:7.2f}  {t / copy:5.2f}  {h:6.2f}  {h / copy:5.2f}")


if __name__ == "__main__":
    main()
