"""What the parent sends a Pool's workers that is not a plain task: a map's function,
pickled once per map (the worker side, ``worker.load_function``, keeps it by its bytes),
and the map's tasks that can skip nbmp's pickler (``plain_task_bytes``)."""

from __future__ import annotations

from multiprocessing import pool as _stdpool
from types import FunctionType
from typing import Any, Callable, Optional, Tuple

from .._backend import pickling as _pickling
from .worker import load_function

__all__ = ["Prepickled", "plain_task_bytes"]

_MAPPERS = (_stdpool.mapstar, _stdpool.starmapstar)  # type: ignore[attr-defined]  # typeshed omits these runtime names


class Prepickled:
    """A map's function, pickled once for all its tasks and rebuilt once per worker.

    cloudpickle sends a notebook function by value, which costs tens of
    microseconds per task; a map of many chunks would pay it per chunk, on both
    sides. The bytes are made at the first task and reused; workers keep the few
    latest functions by their bytes (identical bytes, identical function).
    A lambda whose code the workers inherited by fork goes as a reference to that code
    (``MainObjects.function_by_code``). A function that carries shared arrays or tensors
    is pickled per task instead: each handle in it can be loaded by one process only.
    """

    __slots__ = ("func", "reduced")

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.reduced: Optional[Tuple[Any, ...]] = None  # what every task carries, once made

    def ready(self) -> bool:
        """Whether every task carries the same reduction, made already: by an earlier task, or
        now for a lambda whose code the workers have (such a reduction holds no shared-memory
        ticket that only one receiver may take). Then the standard pickler can send a task
        holding it (``plain_task_bytes``)."""
        if self.reduced is None:
            self.reduced = self._by_code()
        return self.reduced is not None

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


def plain_task_bytes(task: Any) -> Optional[bytes]:
    """A map's task ``(job, i, mapstar, (Prepickled, chunk), {})`` pickled by the standard
    pickler, which sends it as nbmp's would when the chunk is plain (numbers, strings, short
    tuples of them: ``pickling.plain``) and the function's reduction is made and reusable;
    else None. Right after the Pool's forks each pickler object nbmp's makes is copy-on-write
    faults in the parent, which a first map would pay per task."""
    if task.__class__ is not tuple or len(task) != 5 or task[2] not in _MAPPERS or task[4]:
        return None
    args = task[3]
    if args.__class__ is not tuple or len(args) != 2 or args[0].__class__ is not Prepickled \
            or not _pickling.plain(args[1]) or not args[0].ready():
        return None
    return _pickling.dumps_plain_value(task)
