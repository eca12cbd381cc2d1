"""Populations: many new formulas, scored at once.

The loop of a formula search (neuroevolution, symbolic regression, grid
search) brings formulas never seen before each generation, each scored against
the same data. A :class:`Population` prepares them without LLVM (parse,
simplify, bytecode: no derivative unless one is asked for) and scores them in
one call on one interpreter whose op kernels are the compiled layers' own, so
a formula's values have the bits of the same formula in a ``cpu_jit`` layer.

    import numpy as np, hsnn
    X = np.random.default_rng(0).uniform(0.1, 2, (1000, 2))
    y = 2.5 * X[:, 0] / X[:, 1]
    pop = hsnn.Population(["x0/x1", ("c*x0/x1", {"c": 1.0}), "x0 - x1"], variables=["x0", "x1"])
    scores = pop.fitness(X, y)                        # MSE of each formula, no (N, rows) array
    scores, grads = pop.constant_gradients(X, y)      # d score / d constants, for fitting

A formula that does not parse, or names neither a variable nor a given
constant, does not fail the population: it is in :attr:`Population.errors`,
its values and score are NaN. Arrays may be NumPy arrays or any CPU DLPack
tensor (PyTorch, JAX); they are converted to the population's dtype, and X is
read in place when it is C- or Fortran-contiguous.
"""

from collections import namedtuple

import numpy as np

from . import _core

PopulationError = namedtuple("PopulationError", "index column message text")
PopulationError.__doc__ = """A formula that could not be used: its index, the 1-based column of the cause
(0: the whole formula), the cause, and the rendered diagnostic with its caret line."""


def op_codes():
    """The op codes of :meth:`Population.from_arrays` by name: ``number``, ``variable``, ``constant`` (leaves), ``add``,
    ``sub``, ``mul``, ``div``, ``pow``, ``neg`` and the functions by their names (``sin``, ``exp``, ``Max``, ...)."""
    return dict(_core._population_op_codes())


def _array(x, dtype, name):
    if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
        from . import _from_dlpack
        x, _ = _from_dlpack(x, name)
    return np.asarray(x, dtype=dtype)


class Population:
    """N formulas over named variables, each with its own constants.

    ``formulas``: formula texts or ``(formula, {name: value})`` pairs, as layers take them.
    ``variables``: the names of X's columns (``["num"]`` by default).
    ``literals_as_constants``: every number written becomes a constant (``_c0``, ``_c1``, ... in the order written,
    the number its starting value), as symbolic regression fits them.
    ``method``: where :meth:`evaluate` and :meth:`fitness` run: ``"auto"`` or ``"cpu_interp"`` on the CPU,
    ``"cuda"`` on GPU ``gpu_id``, every formula in one launch (arrays are copied there and back; the interpreter
    kernel is built once per device, dtype and loss). Gradients run on the CPU.
    """

    def __init__(self, formulas, variables=("num",), dtype="float32", literals_as_constants=False, method="auto",
                 gpu_id=0, *, _native=None):
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got '{self.dtype}'")
        self.variables = [str(v) for v in variables]
        if _native is not None:
            self._p = _native
            return
        members = []
        for f in formulas:
            if isinstance(f, str):
                members.append((f, {}))
            else:
                formula, constants = f
                members.append((formula, dict(constants or {})))
        self._p = _core._Population(members, self.variables, self.dtype == np.float64, bool(literals_as_constants),
                                    str(method), int(gpu_id))

    @classmethod
    def from_arrays(cls, codes, values, lengths, variables=("num",), order="prefix", dtype="float32",
                    literals_as_constants=False, method="auto", gpu_id=0):
        """Trees as arrays, as GPU genetic-programming systems encode them: formula i is the next ``lengths[i]``
        entries of ``codes`` (op codes, :func:`op_codes`) and ``values``, in ``order`` "prefix" (an operator before
        its operands) or "postfix". A ``number`` leaf's value is the number, a ``variable`` leaf's the variable's
        index, a ``constant`` leaf's its starting value (it can be fitted). ``codes`` and ``values`` may also be 2-D
        (one padded row per formula) with ``lengths`` saying how much of each row is the tree."""
        if order not in ("prefix", "postfix"):
            raise ValueError(f"order must be 'prefix' or 'postfix', got '{order}'")
        codes, values = np.asarray(codes), np.asarray(values, dtype=np.float64)
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        if codes.shape != values.shape:
            raise ValueError(f"codes has shape {codes.shape} but values {values.shape}")
        if codes.ndim == 2:
            if len(lengths) != codes.shape[0] or (lengths > codes.shape[1]).any() or (lengths < 0).any():
                raise ValueError("lengths must give, for each row of codes, a length from 0 to the row's size")
            keep = np.arange(codes.shape[1])[None, :] < lengths[:, None]
            codes, values = codes[keep], values[keep]
        elif codes.ndim != 1:
            raise ValueError(f"codes must be 1-D or 2-D, got {codes.ndim} dimensions")
        if (lengths < 0).any():
            raise ValueError("lengths must not be negative")
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        variables = [str(v) for v in variables]
        native = _core._Population.from_arrays(codes.astype(np.int32), values, offsets, order == "postfix", variables,
                                               np.dtype(dtype) == np.float64, bool(literals_as_constants),
                                               str(method), int(gpu_id))
        return cls(None, variables, dtype, _native=native)

    def __len__(self):
        return len(self._p)

    @property
    def errors(self):
        """The formulas that could not be used, as :class:`PopulationError`, in order."""
        return [PopulationError(*e) for e in self._p.errors]

    def valid(self, i):
        return self._p.valid(i)

    def simplified(self, i):
        """Formula i as simplified (SymPy syntax); "" for an invalid one."""
        return self._p.simplified(i)

    def constant_names(self, i):
        return list(self._p.constant_names(i))

    @property
    def constants(self):
        """All formulas' constants in one array; formula i's are ``constants[offsets[i]:offsets[i+1]]``."""
        return self._p.constants

    @constants.setter
    def constants(self, values):
        self._p.set_constants(np.asarray(values, dtype=np.float64))

    @property
    def offsets(self):
        return self._p.offsets

    def _x(self, X):
        X = _array(X, self.dtype, "X")
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2 or X.shape[1] != len(self.variables):
            raise ValueError(f"X has shape {X.shape}; expected (rows, {len(self.variables)}) for variables "
                             f"{self.variables}")
        if X.flags.c_contiguous:
            return X, X.shape[0], False
        if X.flags.f_contiguous:
            return X, X.shape[0], True  # read in place, column by column
        return np.ascontiguousarray(X), X.shape[0], False

    def _target(self, y, rows, name):
        if y is None:
            return None
        y = np.ascontiguousarray(_array(y, self.dtype, name)).reshape(-1)
        if y.shape[0] != rows:
            raise ValueError(f"'{name}' has {y.shape[0]} values for {rows} rows")
        return y

    def evaluate(self, X):
        """Each formula at each row of X (rows x variables): an (N, rows) array."""
        X, rows, col = self._x(X)
        return self._p.evaluate(X, rows, col, self.dtype == np.float64, False)

    def fitness(self, X, y, loss="mse", reduction="mean", weights=None, loss_constants=None):
        """Each formula's loss against y (a built-in loss or a formula in y_pred and y_true), reduced ("mean" or
        "sum"; with ``weights``, each row's loss weighed, a mean divided by their sum): N scores in float64, computed
        without an (N, rows) array. NaN for an invalid formula."""
        X, rows, col = self._x(X)
        return self._p.score(X, rows, col, self.dtype == np.float64, self._target(y, rows, "y"),
                             self._target(weights, rows, "weights"), loss, dict(loss_constants or {}), reduction, False)

    def constant_gradients(self, X, y, loss="mse", reduction="mean", weights=None, loss_constants=None):
        """The scores, and the gradient of each formula's score with respect to its constants (laid out as
        :attr:`constants`), for constant fitting. The derivatives are taken at the first call and kept."""
        X, rows, col = self._x(X)
        return self._p.score(X, rows, col, self.dtype == np.float64, self._target(y, rows, "y"),
                             self._target(weights, rows, "weights"), loss, dict(loss_constants or {}), reduction, True)

    def variable_gradients(self, X):
        """d formula / d variable at each row: an (N, variables, rows) array."""
        X, rows, col = self._x(X)
        return self._p.evaluate(X, rows, col, self.dtype == np.float64, True)

    def __repr__(self):
        return (f"Population({len(self)} formulas over {self.variables}, {self.dtype.name}, "
                f"{len(self._p.errors)} invalid)")
