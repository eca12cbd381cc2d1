#!/usr/bin/python3
"""Measures every built-in activation's error in ulp against mpmath truth.

For each built-in, dtype (float32, float64), value and derivative: the
compiled kernel (fused, so f and f' come from one pass) on a grid of points
(the edges, both tails on a log scale, a dense stretch around 0), compared
with the true value of the function at the same input computed with
mpmath at 40 digits and rounded to the dtype.

The error is in units in the last place of the true value (the spacing of
the dtype there; the smallest subnormal below the normal range), so an
exact result is 0 and a result off by one rounding is at most 0.5 + the
kernel's own rounding. Points where the true value is a kink (relu at 0) use
the derivative hsnn documents there. Prints a Markdown table (the one in docs/guide/numerics.md)
and exits non-zero when a bound given with --max-ulp is exceeded.

    PYTHONPATH=build/python /usr/bin/python3 bench/accuracy.py [--points N] [--max-ulp U]
"""
import argparse
import math
import sys

import mpmath as mp
import numpy as np

import hsnn

mp.mp.dps = 40
S2PI = mp.sqrt(2 / mp.pi)


def sig(x):
    return 1 / (1 + mp.exp(-x))


def sp(x):
    return mp.log1p(mp.exp(x)) if x < 0 else x + mp.log1p(mp.exp(-x))


def erfc(z):
    # mpmath's series check overflows for huge arguments; the asymptotic
    # form is exact to the dtypes' precision there.
    if z > 30:
        return mp.exp(-z * z) / (z * mp.sqrt(mp.pi)) * (1 - 1 / (2 * z * z))
    if z < -30:
        return mp.mpf(2)
    return mp.erfc(z)


def step(cond, a, b):
    return a if cond else b


ALPHA_SELU, LAMBDA_SELU = mp.mpf("1.6732632423543772848170429916717"), mp.mpf("1.0507009873554804934193349852946")

# name -> (value, derivative), each a function of an mpf; kinks take hsnn's
# documented side (the constant branch: relu'(0) = 0).
TRUTH = {
    "relu": (lambda x: max(x, 0), lambda x: step(x > 0, 1, 0)),
    "sigmoid": (sig, lambda x: sig(x) * sig(-x)),
    "silu": (lambda x: x * sig(x), lambda x: sig(x) + x * sig(x) * sig(-x)),
    "softplus": (sp, sig),
    "mish": (lambda x: x * mp.tanh(sp(x)), lambda x: mp.tanh(sp(x)) + x * mp.sech(sp(x)) ** 2 * sig(x)),
    "gelu": (lambda x: x / 2 * erfc(-x / mp.sqrt(2)),
             lambda x: erfc(-x / mp.sqrt(2)) / 2 + x * mp.exp(-x * x / 2) / mp.sqrt(2 * mp.pi)),
    "tanh": (mp.tanh, lambda x: mp.sech(x) ** 2),
    "elu": (lambda x: step(x > 0, x, mp.expm1(x)), lambda x: step(x > 0, 1, mp.exp(x))),
    "selu": (lambda x: LAMBDA_SELU * step(x > 0, x, ALPHA_SELU * mp.expm1(x)),
             lambda x: LAMBDA_SELU * step(x > 0, 1, ALPHA_SELU * mp.exp(x))),
    "leaky_relu": (lambda x: step(x > 0, x, x / 100), lambda x: step(x > 0, 1, mp.mpf(1) / 100)),
    "softsign": (lambda x: x / (1 + abs(x)), lambda x: 1 / (1 + abs(x)) ** 2),
    "hardtanh": (lambda x: min(max(x, -1), 1), lambda x: step(-1 < x < 1, 1, 0)),
    "hardsigmoid": (lambda x: min(max((x + 3) / 6, 0), 1), lambda x: step(-3 < x < 3, mp.mpf(1) / 6, 0)),
    "hardswish": (lambda x: step(x <= -3, 0, step(x >= 3, x, x * (x + 3) / 6)),
                  lambda x: step(x <= -3, 0, step(x >= 3, 1, (2 * x + 3) / 6))),
    # (1 + tanh(y))/2 = sigmoid(2y): the same number, without cancelling 40 digits away.
    "gelu_tanh": (lambda x: x * sig(2 * S2PI * (x + mp.mpf("0.044715") * x ** 3)),
                  lambda x: sig(2 * S2PI * (x + mp.mpf("0.044715") * x ** 3))
                  + x / 2 * mp.sech(S2PI * (x + mp.mpf("0.044715") * x ** 3)) ** 2 * S2PI
                  * (1 + 3 * mp.mpf("0.044715") * x ** 2)),
    "log_sigmoid": (lambda x: -sp(-x), lambda x: sig(-x)),
}
TRUTH["swish"] = TRUTH["silu"]


def grid(dtype, points):
    info = np.finfo(dtype)
    with np.errstate(over="ignore"):
        tails = np.geomspace(float(info.tiny), float(info.max), points // 2)
    dense = np.linspace(-12, 12, points // 2)
    edge = [0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 1.5, -1.5, float(info.max), -float(info.max), float(info.tiny)]
    xs = np.concatenate([tails, -tails, dense, edge]).astype(dtype)
    return np.unique(xs)


def ulp_error(got, true, dtype):
    """|got - true| in ulp of the true value in dtype (true is an mpf)."""
    info = np.finfo(dtype)
    if mp.isinf(true) or abs(true) > float(info.max) * (1 + float(info.eps) / 2):
        want = math.copysign(math.inf, float(true))
        return 0.0 if got == want else math.inf
    if math.isnan(got) or math.isinf(got):
        return math.inf
    t = abs(true)
    subnormal_step = mp.mpf(float(info.smallest_subnormal))
    if t < float(info.tiny):
        spacing = subnormal_step
    else:
        spacing = mp.mpf(2) ** (mp.floor(mp.log(t, 2)) - (info.nmant))
    return float(abs(mp.mpf(got) - true) / spacing)


def condition(fn, x, fx):
    """|x f'(x) / f(x)|: how much a relative change of x moves f(x) (1 where f is flat or x is 0)."""
    if x == 0 or fx == 0 or mp.isinf(fx):
        return mp.mpf(1)
    h = abs(x) * mp.mpf(10) ** -18
    slope = (fn(x + h) - fn(x - h)) / (2 * h)
    return max(mp.mpf(1), abs(x * slope / fx))


def measure(name, dtype, points):
    """Per value and derivative: (worst ulp, where), and the worst of ulp / condition number."""
    layer = hsnn.ActivationLayer([(name, {})], dtype=np.dtype(dtype).name, method="cpu_jit")
    xs = grid(dtype, points)
    a, d = layer.fused(xs.reshape(1, -1))
    worst = [[0.0, None, 0.0, None], [0.0, None, 0.0, None]]
    fv, fd = TRUTH[name]
    for x, got_a, got_d in zip(xs, a.ravel(), d.ravel()):
        mx = mp.mpf(float(x))
        for k, (fn, got) in enumerate(((fv, got_a), (fd, got_d))):
            true = fn(mx)
            err = ulp_error(float(got), true, dtype)
            w = worst[k]
            if err > w[0]:
                w[0], w[1] = err, float(x)
            if err > 1 and err > w[2]:  # only then is the condition number worth its cost
                adj = err / float(condition(fn, mx, true)) if math.isfinite(err) else err
                if adj > w[2]:
                    w[2], w[3] = adj, float(x)
            elif err > w[2]:
                w[2], w[3] = err, float(x)
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=2000, help="grid points per function and dtype")
    ap.add_argument("--max-ulp", type=float, default=None, help="fail when an error exceeds this")
    ap.add_argument("--only", default=None, help="comma-separated built-ins")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else sorted(TRUTH)
    print("Worst error in ulp; where the function itself is ill-conditioned (|x f'/f| > 1: near a zero of")
    print("f or f', in a tail) the error divided by that condition number follows after '/'.\n")
    print("| built-in | f32 value | f32 derivative | f64 value | f64 derivative |")
    print("|---|---|---|---|---|")
    failed = []
    for name in names:
        cells = []
        for dtype in (np.float32, np.float64):
            for err, at, adj, adj_at in measure(name, dtype, args.points):
                cell = f"{err:.2g}"
                if err > 4:
                    cell += f" at {at:.4g} / {adj:.2g}"
                cells.append(cell)
                if args.max_ulp is not None and adj > args.max_ulp:
                    failed.append(f"{name} {np.dtype(dtype).name}: {adj:.3g} ulp (conditioned) at {adj_at!r}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for f in failed:
        print("over the bound:", f, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
