#!/usr/bin/python3
"""PyTorch's F.gelu next to hsnn's W3, in one process, interleaved.

W3 of `hsnn-jit bench` is gelu (the erf form) forward and backward over 2^24
floats, nodes_major, on every core. This runs PyTorch's CPU kernels the same
way (`aten.gelu.out` and `gelu_backward.grad_input` into preallocated
outputs, so allocation is not timed) and hsnn's through the Python package,
alternating, and prints the medians. Debian's python3-torch is 1.13.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_gelu.py [--rounds N] [--tanh] [--accuracy]

--tanh times the tanh approximation instead: hsnn's gelu_tanh against
PyTorch's approximate='tanh'.

--accuracy prints instead both forwards' worst error over each unit interval
of [-9, 9] (every 97th of 200001 points, in units of the float spacing at the
true value x erfc(-x/sqrt 2)/2, computed by mpmath): what the speed buys.
"""
import argparse
import os

import numpy as np
import torch

import hsnn
from hsnn.bench import _median_ms as median_ms  # warm-up call, then the median


def accuracy():
    import mpmath as mp

    mp.mp.dps = 40
    x = np.ascontiguousarray(np.linspace(-9, 9, 200001, dtype=np.float32)[::97])
    ours = hsnn.ActivationLayer(["gelu"], dtype="f32").forward(x.reshape(1, -1))[0].astype(np.float64)
    theirs = torch.nn.functional.gelu(torch.from_numpy(x)).numpy().astype(np.float64)
    worst = {}
    for v, a, b in zip(x.astype(np.float64), ours, theirs):
        t = mp.mpf(v) * mp.erfc(-mp.mpf(v) / mp.sqrt(2)) / 2
        spacing = float(np.spacing(np.abs(np.float32(float(t))))) or 2.0**-149
        k = int(np.floor(v))
        w = worst.setdefault(k, [0.0, 0.0])
        w[0] = max(w[0], float(abs(a - t)) / spacing)
        w[1] = max(w[1], float(abs(b - t)) / spacing)
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "default")
    print(f"worst error in float spacings, torch {torch.__version__} (ATEN_CPU_CAPABILITY {capability})")
    print("   [x, x+1)     hsnn      torch")
    for k in sorted(worst):
        print(f"{k:5d}, {k + 1:3d}  {worst[k][0]:8.3g}  {worst[k][1]:9.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tanh", action="store_true", help="gelu_tanh against approximate='tanh'")
    ap.add_argument("--accuracy", action="store_true")
    args = ap.parse_args()
    if args.accuracy:
        return accuracy()
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    n = 1 << 24
    rng = np.random.default_rng(3)
    z = rng.uniform(-4, 4, n).astype(np.float32)
    err = rng.uniform(-1, 1, n).astype(np.float32)
    tz, terr = torch.from_numpy(z), torch.from_numpy(err)
    tout, tgrad = torch.empty_like(tz), torch.empty_like(tz)
    approximate = "tanh" if args.tanh else "none"
    layer = hsnn.ActivationLayer(["gelu_tanh" if args.tanh else "gelu"], dtype="f32", layout="nodes_major")
    z2, err2, out2 = z.reshape(1, n), err.reshape(1, n), np.empty((1, n), np.float32)
    # Same values: hsnn's accurate gelu and PyTorch's agree to float precision here.
    layer.forward(z2, out=out2)
    torch.ops.aten.gelu.out(tz, approximate=approximate, out=tout)
    assert np.allclose(out2[0], tout.numpy(), rtol=1e-5, atol=1e-6)
    print(f"2^24 floats, {threads} threads, torch {torch.__version__}, approximate={approximate!r}, medians of {args.reps} (ms)")
    print("round  torch fwd  hsnn fwd  torch bwd  hsnn bwd")
    for r in range(args.rounds):
        tf = median_ms(lambda: torch.ops.aten.gelu.out(tz, approximate=approximate, out=tout), args.reps)
        hf = median_ms(lambda: layer.forward(z2, out=out2), args.reps)
        tb = median_ms(lambda: torch.ops.aten.gelu_backward.grad_input(terr, tz, approximate=approximate, grad_input=tgrad),
                       args.reps)
        hb = median_ms(lambda: layer.backward(z2, err2, out=out2), args.reps)
        print(f"{r:5d}  {tf:9.2f}  {hf:8.2f}  {tb:9.2f}  {hb:8.2f}")


if __name__ == "__main__":
    main()
