"""A map's function, pickled once per map for a Pool's workers (the worker side,
``worker.load_function``, keeps it by its bytes)."""

from __future__ import annotations

from types import FunctionType
from typing import Any, Callable, Optional, Tuple

from .._backend import pickling as _pickling
from .worker import load_function

__all__ = ["Prepickled"]


class Prepickled:
    """A map's function, pickled at its first task for all of them (not per chunk) and rebuilt once per
    worker, which keeps the latest few by their bytes. One that carries shared arrays is pickled per
    task instead: each handle can be loaded by one process only."""

    __slots__ = ("func", "reduced")

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.reduced: Optional[Tuple[Any, ...]] = None  # what every task carries, once made

    def __reduce__(self) -> Any:
        if self.reduced is not None:
            return self.reduced
        self.reduced = self._by_code()
        if self.reduced is not None:
            return self.reduced
        func = self.func
        data, reusable = _pickling.dumps_reusable(func, {"the function": func}, "send it to the Pool's workers")
        if not reusable:
            return _pickling.loads, (data,)  # bytes never seen twice: nothing to keep in the workers
        self.reduced = (load_function, (data,))
        return self.reduced

    def _by_code(self) -> Optional[Tuple[Any, ...]]:
        """A lambda whose code the receivers inherited (see ``MainObjects.function_by_code``), as a few bytes."""
        func, inherited = self.func, _pickling.receivers_inherited()
        if inherited is None or func.__class__ is not FunctionType or inherited.holds(func):
            return None
        return inherited.function_by_code(func)  # type: ignore[no-any-return]  # MainObjects: Any here
