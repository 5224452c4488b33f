"""BLAS/OpenMP thread pools in workers: at most ``worker.threads`` threads each, so
that workers x threads does not oversubscribe the cores.

Capped in the child: loaded pools with threadpoolctl (the ``nbmp[fork-safety]`` extra), later ones
by environment variables. A forked child of a parent with libgomp loaded gets one OpenMP thread
whatever the budget: its first parallel region would hang forever. A forked child leaves OpenBLAS's
own (pthreads) pool as it inherited it unless the budget is explicit: OpenBLAS stops that pool at
every fork, and setting its count starts the pool again, each thread busy-waiting for work. A Pool
worker caps it once a task has started it (:func:`cap_started_pools`), which starts nothing.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._base import ForkHandler, Worker

_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
_gomp_seen = False
_gomp_looked_at = -1  # len(sys.modules) when /proc/self/maps last said libgomp was not loaded
_gomp_at_fork = False  # libgomp was loaded in the parent when it forked (the child inherits this)
_scan: Any = None  # the parent's threadpoolctl view of its pools (a forked child inherits it), or None
_scan_key = -1  # len(sys.modules) when it was made: new native libraries come with new modules
_counts: List[Tuple[str, int, str]] = []  # _pool_counts at the parent's last fork
_kept: List[Tuple[Any, int]] = []  # in a forked worker: (stopped OpenBLAS pool left uncapped, its limit)


def gnu_openmp_loaded() -> bool:
    """Whether libgomp is mapped in this process: cached once seen (never unloaded), else /proc/self/maps
    read again only after new imports."""
    global _gomp_seen, _gomp_looked_at
    if not _gomp_seen and _gomp_looked_at != len(sys.modules):
        try:
            with open("/proc/self/maps") as maps:
                _gomp_seen = "libgomp" in maps.read()
        except OSError:
            return False
        _gomp_looked_at = len(sys.modules)
    return _gomp_seen


def openmp_threads(worker: Worker) -> int:
    """The OpenMP thread count that is safe in this child."""
    return 1 if worker.forked and _gomp_at_fork else worker.threads


class ThreadEnvironment(ForkHandler):
    """Thread-count variables for the pools a worker loads after it starts."""

    def in_child(self, worker: Worker) -> None:
        for name in _ENV_VARS:
            setting = os.environ.get(name, "").strip()
            if _to_set(int(setting) if setting.isdigit() else None, worker):
                os.environ[name] = str(worker.threads)


def _to_set(count: Optional[int], worker: Worker, limit: Optional[int] = None) -> bool:
    """Whether a pool's or variable's thread ``count`` must become ``limit`` (the worker's budget):
    when unset, over it, or off an explicit budget; a smaller count the user chose stays."""
    limit = worker.threads if limit is None else limit
    return not count or count > limit or (worker.explicit_threads and count != limit)


class NativePools(ForkHandler):
    """BLAS and OpenMP pools already loaded (through numpy, scipy or torch)."""

    modules = ("numpy", "scipy", "torch")

    def __init__(self, threads_setting: Callable[[], Optional[int]]) -> None:
        self.threads_setting = threads_setting  # the registry's explicit thread budget, or None

    def hazard(self) -> Optional[str]:
        threads = self.threads_setting()
        if threads is not None and threads > 1 and gnu_openmp_loaded():
            return (f"worker threads are set to {threads}, but GNU OpenMP (libgomp) is loaded: a forked "
                    f"worker hangs in its first parallel region with more than one OpenMP thread, so nbmp "
                    f"gives forked workers 1 OpenMP thread. Use start_method='spawn' for multi-threaded workers.")
        return None

    def before(self) -> None:
        """Look, changing nothing: the forked children inherit what was seen (the pools and their
        thread counts), so none imports threadpoolctl or asks the libraries again."""
        global _gomp_at_fork, _scan, _scan_key, _counts
        _gomp_at_fork = gnu_openmp_loaded()  # here: a child may load libgomp before it asks
        if _scan_key != len(sys.modules):
            scan = controller()
            _counts, _scan, _scan_key = _pool_counts(scan), scan, len(sys.modules)  # together, or none: they pair up
        elif _counts:  # only the thread counts change between rounds: each library's getter, not info()
            _counts = [(api, lib.num_threads, kind) for lib, (api, _, kind) in zip(_scan.lib_controllers, _counts)]

    def in_child(self, worker: Worker) -> None:
        global _kept
        pools, counts = (_scan, _counts) if worker.forked and _scan is not None else (controller(), None)
        _kept = []
        if pools is None:  # the nbmp[fork-safety] extra is not installed: the variables only
            return
        limits = {"blas": worker.threads, "openmp": openmp_threads(worker)}
        # A pool a fork stopped (here or in the fork server) is started to be capped only if asked.
        restart = not (worker.forked or worker.from_fork_server) or worker.explicit_threads
        # Each library's own setter, not a limiter that reads every library first. Only pools over their limit (or off an explicit one).
        for library, (api, threads, kind) in zip(pools.lib_controllers,
                                                 _pool_counts(pools) if counts is None else counts):
            if api in limits and _to_set(threads, worker, limits[api]) and kind != "torch":
                if restart or kind != "stopped":
                    library.set_num_threads(limits[api])
                else:
                    _kept.append((library, limits[api]))


def cap_started_pools() -> bool:
    """In a forked worker: cap the OpenBLAS pools ``in_child`` left stopped once something has started
    them (the process runs more threads than Python's), which then starts nothing. True when none is left."""
    global _kept
    if _kept and len(os.listdir("/proc/self/task")) > threading.active_count():
        for library, limit in _kept:
            library.set_num_threads(limit)
        _kept = []
    return not _kept


def _pool_counts(pools: Any) -> List[Tuple[str, int, str]]:
    """(user_api, threads, kind) of each of ``pools.lib_controllers``, in their order. kind "stopped":
    OpenBLAS's own thread pool, which stops in the parent before every fork and restarts when set;
    "torch": the OpenMP runtime torch ships, which the Torch handler sets through torch.set_num_threads."""
    torch = sys.modules.get("torch")
    try:
        torch_file = torch.__file__ if torch is not None and torch.backends.openmp.is_available() else None
    except AttributeError:  # torch is importing: numpy's hook, which runs this, came from inside its import
        torch_file = None
    torch_dir = os.path.dirname(torch_file) + os.sep if torch_file else None
    return [] if pools is None else [
        (i["user_api"], i["num_threads"], "stopped" if stopped_at_fork(i) else
         "torch" if i["user_api"] == "openmp" and torch_dir and i["filepath"].startswith(torch_dir) else "")
        for i in pools.info()]


def stopped_at_fork(info: Dict[str, Any]) -> bool:
    """Whether a pool (threadpoolctl's info dict) is OpenBLAS's own, stopped at every fork."""
    return info.get("internal_api") == "openblas" and info.get("threading_layer") == "pthreads"


def controller() -> Any:  # Any: a threadpoolctl.ThreadpoolController (threadpoolctl ships no types)
    """The loaded pools, or None without threadpoolctl, whose import sets ``KMP_DUPLICATE_LIB_OK``
    when unset: taken back, as the user's environment (and their later programs') is not nbmp's."""
    unset = "KMP_DUPLICATE_LIB_OK" not in os.environ
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    finally:
        if unset:
            os.environ.pop("KMP_DUPLICATE_LIB_OK", None)
    return ThreadpoolController()
