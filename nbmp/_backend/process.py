"""Process classes, one per start method, that cross to a spawned child by cloudpickle.

What differs from ``multiprocessing.context``'s: ``__reduce__`` goes through nbmp's pickler (so
lambdas, cell-defined targets and ``Process`` subclasses start under spawn and forkserver, with the
cells' sources for tracebacks); ``start`` records the child's ``Launch``, and ``_bootstrap`` makes
``nbmp._forking.registry.child_started`` every child's first step.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from multiprocessing import process
from typing import Any, Callable, Optional, Protocol, Tuple

from .. import _forking
from .._base import checks as _checks
from . import cells as _cells, interrupts as _interrupts, main_module as _main_module, pickling as _pickling, popen_fork, posix as _posix
from . import forkserver as _forkserver  # at import: it notes the standard preload list before a user can set one
from . import popen_spawn as _popen_spawn  # at import: the standard launch's modules bound before a program can put nbmp in their place

__all__ = ["ForkProcess", "SpawnProcess", "ForkServerProcess"]


class _StartMethods(Protocol):
    def get_start_method(self, allow_none: bool = False) -> str: ...
    def set_start_method(self, method: Optional[str], force: bool = False) -> None: ...


# nbmp's default context, set by .context when it is made: that module imports this one, so this one never imports it.
default_context: Optional[_StartMethods] = None


def _rebuild_process(cells: Any, data: bytes, method: Optional[str] = None,
                     starter: Optional[int] = None) -> process.BaseProcess:
    _cells.install_cell_sources(cells)
    _main_module.note_starter(starter)  # a function of its __main__ lives in this one's (see main_module)
    if method is not None and default_context is not None:  # the child inherits its start method, as in the stdlib
        default_context.set_start_method(method, force=True)
    try:
        cls, state = _pickling.loads(data)
    except Exception:
        if starter is not None and not _posix.alive(starter):
            # The process that started this one died while it started (its arrays' segments
            # went with it): nobody is left to read an error, so none is printed.
            os._exit(1)
        raise
    obj: process.BaseProcess = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


class _NbmpProcess(process.BaseProcess):
    _start_method: Optional[str]  # each subclass's (None: the default context's); typeshed omits it

    def __init__(self, group: None = None, target: Optional[Callable[..., Any]] = None, name: Optional[str] = None,
                 args: Any = (), kwargs: Any = {}, *, daemon: Optional[bool] = None) -> None:
        # Checked here, not in the child: there a bad target fails only after the fork.
        if target is not None and not callable(target):
            raise TypeError(f"target must be a callable or None, not {type(target).__name__} {target!r}; "
                            f"e.g. nbmp.Process(target=f, args=(x,))")
        args = _checks.arguments(args, "args", "nbmp.Process(target=f, args=(x,))")
        kwargs = _checks.keywords(kwargs, "kwargs")
        super().__init__(group, target, name, args, kwargs, daemon=daemon)

    # The child's ``nbmp._forking.Launch``: set by its starter (``spawn`` and the Pool mark workers),
    # completed by start() and read by the child's _bootstrap.
    launch: _forking.Launch = _forking.Launch()

    def start(self) -> None:
        """Start the child; it applies nbmp's fork-safety settings of this moment."""
        launch = self.launch
        if launch.parent != os.getpid() or launch.main_thread != (threading.current_thread() is threading.main_thread()):
            self.launch = _forking.stamp(launch)  # not stamped already by its starter, just before, here (see stamp)
        if not self.launch.worker:
            super().start()
            return
        _start_unchecked(self)

    def terminate(self) -> None:
        """SIGTERM to the process; a worker's, to the programs it started first (see
        ``interrupts.for_worker``): they must not outlive a stopped run."""
        self._stop_descendants(signal.SIGTERM)
        super().terminate()

    def kill(self) -> None:
        """SIGKILL to the process (a worker's: to the programs it started first)."""
        self._stop_descendants(signal.SIGKILL)
        super().kill()

    def _stop_descendants(self, signum: int) -> None:
        if self.launch.worker and self.pid is not None and self.exitcode is None:  # alive: its pid is its own
            _posix.signal_descendants(self.pid, signum)

    def _bootstrap(self, parent_sentinel: Optional[int] = None) -> int:
        if self.launch.worker:
            self._start_worker()
        else:
            if os.getppid() != self._parent_pid:  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
                # Forked by a fork server that nbmp started while SIGINT was blocked for its
                # workers: a plain Process gets the standard behaviour back.
                _interrupts.allow()
            _forking.start_child(self.launch)  # reports its handlers' errors itself; never raises
        return super()._bootstrap(parent_sentinel)  # type: ignore[misc,no-any-return]  # stdlib private: typeshed omits it

    def _start_worker(self) -> None:
        """A worker's first steps, any start method: SIGINT ignored, death with its starter, nbmp's fork-safety resets."""
        _interrupts.for_worker()
        parent = self.launch.parent
        # Not direct under forkserver (the server is the OS parent), nor when a thread other
        # than the main one started us (the death signal would come when that thread ends).
        _posix.die_with_parent(parent, direct=os.getppid() == parent and self.launch.main_thread)
        _forking.start_child(self.launch)  # reports its handlers' errors itself; never raises

    def __reduce__(self) -> Tuple[Callable[..., process.BaseProcess], Tuple[Any, bytes, str, int]]:
        roots = {"the target": self._target, "args": self._args, "kwargs": self._kwargs,  # type: ignore[attr-defined]  # stdlib private
                 f"the {type(self).__qualname__} object": self}
        method = self._start_method or _default_method()
        action = f"start a process with the {method!r} start method"
        return _rebuild_process, (_cells.cell_sources(),
                                  _pickling.dumps_explained((type(self), vars(self)), roots, action), method, os.getpid())


def _default_method() -> str:
    assert default_context is not None, "nbmp._backend.context sets it when imported"
    return default_context.get_start_method()


class ForkProcess(_NbmpProcess):
    """A process started by ``os.fork()``: the child inherits everything, nothing is pickled."""

    _start_method = "fork"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        return popen_fork.Popen(process_obj)  # imported above: an import statement here runs importlib's Python code between the forks of a round

    @staticmethod
    def _after_fork() -> None:
        # As the standard bootstrap does for the standard module's default: in a child a fork
        # context started, nbmp.get_start_method() says "fork", whatever the parent's default.
        if default_context is not None and default_context.get_start_method(allow_none=True) not in (None, "fork"):
            default_context.set_start_method("fork", force=True)
        # The executors' threads are gone here, a forking one too: their join at exit would fail the child (gh-88110)
        if queues := getattr(sys.modules.get("concurrent.futures.thread"), "_threads_queues", None):
            queues.clear()  # not when empty: a WeakKeyDictionary's clear raises and catches a KeyError
        process.BaseProcess._after_fork()  # type: ignore[attr-defined]  # stdlib private: the standard after-fork hooks


class SpawnProcess(_NbmpProcess):
    """A process started as a fresh interpreter; its target travels by cloudpickle."""

    _start_method = "spawn"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        return _popen_spawn.Popen(process_obj)  # the standard one, reaped with wait4, launched as the parent may die

    @staticmethod
    def _after_fork() -> None:
        pass  # spawned: there was no fork to recover from


class ForkServerProcess(_NbmpProcess):
    """A process forked from the forkserver; its target travels by cloudpickle."""

    _start_method = "forkserver"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        from .popen_forkserver import Popen  # the standard one, its exit status read once
        _forkserver.preload_frameworks()  # before the server starts: nbmp and the parent's frameworks, loaded once there
        return Popen(process_obj)


def _start_unchecked(proc: process.BaseProcess) -> None:
    """The standard ``start`` of the worker ``proc``, but for its refusal in a daemonic process
    (lest a child outlive it): an nbmp worker dies with the process that started it where
    Linux's parent-death signal says so. A Dask worker is such a daemonic process; lifting the
    flag around the start would change it for every thread of that process."""
    proc._check_closed()  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
    assert proc._popen is None, "cannot start a process twice"  # type: ignore[attr-defined]  # as above
    assert proc._parent_pid == os.getpid(), "can only start a process object created by current process"  # type: ignore[attr-defined]  # as above
    if not sys.platform.startswith("linux"):
        assert not process.current_process()._config.get("daemon"), "daemonic processes are not allowed to have children"  # type: ignore[attr-defined]  # as above
    process._cleanup()  # type: ignore[attr-defined]  # as above
    _posix.prepare()
    # Blocked from before the fork (or exec) until the worker has set SIGINT to ignored:
    # an interrupt of the whole process group meanwhile stays pending, then is dropped.
    with _interrupts.blocked():
        proc._popen = proc._Popen(proc)  # type: ignore[attr-defined]  # as above
    proc._sentinel = proc._popen.sentinel  # type: ignore[attr-defined]  # as above
    del proc._target, proc._args, proc._kwargs  # type: ignore[attr-defined]  # as the standard start: no cycle through the target
    process._children.add(proc)  # type: ignore[attr-defined]  # as above
