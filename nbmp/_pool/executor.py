"""``nbmp.ProcessPoolExecutor``: the standard ``concurrent.futures`` executor on nbmp.

What differs from the standard executor (docs/dropin.md): workers from an nbmp context (spawn
with ``max_tasks_per_child``, as the stdlib picks); each call pickled by nbmp in ``submit`` and
carried as bytes inside the stdlib's ``_CallItem`` (as loky does), so the standard executor given
an nbmp context would still refuse a lambda; an unpicklable call fails its future at once; a dead
worker's ``BrokenProcessPool`` names its pid, exit code or signal and likely cause.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from concurrent.futures import Future, InvalidStateError, process
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait
from typing import Any, Callable, Dict, Optional, Tuple

from .._backend import interrupts as _interrupts, pickling as _pickling, posix as _posix
from .._backend.context import default_context, workers_context
from .._backend.main_module import Initializer, MainObjects
from .._base import WorkerExited
from .errors import WorkerLostError, lost_error
from .frames import _LENGTH, _LONG_LENGTH

__all__ = ["ProcessPoolExecutor"]


def _call_pickled(call: Any, inherited: Optional[MainObjects] = None) -> Any:
    fn, args, kwargs = call  # loaded by the worker as it took the call (an error there breaks the pool, as the standard's)
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # its traceback, sent as text, starts at fn: from 3.11 without this frame
        exc.__traceback__ = exc.__traceback__.tb_next if exc.__traceback__ else None
        raise
    return value if inherited is None else _Reply(value, inherited)


class _Reply:
    """A call's value, pickled naming by reference the ``__main__`` functions and classes the
    worker inherited by fork (``_backend.main_module``): the parent loads the value itself,
    with its own classes."""

    __slots__ = ("value", "inherited")

    def __init__(self, value: Any, inherited: MainObjects) -> None:
        self.value, self.inherited = value, inherited

    def __reduce__(self) -> Any:
        with _pickling.sending_to(self.inherited):
            return _pickling.loads, (_pickling.dumps(self.value),)


class _ManagerThread(process._ExecutorManagerThread):
    """The stdlib's manager thread, telling which worker died and how."""

    processes: Dict[int, Any]
    pending_work_items: Dict[int, Any]

    def __init__(self, executor: Any) -> None:
        super().__init__(executor)
        reader = self.result_queue._reader  # type: ignore[attr-defined]  # stdlib private: the pipe it waits on
        reader.recv = _results_reader(reader.fileno(), self.processes)
        self.wanted, self.seen = executor._max_workers, len(self.processes)

    def run(self) -> None:
        try:
            super().run()
        except RuntimeError as error:  # the call queue's thread refused (a limit on processes): as 3.12+ (gh-109047)
            self.terminate_broken(traceback.format_exception(error))

    def add_call_item_to_queue(self) -> None:
        # The stdlib replaces a worker that left at max_tasks_per_child unless its idle-worker semaphore
        # holds a token, which may be one a worker left before it went: then nothing runs the queued
        # calls, for ever (CPython gh-115634, fixed in 3.13.x and 3.14). Replaced here, as the fix does.
        # The lock only then, as the stdlib's replacement takes it: a submit may hold it meanwhile (gh-105829).
        if len(self.processes) < min(self.seen, self.wanted) and self.pending_work_items:
            with self.shutdown_lock:
                if len(self.processes) < self.wanted and (executor := self.executor_reference()):
                    executor._spawn_process()
        self.seen = len(self.processes)
        super().add_call_item_to_queue()

    def shutdown_workers(self) -> None:
        super().shutdown_workers()
        # The stops are sent. A worker killed as it waited for a call holds the call queue's lock: the others
        # never read their stop (the stdlib's join waited for ever), and are stopped as a broken executor's.
        processes = list(self.processes.values())
        while (live := [p for p in processes if p.exitcode is None]) and not any(p.exitcode for p in processes):
            wait([p.sentinel for p in live], 0.01)
        for p in live:
            p.terminate()

    def terminate_broken(self, cause: Any, *args: Any) -> None:
        lost = self._lost_worker()
        if lost is None:
            super().terminate_broken(cause, *args)
            return
        message = f"{lost} The process pool is not usable anymore; create a new one."
        # As the standard's from 3.15: an error per future (no shared traceback), its cause the
        # remote traceback's text, naming the process and its exit code.
        remote = "\n'''\n" + f"{lost}\nProcess {lost.pid} terminated abruptly with exit code {lost.exitcode}" + "'''"
        for work_item in self.pending_work_items.values():
            broken = BrokenProcessPool(message)
            broken.__cause__ = process._RemoteTraceback(remote)  # type: ignore[arg-type]  # stdlib private; it takes the text (typeshed says a traceback)
            with contextlib.suppress(InvalidStateError):  # cancelled meanwhile
                work_item.future.set_exception(broken)
        self.pending_work_items.clear()
        super().terminate_broken(cause)

    def _lost_worker(self) -> Optional[WorkerLostError]:
        workers = list(self.processes.values())
        dead = set(wait([p.sentinel for p in workers], timeout=0))
        for index, p in enumerate(workers):
            if p.sentinel in dead:
                p.join(1.0)
                if p.exitcode:
                    end = WorkerExited(0, index, p.exitcode, pid=p.pid or 0)
                    error = lost_error(end, "while the executor's futures were running or pending", "Their futures fail with this error.")
                    error.args = (error.args[0].replace("Pool worker", "ProcessPoolExecutor worker", 1),)
                    return error
        return None


def _results_reader(fd: int, processes: Dict[int, Any]) -> Callable[[], Any]:
    """The manager thread's ``recv`` of the result pipe, which reads no further than one message (the manager
    waits on the pipe). The stdlib's waits for ever for the rest of one whose writer was killed as it sent it; this
    one gives up once a worker failed (that breaks the executor) and no byte came for 0.1 s; a clean exit does not."""
    def read(n: int) -> bytearray:
        data, got = bytearray(n), 0
        while got < n:
            if _posix.ready(fd, 0.1):
                if not (k := os.readv(fd, [memoryview(data)[got:]])):
                    raise EOFError
                got += k
            elif any(p.exitcode for p in list(processes.values())):
                raise EOFError("a worker died in the middle of sending a result")
        return data

    def recv() -> Any:
        size, = _LENGTH.unpack(read(4))
        return _pickling.loads_whole(read(_LONG_LENGTH.unpack(read(8))[0] if size == -1 else size))
    return recv


class ProcessPoolExecutor(process.ProcessPoolExecutor):
    """``concurrent.futures.ProcessPoolExecutor`` on nbmp: cloudpickle, sharing, clear crashes.

    Same arguments and API as the standard executor (``submit``, ``map`` with
    ``chunksize``, ``shutdown(wait, cancel_futures=...)``, context manager, usable with
    ``asyncio``'s ``loop.run_in_executor``); ``mp_context=None`` means nbmp's default
    context. Calls may be lambdas or cell-defined functions under every start method.
    A worker that dies makes the pending futures raise ``BrokenProcessPool`` naming its
    exit code or signal.

    Example::

        >>> with nbmp.ProcessPoolExecutor(2) as ex:
        ...     list(ex.map(lambda x: x * x, range(4)))
        [0, 1, 4, 9]
    """

    _mp_context: Any
    _broken: Any
    _shutdown_thread: bool
    _shutdown_lock: Any
    _executor_manager_thread: Any
    _executor_manager_thread_wakeup: Any
    _processes: Dict[int, Any]

    def __init__(self, max_workers: Optional[int] = None, mp_context: Any = None,
                 initializer: Optional[Callable[..., Any]] = None, initargs: Tuple[Any, ...] = (),
                 **kwargs: Any) -> None:
        if mp_context is None and kwargs.get("max_tasks_per_child") is not None:
            mp_context = default_context.get_context("spawn")  # as the standard picks its spawn context: fork cannot replace workers
        self._inherited = MainObjects()
        if callable(initializer):  # the __main__ names it sets stay the worker's
            initializer = Initializer(initializer)
        # Its workers ignore SIGINT and die with this process, as a Pool's do (a standard context stays as given).
        super().__init__(max_workers, workers_context(mp_context), initializer, initargs, **kwargs)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Future[Any]":
        """Schedule ``fn(*args, **kwargs)``; it is pickled now, by nbmp's pickler (cloudpickle)."""
        inherited = self._workers_inherit()
        try:
            with _pickling.sending_to(inherited):
                data = _pickling.dumps_explained((fn, args, kwargs), {"the function": fn, "args": args,
                                                                      "kwargs": kwargs},
                                                 "submit it to a ProcessPoolExecutor")
        except Exception as exc:  # the standard executor fails the future, not the call: so does nbmp
            # A no-op takes the call's place, for a submit's other steps (a worker started on demand,
            # the manager thread running); the future fails now, not in the queue's feeder thread
            # as the standard one does, where a shutdown meanwhile could deadlock (CPython gh-125451).
            super().submit(int)
            failed: Future[Any] = Future()
            failed.set_exception(exc)
            return failed
        except BaseException:  # an interrupt: the manager thread stops the workers forked above at shutdown
            with self._shutdown_lock:
                self._start_executor_manager_thread()
            raise
        return super().submit(_call_pickled, _pickling.Pickled(data), inherited)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._shutdown_lock:  # workers forked by a submit an interrupt cut before its manager thread: it stops them
            if self._processes and self._executor_manager_thread is None:
                with contextlib.suppress(OSError, RuntimeError):  # refused: the workers are stopped
                    self._start_executor_manager_thread()
        super().shutdown(wait, cancel_futures=cancel_futures)

    def _workers_inherit(self) -> Optional[MainObjects]:
        """Under fork, what the workers inherited of ``__main__`` (started here, before the first call is
        pickled), which ``submit`` pickles under and the worker sends its value under; else None."""
        if not self._forks():
            return None
        with self._shutdown_lock:
            if not self._processes and not self._broken and not self._shutdown_thread:
                self._launch_processes()  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        return self._inherited

    def _forks(self) -> bool:
        return bool(self._mp_context.get_start_method() == "fork")

    @_interrupts.shielded  # a program's signal handler that raises waits until the worker is recorded
    def _spawn_process(self) -> None:
        if self._forks():
            self._inherited.record()  # just before the worker's fork
        try:
            super()._spawn_process()  # type: ignore[misc]  # stdlib private: typeshed omits it
        except OSError:
            if self._executor_manager_thread is None:
                self._stop_workers()
            raise

    def _stop_workers(self) -> None:
        """Stop the workers started when a fork or a thread is refused (a limit on processes): the
        manager thread that would stop them could not start, and the stdlib leaves them for ever."""
        self._executor_manager_thread = None
        for worker in self._processes.values():
            worker.terminate()
            worker.join()
        self._processes.clear()

    @_interrupts.shielded  # and until the workers forked at once have the thread that stops them
    def _start_executor_manager_thread(self) -> None:
        # The stdlib's, building nbmp's manager thread (the stdlib names its class inline).
        if self._executor_manager_thread is None:
            if not getattr(self, "_safe_to_dynamically_spawn_children", True):  # 3.11+: under fork
                self._launch_processes()  # type: ignore[attr-defined]  # stdlib private
            thread = self._executor_manager_thread = _ManagerThread(self)
            try:
                thread.start()
            except RuntimeError:
                self._stop_workers()
                raise
            process._threads_wakeups[thread] = self._executor_manager_thread_wakeup
