"""Queues that pickle with nbmp's pickler.

``SimpleQueue`` runs on nbmp :class:`~nbmp._backend.connection.Connection` s (so a Pool on it gets
cloudpickle). ``Queue`` and ``JoinableQueue`` pickle in ``put``, in the caller (the stdlib's feeder
thread prints a failure and loses the item), and the feeder sends the bytes (``pickling.Pickled``);
as in torch's and loky's queues, the object is captured as it is at ``put``. Both pickle inside the
``_PICKLING`` ForkLock: a child forked mid-pickle would inherit cloudpickle's locks held.
"""

from __future__ import annotations

import contextlib
import select
import time
from multiprocessing import queues
from queue import Empty, Full
from typing import TYPE_CHECKING, Any, List, Optional

from .. import _forking
from . import connection as _connection, interrupts as _interrupts, pickling as _pickling, posix as _posix

if TYPE_CHECKING:
    from multiprocessing import synchronize

__all__ = ["Queue", "JoinableQueue", "SimpleQueue"]

_PICKLING = _forking.ForkLock("queue pickling")


class _ByNbmp:
    """``put`` pickles with nbmp's pickler, in the caller; ``get`` reads and loads whole."""

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Remove and return an item, as ``multiprocessing.Queue.get`` does.

        Waiting can be interrupted; from the moment the item's bytes are read until it is
        loaded an interrupt is held (see ``loads_whole``), so an interrupted ``get`` leaves
        the item either in the queue or, loaded and dropped, releasing what it holds."""
        if self._closed:  # type: ignore[attr-defined]  # stdlib private, as in put
            raise ValueError(f"Queue {self!r} is closed")
        deadline = time.monotonic() + timeout if block and timeout is not None else None
        rlock = self._rlock  # type: ignore[attr-defined]  # stdlib private, as all below
        try:
            if not rlock.acquire(block, timeout):
                raise Empty
            wait = None if deadline is None else deadline - time.monotonic()
            if not _posix.ready(self._reader.fileno(), wait if block else 0):  # type: ignore[attr-defined]
                raise Empty
            return _take(self, rlock)
        finally:
            # Asked of the lock, not a flag: an interrupt right after acquire would leave a flag unset.
            if rlock._semlock._is_mine():
                rlock.release()

    def put(self, obj: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Put ``obj`` on the queue, pickled now, by nbmp's pickler (cloudpickle): an object that
        cannot be sent raises here, in the caller (the stdlib's feeder thread would print the
        error and drop the item, and ``get()`` would wait forever).

        Waiting for room can be interrupted; handing the item to the feeder thread (append to
        its buffer, wake it) is done with interrupts held, so an interrupted ``put`` either
        queued the item whole or gave back the shared-memory tickets its pickle held."""
        if self._closed:  # type: ignore[attr-defined]  # stdlib private: the stdlib checks it first
            raise ValueError(f"Queue {self!r} is closed")
        acquired = False
        queued: List[bool] = []
        with _pickling.collecting_single_use() as handed_out:
            try:
                with _PICKLING:  # a Pool's or an executor's background thread may put here
                    data = _pickling.dumps_explained(obj, {"the object put": obj}, "put it on a Queue")
                acquired = self._sem.acquire(block, timeout)  # type: ignore[attr-defined]  # stdlib private
                if not acquired:
                    raise Full
                _hand_over(self, data, queued)
            except BaseException:  # queue.Full, or an interrupt before the item was queued
                if not queued:  # nobody will load this pickle
                    if acquired:
                        self._sem.release()  # type: ignore[attr-defined]
                    for release in handed_out:  # its shared-memory tickets go back
                        release()
                raise

    def _enqueue(self, item: bytes) -> None:
        with self._notempty:  # type: ignore[attr-defined]  # stdlib private, as all below
            if self._thread is None:  # type: ignore[attr-defined]
                self._start_thread()  # type: ignore[attr-defined]
            self._buffer.append(_pickling.Pickled(item))  # type: ignore[attr-defined]
            self._notempty.notify()  # type: ignore[attr-defined]


@_interrupts.step
def _take(queue: Any, rlock: Any) -> Any:
    # From the moment the bytes are read until they are loaded: the item is loaded whole.
    data = queue._recv_bytes()
    queue._sem.release()
    rlock.release()  # loaded outside the lock, as the stdlib does
    return _pickling.loads(data)


@_interrupts.step
def _hand_over(queue: Any, data: bytes, queued: List[bool]) -> None:
    # An interrupt meanwhile is raised once the item is queued.
    queue._enqueue(data)
    queued.append(True)


class Queue(_ByNbmp, queues.Queue):  # type: ignore[type-arg]  # queues.Queue[Any] fails at runtime before Python 3.12
    """``multiprocessing.Queue`` with cloudpickle: lambdas and cell-defined objects travel."""


class JoinableQueue(_ByNbmp, queues.JoinableQueue):  # type: ignore[type-arg]  # as Queue
    """``multiprocessing.JoinableQueue`` with cloudpickle."""

    def _enqueue(self, item: bytes) -> None:
        with self._notempty, self._cond:  # type: ignore[attr-defined]  # stdlib private, as all below
            if self._thread is None:  # type: ignore[attr-defined]
                self._start_thread()  # type: ignore[attr-defined]
            self._unfinished_tasks.release()  # type: ignore[attr-defined]
            self._buffer.append(_pickling.Pickled(item))  # type: ignore[attr-defined]
            self._notempty.notify()  # type: ignore[attr-defined]


class SimpleQueue(queues.SimpleQueue[Any]):
    """``multiprocessing.SimpleQueue`` with cloudpickle."""

    # Set by the stdlib's __init__; typeshed declares none of them.
    _reader: _connection.Connection
    _writer: _connection.Connection
    _wlock: Optional[synchronize.Lock]

    def __init__(self, *, ctx: Any) -> None:
        super().__init__(ctx=ctx)
        self._reader.close()
        self._writer.close()
        self._reader, self._writer = _connection.Pipe(duplex=False)
        self._poll = self._reader.poll

    def get(self) -> Any:
        """Remove and return an item (waiting for one); loaded whole, as ``Connection.recv``."""
        with self._rlock:  # type: ignore[attr-defined]  # stdlib private, set by __init__
            _posix.ready(self._reader.fileno(), None)  # interruptible, whichever thread the interrupt went to
            data = self._reader.recv_bytes()
        return _pickling.loads_whole(data)

    def put(self, obj: Any) -> None:
        """Put ``obj`` on the queue; it is pickled by nbmp's pickler (cloudpickle).

        An item carrying shared-memory tickets is either written whole or, interrupted
        before that, gives its tickets back (see ``connection.send_whole``)."""
        written: List[bool] = []
        with _pickling.collecting_single_use() as handed_out:
            try:
                with _PICKLING:  # a Pool's task-handler thread puts here
                    data = _pickling.dumps_explained(obj, {"the object put": obj}, "put it on a SimpleQueue")
                with self._wlock or contextlib.nullcontext():
                    if not handed_out:  # nothing to give back: written as the stdlib does
                        self._writer.send_bytes(data)
                        return
                    _connection.send_whole(self._writer, data, written)
            except BaseException:  # an interrupt before the item was written: nobody will load it
                if not written:
                    for release in handed_out:  # its shared-memory tickets go back
                        release()
                raise
