"""A physics-informed network: u'' + u = 0 on [0, 2*pi], u(0) = 0, u'(0) = 1
(exact solution sin(x)), solved by a heterogeneous network (sin, tanh and
gelu neurons with trainable constants) whose loss holds u'' of its own
output. Each training step differentiates through a second derivative, so
every activation runs f, f', f'' and f''' (and their derivatives in the
constants): hsnn compiles them from the formulas' symbolic derivatives.
The same network with PyTorch's tanh in every neuron trains beside it.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/pinn.py [--full]
"""
import argparse
import math
import time

import torch

import hsnn.torch as ht

WIDTH = 24
NEURONS = [("sin(num*w)", {"w": 1.0}), ("tanh(num)*a", {"a": 1.0}), "gelu"]


def network(activation):
    return torch.nn.Sequential(torch.nn.Linear(1, WIDTH), activation, torch.nn.Linear(WIDTH, 1)).double()


def residual_loss(net, x, x0):
    u = net(x)
    du, = torch.autograd.grad(u.sum(), x, create_graph=True)
    d2u, = torch.autograd.grad(du.sum(), x, create_graph=True)
    u0 = net(x0)
    du0, = torch.autograd.grad(u0.sum(), x0, create_graph=True)
    return ((d2u + u) ** 2).mean() + (u0 ** 2).sum() + ((du0 - 1) ** 2).sum()


def max_error(net):
    grid = torch.linspace(0, 2 * math.pi, 400, dtype=torch.float64).reshape(-1, 1)
    with torch.no_grad():
        return (net(grid) - torch.sin(grid)).abs().max().item()


def train(net, steps, label, report_every):
    torch.manual_seed(1)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(steps // 3, 1), gamma=0.3)
    x0 = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    errors, times = [max_error(net)], []  # before training, then at each report
    for step in range(1, steps + 1):
        x = (torch.rand(128, 1, dtype=torch.float64) * 2 * math.pi).requires_grad_()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = residual_loss(net, x, x0)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        sched.step()
        if step % report_every == 0 or step == steps:
            errors.append(max_error(net))
            print(f"{label:<12} step {step:5d}  loss {loss.item():.3e}  max |u - sin| {errors[-1]:.3e}")
    times.sort()
    return errors, 1e3 * times[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="train 3000 steps instead of the quick run's 300")
    a = p.parse_args()
    steps = 3000 if a.full else 300
    every = steps // 6
    torch.manual_seed(0)
    hetero = network(ht.HeteroActivation(NEURONS * (WIDTH // len(NEURONS)), trainable=True))
    errors, ms = train(hetero, steps, "hsnn hetero", every)
    torch.manual_seed(0)
    baseline = network(torch.nn.Tanh())
    base_errors, base_ms = train(baseline, steps, "torch tanh", every)
    print(f"max error against sin(x), untrained -> trained: hsnn heterogeneous {errors[0]:.3e} -> {errors[-1]:.3e}, "
          f"torch tanh {base_errors[0]:.3e} -> {base_errors[-1]:.3e}")
    print(f"median time per step: hsnn heterogeneous {ms:.2f} ms, torch tanh {base_ms:.2f} ms")
    falling = errors[-1] < errors[0] / 2
    print("error falling: " + ("yes" if falling else "NO"))
    return 0 if falling else 1


if __name__ == "__main__":
    raise SystemExit(main())
