"""Populations from Python, beside NumPy and NumExpr in the same run.

N new random formulas of 1-64 nodes (+ - * /, and with exp/log/sin/cos, numbers
written in), one variable, each scored by MSE against a target over `rows`
rows, as a search's generation is:
  hsnn      hsnn.Population: prepare + score (first) and score alone (then);
            constant gradients (every number a constant)
  numpy     per formula: the text compiled to Python code and run on arrays
            (first), the compiled code run again (then)
  numexpr   per formula: numexpr.evaluate (it compiles each new text; its cache
            holds fewer formulas than a population)
Node evaluations per second = the formulas' sizes summed x rows / time, beside
a copy's GB/s measured in the same row (this machine's bandwidth drifts).

    PYTHONPATH=build/python /usr/bin/python3 bench/population.py [--full] [--dtype float64]
"""
import argparse
import platform

import numpy as np

import hsnn
from hsnn.bench import _median_ms

UNARY, BINARY = ["exp", "log", "sin", "cos"], ["+", "-", "*", "/"]


def random_tree(nodes, math, rng):
    if nodes <= 1:
        return "num" if rng.integers(3) else f"{rng.uniform(0.1, 2.0):.3f}"
    if math and rng.integers(4) == 0:
        return f"{UNARY[rng.integers(4)]}({random_tree(nodes - 1, math, rng)})"
    if nodes == 2:
        return f"-{random_tree(1, math, rng)}"
    left = int(rng.integers(1, nodes - 1))
    return f"({random_tree(left, math, rng)} {BINARY[rng.integers(4)]} {random_tree(nodes - 1 - left, math, rng)})"


def timed(fn, reps):
    """Seconds: the median of reps runs after a warm-up (hsnn.bench's)."""
    return _median_ms(fn, reps) / 1e3


def copy_gbs(reps):
    a = np.ones(8 << 20)
    b = np.empty_like(a)
    return 2 * a.nbytes / timed(lambda: np.copyto(b, a), reps) / 1e9


def row(n, rows, math, dtype, reps, others):
    rng = np.random.default_rng(n + rows + math)
    sizes = rng.integers(1, 65, n)
    formulas = [random_tree(int(s), math, rng) for s in sizes]
    evals = float(sizes.sum()) * rows
    x = rng.uniform(0.1, 2.0, rows).astype(dtype)
    y = rng.uniform(-1, 1, rows).astype(dtype)
    out = {"ops": "+-*/ exp log sin cos" if math else "+-*/", "n": n, "rows": rows}
    k = [0]

    def fresh():  # new texts each time: a generation never seen before
        k[0] += 1
        return [f"{f} + {k[0]}" for f in formulas]

    first = timed(lambda: hsnn.Population(fresh(), dtype=dtype).fitness(x, y), max(3, reps // 2))
    pop = hsnn.Population(formulas, dtype=dtype)
    out["hsnn_first"] = first
    out["hsnn_then"] = timed(lambda: pop.fitness(x, y), reps)
    fitted = hsnn.Population(formulas, dtype=dtype, literals_as_constants=True)
    out["hsnn_grads"] = timed(lambda: fitted.constant_gradients(x, y), max(1, reps // 2))
    if others:
        env = {"exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos}
        codes = [compile(f, "<formula>", "eval") for f in formulas]

        def numpy_first():
            with np.errstate(all="ignore"):
                for f in fresh():
                    v = eval(compile(f, "<formula>", "eval"), env, {"num": x})  # noqa: S307 (our own random texts)
                    ((v - y) ** 2).mean()

        def numpy_then():
            with np.errstate(all="ignore"):
                for c in codes:
                    v = eval(c, env, {"num": x})  # noqa: S307
                    ((v - y) ** 2).mean()
        out["numpy_first"] = timed(numpy_first, 1)
        out["numpy_then"] = timed(numpy_then, 1)
        try:
            import numexpr
        except ImportError:
            numexpr = None
        if numexpr is not None:
            def ne():
                for f in fresh():
                    v = numexpr.evaluate(f, local_dict={"num": x})
                    ((v - y) ** 2).mean()
            out["numexpr"] = timed(ne, 1)
    out["gbs"] = copy_gbs(reps)
    out["evals"] = evals
    return out


def main():
    p = argparse.ArgumentParser(description="populations beside NumPy and NumExpr")
    p.add_argument("--full", action="store_true", help="N up to 10^4 and rows up to 10^5 (minutes)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    print(f"cpu: {cpu} ({hsnn.runtime_info().get('cpu_name', '?')}), {a.dtype}; "
          "ms per generation (G = 10^9 node evaluations per second)")
    print(f"{'ops':<21} {'N':>6} {'rows':>7} {'hsnn first':>16} {'hsnn then':>16} {'grads':>14} "
          f"{'numpy first':>16} {'numpy then':>16} {'numexpr':>16} {'copy GB/s':>9}")
    grid = [(1000, r) for r in (100, 1000, 10000)]
    if a.full:
        grid += [(1000, 100000), (10000, 1000), (10000, 10000)]
    for math in (False, True):
        for n, rows in grid:
            r = row(n, rows, math, a.dtype, a.reps, others=n * rows <= 10 ** 7)

            def cell(key):
                if key not in r:
                    return f"{'-':>16}"
                return f"{r[key] * 1e3:9.2f} {r['evals'] / r[key] / 1e9:5.2f}G"
            print(f"{r['ops']:<21} {n:>6} {rows:>7} {cell('hsnn_first')} {cell('hsnn_then')} "
                  f"{r['hsnn_grads'] * 1e3:8.2f} {r['evals'] / r['hsnn_grads'] / 1e9:4.2f}G {cell('numpy_first')} "
                  f"{cell('numpy_then')} {cell('numexpr')} {r['gbs']:9.1f}")


if __name__ == "__main__":
    main()
