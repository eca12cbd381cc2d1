"""pip install for hsnn's Python package: the extension is built by this
repository's CMake tree (pybind11 from Debian), so the build tools come from
the system, not from the Python package index:

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation ./python

HSNN_BUILD_DIR names a CMake build directory to reuse (default: ../build when
it exists, as the README's commands make it; else ../build-python).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def version():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    return re.search(r"project\(hsnn VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("HSNN_BUILD_DIR")
        if not build:
            build = os.path.join(ROOT, "build")
            if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
                build = os.path.join(ROOT, "build-python")
        build = os.path.abspath(build)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                                   "-DHSNN_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "hsnn_python_core"])
        built = glob.glob(os.path.join(build, "python", "hsnn", "_core*.so"))
        if not built:
            raise RuntimeError(f"the CMake build in {build} made no hsnn/_core module (is pybind11-dev installed?)")
        target = os.path.dirname(self.get_ext_fullpath(ext.name))
        os.makedirs(target, exist_ok=True)
        shutil.copy(built[0], self.get_ext_fullpath(ext.name))
        # The code generator module (LLVM), which _core loads from beside itself.
        for module in glob.glob(os.path.join(build, "python", "hsnn", "libhsnn-codegen.so")):
            shutil.copy(module, target)


setup(
    name="hsnn",
    version=version(),
    description="Formulas to fast numeric kernels for heterogeneous symbolic neural networks",
    packages=["hsnn"],
    package_data={"hsnn": ["_core.pyi", "py.typed"]},
    ext_modules=[Extension("hsnn._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
