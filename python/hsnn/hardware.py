"""The seed system's ``Backend.hardware`` names, over hsnn's runtime.

Read-only facts: ``GPU_ENABLED``, ``NUM_GPUS``, ``CPP_JIT_ENABLED``,
``CPP_INSTALLED_COMPILER`` (here: the LLVM JIT), ``DEFAULT_COMPUTE_METHOD``
(``"GPU_CUDA"`` > ``"CPU_JIT"`` > ``"CPU_PYTHON"``). Writable flags, the same
ones C++ reads (``hsnn::runtimeFlags``): ``USE_KERNEL_CACHE``,
``WARNINGS_STRICT_MODE``. ``clear_kernel_cache("ALL" | "CPU" | "GPU")``.
"""
import sys
import types

from . import _core

_SEED_METHOD = {"cuda": "GPU_CUDA", "cpu_jit": "CPU_JIT", "cpu_interp": "CPU_PYTHON"}


def clear_kernel_cache(category="ALL"):
    """Removes compiled kernels from the on-disk cache: "ALL", "CPU" or "GPU"."""
    if not isinstance(category, str) or category.upper() not in ("ALL", "CPU", "GPU"):
        raise ValueError(f"category must be 'ALL', 'CPU' or 'GPU', got {category!r}")
    _core.clear_kernel_cache(category.lower())


class _Hardware(types.ModuleType):
    @property
    def GPU_ENABLED(self):
        return _core.runtime_info()["gpu_enabled"]

    @property
    def NUM_GPUS(self):
        return _core.runtime_info()["num_gpus"]

    @property
    def CPP_JIT_ENABLED(self):
        return _core.runtime_info()["cpu_jit_enabled"]

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
