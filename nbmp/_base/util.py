"""Small helpers every layer uses, in one place.

Like ``multiprocessing.util``: nothing here knows about workers, runs or pools.
"""

from __future__ import annotations

import importlib
import os
import secrets
import signal
import sys
import types
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

ISSUES = "https://github.com/nbmp-dev/nbmp/issues"  # where an error that is nbmp's own bug asks to be reported

__all__ = ["ISSUES", "space", "format_bytes", "signal_name", "display_kind", "fixup_module_metadata", "falls_back_to", "stand_for", "name_of",
           "tree", "join_tree"]


# This process's tree: its root's pid and a secret of 128 random bits, which names the tree's
# shared-memory janitor. A forked child inherits it; nbmp's other children are handed it in
# their Launch (join_tree); a process that is neither is the root of a tree of its own.
_tree = f"{os.getpid()}-{secrets.token_hex(16)}"


def tree() -> str:
    """This process's tree key, ``"<root pid>-<secret>"`` (the secret is never printed)."""
    return _tree


def join_tree(key: str) -> None:
    """Make ``key`` (the tree of the process that started this one) this process's tree."""
    global _tree
    _tree = key


def space(directory: str) -> Tuple[int, int]:
    """(total, free) bytes of the filesystem holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def format_bytes(n: Optional[float]) -> str:
    """A size in binary units: ``12 B``, ``1.5 KiB``, ``3.1 GiB``, up to TiB; ``-`` for None."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def name_of(fn: Any) -> str:
    """How a run names its function: ``train``, ``Model.step``, or the callable's type."""
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__)


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9, ``SIGRTMIN+1`` for a real-time signal, ``signal N`` for a number no
    signal has (``-Process.exitcode`` of a process killed by a signal)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
        return f"SIGRTMIN+{signum - low}" if low <= signum <= high else f"signal {signum}"


def display_kind(stream: Any) -> Optional[str]:
    """Who watches ``stream``: ``"terminal"`` (a tty: a line can be redrawn in place, and
    lines above it with ANSI cursor moves), ``"notebook"`` (a Jupyter kernel's stream: a
    carriage return redraws the last line, nothing more), or None (a file, a pipe, a log).
    """
    try:
        if stream.isatty():
            return "terminal"
    except (AttributeError, OSError, ValueError):  # no isatty, or closed
        pass
    if type(stream).__module__.startswith("ipykernel"):
        return "notebook"
    return None


def fixup_module_metadata(module_name: str, namespace: Dict[str, Any], names: Iterable[str]) -> None:
    """Make each class and function among ``names`` that a private submodule defines report
    ``module_name`` and its exported name, as trio's ``fixup_module_metadata`` does (pickle finds it
    there too). ``__name__`` is left alone (``nbmp.Process`` names processes ``Process-N``), and
    bound methods keep theirs, as the standard module's do."""
    for name in names:
        obj = namespace[name]
        if isinstance(obj, (type, types.FunctionType)) and obj.__module__.startswith(module_name + "."):
            obj.__module__ = module_name
            obj.__qualname__ = name


def falls_back_to(namespace: Dict[str, Any], standard_name: str) -> Callable[[str], Any]:
    """A mirror module's ``__getattr__`` (PEP 562): a name it does not define is read from the standard
    module at each access. That module is imported by name (a program may have put nbmp in the
    package's place) and kept in ``namespace`` as ``_standard``, where nbmp's pickler finds it."""
    standard = namespace["_standard"] = importlib.import_module(standard_name)
    mirror_name = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if not (name.startswith("__") and name.endswith("__")):  # a module's own dunders are its own
            try:
                return getattr(standard, name)
            except AttributeError:
                pass
        raise AttributeError(f"module {mirror_name!r} has no attribute {name!r} (nor has {standard_name!r})")
    return __getattr__


def stand_for(mirror_name: str, standard_name: str) -> None:
    """Make the mirror module ``mirror_name``, being imported, the standard module itself (for a mirror
    where nbmp defines nothing), so what a program patches on it is the standard module's; imported
    by name, as in :func:`falls_back_to`."""
    sys.modules[mirror_name] = importlib.import_module(standard_name)
