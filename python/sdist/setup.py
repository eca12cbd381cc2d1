"""Builds hsnn's Python package from this source distribution: the bindings'
sources compiled here against hsnn's prebuilt static libraries (prebuilt/),
with the code generator module (LLVM linked in), the TBB and fmt runtimes
copied beside the extension. What the machine needs: a C++20 compiler, the
target Python's headers and pybind11; no LLVM, TBB or fmt.

    pip install hsnn-VERSION.tar.gz            # where pip reaches PyPI (pybind11 from there)
    pip install --no-build-isolation hsnn-VERSION.tar.gz   # with the system's setuptools and pybind11

hsnn._torch (the C++ autograd path PyTorch modules take) is built too where
the target's PyTorch has its C++ headers (pip's wheels do; Debian's with
libtorch-dev); HSNN_TORCH_EXT=0 leaves it out, HSNN_TORCH_EXT=1 makes its
failure an error. The prebuilt libraries are for x86_64 Linux with glibc.
"""
import glob
import json
import os
import shutil
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = json.load(open(os.path.join(HERE, "prebuilt", "manifest.json")))
PREBUILT = os.path.join(HERE, "prebuilt")
# -g0: Python's own flags ask for -g, which makes PyTorch's headers a third slower to compile.
COMMON_FLAGS = ["-O2", "-g0", "-fvisibility=hidden", "-ffp-contract=off", "-fno-math-errno", "-DNDEBUG"]


def _pybind11_include():
    try:
        import pybind11
        return pybind11.get_include()
    except ImportError:
        pass
    # PyTorch's wheels carry pybind11's headers (a GPU machine with pip's
    # PyTorch and no index to fetch pybind11 from builds with those).
    try:
        import torch
        include = os.path.join(os.path.dirname(torch.__file__), "include")
        if os.path.exists(os.path.join(include, "pybind11", "pybind11.h")):
            print(f"hsnn: pybind11 is not installed; using the headers PyTorch {torch.__version__} carries")
            return include
    except ImportError:
        pass
    sys.exit("hsnn: building the bindings needs pybind11 (pip install pybind11, or Debian's python3-pybind11)")


def _core_extension():
    archives = [os.path.join(PREBUILT, a) for a in MANIFEST["archives"]]
    return Extension(
        "hsnn._core",
        sources=sorted(glob.glob(os.path.join("src", "*.cpp"))),
        include_dirs=["include", "src", os.path.join("prebuilt", "include")],
        define_macros=[("HSNN_PYTHON_VERSION", f'"{MANIFEST["version"]}"')],
        extra_compile_args=["-std=c++20"] + COMMON_FLAGS,
        # The archives as one group: their order is then no one's concern.
        # libmvec is linked even though nothing here names it: the JIT's
        # kernels call its vector functions, found in the process.
        extra_link_args=["-Wl,--start-group"] + archives + ["-Wl,--end-group",
                         "-Wl,--no-as-needed", "-lmvec", "-Wl,--as-needed", "-ldl",
                         f"-L{PREBUILT}"] + [f"-l:{lib}" for lib in MANIFEST["runtimes"]] + ["-Wl,-rpath,$ORIGIN"],
    )


def _torch_extension():
    """hsnn._torch where this Python's PyTorch can be built against, else None."""
    wanted = os.environ.get("HSNN_TORCH_EXT", "auto")
    if wanted == "0":
        return None
    try:
        import torch
    except ImportError:
        if wanted == "1":
            sys.exit("hsnn: HSNN_TORCH_EXT=1 but PyTorch cannot be imported")
        return None
    root = os.path.dirname(torch.__file__)
    # pip's wheels carry their headers; Debian's are in /usr/include (libtorch-dev).
    include = next((d for d in (os.path.join(root, "include"), "/usr/include")
                    if os.path.exists(os.path.join(d, "torch", "extension.h"))), None)
    lib = os.path.join(root, "lib")
    if include is None or not os.path.exists(os.path.join(lib, "libtorch_python.so")):
        if wanted == "1":
            sys.exit(f"hsnn: HSNN_TORCH_EXT=1 but PyTorch {torch.__version__} at {root} has no C++ headers "
                     "(Debian: apt install libtorch-dev)")
        print(f"hsnn: PyTorch {torch.__version__} has no C++ headers: hsnn._torch is not built (hsnn.torch runs its "
              "Python path)")
        return None
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return Extension(
        "hsnn._torch",
        sources=[os.path.join("src", "torch", "HeteroFunction.cpp")],
        include_dirs=["include", "src", include, os.path.join(include, "torch", "csrc", "api", "include")],
        define_macros=[("TORCH_EXTENSION_NAME", "_torch"), ("TORCH_API_INCLUDE_EXTENSION_H", None),
                       ("_GLIBCXX_USE_CXX11_ABI", str(abi))],
        extra_compile_args=["-std=c++17"] + COMMON_FLAGS,
        library_dirs=[lib],
        libraries=["torch", "torch_cpu", "c10", "torch_python"],
        extra_link_args=[f"-Wl,-rpath,{lib}"],
    )


class BuildExt(build_ext):
    """Compiles the extensions' sources in parallel and puts the prebuilt
    runtimes beside hsnn/_core."""

    def build_extensions(self):
        include = _pybind11_include()
        for ext in self.extensions:
            ext.include_dirs.append(include)
        # Debian's and pip's pybind11 both carry setup_helpers' parallel compile.
        try:
            from pybind11.setup_helpers import ParallelCompile
            ParallelCompile("HSNN_BUILD_JOBS", default=0).install()
        except ImportError:
            pass
        self.check_extensions_list(self.extensions)
        core = [e for e in self.extensions if e.name != "hsnn._torch"]
        optional = [e for e in self.extensions if e.name == "hsnn._torch"]
        # _torch's one large file (~25 s) compiles beside _core's five, not
        # after them (with -g0: 53 s in all on two cores, 69 s one after the other).
        with ThreadPoolExecutor(max_workers=1) as pool:
            torch_job = pool.submit(self._build_optional, optional[0]) if optional else None
            for ext in core:
                self.build_extension(ext)
            if torch_job is not None:
                torch_job.result()
        target = os.path.dirname(self.get_ext_fullpath("hsnn._core"))
        os.makedirs(target, exist_ok=True)
        for name in MANIFEST["runtimes"] + [MANIFEST["codegen_module"]]:
            shutil.copy2(os.path.join(PREBUILT, name), target)

    def _build_optional(self, ext):
        try:
            self.build_extension(ext)
        except Exception as e:  # the Python path serves instead; said, not hidden
            if os.environ.get("HSNN_TORCH_EXT") == "1":
                raise
            print(f"hsnn: hsnn._torch failed to build ({e}); hsnn.torch runs its Python path")


if sysconfig.get_platform() != MANIFEST["platform"]:
    sys.exit(f"hsnn: this source distribution carries libraries for {MANIFEST['platform']}, not "
             f"{sysconfig.get_platform()}; build hsnn from its repository (README)")

extensions = [_core_extension()]
torch_ext = _torch_extension()
if torch_ext is not None:
    extensions.append(torch_ext)

setup(
    name="hsnn",
    version=MANIFEST["version"],
    description="Formulas to fast numeric kernels for heterogeneous symbolic neural networks",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=["hsnn"],
    package_data={"hsnn": ["_core.pyi", "py.typed"]},
    ext_modules=extensions,
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
