"""Run a callback once a module has finished importing (a one-shot ``sys.meta_path`` hook).

A worker that imports torch or numpy inside its target gets a fresh generator (torch's
is the same fixed seed in every worker) and fresh thread pools; nbmp's child entry
uses this to apply those frameworks' fork handlers the moment they appear.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["when_imported", "watch"]


class _Watcher(MetaPathFinder):
    def __init__(self) -> None:
        self.pending: Dict[str, List[Callable[[], None]]] = {}

    def find_spec(self, name: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None) -> Any:
        if name not in self.pending:
            return None
        spec = _find_with_others(self, name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        callbacks, run = self.pending.pop(name), spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            for callback in callbacks:
                callback()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # this one loader instance only
        if not self.pending:
            sys.meta_path.remove(self)
        return spec


def _find_with_others(me: MetaPathFinder, name: str, path: Any, target: Any) -> Optional[ModuleSpec]:
    for finder in sys.meta_path:
        if finder is not me and hasattr(finder, "find_spec"):
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                return spec
    return None


_watcher = _Watcher()


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` right after module ``name`` (``"torch"``, ``"numpy.random"``) is first imported (now, if it is)."""
    if name in sys.modules:
        callback()
        return
    _watcher.pending.setdefault(name, []).append(callback)
    if _watcher not in sys.meta_path:
        sys.meta_path.insert(0, _watcher)


def watch(hooks: Dict[str, List[Callable[[], None]]]) -> Dict[str, List[Callable[[], None]]]:
    """Replace every pending callback with ``hooks``, ``{module name: [callback, ...]}`` for
    modules not imported yet (a child starts with its own; the dict is used, not copied).
    Returns the callbacks it replaced."""
    replaced, _watcher.pending = _watcher.pending, hooks
    if hooks and _watcher not in sys.meta_path:
        sys.meta_path.insert(0, _watcher)
    elif not hooks and _watcher in sys.meta_path:
        sys.meta_path.remove(_watcher)
    return replaced
