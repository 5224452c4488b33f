"""The fork server's preload: nbmp and the frameworks the parent has imported, loaded once
in the server rather than in every worker.

The standard server preloads only ``__main__`` (on 3.10-3.13, in practice nothing), so each worker
would import torch and the rest itself, per run. Before the server starts nbmp adds ``nbmp`` (with
its loaded ``_spawn``/``_pool`` layers), the :data:`FRAMEWORKS` the parent imported and
threadpoolctl, then ``fork_server_ready`` (docs/dropin.md). A preload list the user set, or a
server already running, is left as it is: the server is the standard module's, shared with it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from typing import Any, List, Optional, Set, Tuple

from multiprocessing import forkserver

__all__ = ["FRAMEWORKS", "preload_frameworks", "load_lazy_imports"]

FRAMEWORKS: Tuple[str, ...] = ("numpy", "scipy", "torch")
"""Imported in the fork server when the parent has imported them: heavy to import, and safe
in a process that forks (none keeps a thread running across a fork: OpenBLAS, loaded by numpy
and scipy, stops its pool before each fork itself). Not pandas: importing it can start
numexpr's thread pool, and a server forking with threads alive is what 3.12+ warns about."""

# The process's one server (stdlib private; typeshed leaves its attributes out), and the
# preload list the standard module made for it: any other list was set by a user.
# Noted when nbmp is imported, before a user can set a list.
_SERVER: Any = getattr(forkserver, "_forkserver", None)
_STANDARD_PRELOAD: Optional[List[str]] = getattr(_SERVER, "_preload_modules", None)


def preload_frameworks() -> None:
    """Before this process first starts a forkserver worker: extend the server's preload list
    with ``nbmp`` and the :data:`FRAMEWORKS` imported here, unless a user set the list."""
    if _STANDARD_PRELOAD is None or _SERVER._forkserver_pid is not None or _SERVER._preload_modules is not _STANDARD_PRELOAD:
        return
    # A framework imported lazily (PEP 810, 3.15: ``lazy import torch``) is not in sys.modules until
    # first used: the workers will use it all the same, so the server loads it for them.
    imported = sys.modules.keys() | getattr(sys, "lazy_modules", set())
    frameworks = [name for name in FRAMEWORKS if name in imported]
    # With a BLAS or OpenMP pool loaded, every worker's fork safety caps it through threadpoolctl:
    # imported once in the server, not in each worker.
    helpers = ["threadpoolctl"] if frameworks and ("threadpoolctl" in sys.modules
                                                    or importlib.util.find_spec("threadpoolctl") is not None) else []
    # nbmp's layers whose workers the server forks (``import nbmp`` loads them on first use): those loaded here, as the frameworks.
    top = __package__.rpartition(".")[0]
    layers = [name for name in (top + "._spawn", top + "._pool") if name in sys.modules]
    # Last: the server readies itself for its workers before it forks anyone (fork_server_ready).
    forkserver.set_forkserver_preload([*_STANDARD_PRELOAD, top, *layers, *frameworks, *helpers, __package__ + ".fork_server_ready"])


def load_lazy_imports() -> None:
    """In the fork server, after its preload: import what the preloaded packages left to import
    lazily (PEP 810, 3.15: their ``lazy import`` statements, or all of their imports under
    ``-X lazy_imports=all``), once there, rather than in each worker after its fork."""
    packages = {__package__.partition(".")[0], *FRAMEWORKS, "threadpoolctl"}
    tried: Set[str] = set()
    while True:  # a module imported now may leave lazy imports of its own
        pending = {name for name in getattr(sys, "lazy_modules", ()) if name.partition(".")[0] in packages} - tried
        if not pending:
            return
        tried |= pending
        for name in sorted(pending):
            with contextlib.suppress(Exception):  # not a module (``lazy from m import name``), or one that cannot load here: the worker meets it as before
                importlib.import_module(name)
