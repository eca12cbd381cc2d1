"""The GPU bench's workloads in PyTorch, timed as `hsnn-jit bench --device cuda` times hsnn's (a synchronized call,
wall clock, the median of --reps after a warm-up) beside a device-to-device copy of the same bytes measured right
after each: the heterogeneous W1 layer (65536 x 256, node j runs formula j % 8) in PyTorch eager (one slice per
formula group) and under torch.compile, PyTorch's own gelu, hsnn.torch's HeteroActivation, and the per-call time
of HeteroActivation and torch.tanh forward + backward at the latency sizes. Prints JSON for table.py.

    python3 torch_peers.py [--reps N] [--dtype f32|f64|both] > torch.json
"""
import argparse
import json
import statistics
import sys
import time

import torch

BATCH, NODES = 65536, 256
FORMULAS = [torch.relu, torch.sigmoid, torch.tanh, torch.nn.functional.gelu, torch.nn.functional.silu,
            torch.nn.functional.softplus, torch.sin, lambda x: 0.5 * x + 0.1]
HSNN_FORMULAS = ["relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)", "0.5*num+0.1"]


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def with_copy(rows, workload, variant, dtype, fn, arrays, elements, reps):
    """Times fn, then a copy of elements * arrays / 2 elements (the kernel's traffic as a copy's)."""
    ms = median_ms(fn, reps)
    src = torch.empty(elements * arrays // 2, dtype=dtype, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), reps)
    rows.append({"workload": workload, "variant": variant, "dtype": "f32" if dtype == torch.float32 else "f64",
                 "ms": round(ms, 4), "copy_ms": round(copy_ms, 4), "x_copy": round(ms / copy_ms, 3)})


def eager_layer(z):
    """W1 in eager PyTorch: column j gets formula j % 8, one strided slice per formula."""
    out = torch.empty_like(z)
    for k, f in enumerate(FORMULAS):
        out[:, k::8] = f(z[:, k::8])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--dtype", choices=["f32", "f64", "both"], default="both")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": f"PyTorch {torch.__version__} sees no CUDA device"}))
        return 0
    rows = []
    dtypes = {"f32": [torch.float32], "f64": [torch.float64], "both": [torch.float32, torch.float64]}[a.dtype]
    compiled_layer = torch.compile(eager_layer)
    try:
        import hsnn.torch as ht
    except ImportError as e:
        ht, why = None, str(e)
    for dtype in dtypes:
        z = torch.randn(BATCH, NODES, dtype=dtype, device="cuda")
        n = z.numel()
        with torch.no_grad():
            with_copy(rows, "W1", "torch eager forward batch_major", dtype, lambda: eager_layer(z), 2, n, a.reps)
            with_copy(rows, "W1", "torch.compile forward batch_major", dtype, lambda: compiled_layer(z), 2, n, a.reps)
            with_copy(rows, "W3", "torch gelu forward", dtype, lambda: torch.nn.functional.gelu(z), 2, n, a.reps)
            if ht is not None:
                act = ht.HeteroActivation(HSNN_FORMULAS * (NODES // 8)).cuda()
                with_copy(rows, "W1", "HeteroActivation forward batch_major", dtype, lambda: act(z), 2, n, a.reps)
        for nodes, batch in ((64, 32), (256, 1024), (256, 65536)):
            x = torch.randn(batch, nodes, dtype=dtype, device="cuda", requires_grad=True)
            g = torch.ones_like(x)
            step = lambda f: torch.autograd.grad(f(x), x, g)  # noqa: E731
            with_copy(rows, "latency", f"torch.tanh forward+backward {nodes}x{batch}", dtype,
                      lambda: step(torch.tanh), 5, x.numel(), a.reps)
            if ht is not None:
                act = ht.HeteroActivation(HSNN_FORMULAS * (nodes // 8)).cuda()
                with_copy(rows, "latency", f"HeteroActivation forward+backward {nodes}x{batch}", dtype,
                          lambda: step(act), 5, x.numel(), a.reps)
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": rows}
    if ht is None:
        out["hsnn_torch"] = f"not measured: {why}"
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
