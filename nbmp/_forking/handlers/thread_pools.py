"""BLAS/OpenMP thread pools in workers: at most ``worker.threads`` threads each, so
that workers x threads does not oversubscribe the cores.

Pools already loaded are limited through threadpoolctl (when installed); pools loaded
later in the child read the environment variables set here. GNU OpenMP (libgomp, the
runtime of torch's Linux wheels) cannot start a new team in a forked child once the
parent has used one -- its first parallel region hangs forever -- so children forked
from a parent with libgomp loaded get one OpenMP thread whatever the budget.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Optional, Tuple

from ._base import ForkHandler, Worker

_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
_gomp_seen = False
_gomp_at_fork = False  # libgomp was loaded in the parent when it forked (the child inherits this)
_controller: Any = None  # the parent's threadpoolctl view of its pools, made just before the fork
_controller_key = -1     # len(sys.modules) when it was made: new native libraries come with new modules
_pool_stoppers: Dict[str, Callable[[], Any]] = {}  # OpenBLAS (pthreads) path -> its fork handler, found with the controller
# OpenBLAS path -> (its count before the fork, the count its children inherit): lowered in the
# parent across its forks, so that a child has nothing to change (see NativePools.before).
_lowered: Dict[str, Tuple[int, int]] = {}


def _threadpool_controller() -> Any:  # Any: a threadpoolctl.ThreadpoolController (threadpoolctl ships no types)
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # the nbmp[fork-safety] extra is not installed: env variables only
        return None
    return ThreadpoolController()


def gnu_openmp_loaded() -> bool:
    """Whether libgomp is mapped in this process (libraries are never unloaded: cached once seen)."""
    global _gomp_seen
    if not _gomp_seen:
        try:
            with open("/proc/self/maps") as maps:
                _gomp_seen = "libgomp" in maps.read()
        except OSError:
            pass
    return _gomp_seen


def openmp_threads(worker: Worker) -> int:
    """The OpenMP thread count that is safe in this child."""
    return 1 if worker.forked and _gomp_at_fork else worker.threads


class ThreadEnvironment(ForkHandler):
    """Thread-count variables for the pools a worker loads after it starts."""

    def in_child(self, worker: Worker) -> None:
        for name in _ENV_VARS:
            os.environ[name] = str(worker.threads)


class NativePools(ForkHandler):
    """BLAS and OpenMP pools already loaded (through numpy, scipy or torch)."""

    modules = ("numpy", "scipy", "torch")

    def __init__(self, threads_setting: Callable[[], Optional[int]], coming_threads: Callable[[], int]) -> None:
        self.threads_setting = threads_setting  # the registry's explicit thread budget, or None
        self.coming_threads = coming_threads  # the budget of the child about to be forked

    def hazard(self) -> Optional[str]:
        threads = self.threads_setting()
        if threads is not None and threads > 1 and gnu_openmp_loaded():
            return (f"worker threads are set to {threads}, but GNU OpenMP (libgomp) is loaded: a forked "
                    f"worker hangs in its first parallel region with more than one OpenMP thread, so nbmp "
                    f"gives forked workers 1 OpenMP thread. Use start_method='spawn' for multi-threaded workers.")
        return None

    def before(self) -> None:
        global _gomp_at_fork, _controller, _controller_key
        _gomp_at_fork = gnu_openmp_loaded()
        # Scanning the loaded libraries costs milliseconds: done here, and again only after
        # imports, so a loop of forks scans once; a forked child inherits the result.
        if _controller_key != len(sys.modules):
            _controller, _controller_key = _threadpool_controller(), len(sys.modules)
            _find_pool_stoppers(_controller)
        self._lower_openblas(self.coming_threads())

    def after_in_parent(self) -> None:
        for lib in getattr(_controller, "lib_controllers", ()):
            if lib.filepath in _lowered:
                lib.set_num_threads(_lowered.pop(lib.filepath)[0])  # restarts its pool here...
                _pool_stoppers[lib.filepath]()  # ...stopped again: it starts at the next BLAS call, as after any fork

    @staticmethod
    def _lower_openblas(limit: int) -> None:
        # A child that lowers its OpenBLAS's count restarts the pool that OpenBLAS's own fork
        # handler stopped (a thread made and stopped again: ~0.3 ms a worker). Lowered in the
        # parent instead, once for a whole round of forks, the children inherit the count and
        # a stopped pool. Only where the pool can be stopped again after the restore.
        for lib in getattr(_controller, "lib_controllers", ()):
            if lib.filepath in _pool_stoppers and lib.filepath not in _lowered:
                count = lib.num_threads
                if count > limit:
                    lib.set_num_threads(limit)  # going down starts no thread
                    _lowered[lib.filepath] = (count, limit)

    def in_child(self, worker: Worker) -> None:
        controller = _controller if worker.forked and _controller is not None else _threadpool_controller()
        if controller is None:
            return
        lowered = dict(_lowered) if worker.forked else {}
        _lowered.clear()  # the parent's record: this process restores nothing
        for lib in controller.lib_controllers:
            limit = worker.threads if lib.user_api == "blas" else openmp_threads(worker)
            inherited = lowered.get(lib.filepath)
            if (inherited[1] if inherited is not None else lib.num_threads) == limit:
                continue
            lib.set_num_threads(limit)
            stop = _pool_stoppers.get(lib.filepath) if worker.forked else None
            if stop is not None:
                stop()


def _find_pool_stoppers(controller: Any) -> None:
    """In the parent, with its controller: each OpenBLAS's own fork handler, which a forked
    child calls right after capping that OpenBLAS (no symbol lookup in every worker).

    OpenBLAS's fork handler stops its thread pool in the parent before every fork, and
    ``set_num_threads`` restarts the pool at once: in a fresh worker the new threads then
    busy-wait for work for ~0.1 s of CPU each (measured: a 4-worker Pool on 2 cores spent
    more on that than on everything else it did to start). Stopped again with
    ``blas_thread_shutdown_``, the pool starts lazily at the worker's first multi-threaded
    BLAS call, with the limit just set. Builds that hide the symbol (OpenBLAS 0.3.34) have none.
    """
    _pool_stoppers.clear()
    for lib in getattr(controller, "lib_controllers", ()):
        if lib.internal_api == "openblas" and getattr(lib, "threading_layer", None) == "pthreads":
            stop = getattr(lib.dynlib, "blas_thread_shutdown_", None)
            if stop is not None:
                _pool_stoppers[lib.filepath] = stop
