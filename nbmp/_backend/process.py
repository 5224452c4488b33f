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
step ``nbmp._forking.registry.child_started`` (reseeding, thread caps, CUDA reset); fork
children are started by ``nbmp._backend.popen_fork.Popen``, which runs nbmp's fork handlers.
"""

from __future__ import annotations

import sys
from multiprocessing import process
from typing import Any, Callable, Optional, Tuple

from .. import _forking
from . import cells as _cells, pickling as _pickling

__all__ = ["ForkProcess", "SpawnProcess", "ForkServerProcess"]


def _rebuild_process(cells: Any, data: bytes) -> process.BaseProcess:
    _cells.install_cell_sources(cells)
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

    def __reduce__(self) -> Tuple[Callable[..., process.BaseProcess], Tuple[Any, bytes]]:
        roots = {"the target": self._target, "args": self._args, "kwargs": self._kwargs,  # type: ignore[attr-defined]  # stdlib private
                 f"the {type(self).__qualname__} object": self}
        action = f"start a process with the {self._start_method!r} start method"
        return _rebuild_process, (_cells.cell_sources(),
                                  _pickling.dumps_explained((type(self), vars(self)), roots, action))


class ForkProcess(_NbmpProcess):
    """A process started by ``os.fork()``: the child inherits everything, nothing is pickled."""

    _start_method = "fork"

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        from .popen_fork import Popen
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

