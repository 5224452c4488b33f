"""What workers report to the parent: the one record that exceptions, the text renderer
and the dashboard all read.

Small frozen dataclasses made in the parent and handed to *sinks* (anything with ``handle(event)``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Protocol, Set

from .ends import exit_signal, how_it_ended, likely_cause

__all__ = ["Event", "RunStarted", "WorkerStarted", "WorkerStats", "WorkerOutput", "WorkerRaised", "WorkerExited",
           "TaskProgress", "TaskRan", "RunFinished", "EventSink", "Broadcast", "deliver"]


@dataclass(frozen=True)
class Event:
    """Base of every event: ``time`` is seconds since the epoch, when it was observed."""

    time: float = field(default_factory=time.time, kw_only=True)


@dataclass(frozen=True)
class RunStarted(Event):
    """A run (a ``spawn`` call, a Pool map, a ``%%nbmp`` cell) began."""

    run_id: int
    target: str
    start_method: str
    nprocs: int


@dataclass(frozen=True)
class WorkerStarted(Event):
    """A worker started; ``host`` and ``worker`` (its Dask worker's address) are set for a cluster run."""

    run_id: int
    index: int
    pid: int
    host: str = ""
    worker: str = ""


@dataclass(frozen=True)
class WorkerStats(Event):
    """A worker's CPU (percent of one core) and resident memory, measured on its own host
    (a cluster rank's; on this machine the dashboard samples the pid itself)."""

    run_id: int
    index: int
    cpu_percent: Optional[float]
    rss: Optional[int]


@dataclass(frozen=True)
class WorkerOutput(Event):
    """One whole line (without its newline) a worker wrote to ``stream``, as a terminal
    shows it (carriage returns applied: what follows one overwrites the line's start).

    ``status=True``: not a whole line yet but the line the worker is redrawing with
    carriage returns, a progress bar's: it replaces the worker's previous status on that
    stream, ``""`` removes it, and the next whole line from the stream ends it (at most
    ten a second per run; see docs/spawn.md).

    Example::

        >>> WorkerOutput(run_id=1, index=0, stream="stderr", line=" 40%|####  |", status=True).status
        True
    """

    run_id: int
    index: int
    stream: str  # "stdout" or "stderr"
    line: str
    status: bool = False


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
    """The worker process ended: the one record of a worker's end, which spawn's errors, the
    Pool's ``WorkerLostError`` and the dashboard all read.

    ``exitcode`` as ``Popen.returncode`` (negative: killed by that signal); ``killed_by_us``:
    nbmp ended it, and ``stopped`` says why when known (a key of ``ends.STOP_REASONS``:
    ``"failure"``, ``"stop"``, ``"interrupt"``, ``"close"``); ``pid``; ``rss``: its resident
    memory in bytes (peak, or last sampled) or None.

    Example::

        >>> WorkerExited(run_id=1, index=0, exitcode=-9, rss=3 << 30).signal_name
        'SIGKILL'
    """

    run_id: int
    index: int
    exitcode: int
    killed_by_us: bool = False
    pid: int = 0
    rss: Optional[int] = None
    stopped: str = ""

    @property
    def signal_name(self) -> Optional[str]:
        """``"SIGKILL"`` for a worker killed by SIGKILL, else None."""
        return exit_signal(self.exitcode)

    @property
    def how(self) -> str:
        """``"was killed by SIGKILL"`` or ``"exited with code 3"``."""
        return how_it_ended(self.exitcode)

    @property
    def cause(self) -> Optional[str]:
        """What probably ended it (see ``ends.likely_cause``); None for a clean exit."""
        stopped = self.stopped or ("close" if self.killed_by_us else "")
        return likely_cause(self.exitcode, stopped, self.rss)


@dataclass(frozen=True)
class TaskProgress(Event):
    """``done`` of ``total`` tasks finished (``index`` is None for a run-wide count)."""

    run_id: int
    index: Optional[int]
    done: int
    total: Optional[int]


@dataclass(frozen=True)
class TaskRan(Event):
    """Worker ``index`` ran ``count`` tasks (a Pool chunk) from ``start`` to ``end`` (epoch
    seconds); ``outcome`` is "ok", "raised" (a task raised) or "lost" (the worker died)."""

    run_id: int
    index: int
    start: float
    end: float
    outcome: str
    count: int = 1


@dataclass(frozen=True)
class RunFinished(Event):
    run_id: int
    ok: bool


class EventSink(Protocol):
    def handle(self, event: Event) -> None: ...


def deliver(sink: EventSink, event: Event, failed: Set[int]) -> None:
    """Hand ``event`` to ``sink``; a sink that raises never breaks the run: one RuntimeWarning per sink
    and run (its id goes into the caller's ``failed``)."""
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
