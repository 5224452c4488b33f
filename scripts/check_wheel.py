"""``make wheel-check``: what a user installs is the wheel, not the checkout.

Builds the sdist and the wheel (``python -m build``), checks that both hold every module
of the source tree, then for each Python given installs the wheel -- not editable, with
the ``notebook`` extra -- into a fresh virtualenv and, from a directory outside the
checkout, runs ``scripts/smoke.py`` and executes the quickstart notebook in a real kernel.

Usage: python scripts/check_wheel.py PYTHON [PYTHON ...]
PYTHON is a path, a command, or a version such as 3.12 (found as ``python3.12`` on PATH
or under pyenv's versions); a Python that cannot be found is an error, not a skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from typing import List, Set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = os.path.join(ROOT, "build", "dist")
VENVS = os.path.join(ROOT, "build", "wheel-venvs")
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")
# What the notebook run needs besides the wheel: a real kernel client.
RUNNER_DEPS = ["nbclient>=0.7", "nbformat>=5"]


def run(*cmd: str, cwd: str = ROOT) -> None:
    print("+", " ".join(arg if len(arg) < 100 else arg.strip().splitlines()[0] + " ..." for arg in cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def source_files() -> Set[str]:
    """Every file of the package in the tree, as wheel paths (nbmp/..., py.typed included)."""
    found = set()
    for folder, dirs, files in os.walk(os.path.join(ROOT, "nbmp")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith((".py", ".typed")):
                found.add(os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/"))
    return found


def build() -> str:
    shutil.rmtree(DIST, ignore_errors=True)
    run(sys.executable, "-m", "build", "--quiet", "--outdir", DIST, ROOT)
    wheel, = glob.glob(os.path.join(DIST, "*.whl"))
    sdist, = glob.glob(os.path.join(DIST, "*.tar.gz"))
    tree = source_files()
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for what, have in (("wheel", in_wheel), ("sdist", in_sdist)):
        missing = sorted(tree - have)
        if missing:
            raise SystemExit(f"the {what} lacks {len(missing)} file(s) of the source tree: {missing}\n"
                             f"(packages are found by [tool.setuptools.packages.find] in pyproject.toml)")
    for extra in ("LICENSE", "README.md", "CHANGELOG.md"):
        if extra not in in_sdist:
            raise SystemExit(f"the sdist lacks {extra}")
    print(f"wheel and sdist hold all {len(tree)} files of nbmp/", flush=True)
    return wheel


def interpreter(spec: str) -> str:
    """The interpreter for ``spec``: a path or command as given, or a version's python."""
    if not spec[0].isdigit():
        return spec
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which(f"python{spec}")] + sorted(glob.glob(f"{pyenv}/versions/{spec}.*/bin/python{spec}"))
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:  # pyenv shims may not run
            return candidate
    raise SystemExit(f"Python {spec} not found (neither python{spec} on PATH nor under {pyenv}/versions): "
                     f"install it, or pass the interpreter's path")


def check(spec: str, wheel: str) -> None:
    started = time.monotonic()
    python = interpreter(spec)
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    venv = os.path.join(VENVS, version)
    shutil.rmtree(venv, ignore_errors=True)
    run(python, "-m", "venv", venv)
    py = os.path.join(venv, "bin", "python")
    pip = [py, "-m", "pip", "-q", "--disable-pip-version-check", "install"]
    run(*pip, f"nbmp[notebook] @ file://{wheel}", *RUNNER_DEPS)
    run(py, "-m", "ipykernel", "install", "--prefix", venv, "--name", "python3")
    with tempfile.TemporaryDirectory(prefix="nbmp-wheel-") as away:  # no checkout on sys.path
        run(py, os.path.join(ROOT, "scripts", "smoke.py"), cwd=away)
        shutil.copy(NOTEBOOK, away)
        run(py, "-c", _EXECUTE, os.path.join(away, os.path.basename(NOTEBOOK)), cwd=away)
    print(f"Python {version}: wheel installed, smoke script and quickstart notebook ok "
          f"({time.monotonic() - started:.0f} s)", flush=True)


# Runs inside the fresh virtualenv: execute the notebook in its kernel, fail on an error
# output, and make sure the kernel imported the installed nbmp.
_EXECUTE = r"""
import os, sys, sysconfig
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import nbmp, os; print('NBMP_FROM', os.path.realpath(nbmp.__file__))"))
NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": os.getcwd()}}).execute()
errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
if errors:
    sys.exit(f"{path}: error output: {errors[0].ename}: {errors[0].evalue}")
where = "".join(o.get("text", "") for o in nb.cells[-1].outputs).split("NBMP_FROM ")[1].strip()
site = os.path.realpath(sysconfig.get_paths()["purelib"])
if not where.startswith(site):
    sys.exit(f"the kernel imported nbmp from {where}, not from the installed wheel in {site}")
print(f"quickstart executed: {len(nb.cells)} cells, nbmp from {where}")
"""


def main(pythons: List[str]) -> int:
    if not pythons:
        raise SystemExit(__doc__)
    pythons = [interpreter(spec) for spec in pythons]  # all found before anything is built
    wheel = build()
    for python in pythons:
        check(python, wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
