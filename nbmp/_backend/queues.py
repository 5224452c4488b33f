"""Queues that pickle with nbmp's pickler.

What differs from ``multiprocessing.queues``:

* ``SimpleQueue`` runs on an nbmp :class:`~nbmp._backend.connection.Connection` pair and
  its ``put`` pickles with nbmp's pickler; a Pool built on it (``Pool`` talks to
  the connections directly) gets cloudpickle for tasks and results for free.
* ``Queue`` and ``JoinableQueue`` pickle in their feeder thread, as the stdlib
  does, but the object is wrapped so that the feeder's ``ForkingPickler`` hands
  it to nbmp's pickler. The receiving side is untouched: nbmp's pickles load
  with plain pickle.

Both pickle inside ``_PICKLING``, a :class:`~nbmp._forking.ForkLock`: the Queue
feeder thread and a Pool's task-handler thread pickle in the background, and a
child forked mid-pickle would inherit cloudpickle's internal locks held.
"""

from __future__ import annotations

from multiprocessing import queues
from typing import TYPE_CHECKING, Any, Optional, Tuple

from .. import _forking
from . import connection as _connection, pickling as _pickling

if TYPE_CHECKING:
    from multiprocessing import connection, synchronize

__all__ = ["Queue", "JoinableQueue", "SimpleQueue"]

_PICKLING = _forking.ForkLock("queue pickling")


class _ByNbmp:
    """Wraps a queued object so that the stdlib feeder pickles it with nbmp."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce__(self) -> Tuple[Any, ...]:
        with _PICKLING:  # runs in the stdlib's feeder thread
            data = _pickling.dumps_explained(self.obj, {"the object put": self.obj}, "put it on a Queue")
        return _pickling.loads, (data,)


class _PutByNbmp:
    def put(self, obj: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Put ``obj`` on the queue; it is pickled by nbmp's pickler (cloudpickle)."""
        super().put(_ByNbmp(obj), block, timeout)  # type: ignore[misc]  # a mixin: next in the MRO is a stdlib Queue


class Queue(_PutByNbmp, queues.Queue):  # type: ignore[type-arg]  # queues.Queue[Any] fails at runtime before Python 3.12
    """``multiprocessing.Queue`` with cloudpickle: lambdas and cell-defined objects travel."""


class JoinableQueue(_PutByNbmp, queues.JoinableQueue):  # type: ignore[type-arg]  # as Queue
    """``multiprocessing.JoinableQueue`` with cloudpickle."""


class SimpleQueue(queues.SimpleQueue[Any]):
    """``multiprocessing.SimpleQueue`` with cloudpickle."""

    # Set by the stdlib's __init__; typeshed declares none of them.
    _reader: connection.Connection
    _writer: connection.Connection
    _wlock: Optional[synchronize.Lock]

    def __init__(self, *, ctx: Any) -> None:
        super().__init__(ctx=ctx)
        self._reader.close()
        self._writer.close()
        self._reader, self._writer = _connection.Pipe(duplex=False)
        self._poll = self._reader.poll

    def put(self, obj: Any) -> None:
        """Put ``obj`` on the queue; it is pickled by nbmp's pickler (cloudpickle)."""
        with _PICKLING:  # a Pool's task-handler thread puts here
            data = _pickling.dumps_explained(obj, {"the object put": obj}, "put it on a SimpleQueue")
        if self._wlock is None:
            self._writer.send_bytes(data)
        else:
            with self._wlock:
                self._writer.send_bytes(data)
