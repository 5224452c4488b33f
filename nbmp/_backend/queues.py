"""Queues that pickle with nbmp's pickler: nbmp's own classes, keeping the standard ones' API.

``SimpleQueue`` runs on nbmp :class:`~nbmp._backend.connection.Connection` s (so a Pool on it gets
cloudpickle). ``Queue`` and ``JoinableQueue`` pickle in ``put``, in the caller (the stdlib's feeder
thread prints a failure and loses the item), and their feeder thread writes the bytes; as in
torch's and loky's queues, the object is captured as it is at ``put``. Both pickle inside the
``_PICKLING`` ForkLock: a child forked mid-pickle would inherit cloudpickle's locks held.
"""

from __future__ import annotations

import collections
import threading
import time
import traceback
import types
import weakref
from multiprocessing import context, synchronize, util
from queue import Empty, Full
from typing import Any, Callable, Deque, List, Optional, Tuple

from .. import _forking
from . import connection as _connection, interrupts as _interrupts, pickling as _pickling, posix as _posix

__all__ = ["Queue", "JoinableQueue", "SimpleQueue"]

_PICKLING = _forking.ForkLock("queue pickling")


class _Pipe:
    """A one-way pipe with a lock at each end, under the standard queues' names for them (the
    standard Pool and executor read ``_reader``, ``_writer``, ``_rlock``, ``_wlock``, ``_poll``)."""

    _SENT: Tuple[str, ...] = ("_reader", "_writer", "_rlock", "_wlock")  # what a child being started gets

    def __init__(self, *, ctx: Any) -> None:
        self._reader, self._writer = _connection.Pipe(duplex=False)
        self._rlock, self._wlock = ctx.Lock(), ctx.Lock()
        self._reset()

    def __getstate__(self) -> Any:
        context.assert_spawning(self)  # a queue travels only to a child being started
        return {name: getattr(self, name) for name in self._SENT}

    def __setstate__(self, state: Any) -> None:
        vars(self).update(state)
        self._reset()

    def _reset(self) -> None:
        self._poll = self._reader.poll

    def empty(self) -> bool:
        """True when no item waits in the pipe."""
        return not self._poll()

    __class_getitem__: Any = classmethod(types.GenericAlias)  # Queue[int], as the standard ones


class Queue(_Pipe):
    """``multiprocessing.Queue`` with cloudpickle: lambdas and cell-defined objects travel.

    nbmp's own class: ``put`` pickles in the caller and a feeder thread writes the bytes to
    the pipe, so ``put`` never waits for a reader. It keeps the standard one's methods and its
    behaviour at a close, a fork and the process's exit."""

    _SENT = (*_Pipe._SENT, "_maxsize", "_sem")

    def __init__(self, maxsize: int = 0, *, ctx: Any) -> None:
        self._maxsize = maxsize if maxsize > 0 else synchronize.SEM_VALUE_MAX  # type: ignore[attr-defined]  # typeshed omits it
        self._sem = ctx.BoundedSemaphore(self._maxsize)  # the room left: put takes it, get gives it back
        super().__init__(ctx=ctx)
        util.register_after_fork(self, Queue._reset)  # a forked child has no feeder thread and no buffer

    def _reset(self) -> None:
        super()._reset()
        self._notempty = threading.Condition(threading.Lock())
        self._buffer: Deque[Any] = collections.deque()  # pickles the feeder has yet to write
        self._thread: Optional[threading.Thread] = None
        self._jointhread: Optional[util.Finalize] = None
        self._joincancelled = False
        self._closed = False
        self._close: Optional[util.Finalize] = None

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Remove and return an item. Waiting can be interrupted; once its bytes are read the item
        is loaded whole, so an interrupted ``get`` leaves it in the queue or, loaded and dropped,
        releasing what it holds."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        deadline = time.monotonic() + timeout if block and timeout is not None else None
        try:
            if not self._rlock.acquire(block, timeout):
                raise Empty
            wait = None if deadline is None else deadline - time.monotonic()
            if not _posix.ready(self._reader.fileno(), wait if block else 0):
                raise Empty
            return _take(self, self._rlock)
        finally:
            # Asked of the lock, not a flag: an interrupt right after acquire would leave a flag unset.
            if self._rlock._semlock._is_mine():
                self._rlock.release()

    def put(self, obj: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Put ``obj`` on the queue, pickled now by nbmp's pickler: an object that cannot be sent
        raises here, in the caller. Waiting for room can be interrupted; the handover to the
        feeder is not, so an interrupted ``put`` queued the item whole or gave back the
        shared-memory tickets its pickle held."""
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        acquired = False
        queued: List[bool] = []
        with _pickling.collecting_single_use() as handed_out:
            try:
                with _PICKLING:  # a Pool's or an executor's background thread may put here
                    data = _pickling.dumps_explained(obj, {"the object put": obj}, "put it on a Queue")
                acquired = self._sem.acquire(block, timeout)
                if not acquired:
                    raise Full
                _hand_over(self, data, queued)
            except BaseException:  # queue.Full, or an interrupt before the item was queued
                if not queued:  # nobody will load this pickle
                    if acquired:
                        self._sem.release()
                    for release in handed_out:  # its shared-memory tickets go back
                        release()
                raise

    def _enqueue(self, data: bytes) -> None:
        with self._notempty:
            if self._thread is None:
                self._start_feeder()
            self._buffer.append(data)
            self._notempty.notify()

    def qsize(self) -> int:
        """The approximate number of items in the queue."""
        return self._maxsize - self._sem.get_value()  # type: ignore[no-any-return]  # an int (typeshed: Any)

    def full(self) -> bool:
        """True when a ``put`` would wait for room."""
        return self._sem.get_value() == 0  # type: ignore[no-any-return]  # a bool

    def get_nowait(self) -> Any:
        """``get(False)``."""
        return self.get(False)

    def put_nowait(self, obj: Any) -> None:
        """``put(obj, False)``."""
        self.put(obj, False)

    def close(self) -> None:
        """No more items from this process: the feeder thread writes those buffered, then closes
        both ends here (a queue never put to keeps them open, as the standard one does)."""
        self._closed = True
        close, self._close = self._close, None
        if close is not None:
            close()

    def join_thread(self) -> None:
        """Wait for the feeder thread (after :meth:`close`): every buffered item is written."""
        assert self._closed, f"Queue {self!r} not closed"
        if self._jointhread is not None:
            self._jointhread()

    def cancel_join_thread(self) -> None:
        """Do not wait for the feeder thread at this process's exit (buffered items may be lost)."""
        self._joincancelled = True
        if self._jointhread is not None:
            self._jointhread.cancel()

    def _start_feeder(self) -> None:
        thread = threading.Thread(target=_feed, name="QueueFeederThread", daemon=True,
                                  args=(self._buffer, self._notempty, self._writer.send_bytes, self._wlock,
                                        self._reader.close, self._writer.close, self._sem))
        thread.start()  # may raise while the interpreter finalizes: no feeder is recorded then
        self._thread = thread
        if not self._joincancelled:  # at exit, after the closes below: every buffered item is written
            self._jointhread = util.Finalize(thread, _join, [weakref.ref(thread)], exitpriority=-5)
        self._close = util.Finalize(self, _send_close, [self._buffer, self._notempty], exitpriority=10)


class JoinableQueue(Queue):
    """``multiprocessing.JoinableQueue`` with cloudpickle."""

    _SENT = (*Queue._SENT, "_cond", "_unfinished_tasks")

    def __init__(self, maxsize: int = 0, *, ctx: Any) -> None:
        super().__init__(maxsize, ctx=ctx)
        self._unfinished_tasks = ctx.Semaphore(0)
        self._cond = ctx.Condition()

    def _enqueue(self, data: bytes) -> None:
        with self._cond:  # counted before any get can see it, so task_done never runs ahead
            self._unfinished_tasks.release()
            super()._enqueue(data)

    def task_done(self) -> None:
        """One item got earlier is done; :meth:`join` returns once all are."""
        with self._cond:
            if not self._unfinished_tasks.acquire(False):
                raise ValueError("task_done() called too many times")
            if not self._unfinished():
                self._cond.notify_all()

    def join(self) -> None:
        """Wait until every item put has been marked done by :meth:`task_done`."""
        with self._cond:
            if self._unfinished():
                self._cond.wait()

    def _unfinished(self) -> bool:
        # Under _cond, which every change of the count holds: taking one and giving it back is exact.
        taken = self._unfinished_tasks.acquire(False)
        if taken:
            self._unfinished_tasks.release()
        return taken  # type: ignore[no-any-return]  # a bool


_CLOSE = object()  # the feeder's last item: close the ends and end


def _feed(buffer: Deque[Any], notempty: threading.Condition, send_bytes: Callable[[bytes], None], wlock: Any,
          close_reader: Callable[[], None], close_writer: Callable[[], None], room: Any) -> None:
    """The feeder thread: write each buffered pickle to the pipe, in order, under the write lock
    shared with other processes; at the close, close this process's ends and end."""
    while True:
        with notempty:
            while not buffer:
                notempty.wait()
            data = buffer.popleft()
        if data is _CLOSE:
            close_reader()
            close_writer()
            return
        try:
            with wlock:
                send_bytes(data)
        except Exception:
            if util.is_exiting():  # the process is being torn down: its pipes may be gone already
                return
            room.release()  # the item is lost: its room is free again (the standard feeder's rule)
            traceback.print_exc()


def _join(thread: "weakref.ref[threading.Thread]") -> None:
    alive = thread()
    if alive is not None:
        alive.join()


def _send_close(buffer: Deque[Any], notempty: threading.Condition) -> None:
    with notempty:
        buffer.append(_CLOSE)
        notempty.notify()


@_interrupts.step
def _take(queue: Any, rlock: Any) -> Any:
    # From the moment the bytes are read until they are loaded: the item is loaded whole.
    data = queue._reader.recv_bytes()
    queue._sem.release()
    rlock.release()  # loaded outside the lock, as the stdlib does
    return _pickling.loads(data)


@_interrupts.step
def _hand_over(queue: Any, data: bytes, queued: List[bool]) -> None:
    # An interrupt meanwhile is raised once the item is queued.
    queue._enqueue(data)
    queued.append(True)


class SimpleQueue(_Pipe):
    """``multiprocessing.SimpleQueue`` with cloudpickle: nbmp's own class."""

    def close(self) -> None:
        """Close both ends of the pipe."""
        self._reader.close()
        self._writer.close()

    def get(self) -> Any:
        """Remove and return an item (waiting for one); loaded whole, as ``Connection.recv``."""
        with self._rlock:
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
                with self._wlock:
                    if not handed_out:  # nothing to give back: written as the stdlib does
                        self._writer.send_bytes(data)
                        return
                    _connection.send_whole(self._writer, data, written)
            except BaseException:  # an interrupt before the item was written: nobody will load it
                if not written:
                    for release in handed_out:  # its shared-memory tickets go back
                        release()
                raise
