"""What runs on a Dask worker for one rank of ``nbmp.spawn(..., cluster=)``.

The Dask task forks one nbmp worker process and supervises it, so the rank's output is relayed
at the descriptor level, its end is a real exit code or signal, a cancelled task stops at once
(the child is killed, the Dask worker lives on), and the child gets nbmp's fork safety. Output and
ends reach the client as Dask events on the run's topic (``log_event``).
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .._backend import cells as _cells, pickling as _pickling
from .._base import Event, ProcessException, ProcessRaisedException, WorkerExited, WorkerOutput, WorkerRaised
from .._forking import Launch, registry as _registry
from .._spawn import spawn

__all__ = ["RankJob", "RankOutcome", "run_rank", "topic_of", "dumps_or_none"]

POLL = 0.1  # seconds between looks at whether the client cancelled this rank


def topic_of(run_key: str) -> str:
    return f"nbmp-{run_key}"


@dataclass(frozen=True)
class RankJob:
    """What every rank of a run gets besides the payload (``fn`` and ``args``, pickled once)."""

    run_key: str
    world_size: int
    settings: Dict[str, Any]  # the client's fork-safety settings: base_seed, threads
    local_ranks: Dict[str, int]  # worker address -> ranks on its host (the thread budget's divisor)
    grace_period: float


@dataclass(frozen=True)
class RankOutcome:
    """How a rank ended: ``kind`` is "ok" (``value``: the return value pickled by nbmp),
    "raised" (``exc_type``, ``message``, ``traceback``, ``pickled`` exception or None),
    "exited" (``exitcode``, negative for a signal) or "stopped" (cancelled by the client)."""

    kind: str
    rank: int
    pid: int
    value: Optional[bytes] = None
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    pickled: Optional[bytes] = None
    exitcode: int = 0


class _AsRank:
    """The child's target: ``fn(rank, *args)`` with the rank's seeds and thread cap."""

    def __init__(self, fn: Any, rank: int, job: RankJob, cells: Dict[str, Any], address: str) -> None:
        self.fn, self.rank, self.job, self.cells, self.address = fn, rank, job, cells, address

    def __call__(self, _index: int, *args: Any) -> Any:
        settings = dict(self.job.settings)
        if settings.get("threads") is None:  # cores // ranks on this host, as on one machine
            settings["threads"] = max(1, (os.cpu_count() or 1) // self.job.local_ranks.get(self.address, 1))
        _registry.child_started(Launch(index=self.rank, nprocs=self.job.world_size, base_seed=settings.get("base_seed"),
                                       threads=settings.get("threads")))
        _cells.install_cell_sources(self.cells)
        return self.fn(self.rank, *args)


class _Relay:
    """The sink of the rank's local run: lines and the end go to the client as Dask events."""

    def __init__(self, worker: Any, topic: str, rank: int) -> None:
        self.worker, self.topic, self.rank = worker, topic, rank
        self.raised: Optional[WorkerRaised] = None
        self.exitcode = 0

    def send(self, *msg: Any) -> None:
        self.worker.log_event(self.topic, [msg[0], self.rank, *msg[1:]])

    def handle(self, event: Event) -> None:
        if isinstance(event, WorkerOutput):
            self.send("out", event.stream, event.line, event.status)
        elif isinstance(event, WorkerRaised):
            self.raised = event
        elif isinstance(event, WorkerExited):
            self.exitcode = event.exitcode


def run_rank(payload: bytes, rank: int, job: RankJob) -> RankOutcome:
    """The Dask task of one rank (see the module docstring)."""
    from distributed import get_worker
    worker = get_worker()
    key = worker.get_current_task()
    fn, args, cells = pickle.loads(payload)
    relay = _Relay(worker, topic_of(job.run_key), rank)
    try:
        # Dask's own threads (the Nanny's watch, the event loop) run in every worker; the rank's
        # child never uses them, and nbmp's fork handlers reset the locks it does use.
        known = _registry.hazards_known.set(True)
        try:
            context = spawn(_AsRank(fn, rank, job, cells, worker.address), args, nprocs=1, join=False,
                            output="none", dashboard=False, sinks=[relay])
        finally:
            _registry.hazards_known.reset(known)
        pid = context.pids()[0]
        relay.send("started", pid, socket.gethostname(), worker.address)
        outcome = _supervise(context, worker, key, rank, pid, relay, job.grace_period)
    finally:
        relay.send("end")
    return outcome


def _supervise(context: Any, worker: Any, key: Any, rank: int, pid: int, relay: _Relay,
               grace: float) -> RankOutcome:
    stats = _Stats(pid)
    try:
        while not context.join(timeout=POLL):
            if _cancelled(worker, key):
                return _stop(context, rank, pid, grace)
            stats.report(relay)
    except ProcessException as exc:
        return _failure(exc, rank, pid, relay)
    return RankOutcome("ok", rank, pid, value=_pickling.dumps(context.results[0]))


class _Stats:
    """The rank's CPU and memory for the client's dashboard, measured here (psutil comes with Dask)."""

    EVERY = 1.0  # seconds

    def __init__(self, pid: int) -> None:
        import psutil
        self.pid, self.psutil = pid, psutil
        self.process: Any = None  # psutil.Process, made at the first look (untyped)
        self.next = time.monotonic()

    def report(self, relay: _Relay) -> None:
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + self.EVERY
        try:  # the rank may have ended meanwhile
            self.process = self.process or self.psutil.Process(self.pid)
            with self.process.oneshot():
                relay.send("stats", self.process.cpu_percent(None), self.process.memory_info().rss)
        except (self.psutil.NoSuchProcess, self.psutil.AccessDenied, self.psutil.ZombieProcess):
            pass


def _cancelled(worker: Any, key: Any) -> bool:
    task = worker.state.tasks.get(key)
    return task is None or task.state in ("cancelled", "released", "forgotten")


def _stop(context: Any, rank: int, pid: int, grace: float) -> RankOutcome:
    context._supervisor.stop(grace)  # SIGTERM, then SIGKILL after the grace period
    deadline = time.monotonic() + grace + 5.0
    while time.monotonic() < deadline:
        try:
            if context.join(timeout=POLL):
                break
        except ProcessException:
            break
    return RankOutcome("stopped", rank, pid)


def _failure(exc: ProcessException, rank: int, pid: int, relay: _Relay) -> RankOutcome:
    raised = relay.raised
    if isinstance(exc, ProcessRaisedException) and raised is not None:
        pickled = dumps_or_none(exc.__cause__) if exc.__cause__ is not None else None
        return RankOutcome("raised", rank, pid, exc_type=raised.exc_type, message=raised.message,
                           traceback=_strip_own_frame(raised.traceback), pickled=pickled)
    return RankOutcome("exited", rank, pid, exitcode=int(getattr(exc, "exit_code", relay.exitcode) or 1))


def dumps_or_none(exc: BaseException) -> Optional[bytes]:
    """``exc`` pickled by nbmp's pickler, or None if it cannot be."""
    try:
        return _pickling.dumps(exc)
    except Exception:  # the message and traceback tell the story anyway
        return None


def _strip_own_frame(text: str) -> str:
    """Drop ``_AsRank.__call__``'s frame: the traceback starts at ``fn`` as on one machine."""
    lines: List[str] = text.splitlines(keepends=True)
    here = os.path.splitext(__file__)[0]
    for i, line in enumerate(lines):
        if line.lstrip().startswith("File") and here in line and "__call__" in line:
            end = i + 1
            while end < len(lines) and lines[end].startswith("    ") and not lines[end].lstrip().startswith("File"):
                end += 1
            return "".join(lines[:i] + lines[end:])
    return text
