"""hsnn.Population: scores of many new formulas against NumPy and compiled layers."""

import numpy as np
import pytest

import hsnn


def _data(rows=777, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (rows, 3))
    y = np.sin(X[:, 0]) * X[:, 1] + 0.1 * rng.standard_normal(rows)
    return X, y


FORMULAS = ["x0*x1 + sin(x2)", "exp(x0) - x1**2", "log(x2)", ("a*x0 + b", {"a": 1.5, "b": -0.25}), "tanh(x1)/x2",
            "Piecewise((x0, x0 > 0), (0.1*x0, True))", "gelu(x1) + Max(x0, x2)"]


def test_values_have_the_bits_of_a_compiled_layer():
    if not hsnn.runtime_info()["cpu_jit_enabled"]:
        pytest.skip("cpu_jit unavailable")
    x = np.linspace(-4, 4, 1001)
    formulas = ["sin(num)*alpha", "gelu", "softplus(num) - erf(num)", "num**3 + num**-2", "atan2(num, 0.5)"]
    for dtype in ("float32", "float64"):
        pop = hsnn.Population([(f, {"alpha": 2.0} if "alpha" in f else {}) for f in formulas], dtype=dtype)
        got = pop.evaluate(x)
        layer = hsnn.ActivationLayer([(f, {"alpha": 2.0} if "alpha" in f else {}) for f in formulas], dtype=dtype,
                                     method="cpu_jit")
        want = layer.forward(np.tile(x.astype(dtype), (len(formulas), 1)))
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.view(np.uint32 if dtype == "float32" else np.uint64),
                                      want.view(np.uint32 if dtype == "float32" else np.uint64))


def test_fitness_is_the_loss_of_the_values_in_both_layouts_and_with_weights():
    X, y = _data()
    pop = hsnn.Population(FORMULAS, variables=["x0", "x1", "x2"], dtype="float64")
    v = pop.evaluate(X)
    np.testing.assert_array_equal(v, pop.evaluate(np.asfortranarray(X)))
    with np.errstate(invalid="ignore"):
        mse = ((v - y) ** 2).mean(axis=1)
    np.testing.assert_allclose(pop.fitness(X, y), mse, rtol=1e-12)
    w = np.random.default_rng(1).uniform(0, 2, len(y))
    with np.errstate(invalid="ignore"):
        wmse = (w * (v - y) ** 2).sum(axis=1) / w.sum()
    np.testing.assert_allclose(pop.fitness(X, y, weights=w), wmse, rtol=1e-12)
    with np.errstate(invalid="ignore"):
        mae = np.abs(v - y).sum(axis=1)
    np.testing.assert_allclose(pop.fitness(X, y, loss="abs(y_pred - y_true)", reduction="sum"), mae, rtol=1e-12)
    assert np.isnan(pop.fitness(X, y)[2])  # log of negatives: IEEE's NaN, not an error


def test_torch_tensors_come_in_through_dlpack():
    torch = pytest.importorskip("torch")
    X, y = _data(100)
    pop = hsnn.Population(FORMULAS[:2], variables=["x0", "x1", "x2"])
    got = pop.fitness(torch.from_numpy(X.astype(np.float32)), torch.from_numpy(y.astype(np.float32)))
    np.testing.assert_array_equal(got, pop.fitness(X, y))


def test_constant_gradients_agree_with_finite_differences():
    X, y = _data(500)
    pop = hsnn.Population(["a*sin(b*x0) + c*x1", "2.5*x0*x1 - 0.5"], variables=["x0", "x1", "x2"], dtype="float64",
                          literals_as_constants=True)
    assert pop.constant_names(1) == ["_c0", "_c1"]
    scores, grads = pop.constant_gradients(X, y)
    np.testing.assert_allclose(scores, pop.fitness(X, y), rtol=1e-13)
    c0 = pop.constants.copy()
    h = 1e-6
    for k in range(len(c0)):
        i = np.searchsorted(pop.offsets, k, side="right") - 1
        up, down = c0.copy(), c0.copy()
        up[k] += h
        down[k] -= h
        pop.constants = up
        su = pop.fitness(X, y)[i]
        pop.constants = down
        sd = pop.fitness(X, y)[i]
        assert grads[k] == pytest.approx((su - sd) / (2 * h), rel=1e-5, abs=1e-7)
    pop.constants = c0


def test_bad_members_are_reported_and_scored_nan():
    X, y = _data(50)
    pop = hsnn.Population(["x0 + x1", "sin(x0", "x0 * x3"], variables=["x0", "x1", "x2"])
    assert [e.index for e in pop.errors] == [1, 2]
    assert pop.errors[1].message == "'x3' is neither a variable (x0, x1, x2) nor a constant given to this formula"
    assert pop.errors[1].column == 6
    s = pop.fitness(X, y)
    assert np.isfinite(s[0]) and np.isnan(s[1]) and np.isnan(s[2])
    with pytest.raises(ValueError, match=r"X has shape \(50, 2\); expected \(rows, 3\)"):
        pop.fitness(X[:, :2], y)
    with pytest.raises(ValueError, match="'y' has 49 values for 50 rows"):
        pop.fitness(X, y[:49])
    with pytest.raises(ValueError, match="variable 'x0' is named twice"):
        hsnn.Population(["x0"], variables=["x0", "x0"])


def test_the_method_is_checked_and_cuda_needs_a_gpu():
    with pytest.raises(ValueError, match=r"a population runs on cpu_interp or cuda, not cpu_jit \(cpu_jit compiles "
                                         r"layers: ActivationLayer\)"):
        hsnn.Population(["x0"], variables=["x0"], method="cpu_jit")
    X, y = _data(50)
    pop = hsnn.Population(["x0 + x1"], variables=["x0", "x1", "x2"], method="cpu_interp")
    assert np.isfinite(pop.fitness(X, y)[0])
    if hsnn.runtime_info()["num_gpus"] > 0:
        pytest.skip("this machine has a GPU: the GPU tests run populations there")
    gpu = hsnn.Population(["x0 + x1"], variables=["x0", "x1", "x2"], method="cuda")
    with pytest.raises(Exception, match="CUDA|GPU|libcuda"):
        gpu.fitness(X, y)


def test_arrays_in_prefix_and_postfix_order():
    c = hsnn.op_codes()
    # x0 * sin(x1) + 2.5, and c * x0 with c fit-able (starting at 3), as padded rows
    prefix = [[c["add"], c["mul"], c["variable"], c["sin"], c["variable"], c["number"]],
              [c["mul"], c["constant"], c["variable"], 0, 0, 0]]
    values = [[0, 0, 0, 0, 1, 2.5], [0, 3, 0, 0, 0, 0]]
    pop = hsnn.Population.from_arrays(prefix, values, [6, 3], variables=["x0", "x1"])
    post = hsnn.Population.from_arrays(
        [c["variable"], c["variable"], c["sin"], c["mul"], c["number"], c["add"], c["constant"], c["variable"],
         c["mul"]], [0, 1, 0, 0, 2.5, 0, 3, 0, 0], [6, 3], variables=["x0", "x1"], order="postfix")
    text = hsnn.Population(["x0*sin(x1) + 2.5", ("c*x0", {"c": 3})], variables=["x0", "x1"])
    X = np.random.default_rng(2).uniform(-1, 1, (64, 2))
    np.testing.assert_array_equal(pop.evaluate(X), text.evaluate(X))
    np.testing.assert_array_equal(post.evaluate(X), text.evaluate(X))
    assert list(pop.constants) == [3.0]
    bad = hsnn.Population.from_arrays([c["add"], c["variable"]], [0, 0], [2], variables=["x0", "x1"])
    assert bad.errors[0].message == "position 2: the codes end with 1 operator(s) missing operands"
