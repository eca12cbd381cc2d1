"""CUDA tensors through DLPack to the cuda method, without copies.

No GPU here: this runs against the stand-in libcuda of the C++ tests
(test/CUDA/FakeDriver.cpp, ctest `python_fake_cuda` sets HSNN_CUDA_LIBRARY),
which keeps "device" memory in host memory, checks every pointer it is given
and records launches and copies, but runs no kernel. The tensors are made here
with ctypes: a minimal DLPack producer over the fake driver's cuMemAlloc."""

import ctypes
import os

import numpy as np
import pytest

import hsnn

FAKE = os.environ.get("HSNN_CUDA_LIBRARY", "")
pytestmark = pytest.mark.skipif("fake_cuda" not in FAKE or not hsnn.runtime_info()["gpu_enabled"],
                                reason="needs the fake CUDA driver (ctest python_fake_cuda)")


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL(FAKE)
        self.lib.hsnnFakeCudaLaunches.restype = ctypes.c_char_p
        self.lib.hsnnFakeCudaCount.argtypes = [ctypes.c_char_p]
        self.lib.hsnnFakeCudaLastStream.restype = ctypes.c_uint64
        assert self.lib.cuInit(0) == 0
        ctx = ctypes.c_void_p()
        assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        self.ctx = ctx

    def alloc(self, nbytes):
        self.lib.cuCtxSetCurrent(self.ctx)  # the fake's current context is per thread
        p = ctypes.c_uint64()
        assert self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)) == 0
        return p.value

    def copies(self):
        return self.lib.hsnnFakeCudaCount(b"htod") + self.lib.hsnnFakeCudaCount(b"dtoh")

    def launches(self):
        return self.lib.hsnnFakeCudaLaunches().decode()

    def clear(self):
        self.lib.hsnnFakeCudaClearLaunches()

    def count(self, what):
        return self.lib.hsnnFakeCudaCount(what.encode())

    def last_stream(self):
        return self.lib.hsnnFakeCudaLastStream()


class FakeCudaTensor:
    """Enough of a CUDA tensor for DLPack consumers: memory on device 0 of the fake driver."""

    def __init__(self, driver, shape, bits=32, device_type=2):
        self.driver, self.shape, self.bits, self.device_type = driver, tuple(shape), bits, device_type
        self.ptr = driver.alloc(int(np.prod(shape)) * bits // 8)
        self._keep = []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.stream = stream
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        m = DLManagedTensor()
        m.dl_tensor = DLTensor(self.ptr, DLDevice(self.device_type, 0), len(self.shape), DLDataType(2, self.bits, 1),
                               shape, None, 0)
        self._keep += [shape, m]  # the capsule points into these
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)

    def new_empty(self, shape):
        return FakeCudaTensor(self.driver, shape, self.bits)


@pytest.fixture(scope="module")
def driver():
    return Driver()


def test_layer_runs_on_cuda_tensors_without_copies(driver):
    layer = hsnn.ActivationLayer(["relu", ("sin(num)*alpha", {"alpha": 2.0}), "gelu"], method="cuda")
    z, err = FakeCudaTensor(driver, (3, 1000)), FakeCudaTensor(driver, (3, 1000))
    layer.fused(z)  # builds the fused module, uploading its tables: setup, not data
    copies = driver.copies()
    driver.clear()
    a = layer.forward(z)
    assert isinstance(a, FakeCudaTensor) and a.shape == (3, 1000) and a.ptr != z.ptr
    assert z.stream == 1  # asked for CUDA's legacy default stream, where hsnn launches
    d = layer.backward(z, err)
    a2, dfdz = layer.fused(z)
    out = FakeCudaTensor(driver, (3, 1000))
    assert layer.forward(z, out=out) is out
    assert driver.copies() == copies  # nothing went through the host
    launches = driver.launches()
    assert launches.startswith("hsnn_layer_forward 3,3 256;hsnn_layer_backward 3,3 256;")
    assert "hsnn_layer_fused 3,3 256;" in launches and launches.endswith("hsnn_layer_forward 3,3 256;")
    assert isinstance(d, FakeCudaTensor) and isinstance(dfdz, FakeCudaTensor) and isinstance(a2, FakeCudaTensor)


def test_loss_runs_on_cuda_tensors(driver):
    loss = hsnn.Loss("mse", method="cuda")
    yp, yt = FakeCudaTensor(driver, (1000,)), FakeCudaTensor(driver, (1000,))
    driver.clear()
    assert loss.forward(yp, yt) == 0.0  # the fake runs no kernel: its zeroed memory sums to 0
    g = loss.gradient(yp, yt)
    value, g2 = loss.fused(yp, yt)
    elements = loss.forward_elements(yp, yt)
    assert all(isinstance(x, FakeCudaTensor) and x.shape == (1000,) for x in (g, g2, elements))
    assert driver.launches().startswith("hsnn_loss_sum 4,1 256;hsnn_loss_add_partials 1,1 32;hsnn_loss_gradient 4,1 256;")


def test_cuda_tensors_are_checked(driver):
    layer = hsnn.ActivationLayer(["relu", "tanh"], method="cuda")
    with pytest.raises(ValueError, match="'z' has 3 nodes along axis 0; the layer has 2"):
        layer.forward(FakeCudaTensor(driver, (3, 10)))
    with pytest.raises(TypeError, match="'z' must hold float32"):
        layer.forward(FakeCudaTensor(driver, (2, 10), bits=64))
    with pytest.raises(ValueError, match="'err' is not CUDA memory \\(DLPack device type 1\\)"):
        layer.backward(FakeCudaTensor(driver, (2, 10)), np.zeros((2, 10), np.float32))
    with pytest.raises(ValueError, match="'out' must have the shape of 'z'"):
        layer.forward(FakeCudaTensor(driver, (2, 10)), out=FakeCudaTensor(driver, (2, 11)))
    cpu = hsnn.ActivationLayer(["relu", "tanh"], method="cpu_interp")
    with pytest.raises(ValueError, match="buffer 'z' on backend cuda:0 given to a layer that runs on cpu"):
        cpu.forward(FakeCudaTensor(driver, (2, 10)))


def test_derivative_layers_and_losses_run_on_cuda_tensors(driver):
    """f'' and f''' (and a loss's l'') compile for the cuda method and run on
    device memory: what hsnn.torch's double backward runs on CUDA tensors."""
    layer = hsnn.ActivationLayer(["tanh", ("sin(num)*alpha", {"alpha": 2.0})], layout="batch_major", method="cuda")
    second = layer.derivative_layer(2)
    assert second.method == "cuda" and second.derivation == ["d", "d"]
    assert second.formula(1) == "-alpha*sin(num)"
    tangent = layer.constant_tangent_layer()
    assert tangent.method == "cuda" and tangent.params == [2.0, 0.0]
    z, err = FakeCudaTensor(driver, (1000, 2)), FakeCudaTensor(driver, (1000, 2))
    second.forward(z)  # builds the module: setup, not data
    copies = driver.copies()
    driver.clear()
    a = second.forward(z)
    d = second.backward(z, err)  # err * f'''
    t = tangent.forward(z)
    assert all(isinstance(x, FakeCudaTensor) and x.shape == (1000, 2) for x in (a, d, t))
    assert driver.copies() == copies
    launches = driver.launches()
    assert launches.count("_forward") == 2 and launches.count("_backward") == 1, launches
    loss = hsnn.Loss("huber", {"delta": 0.5}, method="cuda").derivative_loss(2)
    yp, yt = FakeCudaTensor(driver, (1000,)), FakeCudaTensor(driver, (1000,))
    assert loss.method == "cuda" and isinstance(loss.forward_elements(yp, yt), FakeCudaTensor)


def test_calls_queue_on_the_callers_stream(driver):
    """stream= (what hsnn.torch passes: PyTorch's current stream) queues the
    kernels there and returns without waiting for the device; the capsules are
    asked for that stream. Without it: the legacy default stream, waited for."""
    layer = hsnn.ActivationLayer(["relu", "tanh"], method="cuda")
    loss = hsnn.Loss("mse", method="cuda")
    z = FakeCudaTensor(driver, (2, 100))
    layer.forward(z)
    syncs = driver.count("synchronize")
    a = layer.forward(z, stream=0x5000)
    assert driver.last_stream() == 0x5000 and z.stream == 0x5000 and a.stream == 0x5000
    a, d = layer.fused(z, stream=0x5000)
    assert driver.last_stream() == 0x5000
    assert driver.count("synchronize") == syncs  # queued, not waited for
    yp, yt = FakeCudaTensor(driver, (100,)), FakeCudaTensor(driver, (100,))
    waits = driver.count("stream_synchronize")
    assert loss.forward(yp, yt, stream=0x5000) == 0.0  # a value for the host: waits for that stream only
    assert driver.last_stream() == 0x5000 and driver.count("stream_synchronize") == waits + 1
    loss.gradient(yp, yt, stream=0x5000)
    assert driver.count("synchronize") == syncs
    layer.forward(z)
    assert driver.last_stream() == 0 and z.stream == 1 and driver.count("synchronize") == syncs + 1
    with pytest.raises(ValueError, match="stream= is for CUDA arrays; these are in host memory"):
        hsnn.ActivationLayer(["relu"]).forward(np.zeros((1, 4), np.float32), stream=0x5000)


class RawEntries(ctypes.Structure):
    """python/src/RawRun.h's struct, as hsnn._torch reads it from _core's capsule."""
    _fields_ = [("layer_of", ctypes.c_void_p), ("loss_of", ctypes.c_void_p), ("run_layer_fused", ctypes.c_void_p),
                ("run_loss_fused", ctypes.c_void_p),
                ("run_layer_device", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                      ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64,
                                                      ctypes.c_char_p, ctypes.c_size_t)),
                ("run_loss_device", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                     ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                     ctypes.c_int64, ctypes.c_uint64, ctypes.c_char_p,
                                                     ctypes.c_size_t)),
                ("min_pooled_bytes", ctypes.c_size_t), ("pool_take", ctypes.c_void_p), ("pool_give", ctypes.c_void_p)]


def raw_entries():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    entries = RawEntries.from_address(get(hsnn._core._raw_run(), b"hsnn._core.raw_entries"))
    object_of = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p, ctypes.c_size_t)
    return entries, object_of(entries.layer_of), object_of(entries.loss_of)


def test_torchs_cuda_entries_queue_on_the_given_stream_and_wait_for_nothing(driver):
    """What hsnn._torch runs for CUDA tensors (PyTorch's current stream, its
    allocator's memory): the layer's fused kernel and the loss's fused kernel
    with the value left on the device, queued; no copy, no synchronization."""
    entries, layer_of, loss_of = raw_entries()
    message = ctypes.create_string_buffer(512)
    layer = hsnn.ActivationLayer(["relu", "gelu", "tanh"], layout="batch_major", method="cuda")
    engine = layer_of(layer, message, 512)
    assert engine, message.value
    z, a, d = (driver.alloc(1000 * 3 * 4) for _ in range(3))
    assert entries.run_layer_device(engine, 2, 0, z, None, a, d, 1000, 0x5000, message, 512) == 0, message.value
    loss = hsnn.Loss("mse", method="cuda")
    lengine = loss_of(loss, message, 512)
    assert lengine, message.value
    yp, yt, g, value = (driver.alloc(n) for n in (4000, 4000, 4000, 4))
    syncs, stream_syncs, copies = driver.count("synchronize"), driver.count("stream_synchronize"), driver.copies()
    driver.clear()
    assert entries.run_layer_device(engine, 2, 0, z, None, a, d, 1000, 0x5000, message, 512) == 0, message.value
    assert entries.run_loss_device(lengine, 0, yp, yt, g, value, 1000, 0x5000, message, 512) == 0, message.value
    assert driver.last_stream() == 0x5000
    launches = driver.launches()
    # 1000 x 3 in tiles of 64 x 32: 16 blocks wanted, 8 fill the fake device.
    assert launches == "hsnn_layer_fused_batch_major 8,1 256;hsnn_loss_fused 4,1 256;hsnn_loss_value 1,1 32;", launches
    assert (driver.count("synchronize"), driver.count("stream_synchronize"), driver.copies()) == (syncs, stream_syncs,
                                                                                                 copies)
    # Errors come back as messages: a dtype the layer was not compiled for, a CPU layer.
    assert entries.run_layer_device(engine, 2, 1, z, None, a, d, 1000, 0x5000, message, 512) == 1
    assert message.value == b"the layer is f32; the tensor is not"
    cpu = hsnn.ActivationLayer(["relu"], layout="batch_major", method="cpu_interp")
    assert entries.run_layer_device(layer_of(cpu, message, 512), 2, 0, z, None, a, d, 10, 0, message, 512) == 1
    assert message.value == b"the layer runs on the CPU (cpu_interp), not on CUDA memory"


def test_a_loss_value_can_stay_on_the_device(driver):
    """What hsnn.torch's Python path (trainable constants, torch.compile's custom op) runs for a CUDA loss: the
    fused kernel with the value left in a one-element device array, queued on the stream, nothing waited for."""
    loss = hsnn.Loss("mse", method="cuda")
    yp, yt, g = (FakeCudaTensor(driver, (1000,)) for _ in range(3))
    value = FakeCudaTensor(driver, ())
    loss._run_device(4, [x.__dlpack__(0x5000) for x in (yp, yt, g, value)], 0x5000)  # builds: not measured
    syncs, stream_syncs, copies = driver.count("synchronize"), driver.count("stream_synchronize"), driver.copies()
    driver.clear()
    assert loss._run_device(4, [x.__dlpack__(0x5000) for x in (yp, yt, g, value)], 0x5000) == 0.0
    assert driver.launches() == "hsnn_loss_fused 4,1 256;hsnn_loss_value 1,1 32;"
    assert driver.last_stream() == 0x5000
    assert (driver.count("synchronize"), driver.count("stream_synchronize"), driver.copies()) == (syncs, stream_syncs,
                                                                                                 copies)
    wide = FakeCudaTensor(driver, (), bits=64)
    with pytest.raises(TypeError, match="'value' must hold float32"):
        loss._run_device(4, [x.__dlpack__(0x5000) for x in (yp, yt, g, wide)], 0x5000)


def test_a_population_runs_on_the_gpu_from_host_arrays():
    # Host arrays go to the device and back; the fake runs no kernel, so only
    # what the host decides is checked: shapes, NaN for a formula that does
    # not parse, and the errors.
    X = np.linspace(0.1, 1.0, 100, dtype=np.float32).reshape(-1, 1)
    y = 2 * X[:, 0]
    pop = hsnn.Population(["sin(num)*2", "num +* 2", "num**3"], method="cuda")
    scores = pop.fitness(X, y)
    assert scores.shape == (3,) and np.isnan(scores[1])
    assert pop.evaluate(X).shape == (3, 100)
    with pytest.raises(ValueError, match=r"GPU id 3 is out of range: valid ids are 0\.\.0"):
        hsnn.Population(["num"], method="cuda", gpu_id=3).fitness(X, y)
    with pytest.raises(ValueError, match="a population runs on cpu_interp or cuda, not cpu_jit"):
        hsnn.Population(["num"], method="cpu_jit")
