"""BLAS/OpenMP thread pools in workers: at most ``worker.threads`` threads each, so
that workers x threads does not oversubscribe the cores.

Pools already loaded are limited through threadpoolctl (when installed); pools loaded
later in the child read the environment variables set here. GNU OpenMP (libgomp, the
runtime of torch's Linux wheels) cannot start a new team in a forked child once the
parent has used one -- its first parallel region hangs forever -- so children forked
from a parent with libgomp loaded get one OpenMP thread whatever the budget.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Dict, Optional, Tuple

from ..threads import alone
from ._base import ForkHandler, Worker

_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
_gomp_seen = False
_gomp_looked_at = -1  # len(sys.modules) when /proc/self/maps last said libgomp was not loaded
_gomp_at_fork = False  # libgomp was loaded in the parent when it forked (the child inherits this)
_controller: Any = None  # the parent's threadpoolctl view of its pools, made just before the fork (or the fork server's)
_controller_key = -1     # len(sys.modules) when it was made: new native libraries come with new modules
# Made by a fork server (NativePools.in_fork_server): which of NativePools.modules it had imported
# then. Its workers use its view while they have the same (unpickling the process object imports
# modules, so the count above always differs there).
_server_frameworks: Optional[Tuple[bool, ...]] = None
_pool_stoppers: Dict[str, Callable[[], Any]] = {}  # OpenBLAS (pthreads) path -> its fork handler, found with the controller
# OpenBLAS (pthreads) path -> its thread count as a variable (``blas_cpu_number``), found with the
# controller: the count can be given back to the parent without starting its pool.
_count_variables: Dict[str, Any] = {}
# Library path -> what gives back its count from before the round of forks: lowered in the
# parent across the round, so that a child has nothing to change (see NativePools._lower).
_lowered: Dict[str, Callable[[], object]] = {}
# The thread budget the environment variables hold for the children being forked (set by
# the parent across a round of forks), or None; and the parent's own values, given back after it.
_env_lent: Optional[int] = None
_env_saved: Dict[str, Optional[str]] = {}
# (BLAS, OpenMP) limits every pool of this process was lowered to for the children being forked,
# or None: a forked child with those limits changes no pool.
_inherited: Optional[Tuple[int, int]] = None


def _threadpool_controller() -> Any:  # Any: a threadpoolctl.ThreadpoolController (threadpoolctl ships no types)
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # the nbmp[fork-safety] extra is not installed: env variables only
        return None
    return ThreadpoolController()


def gnu_openmp_loaded() -> bool:
    """Whether libgomp is mapped in this process.

    Libraries are never unloaded: cached once seen. Not seen, /proc/self/maps is read again
    only once modules have been imported since, so a parent without libgomp does not read it
    at every round of forks: a native library comes with the import of the module that needs it."""
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
    """Thread-count variables for the pools a worker loads after it starts.

    When the forking thread is alone (no other thread can read the environment meanwhile),
    the parent sets them across the round of forks and gives its own values back after it:
    each forked child inherits them and sets nothing (the six variables cost a child ~40
    copy-on-write faults). Otherwise each child sets its own.
    """

    def __init__(self, coming_threads: Callable[[], int]) -> None:
        self.coming_threads = coming_threads  # the budget of the child about to be forked

    def before(self) -> None:
        global _env_lent
        _env_lent = None  # in a forked worker, its parent's record of the variables it lent
        if not alone():
            return
        budget = self.coming_threads()
        value = str(budget)
        for name in _ENV_VARS:
            _env_saved[name] = os.environ.get(name)
            os.environ[name] = value
        _env_lent = budget

    def after_in_parent(self) -> None:
        global _env_lent
        if _env_lent is None:
            return
        _env_lent = None
        for name, saved in _env_saved.items():
            if saved is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = saved

    def in_child(self, worker: Worker) -> None:
        global _env_lent
        lent, _env_lent = _env_lent, None  # the parent's record: this process gives nothing back
        if worker.forked and lent == worker.threads:
            return  # inherited from the parent, which set them for this round
        for name in _ENV_VARS:
            os.environ[name] = str(worker.threads)

    def forked_child_call(self) -> Optional[Callable[[Worker], None]]:
        # Lent for the round's children, whose budget is the same (``before_fork``): inherited.
        return None if _env_lent is not None else self.in_child


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
        global _gomp_at_fork
        _lowered.clear()  # in a forked worker, its parent's record of the pools it lowered
        _gomp_at_fork = gnu_openmp_loaded()
        # Scanning the loaded libraries costs milliseconds: done here, and again only after
        # imports, so a loop of forks scans once; a forked child inherits the result.
        if _controller_key != len(sys.modules):
            _scan_pools()
        budget = self.coming_threads()
        self._lower(budget, 1 if _gomp_at_fork else budget)

    def after_in_parent(self) -> None:
        global _inherited
        for give_back in _lowered.values():
            give_back()
        _lowered.clear()
        _inherited = None

    @staticmethod
    def _lower(blas: int, openmp: int) -> None:
        """Lower the parent's pools to the coming children's limits, for the round of forks.

        A child that lowers its own OpenBLAS restarts the pool that OpenBLAS's fork handler
        stopped (a thread made and stopped again), and each pool a child sets costs
        it a few dozen copy-on-write faults. Lowered in the parent, once for the round, the
        children inherit the limits and change nothing. Only where that starts no thread in
        the parent, now or when given back: OpenMP (the forking thread's own setting) and an
        OpenBLAS whose count variable is known (going down starts no thread; the count goes
        back through the variable). Others are left to each child."""
        global _inherited
        complete = True
        for lib in getattr(_controller, "lib_controllers", ()):
            limit = blas if lib.user_api == "blas" else openmp
            count = lib.num_threads
            if count == limit or lib.filepath in _lowered:
                continue
            variable = _count_variables.get(lib.filepath)
            if lib.user_api == "openmp" and lib.internal_api == "openmp":
                lib.set_num_threads(limit)
            elif variable is not None and variable.value == count:
                lib.set_num_threads(limit)
                if variable.value != limit:  # not the variable this build counts with: back the public way
                    lib.set_num_threads(count)
                    complete = False
                    continue
            else:
                complete = False
                continue
            # Given back after the round (prepared now: after the forks, each object the parent
            # touches is a copy-on-write fault). OpenBLAS's through its variable: its
            # set_num_threads would start its pool in the parent.
            _lowered[lib.filepath] = (functools.partial(setattr, variable, "value", count) if variable is not None
                                      else functools.partial(lib.set_num_threads, count))
        _inherited = (blas, openmp) if complete else None

    def in_child(self, worker: Worker) -> None:
        global _inherited
        inherited, _inherited = _inherited, None
        _lowered.clear()  # the parent's record: this process gives nothing back
        if worker.forked and inherited == (worker.threads, openmp_threads(worker)):
            return  # every pool is at this worker's limits already, lowered by the parent
        from_server = worker.from_fork_server and _server_frameworks == self._frameworks()
        controller = _controller if (worker.forked or from_server) and _controller is not None \
            else _threadpool_controller()
        if controller is None:
            return
        for lib in controller.lib_controllers:
            limit = worker.threads if lib.user_api == "blas" else openmp_threads(worker)
            if lib.num_threads == limit:
                continue
            lib.set_num_threads(limit)
            stop = _pool_stoppers.get(lib.filepath) if worker.forked or from_server else None
            if stop is not None:  # the forking process's OpenBLAS stopped its pool; set_num_threads restarted it
                stop()

    def in_fork_server(self) -> None:
        """Find the pools once in the server, not in each worker it forks."""
        global _server_frameworks
        _scan_pools()
        _server_frameworks = self._frameworks()

    def _frameworks(self) -> Tuple[bool, ...]:
        return tuple(name in sys.modules for name in self.modules)

    def forked_child_call(self) -> Optional[Callable[[Worker], None]]:
        # Every pool lowered to the round's limits in the parent (its children share the budget, ``before_fork``).
        return None if _inherited is not None else self.in_child


def _scan_pools() -> None:
    """This process's pools as threadpoolctl sees them now, with each OpenBLAS's stopper and count."""
    global _controller, _controller_key
    _controller, _controller_key = _threadpool_controller(), len(sys.modules)
    _find_pool_stoppers(_controller)


def _find_pool_stoppers(controller: Any) -> None:
    """In the parent, with its controller: each OpenBLAS's own fork handler, which a forked
    child calls right after capping that OpenBLAS (no symbol lookup in every worker), and
    the variable it keeps its thread count in.

    OpenBLAS's fork handler stops its thread pool in the parent before every fork, and
    ``set_num_threads`` restarts the pool at once: in a fresh worker the new threads then
    busy-wait for work, taking the cores the workers need to start. Stopped again with
    ``blas_thread_shutdown_``, the pool starts lazily at the worker's first multi-threaded
    BLAS call, with the limit just set. Builds that hide the symbols (OpenBLAS 0.3.34) have none.
    """
    import ctypes  # here, not at import: threadpoolctl (which made the controller) has loaded it
    _pool_stoppers.clear()
    _count_variables.clear()
    for lib in getattr(controller, "lib_controllers", ()):
        if lib.internal_api == "openblas" and getattr(lib, "threading_layer", None) == "pthreads":
            stop = getattr(lib.dynlib, "blas_thread_shutdown_", None)
            if stop is not None:
                _pool_stoppers[lib.filepath] = stop
            try:
                _count_variables[lib.filepath] = ctypes.c_int.in_dll(lib.dynlib, "blas_cpu_number")
            except ValueError:  # not exported by this build
                pass
