"""The loop a Pool worker runs: the stdlib's ``multiprocessing.pool.worker`` plus a slot.

Before each step the worker writes what it holds into its slot (the phases below), which the
parent reads once it is dead (docs/pool.md). SIGINT is ignored (the parent terminates the Pool);
exceptions cross with the worker's frames (``errors``); a task that cannot be unpickled or an
initializer that raises is reported to the parent instead of killing the worker silently.
"""

from __future__ import annotations

import mmap
import os
import select
import time
from multiprocessing import reduction
from multiprocessing import current_process
from multiprocessing.pool import MaybeEncodingError, _helper_reraises_exception  # type: ignore[attr-defined]  # typeshed omits these runtime names
from typing import Any, Callable, Optional, Sequence, Tuple

from .._backend import finalizers as _finalizers, interrupts as _interrupts, pickling as _pickling, posix as _posix
from .._forking.handlers.thread_pools import cap_started_pools
from .errors import wrap_task_exception

__all__ = ["worker", "load_function", "Slot", "Notice", "Timed", "IDLE", "INIT", "WAITING", "RECEIVING", "DECODING", "RUNNING", "SENDING",
           "SENT", "JOB", "INDEX", "PHASE"]

# Slot layout: the job and task index the worker holds, and its phase.
JOB, INDEX, PHASE = 0, 1, 2
# Phases, and what a death in each means to the parent:
#   IDLE       nothing held.
#   INIT       the initializer failed: the Pool is unusable.
#   WAITING    holds the task queue's lock, nothing read yet: the parent frees the lock.
#   RECEIVING  was reading a task: the task stream may be cut mid-message, the Pool is unusable.
#   DECODING   held a task, which one is unknown: every pending call fails.
#   RUNNING    held task (job, index): that call fails.
#   SENDING    holds the result queue's lock, writing (job, index)'s result: the parent frees
#              the lock and fails that call if the result never arrived.
#   SENT       holds the result queue's lock, result written: the parent frees the lock.
IDLE, INIT, WAITING, RECEIVING, DECODING, RUNNING, SENDING, SENT = range(8)


class Slot:
    """Three int64s (job, index, phase) shared between the parent and one worker (a spawned one gets
    the descriptor at start). Not ``RawArray``, which registers reducers with the standard ``ForkingPickler``."""

    def __init__(self, fd: int = -1) -> None:
        if fd < 0:
            fd = _posix.anonymous_file("nbmp-pool-slot")
            os.ftruncate(fd, _SLOT_BYTES)
        self.fd = fd
        self._map = mmap.mmap(fd, _SLOT_BYTES)
        self.view = memoryview(self._map).cast("q")
        # Not at exit: the Pool's watcher thread (a daemon) may still read the slot then.
        _finalizers.on_death(self, _close_slot, self.view, self._map, fd)

    def __reduce__(self) -> Any:
        return _rebuild_slot, (reduction.DupFd(self.fd),)  # only while starting a child


_SLOT_BYTES = 3 * 8
SLICE = 1.0  # seconds an idle worker waits in one go (see _receiver)


def _rebuild_slot(dupfd: Any) -> Slot:
    return Slot(dupfd.detach())


def _close_slot(view: memoryview, map_: mmap.mmap, fd: int) -> None:
    view.release()
    map_.close()
    os.close(fd)


class Notice:
    """A message on the result queue that is not a task's result (handled by the parent's reader)."""

    __slots__ = ("kind", "job", "index", "payload")

    def __init__(self, kind: str, job: int = -1, index: int = 0, payload: Any = None) -> None:
        self.kind, self.job, self.index, self.payload = kind, job, index, payload

    def __reduce__(self) -> Any:
        return Notice, (self.kind, self.job, self.index, self.payload)


class Timed(tuple):  # type: ignore[type-arg]  # always (success, value), as the stdlib's results
    """A task's ``(success, value)`` pair that also says which worker ran it and when (``TaskRan``),
    made by the parent's reader from the worker's plain 5-tuple (:func:`timed`)."""

    worker: Optional[int]
    start: float
    end: float

    def __new__(cls, success: bool, value: Any, worker: Optional[int], start: float, end: float) -> "Timed":
        self = super().__new__(cls, (success, value))
        self.worker, self.start, self.end = worker, start, end
        return self

    def __reduce__(self) -> Any:
        return Timed, (self[0], self[1], self.worker, self.start, self.end)


def timed(message: Any) -> Any:
    """A worker's result message ``(job, i, outcome)`` with a 5-tuple outcome made a :class:`Timed`;
    anything else (a 2-tuple error made when the result could not be pickled) as it came."""
    outcome = message[2]
    return (message[0], message[1], Timed(*outcome)) if len(outcome) == 5 else message


_functions: "dict[bytes, Any]" = {}


def load_function(data: bytes) -> Any:
    """A map's function from its bytes (``sending.Prepickled``), kept for the next chunks."""
    func = _functions.get(data)
    if func is None:
        if len(_functions) >= 16:
            _functions.pop(next(iter(_functions)))
        func = _functions[data] = _pickling.loads(data)
    return func


def worker(inqueue: Any, outqueue: Any, initializer: Optional[Callable[..., Any]] = None,
           initargs: Sequence[Any] = (), maxtasks: Optional[int] = None, wrap_exception: bool = False,
           slot: Any = None, inherited: Any = None, sigterm: Tuple[Any, ...] = ()) -> None:
    """Run tasks from ``inqueue`` until a ``None`` sentinel, EOF or ``maxtasks``; results name the
    ``__main__`` objects ``inherited`` by reference, so the parent gets its own classes; a forked
    worker gets ``(the parent's SIGTERM handler,)`` as ``sigterm``."""
    # For a standard context's process (an nbmp one already ignores SIGINT); _signal: see interrupts.
    _interrupts.for_worker(first_step=False)  # after the standard bootstrap: coverage's SIGTERM handler stays
    _interrupts.default_termination(*sigterm)
    slot = slot.view  # the stores below are the per-task cost of crash tracking
    inqueue._writer.close()
    outqueue._reader.close()
    me = current_process()
    index, pid = me.launch.index if hasattr(me, "launch") else None, os.getpid()
    send = _sender(outqueue, slot, inherited)
    slot[PHASE] = INIT
    if initializer is not None:
        try:
            initializer(*initargs)
        except Exception as exc:
            with _pickling.sending_to(inherited):
                failure = wrap_task_exception(exc, index, pid)
            send(Notice("init-failed", payload=failure), ())
            os._exit(1)  # the Pool is unusable: every replacement would fail the same way
    slot[PHASE] = IDLE
    receive = _receiver(inqueue, slot)
    completed = 0
    look = 1  # for pools a task started, after tasks 1, 2, 4, 8...: a few looks, however many tasks
    while maxtasks is None or completed < maxtasks:
        task = receive(send, index, pid)
        if task is None:
            break
        job, i, func, args, kwds = task
        slot[JOB], slot[INDEX], slot[PHASE] = job, i, RUNNING
        started = time.time()
        try:
            result = (True, func(*args, **kwds), index, started, time.time())  # a Timed in the parent
        except Exception as exc:
            if wrap_exception and func is not _helper_reraises_exception:
                with _pickling.sending_to(inherited):  # the wrapper pickles exc now
                    exc = wrap_task_exception(exc, index, pid)  # the wrapper travels in exc's place
            result = (False, exc, index, started, time.time())
        send((job, i, result), result)
        task = func = args = kwds = result = None  # type: ignore[assignment]  # drop the task's objects while waiting for the next
        completed += 1
        if completed == look:
            look = 0 if cap_started_pools() else 2 * look
    slot[PHASE] = IDLE


def _receiver(inqueue: Any, slot: Any) -> Callable[..., Any]:
    rlock, recv_bytes, loads = inqueue._rlock, inqueue._reader.recv_bytes, _pickling.loads
    # Waiting for data apart from reading it tells the parent whether a dead worker
    # left the task stream intact (see WAITING); select.poll is the cheap way to wait.
    poller = select.poll()
    poller.register(inqueue._reader.fileno(), select.POLLIN)

    def receive(send: Callable[..., None], index: Optional[int], pid: int) -> Any:
        """The next task, or None at the sentinel or EOF. Unreadable tasks are reported and skipped."""
        while True:
            # Waits in slices: a signal that lands just before a wait begins (a terminate's SIGTERM
            # right after the last result) runs its Python handler at the slice's end, not never.
            while not rlock.acquire(timeout=SLICE):
                pass
            try:
                slot[PHASE] = WAITING
                while not poller.poll(SLICE * 1000):
                    pass
                slot[PHASE] = RECEIVING
                data = recv_bytes()
            except (EOFError, OSError):
                slot[PHASE] = IDLE
                return None
            finally:
                rlock.release()
            slot[PHASE] = DECODING
            try:
                task = loads(data)
            except Exception as exc:  # e.g. a module the task needs is not importable here
                send(Notice("bad-task", payload=wrap_task_exception(exc, index, pid)), ())
                slot[PHASE] = IDLE
                continue
            if task is None:
                slot[PHASE] = IDLE
            return task
    return receive


def _sender(outqueue: Any, slot: Any, inherited: Any) -> Callable[[Any, Any], None]:
    wlock = outqueue._wlock
    send_bytes = outqueue._writer.send_bytes

    def dumps(message: Any) -> bytes:
        if _pickling.plain(message, 3):  # (job, i, (True, [3], worker, start, end)): pickle alone
            return _pickling.dumps_plain_value(message)
        with _pickling.sending_to(inherited):
            return _pickling.dumps(message)

    def send(message: Any, result: Any) -> None:
        try:
            data = dumps(message)
        except Exception as exc:  # the slow path names the culprit
            try:
                _pickling.dumps_explained(result[1], {"the task's result": result[1]}, "send it to the parent")
            except Exception as explained:
                exc = explained
            job, i = message[:2]
            data = dumps((job, i, (False, MaybeEncodingError(exc, result[1]))))
        with wlock:
            slot[PHASE] = SENDING
            send_bytes(data)
            slot[PHASE] = SENT
        slot[PHASE] = IDLE
    return send
