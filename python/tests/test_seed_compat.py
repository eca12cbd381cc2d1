"""The seed system's names: hsnn.hardware and hsnn.compat.SymbolicJITCompiler."""
import numpy as np
import pytest

import hsnn
from hsnn import hardware
from hsnn.compat import SymbolicJITCompiler


def test_hardware_flags_are_the_runtime_flags():
    assert hardware.DEFAULT_COMPUTE_METHOD in ("GPU_CUDA", "CPU_JIT", "CPU_PYTHON")
    assert isinstance(hardware.NUM_GPUS, int) and isinstance(hardware.GPU_ENABLED, bool)
    assert hardware.CPP_JIT_ENABLED == hsnn.runtime_info()["cpu_jit_enabled"]
    old = hardware.WARNINGS_STRICT_MODE
    hardware.WARNINGS_STRICT_MODE = True
    try:
        assert hsnn.runtime_flags()["strict"] is True
    finally:
        hardware.WARNINGS_STRICT_MODE = old
    assert hsnn.runtime_flags()["strict"] == old
    with pytest.raises(ValueError, match="category must be 'ALL', 'CPU' or 'GPU'"):
        hardware.clear_kernel_cache("SOME")
    with pytest.raises(AttributeError):
        hardware.NUM_GPUS = 3


@pytest.mark.parametrize("method", ["CPU_JIT", "CPU_PYTHON"])
def test_activation_compiler_follows_the_seed_contract(method):
    configs = [("sin(num)*alpha", {"alpha": 2.0}), ("relu", {}), ("x**2", {})]
    c = SymbolicJITCompiler(configs, method, mode="activation")
    assert c.calculation_method == method and c.device_id == 0
    z = np.linspace(-1, 1, 3 * 5, dtype=np.float32).reshape(3, 5)  # (nodes, batch)
    a = c.forward_kernel(z)
    np.testing.assert_allclose(a[0], 2 * np.sin(z[0]), rtol=1e-6)
    np.testing.assert_allclose(a[1], np.maximum(z[1], 0))
    np.testing.assert_allclose(c.backward_kernel(z, np.ones_like(z))[2], 2 * z[2], rtol=1e-6)


def test_loss_compiler_and_gpu_ids():
    c = SymbolicJITCompiler(("(y_pred - y_true)**2", {}), "CPU_PYTHON", mode="loss")
    yp, yt = np.array([1.0, 2.0], dtype=np.float32), np.zeros(2, dtype=np.float32)
    assert c.forward_kernel(yp, yt) == pytest.approx(2.5)
    np.testing.assert_allclose(c.backward_kernel(yp, yt), [1.0, 2.0])
    with pytest.raises(ValueError, match="GPU id 7 is out of range"):
        c.set_gpu_id(7)
    with pytest.raises(ValueError, match="mode must be 'activation' or 'loss'"):
        SymbolicJITCompiler([], "CPU_JIT", mode="act")
