"""Queues that pickle with nbmp's pickler.

What differs from ``multiprocessing.queues``:

* ``SimpleQueue`` runs on an nbmp :class:`~nbmp._backend.connection.Connection` pair and
  its ``put`` pickles with nbmp's pickler; a Pool built on it (``Pool`` talks to
  the connections directly) gets cloudpickle for tasks and results for free.
* ``Queue`` and ``JoinableQueue`` pickle in ``put``, in the caller (the stdlib
  pickles in the feeder thread, where a failure is printed and the item lost);
  the feeder sends the bytes. As with torch's and loky's queues, the object is
  captured as it is at ``put``. The receiving side is untouched: nbmp's pickles
  load with plain pickle.

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


class _Pickled:
    """A queued object already pickled by nbmp: the stdlib feeder sends the bytes as they are."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> Tuple[Any, ...]:
        return _pickling.loads, (self.data,)


class _PutByNbmp:
    def put(self, obj: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Put ``obj`` on the queue, pickled now, by nbmp's pickler (cloudpickle): an object that
        cannot be sent raises here, in the caller (the stdlib's feeder thread would print the
        error and drop the item, and ``get()`` would wait forever)."""
        if self._closed:  # type: ignore[attr-defined]  # stdlib private: the stdlib checks it first
            raise ValueError(f"Queue {self!r} is closed")
        with _PICKLING:  # a Pool's or an executor's background thread may put here
            data = _pickling.dumps_explained(obj, {"the object put": obj}, "put it on a Queue")
        super().put(_Pickled(data), block, timeout)  # type: ignore[misc]  # a mixin: next in the MRO is a stdlib Queue


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
