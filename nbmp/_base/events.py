"""What workers report to the parent: the one record that exceptions, the text renderer
and the dashboard all read.

Events are small frozen dataclasses. They are produced in the parent (from what the
workers send or from what the parent observes, e.g. an exit code) and handed to
*sinks*: any object with a ``handle(event)`` method. Nothing here knows who listens.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Protocol, Set

__all__ = ["Event", "RunStarted", "WorkerStarted", "WorkerOutput", "WorkerRaised", "WorkerExited",
           "TaskProgress", "RunFinished", "EventSink", "Broadcast", "deliver"]


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class Event:
    """Base of every event: ``time`` is seconds since the epoch, when it was observed."""

    time: float = field(default_factory=_now, kw_only=True)


@dataclass(frozen=True)
class RunStarted(Event):
    """A run (a ``spawn`` call, a Pool map, a ``%%nbmp`` cell) began."""

    run_id: int
    target: str
    start_method: str
    nprocs: int


@dataclass(frozen=True)
class WorkerStarted(Event):
    run_id: int
    index: int
    pid: int


@dataclass(frozen=True)
class WorkerOutput(Event):
    """One whole line (without its newline) a worker wrote to ``stream``."""

    run_id: int
    index: int
    stream: str  # "stdout" or "stderr"
    line: str


@dataclass(frozen=True)
class WorkerRaised(Event):
    """The worker's target raised: the exception's type, message and formatted traceback."""

    run_id: int
    index: int
    exc_type: str
    message: str
    traceback: str


@dataclass(frozen=True)
class WorkerExited(Event):
    """The worker process ended: ``exitcode`` as ``Popen.returncode`` (negative = signal)."""

    run_id: int
    index: int
    exitcode: int
    killed_by_us: bool = False


@dataclass(frozen=True)
class TaskProgress(Event):
    """``done`` of ``total`` tasks finished (``index`` is None for a run-wide count)."""

    run_id: int
    index: Optional[int]
    done: int
    total: Optional[int]


@dataclass(frozen=True)
class RunFinished(Event):
    run_id: int
    ok: bool


class EventSink(Protocol):
    def handle(self, event: Event) -> None: ...


def deliver(sink: EventSink, event: Event, failed: Set[int]) -> None:
    """Hand ``event`` to ``sink``. A sink that raises never breaks the workers' run: its
    first failure is reported as a RuntimeWarning naming the sink and the error, and its
    id goes into ``failed`` (the caller's: one warning per sink and run, not per event)."""
    try:
        sink.handle(event)
    except Exception as exc:
        if id(sink) not in failed:
            failed.add(id(sink))
            warnings.warn(f"nbmp: the event sink {sink!r} failed on {type(event).__name__} with "
                          f"{type(exc).__name__}: {exc}; the run goes on without what it shows",
                          RuntimeWarning, stacklevel=2)


class Broadcast:
    """Hands each event to every sink; a failing sink never breaks the run (``deliver``)."""

    def __init__(self, sinks: Optional[List[EventSink]] = None) -> None:
        self.sinks: List[EventSink] = list(sinks or [])
        self._failed: Set[int] = set()

    def handle(self, event: Event) -> None:
        for sink in self.sinks:
            deliver(sink, event, self._failed)


_run_ids: Callable[[], int] = iter(range(1, 1 << 62)).__next__


def new_run_id() -> int:
    """A process-unique id for a run."""
    return _run_ids()
