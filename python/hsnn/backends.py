"""Where arrays live and what runs there: PyDotCompute's ``Backend`` interface (its documents are the contract),
with ``torch.backends``' conventions for the flags::

    import numpy as np, hsnn.backends as hb
    from hsnn.backends import CPUBackend, CUDABackend

    backend = CUDABackend(device_id=0) if CUDABackend.check_available() else CPUBackend()
    # or: hb.get_backend("auto") (a GPU if one can run, else the CPU); get_backend("cuda") raises without one
    kernel = backend.compile_kernel("sin(num)*alpha", (np.float32,), constants={"alpha": 2.0})
    x = backend.to_device(np.linspace(-2, 2, 1000, dtype=np.float32))
    out = backend.allocate(x.shape, np.float32)
    backend.launch_kernel(kernel, (4,), (256,), x, out)   # grid, block: checked; hsnn sizes its own launches
    backend.synchronize()
    backend.to_host(out)
    free, total = backend.get_memory_info()

    with hb.flags(strict=True, use_kernel_cache=False):   # restored on exit
        ...
    hb.cpu.get_cpu_capability()                 # "AVX512", "AVX2" or "DEFAULT"
    hb.cuda.is_available(), hb.cuda.is_built()

``Backend`` is the abstract interface (a backend of your own subclasses it); ``CPUBackend`` and ``CUDABackend``
are hsnn's. Arrays are typed memory of one backend (float32 or float64, C-contiguous, ``reshape`` gives a view)
and speak DLPack (``np.from_dlpack``, ``torch.from_dlpack``); host arrays also give writable NumPy views
(``np.asarray``). A kernel is a formula (or one per node) compiled for the backend's device, with the argument
types of its signature.
"""
import abc
import contextlib
import sys
import types

import numpy as np

from . import _core

__all__ = ["Backend", "CPUBackend", "CUDABackend", "BackendNotAvailableError", "Kernel", "get_backend", "flags",
           "cpu", "cuda"]


class BackendNotAvailableError(RuntimeError):
    """A backend asked for that this machine cannot give; the message says why."""


class Backend(abc.ABC):
    """The interface every backend gives (PyDotCompute's ``Backend``): a subclass implements the abstract members;
    ``launch_kernel``, ``get_memory_info`` and ``supports_feature`` have defaults."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Backend name identifier."""

    @property
    @abc.abstractmethod
    def is_available(self) -> bool:
        """Whether this backend is available on the current system."""

    @abc.abstractmethod
    def compile_kernel(self, func, signature):
        """Compile a kernel for this backend: `signature` is the tuple of its argument types; returns a callable."""

    @abc.abstractmethod
    def allocate(self, shape, dtype):
        """Room for an array of `shape` and `dtype` in this backend's memory."""

    @abc.abstractmethod
    def to_device(self, data):
        """A copy of host array `data` in this backend's memory."""

    @abc.abstractmethod
    def to_host(self, data):
        """A NumPy copy of one of this backend's arrays."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all pending operations to complete."""

    def launch_kernel(self, kernel, grid, block, *args):
        """Launch a kernel with explicit grid/block configuration. This default just calls the kernel."""
        return kernel(*args)

    def get_memory_info(self):
        """(free, total) memory in bytes; a backend that cannot tell raises NotImplementedError."""
        raise NotImplementedError(f"backend {self.name!r} does not report its memory")

    def supports_feature(self, feature) -> bool:
        """Whether the backend supports a feature ("async", "streams", "shared_memory"); by default none."""
        return False


def _launch_dims(what, dims):
    """grid or block as the interface takes them: 1 to 3 positive ints (an int is one dimension)."""
    dims = (dims,) if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool) else dims
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3 or \
            not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive ints, e.g. (256,); got {dims!r}")
    return tuple(int(d) for d in dims)


_SIGNATURE_TYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def _signature_dtype(signature):
    """The one float dtype a signature's argument types name (NumPy types, dtypes or their names)."""
    if not isinstance(signature, (tuple, list)) or not signature:
        raise TypeError(f"signature must be a tuple of argument types, e.g. (np.float32,) for f(num) or "
                        f"(np.float32, np.float32) for a loss in y_pred and y_true; got {signature!r}")
    names = set()
    for t in signature:
        try:
            d = np.dtype(t)
        except TypeError:
            d = None
        if d not in _SIGNATURE_TYPES:
            raise TypeError(f"signature argument type {t!r}: hsnn kernels take float32 or float64 arrays")
        names.add(_SIGNATURE_TYPES[d])
    if len(names) > 1:
        raise TypeError(f"signature {signature!r} mixes float32 and float64; a kernel has one dtype")
    return names.pop()


class Kernel:
    """A compiled formula: called with the arrays of its signature, and optionally an output array that it
    writes, it returns the result. An activation (a signature of one type) applies f(num) to every element of
    its input, or, compiled from one formula per node, to the rows of a (nodes, batch) array; a loss (two types)
    gives l(y_pred, y_true) per element. Backend arrays in, a backend array out (NumPy arrays in, NumPy out, on
    the CPU). ``compiled`` is hsnn's layer or loss (backward, fused, gradients, ...)."""

    def __init__(self, backend, compiled, arity, per_node, dtype):
        self.backend, self.compiled, self.arity = backend, compiled, arity
        self._per_node, self._dtype = per_node, dtype

    def __repr__(self):
        kind = "loss" if self.arity == 2 else "activation"
        return f"<hsnn.backends.Kernel {kind} {self._dtype} on {self.backend.name}>"

    def __call__(self, *args):
        if len(args) not in (self.arity, self.arity + 1):
            raise TypeError(f"the kernel takes {self.arity} input array(s) and optionally an output array; "
                            f"got {len(args)} arguments")
        inputs, out = args[:self.arity], args[self.arity] if len(args) > self.arity else None
        first = inputs[0]
        shape = tuple(first.shape)
        if out is None and isinstance(first, _core._DeviceArray):
            out = self.backend.allocate(shape, self._dtype)
        if self._per_node:
            result = self.compiled.forward(first, out=out)
            return out if out is not None else result
        # Every element is one sample: the formula as one node over all of them.
        flat = (1, int(np.prod(shape, dtype=np.int64)))
        views = [x.reshape(flat) for x in inputs]
        target = out.reshape(flat) if out is not None else None
        if self.arity == 2:
            if target is None or self.backend._on_device():
                result = self.compiled.forward_elements(*views, **({"out": target} if target is not None else {}))
            else:  # host memory: the values, then into the caller's array
                result = self.compiled.forward_elements(*views)
                np.copyto(np.asarray(target), np.asarray(result))
        else:
            result = self.compiled.forward(views[0], out=target)
        return out if out is not None else result.reshape(shape)


class _HsnnBackend(Backend):
    """CPUBackend's and CUDABackend's common part: hsnn's C++ backend for one device."""

    _caching = True  # compile_kernel keeps kernels in the disk cache (CUDABackend's enable_caching)

    def __init__(self, spec):
        self._spec = spec
        try:
            self._impl = _core._Backend(spec)
            self._why = None
        except (RuntimeError, ValueError) as e:
            self._impl, self._why = None, str(e)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}{'' if self.is_available else ' (unavailable)'}>"

    @property
    def name(self):
        return self._impl.name if self._impl else self._spec

    @property
    def is_available(self):
        return self._impl is not None and self._impl.is_available

    def _checked(self):
        if not self.is_available:
            raise BackendNotAvailableError(self._why or f"backend {self.name} is not available")
        return self._impl

    @property
    def device_id(self):
        return self._impl.device_id if self._impl else None

    @property
    def device_name(self):
        return self._checked().device_name

    @property
    def compute_capability(self):
        """(major, minor): (9, 0) for an H100; (0, 0) for the CPU."""
        return tuple(self._checked().compute_capability)

    def allocate(self, shape, dtype=np.float32):
        """Uninitialised room for an array of `shape` (float32 or float64)."""
        return self._checked().allocate(shape, dtype)

    def to_device(self, data):
        """A copy of a host array (NumPy, or anything np.asarray takes) in this backend's memory."""
        return self._checked().to_device(np.ascontiguousarray(data))

    def to_host(self, data):
        """A NumPy copy of one of this backend's arrays."""
        return self._checked().to_host(data)

    def synchronize(self):
        """Waits for the backend's work to finish."""
        self._checked().synchronize()

    def get_memory_info(self):
        """(free, total) bytes: the host's available and total memory, or the GPU's."""
        return tuple(int(v) for v in self._checked().get_memory_info())

    def supports_feature(self, feature):
        """"async", "streams", "shared_memory"."""
        return self._checked().supports_feature(feature)

    def _on_device(self):
        return self.device_id is not None and self.device_id >= 0

    def compile_kernel(self, func, signature, *, constants=None, reduction="mean"):
        """`func` (a formula or built-in name; for an activation, also a list of them, or of (formula, constants)
        pairs, one per node) compiled for this device with the argument types of `signature`: one type for an
        activation in `num`, two for a loss in y_pred and y_true; the dtype is theirs. Returns a Kernel."""
        dtype = _signature_dtype(signature)
        if len(signature) > 2:
            raise TypeError(f"signature {signature!r} has {len(signature)} argument types; a kernel takes one "
                            "(an activation in num) or two (a loss in y_pred and y_true)")
        self._checked()
        import hsnn
        method = "cuda" if self._on_device() else hsnn._cpu_method()
        with flags(use_kernel_cache=self._caching and _core.runtime_flags()["use_kernel_cache"]):
            if len(signature) == 2:
                if not isinstance(func, str):
                    raise TypeError(f"a loss kernel is one formula in y_pred and y_true; got {type(func).__name__}")
                loss = hsnn.Loss(func, constants, reduction=reduction, dtype=dtype, method=method)
                if self._on_device():
                    loss.set_gpu_id(self.device_id)
                return Kernel(self, loss, 2, False, dtype)
            per_node = not isinstance(func, str)
            nodes = list(func) if per_node else [(func, constants) if constants else func]
            layer = hsnn.ActivationLayer(nodes, dtype=dtype, layout="nodes_major", method=method,
                                         gpu_id=max(self.device_id, 0))
            return Kernel(self, layer, 1, per_node, dtype)

    def launch_kernel(self, kernel, grid, block, *args):
        """Runs kernel(*args) on this backend, checking grid and block (1 to 3 positive ints each: hsnn's kernels
        size their own launches for the device, so these change nothing), and waits for it on a GPU. Returns the
        kernel's result; a failure raises."""
        _launch_dims("grid", grid)
        _launch_dims("block", block)
        self._checked()
        result = kernel(*args)
        if self._on_device():
            self.synchronize()
        return result


class CPUBackend(_HsnnBackend):
    """Host memory; always available."""

    def __init__(self):
        super().__init__("cpu")

    @classmethod
    def check_available(cls):
        """True: the CPU is always there."""
        return True


class CUDABackend(_HsnnBackend):
    """GPU `device_id` through the CUDA driver. `enable_caching`: compile_kernel keeps its kernels in the disk
    cache. Raises RuntimeError (BackendNotAvailableError), saying why, where that GPU cannot run hsnn's kernels:
    ``if CUDABackend.check_available(): backend = CUDABackend()``."""

    def __init__(self, *, device_id=0, enable_caching=True):
        if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
            raise ValueError(f"device_id must be a device number, got {device_id!r}")
        super().__init__(f"cuda:{device_id}")
        self._device = device_id
        self._caching = bool(enable_caching)
        self._checked()

    @classmethod
    def check_available(cls):
        """True if CUDA is available: a driver, a GPU, and hsnn's GPU engine built in."""
        return bool(_core.runtime_info()["gpu_enabled"])

    @property
    def device_id(self):
        return self._device


def get_backend(spec="auto"):
    """"auto" (a GPU if one can run, else the CPU, which is always there), "cpu", "cuda" (device 0) or "cuda:N";
    a CUDA backend that cannot run raises BackendNotAvailableError (a RuntimeError) saying why."""
    if spec == "cpu":
        return CPUBackend()
    if spec == "auto":
        if not CUDABackend.check_available():
            return CPUBackend()
        try:
            return CUDABackend(device_id=0)
        except BackendNotAvailableError:
            return CPUBackend()
    if spec == "cuda" or (isinstance(spec, str) and spec.startswith("cuda:")):
        number = spec[5:] if spec.startswith("cuda:") else "0"
        if not number.isdigit():
            raise ValueError(f"bad backend {spec!r}: expected cuda:N with N a device number")
        return CUDABackend(device_id=int(number))
    raise ValueError(f"unknown backend {spec!r}; use auto, cpu, cuda or cuda:N")


_FLAG_NAMES = ("strict", "use_kernel_cache", "threads", "cache_dir")


@contextlib.contextmanager
def flags(**values):
    """Sets runtime flags (strict, use_kernel_cache, threads, cache_dir) for a block, and restores the ones it
    found on leaving it."""
    unknown = set(values) - set(_FLAG_NAMES)
    if unknown:
        raise TypeError(f"unknown flag(s) {sorted(unknown)}; the flags are {', '.join(_FLAG_NAMES)}")
    saved = _core.runtime_flags()
    _core.update_runtime_flags(**values)
    try:
        yield
    finally:
        _core.update_runtime_flags(**{k: saved[k] for k in values})


def _get_cpu_capability():
    """The widest vector instructions the JIT uses here: "AVX512", "AVX2" or "DEFAULT"."""
    return _core.runtime_info()["cpu_capability"] or "DEFAULT"


cpu = types.ModuleType(__name__ + ".cpu", "The host CPU: get_cpu_capability(), CPUBackend.")
cpu.get_cpu_capability, cpu.CPUBackend = _get_cpu_capability, CPUBackend


def _cuda_is_available():
    """Whether hsnn's kernels can run on a GPU here."""
    return bool(_core.runtime_info()["gpu_enabled"])


def _cuda_is_built():
    """Whether this hsnn was built with its GPU engine (it still needs a driver and a GPU to run)."""
    return "built without" not in _core.runtime_info()["gpu_unavailable_reason"]


def _cuda_device_count():
    return int(_core.runtime_info()["num_gpus"])


cuda = types.ModuleType(__name__ + ".cuda", "NVIDIA GPUs: is_available(), is_built(), device_count(), CUDABackend.")
cuda.is_available, cuda.is_built, cuda.device_count = _cuda_is_available, _cuda_is_built, _cuda_device_count
cuda.CUDABackend = CUDABackend
# The interface's module paths: backends.base.Backend, backends.cpu.CPUBackend, backends.cuda.CUDABackend.
base = types.ModuleType(__name__ + ".base", "The Backend interface.")
base.Backend = Backend
sys.modules[cpu.__name__], sys.modules[cuda.__name__], sys.modules[base.__name__] = cpu, cuda, base


class _Flags(types.ModuleType):
    """The runtime flags as plain values: ``hsnn.backends.strict = True``."""

    strict = property(lambda self: _core.runtime_flags()["strict"],
                      lambda self, v: _core.update_runtime_flags(strict=bool(v)))
    use_kernel_cache = property(lambda self: _core.runtime_flags()["use_kernel_cache"],
                                lambda self, v: _core.update_runtime_flags(use_kernel_cache=bool(v)))
    threads = property(lambda self: _core.runtime_flags()["threads"],
                       lambda self, v: _core.update_runtime_flags(threads=int(v)))
    cache_dir = property(lambda self: _core.runtime_flags()["cache_dir"],
                         lambda self, v: _core.update_runtime_flags(cache_dir=str(v)))


sys.modules[__name__].__class__ = _Flags
