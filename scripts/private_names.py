"""List every place nbmp/ uses a private (underscore) name of the standard library or cloudpickle.

A use is one of, found in each module's syntax tree:

* an import of a private module (``import _thread``) or of a private name from a standard or
  cloudpickle module (``from multiprocessing.pool import _helper_reraises_exception``);
* ``module._name`` or ``getattr(module, "_name")``, where ``module`` (or a class in it) was imported
  from the standard library or cloudpickle;
* in a class derived from a standard class: a method overriding one of its private methods,
  and ``self._name``, ``cls._name`` or ``super()._name`` for a private name its standard bases define;
* ``thing._name`` anywhere else, for a private name that a class of the standard modules nbmp imports
  sets and that nbmp itself never defines (``pool._cache``, ``queue._rlock``).

Usage: ``python scripts/private_names.py`` prints one ``path:line  name`` per use and the totals;
``--count`` prints the number of uses alone. The table of why each remains is in docs/design.md.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import sys
import textwrap
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent / "nbmp"
EXTERNAL = set(sys.stdlib_module_names) | {"cloudpickle"}


# Documented names that only look private: the standard library's reference describes each.
DOCUMENTED = {"_exit", "_getframe", "_is_gil_enabled", "_make", "_asdict", "_replace", "_fields", "_SimpleCData"}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in DOCUMENTED


def external(qualname: str) -> bool:
    return qualname.split(".")[0] in EXTERNAL


def aliases(tree: ast.Module, package: str = "") -> Dict[str, str]:
    """Each name a module of ``package`` binds by an import -> what it names (``mp_util`` ->
    ``multiprocessing.util``, ``_connection`` -> ``nbmp._backend.connection``)."""
    bound: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            for a in node.names:
                bound[a.asname or a.name] = f"{module}.{a.name}"
    return bound


def package_of(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts if parts[-1] == "__init__" else parts[:-1]).removesuffix(".__init__")


def dotted(node: ast.expr, bound: Dict[str, str]) -> Optional[str]:
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Subscript):  # queues.SimpleQueue[Any]
        return dotted(node.value, bound)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def resolve(qualname: str) -> object:
    parts = qualname.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(qualname)


def defined_privates(source: str) -> Set[str]:
    """The private names a module's classes define: methods, class attributes, ``self._x = ...``."""
    names: Set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and private(item.name):
                    names.add(item.name)
                for target in _targets(item):
                    if isinstance(target, ast.Name) and private(target.id):
                        names.add(target.id)
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id in ("self", "cls") and private(target.attr):
                names.add(target.attr)
    return names


def own_privates(path: pathlib.Path) -> Set[str]:
    """The private names that nbmp's own classes (those not derived from a standard one) define."""
    tree = ast.parse(path.read_text())
    bound = aliases(tree, package_of(path))
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and not base_privates(node, bound, tree):
            names |= defined_privates(ast.unparse(node))
    return names


def _targets(node: ast.AST) -> List[ast.expr]:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def base_privates(classdef: ast.ClassDef, bound: Dict[str, str], tree: ast.Module) -> Set[str]:
    """The private names the standard (or cloudpickle) classes among ``classdef``'s bases define,
    or, for a mixin, those of the standard classes it is mixed with in the same module."""
    names: Set[str] = set()
    mixed = [b for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
             and any(isinstance(b, ast.Name) and b.id == classdef.name for b in c.bases) for b in c.bases]
    for base in [*classdef.bases, *mixed]:
        qualname = dotted(base, bound)
        if qualname is None or qualname.split(".")[0] in ("typing", "abc"):
            continue  # Generic[T], ABC: no private state of theirs is relied on
        try:
            klass = resolve(qualname)
        except (ImportError, AttributeError):  # a class defined later in the same module
            continue
        for klass in inspect.getmro(klass) if isinstance(klass, type) else ():  # typing.NamedTuple is a function
            if external(klass.__module__):
                names |= {n for n in vars(klass) if private(n)}
                try:
                    names |= defined_privates(textwrap.dedent(inspect.getsource(klass)))
                except (OSError, TypeError):  # a class written in C: its dict above is all
                    pass
    return names


def uses(path: pathlib.Path, stdlib_privates: Set[str], own: Set[str]) -> Iterator[Tuple[int, str]]:
    tree = ast.parse(path.read_text())
    bound = aliases(tree, package_of(path))
    yield from _imports(tree)
    seen: Set[int] = set()  # attribute nodes already told (inside a class derived from a standard one)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            inherited = base_privates(node, bound, tree)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in inherited:
                    yield item.lineno, f"{node.name}.{item.name} (override)"
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and sub.attr in inherited and _self_or_super(sub.value):
                    seen.add(id(sub))
                    yield sub.lineno, f"{node.name}.{sub.attr}"
    for node in ast.walk(tree):
        name, value = _private_attribute(node)
        if name is None or id(node) in seen or value is None:
            continue
        qualname = dotted(value, bound)
        if qualname is not None and external(qualname):
            yield node.lineno, f"{qualname}.{name}"
        elif qualname is None and name in stdlib_privates and name not in own:
            yield node.lineno, f"<object>.{name}"


def _imports(tree: ast.Module) -> Iterator[Tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if external(a.name) and any(private(p) for p in a.name.split(".")):
                    yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and external(node.module):
            private_module = any(private(p) for p in node.module.split("."))
            for a in node.names:
                if private_module or private(a.name):
                    yield node.lineno, f"{node.module}.{a.name}"


def _self_or_super(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private_attribute(node: ast.AST) -> Tuple[Optional[str], Optional[ast.expr]]:
    """(name, owner) for ``owner._name`` and ``getattr/setattr/hasattr(owner, "_name")``."""
    if isinstance(node, ast.Attribute) and private(node.attr):
        return node.attr, node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2 \
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
            and private(node.args[1].value):
        return node.args[1].value, node.args[0]
    return None, None


def stdlib_private_names(paths: List[pathlib.Path]) -> Set[str]:
    """The private names the classes of every standard module nbmp imports define."""
    modules: Set[str] = set()
    for path in paths:
        for qualname in aliases(ast.parse(path.read_text())).values():
            if external(qualname) and not qualname.startswith("cloudpickle"):
                try:
                    obj = resolve(qualname)
                except (ImportError, AttributeError):
                    continue
                module = inspect.getmodule(obj)
                if module is not None:
                    modules.add(module.__name__)
    names: Set[str] = set()
    for name in modules:
        try:
            names |= defined_privates(inspect.getsource(sys.modules[name]))
        except (OSError, TypeError):  # a module written in C
            pass
    return names


def main() -> int:
    sys.path.insert(0, str(ROOT.parent))  # the nbmp being read, whatever is installed
    paths = sorted(ROOT.rglob("*.py"))
    own: Set[str] = set()
    for path in paths:
        own |= own_privates(path)
    stdlib_privates = stdlib_private_names(paths)
    found = sorted({(str(path.relative_to(ROOT.parent)), line, name)
                    for path in paths for line, name in uses(path, stdlib_privates, own)})
    if "--count" in sys.argv:
        print(len(found))
        return 0
    for where, line, name in found:
        print(f"{where}:{line}  {name}")
    print(f"{len(found)} uses of {len({name for _, _, name in found})} private names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
