"""Process classes, one per start method, that cross to a spawned child by cloudpickle.

What differs from ``multiprocessing.context``'s process classes: ``__reduce__``.
The stdlib pickles a process object (its target, args and kwargs) with
``ForkingPickler`` when it starts a child by spawn or forkserver; nbmp's
process objects reduce themselves through nbmp's pickler instead, so lambdas,
closures and cell-defined targets -- and ``Process`` subclasses defined in a
cell -- start under every method, and the notebook's cell sources go along so
that the child's tracebacks show them. Under fork nothing is pickled.

Also: ``start`` records the fork-safety settings the child needs (base seed, thread
budget, start order) in ``vars(self)``, and ``_bootstrap`` makes every child's first
step ``nbmp._forking.child_started`` (reseeding, thread caps, CUDA reset); fork
children are started by ``nbmp._popen_fork.Popen``, which runs nbmp's fork handlers.
"""

from __future__ import annotations

import sys
from multiprocessing import process
from typing import Any, Callable, Optional, Tuple

from . import _cells, _forking, _pickling

__all__ = ["ForkProcess", "SpawnProcess", "ForkServerProcess", "DefaultProcess"]


def _rebuild_process(cells: Any, data: bytes, method: Optional[str] = None) -> process.BaseProcess:
    _cells.install_cell_sources(cells)
    if method is not None:  # the child inherits the start method it was started with, as in the stdlib
        from ._context import default_context
        default_context.set_start_method(method, force=True)
    cls, state = _pickling.loads(data)
    obj: process.BaseProcess = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


class _NbmpProcess(process.BaseProcess):
    _start_method: Optional[str]  # each subclass's (None: the default context's); typeshed omits it

    def start(self) -> None:
        """Start the child; it applies nbmp's fork-safety settings of this moment."""
        _forking.stamp(self)
        super().start()

    def _bootstrap(self, parent_sentinel: Optional[int] = None) -> int:
        _forking.start_child(self)  # reports its handlers' errors itself; never raises
        return super()._bootstrap(parent_sentinel)  # type: ignore[misc,no-any-return]  # stdlib private: typeshed omits it

    def __reduce__(self) -> Tuple[Callable[..., process.BaseProcess], Tuple[Any, bytes, str]]:
        roots = {"the target": self._target, "args": self._args, "kwargs": self._kwargs,  # type: ignore[attr-defined]  # stdlib private
                 f"the {type(self).__qualname__} object": self}
        method = self._start_method or _default_method()
        action = f"start a process with the {method!r} start method"
        return _rebuild_process, (_cells.cell_sources(),
                                  _pickling.dumps_explained((type(self), vars(self)), roots, action), method)


def _default_method() -> str:
    from ._context import default_context
    return default_context.get_start_method()


class ForkProcess(_NbmpProcess):
    """A process started by ``os.fork()``: the child inherits everything, nothing is pickled."""

    _start_method = "fork"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        from ._popen_fork import Popen
        return Popen(process_obj)


class SpawnProcess(_NbmpProcess):
    """A process started as a fresh interpreter; its target travels by cloudpickle."""

    _start_method = "spawn"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        if sys.platform == "win32":
            from multiprocessing.popen_spawn_win32 import Popen
        else:
            from multiprocessing.popen_spawn_posix import Popen
        return Popen(process_obj)

    @staticmethod
    def _after_fork() -> None:
        pass  # spawned: there was no fork to recover from


class ForkServerProcess(_NbmpProcess):
    """A process forked from the forkserver; its target travels by cloudpickle."""

    _start_method = "forkserver"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        from multiprocessing.popen_forkserver import Popen
        return Popen(process_obj)


class DefaultProcess(_NbmpProcess):
    """``nbmp.Process``: started by the method nbmp's default context names (fork first).

    Example::

        >>> p = nbmp.Process(target=lambda: print("hi")); p.start(); p.join()
        hi
    """

    _start_method = None

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        from ._context import default_context
        return default_context.get_context().Process._Popen(process_obj)  # type: ignore[attr-defined]  # a concrete context: it has Process

    @staticmethod
    def _after_fork() -> None:
        from ._context import default_context
        default_context.get_context().Process._after_fork()  # type: ignore[attr-defined]  # a concrete context: it has Process
