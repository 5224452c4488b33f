"""The parent's watcher of one ``spawn`` run: a thread that relays output, collects
results, reaps workers, and stops the others when one fails.

One thread and selector watch every worker's output, result pipe and sentinel, which keeps each
worker's events in order (lines, result, exit), stops the others on a failure even when nobody
joins, and leaves ``join`` a plain, interruptible wait. Its only lock guards the SIGTERM/SIGKILL
deadlines that ``stop`` and ``joining`` move, and is never held across a blocking call.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import pickle
import selectors
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._backend.popen_fork import peak_rss, status_lost
from .._backend.posix import WakeUp
from .._forking import ForkLock
from .._base import RunFinished, WorkerExited, WorkerOutput, WorkerRaised
from .output import STATUS_INTERVAL, LineSplitter

__all__ = ["Worker", "Supervisor"]

# Held while a supervisor handles what its workers sent: see nbmp._forking.ForkLock.
_SAFE_POINT = ForkLock("nbmp spawn supervisor")

# torch's spawn logger, in torch's words, so a logging set-up for torch's spawn applies (torch is not imported).
log = logging.getLogger("torch.multiprocessing.spawn")

# After a failure in a run nobody joins (join=False, no join call yet): how long a join may
# take to come and decide the stop, as torch's join decides it, before nbmp stops the others itself.
UNJOINED_STOP_DELAY = 1.0


@dataclass
class Worker:
    """The parent's record of one worker."""

    index: int
    process: BaseProcess
    result_pipe: Connection
    receipt_pipe: Connection  # the write end of the pipe that carries the parent's receipt (see worker.py)
    output_pipes: Dict[int, str] = field(default_factory=dict)  # read fd -> "stdout" | "stderr"
    outcome: Optional[Tuple[Any, ...]] = None  # the worker's message, unpickled: ("ok", value) or ("raised", Remote)
    exitcode: Optional[int] = None
    killed_by_us: bool = False
    end: Optional[WorkerExited] = None  # the record of its end, once it has ended

    @property
    def failed(self) -> bool:  # a worker that sent nothing and whose exit status the program took: unknown, not ok
        return bool(self.exitcode) or (self.outcome[0] != "ok" if self.outcome is not None else status_lost(self.process))


class Supervisor:
    """Watches one run's workers from a daemon thread; see the module docstring."""

    def __init__(self, run_id: int, workers: List[Worker], events: Any, flush: Callable[[], None],
                 grace_period: float, joined: bool = True) -> None:
        self.run_id = run_id
        self.workers = workers
        self.events = events
        self.grace_period = grace_period
        # After a failure, how long the others may take to end on their own before SIGTERM (torch's
        # join(grace_period=...)); 0: at once. ``joined``: a join is waiting, or has been called.
        self.patience = 0.0
        self.joined = joined
        self.failure: Optional[Worker] = None  # the first worker that failed on its own
        self.interrupted = False
        self.stopped = False  # by the user (the dashboard's Stop button), while workers still ran
        self.crash: Optional[BaseException] = None  # a bug in the loop itself
        self.done = threading.Event()
        self.thread = threading.Thread()  # the supervising one, once started
        self._flush = flush
        self._kill_at: Optional[float] = None
        self._terminate_at: Optional[float] = None  # a failure's SIGTERM, once its patience ends
        self._awaiting_join = False  # _terminate_at waits for a join to come (UNJOINED_STOP_DELAY)
        self._told = False  # the stop is a failure's: its signals are logged
        self._killed: set[int] = set()  # the workers whose SIGKILL was logged
        self._closed = False
        self._lock = threading.Lock()
        self._results_pending: set[int] = set()
        self._wakeup = WakeUp()  # stop() wakes the loop through it
        self._selector = selectors.DefaultSelector()
        self._splitters: Dict[int, LineSplitter] = {}
        self._emits: Dict[int, Callable[..., None]] = {}  # output fd -> its _emitter
        self._statuses_at = 0.0  # the next status lines may be passed on from then (time.monotonic)

    def start(self) -> None:
        # The caller's context: ipykernel keeps the current cell in a context variable. A target in
        # this module makes the thread nbmp's own to fork safety (nbmp._forking.threads).
        self.thread = threading.Thread(target=_supervise, args=(self, contextvars.copy_context()),
                                       name=f"nbmp-spawn-{self.run_id}", daemon=True)
        self.thread.start()

    def stop(self, grace_period: float) -> None:
        """From any thread: SIGTERM every live worker now, SIGKILL after ``grace_period``."""
        with self._lock:
            if self._closed:
                return
            deadline = time.monotonic() + grace_period
            self._kill_at = deadline if self._kill_at is None else min(self._kill_at, deadline)
            self._terminate_at, self._awaiting_join = None, False
            self._terminate_live()
            self._wakeup.set()

    def joining(self, grace_period: Optional[float]) -> None:
        """A join call (torch's rule): after a failure, the others get ``grace_period`` seconds
        to end on their own before SIGTERM, then as long again before SIGKILL; None: SIGTERM at
        once, SIGKILL after the run's grace period."""
        with self._lock:
            if grace_period is not None:
                self.grace_period = grace_period
            self.patience = grace_period or 0.0
            self.joined = True
            if self._awaiting_join:  # a failure came before any join: this one decides
                self._awaiting_join = False
                self._terminate_at = time.monotonic() + self.patience
                self._wakeup.set()

    def stop_by_user(self, grace_period: float) -> None:
        """The dashboard's Stop: stop the run; its caller gets an error, never a normal return."""
        with self._lock:
            if self._closed:
                return  # the run had already ended: its results stand
            self.stopped = True
        self.stop(grace_period)

    # -- The loop ----------------------------------------------------------------------------------

    def _main(self) -> None:
        """The run, from its start to its end (every worker reaped)."""
        try:
            for worker in self.workers:  # started: its sentinel exists
                self._selector.register(worker.process.sentinel, selectors.EVENT_READ, ("exit", worker))
            while any(w.exitcode is None for w in self.workers):
                self._step()
        except BaseException as exc:  # a bug here must not leave join() waiting forever
            self.crash = exc
            for worker in self.workers:
                if worker.exitcode is None:
                    worker.process.kill()
                    worker.process.join()
        finally:
            self._close()
            self.events.handle(RunFinished(self.run_id, ok=self.failure is None and not self.interrupted
                                           and not self.stopped and self.crash is None))
            self._flush()
            self.done.set()

    def prepare(self) -> Tuple[int, ...]:
        """Before the forks (after them each page written is copied per worker): watch the wake-up pipe and
        every worker's pipes; returns the descriptors a worker forked meanwhile must close."""
        self._selector.register(self._wakeup, selectors.EVENT_READ, ("wake", None))
        for worker in self.workers:
            self._selector.register(worker.result_pipe, selectors.EVENT_READ, ("result", worker))
            self._results_pending.add(worker.index)
            for fd, stream in worker.output_pipes.items():
                os.set_blocking(fd, False)
                self._emits[fd] = emit = self._emitter(worker.index, stream)
                self._splitters[fd] = LineSplitter(emit)
                self._selector.register(fd, selectors.EVENT_READ, ("output", worker))
        return (*self._wakeup.descriptors(), self._selector.fileno())

    def discard(self) -> None:
        """The run did not start (a worker's start failed): let go of the selector and the
        wake-up pipe; the workers' pipes are the starter's to close."""
        self._selector.close()
        self._wakeup.close()
        self._splitters.clear()
        self._emits.clear()  # their closures hold this supervisor: no cycle may keep the workers' records

    def _emitter(self, index: int, stream: str) -> Callable[..., None]:
        def emit(line: str, status: bool = False) -> None:
            self.events.handle(WorkerOutput(self.run_id, index, stream, line, status=status))
        return emit

    def _pass_statuses(self, now: float) -> bool:
        """Pass on the status lines that changed (progress bars), at most every STATUS_INTERVAL."""
        if now < self._statuses_at:
            return False
        passed = False
        for fd, splitter in self._splitters.items():
            passed |= self._pass_status(fd, splitter)
        if passed:
            self._statuses_at = now + STATUS_INTERVAL
        return passed

    def _pass_status(self, fd: int, splitter: LineSplitter) -> bool:
        status = splitter.take_status()
        if status is None:
            return False
        self._emits[fd](status, True)
        return True

    def _statuses_due(self) -> Optional[float]:
        """When the status lines waiting to be passed on are due, or None if none waits."""
        return self._statuses_at if any(s.status_waiting for s in self._splitters.values()) else None

    def _step(self) -> None:
        with self._lock:
            kill_at, terminate_at = self._kill_at, self._terminate_at
        due = min((t for t in (kill_at, terminate_at, self._statuses_due()) if t is not None), default=None)
        timeout = None if due is None else max(0.0, due - time.monotonic())
        ready = self._selector.select(timeout)
        with _SAFE_POINT:  # nbmp forks only between steps, never mid-read or mid-write
            wrote = self._handle(ready)
            wrote |= self._pass_statuses(time.monotonic())
        if wrote:
            self._flush()
        now = time.monotonic()
        if kill_at is not None and now >= kill_at:
            for worker in self.workers:
                if worker.exitcode is None:
                    if self._told and worker.index not in self._killed:
                        self._killed.add(worker.index)
                        log.warning("Unable to shutdown process %s via SIGTERM , forcefully exiting via SIGKILL", worker.process.pid)
                    worker.process.kill()
        elif terminate_at is not None and now >= terminate_at and any(w.exitcode is None for w in self.workers):
            self.stop(self.grace_period)

    def _handle(self, ready: List[Tuple[selectors.SelectorKey, int]]) -> bool:
        wrote = False
        for key, _ in ready:
            kind, worker = key.data
            # An earlier key of this batch may have finished the worker and closed its pipes.
            if kind == "output" and key.fd in self._splitters:
                wrote |= self._read_output(key.fd)
            elif kind == "result" and worker.index in self._results_pending:
                self._read_result(worker)
            elif kind == "exit" and worker.exitcode is None:
                self._finish(worker)
                wrote = True
            elif kind == "wake":
                self._wakeup.clear()
        return wrote

    def _read_output(self, fd: int) -> bool:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        if chunk:
            self._splitters[fd].feed(chunk)
        else:
            self._end_output(fd)
        return True

    def _end_output(self, fd: int) -> None:
        splitter = self._splitters.pop(fd)
        splitter.close()
        self._pass_status(fd, splitter)  # a status the worker erased before it ended: cleared
        del self._emits[fd]  # its closure holds this supervisor: no cycle may outlive the run
        self._selector.unregister(fd)
        os.close(fd)

    def _read_result(self, worker: Worker) -> None:
        self._selector.unregister(worker.result_pipe)
        self._results_pending.discard(worker.index)
        try:
            if waits := (data := worker.result_pipe.recv_bytes()) == b"wait":  # a pickle starts with its protocol: never this
                data = worker.result_pipe.recv_bytes()
        except (EOFError, OSError):
            return  # killed, or left by sys.exit: the exit code will tell
        try:
            worker.outcome = pickle.loads(data)
        except Exception:
            worker.outcome = ("unloadable", traceback.format_exc())
        if waits:  # the receipt (worker.py), SIGPIPE blocked: to a worker gone meanwhile, EPIPE; its signal taken here
            unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
            with contextlib.suppress(OSError):
                worker.receipt_pipe.send_bytes(b"")
            if signal.SIGPIPE in signal.sigpending():
                signal.sigwait({signal.SIGPIPE})
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)

    def _finish(self, worker: Worker) -> None:
        """The worker's process ended: take what it left in its pipes, then reap it."""
        self._selector.unregister(worker.process.sentinel)
        for fd in list(worker.output_pipes):
            while fd in self._splitters and self._read_output(fd):
                pass
            if fd in self._splitters:
                self._end_output(fd)
        if worker.index in self._results_pending:
            if worker.result_pipe.poll(0):
                self._read_result(worker)
            else:
                self._selector.unregister(worker.result_pipe)
                self._results_pending.discard(worker.index)
        worker.exitcode = _reap(worker.process)
        self._report_exit(worker)

    def _report_exit(self, worker: Worker) -> None:
        if worker.outcome is not None and worker.outcome[0] == "raised":
            remote = worker.outcome[1]
            self.events.handle(WorkerRaised(self.run_id, worker.index, remote.exc_type, remote.message, remote.text))
        worker.end = WorkerExited(self.run_id, worker.index, worker.exitcode or 0, worker.killed_by_us,
                                  pid=int(worker.process.pid or 0), rss=peak_rss(worker.process),
                                  stopped=self._stop_reason() if worker.killed_by_us else "")
        self.events.handle(worker.end)
        if worker.failed and not worker.killed_by_us and self.failure is None:
            self.failure = worker
            with self._lock:
                self._told = self._kill_at is None  # not already stopping (an interrupt, the Stop button)
                delay = self.patience if self.joined else UNJOINED_STOP_DELAY
                if self._told and delay > 0:
                    self._terminate_at, self._awaiting_join = time.monotonic() + delay, not self.joined
                    return
            self.stop(self.grace_period)

    def _stop_reason(self) -> str:
        """Why nbmp is stopping this run's workers (a key of ``nbmp._base.ends.STOP_REASONS``)."""
        return "interrupt" if self.interrupted else "stop" if self.stopped else "failure" if self.failure is not None else "close"

    def _terminate_live(self) -> None:
        for worker in self.workers:
            if worker.exitcode is None:
                if self._told and not worker.killed_by_us:
                    log.warning("Terminating process %s via signal SIGTERM", worker.process.pid)
                worker.killed_by_us = True
                worker.process.terminate()

    def _close(self) -> None:
        with self._lock:
            self._closed = True
        for fd in list(self._splitters):
            self._end_output(fd)
        for worker in self.workers:
            worker.result_pipe.close()
            worker.receipt_pipe.close()
        self._selector.close()
        self._wakeup.close()


def _supervise(supervisor: Supervisor, context: contextvars.Context) -> None:
    """The supervisor thread: the run, in a copy of the caller's context."""
    context.run(supervisor._main)


def _reap(process: BaseProcess) -> int:
    # The standard join, which also drops it from the stdlib's children (holding its sentinel pipe
    # open until the next start). Another thread may be reaping it (Process.start() polls every
    # child), and its waitpid can win: then exitcode appears a moment later.
    while True:
        process.join(0.01)
        if (code := process.exitcode) is not None:
            return code
