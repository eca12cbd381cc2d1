"""Symbolic regression by genetic programming, with hsnn scoring every
generation: a law of the Feynman symbolic-regression benchmark (II.3.24, the
flux of a point source, F = P / (4 pi r^2)) recovered from noisy samples.

Trees live in NumPy arrays in prefix order, as GPU genetic-programming systems
keep them (hsnn.op_codes()); mutation and crossover cut and splice those
arrays. Each generation's trees go to hsnn.Population.from_arrays (no strings,
no LLVM), are scored in one call (MSE, no N x rows array), and their constants
are fitted by a few gradient steps on hsnn's constant gradients. With --dask
the population is spread over a dask.distributed cluster (a LocalCluster of
two workers here), for searches that outgrow one machine.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/symbolic_regression.py [--dask]
"""
import argparse
import time

import numpy as np

import hsnn

CODES = hsnn.op_codes()
VAR, CONST = CODES["variable"], CODES["constant"]
BINARY = [CODES[n] for n in ("add", "sub", "mul", "div")]
UNARY = [CODES[n] for n in ("sin", "exp")]
ARITY = np.zeros(max(CODES.values()) + 1, dtype=np.int64)
ARITY[BINARY] = 2
ARITY[UNARY] = 1
MAX_LEN = 31
VARIABLES = ["P", "r"]


def feynman_ii_3_24(rows, rng, noise=0.01):
    """Samples of F = P / (4 pi r^2) over the benchmark's ranges (P, r in [1, 5]), 1% noise."""
    X = rng.uniform(1, 5, (rows, 2))
    y = X[:, 0] / (4 * np.pi * X[:, 1] ** 2)
    return X, y * (1 + noise * rng.standard_normal(rows))


def random_tree(rng, depth):
    """A random tree as (codes, values) lists in prefix order."""
    if depth == 0 or rng.random() < 0.3:
        if rng.random() < 0.6:
            return [VAR], [float(rng.integers(len(VARIABLES)))]
        return [CONST], [float(rng.normal())]
    op = int(rng.choice(UNARY if rng.random() < 0.15 else BINARY))
    codes, values = [op], [0.0]
    for _ in range(ARITY[op]):
        c, v = random_tree(rng, depth - 1)
        codes += c
        values += v
    return codes, values


def subtree_end(codes, i):
    """Where the subtree starting at i ends (prefix order: the first point where every operator has its operands)."""
    need = np.cumsum(ARITY[codes[i:]] - 1)
    return i + int(np.argmax(need == -1)) + 1


class Trees:
    """A population of prefix trees, padded to MAX_LEN."""

    def __init__(self, n, rng):
        self.codes = np.zeros((n, MAX_LEN), dtype=np.int32)
        self.values = np.zeros((n, MAX_LEN))
        self.lengths = np.zeros(n, dtype=np.int64)
        for i in range(n):
            c, v = random_tree(rng, 3)
            self.set(i, np.array(c), np.array(v))

    def set(self, i, codes, values):
        self.codes[i, :len(codes)], self.values[i, :len(codes)], self.lengths[i] = codes, values, len(codes)

    def get(self, i):
        n = self.lengths[i]
        return self.codes[i, :n].copy(), self.values[i, :n].copy()


def offspring(trees, scores, rng, tournament=5):
    """The next generation: tournament selection, subtree crossover and mutation, the best kept."""
    n = len(trees.lengths)
    scores = np.where(np.isfinite(scores), scores, np.inf) + 1e-4 * trees.lengths  # parsimony
    contenders = rng.integers(n, size=(n, tournament))
    parents = contenders[np.arange(n), np.argmin(scores[contenders], axis=1)]
    child = Trees(0, rng)
    child.codes, child.values, child.lengths = (trees.codes[parents].copy(), trees.values[parents].copy(),
                                                trees.lengths[parents].copy())
    best = int(np.argmin(scores))
    for i in range(1, n):
        codes, values = child.get(i)
        at = int(rng.integers(len(codes)))
        end = subtree_end(codes, at)
        if rng.random() < 0.7:  # crossover: a subtree of another parent
            donor_codes, donor_values = child.get(int(rng.integers(n)))
            d0 = int(rng.integers(len(donor_codes)))
            d1 = subtree_end(donor_codes, d0)
            insert_codes, insert_values = donor_codes[d0:d1], donor_values[d0:d1]
        else:  # mutation: a new small subtree
            c, v = random_tree(rng, 2)
            insert_codes, insert_values = np.array(c), np.array(v)
        new_codes = np.concatenate([codes[:at], insert_codes, codes[end:]])
        if len(new_codes) <= MAX_LEN:
            child.set(i, new_codes, np.concatenate([values[:at], insert_values, values[end:]]))
    child.set(0, *trees.get(best))  # elitism
    return child


def fit_constants(pop, X, y, steps):
    """A few gradient steps on every formula's constants at once, each formula's step halved when its score
    does not improve (a line search per formula, vectorized)."""
    scores, grads = pop.constant_gradients(X, y)
    if len(grads) == 0:
        return scores
    owner = np.repeat(np.arange(len(pop)), np.diff(pop.offsets))
    step = np.full(len(pop), 0.1)
    c = pop.constants
    for _ in range(steps):
        norm = np.sqrt(np.bincount(owner, grads * grads, minlength=len(pop)))
        trial = c - (step / np.maximum(norm, 1e-12))[owner] * grads
        pop.constants = np.where(np.isfinite(trial), trial, c)
        new_scores, new_grads = pop.constant_gradients(X, y)
        better = np.isfinite(new_scores) & ((new_scores < scores) | ~np.isfinite(scores))
        keep = better[owner]
        c = np.where(keep, pop.constants, c)
        grads = np.where(keep, new_grads, grads)
        scores = np.where(better, new_scores, scores)
        step = np.where(better, step * 1.5, step * 0.5)
    pop.constants = c
    return scores


def score_chunk(codes, values, lengths, X, y, fit_steps):
    """One worker's share: trees to a population, constants fitted, scores and fitted constants back."""
    pop = hsnn.Population.from_arrays(codes, values, lengths, variables=VARIABLES, dtype="float64")
    scores = fit_constants(pop, X, y, fit_steps)
    return scores, pop.constants, pop.offsets


def write_back(trees, rows, constants, offsets):
    """Fitted constants into the trees' constant leaves (their order in a tree is the order written: _c0, _c1, ...,
    which the population keeps sorted by name)."""
    for k, i in enumerate(rows):
        n = trees.lengths[i]
        slots = np.flatnonzero(trees.codes[i, :n] == CONST)
        fitted = constants[offsets[k]:offsets[k + 1]]
        if len(fitted) != len(slots):
            continue  # a constant simplified away: keep the tree's values
        names = sorted(f"_c{j}" for j in range(len(slots)))
        trees.values[i, slots[[int(name[2:]) for name in names]]] = fitted


def shown(trees, i):
    """Tree i as text, its fitted constants written in."""
    one = hsnn.Population.from_arrays(trees.codes[i:i + 1], trees.values[i:i + 1], trees.lengths[i:i + 1],
                                      variables=VARIABLES, dtype="float64")
    text = one.simplified(0)
    for name, value in sorted(zip(one.constant_names(0), one.constants), key=lambda nv: -len(nv[0])):
        text = text.replace(name, f"{value:.6g}")
    return text, one


def evolve(args):
    rng = np.random.default_rng(args.seed)
    X, y = feynman_ii_3_24(args.rows, rng)
    truth = X[:, 0] / (4 * np.pi * X[:, 1] ** 2)
    noise_floor = ((truth - y) ** 2).mean()  # the law's own MSE against the noisy samples
    trees = Trees(args.population, rng)
    client = None
    if args.dask:
        from dask.distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
        X_remote, y_remote = client.scatter([X, y], broadcast=True)
    t0 = time.perf_counter()
    best_score, best, best_pop = np.inf, "", None
    for generation in range(args.generations):
        if client is None:
            scores, constants, offsets = score_chunk(trees.codes, trees.values, trees.lengths, X, y, args.fit_steps)
            write_back(trees, range(len(trees.lengths)), constants, offsets)
        else:
            parts = np.array_split(np.arange(len(trees.lengths)), 2 * len(client.scheduler_info()["workers"]))
            futures = [client.submit(score_chunk, trees.codes[p], trees.values[p], trees.lengths[p], X_remote,
                                     y_remote, args.fit_steps, pure=False) for p in parts]
            scores = np.empty(len(trees.lengths))
            for p, (s, constants, offsets) in zip(parts, client.gather(futures)):
                scores[p] = s
                write_back(trees, p, constants, offsets)
        finite = np.where(np.isfinite(scores), scores, np.inf)
        # The shortest of the formulas within 0.5% of the generation's best: the law, not a longer imitation.
        near = np.flatnonzero(finite <= finite.min() * 1.005)
        i = int(near[np.argmin(trees.lengths[near])])
        if scores[i] < best_score:
            best_score = scores[i]
            best, best_pop = shown(trees, i)
        print(f"generation {generation:3d}: best mse {best_score:.3e}  {best}")
        if best_score <= noise_floor * (1 + args.tolerance):
            break
        trees = offspring(trees, scores, rng)
    seconds = time.perf_counter() - t0
    if client is not None:
        client.close()
        cluster.close()
    print(f"{generation + 1} generations of {args.population} formulas in {seconds:.2f} s: "
          f"{(generation + 1) / seconds:.2f} generations/s")
    r2 = 1 - ((best_pop.evaluate(X)[0] - truth) ** 2).mean() / truth.var()
    print(f"found: {best}  (the law: P/(4*pi*r**2) = 0.0795775*P/r**2; R^2 against it {r2:.6f}; "
          f"mse {best_score:.3e}, the law's own {noise_floor:.3e})")
    print(f"recovered: {'yes' if r2 > 0.999 else 'no'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--population", type=int, default=1000)
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--fit-steps", type=int, default=10)
    parser.add_argument("--tolerance", type=float, default=0.005,
                        help="stop at an MSE this far (relative) above the law's own on the noisy samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dask", action="store_true", help="score on a dask.distributed LocalCluster of two workers")
    evolve(parser.parse_args())
