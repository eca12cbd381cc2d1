#!/usr/bin/env python3
"""hsnn's floors: no #include runs from a lower floor of lib/ up to a higher one.

Each directory of lib/ sits on a floor (docs/ARCHITECTURE.md's); a file may
include its own directory, the public headers (include/hsnn) and directories
on floors below its own, by the library's path ("Expr/OpTable.h"). An
include is resolved as the compiler finds it: relative to the including
file first ("../Expr/OpTable.h", "Warn.h"), then from lib/. The public
headers include nothing of lib/. Run with the source tree's root (default:
this file's ../..); prints every edge that breaks a rule and exits 1, or
prints the floors checked and exits 0.
"""
import pathlib
import re
import sys

# Low to high. A new directory of lib/ must be given a floor here.
FLOORS = [
    ["Expr", "Cache", "Backend"],  # formulas, the disk cache, device buffers
    ["Program"],        # tapes and the interpreter
    ["CodeGen"],        # kernel specs, the IR emitter and the code generators' LLVM-free interfaces
    ["Model"],          # a compiled layer's or loss's formulas, units and kernels to request
    ["CodeGenModule"],  # the LLVM module (libhsnn-codegen.so): its table, host JIT, NVPTX, AOT objects; its loader
    ["CPU", "CUDA"],    # the engines that load it
    ["Runtime"],        # the public API's implementation
    ["AOT"],            # ahead-of-time objects, built on the runtime
]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    lib = root / "lib"
    floor = {d: i for i, ds in enumerate(FLOORS) for d in ds}
    problems = []
    dirs = sorted(p.name for p in lib.iterdir() if p.is_dir())
    for d in dirs:
        if d not in floor:
            problems.append(f"lib/{d}: not on any floor (add it to FLOORS in {pathlib.Path(__file__).name})")
    sources = [p for p in lib.rglob("*") if p.suffix in (".h", ".cpp", ".def", ".inc", ".in")]
    for src in sorted(sources):
        own = src.relative_to(lib).parts[0]
        for target in INCLUDE.findall(src.read_text(errors="replace")):
            local = (src.parent / target).resolve()
            if local.is_file() and lib.resolve() in local.parents:
                top = local.relative_to(lib.resolve()).parts[0]
                if target.startswith(".") and top != own:
                    problems.append(f"{src.relative_to(root)}: includes \"{target}\": by the library's path, "
                                    f"\"{local.relative_to(lib.resolve()).as_posix()}\"")
            elif "/" in target:
                top = target.split("/")[0]
            else:
                continue  # generated (CodeGenToken.h) or a system header
            if top == "hsnn" or top == own or top not in floor or own not in floor:
                continue
            if floor[top] >= floor[own]:
                problems.append(f"{src.relative_to(root)}: includes \"{target}\": lib/{top} (floor {floor[top]}) is "
                                f"not below lib/{own} (floor {floor[own]})")
    for header in sorted((root / "include" / "hsnn").glob("*")):
        for target in INCLUDE.findall(header.read_text(errors="replace")):
            if target.split("/")[0] in floor:
                problems.append(f"{header.relative_to(root)}: a public header includes \"{target}\" from lib/")
    if problems:
        print("\n".join(problems))
        return 1
    print("include floors hold: " + " < ".join("/".join(ds) for ds in FLOORS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
