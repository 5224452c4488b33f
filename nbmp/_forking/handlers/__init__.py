"""nbmp's built-in fork handlers, one small class per framework (see ``_base.py``).

Order matters as with ``os.register_at_fork``: ``before`` runs in reverse, so logging's
handlers and nbmp's own threads (first here, after the collector's, which has no
``before``) are quiesced last and resumed first, innermost like the interpreter's own
locks; in the child the collector's freeze comes first, before any handler allocates.
User handlers come after all of these.
"""

from __future__ import annotations

from typing import Callable, List, Optional

from ._base import ForkHandler, ForkSafetyWarning, Worker
from .cuda import Cuda
from .garbage_collector import GarbageCollector
from .jax import Jax
from .logging_locks import Logging
from .nbmp_threads import Locks, NbmpThreads
from .numpy_random import NumpyRandom
from .python_random import PythonRandom
from .std_streams import StdStreams
from .thread_pools import NativePools, ThreadEnvironment
from .torch_state import Torch

__all__ = ["ForkHandler", "ForkSafetyWarning", "Worker", "builtin_handlers"]


def builtin_handlers(locks: Locks, threads_setting: Callable[[], Optional[int]]) -> List[ForkHandler]:
    """nbmp's handlers, in order; the registry hands in the state two of them read (its ForkLocks,
    its thread budget), so that no handler imports the registry."""
    return [GarbageCollector(), StdStreams(), Logging(), NbmpThreads(locks), PythonRandom(), NumpyRandom(), ThreadEnvironment(),
            NativePools(threads_setting), Torch(), Cuda(), Jax()]
