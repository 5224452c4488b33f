"""The dashboard state as HTML fragments for the widget view: pure functions (no
ipywidgets import), so what the widgets will show is testable without a front end."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import List, Optional, Tuple

from ._state import DashboardState, RunState, WorkerState
from ._text import WORKER_COLUMNS, counts_text, run_title, shm_text, summary_table, worker_cells

__all__ = ["RunSnapshot", "Snapshot", "snapshot"]

STATE_COLORS = {"starting": "#888", "running": "#1565c0", "done": "#2e7d32", "failed": "#c62828",
                "killed": "#ef6c00"}


@dataclass(frozen=True)
class RunSnapshot:
    """Everything one run's widgets show, as trait values."""

    run_id: int
    title: str
    progress: Optional[float]  # None: no bar
    progress_label: str
    table: str
    failures: Tuple[Tuple[str, str], ...]  # (accordion title, traceback HTML) per failed worker
    outputs: Tuple[Tuple[int, str], ...]  # (worker index, recent output HTML) per worker that printed
    finished: bool


@dataclass(frozen=True)
class Snapshot:
    runs: Tuple[RunSnapshot, ...] = ()
    shm: str = ""
    summary: Optional[str] = None  # the plain-text table, once no run is live


def snapshot(state: DashboardState, now: float) -> Snapshot:
    """Read the state once (under the dashboard's lock) into immutable values."""
    summary = None if state.live or not state.runs else summary_table(state, now, tracebacks=True)
    return Snapshot(tuple(_run_snapshot(run, now) for run in state.runs.values()), escape(shm_text(state.shm)),
                    summary)


def _run_snapshot(run: RunState, now: float) -> RunSnapshot:
    workers = [w for _, w in sorted(run.workers.items())]
    fraction, label = run.progress()
    return RunSnapshot(
        run_id=run.run_id,
        title=f"<b>{escape(run_title(run, now))}</b> &nbsp; {escape(counts_text(run))}",
        progress=fraction, progress_label=escape(label),
        table=_table_html(workers, now),
        failures=tuple((_failure_title(w), _traceback_html(w)) for w in workers if w.exception is not None),
        outputs=tuple((w.index, _output_html(w)) for w in workers if w.output),
        finished=run.finished,
    )


def _table_html(workers: List[WorkerState], now: float) -> str:
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{name}</th>" for name in WORKER_COLUMNS)
    rows = []
    for worker in workers:
        cells = [escape(cell) for cell in worker_cells(worker, now)]
        cells[2] = f"<span style='color:{STATE_COLORS.get(worker.state, '#000')}'>{cells[2]}</span>"
        rows.append("<tr>" + "".join(f"<td style='padding:0 8px'>{c}</td>" for c in cells) + "</tr>")
    return f"<table style='font-family:monospace'><tr>{head}</tr>{''.join(rows)}</table>"


def _failure_title(worker: WorkerState) -> str:
    exc = worker.exception
    assert exc is not None
    first = exc.message.splitlines()[0] if exc.message else ""
    return f"worker {worker.index} (pid {worker.pid}): {exc.exc_type}: {first}"[:200]


def _traceback_html(worker: WorkerState) -> str:
    exc = worker.exception
    assert exc is not None
    text = exc.traceback or f"{exc.exc_type}: {exc.message}"
    return f"<pre style='white-space:pre-wrap;color:#c62828'>{escape(text)}</pre>"


def _output_html(worker: WorkerState) -> str:
    lines = [f"<span style='color:#c62828'>{escape(o.line)}</span>" if o.stream == "stderr" else escape(o.line)
             for o in worker.output]
    return "<pre style='margin:0;white-space:pre-wrap'>" + "\n".join(lines) + "</pre>"
