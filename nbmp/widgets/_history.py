"""The dashboard's memory of a run over time: sampled series (CPU, RSS, shared memory)
and a Pool's task spans, with the note on chunk sizes they support.

Plain data and pure functions, bounded so a run of hours or a million tasks keeps a fixed-size
record (a full series thins itself, a worker's spans merge pairwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Series", "TaskSpan", "WorkerSpans", "pool_note", "OUTCOMES"]

OUTCOMES = ("ok", "raised", "lost")


@dataclass
class Series:
    """``(time, value)`` points of one measure over a run, at most ``capacity``: when full, every other
    point is dropped and only every ``stride``-th sample kept, so the points span the whole run."""

    capacity: int = 120
    stride: int = 1
    points: List[Tuple[float, float]] = field(default_factory=list)
    samples: int = 0  # seen so far; sample n is kept while n is a multiple of the stride

    def add(self, when: float, value: Optional[float]) -> None:
        if value is None:
            return
        self.samples += 1
        if (self.samples - 1) % self.stride:
            return
        self.points.append((when, float(value)))
        if len(self.points) >= self.capacity:
            self.points = self.points[::2]
            self.stride *= 2

    def values(self) -> List[float]:
        return [v for _, v in self.points]

    def mean(self) -> Optional[float]:
        return sum(values) / len(values) if (values := self.values()) else None


@dataclass(frozen=True)
class TaskSpan:
    """``count`` tasks a worker ran from ``start`` to ``end``, ending in ``outcome``."""

    start: float
    end: float
    outcome: str
    count: int = 1
    chunks: int = 1  # how many reported spans this one stands for (see WorkerSpans)


@dataclass
class WorkerSpans:
    """One worker's spans in time order, at most ``capacity`` (merged pairwise beyond)."""

    capacity: int = 200
    spans: List[TaskSpan] = field(default_factory=list)
    busy: float = 0.0  # seconds spent in tasks, exact whatever the merging
    tasks: int = 0
    chunks: int = 0
    largest: int = 0  # tasks in the largest chunk: the map's chunksize

    def add(self, span: TaskSpan) -> None:
        if span.outcome == "lost" and span.start >= span.end:  # its start was not reported
            span = TaskSpan(self.spans[-1].end if self.spans else span.start, span.end, span.outcome, span.count)
        self.spans.append(span)
        self.busy += max(0.0, span.end - span.start)
        self.tasks += span.count
        self.chunks += 1
        self.largest = max(self.largest, span.count)
        if len(self.spans) > self.capacity:
            self.spans = _merge_pairs(self.spans)


def _merge_pairs(spans: Sequence[TaskSpan]) -> List[TaskSpan]:
    merged: List[TaskSpan] = []
    for span in spans:
        last = merged[-1] if merged else None
        if last is not None and last.outcome == span.outcome and last.chunks <= span.chunks:
            merged[-1] = TaskSpan(last.start, max(last.end, span.end), span.outcome, last.count + span.count, last.chunks + span.chunks)
        else:
            merged.append(span)
    return merged


# -- the note: is the Pool's work well cut? ---------------------------------------------

SMALL_CHUNK = 0.005  # seconds: below this per chunk, sending tasks costs about as much as running them
IDLE_FRACTION = 0.25  # workers idle this much of the run (averaged) make a note


def pool_note(spans: Dict[int, WorkerSpans], nprocs: int, start: float, end: float) -> str:
    """A one-line hint when the chunk size left workers idle or the tasks were too small
    for processes to pay off; "" when the work was well cut (or too little is known)."""
    done = {i: s for i, s in spans.items() if s.chunks}
    chunks = sum(s.chunks for s in done.values())
    tasks = sum(s.tasks for s in done.values())
    elapsed = end - start
    if not chunks or elapsed <= 0 or nprocs < 1:
        return ""
    chunksize = max(s.largest for s in done.values())
    per_chunk = sum(s.busy for s in done.values()) / chunks
    if chunks >= 2 * nprocs and per_chunk < SMALL_CHUNK:
        larger = max(1, -(-tasks // (4 * nprocs)))  # about four chunks per worker: the stdlib's own default for map
        fix = (f"pass a larger chunksize (e.g. chunksize={larger})" if larger > chunksize
               else "the whole map is too little work for processes: run it in-process")
        return (f"tasks are small: {_ms(per_chunk)} per chunk of {chunksize}, about what sending a chunk to a process costs; {fix}")
    unused = nprocs - len(done)
    if unused > 0 and chunks < nprocs:
        return (f"{unused} of {nprocs} workers got no task: {chunks} chunk{'s' if chunks != 1 else ''} of "
                f"{chunksize} for {nprocs} workers; a smaller chunksize (e.g. chunksize="
                f"{max(1, tasks // nprocs)}) spreads them")
    idle = 1.0 - sum(s.busy for s in done.values()) / (nprocs * elapsed)
    if idle > IDLE_FRACTION and chunks < 4 * nprocs and elapsed > 10 * SMALL_CHUNK:
        return (f"workers were idle {idle:.0%} of the run, waiting on the last of {chunks} chunks of "
                f"{chunksize}; a smaller chunksize (e.g. chunksize={max(1, tasks // (4 * nprocs))}) balances "
                f"the load")
    return ""


def _ms(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs" if seconds < 0.001 else f"{seconds * 1e3:.1f} ms"
