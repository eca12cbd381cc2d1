"""python3 -m hsnn.bench: what Python and PyTorch users get from hsnn.

1. Python overhead: the W1 layer (256 nodes, 8 formulas) forward on a
   65536 x 256 float32 array from Python, next to the same call timed inside C++.
2. HeteroActivation forward + backward on that layer, (batch, nodes) tensors,
   next to the best pure-PyTorch way of writing a per-node heterogeneous
   activation: the columns grouped by formula, one torch op per group.
3. The per-call cost table: HeteroActivation (the W1 formulas) forward +
   backward against torch.tanh and torch.relu forward + backward on the same
   tensor, and against the layer's own kernels (fused, then grad * f'), at
   32 x 64, 128 x 256 and 4096 x 256, float32 and float64. Each row runs in a
   fresh process (nothing has warmed the allocator), gradients set to None
   before each step as zero_grad(set_to_none=True) does.
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


def _alternating_medians_us(fns, reps):
    """Each callable's median time, the calls taken in turn (one rep of every
    one, then the next rep), so that drift in the machine's speed falls on
    all of them alike."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t) * 1e6)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


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


TABLE_SIZES = [(32, 64), (128, 256), (4096, 256)]


def table_row(dtype, batch, nodes, reps):
    """One row of the per-call table, in this process (main runs each in a fresh one)."""
    import os

    import torch
    from .torch import HeteroActivation
    torch.set_num_threads(os.cpu_count() or 1)
    tdt = getattr(torch, dtype)
    act = HeteroActivation([W1_FORMULAS[j % 8] for j in range(nodes)])
    x = torch.empty(batch, nodes, dtype=tdt).uniform_(-4, 4).requires_grad_()
    g = torch.ones(batch, nodes, dtype=tdt)

    def step(f):
        x.grad = None
        f(x).backward(g)

    layer = act._node(x).layer
    zn, gn = x.detach().numpy(), g.numpy()

    def kernels():  # what a step runs, called directly: fused, then grad * f' (as hsnn.torch does it)
        a, d = _core.ActivationLayer.fused(layer, zn)
        _core._multiply(gn, d)

    from .torch import FormulaLoss
    p = torch.empty(batch, nodes, dtype=tdt).uniform_(0.01, 0.99).requires_grad_()
    t = torch.rand(batch, nodes, dtype=tdt)

    def loss_step(f):
        p.grad = None
        f(p, t).backward()

    F = torch.nn.functional
    mse, bce = FormulaLoss("mse"), FormulaLoss("bce")
    row = {"dtype": dtype, "batch": batch, "nodes": nodes}
    row.update(_alternating_medians_us({"hsnn_us": lambda: step(act), "tanh_us": lambda: step(torch.tanh),
                                        "relu_us": lambda: step(torch.relu), "kernels_us": kernels}, reps))
    row.update(_alternating_medians_us({"mse_us": lambda: loss_step(mse), "torch_mse_us": lambda: loss_step(F.mse_loss),
                                        "bce_us": lambda: loss_step(bce),
                                        "torch_bce_us": lambda: loss_step(F.binary_cross_entropy)}, reps))
    return row


def per_call_table(reps):
    import subprocess
    import sys
    rows = []
    for dtype in ("float32", "float64"):
        for batch, nodes in TABLE_SIZES:
            n = reps if batch * nodes >= 1 << 20 else reps * 20
            out = subprocess.run([sys.executable, "-m", "hsnn.bench", "--_row", dtype, str(batch), str(nodes), str(n)],
                                 capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m hsnn.bench", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    p.add_argument("--_row", nargs=4, help=argparse.SUPPRESS)  # one table row, in a fresh process
    a = p.parse_args(argv)
    if a._row:
        dtype, batch, nodes, reps = a._row
        print(json.dumps(table_row(dtype, int(batch), int(nodes), int(reps))))
        return 0
    if not 1 <= a.reps <= 1000:
        p.error("--reps takes 1 to 1000")
    result = {"overhead": python_overhead(a.reps)}
    if not a.no_torch:
        try:
            result["torch"] = torch_comparison(a.reps)
            result["table"] = per_call_table(a.reps)
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
    if result.get("table"):
        print("forward + backward per call, median us (each row a fresh process, the calls taken in turn; W1's 8 formulas "
              "over the nodes):")
        print(f"{'dtype':8} {'batch x nodes':>14} {'HeteroActivation':>17} {'torch.tanh':>11} {'torch.relu':>11} "
              f"{'its kernels':>12} {'vs tanh':>8} {'vs kernels':>11}")
        for r in result["table"]:
            print(f"{r['dtype']:8} {str(r['batch']) + ' x ' + str(r['nodes']):>14} {r['hsnn_us']:17.1f} "
                  f"{r['tanh_us']:11.1f} {r['relu_us']:11.1f} {r['kernels_us']:12.1f} "
                  f"{r['hsnn_us'] / r['tanh_us']:7.2f}x {r['hsnn_us'] / r['kernels_us']:10.2f}x")
        print("losses, mean reduction, forward + backward per call, median us (y_pred in (0.01, 0.99), soft y_true):")
        print(f"{'dtype':8} {'batch x nodes':>14} {'FormulaLoss mse':>16} {'F.mse_loss':>11} {'FormulaLoss bce':>16} "
              f"{'F.binary_cross_entropy':>23}")
        for r in result["table"]:
            print(f"{r['dtype']:8} {str(r['batch']) + ' x ' + str(r['nodes']):>14} {r['mse_us']:16.1f} "
                  f"{r['torch_mse_us']:11.1f} {r['bce_us']:16.1f} {r['torch_bce_us']:23.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
