"""What the parent sends a Pool's workers that is not a plain task: a map's function,
pickled once per map (the worker side, ``worker.load_function``, keeps it by its bytes)."""

from __future__ import annotations

from typing import Any, Callable

from .._backend import pickling as _pickling
from .worker import load_function

__all__ = ["Prepickled"]


class Prepickled:
    """A map's function, pickled once for all its tasks and rebuilt once per worker.

    cloudpickle sends a notebook function by value, which costs tens of
    microseconds per task; a map of many chunks would pay it per chunk, on both
    sides. The bytes are made at the first task and reused; workers keep the few
    latest functions by their bytes (identical bytes, identical function).
    A function that carries shared arrays or tensors is pickled per task instead:
    each handle in it can be loaded by one process only.
    """

    __slots__ = ("func", "data")

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func, self.data = func, b""

    def __reduce__(self) -> Any:
        if self.data:
            return load_function, (self.data,)
        data, reusable = _pickling.dumps_reusable(self.func, {"the function": self.func},
                                                  "send it to the Pool's workers")
        if not reusable:
            return _pickling.loads, (data,)  # bytes never seen twice: nothing to keep in the workers
        self.data = data
        return load_function, (data,)
