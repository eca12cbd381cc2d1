"""Results from the pool of recycled blocks (python/src/OutputPool.h): reused
once freed, never while alive, and the TBB product hsnn.torch's backward runs."""
import gc

import numpy as np
import pytest

import hsnn
from hsnn import _core


def test_a_freed_result_is_reused_and_a_live_one_is_not():
    layer = hsnn.ActivationLayer(["tanh", "relu"], dtype="float32")
    z = np.linspace(-3, 3, 2 * 40000, dtype=np.float32).reshape(2, 40000)  # 312 KiB: pooled
    a = layer.forward(z)
    b = layer.forward(z)
    assert a.ctypes.data != b.ctypes.data  # both alive: two blocks
    np.testing.assert_array_equal(a, b)
    address = a.ctypes.data
    waiting = _core._pooled_bytes()
    del a
    gc.collect()
    assert _core._pooled_bytes() == waiting + z.nbytes
    c = layer.forward(z)
    assert c.ctypes.data == address  # the freed block, pages already resident
    np.testing.assert_array_equal(c, b)
    assert _core._pooled_bytes() == waiting
    assert c.ctypes.data % 64 == 0


def test_small_results_are_plain_numpy_arrays():
    layer = hsnn.ActivationLayer(["tanh"], dtype="float64")
    a = layer.forward(np.zeros((1, 100)))
    assert a.base is None and a.flags.owndata


def test_multiply_matches_numpy_and_checks_its_arguments():
    rng = np.random.default_rng(3)
    for dtype, n in (("float32", 100), ("float32", 300000), ("float64", 70000)):
        x, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
        got = _core._multiply(x, y)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, x * y)
    with pytest.raises(TypeError, match="multiply takes two float32 or two float64 arrays"):
        _core._multiply(np.zeros(4, np.float32), np.zeros(4))
    with pytest.raises(ValueError, match="multiply takes two arrays of one shape"):
        _core._multiply(np.zeros(4), np.zeros(5))
    with pytest.raises(ValueError, match="multiply takes C-contiguous arrays"):
        _core._multiply(np.zeros((4, 4))[:, ::2], np.zeros((4, 2)))
