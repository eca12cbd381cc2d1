#!/usr/bin/python3
"""Every float (or every STRIDE-th) through hsnn's f32 math functions, against double truth.

MathLibraryTest (ctest CPUTests) holds each function to its bound over every
397th float; a worst case between the samples (erf's 2.76 ulp at x = 0.477
once went unseen) needs every float. This runs a one-node f32 layer of each
function over all floats of both signs up to --limit, 2^24 at a time, against
the same inputs in double through NumPy (PyTorch's float64 erf and erfc,
which NumPy lacks), and prints each function's worst error in units of the
float spacing at the true value, and where. The double functions are within
an ulp of a double, 2^-29 of a float's: the truth to the digits that count.
The error is the distance to the true value, not to its rounding as
MathLibraryTest and the numerics guide count (whole steps between floats):
a result within 1 step of the rounded truth is within 1.5 of the truth.
Results that overflow, or are 0 or NaN where the truth rounds so, must
match exactly.

    PYTHONPATH=build/python /usr/bin/python3 bench/math_f32_exhaustive.py [--function F ...] [--stride S]
        [--limit X] [--max-ulp U]

Every float takes two to three minutes a function on two cores (erf: 2 min 20 s);
--stride 4099 (the ctest) a second for all of them. Exits 1 when a
function's worst error is above --max-ulp.
"""
import argparse
import sys

import numpy as np

import hsnn

try:
    import torch
except ImportError:  # erf and erfc then go through math, one element at a time
    torch = None


def _erf_family(name):
    if torch is not None:
        fn = getattr(torch, name)
        return lambda x: fn(torch.from_numpy(x)).numpy()
    import math
    return np.frompyfunc(getattr(math, name), 1, 1)


# name: (double reference, the function's domain as (lowest, highest) or None for every float)
FUNCTIONS = {
    "exp": (np.exp, None), "expm1": (np.expm1, None), "log": (np.log, (0.0, np.inf)),
    "log1p": (np.log1p, (-1.0, np.inf)), "sin": (np.sin, None), "cos": (np.cos, None), "tan": (np.tan, None),
    "tanh": (np.tanh, None), "sinh": (np.sinh, None), "cosh": (np.cosh, None), "asinh": (np.arcsinh, None),
    "acosh": (np.arccosh, (1.0, np.inf)), "atanh": (np.arctanh, (-1.0, 1.0)), "atan": (np.arctan, None),
    "asin": (np.arcsin, (-1.0, 1.0)), "acos": (np.arccos, (-1.0, 1.0)), "erf": (_erf_family("erf"), None),
    "erfc": (_erf_family("erfc"), None),
}


def worst_error(name, stride, limit):
    """The worst error in ulp over the floats 0..limit of both signs (in the domain), and its input."""
    reference, domain = FUNCTIONS[name]
    layer = hsnn.ActivationLayer([f"{name}(num)"], dtype="float32")
    top = int(np.float32(limit).view(np.uint32))
    worst, where = 0.0, None
    chunk = 1 << 24
    for start in range(0, top + 1, chunk * stride):
        bits = np.arange(start, min(start + chunk * stride, top + 1), stride, dtype=np.uint32)
        for sign in (0, 0x80000000):
            x = (bits | np.uint32(sign)).view(np.float32)
            if domain is not None:
                x = x[(x >= domain[0]) & (x <= domain[1])]
            if x.size == 0:
                continue
            got = layer.forward(x.reshape(1, -1))[0].astype(np.float64)
            with np.errstate(all="ignore"):
                truth = np.asarray(reference(x.astype(np.float64)), dtype=np.float64)
                rounded = truth.astype(np.float32)
            finite = np.isfinite(rounded) & np.isfinite(got)
            # Overflow and limits must match exactly; the rest is measured.
            mismatch = ~finite & ~((got == rounded) | (np.isnan(got) & np.isnan(rounded)))
            if mismatch.any():
                i = int(np.argmax(mismatch))
                return float("inf"), float(x[i])
            spacing = np.spacing(np.abs(rounded[finite])).astype(np.float64)
            err = np.abs(got[finite] - truth[finite]) / spacing
            if err.size and err.max() > worst:
                i = int(np.argmax(err))
                worst, where = float(err[i]), float(x[finite][i])
    return worst, where


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--function", nargs="+", choices=sorted(FUNCTIONS), default=sorted(FUNCTIONS))
    ap.add_argument("--stride", type=int, default=1, help="every STRIDE-th float (1: all)")
    ap.add_argument("--limit", type=float, default=float(np.finfo(np.float32).max), help="the largest |x|")
    ap.add_argument("--max-ulp", type=float, default=None, help="exit 1 above this error")
    args = ap.parse_args()
    failed = False
    for name in args.function:
        worst, where = worst_error(name, args.stride, args.limit)
        over = args.max_ulp is not None and worst > args.max_ulp
        failed |= over
        print(f"{name:6s} worst {worst:.3f} ulp at x = {where!r}{'  ABOVE THE BOUND' if over else ''}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
