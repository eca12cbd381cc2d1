"""HeteroSymNN's compiler and hardware names over hsnn: each call shape its code uses, stated here.

The shapes are those of HeteroSymNN 0.3's own callers (Core/layers.py, Core/losses.py, cli.py): activation kernels
``(z, a, params, offsets, nodes, batch)`` / ``(z, err, delta, params, offsets, nodes, batch)`` on (nodes, batch)
float32 arrays written in place; loss kernels ``(y_pred, y_true, out, params)`` writing per-element values that the
caller reduces; params as the seed's layers build them (each node's written constants, sorted; [0.0] when none).
"""
import os
import warnings

import numpy as np
import pytest

import hsnn
from hsnn import compat, hardware
from hsnn.compat import SymbolicJITCompiler

JIT = hsnn.runtime_info()["cpu_jit_enabled"]


def seed_layout(configs):
    """params and offsets as HeteroSymNN's BaseLayer builds them (its _generate_constant_array)."""
    values, offsets = [], []
    for _, constants in configs:
        offsets.append(len(values))
        values += [constants[k] for k in sorted(constants)]
    if not values:
        return np.array([0.0], dtype=np.float32), np.array([0] * len(configs))
    return np.array(values, dtype=np.float32), np.array(offsets)


def test_hardware_names_the_seed_reads():
    names = {}
    exec("from hsnn.hardware import *", names)  # what a module that re-exports ours gets
    assert set(hardware.__all__) <= set(names)
    assert isinstance(hardware.GPU_ENABLED, bool) and isinstance(hardware.NUM_GPUS, int)
    assert hardware.NUM_CPU_THREADS == os.cpu_count()
    assert hardware.CPP_JIT_ENABLED == JIT
    assert hardware.CPP_INSTALLED_COMPILER == ("LLVM ORC JIT" if JIT else None)
    if not hardware.GPU_ENABLED:  # no GPU (or no CuPy): the seed's CPU names
        assert hardware.cp is None and hardware.be is np and hardware.asnumpy is np.array
        assert hardware._get_cuda_dims(1000, 0) == ((4,), (256,))
    assert hardware.DEFAULT_COMPUTE_METHOD in ("GPU_CUDA", "CPU_JIT", "CPU_PYTHON")
    old = hardware.WARNINGS_STRICT_MODE
    hardware.WARNINGS_STRICT_MODE = True
    try:
        assert hsnn.runtime_flags()["strict"] is True
    finally:
        hardware.WARNINGS_STRICT_MODE = old
    with pytest.raises(ValueError, match="category must be 'ALL', 'CPU' or 'GPU'"):
        hardware.clear_kernel_cache("SOME")
    with pytest.raises(AttributeError):
        hardware.NUM_GPUS = 3


def test_activation_kernels_as_the_seed_layers_call_them():
    # LinearLayer: forward_kernel(z, a, params, offsets, n, b) and backward_kernel(z, err, delta, params, offsets,
    # n, b), in place, returning None; params the layer's own array, changed in place between calls.
    configs = [("relu(x)*alfa", {"alfa": 0.5}), ("sin(num)", {}), ("tanh(num) * a", {"a": 2.0, "unused": 7.0})]
    c = SymbolicJITCompiler(configs, "CPU_PYTHON", 0)
    params, offsets = seed_layout(configs)
    np.testing.assert_array_equal(c.params, params)
    np.testing.assert_array_equal(c.offsets, offsets)
    n, b = 3, 5
    z = np.linspace(-2, 2, n * b, dtype=np.float32).reshape(n, b)
    a, delta = np.zeros_like(z), np.zeros_like(z)
    assert c.forward_kernel(z, a, params, offsets, n, b) is None
    np.testing.assert_allclose(a[0], 0.5 * np.maximum(z[0], 0), rtol=1e-6)
    np.testing.assert_allclose(a[1], np.sin(z[1]), rtol=1e-6)
    np.testing.assert_allclose(a[2], 2 * np.tanh(z[2]), rtol=1e-6)
    err = np.full_like(z, 2.0)
    assert c.backward_kernel(z, err, delta, params, offsets, n, b) is None
    np.testing.assert_allclose(delta[1], 2 * np.cos(z[1]), rtol=1e-6)
    assert delta[0][z[0] == 0].tolist() in ([], [0.0])  # relu'(0) = 0
    params[offsets[2]] = 3.0  # BaseLayer.change_constant: node 2's 'a', no recompile
    c.forward_kernel(z, a, params, offsets, n, b)
    np.testing.assert_allclose(a[2], 3 * np.tanh(z[2]), rtol=1e-6)
    # float64 z (a caller's own arrays): read as float32, written into the float32 output.
    c.forward_kernel(z.astype(np.float64), a, params, offsets, n, b)
    np.testing.assert_allclose(a[1], np.sin(z[1]), rtol=1e-6)
    assert c.method == ("cpu_jit" if JIT else "cpu_interp") and c.calculation_method == "CPU_PYTHON"


def test_a_layer_without_constants_passes_the_seed_placeholder_and_built_ins_keep_their_defaults():
    configs = [("relu", {}), ("leaky_relu", {}), ("swish", {}), ("SiLU", {}), ("gelu", {})]
    c = SymbolicJITCompiler(configs, "CPU_JIT", 0)
    params, offsets = seed_layout(configs)
    assert params.tolist() == [0.0] and offsets.tolist() == [0] * 5
    z = np.array([[-2.0, -0.5, 0.0, 1.5]] * 5, dtype=np.float32)
    a = np.zeros_like(z)
    c.forward_kernel(z, a, params, offsets, 5, 4)
    np.testing.assert_allclose(a[1], np.where(z[1] > 0, z[1], 0.01 * z[1]), rtol=1e-6)  # alpha 0.01, not the 0.0
    np.testing.assert_allclose(a[2], z[2] / (1 + np.exp(-z[2])), rtol=1e-6)            # beta 1.0
    np.testing.assert_allclose(a[3], a[2], rtol=1e-6)
    # The seed's constant names: leaky_relu's alpha, swish's beta.
    configs = [("leaky_relu", {"alpha": 0.2}), ("swish", {"beta": 2.0})]
    c = SymbolicJITCompiler(configs, "CPU_JIT", 0)
    params, offsets = seed_layout(configs)
    a = np.zeros((2, 4), dtype=np.float32)
    c.forward_kernel(z[:2], a, params, offsets, 2, 4)
    np.testing.assert_allclose(a[0], np.where(z[0] > 0, z[0], 0.2 * z[0]), rtol=1e-6)
    np.testing.assert_allclose(a[1], z[1] / (1 + np.exp(-2 * z[1])), rtol=1e-6)


def test_loss_kernels_as_the_seed_losses_call_them():
    # The seed documentation's example, as written.
    c = SymbolicJITCompiler(configs=[("d*y_pred-y_true", {"d": 2.0})], calculation_method="CPU_JIT", device_id=0,
                            mode="loss")
    yp = np.array([0.8, 0.2, 0.6])  # TestLosses passes 1-D float64
    yt = np.array([1.0, 0.0, 1.0])
    params = np.array([2.0], dtype=np.float32)  # FlexibleLoss.arr_constants
    out = np.zeros_like(yp, dtype=np.float32)
    assert c.forward_kernel(yp, yt, out, params) is None
    np.testing.assert_allclose(out, 2 * yp - yt, rtol=1e-6)  # per element, not reduced
    assert c.backward_kernel(yp, yt, out, params) is None
    np.testing.assert_allclose(out, [2.0, 2.0, 2.0])  # d/dy_pred, unscaled
    params[0] = 3.0  # set_constants: no recompile
    c.forward_kernel(yp, yt, out, params)
    np.testing.assert_allclose(out, 3 * yp - yt, rtol=1e-6)
    # A built-in without constants: the placeholder [0.0]; bce's eps keeps its default.
    bce = SymbolicJITCompiler([("bce", {})], "CPU_PYTHON", 0, "loss")
    bce.forward_kernel(yp, yt, out, np.array([0.0], dtype=np.float32))
    np.testing.assert_allclose(out, -(yt * np.log(yp + 1e-7) + (1 - yt) * np.log(1 - yp + 1e-7)), rtol=1e-5)
    huber = SymbolicJITCompiler([("huber", {"delta": 0.5})], "CPU_PYTHON", 0, "loss")
    huber.backward_kernel(np.array([3.0]), np.array([0.0]), out[:1], np.array([0.5], dtype=np.float32))
    assert out[0] == pytest.approx(0.5)
    # A bare pair and the two-argument form (mean and 1/N-scaled gradient) stay accepted.
    c = SymbolicJITCompiler(("(y_pred - y_true)**2", {}), "CPU_PYTHON", mode="loss")
    yp32, yt32 = np.array([1.0, 2.0], dtype=np.float32), np.zeros(2, dtype=np.float32)
    assert c.forward_kernel(yp32, yt32) == pytest.approx(2.5)
    np.testing.assert_allclose(c.backward_kernel(yp32, yt32), [1.0, 2.0])


@pytest.fixture
def quiet_cache():
    old = hsnn.runtime_flags()["use_kernel_cache"]
    hsnn.update_runtime_flags(use_kernel_cache=False)
    yield
    hsnn.update_runtime_flags(use_kernel_cache=old)


@pytest.mark.parametrize("formula, constants, words", [
    ("sqrt(-1) * num", {}, ["results in complex/imaginary numbers"]),
    ("log(-num) / 0", {}, ["evaluates to an invalid mathematical state", "Infinity or NaN"]),
    ("alpha * num + beta", {"alpha": 1.0}, ["Missing constants detected", "['beta']", "missing constant 'beta'"]),
    ("sin * num", {}, ["Missing constants detected in formula", "'sin' is a function; call it, e.g. sin(num)"]),
    ("offset * num + pi", {"offset": 2.0, "pi": 3.14}, ["Cannot use reserved keywords"]),
    ("factorial(num)", {}, ["Failed to generate executable code", "SymPy found the derivative but cannot translate it",
                            "unknown function 'factorial'"]),
])
def test_formulas_the_seed_refuses_are_refused_with_its_words_and_hsnns_caret(formula, constants, words, quiet_cache):
    with pytest.raises(compat.FormulaParsingError) as e:
        SymbolicJITCompiler([(formula, constants)], "CPU_PYTHON", 0, "activation")
    for w in words:
        assert w in str(e.value)
    assert str(e.value).startswith("Found 1 error(s) during kernel generation:\n  - Node 0: ")
    assert isinstance(e.value, compat.JITError) and isinstance(e.value, ValueError)


def test_every_bad_node_is_reported_in_one_error():
    nodes = [("num", {}), ("sin * num", {}), ("a * num", {}), ("log(-num) / 0", {})]
    with pytest.raises(compat.FormulaParsingError) as e:
        SymbolicJITCompiler(nodes, "CPU_PYTHON", 0, "activation")
    text = str(e.value)
    assert "Found 3 error(s)" in text and "Node 1" in text and "Node 2" in text and "Node 3" in text
    assert "Node 0" not in text
    assert "  sin * num\n  ^~~" in text  # hsnn's caret


def test_methods_fallback_and_gpu_ids():
    assert SymbolicJITCompiler([("num", {})], "CPU_CPP", 0).method == ("cpu_jit" if JIT else "cpu_interp")
    with pytest.raises(compat.ComputationalMethodValueError, match="isn't GPU_CUDA, CPU_JIT or CPU_PYTHON"):
        SymbolicJITCompiler([("num", {})], "TPU_MAGIC", 0)
    with pytest.raises(ValueError, match="mode must be 'activation' or 'loss'"):
        SymbolicJITCompiler([], "CPU_JIT", mode="act")
    c = SymbolicJITCompiler([("relu", {})], "CPU_PYTHON", 0)
    assert c._change_method("cpu_jit", 0) == "CPU_JIT" and c.calculation_method == "CPU_JIT"
    if hsnn.runtime_info()["gpu_enabled"]:
        return
    # GPU_CUDA without a GPU: the CPU, with a warning, reported as the seed's fallback; strict mode refuses.
    with pytest.warns(compat.BackendNotAvailableWarning, match="no GPU is available"):
        g = SymbolicJITCompiler([("relu", {})], "GPU_CUDA", 0)
    assert g.calculation_method == "CPU_PYTHON" and g.method in ("cpu_jit", "cpu_interp")
    with pytest.warns(compat.BackendNotAvailableWarning):
        assert c._change_method("GPU_CUDA", 0) == "CPU_PYTHON"
    old = hsnn.runtime_flags()["strict"]
    hsnn.update_runtime_flags(strict=True)
    try:
        with pytest.raises(compat.ComputationalMethodValueError, match="no GPU is available"):
            SymbolicJITCompiler([("relu", {})], "GPU_CUDA", 0)
    finally:
        hsnn.update_runtime_flags(strict=old)
    # set_gpu_id on a machine without GPUs: nothing to move (the seed's validator returns early there).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.set_gpu_id(0) is None and c.set_gpu_id(3) is None


def test_the_seed_cli_reads_formulas_through_get_ccode_from_config():
    motor = SymbolicJITCompiler([("relu", {})], "CPU_PYTHON", 0)
    f, d, constants = motor._get_ccode_from_config("sin(num)*alpha")
    assert (f, d, constants) == ("alpha*sin(num)", "alpha*cos(num)", {"alpha"})
    with pytest.raises(compat.FormulaParsingError, match="'sin' is a function"):
        motor._get_ccode_from_config("sin * num")


def test_the_0_2_signatures_with_func_ids():
    configs = [("alpha*num + beta", {"alpha": 2.0, "beta": 0.5}), ("relu", {}),
               ("alpha*num + beta", {"alpha": 3.0, "beta": 0.0})]
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
    with pytest.raises(TypeError, match=r"forward_kernel takes \(z, a, params, offsets, nodes, batch\)"):
        c.forward_kernel(z, a)
    with pytest.raises(ValueError, match="params has 3 values; this compiler's constants need 4"):
        c.forward_kernel(z, a, c.func_ids, c.params[:3], c.offsets, nodes, batch)
    # The one-array forms return new arrays.
    np.testing.assert_allclose(c.forward_kernel(z.reshape(3, 4))[1], np.maximum(z[4:8], 0))


def test_the_seed_documentations_two_examples_run_as_written():
    configs = [("Max(0, num)", {})]
    method = "CPU_PYTHON"
    mode = "activation"
    py_compiler = SymbolicJITCompiler(configs=configs, calculation_method=method, mode=mode)  # no device_id
    z = np.array([[-1.0, 0.0, 2.0]], dtype=np.float32)
    a = np.zeros_like(z)
    py_compiler.forward_kernel(z, a, np.array([0.0], dtype=np.float32), np.array([0]), 1, 3)
    np.testing.assert_array_equal(a, [[0.0, 0.0, 2.0]])
    configs_2 = [("d*y_pred-y_true", {"d": 2.0})]
    method_2 = "GPU_CUDA"
    mode_2 = "loss"
    device_id = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # without a GPU: the CPU, with a warning (tested above)
        cuda_compiler = SymbolicJITCompiler(configs=configs_2, calculation_method=method_2, device_id=device_id,
                                            mode=mode_2)
    out = np.zeros(2, dtype=np.float32)
    cuda_compiler.forward_kernel(np.array([1.0, 2.0]), np.array([0.5, 0.5]), out, np.array([2.0], dtype=np.float32))
    np.testing.assert_allclose(out, [1.5, 3.5])
