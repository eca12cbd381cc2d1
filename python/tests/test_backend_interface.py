"""hsnn.backends against the Backend interface's own documents (PyDotCompute's `Backend` and `CUDABackend`, the
seed's interface documents 002 and 003): each test quotes the text it checks, and is written from it, not from
hsnn's implementation. The CUDA cases that need a device run where one can (ctest python_fake_cuda_backends runs
this file against the stand-in libcuda, which keeps "device" memory on the host and runs no kernel)."""
import os

import numpy as np
import pytest

import hsnn
from hsnn.backends import get_backend
from hsnn.backends.base import Backend
from hsnn.backends.cpu import CPUBackend
from hsnn.backends.cuda import CUDABackend

GPU = hsnn.runtime_info()["gpu_enabled"]
FAKE_GPU = "fake_cuda" in os.environ.get("HSNN_CUDA_LIBRARY", "")  # launches are recorded, no kernel runs


def test_check_available_is_a_classmethod():
    """003: "@classmethod def check_available(cls) -> bool ... Returns: True if CUDA is available", used as
    "if CUDABackend.check_available(): backend = CUDABackend()"."""
    assert CUDABackend.check_available() is GPU
    if CUDABackend.check_available():
        backend = CUDABackend()
        assert backend.is_available
    assert CPUBackend.check_available() is True


def test_cuda_backend_raises_runtime_error_where_cuda_is_not_available():
    """003: "__init__(self, *, device_id: int = 0, enable_caching: bool = True) ... Raises: RuntimeError: If CUDA is
    not available"; 002: get_backend("auto") "Auto-select best available", "CPUBackend is always available as
    fallback", get_backend("cuda") "Raises if unavailable"."""
    with pytest.raises(TypeError):
        CUDABackend(0)  # keyword-only, as documented
    if GPU:
        assert CUDABackend(device_id=0).is_available
        assert isinstance(get_backend("auto"), CUDABackend)
    else:
        with pytest.raises(RuntimeError):
            CUDABackend(device_id=0)
        with pytest.raises(RuntimeError):
            get_backend("cuda")
        assert isinstance(get_backend("auto"), CPUBackend)
    cpu = CPUBackend()
    assert cpu.is_available is True  # "Always True"
    assert isinstance(cpu.name, str)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compile_kernel_takes_a_signature_of_argument_types(dtype):
    """002: "compile_kernel(self, func: Callable, signature: tuple[type, ...]) -> Callable ... signature: Argument
    types ... Returns: Compiled kernel callable"; 003: "backend.compile_kernel(my_func, (np.float32,))". A formula
    is hsnn's func; its dtype is the signature's."""
    backend = get_backend("cpu")
    kernel = backend.compile_kernel("sin(num)*2", (dtype,))
    assert callable(kernel)
    x = np.linspace(-3, 3, 7).astype(dtype)
    y = kernel(x)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, np.sin(x) * 2, rtol=1e-6 if dtype == np.float32 else 1e-15)
    again = backend.compile_kernel("sin(num)*2", (dtype,))  # compiled again: the cache's
    np.testing.assert_array_equal(again(x), y)
    with pytest.raises(TypeError, match="float32 or float64"):
        backend.compile_kernel("sin(num)*2", (np.int32,))
    with pytest.raises(TypeError, match="tuple of argument types"):
        backend.compile_kernel("sin(num)*2", ())


def test_launch_kernel_with_grid_and_block():
    """003: "launch_kernel(kernel, grid, block, *args) ... grid: Grid dimensions (blocks per grid) / block: Block
    dimensions (threads per block) / *args: Kernel arguments", as its example launches vector_add: allocate the
    output, launch, synchronize, to_host. (Its example passes grid= and block= as keywords before the arrays,
    which Python does not allow; they are passed in place here.)"""
    backend = get_backend("auto")
    a = np.linspace(-2, 2, 1000, dtype=np.float32)
    a_gpu = backend.to_device(a)
    c_gpu = backend.allocate(a.shape, np.float32)
    kernel = backend.compile_kernel("gelu", (np.float32,))
    threads_per_block = 256
    blocks = (a.size + threads_per_block - 1) // threads_per_block
    backend.launch_kernel(kernel, (blocks,), (threads_per_block,), a_gpu, c_gpu)
    backend.synchronize()
    c = backend.to_host(c_gpu)
    if not FAKE_GPU:
        np.testing.assert_array_equal(c, kernel.compiled.forward(a.reshape(1, -1)).ravel())


def test_get_memory_info_gives_free_and_total_bytes():
    """002/003: "get_memory_info(self) -> tuple[int, int] ... Tuple of (free_bytes, total_bytes)";
    "free, total = backend.get_memory_info()"."""
    for backend in [CPUBackend()] + ([CUDABackend(device_id=0)] if GPU else []):
        free, total = backend.get_memory_info()
        assert isinstance(free, int) and isinstance(total, int)
        assert 0 < free <= total


def test_a_custom_backend_implements_the_abstract_interface():
    """002: "Implementing Custom Backend": a subclass of Backend gives name, is_available, compile_kernel,
    allocate, to_device, to_host and synchronize; launch_kernel's "Default implementation just calls the
    kernel"."""
    class ListBackend(Backend):
        @property
        def name(self):
            return "lists"

        @property
        def is_available(self):
            return True

        def compile_kernel(self, func, signature):
            return lambda xs, out: out.extend(func(x) for x in xs)

        def allocate(self, shape, dtype):
            return []

        def to_device(self, data):
            return list(data)

        def to_host(self, data):
            return np.array(data)

        def synchronize(self):
            pass

    backend = ListBackend()
    out = backend.allocate((3,), np.float32)
    backend.launch_kernel(backend.compile_kernel(lambda x: 2 * x, (np.float32,)), (1,), (3,),
                          backend.to_device([1, 2, 3]), out)
    np.testing.assert_array_equal(backend.to_host(out), [2, 4, 6])
    assert backend.supports_feature("async") is False

    class Incomplete(Backend):
        @property
        def name(self):
            return "half"

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
