"""hsnn's Python package: results against NumPy, errors as exceptions."""
import copy
import math
import pickle
import threading

import numpy as np
import pytest

import hsnn


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["nodes_major", "batch_major"])
@pytest.mark.parametrize("method", ["cpu_jit", "cpu_interp"])
def test_layer_matches_numpy(dtype, layout, method):
    layer = hsnn.ActivationLayer(["gelu", ("sin(num)*alpha", {"alpha": 2.0}), "relu"], dtype=dtype, layout=layout,
                                 method=method)
    assert layer.num_nodes == 3 and layer.layout == layout
    z = np.linspace(-3, 3, 3 * 50).astype(dtype).reshape(3, 50)
    zin = np.ascontiguousarray(z if layout == "nodes_major" else z.T)
    a = layer.forward(zin)
    assert a.dtype == dtype and a.shape == zin.shape
    a = a if layout == "nodes_major" else a.T
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(a[0], gelu(z[0].astype(np.float64)), rtol=tol, atol=tol)
    np.testing.assert_allclose(a[1], 2 * np.sin(z[1].astype(np.float64)), rtol=tol, atol=tol)
    np.testing.assert_allclose(a[2], np.maximum(z[2], 0), rtol=0, atol=0)
    err = np.ones_like(zin)
    delta = layer.backward(zin, err)
    delta = delta if layout == "nodes_major" else delta.T
    np.testing.assert_allclose(delta[1], 2 * np.cos(z[1].astype(np.float64)), rtol=tol * 10, atol=tol * 10)
    np.testing.assert_array_equal(delta[2], (z[2] > 0).astype(dtype))  # relu'(0) = 0
    fa, fd = layer.fused(zin)
    np.testing.assert_array_equal(fa if layout == "nodes_major" else fa.T, a)


def test_derivatives_against_finite_differences():
    layer = hsnn.ActivationLayer(["mish", "softplus", "tanh", ("x**3*alpha", {"alpha": 0.5})], dtype="float64")
    z = np.linspace(-2, 2, 4 * 21).reshape(4, 21)
    h = 1e-6
    fd = (layer.forward(z + h) - layer.forward(z - h)) / (2 * h)
    np.testing.assert_allclose(layer.backward(z, np.ones_like(z)), fd, rtol=1e-6, atol=1e-8)


def test_losses():
    yp = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    yt = np.zeros(4, dtype=np.float32)
    mse = hsnn.Loss("mse")
    assert mse.forward(yp, yt) == pytest.approx(7.5)
    np.testing.assert_allclose(mse.gradient(yp, yt), 2 * yp / 4)
    value, grad = mse.fused(yp, yt)
    assert value == pytest.approx(7.5)
    np.testing.assert_allclose(grad, 2 * yp / 4)
    np.testing.assert_allclose(hsnn.Loss("mse", reduction="none").forward_elements(yp, yt), yp ** 2)
    huber = hsnn.Loss("huber", {"delta": 0.5}, reduction="sum", dtype="float64")
    assert huber.constant("delta") == 0.5
    huber.set_constant("delta", 1.0)
    assert huber.forward(np.array([3.0]), np.array([1.0])) == pytest.approx(1.5)


def test_bad_input_is_a_clear_exception():
    with pytest.raises(hsnn.FormulaError) as e:
        hsnn.ActivationLayer(["relu", "tanhh(x)"])
    assert e.value.node == 1 and e.value.position == 1 and e.value.nodes == [1]
    assert "unknown function 'tanhh'; did you mean 'tanh'?" in str(e.value)
    assert "^~~~~" in e.value.caret
    with pytest.raises(hsnn.FormulaError) as shared:  # one formula shared by 32 nodes: one block naming them
        hsnn.ActivationLayer(["relu", "tanh", "gelu", "silu", "softplus", "num", "sin", "sigmoid"] * 32)
    assert str(shared.value) == "nodes 6, 14, 22, ... (32 nodes): error: 'sin' is a function; call it, e.g. " \
                                "sin(num)\n  sin\n  ^~~"
    assert shared.value.nodes == list(range(6, 256, 8)) and shared.value.node == 6 and shared.value.position == 1
    assert "^~~~~" in e.value.caret
    with pytest.raises(hsnn.FormulaError, match="did you mean 'huber'"):
        hsnn.Loss("hubr")
    layer = hsnn.ActivationLayer(["relu", "tanh"])
    with pytest.raises(ValueError, match=r"'z' has dtype float64; expected float32"):
        layer.forward(np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"'z' has 3 nodes along axis 0; the layer has 2"):
        layer.forward(np.zeros((3, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        layer.forward(np.zeros((4, 2), dtype=np.float32).T)
    with pytest.raises(ValueError, match=r"'err' has shape \(2, 3\); expected \(2, 4\)"):
        layer.backward(np.zeros((2, 4), dtype=np.float32), np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="node 5 is out of range"):
        layer.set_constant(5, "alpha", 1.0)
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        hsnn.ActivationLayer(["relu"], dtype="int8")


def test_copies_own_their_constants():
    layer = hsnn.ActivationLayer([("num*alpha", {"alpha": 2.0})])
    other = copy.copy(layer)
    other.set_constant(0, "alpha", 5.0)
    assert layer.constant(0, "alpha") == 2.0 and other.constant(0, "alpha") == 5.0


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_layers_and_losses_pickle_in_every_protocol_with_their_constants(protocol):
    layer = hsnn.ActivationLayer(["gelu", ("sin(num)*alpha", {"alpha": 2.0})], dtype="float64", layout="batch_major",
                                 method="cpu_interp")
    layer.set_constant(1, "alpha", 3.0)
    back = pickle.loads(pickle.dumps(layer, protocol=protocol))
    assert type(back) is hsnn.ActivationLayer
    assert (back.dtype, back.layout, back.method, back.params) == ("float64", "batch_major", "cpu_interp", [3.0])
    z = np.linspace(-2, 2, 8).reshape(4, 2)
    np.testing.assert_array_equal(back.forward(z), layer.forward(z))
    loss = hsnn.Loss("huber", {"delta": 0.5}, reduction="sum", dtype="float64")
    loss.set_constant("delta", 0.7)
    back = pickle.loads(pickle.dumps(loss, protocol=protocol))
    assert type(back) is hsnn.Loss and back.constant("delta") == 0.7 and back.reduction == "sum"


def test_copies_keep_the_class_and_own_their_constants():
    class Mine(hsnn.ActivationLayer):
        pass
    layer = Mine([("num*alpha", {"alpha": 2.0})], method="cpu_interp")
    for c in (copy.copy(layer), copy.deepcopy(layer)):
        assert type(c) is Mine
        c.set_constant(0, "alpha", 4.0)
        assert layer.constant(0, "alpha") == 2.0
    loss = hsnn.Loss("c*(y_pred - y_true)**2", {"c": 2.0})
    for c in (copy.copy(loss), copy.deepcopy(loss)):
        assert type(c) is hsnn.Loss
        c.set_constant("c", 3.0)
        assert loss.constant("c") == 2.0


def test_an_object_made_by_new_without_init_is_a_type_error_not_a_crash():
    z = np.zeros((1, 2), dtype=np.float32)
    for cls, call in ((hsnn.ActivationLayer, lambda o: o.forward(z)), (hsnn.Loss, lambda o: o.forward(z, z))):
        o = cls.__new__(cls)
        name = cls.__name__
        for f in (call, copy.copy, copy.deepcopy, pickle.dumps, lambda o: o.dtype, lambda o: o.compile_info()):
            with pytest.raises(TypeError, match=f"this {name} was never initialised"):
                f(o)
        del o  # and dropping it frees nothing that was never made
    with pytest.raises(TypeError, match="this ActivationLayer was never initialised"):
        hsnn.ActivationLayer.__new__(hsnn.ActivationLayer).num_nodes


def test_a_cache_directory_with_a_nul_is_refused():
    with pytest.raises(ValueError, match="cache_dir contains a NUL character"):
        hsnn.update_runtime_flags(cache_dir="a\x00b")
    assert "\x00" not in hsnn.runtime_flags()["cache_dir"]


def test_threads_run_with_the_gil_released():
    layer = hsnn.ActivationLayer(["gelu"] * 8)
    z = np.random.default_rng(1).standard_normal((8, 20000)).astype(np.float32)
    want = layer.forward(z)
    results = [None] * 4

    def work(i):
        results[i] = layer.forward(z)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)


def test_symbolic_helpers_and_runtime():
    assert hsnn.parse("sin(x)*alpha")["constants"] == ["alpha"]
    assert hsnn.diff("sin(x)*alpha") == "alpha*cos(x)"  # the user's spelling of the variable
    info = hsnn.runtime_info()
    assert info["default_method"] in ("cpu_jit", "cpu_interp", "cuda")
    # The program that links cached kernels into one shared object: an absolute path, or "" when none runs.
    assert info["cache_linker"] == "" or info["cache_linker"].startswith("/")
    assert info["cache_linker"] == "" or info["cpu_jit_enabled"]
    seen = []
    hsnn.set_warning_handler(seen.append)
    try:
        hsnn.ActivationLayer([("relu", {"beta": 1.0})], method="cpu_interp")
    finally:
        hsnn.set_warning_handler(None)
    assert seen == ["node 0: warning: constant 'beta' is not used by the formula (ignored)"]
    before = hsnn.runtime_flags()
    hsnn.update_runtime_flags(strict=True)
    try:
        assert hsnn.runtime_flags()["strict"] and hsnn.runtime_flags()["cache_dir"] == before["cache_dir"]
    finally:
        hsnn.update_runtime_flags(strict=before["strict"])


def test_bench_module_runs():
    from hsnn import bench
    r = bench.python_overhead(reps=1, nodes=16, batch=1024)
    assert r["python_ms"] > 0 and r["cpp_ms"] > 0


def test_eval_matches_the_layer():
    assert hsnn.eval("gelu", 1.0) == pytest.approx(0.8413447460685429, rel=1e-15)
    assert hsnn.eval("sin(x)*alpha", 1.0, constants={"alpha": 2.0}, derivative=True) == pytest.approx(2 * math.cos(1.0))
    assert hsnn.eval("huber", 3.0, y_true=1.0, constants={"delta": 0.5}) == pytest.approx(0.875)
    assert hsnn.eval("gelu", 1.0, dtype="float32") == pytest.approx(0.8413447, rel=1e-6)


def test_type_stubs_cover_the_module():
    import os
    import re
    from hsnn import _core
    stub = open(os.path.join(os.path.dirname(hsnn.__file__), "_core.pyi")).read()
    declared = set(re.findall(r"^(?:def|class) (\w+)", stub, re.M))
    public = {n for n in dir(_core) if not n.startswith("_")}
    assert public <= declared, public - declared
    for cls in (_core.ActivationLayer, _core.Loss):
        body = stub.split(f"class {cls.__name__}")[1].split("\nclass ")[0]
        members = set(re.findall(r"def (\w+)", body))
        assert {n for n in dir(cls) if not n.startswith("_")} <= members


def test_tiered_compilation_answers_at_once_and_ends_on_the_jit():
    if not hsnn.runtime_info()["cpu_jit_enabled"]:
        pytest.skip("cpu_jit unavailable")
    layer = hsnn.ActivationLayer(["gelu", ("sin(num)*alpha", {"alpha": 2.0})], method="cpu_jit", tiered=True)
    z = np.linspace(-3, 3, 2 * 50, dtype=np.float32).reshape(2, 50)
    first = layer.forward(z)
    layer.wait_for_compile()
    assert layer.method == "cpu_jit"
    np.testing.assert_allclose(layer.forward(z), first, rtol=1e-6, atol=1e-7)
    loss = hsnn.Loss("mse", tiered=True, method="cpu_jit")
    value = loss.forward(z[0], z[1])
    loss.wait_for_compile()
    assert loss.method == "cpu_jit" and loss.forward(z[0], z[1]) == pytest.approx(value, rel=1e-6)


def test_progress_callback_counts_the_kernels():
    if not hsnn.runtime_info()["cpu_jit_enabled"]:
        pytest.skip("cpu_jit unavailable")
    seen = []
    formulas = [f"sin(num*{k + 1})*alpha" for k in range(40)]
    old = hsnn.runtime_flags()["use_kernel_cache"]
    hsnn.update_runtime_flags(use_kernel_cache=False)
    try:
        layer = hsnn.ActivationLayer([(f, {"alpha": 1.0}) for f in formulas], method="cpu_jit",
                                     progress=lambda done, total: seen.append((done, total)))
    finally:
        hsnn.update_runtime_flags(use_kernel_cache=old)
    assert layer.method == "cpu_jit"
    totals = {t for _, t in seen}
    assert totals == {80}  # 40 distinct formulas x forward and backward
    dones = [d for d, _ in seen]
    assert dones == sorted(dones) and dones[-1] == 80 and len(dones) >= 2


def test_the_cache_keeps_apart_code_for_another_cpu_or_math_library(tmp_path):
    # HSNN_TARGET_CPU and HSNN_CPU_MATH change the JIT's code; a cache hit
    # (a linked entry found without LLVM) must not serve one's code to the
    # other. Each compile in a fresh process, as the variables are read once.
    import os
    import subprocess
    import sys
    if not hsnn.runtime_info()["cpu_jit_enabled"]:
        pytest.skip("cpu_jit unavailable")
    script = ("import hsnn\n"
              "from hsnn import _core\n"
              "layer = hsnn.ActivationLayer(['gelu', ('sin(num)*alpha', {'alpha': 2.0})], method='cpu_jit')\n"
              "_core.flush_kernel_cache()\n"
              "print(layer.compile_info()['cache_hit'], layer.method)\n")

    def compile_in_child(**env):
        child = dict(os.environ, HSNN_CACHE_DIR=str(tmp_path), **env)
        for name in ("HSNN_TARGET_CPU", "HSNN_CPU_MATH"):
            if name not in env:
                child.pop(name, None)
        out = subprocess.run([sys.executable, "-c", script], env=child, capture_output=True, text=True, check=True)
        hit, method = out.stdout.split()
        assert method == "cpu_jit", out.stderr
        return hit == "True"

    assert not compile_in_child()
    assert compile_in_child()
    assert not compile_in_child(HSNN_CPU_MATH="libmvec")
    assert compile_in_child(HSNN_CPU_MATH="libmvec")
    assert not compile_in_child(HSNN_TARGET_CPU="x86-64-v2")
    assert compile_in_child(HSNN_TARGET_CPU="x86-64-v2")
    assert compile_in_child()


def test_a_second_compile_loads_the_cached_kernels_with_the_same_results(tmp_path):
    from hsnn import _core
    if not hsnn.runtime_info()["cpu_jit_enabled"]:
        pytest.skip("cpu_jit unavailable")
    before = hsnn.runtime_flags()
    hsnn.update_runtime_flags(use_kernel_cache=True, cache_dir=str(tmp_path))
    try:
        first = hsnn.ActivationLayer(["gelu", "tanh"], method="cpu_jit")
        _core.flush_kernel_cache()  # the shared object linked in the background
        second = hsnn.ActivationLayer(["gelu", "tanh"], method="cpu_jit")
    finally:
        hsnn.update_runtime_flags(use_kernel_cache=before["use_kernel_cache"], cache_dir=before["cache_dir"])
    info = second.compile_info()
    assert info["cache_hit"] and not first.compile_info()["cache_hit"]
    # Nothing parsed: the front end's result came from the cache too.
    assert info["model_from_cache"] and not first.compile_info()["model_from_cache"]
    assert second.formula(0) == first.formula(0) and second.derivative(1) == first.derivative(1)
    # Linked into one shared object where a linker runs: loaded from inside an
    # extension module (RTLD_LOCAL), it still finds libmvec's functions.
    assert info["linked_from_cache"] == bool(hsnn.runtime_info()["cache_linker"])
    z = np.linspace(-5, 5, 2 * 64, dtype=np.float32).reshape(2, 64)  # nodes-major
    assert np.array_equal(first.forward(z), second.forward(z))
