"""nbmp's layers: imports go one way (down), and no nbmp modules import each other in a circle.

Every import counts: at the top of a module, inside a function (a lazy import is still
a dependency) and under ``TYPE_CHECKING``. The order is declared here, once;
docs/design.md draws it.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, Iterator, List, Optional, Set, Tuple

import nbmp

# Bottom first. A module may import modules of its own package and of lower layers.
# Packages named in one row are peers: neither imports the other.
LAYERS: List[Tuple[str, ...]] = [
    ("nbmp._base",),                          # events, exceptions: the records every layer shares
    ("nbmp._forking",),                       # fork-handler registry, ForkLocks, settings, handlers/
    ("nbmp._backend",),                       # the stdlib mirror: contexts, process, popen_fork, pickling ...
    ("nbmp._sharing",),                       # arrays and tensors in shared memory
    ("nbmp.widgets",),                        # the dashboard: state -> text / ipywidgets
    ("nbmp._spawn", "nbmp._pool"),            # the two ways to run work
    ("nbmp._cluster",),                       # spawn and Pool on Dask: a rank there is a one-process spawn
    ("nbmp._notebook", "nbmp.joblib"),        # %load_ext nbmp, %%nbmp; the joblib backend
    # the public mirrors of the standard submodules
    ("nbmp.managers", "nbmp.shared_memory", "nbmp.connection", "nbmp.context", "nbmp.dummy", "nbmp.heap",
     "nbmp.pool", "nbmp.process", "nbmp.queues", "nbmp.reduction", "nbmp.sharedctypes", "nbmp.synchronize",
     "nbmp.util", "nbmp.forkserver", "nbmp.popen_fork", "nbmp.popen_forkserver", "nbmp.popen_spawn_posix",
     "nbmp.popen_spawn_win32", "nbmp.resource_sharer", "nbmp.resource_tracker"),
    ("nbmp",),                                # the public names (nbmp/__init__.py)
]

# Imports that break the rules on purpose: {(importer, imported): why}. Keep it empty.
ALLOWED: Dict[Tuple[str, str], str] = {}

ROOT = pathlib.Path(nbmp.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = ("nbmp",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Dict[str, pathlib.Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str) -> Iterator[Tuple[str, int]]:
    """(imported nbmp module, line) for every import in ``module``, wherever it sits."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target not in MODULES:
                continue
            for alias in node.names:  # ``from pkg import submodule`` depends on the submodule
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


def layer_of(module: str) -> Tuple[int, str]:
    """(row in LAYERS, package) of a module: the longest package in LAYERS that holds it."""
    best: Optional[Tuple[int, str]] = None
    for row, packages in enumerate(LAYERS):
        for package in packages:
            holds = module == package or (package != "nbmp" and module.startswith(package + "."))
            if holds and (best is None or len(package) > len(best[1])):
                best = (row, package)
    assert best is not None, f"{module} is in no layer: add its package to LAYERS in {__file__}"
    return best


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_point_down():
    wrong = []
    for module in MODULES:
        row, package = layer_of(module)
        for imported, line in imports(module):
            their_row, their_package = layer_of(imported)
            if their_package == package or (module, imported) in ALLOWED:
                continue
            if their_row > row:
                wrong.append(f"{MODULES[module]}:{line}: {module} ({package}) imports {imported}, "
                             f"a higher layer ({their_package})")
            elif their_row == row:
                wrong.append(f"{MODULES[module]}:{line}: {module} ({package}) imports {imported}, "
                             f"a peer ({their_package})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def _graph() -> Dict[str, Set[str]]:
    return {module: {imported for imported, _ in imports(module)
                     if imported != module and (module, imported) not in ALLOWED}
            for module in MODULES}


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph = _graph()
    cycles = _cycles(graph)
    described = [" <-> ".join(c) + "\n    " + "\n    ".join(f"{a} imports {b}" for a in c for b in sorted(graph[a])
                                                           if b in c)
                 for c in cycles]
    assert not cycles, "nbmp modules that import each other in a circle:\n" + "\n".join(described)


def test_the_checker_sees_lazy_and_relative_imports():
    assert "nbmp._notebook.magics" in dict(imports("nbmp._notebook.extension"))  # lazy, inside load_ipython_extension
    found = dict(imports("nbmp"))
    assert "nbmp._backend" in found           # relative, at the top
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_small_helpers_have_one_home():
    """Sizes and signal names live in nbmp._base.util only, argument checks in nbmp._base.checks."""
    import re
    patterns = {"a signal name": r"signal\.Signals\(", "a byte size": r'"KiB"|2\s*\*\*\s*20',
                "an int check": r"operator\.index\(|isinstance\([^)]*, int\)[^\n]*< ?[01]\b"}
    def code(module):  # docstring examples (>>> lines) show user code, not a helper
        return "\n".join(line for line in MODULES[module].read_text().splitlines() if ">>>" not in line)

    homes = {"a signal name": "nbmp._base.util", "a byte size": "nbmp._base.util", "an int check": "nbmp._base.checks"}
    found = [f"{MODULES[m]}: {what}" for m in MODULES
             for what, pattern in patterns.items() if m != homes[what] and re.search(pattern, code(m))]
    assert found == []
