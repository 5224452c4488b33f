"""torch_xla's two multiprocessing helpers, for any framework: a serial executor and a
fork-shared object.

Both hold a lock of an nbmp context, made in the parent. A lock crosses to a
child by inheritance (fork) or as an argument of the child's start (spawn and
forkserver: ``Process``/``spawn`` args, a Pool's ``initargs``), never through a
queue -- the same rule as for any ``multiprocessing.Lock``.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, TypeVar

__all__ = ["SerialExecutor", "ForkShared"]

T = TypeVar("T")
R = TypeVar("R")


def _lock(ctx: Any) -> Any:
    if ctx is None:
        from ._context import default_context
        ctx = default_context
    return ctx.Lock()


class SerialExecutor:
    """Run a function in one process at a time, across all processes sharing this object.

    Like ``torch_xla``'s ``MpSerialExecutor``: create it in the parent, before the
    workers start; each worker calls :meth:`run`, and a shared lock makes the
    calls take turns (e.g. one download of a dataset, the others then find it
    on disk).

    Example::

        >>> serial = nbmp.SerialExecutor()
        >>> def work(i):
        ...     return serial.run(lambda: i * 10)   # one worker at a time in here
        >>> nbmp.spawn(work, nprocs=2)
        [0, 10]
    """

    def __init__(self, ctx: Any = None) -> None:
        self._lock = _lock(ctx)

    def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` while holding the shared lock; returns its value."""
        with self._lock:
            return fn(*args, **kwargs)


class ForkShared(Generic[T]):
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

    def get(self, transform: Optional[Callable[[T], Any]] = None) -> Any:
        """The object; with ``transform``, ``transform(obj)`` computed under the shared lock."""
        if transform is None:
            return self._obj
        with self._lock:
            return transform(self._obj)

    def to(self, device: Any) -> Any:
        """torch_xla's spelling: ``obj.to(device)`` under the lock; returns the object."""
        with self._lock:
            self._obj.to(device)  # type: ignore[attr-defined]
        return self._obj
