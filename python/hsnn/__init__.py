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

from ._core import (ActivationLayer, Loss, __version__, diff, parse, runtime_flags, runtime_info,
                    set_warning_handler, update_runtime_flags)
from . import _core
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

__all__ = ["ActivationLayer", "Loss", "FormulaError", "parse", "diff", "eval", "runtime_info", "runtime_flags",
           "update_runtime_flags", "set_warning_handler", "compat", "hardware", "__version__"]
