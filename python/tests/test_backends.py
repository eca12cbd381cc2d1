"""hsnn.backends: the seed's Backend surface over hsnn::Backend, and torch.backends' conventions for flags.

The CUDA cases run where a GPU can (ctest python_fake_cuda_backends runs this file against the C++ tests'
stand-in libcuda, which keeps "device" memory on the host and runs no kernel)."""
import numpy as np
import pytest

import hsnn
import hsnn.backends as hb

GPU = hsnn.runtime_info()["gpu_enabled"]


def test_get_backend_gives_what_there_is_and_refuses_what_there_is_not():
    assert isinstance(hb.get_backend("cpu"), hb.CPUBackend)
    assert isinstance(hb.get_backend("auto"), hb.CUDABackend if GPU else hb.CPUBackend)
    with pytest.raises(ValueError, match="unknown backend 'tpu'; use auto, cpu, cuda or cuda:N"):
        hb.get_backend("tpu")
    with pytest.raises(ValueError, match="expected cuda:N"):
        hb.get_backend("cuda:x")
    if not GPU:
        with pytest.raises(hb.BackendNotAvailableError, match="backend 'cuda:0' is unavailable: "):
            hb.get_backend("cuda")
        with pytest.raises(hb.BackendNotAvailableError, match="backend 'cuda:1' is unavailable: "):
            hb.CUDABackend(device_id=1, enable_caching=False)
    with pytest.raises(ValueError, match="device_id must be a device number, got -1"):
        hb.CUDABackend(device_id=-1)


def test_cpu_backend_memory_round_trips_and_speaks_dlpack():
    be = hb.CPUBackend()
    assert (be.name, be.is_available, be.device_id, be.compute_capability) == ("cpu", True, -1, (0, 0))
    assert isinstance(be.device_name, str) and be.device_name
    assert be.check_available() is True
    free, total = be.get_memory_info()
    assert 0 < free <= total
    assert not be.supports_feature("async")
    host = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = be.to_device(host)
    assert x.shape == (3, 4) and x.dtype == np.float64 and x.size == 12 and x.nbytes == 96 and x.backend == "cpu"
    np.testing.assert_array_equal(be.to_host(x), host)
    view = np.asarray(x)  # host memory: a writable view, no copy
    view[0, 0] = 42.0
    assert be.to_host(x)[0, 0] == 42.0
    assert x.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(x), be.to_host(x))
    y = be.allocate((2, 5), "float32")
    assert y.shape == (2, 5) and y.dtype == np.float32
    with pytest.raises(TypeError, match="hsnn arrays hold float32 or float64, not int32"):
        be.allocate(3, np.int32)
    be.synchronize()


def test_torch_reads_backend_arrays_through_dlpack():
    torch = pytest.importorskip("torch")
    x = hb.CPUBackend().to_device(np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3))
    t = torch.from_dlpack(x)
    assert t.shape == (2, 3) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.numpy(), np.asarray(x))


def test_kernels_per_node_on_numpy_and_backend_arrays():
    be = hb.get_backend("cpu")
    kernel = be.compile_kernel(["gelu", ("sin(num)*alpha", {"alpha": 2.0})], (np.float32,))
    layer = kernel.compiled
    z = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(kernel(z), layer.forward(z))  # NumPy in, NumPy out
    x = be.to_device(z)
    out = be.launch_kernel(kernel, (1,), (8,), x)  # a backend array in, one out
    assert out.backend == "cpu" and out.shape == (2, 4)
    np.testing.assert_array_equal(be.to_host(out), layer.forward(z))
    np.testing.assert_array_equal(layer.fused(z)[1], be.compile_kernel(["gelu", ("sin(num)*alpha", {"alpha": 2.0})],
                                                                        ("float32",)).compiled.fused(z)[1])
    with pytest.raises(ValueError, match="nodes along axis 0"):  # a failed launch raises, saying why
        be.launch_kernel(kernel, (1,), (8,), be.to_device(z[:1]))
    with pytest.raises(ValueError, match=r"grid must be 1 to 3 positive ints, e.g. \(256,\); got \(0,\)"):
        be.launch_kernel(kernel, (0,), (8,), x)
    with pytest.raises(ValueError, match="block must be 1 to 3 positive ints"):
        be.launch_kernel(kernel, (1,), (1, 1, 1, 1), x)
    with pytest.raises(TypeError, match="the kernel takes 1 input array"):
        kernel(z, z, z)
    loss = be.compile_kernel("huber", (np.float64, np.float64), constants={"delta": 0.5})
    yp, yt = np.linspace(-2, 2, 6).reshape(2, 3), np.zeros((2, 3))
    np.testing.assert_allclose(loss(yp, yt), loss.compiled.forward_elements(yp.ravel(), yt.ravel()).reshape(2, 3))
    with pytest.raises(TypeError, match="a loss kernel is one formula"):
        be.compile_kernel(["mse"], (np.float32, np.float32))


def test_flags_are_plain_values_and_scoped_overrides_restore_them():
    before = hsnn.runtime_flags()
    with hb.flags(strict=True, use_kernel_cache=False):
        assert hb.strict is True and hb.use_kernel_cache is False
        with hb.flags(strict=False):
            assert hb.strict is False
        assert hb.strict is True
    assert hsnn.runtime_flags() == before
    try:
        hb.strict = True
        assert hsnn.runtime_flags()["strict"] is True
    finally:
        hb.strict = before["strict"]
    with pytest.raises(TypeError, match="unknown flag"):
        with hb.flags(fast=True):
            pass
    with pytest.raises(RuntimeError):
        with hb.flags(strict=True):
            raise RuntimeError("inside")
    assert hsnn.runtime_flags() == before


def test_torch_style_capability_queries():
    assert hb.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
    assert hb.cpu.get_cpu_capability() == (hsnn.runtime_info()["cpu_capability"] or "DEFAULT")
    assert hb.cuda.is_available() == GPU and hb.cuda.is_built() is True
    assert hb.cuda.device_count() == hsnn.runtime_info()["num_gpus"]
    import hsnn.backends.cuda as cuda_module  # importable as a module, as torch.backends.cuda is
    assert cuda_module is hb.cuda


@pytest.mark.skipif(not GPU, reason="needs a GPU (or ctest python_fake_cuda_backends)")
def test_cuda_backend_memory():
    be = hb.get_backend("cuda")
    assert isinstance(be, hb.CUDABackend) and be.name == "cuda:0" and be.device_id == 0
    assert be.compute_capability[0] >= 7 and be.device_name
    assert be.supports_feature("async")
    host = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    x = be.to_device(host)
    assert x.__dlpack_device__() == (2, 0) and x.backend == "cuda:0"
    np.testing.assert_array_equal(be.to_host(x), host)
    with pytest.raises(AttributeError, match="a CUDA array has no NumPy view"):
        x.__array_interface__  # (np.asarray would wrap it as an object instead)
