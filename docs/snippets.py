#!/usr/bin/env python3
"""Runs the code in hsnn's documentation, so the pages cannot drift from the code.

    snippets.py extract OUTDIR PAGE...   write each ```cpp block as OUTDIR/<id>.cpp and list them
                                         in OUTDIR/snippets.cmake (CMake compiles them; programs run)
    snippets.py run --bin DIR PAGE...    run every ```python, ```pycon and ```console block
    snippets.py readme README            the README's size limit and its links into the tree

What each fenced block means:
  ```cpp      a program (it has `int main(`): compiled, linked with libhsnn and run by ctest; or a fragment:
              statements compiled inside a function after every public header (#include lines hoisted)
  ```python   run as a script; it must exit 0
  ```pycon    doctest: `>>>` lines run, their output compared (ELLIPSIS, NORMALIZE_WHITESPACE);
              one namespace per page
  ```console  `$ COMMAND` lines (continued by `> ` lines) run with bash, hsnn-jit on PATH, in one scratch
              directory per page; the lines up to the next `$` are the expected output (stdout and
              stderr together; `...` matches anything)
  other       (text, json, cmake, a MyST directive) shown, not run
A block right after a line `<!-- not run: REASON -->` is shown, not run; the reason is required.
"""
import doctest
import os
import pathlib
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(`{3,})(.*)$")
SKIP = re.compile(r"^<!-- not run: (.+) -->$")
PUBLIC_HEADERS = ["AOT.h", "Backend.h", "Cache.h", "Error.h", "Expr.h", "Formula.h", "Layer.h", "Population.h", "Runtime.h"]
README_LIMIT = 15 * 1024


class Block:
    def __init__(self, page, line, lang, text, skipped):
        self.page, self.line, self.lang, self.text, self.skipped = page, line, lang, text, skipped

    def where(self):
        return f"{self.page}:{self.line}"


def blocks(page):
    """The fenced blocks of a Markdown page, in order."""
    lines = pathlib.Path(page).read_text(encoding="utf-8").split("\n")
    out, i, prev = [], 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                prev = lines[i].strip()
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2).strip(), i + 1
        j = i + 1
        while j < len(lines) and not (lines[j].startswith(fence) and lines[j].strip() == fence):
            j += 1
        if j == len(lines):
            raise SystemExit(f"{page}:{start}: a code block is not closed")
        lang = info.split()[0] if info else ""
        out.append(Block(page, start, lang, "\n".join(lines[i + 1:j]) + "\n", bool(SKIP.match(prev))))
        prev, i = "", j + 1
    return out


def block_id(block, n):
    stem = pathlib.Path(block.page).stem.lower().replace("-", "_")
    return f"{stem}_{n}"


def write_if_changed(path, text):
    """Unchanged files keep their timestamps, so the build does not redo them."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def extract(outdir, pages):
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    programs, fragments = [], []
    for page in pages:
        n = 0
        for b in blocks(page):
            if b.lang != "cpp" or b.skipped:
                continue
            n += 1
            name = block_id(b, n)
            header = f"// {b.where()}: extracted by docs/snippets.py; edit the page, not this file.\n"
            if "int main(" in b.text:
                source = header + f'#line {b.line + 1} "{b.page}"\n' + b.text
                programs.append(name)
            else:
                body = b.text.split("\n")
                includes = [l for l in body if l.startswith("#include")]
                rest = "\n".join(l if not l.startswith("#include") else "" for l in body)
                source = (header + "".join(f"#include <hsnn/{h}>\n" for h in PUBLIC_HEADERS) + "\n".join(includes)
                          + f"\n[[maybe_unused]] static void snippet() {{\n#line {b.line + 1} \"{b.page}\"\n{rest}}}\n")
                fragments.append(name)
            write_if_changed(out / f"{name}.cpp", source)
    write_if_changed(out / "snippets.cmake", f"set(HSNN_DOC_PROGRAMS {' '.join(programs)})\n"
                                             f"set(HSNN_DOC_FRAGMENTS {' '.join(fragments)})\n")
    return 0


def run_console(block, cwd, env):
    """Each `$ ` line runs; its expected output is what follows it, up to the next command."""
    failures, cmds = [], []
    for line in block.text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            cmds.append([line[2:], []])
        elif cmds and not cmds[-1][1] and (line.startswith("> ") or line == ">"):
            cmds[-1][0] += "\n" + line[2:]  # a continuation (a here-document), as a shell's PS2 shows it
        elif cmds:
            cmds[-1][1].append(line)
        elif line.strip():
            failures.append(f"{block.where()}: output before any command: {line!r}")
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS
    for cmd, expected in cmds:
        r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", timeout=300)
        want = "\n".join(expected).rstrip() + "\n" if any(l.strip() for l in expected) else ""
        got = "\n".join(l.rstrip() for l in r.stdout.rstrip().split("\n")) + "\n" if r.stdout.strip() else ""
        if not checker.check_output(want, got, flags):
            failures.append(f"{block.where()}: $ {cmd}\n--- expected\n{want}--- got (exit {r.returncode})\n{got}")
    return failures


def run_pycon(page, bs, cwd):
    """One doctest per block (so a failure names its line), all sharing the page's namespace."""
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    names = {"__name__": "__doc__"}
    old = os.getcwd()
    os.chdir(cwd)
    try:
        for b in bs:
            # get_doctest copies its globals; run with the shared dict so that one block's names reach the next.
            test = parser.get_doctest(b.text, names, page, page, b.line)
            test.globs = names
            runner.run(test, clear_globs=False)
    finally:
        os.chdir(old)
    failed, attempted = runner.summarize(verbose=False)
    return [f"{page}: {failed} of {attempted} pycon examples failed (above)"] if failed else []


def run(bindir, pages):
    env = dict(os.environ)
    env["PATH"] = f"{os.path.abspath(bindir)}{os.pathsep}{env.get('PATH', '')}"
    # The blocks run in scratch directories: relative entries would point nowhere there.
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    sys.path[:0] = paths  # the pycon blocks run in this process
    failures, counts = [], {"python": 0, "pycon": 0, "console": 0}
    scratch = tempfile.TemporaryDirectory(prefix="hsnn-docs-")  # the kernel cache, unless the caller gave one
    env.setdefault("HSNN_CACHE_DIR", str(pathlib.Path(scratch.name) / "cache"))
    for page in pages:
        bs = [b for b in blocks(page) if not b.skipped]
        with tempfile.TemporaryDirectory(prefix="hsnn-docs-") as cwd:
            for b in bs:
                if b.lang == "python":
                    counts["python"] += 1
                    r = subprocess.run([sys.executable, "-c", b.text], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, errors="replace", timeout=600)
                    if r.returncode != 0:
                        failures.append(f"{b.where()}: the python block exited {r.returncode}:\n{r.stdout}")
                elif b.lang == "console":
                    counts["console"] += 1
                    failures += run_console(b, cwd, env)
            pycon = [b for b in bs if b.lang == "pycon"]
            if pycon:
                counts["pycon"] += len(pycon)
                failures += run_pycon(page, pycon, cwd)
    for f in failures:
        print(f, file=sys.stderr, flush=True)
    print(f"{len(pages)} pages: {counts['python']} python, {counts['pycon']} pycon, {counts['console']} console "
          f"blocks run; {len(failures)} failed")
    return 1 if failures else 0


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(md):
    """GitHub's and MyST's anchors for a page's headings."""
    out = set()
    for line in pathlib.Path(md).read_text(encoding="utf-8").split("\n"):
        m = re.match(r"^#{1,6} (.*)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def readme(path):
    path = pathlib.Path(path)
    failures = []
    size = len(path.read_bytes())
    if size > README_LIMIT:
        failures.append(f"{path}: {size} bytes, more than the {README_LIMIT} a README may have")
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue  # an address outside the tree
        file, _, anchor = target.partition("#")
        dest = (path.parent / file) if file else path
        if not dest.exists():
            failures.append(f"{path}: link to {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            failures.append(f"{path}: link to {target}: {file or path.name} has no heading '{anchor}'")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{path.name}: {size} bytes, {len(LINK.findall(path.read_text(encoding='utf-8')))} links; "
          f"{len(failures)} problems")
    return 1 if failures else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "extract":
        return extract(argv[2], argv[3:])
    if len(argv) >= 4 and argv[1] == "run" and argv[2] == "--bin":
        return run(argv[3], argv[4:])
    if len(argv) == 3 and argv[1] == "readme":
        return readme(argv[2])
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
