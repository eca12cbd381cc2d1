"""hsnn: formulas to fast numeric kernels.

Heterogeneous activation layers (one formula per neuron) and formula losses,
parsed, differentiated and compiled by the C++ engine (LLVM JIT on the CPU,
NVPTX on NVIDIA GPUs, an interpreter everywhere), over NumPy arrays.

    import numpy as np, hsnn
    layer = hsnn.ActivationLayer(["gelu", ("sin(num)*alpha", {"alpha": 2.0}), "relu"])
    z = np.linspace(-2, 2, 3 * 8, dtype=np.float32).reshape(3, 8)   # (nodes, batch)
    a = layer.forward(z)
    a, dfdz = layer.fused(z)
"""

import sys

import numpy as np

from ._core import __version__, builtins, diff, parse, runtime_flags, runtime_info, set_warning_handler, update_runtime_flags
from . import _core


def _from_dlpack(x, name):
    """A NumPy view of any CPU DLPack tensor (PyTorch, JAX, CuPy host arrays...),
    and how to give results back as the same kind; NumPy arrays pass through."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack__"):
        return x, None
    device = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
    if device != 1:  # kDLCPU
        raise ValueError(f"'{name}' is not in host memory (DLPack device type {device}); hsnn's Python package runs "
                         "on CPU arrays")
    if getattr(x, "requires_grad", False):
        x = x.detach()  # the array is read, never differentiated here (hsnn.torch does that)
    root = sys.modules.get(type(x).__module__.split(".")[0])
    return np.from_dlpack(x), getattr(root, "from_dlpack", None)


def _wrap(method, names):
    """Calls `method` with DLPack inputs viewed as NumPy, and returns results
    as the kind of the first argument."""
    def call(self, *args, **kwargs):
        back = None
        args = list(args)
        for i, a in enumerate(args):
            args[i], kind = _from_dlpack(a, names[i] if i < len(names) else "out")
            back = back or kind
        for k, v in list(kwargs.items()):
            kwargs[k], kind = _from_dlpack(v, k)
        result = method(self, *args, **kwargs)
        if back is None:
            return result
        if isinstance(result, tuple):
            return tuple(back(r) if isinstance(r, np.ndarray) else r for r in result)
        return back(result) if isinstance(result, np.ndarray) else result
    call.__name__, call.__doc__ = method.__name__, method.__doc__
    return call


class ActivationLayer(_core.ActivationLayer):
    __doc__ = _core.ActivationLayer.__doc__
    forward = _wrap(_core.ActivationLayer.forward, ["z"])
    backward = _wrap(_core.ActivationLayer.backward, ["z", "err"])
    fused = _wrap(_core.ActivationLayer.fused, ["z"])


class Loss(_core.Loss):
    __doc__ = _core.Loss.__doc__
    forward = _wrap(_core.Loss.forward, ["y_pred", "y_true"])
    forward_elements = _wrap(_core.Loss.forward_elements, ["y_pred", "y_true"])
    gradient = _wrap(_core.Loss.gradient, ["y_pred", "y_true"])
    fused = _wrap(_core.Loss.fused, ["y_pred", "y_true"])
from . import compat, hardware  # the seed's names; hsnn.torch is imported on demand (it imports PyTorch)


class FormulaError(ValueError):
    """A formula that does not parse or type-check.

    ``str(error)`` is the whole report (every node's errors, with carets);
    ``node`` is the first failing node (None for a lone formula or a loss) and
    ``position`` the 1-based column of its cause (None when the cause is the
    whole formula); ``caret`` is the report's text.
    """

    def __init__(self, message, node=None, position=None):
        super().__init__(message)
        self.node = node
        self.position = position
        self.caret = message


_core._set_formula_error(FormulaError)


def eval(formula, at, y_true=None, constants=None, derivative=False, dtype="float64"):  # noqa: A001 (the seed's name)
    """The formula (or its derivative) at one point, on the interpreter.

    An activation in ``num`` unless ``y_true`` is given, then a loss in
    ``y_pred = at`` and ``y_true`` (the derivative is d/dy_pred)."""
    import numpy as np
    if y_true is None:
        layer = ActivationLayer([(formula, constants or {})], dtype=dtype, method="cpu_interp")
        z = np.full((1, 1), at, dtype=dtype)
        out = layer.backward(z, np.ones_like(z)) if derivative else layer.forward(z)
        return float(out[0, 0])
    loss = Loss(formula, constants or {}, reduction="sum", dtype=dtype, method="cpu_interp")
    yp, yt = np.full(1, at, dtype=dtype), np.full(1, y_true, dtype=dtype)
    return float(loss.gradient(yp, yt)[0] if derivative else loss.forward(yp, yt))

__all__ = ["ActivationLayer", "Loss", "FormulaError", "parse", "diff", "eval", "builtins", "runtime_info", "runtime_flags",
           "update_runtime_flags", "set_warning_handler", "compat", "hardware", "__version__"]
