"""HeteroSymNN's ``Backend.hardware`` names, over hsnn's runtime.

What HeteroSymNN's layers, losses, networks and optimizers read (``from hsnn.hardware import *`` gives them):

- ``GPU_ENABLED``: the GPU can run the seed's GPU path: hsnn's cuda method works *and* CuPy (which the seed's
  layers keep their arrays in) imports and sees a device. ``NUM_GPUS``: the devices hsnn's driver reports.
- ``cp``: the ``cupy`` module where ``GPU_ENABLED``, else ``None``; ``be``: ``cp`` or ``numpy``; ``asnumpy``:
  ``cupy.asnumpy`` or ``numpy.array``.
- ``NUM_CPU_THREADS``: ``os.cpu_count()``. ``CPP_JIT_ENABLED``: hsnn's LLVM JIT can run here;
  ``CPP_INSTALLED_COMPILER``: ``"LLVM ORC JIT"`` then, else ``None`` (hsnn needs no C++ compiler).
- ``_get_cuda_dims(n, device_id)``: ``(grid, block)`` for ``n`` threads, as the seed's kernels launch.

And the 0.2 names, live: ``DEFAULT_COMPUTE_METHOD`` (``"GPU_CUDA"`` > ``"CPU_JIT"`` > ``"CPU_PYTHON"``), the
writable flags ``USE_KERNEL_CACHE`` and ``WARNINGS_STRICT_MODE`` (the ones C++ reads, ``hsnn::runtimeFlags``), and
``clear_kernel_cache("ALL" | "CPU" | "GPU")``.
"""
import os
import sys
import types

import numpy as np

from . import _core

__all__ = ["GPU_ENABLED", "NUM_GPUS", "CPP_JIT_ENABLED", "NUM_CPU_THREADS", "be", "cp", "asnumpy",
           "CPP_INSTALLED_COMPILER"]

_SEED_METHOD = {"cuda": "GPU_CUDA", "cpu_jit": "CPU_JIT", "cpu_interp": "CPU_PYTHON"}
_DEFAULT_BLOCK = 256


def clear_kernel_cache(category="ALL"):
    """Removes compiled kernels from the on-disk cache: "ALL", "CPU" or "GPU"."""
    if not isinstance(category, str) or category.upper() not in ("ALL", "CPU", "GPU"):
        raise ValueError(f"category must be 'ALL', 'CPU' or 'GPU', got {category!r}")
    _core.clear_kernel_cache(category.lower())


_cupy_state = []  # [module or None], once looked for


def _cupy():
    """CuPy, where it imports and sees a device (looked for once: importing it takes a second)."""
    if not _cupy_state:
        module = None
        if _core.runtime_info()["gpu_enabled"]:
            try:
                import cupy
                if cupy.cuda.runtime.getDeviceCount() > 0:
                    module = cupy
            except Exception:  # noqa: BLE001 (any failure to load CuPy means: no CuPy)
                module = None
        _cupy_state.append(module)
    return _cupy_state[0]


def _get_cuda_dims(n, device_id=0):
    """(grid, block) for `n` threads: blocks of the device's most threads (256 without a GPU)."""
    block = _DEFAULT_BLOCK
    cp = _cupy()
    if cp is not None:
        try:
            block = int(cp.cuda.Device(device_id).attributes["MaxThreadsPerBlock"])
        except Exception:  # noqa: BLE001 (the seed's fallback)
            block = _DEFAULT_BLOCK
    return ((int(n) + block - 1) // block,), (block,)


class _Hardware(types.ModuleType):
    @property
    def GPU_ENABLED(self):
        return _cupy() is not None

    @property
    def NUM_GPUS(self):
        return int(_core.runtime_info()["num_gpus"])

    @property
    def NUM_CPU_THREADS(self):
        return os.cpu_count()

    @property
    def cp(self):
        return _cupy()

    @property
    def be(self):
        return _cupy() or np

    @property
    def asnumpy(self):
        cp = _cupy()
        return cp.asnumpy if cp is not None else np.array

    @property
    def CPP_JIT_ENABLED(self):
        return bool(_core.runtime_info()["cpu_jit_enabled"])

    @property
    def CPP_INSTALLED_COMPILER(self):
        return "LLVM ORC JIT" if self.CPP_JIT_ENABLED else None

    @property
    def DEFAULT_COMPUTE_METHOD(self):
        return _SEED_METHOD[_core.runtime_info()["default_method"]]

    @property
    def USE_KERNEL_CACHE(self):
        return _core.runtime_flags()["use_kernel_cache"]

    @USE_KERNEL_CACHE.setter
    def USE_KERNEL_CACHE(self, value):
        _core.update_runtime_flags(use_kernel_cache=bool(value))

    @property
    def WARNINGS_STRICT_MODE(self):
        return _core.runtime_flags()["strict"]

    @WARNINGS_STRICT_MODE.setter
    def WARNINGS_STRICT_MODE(self, value):
        _core.update_runtime_flags(strict=bool(value))


sys.modules[__name__].__class__ = _Hardware
