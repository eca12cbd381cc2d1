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


def _cpu_method(method="auto"):
    """The method for work that stays on the CPU (hsnn.torch's CPU tensors, the CPU backend's kernels): 'auto'
    would pick a GPU where there is one."""
    if method != "auto":
        return method
    return "cpu_jit" if _core.runtime_info().get("cpu_jit_enabled") else "cpu_interp"


def _from_dlpack(x, name):
    """A NumPy view of any CPU DLPack tensor (PyTorch, JAX, CuPy host arrays...),
    and how to give results back as the same kind; NumPy arrays pass through."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack__"):
        return x, None
    device = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
    if device != 1:  # kDLCPU
        raise ValueError(f"'{name}' is neither in host memory nor CUDA memory (DLPack device type {device}); hsnn runs "
                         "on CPU arrays and CUDA tensors")
    if getattr(x, "requires_grad", False):
        x = x.detach()  # the array is read, never differentiated here (hsnn.torch does that)
    root = sys.modules.get(type(x).__module__.split(".")[0])
    view = np.from_dlpack(x)
    if name == "out" and not view.flags.writeable:
        view = _writable_view(x, view)
    return view, getattr(root, "from_dlpack", None)


def _writable_view(x, view):
    """NumPy marks every DLPack import read-only; an output must be written.
    The producer's own NumPy export is used when it is the same memory (a
    PyTorch tensor's is); one that would copy (JAX's) is refused: results
    written into a copy would be lost."""
    try:
        alias = np.asarray(x)
    except Exception:  # no __array__: nothing writable to offer
        alias = None
    if (alias is not None and alias.flags.writeable and alias.shape == view.shape and alias.dtype == view.dtype
            and alias.__array_interface__["data"][0] == view.__array_interface__["data"][0]
            and alias.strides == view.strides):
        return alias
    raise ValueError(f"'out' is read-only: {type(x).__name__} exports its memory read-only; pass a NumPy array or a "
                     "writable tensor (PyTorch's) as out=")


_DL_CUDA = 2  # DLPack's device type for CUDA memory


def _on_cuda(x):
    dev = getattr(x, "__dlpack_device__", None)
    return dev is not None and not isinstance(x, np.ndarray) and int(dev()[0]) == _DL_CUDA


def _capsule(x, stream):
    """x's DLPack capsule, ready for work on `stream` (a CUstream handle; None
    or 0: CUDA's legacy default stream, DLPack's stream 1)."""
    if getattr(x, "requires_grad", False):
        x = x.detach()
    if not _on_cuda(x):
        return x.__dlpack__()  # refused with the argument's name by the engine
    try:
        return x.__dlpack__(stream=stream or 1)
    except TypeError:  # a producer without the stream argument
        return x.__dlpack__()


def _stream_for(x, stream):
    """The CUstream a call on CUDA array x runs on: `stream` if given, else a
    PyTorch tensor's current stream (queued there like PyTorch's own
    operations); None for other producers: the legacy default stream, and the
    call waits for the device."""
    if stream is not None or type(x).__module__.split(".")[0] != "torch":
        return stream
    import torch
    return torch.cuda.current_stream(x.device).cuda_stream


def _empty_like(x, name):
    if hasattr(x, "new_empty"):
        return x.new_empty(tuple(x.shape))
    raise TypeError(f"'{name}': hsnn allocates CUDA results only for PyTorch tensors; pass out= for "
                    f"{type(x).__name__}")


def _layer_on_device(kind):
    """A layer method over CUDA DLPack tensors: the cuda method's kernels run
    on their memory, outputs are new tensors of the same kind (or out=)."""
    def run(self, z, *rest, out=None, stream=None):
        stream = _stream_for(z, stream)
        if kind == 2:
            a, d = _empty_like(z, "a"), _empty_like(z, "dfdz")
            self._run_device(2, [_capsule(x, stream) for x in (z, a, d)], stream)
            return a, d
        result = out if out is not None else _empty_like(z, "out")
        self._run_device(kind, [_capsule(x, stream) for x in (z, *rest, result)], stream)
        return result
    return run


def _loss_on_device(kind):
    def run(self, y_pred, y_true, out=None, stream=None):
        stream = _stream_for(y_pred, stream)
        if kind == 0:
            return self._run_device(0, [_capsule(y_pred, stream), _capsule(y_true, stream)], stream)
        out = out if out is not None else _empty_like(y_pred, "out")
        value = self._run_device(kind, [_capsule(x, stream) for x in (y_pred, y_true, out)], stream)
        return (value, out) if kind == 3 else out
    return run


def _wrap(method, names, on_device=None):
    """Calls `method` with DLPack inputs viewed as NumPy, and returns results
    as the kind of the first argument; CUDA tensors go to `on_device`
    (no copies: the layer or loss must use the cuda method)."""
    def call(self, *args, **kwargs):
        if on_device and any(_on_cuda(a) for a in list(args) + list(kwargs.values())):
            return on_device(self, *args, **kwargs)
        if kwargs.pop("stream", None) is not None:
            raise ValueError("stream= is for CUDA arrays; these are in host memory")
        back = None
        out = kwargs.get("out", args[len(names)] if len(args) > len(names) else None)
        args = list(args)
        for i, a in enumerate(args):
            args[i], kind = _from_dlpack(a, names[i] if i < len(names) else "out")
            back = back or kind
        for k, v in list(kwargs.items()):
            kwargs[k], kind = _from_dlpack(v, k)
        result = method(self, *args, **kwargs)
        if back is None:
            return result
        if out is not None:
            return out  # the caller's own tensor, written in place
        if isinstance(result, tuple):
            return tuple(back(r) if isinstance(r, np.ndarray) else r for r in result)
        return back(result) if isinstance(result, np.ndarray) else result
    call.__name__, call.__doc__ = method.__name__, method.__doc__
    return call


class ActivationLayer(_core.ActivationLayer):
    __doc__ = _core.ActivationLayer.__doc__
    forward = _wrap(_core.ActivationLayer.forward, ["z"], _layer_on_device(0))
    backward = _wrap(_core.ActivationLayer.backward, ["z", "err"], _layer_on_device(1))
    fused = _wrap(_core.ActivationLayer.fused, ["z"], _layer_on_device(2))


class Loss(_core.Loss):
    __doc__ = _core.Loss.__doc__
    forward = _wrap(_core.Loss.forward, ["y_pred", "y_true"], _loss_on_device(0))
    forward_elements = _wrap(_core.Loss.forward_elements, ["y_pred", "y_true"], _loss_on_device(1))
    gradient = _wrap(_core.Loss.gradient, ["y_pred", "y_true"], _loss_on_device(2))
    fused = _wrap(_core.Loss.fused, ["y_pred", "y_true"], _loss_on_device(3))
def _restore(cls, args, state):
    """Unpickles a layer or loss: made again from its arguments, then given the constants it had."""
    obj = cls(*args)
    obj._set_state(state)
    return obj


from .population import Population, PopulationError, op_codes
from . import backends, compat, hardware  # the seed's names; hsnn.torch is imported on demand (it imports PyTorch)


class FormulaError(ValueError):
    """A formula that does not parse or type-check.

    ``str(error)`` is the whole report: one block per failing formula, naming
    its nodes ("nodes 6, 14, 22, ... (32 nodes): error: ..."), with a caret;
    ``nodes`` lists every failing node of a layer (empty for a lone formula
    or a loss), ``node`` is the first of them (None if there is none) and
    ``position`` the 1-based column of the first block's cause (None when
    the cause is the whole formula); ``caret`` is the report's text.
    """

    def __init__(self, message, node=None, position=None, nodes=None):
        super().__init__(message)
        self.node = node
        self.nodes = list(nodes) if nodes is not None else ([] if node is None else [node])
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

__all__ = ["ActivationLayer", "Loss", "FormulaError", "Population", "PopulationError", "op_codes", "parse", "diff", "eval", "builtins", "runtime_info", "runtime_flags",
           "update_runtime_flags", "set_warning_handler", "backends", "compat", "hardware", "__version__"]
