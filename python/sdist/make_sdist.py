"""Writes hsnn-VERSION.tar.gz: a source distribution of the Python bindings
over this build's prebuilt libraries (CMake target python-sdist, which passes
every path). `pip install` of it needs a C++20 compiler, the target Python's
headers and pybind11; setup.py beside this script is its build script.

The tarball is reproducible: sorted members, fixed times, owners and modes.
"""
import argparse
import gzip
import io
import json
import os
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
EPOCH = 1700000000  # any fixed time: the same inputs give the same bytes


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", required=True)
    p.add_argument("--out", required=True, help="the .tar.gz to write")
    p.add_argument("--source-dir", required=True, help="hsnn's repository")
    p.add_argument("--generated-include", required=True, help="the build's include/ (hsnn/Version.h)")
    p.add_argument("--archives", nargs="+", required=True, help="hsnn's static libraries (-fPIC)")
    p.add_argument("--codegen-module", required=True, help="libhsnn-codegen.so linked with LLVM's archives")
    p.add_argument("--runtimes", nargs="+", required=True, help="shared libraries shipped beside _core (TBB, fmt)")
    p.add_argument("--tbb-include", required=True, help="the directory holding tbb/ and oneapi/ of those runtimes")
    p.add_argument("--strip", default="strip")
    return p.parse_args()


def _dynamic(path, tag):
    """The values of one tag (NEEDED, SONAME) of a shared object's dynamic section."""
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    return sorted(line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines() if f"({tag})" in line)


def _stage(a, root):
    def copy(src, dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy(src, dst)

    def copy_tree(src, dst, suffixes):
        for dirpath, _, files in os.walk(src):
            for f in files:
                if f.endswith(suffixes):
                    copy(os.path.join(dirpath, f), os.path.join(dst, os.path.relpath(os.path.join(dirpath, f), src)))

    copy(os.path.join(HERE, "setup.py"), os.path.join(root, "setup.py"))
    copy(os.path.join(HERE, "pyproject.toml"), os.path.join(root, "pyproject.toml"))
    copy(os.path.join(a.source_dir, "README.md"), os.path.join(root, "README.md"))
    copy_tree(os.path.join(PYTHON_DIR, "hsnn"), os.path.join(root, "hsnn"), (".py", ".pyi", "py.typed"))
    copy_tree(os.path.join(PYTHON_DIR, "src"), os.path.join(root, "src"), (".cpp", ".h"))
    copy_tree(os.path.join(a.source_dir, "include", "hsnn"), os.path.join(root, "include", "hsnn"), (".h", ".def"))
    copy(os.path.join(a.generated_include, "hsnn", "Version.h"), os.path.join(root, "include", "hsnn", "Version.h"))
    prebuilt = os.path.join(root, "prebuilt")
    for sub in ("tbb", "oneapi"):
        copy_tree(os.path.join(a.tbb_include, sub), os.path.join(prebuilt, "include", sub), (".h",))
    archives = []
    for lib in a.archives:
        name = os.path.basename(lib)
        # Debug sections are most of an archive's bytes and no user's need.
        subprocess.run([a.strip, "--strip-debug", "-o", os.path.join(prebuilt, name), lib], check=True)
        archives.append(name)
    module = os.path.basename(a.codegen_module)
    subprocess.run([a.strip, "--strip-unneeded", "-o", os.path.join(prebuilt, module), a.codegen_module], check=True)
    runtimes = []
    for lib in a.runtimes:
        # By soname: what _core's NEEDED entry names and the loader looks for.
        sonames = _dynamic(lib, "SONAME")
        if not sonames:
            raise SystemExit(f"{lib} has no soname")
        soname = sonames[0]
        shutil.copy(os.path.realpath(lib), os.path.join(prebuilt, soname))
        runtimes.append(soname)
    # What the module needs from the machine it lands on: glibc's and these.
    foreign = [n for n in _dynamic(os.path.join(prebuilt, module), "NEEDED")
               if n not in runtimes and not n.startswith(("libc.", "libm.", "libdl.", "libpthread.", "librt.",
                                                          "libgcc_s.", "libstdc++.", "ld-linux", "libz.",
                                                          "libzstd."))]
    if foreign:
        raise SystemExit(f"{module} needs {', '.join(foreign)}, which a machine without LLVM lacks: link it with "
                         "LLVM's archives (target hsnnCodeGenModulePortable)")
    manifest = {"version": a.version, "platform": sysconfig.get_platform(), "archives": archives,
                "runtimes": runtimes, "codegen_module": module}
    with open(os.path.join(prebuilt, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    with open(os.path.join(root, "PKG-INFO"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: hsnn\nVersion: {a.version}\n"
                "Summary: Formulas to fast numeric kernels for heterogeneous symbolic neural networks\n"
                "Requires-Python: >=3.9\nRequires-Dist: numpy\n")


def _write_tar(root, top, out):
    def reset(info):
        info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
        info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
        return info

    members = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        members += [os.path.join(dirpath, f) for f in sorted(files)]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in members:
            tar.add(path, arcname=os.path.join(top, os.path.relpath(path, root)), filter=reset)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    os.replace(tmp, out)


def main():
    a = _parse()
    top = f"hsnn-{a.version}"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, top)
        _stage(a, root)
        _write_tar(root, top, a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
