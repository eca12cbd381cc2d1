"""Where arrays live and what runs there, as HeteroSymNN's and PyDotCompute's ``Backend`` surface, with
``torch.backends``' conventions for the flags::

    import hsnn.backends as hb
    be = hb.get_backend("auto")                 # "cpu", "cuda" or "cuda:N"; an absent one raises
    x = be.to_device(np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4))
    layer = be.compile_kernel(["gelu", ("sin(num)*alpha", {"alpha": 2.0})])
    r = be.launch_kernel(layer, x)              # a record: r.success, r.time_ms, r.error, r.result
    be.to_host(r.result)

    with hb.flags(strict=True, use_kernel_cache=False):   # restored on exit
        ...
    hb.cpu.get_cpu_capability()                 # "AVX512", "AVX2" or "DEFAULT"
    hb.cuda.is_available(), hb.cuda.is_built()

Arrays are typed memory of one backend (float32 or float64, C-contiguous) and speak DLPack (``np.from_dlpack``,
``torch.from_dlpack``); host arrays also give writable NumPy views (``np.asarray``). Kernels are hsnn's layers
and losses compiled for the backend's device; launching one takes this backend's arrays (or NumPy arrays on the
CPU) and returns a record instead of raising, as PyDotCompute's backends do.
"""
import contextlib
import sys
import time
import types
from collections import namedtuple

import numpy as np

from . import _core

__all__ = ["Backend", "CPUBackend", "CUDABackend", "BackendNotAvailableError", "LaunchResult", "get_backend",
           "flags", "cpu", "cuda"]


class BackendNotAvailableError(RuntimeError):
    """A backend asked for that this machine cannot give; the message says why."""


LaunchResult = namedtuple("LaunchResult", "success time_ms error result")
LaunchResult.__doc__ = "What launch_kernel did: success, the time it took (ms), the error (None) and the result."

class Backend:
    """One device: host memory (``CPUBackend``) or a CUDA GPU (``CUDABackend``)."""

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

    def check_available(self):
        """Raises BackendNotAvailableError (saying why) unless the backend can run."""
        if not self.is_available:
            raise BackendNotAvailableError(self._why or f"backend {self.name} is not available")

    def _checked(self):
        self.check_available()
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

    def allocate(self, shape, dtype="float32"):
        """Uninitialised room for an array of `shape` (float32 or float64)."""
        return self._checked().allocate(shape, dtype)

    def to_device(self, host):
        """A copy of a host array (NumPy, or anything np.asarray takes) in this backend's memory."""
        return self._checked().to_device(np.ascontiguousarray(host))

    def to_host(self, array):
        """A NumPy copy of one of this backend's arrays."""
        return self._checked().to_host(array)

    def synchronize(self):
        """Waits for the backend's work to finish."""
        self._checked().synchronize()

    def get_memory_info(self):
        """(free, total) bytes."""
        return tuple(self._checked().get_memory_info())

    def supports_feature(self, feature):
        """"async", "streams", "shared_memory"."""
        return self._checked().supports_feature(feature)

    def _method(self):
        return "auto" if self.device_id is None or self.device_id < 0 else "cuda"

    def compile_kernel(self, formulas, mode="activation", constants=None, dtype="float32", layout="nodes_major",
                       reduction="mean"):
        """hsnn's kernels for this device: a layer (a list of formulas or (formula, constants) pairs, one a
        node) or, with mode="loss", a loss (one formula, its constants)."""
        self.check_available()
        import hsnn
        with flags(use_kernel_cache=self._caching and _core.runtime_flags()["use_kernel_cache"]):
            if mode == "loss":
                return hsnn.Loss(formulas, constants, reduction=reduction, dtype=dtype, method=self._method())
            if mode != "activation":
                raise ValueError(f"mode must be 'activation' or 'loss', got {mode!r}")
            return hsnn.ActivationLayer(formulas, dtype=dtype, layout=layout, method=self._method(),
                                        gpu_id=max(self.device_id, 0))

    def launch_kernel(self, kernel, *arrays, kind="forward"):
        """Runs `kind` of a compiled kernel (a layer's forward, backward or fused; a loss's forward,
        forward_elements, gradient or fused) on this backend's arrays; returns a LaunchResult, never raises
        for a failed launch. Results are new arrays of this backend (a loss's reduced value is a float)."""
        start = time.perf_counter()
        try:
            self.check_available()
            run = getattr(kernel, kind, None)
            if run is None:
                raise ValueError(f"{type(kernel).__name__} has no kernel {kind!r}")
            on_device = self.device_id is not None and self.device_id >= 0
            args = [a if on_device or not hasattr(a, "__array_interface__") else np.asarray(a) for a in arrays]
            result = run(*args)
            if on_device:
                self.synchronize()
            else:
                result = tuple(self.to_device(r) for r in result) if isinstance(result, tuple) and kind == "fused" \
                    and not np.isscalar(result[0]) else result
                result = self.to_device(result) if isinstance(result, np.ndarray) else result
            return LaunchResult(True, (time.perf_counter() - start) * 1e3, None, result)
        except Exception as e:  # noqa: BLE001 (the record says what failed)
            return LaunchResult(False, (time.perf_counter() - start) * 1e3, e, None)


class CPUBackend(Backend):
    """Host memory; always available."""

    def __init__(self):
        super().__init__("cpu")


class CUDABackend(Backend):
    """GPU `device_id` through the CUDA driver. `enable_caching`: compile_kernel keeps its kernels in the disk
    cache. Made whether or not the GPU exists: is_available / check_available() say."""

    def __init__(self, device_id=0, enable_caching=True):
        if not isinstance(device_id, int) or device_id < 0:
            raise ValueError(f"device_id must be a device number, got {device_id!r}")
        super().__init__(f"cuda:{device_id}")
        self._device = device_id
        self._caching = bool(enable_caching)

    @property
    def device_id(self):
        return self._device


def get_backend(spec="auto"):
    """"auto" (a GPU if one can run, else the CPU), "cpu", "cuda" (device 0) or "cuda:N"; an absent one raises
    BackendNotAvailableError saying why."""
    if spec == "cpu" or (spec == "auto" and not _core.runtime_info()["gpu_enabled"]):
        return CPUBackend()
    if spec == "auto" or spec == "cuda" or (isinstance(spec, str) and spec.startswith("cuda:")):
        number = spec[5:] if spec.startswith("cuda:") else "0"
        if not number.isdigit():
            raise ValueError(f"bad backend {spec!r}: expected cuda:N with N a device number")
        backend = CUDABackend(int(number))
        backend.check_available()
        return backend
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


cpu = types.ModuleType(__name__ + ".cpu", "The host CPU: get_cpu_capability().")
cpu.get_cpu_capability = _get_cpu_capability


def _cuda_is_available():
    """Whether hsnn's kernels can run on a GPU here."""
    return bool(_core.runtime_info()["gpu_enabled"])


def _cuda_is_built():
    """Whether this hsnn was built with its GPU engine (it still needs a driver and a GPU to run)."""
    return "built without" not in _core.runtime_info()["gpu_unavailable_reason"]


def _cuda_device_count():
    return int(_core.runtime_info()["num_gpus"])


cuda = types.ModuleType(__name__ + ".cuda", "NVIDIA GPUs: is_available(), is_built(), device_count().")
cuda.is_available, cuda.is_built, cuda.device_count = _cuda_is_available, _cuda_is_built, _cuda_device_count
sys.modules[cpu.__name__], sys.modules[cuda.__name__] = cpu, cuda


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
