"""The standard Pool's result objects, waiting in slices of ``posix.INTERRUPT_SLICE``.

A SIGINT the kernel gave another thread (ipykernel's "message" interrupts) is raised at the main
thread's next bytecode, which an untimed wait never reaches; in slices it comes within one.
:func:`sliced` switches the class of each result object the stdlib makes (``isinstance`` unchanged).
"""

from __future__ import annotations

from multiprocessing import TimeoutError
from multiprocessing import pool as _stdpool
from typing import Any, Dict, Optional, Type, TypeVar

from .._backend.posix import INTERRUPT_SLICE, wait_slice

__all__ = ["sliced"]

_R = TypeVar("_R")


class _SlicedApply(_stdpool.ApplyResult):  # type: ignore[type-arg]  # generic in typeshed only
    def wait(self, timeout: Optional[float] = None) -> None:
        if timeout is not None:
            return super().wait(timeout)
        while not self.ready():
            wait_slice(super().wait, INTERRUPT_SLICE)


class _SlicedMap(_stdpool.MapResult, _SlicedApply):  # type: ignore[type-arg]  # generic in typeshed only
    pass


class _SlicedIMap(_stdpool.IMapIterator):  # type: ignore[type-arg]  # generic in typeshed only
    def next(self, timeout: Optional[float] = None) -> Any:
        if timeout is not None:
            return super().next(timeout)
        while True:
            try:
                return wait_slice(super().next, INTERRUPT_SLICE)
            except TimeoutError:
                continue

    __next__ = next


class _SlicedIMapUnordered(_stdpool.IMapUnorderedIterator, _SlicedIMap):  # type: ignore[type-arg]  # generic in typeshed only
    pass


_SLICED: Dict[type, type] = {_stdpool.ApplyResult: _SlicedApply, _stdpool.MapResult: _SlicedMap,
                             _stdpool.IMapIterator: _SlicedIMap, _stdpool.IMapUnorderedIterator: _SlicedIMapUnordered}


def sliced(result: _R) -> _R:
    """``result`` (made by the stdlib Pool), now waiting in slices; other types as they are."""
    cls: Optional[Type[Any]] = _SLICED.get(type(result))
    if cls is not None:
        result.__class__ = cls
    return result
