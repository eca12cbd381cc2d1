"""HeteroSymNN's compiler over hsnn: ``HeteroSymNN.JIT.compiler.SymbolicJITCompiler`` as its code calls it.

Swap in ``from hsnn.compat import SymbolicJITCompiler`` (and ``hsnn.hardware`` for ``Backend.hardware``) and the
seed's layers, losses and networks run on hsnn's kernels. The contract, as HeteroSymNN 0.3 calls it:

- ``SymbolicJITCompiler(configs, calculation_method, device_id=0, mode="activation")``. Activation ``configs``:
  one ``(formula, constants)`` pair (or list, or a bare formula) per node. Loss ``configs``: a list holding one
  pair (a bare pair or formula is accepted too).
- Activations, nodes-major ``(nodes, batch)`` float32, written in place (the call returns ``None``):
  ``forward_kernel(z, a, params, offsets, nodes, batch)``: ``a = f_node(z)``;
  ``backward_kernel(z, err, delta, params, offsets, nodes, batch)``: ``delta = err * f_node'(z)``.
  ``params`` holds each node's constants as the caller wrote them, sorted by name, from ``offsets[node]`` (a lone
  ``[0.0]`` when no node has any: the seed's layout, also in ``compiler.params`` / ``compiler.offsets``). The
  values are read at every call, so changing them needs no recompile. Constants hsnn's formula has that the caller
  did not write (a built-in's defaults: leaky_relu's ``alpha``, bce's ``eps``) keep their defaults.
- Losses: ``forward_kernel(y_pred, y_true, out, params)`` writes each element's loss and
  ``backward_kernel(y_pred, y_true, out, params)`` each element's d/dy_pred, unscaled (the caller reduces).
- Older call shapes still work: ``forward_kernel(z)`` / ``backward_kernel(z, err)`` return new arrays, the 0.2
  signatures with ``func_ids`` in third place, and ``forward_kernel(y_pred, y_true)`` / ``backward_kernel(y_pred,
  y_true)`` return the mean loss and its gradient scaled by 1/N.
- Methods: ``CPU_PYTHON``, ``CPU_CPP`` and ``CPU_JIT`` all run hsnn's JIT (its interpreter where there is no JIT),
  under the name asked for; ``GPU_CUDA`` runs on the GPU, or, where there is none, falls back to the CPU with a
  warning (an error in strict mode) and ``calculation_method`` says ``CPU_PYTHON``, as the seed's own fallback does.
- Names mean what they mean in HeteroSymNN: ``leaky_relu`` with ``alpha`` (default 0.01), ``swish`` with ``beta``
  (default 1.0), ``SiLU``. Deliberate differences: relu'(0) and leaky_relu'(0) are 0 and ``alpha`` (the seed's
  SymPy gives 1/2 and 1), and every built-in uses hsnn's stable forms.
- Errors are HeteroSymNN's exception classes when HeteroSymNN is imported (``FormulaParsingError``,
  ``InvalidDeviceIDError``, ``ComputationalMethodValueError``), else this module's classes of the same names,
  with the seed's message and hsnn's diagnostic (caret, suggestion) after it.
"""
import re
import sys
import warnings

import numpy as np

from . import _core
from . import _on_cuda  # defined before hsnn imports this module

_CPU = ("CPU_PYTHON", "CPU_CPP", "CPU_JIT")
_HSNN_NAMES = {"cuda": "GPU_CUDA", "cpu_jit": "CPU_JIT", "cpu_interp": "CPU_PYTHON", "auto": None}
_RESERVED = {"params", "offset", "num", "y_pred", "y_true", "z_val", "e", "pi", "tau", "phi"}
# The seed's built-ins whose text or constants differ from hsnn's: the seed's meaning, in hsnn's language.
_SEED_BUILTINS = {
    "leaky_relu": ("Piecewise((num, num > 0), (alpha*num, True))", {"alpha": 0.01}),
    "swish": ("num*sigmoid(beta*num)", {"beta": 1.0}),
    "SiLU": ("silu", {}),
}


# The seed's exception family, by the names its code catches; HeteroSymNN's own classes are used when it is
# imported, so that its `except` clauses and tests see their own types.
class HeteroSymNNError(Exception):
    def __init__(self, message=""):
        super().__init__(message)
        self.message = message


class JITError(HeteroSymNNError):
    pass


class FormulaParsingError(JITError, ValueError):
    pass


class JITCompilationError(JITError):
    pass


class BackendError(HeteroSymNNError):
    pass


class InvalidDeviceIDError(BackendError, ValueError):
    pass


class ComputationalMethodValueError(BackendError, ValueError):
    pass


class HeteroSymNNWarning(UserWarning):
    pass


class PerformanceWarning(HeteroSymNNWarning):
    pass


class BackendNotAvailableWarning(HeteroSymNNWarning):
    pass


def _seed_class(name):
    """HeteroSymNN's class of that name when HeteroSymNN is loaded, else ours."""
    seed = sys.modules.get("HeteroSymNN.exceptions")
    if seed is None and "HeteroSymNN" in sys.modules:
        try:
            import importlib
            seed = importlib.import_module("HeteroSymNN.exceptions")
        except ImportError:
            seed = None
    return getattr(seed, name, None) or globals()[name]


def _seed_method(calculation_method):
    if calculation_method is None:
        return _HSNN_NAMES[_core.runtime_info()["default_method"]]
    if isinstance(calculation_method, str) and calculation_method.lower() in _HSNN_NAMES \
            and _HSNN_NAMES[calculation_method.lower()]:
        return _HSNN_NAMES[calculation_method.lower()]
    if calculation_method in _CPU or calculation_method == "GPU_CUDA":
        return calculation_method
    raise _seed_class("ComputationalMethodValueError")(
        f"Calculation Method given isn't GPU_CUDA, CPU_JIT or CPU_PYTHON (got {calculation_method!r})")


def _node_pairs(configs, mode):
    """(formula, constants) per node; a loss's configs is a list holding one pair."""
    if mode == "loss":
        if isinstance(configs, str):
            return [(configs, {})]
        if isinstance(configs, (tuple, list)) and len(configs) == 2 and isinstance(configs[0], str) \
                and (configs[1] is None or isinstance(configs[1], dict)):
            return [(configs[0], dict(configs[1] or {}))]  # a bare pair
        configs = list(configs)
        if len(configs) != 1:
            raise ValueError(f"a loss's configs is a list holding one (formula, constants) pair, got {len(configs)} "
                             "entries")
    pairs = []
    for c in configs:
        if isinstance(c, str):
            pairs.append((c, {}))
        elif isinstance(c, (tuple, list)) and len(c) == 2:
            pairs.append((c[0], dict(c[1] or {})))
        else:
            raise ValueError(f"each node is a formula or a (formula, constants) pair, got {c!r}")
    return pairs


def _seed_layout(pairs):
    """The seed's params and offsets: every constant written, sorted per node; [0.0] when none is."""
    values, offsets = [], []
    for _, constants in pairs:
        offsets.append(len(values))
        values.extend(float(constants[k]) for k in sorted(constants))
    if not values:
        return np.array([0.0], dtype=np.float32), np.zeros(len(pairs), dtype=np.int64)
    return np.array(values, dtype=np.float32), np.array(offsets, dtype=np.int64)


_NODE_ERROR = re.compile(r"^node (\d+): error: ", re.M)


def _split_diagnostics(message):
    """{node: [diagnostic text, ...]} from a layer's report ("node N: error: ..." blocks)."""
    out = {}
    starts = [(m.start(), int(m.group(1))) for m in _NODE_ERROR.finditer(message)]
    for i, (at, node) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(message)
        out.setdefault(node, []).append(message[at:end].split(": error: ", 1)[1].rstrip())
    return out or {None: [message]}


def _seed_message(formula, diagnostic, mode):
    """The seed's message for a formula hsnn refused, with hsnn's diagnostic after it."""
    first = diagnostic.splitlines()[0]
    names = re.findall(r"^missing constant '(\w+)'|^'(\w+)' is a function", first)
    if names:
        missing = [a or b for a, b in names]
        return (f"Missing constants detected in formula '{formula}'. The variables {missing} were found in the "
                "equation but not provided in the constants dictionary. If you intended for these to be mathematical "
                "functions (like sin or cos), please ensure they are called with parentheses (e.g. 'sin(num)' instead "
                f"of 'sin * num'). hsnn: {diagnostic}")
    if first.startswith("unknown function"):
        return (f"Failed to generate executable code for '{formula}'. SymPy found the derivative but cannot translate "
                f"it to the target backend ({mode}): hsnn has no kernel for it. hsnn: {diagnostic}")
    if first.startswith(("expected", "unexpected", "unmatched", "invalid")):
        return (f"Invalid mathematical syntax in '{formula}'. Please check your operators and parentheses. "
                f"hsnn: {diagnostic}")
    return f"Failed to parse the formula '{formula}'. Original error: {diagnostic}"


class SymbolicJITCompiler:
    def __init__(self, configs, calculation_method=None, device_id=0, mode="activation"):
        if mode not in ("activation", "loss"):
            raise ValueError(f"mode must be 'activation' or 'loss', got {mode!r}")
        self.mode = mode
        self.activation_funcs = configs
        self.device_id = device_id
        self.calculation_method = _seed_method(calculation_method)
        self._pairs = _node_pairs(configs, mode)
        self.params, self.offsets = _seed_layout(self._pairs)
        self._compile()

    # --- building -------------------------------------------------------------------------------------------------

    def _hsnn_method(self):
        if self.calculation_method != "GPU_CUDA":
            return "cpu_jit" if _core.runtime_info()["cpu_jit_enabled"] else "cpu_interp"
        if _core.runtime_info()["gpu_enabled"]:
            return "cuda"
        why = _core.runtime_info()["gpu_unavailable_reason"]
        message = f"Tried to change to use 'GPU_CUDA', but no GPU is available ({why}). CPU_PYTHON is required"
        if _core.runtime_flags()["strict"]:
            raise _seed_class("ComputationalMethodValueError")(message + " (strict mode)")
        warnings.warn(message, _seed_class("BackendNotAvailableWarning"), stacklevel=4)
        self.calculation_method = "CPU_PYTHON"
        return self._hsnn_method()

    def _hsnn_nodes(self):
        """Each node in hsnn's language (the seed's built-in names as the seed means them); checks the seed's
        rules hsnn does not have: reserved constant names."""
        nodes, errors = [], {}
        for i, (formula, constants) in enumerate(self._pairs):
            reserved = sorted(set(constants) & _RESERVED)
            if reserved:
                errors.setdefault(i, []).append(
                    f"Cannot use reserved keywords {reserved} as constant names in formula '{formula}'. "
                    "Please rename them.")
            text, defaults = _SEED_BUILTINS.get(formula.strip(), (formula, {}))
            nodes.append((text, {**defaults, **constants}))
        return nodes, errors

    def _compile(self):
        import hsnn
        nodes, errors = self._hsnn_nodes()
        method = self._hsnn_method()
        code = None
        try:
            if self.mode == "activation":
                code = hsnn.ActivationLayer(nodes, dtype="float32", layout="nodes_major", method=method,
                                            gpu_id=self.device_id if method == "cuda" else 0)
            else:
                (formula, constants), = nodes
                code = hsnn.Loss(formula, constants, reduction="sum", dtype="float32", method=method)
        except hsnn.FormulaError as e:
            for node, texts in _split_diagnostics(str(e)).items():
                errors.setdefault(node if node is not None else 0, []).extend(
                    _seed_message(self._pairs[node if node is not None else 0][0], t, self.mode) for t in texts)
        if code is not None:
            # Sampled on the host: a cuda layer's twin on the interpreter answers the same.
            probe = code if code.method != "cuda" else (
                hsnn.ActivationLayer(nodes, dtype="float32", method="cpu_interp") if self.mode == "activation"
                else hsnn.Loss(nodes[0][0], nodes[0][1], reduction="sum", dtype="float32", method="cpu_interp"))
            errors.update({n: [m] for n, m in self._non_finite(probe).items() if n not in errors})
        elif self.mode == "activation":
            # The nodes hsnn took, checked apart, so that one report names every bad node.
            good = [i for i in range(len(nodes)) if i not in errors]
            if good:
                rest = hsnn.ActivationLayer([nodes[i] for i in good], dtype="float32", method="cpu_interp")
                errors.update({good[n]: [m] for n, m in self._non_finite(rest, good).items()})
        if errors:
            lines = []  # one entry per node, as the seed counts them
            for node in sorted(errors):
                first, *rest = errors[node]
                m = first + "".join(f" Also: {r}" for r in rest)
                lines.append(f"  - Node {node}: {m}" if self.mode == "activation" else f"  - {m}")
            raise _seed_class("FormulaParsingError")(
                f"Found {len(lines)} error(s) during kernel generation:\n" + "\n".join(lines))
        self._code = code
        ids = {}
        n = len(self._pairs)
        if self.mode == "activation":
            self.func_ids_cpu = [ids.setdefault(code.formula(i), len(ids)) for i in range(n)]
        else:
            self.func_ids_cpu = [0]
        self.func_ids = np.array(self.func_ids_cpu, dtype=np.int32)
        self._map_params()

    def _non_finite(self, code, node_of=None):
        """Nodes whose formula or derivative is NaN or infinite wherever it is sampled (sqrt(-1)*num: complex;
        log(-num)/0: division by zero): the seed refuses them at compile time, and so does this. `node_of` maps
        the code's nodes to this compiler's."""
        node_of = node_of or list(range(len(self._pairs)))
        points = np.array([0.0, 1e-3, 0.5, 1.0, 2.0, 3.0, 10.0, 100.0, 1e4], dtype=np.float32)
        points = np.concatenate([points, -points[1:]])
        found = {}
        if self.mode == "activation":
            z = np.ascontiguousarray(np.broadcast_to(points, (code.num_nodes, points.size)))
            a, d = code.fused(z)
            for i in range(code.num_nodes):
                for values in (a[i], d[i]):
                    if not np.isfinite(values).any():
                        found[i] = self._invalid_message(self._pairs[node_of[i]][0], values)
                        break
        else:
            yp, yt = np.meshgrid(points, np.array([0.0, 0.25, 0.5, 1.0, -1.0], dtype=np.float32))
            yp, yt = np.ascontiguousarray(yp.ravel()), np.ascontiguousarray(yt.ravel())
            for values in (code.forward_elements(yp, yt), code.gradient(yp, yt)):
                if not np.isfinite(values).any():
                    found[0] = self._invalid_message(self._pairs[0][0], values)
                    break
        return found

    @staticmethod
    def _invalid_message(formula, values):
        if np.isnan(values).all():
            return (f"Formula '{formula}' results in complex/imaginary numbers (e.g., sqrt(-1)), which are not "
                    "supported by the float32 kernels. hsnn: it is NaN wherever it was sampled.")
        return (f"Formula '{formula}' evaluates to an invalid mathematical state (Infinity or NaN). Please check for "
                "division by zero. hsnn: it is not finite anywhere it was sampled.")

    def _map_params(self):
        """Where each of hsnn's constants is in the caller's params: (node, rank among the node's sorted keys), or
        none (hsnn's default stays)."""
        code = self._code
        nodes = range(len(self._pairs)) if self.mode == "activation" else [0]
        names = (lambda i: code.constant_names(i)) if self.mode == "activation" else (lambda i: code.constant_names())
        take_node, take_rank, targets = [], [], []
        index = 0
        for i in nodes:
            given = sorted(self._pairs[i][1])
            for name in names(i):
                if name in given:
                    take_node.append(i)
                    take_rank.append(given.index(name))
                    targets.append(index)
                index += 1
        self._take_node = np.array(take_node, dtype=np.int64)
        self._take_rank = np.array(take_rank, dtype=np.int64)
        self._targets = np.array(targets, dtype=np.int64)
        self._hsnn_params = np.array(code.params if self.mode == "activation" else
                                     [code.constant(n) for n in code.constant_names()], dtype=np.float64)
        self._last = None

    def _apply_params(self, params, offsets=None):
        """Reads the caller's constants (float32, as the seed keeps them) into hsnn's, when they changed."""
        if not self._targets.size:
            return
        params = _host(params).ravel()
        if self.mode == "activation":
            offsets = _host(offsets if offsets is not None else self.offsets).ravel()
            where = offsets[self._take_node].astype(np.int64) + self._take_rank
        else:
            where = self._take_rank
        if where.max() >= params.size:
            raise ValueError(f"params has {params.size} values; this compiler's constants need "
                             f"{int(where.max()) + 1}")
        values = params[where].astype(np.float64)
        if self._last is not None and np.array_equal(values, self._last):
            return
        full = self._hsnn_params.copy()
        full[self._targets] = values
        if self.mode == "activation":
            self._code.set_params(full)
        else:
            for name, value in zip(self._code.constant_names(), full):
                self._code.set_constant(name, float(value))
        self._last = values

    # --- the kernels ----------------------------------------------------------------------------------------------

    def _activation(self, kind, z, err, out, params, offsets, nodes, batch, func_ids=None):
        n = len(self._pairs)
        if int(nodes) != n:
            raise ValueError(f"nodes is {nodes}; this compiler has {n} nodes")
        if func_ids is not None and not np.array_equal(_host(func_ids).ravel(), self.func_ids):
            raise ValueError("func_ids do not match this compiler's formulas (use compiler.func_ids)")
        if func_ids is not None and not np.array_equal(_host(offsets).ravel(), self.offsets):
            raise ValueError("offsets do not match this compiler's constants (use compiler.offsets)")
        if func_ids is not None and _host(params).size != self.params.size:
            raise ValueError(f"params has {_host(params).size} values; this compiler's constants need "
                             f"{self.params.size}")
        self._apply_params(params, offsets)
        shape = (n, int(batch))
        if _on_cuda(out):
            result = out.reshape(shape)
            args = [z.reshape(shape)] + ([err.reshape(shape)] if kind == "backward" else [])
            getattr(self._code, kind)(*args, out=result)
            return out
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous \
                or out.size != n * int(batch):
            raise ValueError(f"the output must be a C-contiguous float32 array of {n} x {batch} elements")
        z = _f32(z).reshape(shape)
        if kind == "forward":
            self._code.forward(z, out=out.reshape(shape))
        else:
            self._code.backward(z, _f32(err).reshape(shape), out=out.reshape(shape))
        return out

    def _loss(self, kind, y_pred, y_true, out, params):
        self._apply_params(params)
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.size != np.size(y_pred):
            raise ValueError(f"'out' must be a float32 array of {np.size(y_pred)} elements like y_pred")
        yp, yt = _f32(y_pred), _f32(y_true)
        values = self._code.forward_elements(yp, yt) if kind == "forward" else self._code.gradient(yp, yt)
        out.reshape(-1)[...] = values.reshape(-1)
        return None

    # Each kernel's call shapes: the 0.3 activation form (inputs, output, params, offsets, nodes, batch), the 0.2
    # form (func_ids after the output), the one-call form (inputs only); a loss's 0.3 form (y_pred, y_true, out,
    # params) and its two-array form (mean loss, gradient scaled by 1/N).
    _SHAPES = {
        "forward": "forward_kernel takes (z, a, params, offsets, nodes, batch), the 0.2 form with func_ids after a, "
                   "or (z)",
        "backward": "backward_kernel takes (z, err, delta, params, offsets, nodes, batch), the 0.2 form with func_ids "
                    "after delta, or (z, err)",
    }

    def _kernel(self, kind, arrays):
        if self.mode == "loss":
            if len(arrays) == 4:
                return self._loss(kind, *arrays)
            if len(arrays) != 2:
                raise TypeError(f"a loss's {kind}_kernel takes (y_pred, y_true, out, params) or (y_pred, y_true)")
            y_pred, y_true = arrays
            whole = self._code.forward if kind == "forward" else self._code.gradient
            return whole(_f32(y_pred), _f32(y_true)) / max(np.size(y_pred), 1)
        inputs = 1 if kind == "forward" else 2
        if len(arrays) == inputs:
            run = self._code.forward if kind == "forward" else self._code.backward
            return run(*(_f32(x) for x in arrays))
        if len(arrays) not in (inputs + 5, inputs + 6):
            raise TypeError(self._SHAPES[kind])
        z, err = arrays[0], arrays[1] if inputs == 2 else None
        out, rest = arrays[inputs], arrays[inputs + 1:]
        func_ids = rest[0] if len(rest) == 5 else None
        params, offsets, nodes, batch = rest[-4:]
        self._activation(kind, z, err, out, params, offsets, nodes, batch, func_ids)
        return None if func_ids is None else out  # 0.3 writes in place and returns nothing; 0.2 returned the output

    def forward_kernel(self, *arrays):
        return self._kernel("forward", arrays)

    def backward_kernel(self, *arrays):
        return self._kernel("backward", arrays)

    # --- what the seed's layers, losses and CLI call --------------------------------------------------------------

    @property
    def method(self):
        """The engine that runs the kernels: cpu_jit, cpu_interp or cuda."""
        return self._code.method

    def _change_method(self, new_method, gpu_id=None):
        """Moves the kernels to another method; returns the method in force (the name asked for, or CPU_PYTHON
        where GPU_CUDA fell back)."""
        new_method = _seed_method(new_method.upper() if isinstance(new_method, str) else new_method)
        if gpu_id is not None and gpu_id != self.device_id:
            self.set_gpu_id(gpu_id)
        if new_method == self.calculation_method:
            return self.calculation_method
        was = self._code.method
        self.calculation_method = new_method
        if self._hsnn_method() != was:
            self._compile()
        return self.calculation_method

    def set_gpu_id(self, new_id):
        """Moves a GPU compiler to GPU `new_id`; on a machine without GPUs there is nothing to move."""
        num = _core.runtime_info()["num_gpus"]
        if num == 0:
            return None
        if not isinstance(new_id, (int, np.integer)) or not 0 <= int(new_id) < num:
            raise _seed_class("InvalidDeviceIDError")(
                f"GPU ID {new_id} is out of range. Valid IDs are 0..{num - 1} ({num} GPU(s) detected).")
        if int(new_id) != self.device_id:
            self.device_id = int(new_id)
            if self._code.method == "cuda":
                self._code.set_gpu_id(self.device_id)
        return None

    def _get_ccode_from_config(self, func_str, provided_constants=()):
        """(formula, derivative, the constants it needs) as hsnn reads `func_str`, for the seed's CLI."""
        mode = "loss" if self.mode == "loss" else "activation"
        text, _ = _SEED_BUILTINS.get(func_str.strip(), (func_str, {}))
        try:
            parsed = _core.parse(text, mode)
        except ValueError as e:
            raise _seed_class("FormulaParsingError")(_seed_message(func_str, str(e).split(": ", 1)[-1], mode)) from None
        return parsed["canonical"], _core.diff(text, mode, sympy=False), set(parsed["constants"])


def _host(x):
    """A NumPy view of an array (CuPy's through .get())."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get") and _on_cuda(x):
        return x.get()
    return np.asarray(x)


def _f32(x):
    return np.ascontiguousarray(_host(x), dtype=np.float32)
