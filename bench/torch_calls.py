#!/usr/bin/python3
"""hsnn.torch's per-call cost on small tensors: what a module call costs in
glue, the kernels being the smaller part at these sizes.

Each row is one forward and backward (torch.autograd.grad with a fixed
upstream, so nothing accumulates) of HeteroActivation or FormulaLoss:

  activation            not trainable: hsnn._torch's C++ node where it was built
  activation trainable  the constants too: the Python autograd functions
  activation 2nd order  d/dz of (d/dz, create_graph=True): the backward built of hsnn kernels
  ... trainable 2nd     the same in z and the constants
  loss mean             huber, not trainable (the C++ node where built)
  loss mean trainable   huber's delta too (the Python function)
  loss none trainable   reduction="none", upstream per element
  loss 2nd order        d/dy_pred of (d/dy_pred, create_graph=True)

The rows run in turn, one call of each per round (hsnn.bench's
_alternating_medians_us), so that drift in the machine's speed falls on all
of them alike; the medians are printed in microseconds.

--against MODULE times every row a second time with another version of
hsnn.torch's code, in the same process and in the same turns: a copy of an
older torch.py put into the package under another name (say
build/python/hsnn/_torch_before.py, then --against hsnn._torch_before),
running on the same compiled _core and _torch. Separate processes, one per
version, differed by more than the change on a shared machine.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_calls.py [--reps N] [--batch B] [--nodes N]
        [--dtype float32|float64] [--threads T] [--against MODULE] [--json]
"""
import argparse
import importlib
import json

import torch

import hsnn
import hsnn.torch as ht
from hsnn.bench import _alternating_medians_us

FORMULAS = ["relu", "sigmoid", "tanh", "gelu", ("sin(num)*alpha", {"alpha": 1.5}), ("elu", {"alpha": 0.9}), "softplus",
            ("leaky_relu", {"negative_slope": 0.1})]


def cases(ht, batch, nodes, dtype):
    formulas = [FORMULAS[j % len(FORMULAS)] for j in range(nodes)]
    plain = ht.HeteroActivation(formulas)
    trained = ht.HeteroActivation(formulas, trainable=True)
    g = torch.Generator().manual_seed(0)
    z = (torch.rand(batch, nodes, generator=g, dtype=dtype) * 8 - 4).requires_grad_()
    up = torch.rand(batch, nodes, generator=g, dtype=dtype)
    loss, trained_loss = ht.FormulaLoss("huber", {"delta": 0.5}), ht.FormulaLoss("huber", {"delta": 0.5},
                                                                                 trainable=True)
    elements = ht.FormulaLoss("huber", {"delta": 0.5}, reduction="none", trainable=True)
    p = torch.randn(batch, nodes, generator=g, dtype=dtype).requires_grad_()
    t = torch.randn(batch, nodes, generator=g, dtype=dtype)
    grad = torch.autograd.grad

    def second(f, inputs):
        first, = grad(f(z), z, up, create_graph=True)
        return grad(first, inputs, up)

    def second_loss():
        first, = grad(loss(p, t), p, create_graph=True)
        return grad(first, p, up)

    return {
        "activation": lambda: grad(plain(z), z, up),
        "activation trainable": lambda: grad(trained(z), (z, trained.constants), up),
        "activation 2nd order": lambda: second(plain, z),
        "activation trainable 2nd": lambda: second(trained, (z, trained.constants)),
        "loss mean": lambda: grad(loss(p, t), p),
        "loss mean trainable": lambda: grad(trained_loss(p, t), (p, trained_loss.constants)),
        "loss none trainable": lambda: grad(elements(p, t), (p, elements.constants), up),
        "loss 2nd order": second_loss,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1000, help="calls of each row; the median is printed")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    ap.add_argument("--json", action="store_true", help="one JSON object of the medians instead of the table")
    ap.add_argument("--against", metavar="MODULE", help="another version of hsnn.torch, timed beside it")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    rows = cases(ht, args.batch, args.nodes, dtype)
    fns = dict(rows)
    if args.against:
        fns.update({(name, args.against): fn
                    for name, fn in cases(importlib.import_module(args.against), args.batch, args.nodes, dtype).items()})
    medians = _alternating_medians_us(fns, args.reps)
    if args.json:
        print(json.dumps({name: {"us": medians[name], args.against: medians[(name, args.against)]} if args.against
                          else medians[name] for name in rows}))
        return
    print(f"{args.batch} x {args.nodes} {args.dtype}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"hsnn._torch {'built' if ht._ext is not None else 'absent'}, {hsnn.__file__}; medians of {args.reps} (us)")
    if not args.against:
        for name in rows:
            print(f"{name:26} {medians[name]:9.1f}")
        return
    print(f"{'':26} {'hsnn.torch':>10} {args.against:>{max(10, len(args.against))}} {'ratio':>6}")
    for name in rows:
        us, other = medians[name], medians[(name, args.against)]
        print(f"{name:26} {us:10.1f} {other:{max(10, len(args.against))}.1f} {us / other:6.3f}")


if __name__ == "__main__":
    main()
