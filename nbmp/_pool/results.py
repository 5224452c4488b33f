"""The standard Pool's result objects, waiting in short slices.

CPython runs a Python signal handler in the main thread only, but the kernel may hand a
process's SIGINT to any thread that does not block it: one of the Pool's own threads, or a
kernel's, when the main thread does not take it (a signal sent from another thread of the
process, as ipykernel's "message" interrupts are; a moment when the main thread blocks it).
The handler then waits for the main thread's next bytecode, and a main thread blocked in an
untimed lock wait (``AsyncResult.get()``, iterating ``imap``, ``Pool.join()``) has none
until the whole call ends. Waiting in slices of :data:`SLICE` seconds, it sees the interrupt
within a slice, as ``spawn``'s ``join`` does.

The Pool's calls return these subclasses (same state, ``isinstance`` unchanged): the stdlib
makes each result object, and :func:`sliced` switches its class.
"""

from __future__ import annotations

from multiprocessing import TimeoutError
from multiprocessing import pool as _stdpool
from typing import Any, Dict, Optional, Type, TypeVar

__all__ = ["SLICE", "sliced"]

SLICE = 0.25  # seconds: an interrupt taken by another thread is raised this late at most

_R = TypeVar("_R")


class _SlicedApply(_stdpool.ApplyResult):  # type: ignore[type-arg]  # generic in typeshed only
    def wait(self, timeout: Optional[float] = None) -> None:
        if timeout is not None:
            return super().wait(timeout)
        while not self.ready():
            super().wait(SLICE)


class _SlicedMap(_stdpool.MapResult, _SlicedApply):  # type: ignore[type-arg]  # generic in typeshed only
    pass


class _SlicedIMap(_stdpool.IMapIterator):  # type: ignore[type-arg]  # generic in typeshed only
    def next(self, timeout: Optional[float] = None) -> Any:
        if timeout is not None:
            return super().next(timeout)
        while True:
            try:
                return super().next(SLICE)
            except TimeoutError:
                continue

    __next__ = next


class _SlicedIMapUnordered(_stdpool.IMapUnorderedIterator, _SlicedIMap):  # type: ignore[type-arg]  # generic in typeshed only
    pass


_SLICED: Dict[type, type] = {
    _stdpool.ApplyResult: _SlicedApply,
    _stdpool.MapResult: _SlicedMap,
    _stdpool.IMapIterator: _SlicedIMap,
    _stdpool.IMapUnorderedIterator: _SlicedIMapUnordered,
}


def sliced(result: _R) -> _R:
    """``result`` (made by the stdlib Pool), now waiting in slices; other types as they are."""
    cls: Optional[Type[Any]] = _SLICED.get(type(result))
    if cls is not None:
        result.__class__ = cls
    return result
