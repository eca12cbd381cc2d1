"""python -m hsnn.bench: what Python and PyTorch users get from hsnn.

1. Python overhead: the W1 layer (256 nodes, 8 formulas) forward on a
   65536 x 256 float32 array from Python, next to the same call timed inside C++.
2. HeteroActivation forward + backward on that layer, (batch, nodes) tensors,
   next to the best pure-PyTorch way of writing a per-node heterogeneous
   activation: the columns grouped by formula, one torch op per group.
"""
import argparse
import json
import time

import numpy as np

from . import _core

W1_FORMULAS = ["relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)", "0.5*num+0.1"]


def _median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def python_overhead(reps, nodes=256, batch=65536):
    layer = _core.ActivationLayer([W1_FORMULAS[j % 8] for j in range(nodes)], dtype="float32")
    z = np.random.default_rng(1).uniform(-4, 4, (nodes, batch)).astype(np.float32)
    out = np.empty_like(z)
    py_ms = _median_ms(lambda: layer.forward(z, out=out), reps)
    cpp_ms = layer._time_forward(z, out, reps)
    return {"python_ms": py_ms, "cpp_ms": cpp_ms, "ratio": py_ms / cpp_ms}


def torch_comparison(reps, nodes=256, batch=65536):
    import os

    import torch
    from .torch import HeteroActivation
    torch.set_num_threads(os.cpu_count() or 1)  # give PyTorch every core, as hsnn uses
    fns = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": torch.nn.functional.gelu,
           "silu": torch.nn.functional.silu, "softplus": torch.nn.functional.softplus, "sin(num)": torch.sin,
           "0.5*num+0.1": lambda x: 0.5 * x + 0.1}
    formulas = [W1_FORMULAS[j % 8] for j in range(nodes)]
    groups = [(fns[f], torch.tensor([j for j in range(nodes) if formulas[j] == f])) for f in W1_FORMULAS]

    def sliced(x):  # one op per formula group, scattered back into place
        out = torch.empty_like(x)
        for fn, cols in groups:
            out[:, cols] = fn(x[:, cols])
        return out

    act = HeteroActivation(formulas)
    x = torch.empty(batch, nodes).uniform_(-4, 4).requires_grad_()
    g = torch.ones(batch, nodes)

    def step(f):
        x.grad = None
        f(x).backward(g)

    hsnn_ms = _median_ms(lambda: step(act), reps)
    torch_ms = _median_ms(lambda: step(sliced), reps)
    return {"hsnn_ms": hsnn_ms, "torch_sliced_ms": torch_ms, "speedup": torch_ms / hsnn_ms,
            "torch_threads": torch.get_num_threads()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hsnn.bench", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    a = p.parse_args(argv)
    if not 1 <= a.reps <= 1000:
        p.error("--reps takes 1 to 1000")
    result = {"overhead": python_overhead(a.reps)}
    if not a.no_torch:
        try:
            result["torch"] = torch_comparison(a.reps)
        except ImportError as e:
            result["torch"] = {"skipped": f"PyTorch is not installed ({e})"}
    if a.json:
        print(json.dumps(result))
        return 0
    o = result["overhead"]
    print(f"W1 forward, 65536 x 256 float32: from Python {o['python_ms']:.2f} ms, inside C++ {o['cpp_ms']:.2f} ms "
          f"(x{o['ratio']:.3f})")
    t = result.get("torch")
    if t and "skipped" not in t:
        print(f"HeteroActivation forward+backward, W1 layer, (65536, 256): hsnn {t['hsnn_ms']:.1f} ms, PyTorch sliced "
              f"by formula {t['torch_sliced_ms']:.1f} ms ({t['speedup']:.1f}x; torch threads {t['torch_threads']})")
    elif t:
        print(t["skipped"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
