"""The seed system's compiler API over hsnn: change one import.

``SymbolicJITCompiler(configs, calculation_method, device_id=0, mode="activation")``
with the seed's array contract: activations on ``(nodes, batch)`` float32
arrays (element ``i`` belongs to node ``i // batch``), losses on arrays of
any shape. Method names ``GPU_CUDA``, ``CPU_JIT``, ``CPU_PYTHON`` (the last
runs hsnn's interpreter), also hsnn's own (``cuda``, ``cpu_jit``, ...).

- ``forward_kernel(z)`` returns ``a = f_node(z)``; ``backward_kernel(z, err)``
  returns ``delta = err * f_node'(z)``.
- In loss mode, ``forward_kernel(y_pred, y_true)`` returns the mean loss and
  ``backward_kernel(y_pred, y_true)`` the gradient scaled by 1/N.
- ``set_gpu_id(id)`` moves the code to another GPU; an id outside
  ``0..NUM_GPUS-1`` is an error.
"""
import numpy as np

from . import _core

_METHODS = {"GPU_CUDA": "cuda", "CPU_JIT": "cpu_jit", "CPU_PYTHON": "cpu_interp", "CPU_CPP": "cpu_interp"}


class SymbolicJITCompiler:
    def __init__(self, configs, calculation_method=None, device_id=0, mode="activation"):
        if mode not in ("activation", "loss"):
            raise ValueError(f"mode must be 'activation' or 'loss', got {mode!r}")
        self.mode = mode
        self.configs = list(configs) if mode == "activation" else configs
        self.calculation_method = calculation_method or _SEED_DEFAULT()
        method = _METHODS.get(self.calculation_method, self.calculation_method)
        self.device_id = device_id
        if mode == "activation":
            nodes = [c if isinstance(c, str) else (c[0], dict(c[1] or {})) for c in self.configs]
            self._code = _core.ActivationLayer(nodes, dtype="float32", layout="nodes_major", method=method,
                                               gpu_id=device_id)
        else:
            formula, constants = (configs, {}) if isinstance(configs, str) else (configs[0], dict(configs[1] or {}))
            self._code = _core.Loss(formula, constants, reduction="mean", dtype="float32", method=method)

    def _array(self, x, what):
        return np.ascontiguousarray(x, dtype=np.float32)

    def forward_kernel(self, *arrays):
        if self.mode == "activation":
            (z,) = arrays
            return self._code.forward(self._array(z, "z"))
        y_pred, y_true = arrays
        return self._code.forward(self._array(y_pred, "y_pred"), self._array(y_true, "y_true"))

    def backward_kernel(self, *arrays):
        if self.mode == "activation":
            z, err = arrays
            return self._code.backward(self._array(z, "z"), self._array(err, "err"))
        y_pred, y_true = arrays
        return self._code.gradient(self._array(y_pred, "y_pred"), self._array(y_true, "y_true"))

    def set_gpu_id(self, device_id):
        num = _core.runtime_info()["num_gpus"]
        if not 0 <= device_id < max(num, 0) or num == 0:
            raise ValueError(f"GPU id {device_id} is out of range: "
                             + (f"valid ids are 0..{num - 1}" if num else "this machine has no usable GPU"))
        self._code.set_gpu_id(device_id)
        self.device_id = device_id


def _SEED_DEFAULT():
    return {"cuda": "GPU_CUDA", "cpu_jit": "CPU_JIT", "cpu_interp": "CPU_PYTHON"}[_core.runtime_info()["default_method"]]
