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


def test_the_seed_raw_kernel_signatures():
    # The seed's contract: (nodes x batch) float32, func_ids per node, params flat, offsets per node.
    configs = [("alpha*num + beta", {"alpha": 2.0, "beta": 0.5}), ("relu", {}), ("alpha*num + beta", {"alpha": 3.0, "beta": 0.0})]
    c = SymbolicJITCompiler(configs, "CPU_JIT", mode="activation")
    assert c.func_ids.tolist() == [0, 1, 0]
    assert c.offsets.tolist() == [0, 2, 2] and c.offsets.dtype == np.int64
    np.testing.assert_array_equal(c.params, np.array([2.0, 0.5, 3.0, 0.0], dtype=np.float32))
    nodes, batch = 3, 4
    z = np.arange(nodes * batch, dtype=np.float32) - 5
    a = np.empty(nodes * batch, dtype=np.float32)
    out = c.forward_kernel(z, a, c.func_ids, c.params, c.offsets, nodes, batch)
    assert out is a
    np.testing.assert_allclose(a[:4], 2 * z[:4] + 0.5)
    np.testing.assert_allclose(a[4:8], np.maximum(z[4:8], 0))
    params = c.params.copy()
    params[2] = -1.0  # node 2's alpha, no recompile
    delta = np.empty_like(a)
    c.backward_kernel(z, np.ones_like(z), delta, c.func_ids, params, c.offsets, nodes, batch)
    np.testing.assert_allclose(delta[8:], -1.0)
    with pytest.raises(ValueError, match="func_ids do not match"):
        c.forward_kernel(z, a, np.zeros(3, dtype=np.int32), c.params, c.offsets, nodes, batch)
    with pytest.raises(ValueError, match="nodes is 2; this compiler has 3 nodes"):
        c.forward_kernel(z, a, c.func_ids, c.params, c.offsets, 2, batch)
    with pytest.raises(TypeError, match=r"forward_kernel takes \(z\) or"):
        c.forward_kernel(z, a)
    with pytest.raises(ValueError, match="params has 3 values; this compiler's constants need 4"):
        c.forward_kernel(z, a, c.func_ids, c.params[:3], c.offsets, nodes, batch)
