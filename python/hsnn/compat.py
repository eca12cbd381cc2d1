"""The seed system's compiler API over hsnn: change one import.

``SymbolicJITCompiler(configs, calculation_method, device_id=0, mode="activation")``
with the seed's array contract: activations on ``(nodes, batch)`` float32
arrays (element ``i`` belongs to node ``i // batch``), losses on arrays of
any shape. Method names ``GPU_CUDA``, ``CPU_JIT``, ``CPU_PYTHON`` (the last
runs hsnn's interpreter), also hsnn's own (``cuda``, ``cpu_jit``, ...).

- ``forward_kernel(z)`` returns ``a = f_node(z)``; ``backward_kernel(z, err)``
  returns ``delta = err * f_node'(z)``.
- The seed's raw kernel signatures work too, writing into the given output:
  ``forward_kernel(z, a, func_ids, params, offsets, nodes, batch)`` and
  ``backward_kernel(z, err, delta, func_ids, params, offsets, nodes, batch)``,
  with the compiler's own ``func_ids`` (one id per distinct formula, by
  node), ``params`` (each node's constants in sorted-name order) and
  ``offsets`` (int64). Changed ``params`` values take effect without a
  recompile; ``func_ids`` and ``offsets`` must be the compiler's.
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
            ids = {}
            self.func_ids = np.array([ids.setdefault(self._code.formula(n), len(ids))
                                      for n in range(self._code.num_nodes)], dtype=np.int32)
            self.params = np.array(self._code.params, dtype=np.float32)
            self.offsets = np.array(self._code.offsets, dtype=np.int64)
        else:
            formula, constants = (configs, {}) if isinstance(configs, str) else (configs[0], dict(configs[1] or {}))
            self._code = _core.Loss(formula, constants, reduction="mean", dtype="float32", method=method)

    def _array(self, x, what):
        return np.ascontiguousarray(x, dtype=np.float32)

    def _seed_call(self, kind, z, err, out, func_ids, params, offsets, nodes, batch):
        """The seed's raw signature: checks its arrays against this compiler's, writes into `out`."""
        n = self._code.num_nodes
        if int(nodes) != n:
            raise ValueError(f"nodes is {nodes}; this compiler has {n} nodes")
        if not np.array_equal(np.asarray(func_ids).ravel(), self.func_ids):
            raise ValueError("func_ids do not match this compiler's formulas (use compiler.func_ids)")
        if not np.array_equal(np.asarray(offsets).ravel(), self.offsets):
            raise ValueError("offsets do not match this compiler's constants (use compiler.offsets)")
        values = np.asarray(params, dtype=np.float64).ravel()
        current = np.asarray(self._code.params, dtype=np.float64)
        if values.size != current.size:
            raise ValueError(f"params has {values.size} values; this compiler's constants need {current.size}")
        # The seed's params are float32: an unchanged float32 copy keeps the exact constants.
        if not np.array_equal(values.astype(np.float32), current.astype(np.float32)):
            self._code.set_params(values)
        shape = (n, int(batch))
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous \
                or out.size != n * int(batch):
            raise ValueError(f"the output must be a C-contiguous float32 array of {n} x {batch} elements")
        z = self._array(z, "z").reshape(shape)
        if kind == "forward":
            self._code.forward(z, out=out.reshape(shape))
        else:
            self._code.backward(z, self._array(err, "err").reshape(shape), out=out.reshape(shape))
        return out

    def forward_kernel(self, *arrays):
        if self.mode == "activation":
            if len(arrays) == 7:
                z, a, func_ids, params, offsets, nodes, batch = arrays
                return self._seed_call("forward", z, None, a, func_ids, params, offsets, nodes, batch)
            if len(arrays) != 1:
                raise TypeError("forward_kernel takes (z) or (z, a, func_ids, params, offsets, nodes, batch)")
            (z,) = arrays
            return self._code.forward(self._array(z, "z"))
        y_pred, y_true = arrays
        return self._code.forward(self._array(y_pred, "y_pred"), self._array(y_true, "y_true"))

    def backward_kernel(self, *arrays):
        if self.mode == "activation":
            if len(arrays) == 8:
                z, err, delta, func_ids, params, offsets, nodes, batch = arrays
                return self._seed_call("backward", z, err, delta, func_ids, params, offsets, nodes, batch)
            if len(arrays) != 2:
                raise TypeError("backward_kernel takes (z, err) or (z, err, delta, func_ids, params, offsets, nodes, "
                                "batch)")
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
