#!/usr/bin/env python3
"""Fails when the documentation and the code drift apart (ctest docs_drift):

- every HSNN_* environment variable the code reads (the C++ code's table, include/hsnn/Environment.def, through
  which every C++ read goes; the package's and its setup scripts' os.environ reads) is a row of the one table in
  docs/guide/configuration.md, and every row is read by the code;
- every option that `hsnn-jit COMMAND --help` shows is in docs/guide/cli.md, and every option cli.md names is
  one of them;
- every backticked API name in the guides, README and MIGRATING that is qualified as hsnn's (`hsnn.name...` in
  Python, `hsnn::Name...` or `Class::member` of a public class in C++) exists: imported and looked up in the
  package, found as an identifier in the public headers.

    check_drift.py --hsnn-jit build/bin/hsnn-jit   (PYTHONPATH: the built package)
"""
import argparse
import importlib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDES = [os.path.join(ROOT, "docs", "guide", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs", "guide")))
          if f.endswith(".md")] + [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "docs", "MIGRATING.md")]
CONFIGURATION = os.path.join(ROOT, "docs", "guide", "configuration.md")
CLI = os.path.join(ROOT, "docs", "guide", "cli.md")
COMMANDS = ["parse", "diff", "eval", "bench", "cache", "info", "compile"]


def _files(dirs, suffixes):
    for d in dirs:
        path = os.path.join(ROOT, d)
        if os.path.isfile(path):
            yield path
            continue
        for dirpath, _, names in os.walk(path):
            yield from (os.path.join(dirpath, n) for n in sorted(names) if n.endswith(suffixes))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _rel(path):
    return os.path.relpath(path, ROOT)


ENVIRONMENT_DEF = os.path.join(ROOT, "include", "hsnn", "Environment.def")


def environment_variables(problems):
    """HSNN_* names the code reads: the C++ code's table (include/hsnn/Environment.def, which every C++ read goes
    through: a getenv of an HSNN_ name elsewhere is a problem) and the Python code's os.environ reads."""
    found = {name: _rel(ENVIRONMENT_DEF)
             for name in re.findall(r"^HSNN_ENVIRONMENT\(\w+, \"(HSNN_[A-Z0-9_]+)\"\)", _read(ENVIRONMENT_DEF), re.M)}
    for path in _files(["lib", "tools", "python/src"], (".cpp", ".h")):
        for m in re.finditer(r"getenv\(\s*\"(HSNN_[A-Z0-9_]+)\"", _read(path)):
            problems.append(f"{_rel(path)} reads {m.group(1)} with getenv; read it through hsnn/Environment.h "
                            f"(its name in {_rel(ENVIRONMENT_DEF)})")
    py = r"(?:environ(?:\.get)?[(\[]|ParallelCompile\()\s*[\"'](HSNN_[A-Z0-9_]+)[\"']"
    for path in _files(["python/hsnn", "python/setup.py", "python/sdist/setup.py"], (".py",)):
        for m in re.finditer(py, _read(path)):
            found.setdefault(m.group(1), _rel(path))
    return found


def check_environment(problems, configuration):
    code = environment_variables(problems)
    table = set(re.findall(r"^\| `(HSNN_[A-Z0-9_]+)`", _read(configuration), re.M))
    for name, where in sorted(code.items()):
        if name not in table:
            problems.append(f"{where} reads {name}, which the table in {_rel(configuration)} does not list")
    for name in sorted(table - set(code)):
        problems.append(f"{_rel(configuration)} lists {name}, which no code reads")
    return len(code)


def check_cli(problems, hsnn_jit, cli):
    text = _read(cli)
    shown = set()
    for command in COMMANDS:
        out = subprocess.run([hsnn_jit, command, "--help"], capture_output=True, text=True).stdout
        usage = out.split("\n\n")[0]  # the usage lines: the options a command takes
        for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z][0-9]?)(?![\w-])", usage)):
            shown.add(flag)
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                problems.append(f"hsnn-jit {command} takes {flag}, which {_rel(cli)} does not mention")
    top = subprocess.run([hsnn_jit, "--help"], capture_output=True, text=True).stdout
    shown |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w-])", top))
    for flag in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w-])", text)) - shown):
        problems.append(f"{_rel(cli)} names {flag}, which no hsnn-jit command takes")
    return len(shown)


def _headers():
    text = "".join(_read(p) for p in _files(["include/hsnn"], (".h", ".def")))
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def _python_name(dotted):
    """Whether hsnn.a.b... exists: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError as e:
            if parts[i - 1] == "torch" and "torch" in str(e):
                return None  # hsnn.torch without PyTorch: not checked here
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def check_api_names(problems, guides):
    identifiers = _headers()
    classes = {n for n in identifiers if n[0].isupper()}
    checked = 0
    for path in guides:
        text = re.sub(r"```.*?```", "", _read(path), flags=re.S)  # code blocks are run by the tests instead
        for token in re.findall(r"`([^`\n]+)`", text):
            name = re.split(r"[(\[ =]", token.strip(), maxsplit=1)[0].rstrip(".,:;")
            if re.fullmatch(r"hsnn(\.[A-Za-z_][A-Za-z0-9_]*)+", name):
                checked += 1
                if _python_name(name) is False:
                    problems.append(f"{_rel(path)}: `{token}`: {name} is not in the Python package")
            elif re.fullmatch(r"(hsnn::)?[A-Z][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+|hsnn::[a-z][A-Za-z0-9_]*", name):
                parts = [p for p in name.split("::") if p != "hsnn"]
                if not name.startswith("hsnn::") and parts[0] not in classes:
                    continue  # another library's (llvm::, std::, ...)
                checked += 1
                missing = [p for p in parts if p not in identifiers]
                if missing:
                    problems.append(f"{_rel(path)}: `{token}`: {', '.join(missing)} not in include/hsnn")
    return checked


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hsnn-jit", required=True)
    # Other pages in place of the real ones (the test that shows drift is caught).
    p.add_argument("--configuration", default=CONFIGURATION)
    p.add_argument("--cli", default=CLI)
    p.add_argument("--guides", nargs="+", default=GUIDES)
    a = p.parse_args()
    problems = []
    counts = (check_environment(problems, a.configuration), check_cli(problems, a.hsnn_jit, a.cli),
              check_api_names(problems, a.guides))
    for line in problems:
        print(line)
    print(f"{counts[0]} environment variables, {counts[1]} CLI options, {counts[2]} API names checked: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
