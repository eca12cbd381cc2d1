"""A heterogeneous MLP on scikit-learn's bundled digits (8x8 images, 10 classes),
next to the same MLP with nn.ReLU: accuracy and time per epoch.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/digits_mlp.py [--epochs N]
"""
import argparse
import sys
import time

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hsnn.torch as ht

HIDDEN = ["gelu", "tanh", ("sin(num)*alpha", {"alpha": 1.5}), "softplus", "silu", "relu",
          "Piecewise((num, num > 0), (0.1*num, True))", "mish"]


def model(act):
    return torch.nn.Sequential(torch.nn.Linear(64, 64), act, torch.nn.Linear(64, 10))


def train(net, data, epochs, label):
    xtr, xte, ytr, yte = data
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    per_epoch = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss_fn(net(xtr[idx]), ytr[idx]).backward()
            opt.step()
        per_epoch.append(time.perf_counter() - t0)
        with torch.no_grad():
            acc = (net(xte).argmax(1) == yte).float().mean().item()
        bar = "#" * int(30 * (epoch + 1) / epochs)
        sys.stdout.write(f"\r{label:<14} [{bar:<30}] epoch {epoch + 1}/{epochs} test accuracy {acc:.3f}")
        sys.stdout.flush()
    print(f"  ({1e3 * sum(per_epoch) / len(per_epoch):.1f} ms/epoch)")
    return acc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    a = p.parse_args()
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
    data = (torch.tensor(xtr, dtype=torch.float32), torch.tensor(xte, dtype=torch.float32), torch.tensor(ytr),
            torch.tensor(yte))
    torch.manual_seed(0)
    hetero = train(model(ht.HeteroActivation(HIDDEN * 8)), data, a.epochs, "hsnn hetero")
    torch.manual_seed(0)
    relu = train(model(torch.nn.ReLU()), data, a.epochs, "torch ReLU")
    print(f"test accuracy: heterogeneous {hetero:.3f}, ReLU {relu:.3f}")
    return 0 if hetero > 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
