"""nbmp: fork-first multiprocessing for Jupyter notebooks.

``import nbmp as multiprocessing`` works: every name of
``multiprocessing.__all__`` is here with its standard meaning, bound to nbmp's
default context, whose start method is ``"fork"`` wherever the platform has it
and whose objects pickle with cloudpickle (lambdas and cell-defined functions
work as targets, tasks and payloads under every start method).

Example::

    >>> import nbmp
    >>> with nbmp.Pool(2) as pool:
    ...     pool.map(lambda x: x + 1, [1, 2, 3])
    [2, 3, 4]
"""

import multiprocessing as _multiprocessing

from ._backend import ForkReport, PicklingError, default_context as _default_context, doctor
from ._backend.posix import get_thread_name as _get_thread_name, set_thread_name as _set_thread_name  # noqa: F401  (torch.multiprocessing's)
from . import managers as _managers  # noqa: F401  (registers SyncManager: what nbmp.Manager() starts)
from ._base import NbmpError, ProcessException, ProcessExitedException, ProcessRaisedException, ProcessStoppedException
from ._base.checks import get_max_workers, set_max_workers
from ._base.util import falls_back_to as _falls_back_to, fixup_module_metadata as _fixup_module_metadata
from ._forking import ForkSafetyWarning, register_fork_handler, seed, set_worker_threads
from .widgets import Dashboard, set_dashboard
from ._spawn import ENV_VAR_PARALLEL_START, ProcessContext, SpawnContext, spawn, start_processes
from ._pool import ForkShared, ProcessPoolExecutor, RemoteTaskError, SerialExecutor, WorkerLostError, parallel_map
from ._cluster import get_cluster, install as _install_cluster, set_cluster
from ._notebook.extension import load_ipython_extension, unload_ipython_extension  # noqa: F401  (IPython's hooks)
from ._sharing import (SharedMemoryFullError, ShmUsage, empty, get_all_sharing_strategies, get_sharing_pool,
                       get_sharing_strategy, get_sharing_threshold, is_shared, set_sharing_pool, set_sharing_strategy,
                       set_sharing_threshold, share, shm_usage, zeros)

__version__ = "0.1.0"

# The drop-in: the same names as the standard package, from nbmp's default context.
for _name in _multiprocessing.__all__:
    globals()[_name] = getattr(_default_context, _name)
del _name

__all__ = [
    *_multiprocessing.__all__,
    "NbmpError", "PicklingError",
    "spawn", "start_processes", "ProcessContext", "SpawnContext", "ENV_VAR_PARALLEL_START",
    "ProcessException", "ProcessRaisedException", "ProcessExitedException", "ProcessStoppedException",
    "Dashboard", "set_dashboard",
    "register_fork_handler", "seed", "set_worker_threads", "doctor", "ForkReport", "ForkSafetyWarning",
    "WorkerLostError", "RemoteTaskError", "parallel_map", "SerialExecutor", "ForkShared", "ProcessPoolExecutor",
    "get_max_workers", "set_max_workers",
    "zeros", "empty", "share", "is_shared", "shm_usage", "ShmUsage", "SharedMemoryFullError",
    "get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy",
    "get_sharing_threshold", "set_sharing_threshold", "get_sharing_pool", "set_sharing_pool",
    "set_cluster", "get_cluster",
]

_install_cluster()  # cluster= in spawn, Pool and parallel_map (Dask is imported only when one is used)

# Tracebacks and reprs say nbmp.WorkerLostError, not nbmp._pool.errors.WorkerLostError.
_fixup_module_metadata(__name__, globals(), __all__)


# The standard package's submodules, mirrored (bound to nbmp's contexts where the standard
# ones bind their own): imported on first use, so ``import nbmp`` stays cheap.
# ``multiprocessing.spawn`` has no mirror: ``nbmp.spawn`` is torch's function.
_MIRRORS = frozenset({"connection", "context", "dummy", "forkserver", "heap", "managers", "pool", "popen_fork",
                      "popen_forkserver", "popen_spawn_posix", "popen_spawn_win32", "process", "queues", "reduction",
                      "resource_sharer", "resource_tracker", "shared_memory", "sharedctypes", "synchronize", "util"})


# torch.multiprocessing's own names beyond the standard package's (its tensor reducers), for
# code written against it: torch's objects themselves, imported on first use.
_FROM_TORCH = frozenset({"reductions", "init_reductions"})


# Any other name of the standard package (``SUBDEBUG``) reads as there.
_standard_name = _falls_back_to(globals(), "multiprocessing")


def __getattr__(name: str) -> object:
    if name in _MIRRORS:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM_TORCH:
        from ._sharing._torch import torch_multiprocessing_name
        return torch_multiprocessing_name(name)
    return _standard_name(name)
