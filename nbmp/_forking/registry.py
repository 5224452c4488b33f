"""Fork safety: the fork-handler registry, nbmp's quiescing locks, per-worker seeds
and thread budgets, and the entry every nbmp child runs.

docs/fork_safety.md has the timeline of a fork (``before`` in reverse order, once per
``popen_fork.fork_round``; ``after_in_parent``; :func:`child_started` in every child) and
how nbmp's own threads use a :class:`ForkLock`. Only nbmp's own forks run this: none of it
is registered with ``os.register_at_fork``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import itertools
import _thread
import os
import sys
import threading
import traceback
import warnings
import weakref
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._base import util as _util
from .._base.checks import check_int
from . import on_import as _on_import
from .launch import Launch
from .handlers import ForkHandler, ForkSafetyWarning, Worker, builtin_handlers
from .handlers.numpy_random import NumpyRandom
from .handlers.python_random import PythonRandom
from .handlers.thread_pools import NativePools, ThreadEnvironment

__all__ = ["ForkLock", "ForkHandle", "register_fork_handler", "seed", "set_worker_threads", "child_started", "hazards", "ForkSafetyWarning"]

# -- Settings: the base seed and the worker thread budget ------------------------------------------

_base_seed: Optional[int] = None
_started = itertools.count()  # index for a process started without a rank, counted from the last seed()
_worker_threads: Optional[int] = None
_ENV_THREADS = "NBMP_WORKER_THREADS"


def seed(s: Optional[int]) -> None:
    """Set the base seed: worker ``i``'s ``random``, NumPy and torch generators are seeded
    from ``(s, i)``, so runs repeat exactly; ``None`` goes back to fresh OS entropy.

    Example::

        >>> nbmp.seed(1234)
        >>> a = nbmp.spawn(lambda i: random.random(), nprocs=2)
        >>> nbmp.seed(1234)
        >>> a == nbmp.spawn(lambda i: random.random(), nprocs=2)
        True
    """
    global _base_seed, _started
    if s is not None and (not isinstance(s, int) or isinstance(s, bool)):
        raise TypeError(f"nbmp.seed() takes an int (or None for fresh entropy), not {s!r}; e.g. nbmp.seed(1234)")
    with _seeding:
        _base_seed, _started = s, itertools.count()


def set_worker_threads(n: Optional[int]) -> None:
    """Set how many BLAS/OpenMP/torch threads each worker may use; ``None`` (the default)
    means ``cores // workers`` (at least 1). The environment variable
    ``NBMP_WORKER_THREADS`` sets it too; this call wins.

    Example::

        >>> nbmp.set_worker_threads(2)   # each worker's pools get 2 threads
        >>> nbmp.set_worker_threads(None)  # back to cores // workers
    """
    global _worker_threads
    _worker_threads = check_int(n, "n in nbmp.set_worker_threads(n)", "nbmp.set_worker_threads(2)", none_means="cores // workers")


def worker_threads_setting() -> Optional[int]:
    """The explicit thread budget (set_worker_threads, else NBMP_WORKER_THREADS), or None."""
    if _worker_threads is not None:
        return _worker_threads
    env = os.environ.get(_ENV_THREADS, "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else None


def fork_settings() -> Dict[str, Any]:
    """The settings a worker started elsewhere (a Dask worker's rank) needs: base seed, thread budget."""
    return {"base_seed": _base_seed, "threads": worker_threads_setting()}


def stamp(launch: Launch) -> Launch:
    """``launch`` completed at ``start()`` with what the child needs of this moment (parent pid, main
    thread or not, seeds, thread budget, tree, and an index in start order if the starter gave none)."""
    with _seeding:
        base_seed, index = _base_seed, next(_started) if launch.index is None else launch.index
    threads = worker_threads_setting()
    seed, budget = _derive_seed(base_seed, index), _budget(threads, launch.nprocs)
    return Launch(index=index, nprocs=launch.nprocs, worker=launch.worker, parent=os.getpid(),
                  main_thread=threading.current_thread() is threading.main_thread(), base_seed=base_seed,
                  threads=threads, seed=seed, budget=budget, tree=_util.tree())


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_budget(launch: Launch) -> int:
    """The BLAS/OpenMP/torch thread count of a child launched with ``launch``: the explicit
    setting, else ``cores // nprocs`` (at least 1); 1 when the run's size is unknown."""
    return launch.budget or _budget(launch.threads, launch.nprocs)  # budget: worked out by stamp


def _budget(explicit: Optional[int], nprocs: int) -> int:
    return explicit or (max(1, _cores() // nprocs) if nprocs > 0 else 1)


def _derive_seed(base: Optional[int], index: int) -> int:
    if base is None:
        return int.from_bytes(os.urandom(8), "little")
    return int.from_bytes(hashlib.sha256(f"nbmp:{base}:{index}".encode()).digest()[:8], "little")


# -- Quiescing nbmp's own threads ------------------------------------------------------------------


class ForkLock(_thread.RLock):  # type: ignore[misc]  # the C lock: typeshed marks it final
    """A re-entrant lock nbmp holds across each of its forks (fresh and unheld in the child), so a
    background thread working inside ``with lock:`` is at a safe point whenever nbmp forks. The C
    ``RLock`` itself: its ``__enter__`` runs no Python code, so no interrupt lands between acquire and block."""

    HOLD_TIMEOUT = 10.0  # a thread stuck inside its lock longer than this is reported, not waited for

    def __new__(cls, name: str) -> "ForkLock":
        return super().__new__(cls)

    def __init__(self, name: str) -> None:
        self.name = name
        _fork_locks.add(self)

    def __repr__(self) -> str:
        return f"<ForkLock {self.name!r}>"


class _ForkLocks:
    """Every live ForkLock, in creation order; which of them the forking thread holds."""

    def __init__(self) -> None:
        self._locks: "weakref.WeakValueDictionary[int, ForkLock]" = weakref.WeakValueDictionary()
        self._ids = itertools.count()
        self._held: List[ForkLock] = []

    def add(self, lock: ForkLock) -> None:
        self._locks[next(self._ids)] = lock

    def hold(self) -> None:
        for lock in list(self._locks.values()):
            if lock.acquire(timeout=lock.HOLD_TIMEOUT):
                self._held.append(lock)
            else:
                warnings.warn(f"nbmp's {lock.name!r} thread did not reach a safe point in "
                              f"{lock.HOLD_TIMEOUT:g} s; forking without it", ForkSafetyWarning, stacklevel=2)

    def release(self) -> None:
        while self._held:
            self._held.pop().release()

    def reset(self) -> None:
        for lock in list(self._locks.values()):
            lock._at_fork_reinit()  # type: ignore[attr-defined]  # CPython's own after-fork reset (3.9+), not in typeshed: unheld, whoever held it in the parent
        self._held = []


_fork_locks = _ForkLocks()

# Held while the seed and the count are read or set: a free-threaded build has no GIL between the reads.
_seeding = ForkLock("nbmp seed and start count")


# -- The registry ----------------------------------------------------------------------------------

Callback = Optional[Callable[[], object]]


class _UserHandler(ForkHandler):
    def __init__(self, before: Callback, after_in_parent: Callback, after_in_child: Callback) -> None:
        self.callbacks = (before, after_in_parent, after_in_child)

    def before(self) -> None:
        self._call(0)

    def after_in_parent(self) -> None:
        self._call(1)

    def in_child(self, worker: Worker) -> None:
        if worker.forked:
            self._call(2)

    def _call(self, point: int) -> None:
        if self.callbacks[point] is not None:
            self.callbacks[point]()  # type: ignore[misc]  # not None (checked above; mypy narrows no tuple item at a variable index)

    def __repr__(self) -> str:
        names = ("before", "after_in_parent", "after_in_child")
        return "<fork handler " + ", ".join(f"{n}={fn!r}" for n, fn in zip(names, self.callbacks) if fn) + ">"


class ForkHandle:
    """What :func:`register_fork_handler` returns: ``remove()`` unregisters the handler
    (also usable as a context manager that removes it on exit)."""

    def __init__(self, handler: ForkHandler) -> None:
        self._handler = handler

    def remove(self) -> None:
        if self._handler in _user_handlers:
            _user_handlers.remove(self._handler)

    def __enter__(self) -> "ForkHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


_builtins: List[ForkHandler] = builtin_handlers(_fork_locks, worker_threads_setting)
_user_handlers: List[ForkHandler] = []


def register_fork_handler(before: Callback = None, after_in_parent: Callback = None,
                          after_in_child: Callback = None) -> ForkHandle:
    """Run callables around each fork nbmp makes, like ``os.register_at_fork`` but only
    for nbmp's workers: ``before`` in the parent just before the fork (in reverse
    registration order), ``after_in_parent`` after it and ``after_in_child`` in the
    forked worker before its target runs (both in registration order, after nbmp's own
    resets). Workers started together (``spawn``, a Pool) are one round of forks:
    ``before`` runs before its first fork, ``after_in_parent`` after its last. Exceptions
    are reported and ignored, as ``os.register_at_fork`` does. Returns a handle whose
    ``remove()`` unregisters them.

    Example::

        >>> handle = nbmp.register_fork_handler(after_in_child=lambda: my_client.reconnect())
        >>> handle.remove()
    """
    callbacks = {"before": before, "after_in_parent": after_in_parent, "after_in_child": after_in_child}
    for name, fn in callbacks.items():
        if fn is not None and not callable(fn):
            raise TypeError(f"register_fork_handler({name}=...) needs a callable taking no arguments, not {fn!r}")
    if all(fn is None for fn in callbacks.values()):
        raise TypeError("register_fork_handler() needs at least one of before=, after_in_parent=, after_in_child=")
    handler = _UserHandler(before, after_in_parent, after_in_child)
    _user_handlers.append(handler)
    return ForkHandle(handler)


def user_handlers() -> Tuple[ForkHandler, ...]:
    """The handlers registered by users now (the test suite checks none is left behind)."""
    return tuple(_user_handlers)


Hooks = Dict[str, List[Callable[[], None]]]  # module name -> what to run once it is imported


def _split() -> Tuple[List[ForkHandler], Hooks]:
    """The handlers that apply now, and the in_child calls of the others by the module they wait for."""
    applying: List[ForkHandler] = []
    hooks: Hooks = {}
    for handler in _builtins + _user_handlers:
        if handler.applies():
            applying.append(handler)
        else:
            for name in handler.modules:
                hooks.setdefault(name, []).append(functools.partial(_run_in_this_child, handler))
    return applying, hooks


_plan: List[ForkHandler] = []  # the handlers the last before_fork ran: after_fork_in_parent runs the same
_hooks: Hooks = {}  # and the other handlers' in_child calls by module; a child nbmp forked takes over both
_this_worker: Optional[Worker] = None  # in a child, from child_started: its record


def _run_in_this_child(handler: ForkHandler) -> None:
    """A handler's ``in_child``, once its framework is imported in the child (see child_started)."""
    if _this_worker is not None:
        _run(handler, "in_child", _this_worker)


def _run(handler: ForkHandler, point: str, *args: Any) -> None:
    try:
        getattr(handler, point)(*args)
    except Exception:  # as os.register_at_fork does: report, never break the fork
        _report(handler, point)


def _report(handler: ForkHandler, point: str) -> None:
    print(f"Exception ignored in nbmp fork handler {handler!r}.{point}:", file=sys.stderr)
    traceback.print_exc()


# -- The three points of an nbmp fork, and the child entry -----------------------------------------

_warned: set[str] = set()
_forked_by_nbmp = False
# Set by a caller for the forks its own thread makes, when the hazards are known not to touch
# the workers (a Dask worker's threads); per context, so other threads' forks still warn.
hazards_known: "contextvars.ContextVar[bool]" = contextvars.ContextVar("nbmp_hazards_known", default=False)


def hazards(applying: Optional[List[ForkHandler]] = None) -> List[str]:
    """What makes forking this process hazardous now, one sentence with its fix each."""
    found = []
    for handler in _split()[0] if applying is None else applying:
        try:
            message = handler.hazard()
        except Exception:
            continue
        if message:
            found.append(message)
    return found


def _caller_level() -> int:
    """The stacklevel of the first frame outside nbmp and multiprocessing: the user's call."""
    frame: Optional[FrameType]
    frame, level = sys._getframe(1), 1
    nbmp_dir = os.path.dirname(os.path.dirname(__file__))
    inside = (nbmp_dir, os.path.dirname(threading.__file__) + os.sep + "multiprocessing")
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def before_fork(launch: Optional[Launch] = None) -> None:
    """In the parent, just before ``os.fork()`` of a child stamped with ``launch``: warn once
    per hazard; run ``before`` handlers."""
    global _plan, _hooks
    _plan, _hooks = _split()
    new = [] if hazards_known.get() else [message for message in hazards(_plan) if message not in _warned]
    for message in new:
        warnings.warn(message, ForkSafetyWarning, stacklevel=_caller_level())
        _warned.add(message)  # once shown: a filter that made it an error fails every such fork
    if new:  # or the child inherits the warning in an unflushed buffer and prints it again
        for stream in (sys.stderr, sys.stdout):
            with contextlib.suppress(Exception):
                stream.flush()
    for handler in reversed(_plan):
        _run(handler, "before")


def prepare_fork_server() -> None:
    """In a fork server, once its preloads are imported: each applying handler's ``in_fork_server``,
    in reverse order like ``before`` (the collector's freeze last); never raises."""
    for handler in reversed(_split()[0]):
        _run(handler, "in_fork_server")


def after_fork_in_parent() -> None:
    for handler in _plan:
        _run(handler, "after_in_parent")


def after_fork_in_child() -> None:
    """In the child, right after nbmp's ``os.fork()``: remember the fork for child_started."""
    global _forked_by_nbmp
    _forked_by_nbmp = True


def child_started(launch: Launch, forked: bool = False) -> Worker:
    """Every nbmp child's first step, any start method: the built-in handlers, then, in a child nbmp
    forked (``forked``, or :func:`after_fork_in_child` said so), the users' ``after_in_child``.
    ``launch.nprocs=0`` means the run's size is unknown: one thread."""
    global _forked_by_nbmp
    if _forked_by_nbmp:  # what the parent worked out at the fork holds: the same modules
        forked, _forked_by_nbmp = True, False
        applying, hooks = _plan, _hooks
    else:
        applying, hooks = _split()
    worker = _worker_of(launch, forked)
    _become(worker, launch)
    for handler in applying:
        _run(handler, "in_child", worker)
    _on_import.watch(hooks)  # a framework the worker imports later is reset the moment it appears
    return worker


def _become(worker: Worker, launch: Launch) -> None:
    """This process is ``worker``: its own children derive their seeds from its seed and count
    from 0, the import hooks waiting for a framework run for it, and it joins its starter's tree."""
    global _base_seed, _started, _this_worker
    if launch.tree and launch.tree != _util.tree():  # spawned or forkserver; a fork inherited it
        _util.join_tree(launch.tree)
    _base_seed, _started = (None if launch.base_seed is None else worker.seed), itertools.count()
    _this_worker = worker


def _worker_of(launch: Launch, forked: bool) -> Worker:
    index = launch.index or 0
    seed = _derive_seed(launch.base_seed, index) if launch.seed is None else launch.seed
    # A fork server's child: its OS parent is not the process that started it.
    from_server = not forked and launch.parent != 0 and os.getppid() != launch.parent
    return Worker(index=index, nprocs=launch.nprocs, seed=seed, threads=thread_budget(launch),
                  explicit_threads=launch.threads is not None, forked=forked, from_fork_server=from_server)


def settle_worker(index: int, nprocs: int, settings: Dict[str, Any]) -> None:
    """In a long-lived worker nbmp did not fork (a Dask worker): only the seeds and thread caps
    of ``child_started``, since resetting locks or torch state under its running threads is unsafe."""
    base, threads = settings.get("base_seed"), settings.get("threads") or 1
    worker = Worker(index=index, nprocs=nprocs, seed=_derive_seed(base, index), threads=threads,
                    explicit_threads=settings.get("threads") is not None, forked=False)
    for handler in _builtins:
        if isinstance(handler, (PythonRandom, NumpyRandom, ThreadEnvironment, NativePools)) and handler.applies():
            _run(handler, "in_child", worker)


def start_child(launch: Launch, forked: bool = False) -> Optional[Worker]:
    """``child_started`` as ``_NbmpProcess._bootstrap`` calls it: never raises."""
    try:
        return child_started(launch, forked)
    except Exception:  # a worker without fork safety beats a worker that dies silently
        print("Exception ignored in nbmp's child start:", file=sys.stderr)
        traceback.print_exc()
        return None

