"""torch_xla's two multiprocessing helpers, for any framework: a serial executor and a
fork-shared object.

Both hold a lock made in the parent, which crosses to a child by fork or as a start argument,
never through a queue, as any ``multiprocessing.Lock``.
"""

from __future__ import annotations

import itertools
import os
import weakref
from multiprocessing.context import get_spawning_popen
from typing import Any, Callable, Dict, Generic, Optional, Tuple, TypeVar

__all__ = ["SerialExecutor", "ForkShared"]

T = TypeVar("T")
R = TypeVar("R")

# Live instances by token: a forked child resolves one sent inside a task to its inherited object, not a copy.
_instances: "weakref.WeakValueDictionary[Tuple[int, int], _Inherited]" = weakref.WeakValueDictionary()
_tokens = itertools.count()


class _Inherited:
    """Pickles as a reference to the instance a forked child inherited (whole, while spawning)."""

    _token: Tuple[int, int]

    def _register(self) -> None:
        self._token = (os.getpid(), next(_tokens))
        _instances[self._token] = self

    def __reduce__(self) -> Tuple[Any, ...]:
        if get_spawning_popen() is not None:  # a spawn/forkserver child's start: send it whole
            return _rebuild, (type(self), vars(self))
        return _lookup, (self._token,)


def _rebuild(cls: type[_Inherited], state: Dict[str, Any]) -> _Inherited:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    _instances[obj._token] = obj
    return obj


def _lookup(token: Tuple[int, int]) -> Any:
    try:
        return _instances[token]
    except KeyError:
        raise RuntimeError(
            "this SerialExecutor/ForkShared is not in this process: it reaches a worker by fork "
            "(create it before the Pool or processes start) or as an argument of the worker's start "
            "(Process args, a Pool's initargs) -- not inside a task under spawn/forkserver") from None


def _lock(ctx: Any) -> Any:
    if ctx is None:
        from .._backend import default_context
        ctx = default_context
    return ctx.Lock()


class SerialExecutor(_Inherited):
    """Run a function in one process at a time, across all processes sharing this object.

    Like ``torch_xla``'s ``MpSerialExecutor``: create it in the parent, before the
    workers start; each worker calls :meth:`run`, and a shared lock makes the
    calls take turns (e.g. one download of a dataset, the others then find it
    on disk). For workers started by spawn or forkserver, make it with their
    context (``nbmp.SerialExecutor(ctx=nbmp.get_context("spawn"))``): a lock of
    the fork context cannot be sent to them.

    Example::

        >>> serial = nbmp.SerialExecutor()          # before the workers start
        >>> with nbmp.Pool(2) as pool:
        ...     pool.map(lambda i: serial.run(lambda: i * 10), range(3))   # one at a time inside run
        [0, 10, 20]
    """

    def __init__(self, ctx: Any = None) -> None:
        self._lock = _lock(ctx)
        self._register()

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` while holding the shared lock; returns its value."""
        with self._lock:
            return fn(*args, **kwargs)


class ForkShared(_Inherited, Generic[T]):
    """An object built once in the parent and shared copy-on-write with forked workers.

    Like ``torch_xla``'s ``MpModelWrapper``: a model (or any large object) built
    at cell or module scope is inherited by forked workers without a copy of
    its memory pages; :meth:`get` hands it out, and ``get(transform)`` applies
    ``transform`` (e.g. moving a model to a device) under a lock shared by all
    processes, so workers do it one at a time instead of all at once.

    Under spawn/forkserver the object is pickled into each child instead (a
    copy per worker: the memory saving is fork's alone).

    Example::

        >>> table = nbmp.ForkShared(list(range(1_000_000)))    # built once, here
        >>> nbmp.parallel_map(lambda i: table.get()[i], [1, 2])
        [1, 2]
    """

    def __init__(self, obj: T, ctx: Any = None) -> None:
        self._obj = obj
        self._lock = _lock(ctx)
        self._register()

    def get(self, transform: Optional[Callable[[T], Any]] = None) -> Any:
        """The object; with ``transform``, ``transform(obj)`` computed under the shared lock."""
        if transform is None:
            return self._obj
        with self._lock:
            return transform(self._obj)

    def to(self, device: Any) -> Any:
        """torch_xla's spelling: ``obj.to(device)`` under the lock; returns the object."""
        with self._lock:
            self._obj.to(device)  # type: ignore[attr-defined]  # duck-typed: T is any object with .to(device)
        return self._obj
