"""Plots an activation and its derivative as hsnn computes them (matplotlib).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/plot_activation.py "gelu" out.png
"""
import sys

import numpy as np

import hsnn


def plot(formula, path, lo=-4.0, hi=4.0, constants=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    layer = hsnn.ActivationLayer([(formula, constants or {})], dtype="float64", method="cpu_interp")
    z = np.linspace(lo, hi, 801).reshape(1, -1)
    a, d = layer.fused(z)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(z[0], a[0], label=f"f = {layer.formula(0)}")
    ax.plot(z[0], d[0], "--", label="f'")
    ax.axhline(0, color="gray", lw=0.5)
    ax.set_xlabel("num")
    ax.legend(fontsize=8)
    ax.set_title(formula)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


if __name__ == "__main__":
    print(plot(sys.argv[1] if len(sys.argv) > 1 else "gelu", sys.argv[2] if len(sys.argv) > 2 else "activation.png"))
