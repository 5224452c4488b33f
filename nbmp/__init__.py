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

import sys as _sys

if _sys.platform == "win32":  # its channels, workers and shared memory rest on fcntl, fork and POSIX signals
    raise ImportError("nbmp runs on Linux (and, untested, macOS), not on Windows. On Windows use the standard "
                      "multiprocessing module (define worker functions in a .py module the notebook imports), "
                      "loky/joblib or multiprocess (dill pickling); or run the notebook under WSL.")

import multiprocessing as _multiprocessing  # noqa: E402  (after the platform check)
from typing import TYPE_CHECKING as _TYPE_CHECKING, Any as _Any  # noqa: E402

from ._backend import ForkReport, PicklingError, default_context as _default_context, doctor
from ._backend import register_factory as _register_factory, register_plugin as _register_plugin
from ._backend.interrupts import step as _step
from ._backend.posix import get_thread_name as _get_thread_name, set_thread_name as _set_thread_name  # noqa: F401  (torch.multiprocessing's)
from ._base import (NbmpError, ProcessException, ProcessExitedException, ProcessRaisedException, ProcessStoppedException, RemoteTaskError)
from ._base.checks import get_max_workers, set_max_workers
from ._base.util import falls_back_to as _falls_back_to, fixup_module_metadata as _fixup_module_metadata
from ._forking import ForkSafetyWarning, register_fork_handler, seed, set_worker_threads
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

# Loaded on first use (PEP 562): the layers a notebook calls -- spawn, the Pool, the dashboard,
# the cluster backend, the magics, the managers. Above is what every nbmp process needs (its
# contexts, pickler, fork safety and sharing), so a worker started by spawn or forkserver, which
# imports nbmp to unpickle its task, loads only the layer that task comes from.
if _TYPE_CHECKING:  # what type checkers and the API reference see; at run time, loaded on first use
    from ._cluster import get_cluster, set_cluster
    from ._notebook.extension import load_ipython_extension, unload_ipython_extension
    from ._pool import ForkShared, ProcessPoolExecutor, SerialExecutor, WorkerLostError, parallel_map
    from ._spawn import ENV_VAR_PARALLEL_START, ProcessContext, SpawnContext, spawn, start_processes
    from .widgets import Dashboard, set_dashboard
_LAYERS = {"Dashboard": "widgets", "set_dashboard": "widgets",
           "spawn": "_spawn", "start_processes": "_spawn", "ProcessContext": "_spawn", "SpawnContext": "_spawn",
           "ENV_VAR_PARALLEL_START": "_spawn",
           "WorkerLostError": "_pool", "parallel_map": "_pool", "SerialExecutor": "_pool", "ForkShared": "_pool",
           "ProcessPoolExecutor": "_pool",
           "set_cluster": "_cluster", "get_cluster": "_cluster",
           "load_ipython_extension": "_notebook.extension", "unload_ipython_extension": "_notebook.extension"}


@_step
def _load_layers() -> None:
    """Import every layer of ``_LAYERS`` (and ``managers``) and bind their names here.

    They load inside the user's first call, where an interrupt must stop the call: one that
    landed in importlib's weakref callbacks meanwhile would be printed and dropped by Python,
    so it is held until the layers are in, then raised here."""
    import importlib
    for layer in ("widgets", "_spawn", "_pool", "managers", "_cluster", "_notebook.extension"):
        importlib.import_module(f"{__name__}.{layer}")
    for name, layer in _LAYERS.items():
        globals()[name] = getattr(_sys.modules[f"{__name__}.{layer}"], name)
    _fixup_module_metadata(__name__, globals(), [name for name in _LAYERS if name in __all__])


def _build_pool(*args: object, **kwargs: object) -> object:
    # What contexts build for Pool() until nbmp._pool is imported (which registers its own).
    _load_layers()
    return _sys.modules[f"{__name__}._pool"].Pool(*args, **kwargs)


def _build_sync_manager(*args: object, **kwargs: object) -> object:
    _load_layers()
    return _sys.modules[f"{__name__}.managers"].SyncManager(*args, **kwargs)


class _ClusterOnFirstUse:
    """nbmp._cluster's backend until a call names a cluster: then the package is imported (it
    registers the backend itself) and the call goes to it. No default cluster can be set before
    that (``nbmp.set_cluster`` imports it), so a call that names none runs here."""

    @staticmethod
    def wanted(cluster: object) -> bool:
        return cluster is not None and bool(_cluster_backend().wanted(cluster))

    def __getattr__(self, name: str) -> object:
        return getattr(_cluster_backend(), name)


def _cluster_backend() -> _Any:
    _load_layers()
    from ._backend import plugin
    return plugin("cluster")  # nbmp._cluster's ClusterBackend, registered on its import


# Tracebacks and reprs say nbmp.ProcessExitedException, not nbmp._base.exceptions.ProcessExitedException
# (the lazy layers' names: once loaded).
_fixup_module_metadata(__name__, globals(), [name for name in __all__ if name not in _LAYERS])

# The stand-ins, where the layer has not registered its own (it has once imported).
if f"{__name__}._pool" not in _sys.modules:
    _register_factory("Pool", _build_pool)
if f"{__name__}.managers" not in _sys.modules:
    _register_factory("SyncManager", _build_sync_manager)
if f"{__name__}._cluster" not in _sys.modules:
    _register_plugin("cluster", _ClusterOnFirstUse())

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
    if name in _LAYERS:
        _load_layers()
        return globals()[name]
    if name in _MIRRORS:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM_TORCH:
        from ._sharing._torch import torch_multiprocessing_name
        return torch_multiprocessing_name(name)
    return _standard_name(name)


def __dir__() -> "list[str]":
    return sorted({*globals(), *_LAYERS})
