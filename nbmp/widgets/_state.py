"""The dashboard's data: plain dataclasses that events are folded into.

No front end, no psutil, no wall clock (``DashboardState.clock`` is injectable, so tests need no
sleeps), no locks (the ``Dashboard`` serialises ``apply`` and the sampler's writes).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, NamedTuple, Optional, Protocol, Tuple

from .._base import events as ev
from .._base.util import space
from .._sharing import shm_usage
from ._history import Series, TaskSpan, WorkerSpans

__all__ = ["WORKER_STATES", "ExceptionInfo", "OutputLine", "WorkerState", "RunState", "ShmState", "DashboardState", "read_shm"]

# In display order; the first two are "live".
WORKER_STATES = ("starting", "running", "done", "failed", "killed")
LIVE_STATES = ("starting", "running")


@dataclass(frozen=True)
class ExceptionInfo:
    """What a worker's target raised."""

    exc_type: str
    message: str
    traceback: str


class OutputLine(NamedTuple):
    stream: str  # "stdout" or "stderr"
    line: str


@dataclass
class WorkerState:
    """One worker process of a run, as the parent knows it."""

    index: int
    max_lines: int = 20
    pid: Optional[int] = None
    host: str = ""  # a cluster rank's host ("" on this machine); its CPU and memory come as WorkerStats
    state: str = "starting"
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    exitcode: Optional[int] = None
    cpu_percent: Optional[float] = None  # of one core; above 100 for a multithreaded worker
    rss: Optional[int] = None  # bytes
    done: int = 0  # tasks finished (Pool workers) or progress steps reported
    total: Optional[int] = None
    exception: Optional[ExceptionInfo] = None
    output: Deque[OutputLine] = field(default_factory=deque)
    status: Optional[OutputLine] = None  # the line it redraws with carriage returns (a progress bar), if any
    cpu_history: Series = field(default_factory=Series)  # what the plots draw: every sample of the run
    rss_history: Series = field(default_factory=Series)

    def __post_init__(self) -> None:
        self.output = deque(self.output, maxlen=self.max_lines)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def elapsed(self, now: float) -> Optional[float]:
        start, end = self.start_time, self.end_time
        return None if start is None else (now if end is None else end) - start


@dataclass
class RunState:
    """One run: a ``spawn`` call, a Pool map, a ``%%nbmp`` cell."""

    run_id: int
    target: str = "?"
    start_method: str = "?"
    nprocs: Optional[int] = None
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    ok: Optional[bool] = None  # None while running
    done: Optional[int] = None  # run-wide task progress (a Pool map), when reported
    total: Optional[int] = None
    workers: Dict[int, WorkerState] = field(default_factory=dict)
    spans: Dict[int, WorkerSpans] = field(default_factory=dict)  # a Pool's chunks per worker (TaskRan)
    reporting: bool = False  # a worker sent more than its start (output, progress, an exit)

    @property
    def finished(self) -> bool:
        if self.end_time is not None:
            return True
        # Without RunFinished (not sent yet, or a dashboard that missed it) a run is over once every worker it announced has exited.
        known = len(self.workers)
        return known > 0 and known >= (self.nprocs or 0) and all(w.end_time is not None for w in self.workers.values())

    @property
    def all_started(self) -> bool:
        """Every announced worker has been started (no more forks expected for this run),
        or the workers are already reporting (a run that does not announce starts)."""
        started = len(self.workers) >= (self.nprocs or 0) and all(w.state != "starting" for w in self.workers.values())
        return started or self.reporting

    def elapsed(self, now: float) -> Optional[float]:
        if self.start_time is None:
            return None
        end = self.end_time
        if end is None and self.finished:  # ended without RunFinished: stop at the last exit
            end = max(w.end_time or self.start_time for w in self.workers.values())
        return (end if end is not None else now) - self.start_time

    def counts(self) -> Dict[str, int]:
        """Workers per state, every state present (zero included), in display order."""
        counts = dict.fromkeys(WORKER_STATES, 0)
        for worker in self.workers.values():
            counts[worker.state] += 1
        return counts

    def progress(self) -> Tuple[Optional[float], str]:
        """Overall progress as a fraction (None when unknown) and its label."""
        if self.total:
            done = self.done or 0
            return min(done / self.total, 1.0), f"{done}/{self.total} tasks"
        totals = [w.total for w in self.workers.values()]
        if totals and all(totals):
            done, total = sum(w.done for w in self.workers.values()), sum(t or 0 for t in totals)
            return min(done / total, 1.0), f"{done}/{total} steps"
        n = self.nprocs or len(self.workers)
        if not n:
            return None, ""
        ended = sum(not w.live for w in self.workers.values())
        return ended / n, f"{ended}/{n} workers finished"

    def cpu_percent(self) -> Optional[float]:
        values = [w.cpu_percent for w in self.workers.values() if w.live and w.cpu_percent is not None]
        return sum(values) if values else None

    def rss(self) -> Optional[int]:
        values = [w.rss for w in self.workers.values() if w.live and w.rss is not None]
        return sum(values) if values else None


@dataclass(frozen=True)
class ShmState:
    """Shared memory in use: nbmp's segments and bytes, and the /dev/shm file system."""

    segments: Optional[int] = None
    bytes: Optional[int] = None
    dev_size: Optional[int] = None
    dev_free: Optional[int] = None


def read_shm(path: str = "/dev/shm") -> ShmState:
    """Read nbmp's shared-memory ledger (``nbmp.shm_usage()``) and the size and free space
    of ``/dev/shm``; what cannot be read stays None."""
    segments = used = size = free = None
    with contextlib.suppress(OSError, ValueError):  # the janitor is gone or answered garbage: show what else is known
        usage = shm_usage()
        segments, used = int(usage.segments), int(usage.bytes)
    with contextlib.suppress(OSError, AttributeError):  # no /dev/shm (macOS) or no statvfs (Windows)
        size, free = space(path)
    return ShmState(segments, used, size, free)


class _RunEvent(Protocol):
    """An event of one run: every event type but the base class."""

    @property
    def run_id(self) -> int: ...
    @property
    def time(self) -> float: ...


@dataclass
class DashboardState:
    """Every run a dashboard watches, folded from events by ``apply``.

    ``version`` grows with every change, so a view can skip redrawing an unchanged state.
    """

    clock: Callable[[], float] = time.time  # same time base as the events' ``time``
    max_lines: int = 20  # output lines kept per worker
    max_finished_runs: int = 10  # finished runs kept for display (a long-lived Pool runs many maps)
    runs: Dict[int, RunState] = field(default_factory=dict)
    shm: ShmState = field(default_factory=ShmState)
    shm_history: Series = field(default_factory=Series)  # nbmp's shared-memory bytes over time
    version: int = 0

    def now(self) -> float:
        return self.clock()

    @property
    def live(self) -> bool:
        return any(not run.finished for run in self.runs.values())

    @property
    def sampling_due(self) -> bool:
        """A live run has all its workers started: time to sample and redraw it."""
        return any(not run.finished and run.all_started for run in self.runs.values())

    def apply(self, event: ev.Event) -> None:
        """Fold one event into the state. Unknown event types are ignored."""
        handler = _HANDLERS.get(type(event))
        if handler is None:
            return
        handler(self, event)
        run = self.runs.get(getattr(event, "run_id", -1))
        if run is not None and not isinstance(event, _ANNOUNCEMENTS):
            run.reporting = True
        self.version += 1

    # -- what the sampler reads and writes ------------------------------------------

    def live_pids(self) -> Dict[Tuple[int, int], int]:
        """``(run_id, index) -> pid`` of every live worker whose pid is known."""
        return {(run.run_id, w.index): w.pid for run in self.runs.values() for w in run.workers.values()
                if w.live and w.pid is not None and not w.host}

    def record_samples(self, samples: Dict[Tuple[int, int], Tuple[Optional[float], Optional[int]]],
                       shm: Optional[ShmState] = None) -> None:
        now = self.clock()
        for (run_id, index), (cpu, rss) in samples.items():
            worker = self.runs[run_id].workers.get(index) if run_id in self.runs else None
            if worker is not None and worker.live:
                worker.cpu_percent, worker.rss = cpu, rss
                worker.cpu_history.add(now, cpu)
                worker.rss_history.add(now, rss)
        if shm is not None:
            self.shm = shm
            self.shm_history.add(now, shm.bytes)
        self.version += 1

    # -- folding ---------------------------------------------------------------------

    def _run(self, run_id: int, when: float) -> RunState:
        # Events of a run whose RunStarted this dashboard missed (created mid-run) still count.
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = RunState(run_id, start_time=when)
            self._forget_old_runs()
        return run

    def _worker(self, event: _RunEvent, index: int) -> WorkerState:
        run = self._run(event.run_id, event.time)
        worker = run.workers.get(index)
        if worker is None:
            worker = run.workers[index] = WorkerState(index, self.max_lines)
        return worker

    def _forget_old_runs(self) -> None:
        finished = [rid for rid, run in self.runs.items() if run.finished]
        for rid in finished[:max(0, len(finished) - self.max_finished_runs)]:
            del self.runs[rid]


def _run_started(state: DashboardState, e: ev.RunStarted) -> None:
    run = state._run(e.run_id, e.time)
    run.target, run.start_method, run.nprocs, run.start_time = e.target, e.start_method, e.nprocs, e.time
    for index in range(e.nprocs):
        run.workers.setdefault(index, WorkerState(index, state.max_lines))


def _worker_started(state: DashboardState, e: ev.WorkerStarted) -> None:
    worker = state._worker(e, e.index)
    worker.pid, worker.start_time, worker.host = e.pid, e.time, e.host
    if worker.state == "starting":
        worker.state = "running"


def _worker_stats(state: DashboardState, e: ev.WorkerStats) -> None:
    state.record_samples({(e.run_id, e.index): (e.cpu_percent, e.rss)})


def _worker_output(state: DashboardState, e: ev.WorkerOutput) -> None:
    worker = state._worker(e, e.index)
    if e.status:  # replaces the last one; "" clears it
        worker.status = OutputLine(e.stream, e.line) if e.line else None
        return
    if worker.status is not None and worker.status.stream == e.stream:
        worker.status = None  # the line it was redrawing has ended: this is it
    worker.output.append(OutputLine(e.stream, e.line))


def _worker_raised(state: DashboardState, e: ev.WorkerRaised) -> None:
    worker = state._worker(e, e.index)
    worker.exception = ExceptionInfo(e.exc_type, e.message, e.traceback)
    worker.state = "failed"


def _worker_exited(state: DashboardState, e: ev.WorkerExited) -> None:
    worker = state._worker(e, e.index)
    worker.exitcode, worker.end_time = e.exitcode, e.time
    if worker.start_time is None:
        worker.start_time = e.time
    worker.cpu_percent = None  # a dead process uses no CPU; its last RSS stays for the record
    if worker.state != "failed":
        worker.state = "killed" if e.killed_by_us else "done" if e.exitcode == 0 else "failed"


def _task_progress(state: DashboardState, e: ev.TaskProgress) -> None:
    if e.index is None:
        run = state._run(e.run_id, e.time)
        run.done, run.total = e.done, e.total
    else:
        worker = state._worker(e, e.index)
        worker.done, worker.total = e.done, e.total


def _task_ran(state: DashboardState, e: ev.TaskRan) -> None:
    run = state._run(e.run_id, e.time)
    run.spans.setdefault(e.index, WorkerSpans()).add(TaskSpan(e.start, e.end, e.outcome, e.count))
    state._worker(e, e.index).done += e.count


def _run_finished(state: DashboardState, e: ev.RunFinished) -> None:
    run = state._run(e.run_id, e.time)
    run.end_time, run.ok = e.time, e.ok
    for worker in run.workers.values():
        if worker.live:  # the run ended without telling us how this worker did
            worker.state = "done" if e.ok else "killed"
            worker.end_time, worker.cpu_percent = e.time, None
    state._forget_old_runs()


_ANNOUNCEMENTS = (ev.RunStarted, ev.WorkerStarted, ev.RunFinished)  # not yet news from the work itself
# Any: each handler takes the event type it is filed under, which a dict's type cannot say.
_HANDLERS: Dict[type, Callable[[DashboardState, Any], None]] = {
    ev.RunStarted: _run_started, ev.WorkerStarted: _worker_started, ev.WorkerOutput: _worker_output,
    ev.WorkerStats: _worker_stats, ev.WorkerRaised: _worker_raised, ev.WorkerExited: _worker_exited,
    ev.TaskProgress: _task_progress, ev.TaskRan: _task_ran, ev.RunFinished: _run_finished}
