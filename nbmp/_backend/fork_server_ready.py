"""Imported last by the fork server, after the modules it preloads: the server readies itself
to fork workers (``nbmp._forking.prepare_fork_server``), once, before it forks anyone.

What the handlers would redo in every worker is done here once (``ForkHandler.in_fork_server``:
the preloaded objects frozen). Only ``forkserver.preload_frameworks`` names this module:
imported anywhere else, it would freeze that process's objects.
"""

from __future__ import annotations

from .. import _forking
from .forkserver import load_lazy_imports

load_lazy_imports()  # first: what it imports is frozen with the rest
_forking.prepare_fork_server()
