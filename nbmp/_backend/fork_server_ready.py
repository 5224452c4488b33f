"""Imported last by the fork server, after the modules it preloads: the server readies itself
to fork workers (``nbmp._forking.prepare_fork_server``), once, before it forks anyone.

A worker forked from the server inherits what the server has, as a worker nbmp forks inherits
its parent's. So what nbmp's fork handlers would make again in every worker is made here, once:
the garbage collector freezes the preloaded modules' objects (nbmp's, numpy's, torch's:
hundreds of thousands; unfrozen, a worker's first full collection examined each one, and
copied every page holding one). See ``ForkHandler.in_fork_server``.

Only ``nbmp._backend.forkserver.preload_frameworks`` names this module (as the last of the
server's preload list); importing it anywhere else would freeze that process's objects.
"""

from __future__ import annotations

from .. import _forking
from .forkserver import load_lazy_imports

load_lazy_imports()  # first: what it imports is frozen with the rest
_forking.prepare_fork_server()
