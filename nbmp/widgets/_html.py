"""The dashboard state as HTML fragments for the widget view: pure functions (no
ipywidgets import), so what the widgets will show is testable without a front end."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import List, Optional, Tuple

from ._history import pool_note
from ._state import DashboardState, RunState, WorkerState
from ._svg import as_images, legend, sparkline, timeline
from ._text import WORKER_COLUMNS, counts_text, failed, fmt_bytes, fmt_cpu, run_title, shm_text, summary_table, worker_cells

__all__ = ["RunSnapshot", "Snapshot", "snapshot", "static_html", "html_document", "shm_html", "timeline_html"]

PLOT_COLUMN = "cpu · rss over time"

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
    failed: bool  # finished, and not well: the bar turns red
    timeline: str = ""  # a Pool's tasks per worker over time, and the note on its chunks ("" for others)


@dataclass(frozen=True)
class Snapshot:
    runs: Tuple[RunSnapshot, ...] = ()
    shm: str = ""
    summary: Optional[str] = None  # the plain-text table, once no run is live


def snapshot(state: DashboardState, now: float) -> Snapshot:
    """Read the state once (under the dashboard's lock) into immutable values."""
    summary = None if state.live or not state.runs else summary_table(state, now, tracebacks=True)
    return Snapshot(tuple(_run_snapshot(run, now) for run in state.runs.values()), shm_html(state), summary)


def shm_html(state: DashboardState) -> str:
    """The shared-memory line, with nbmp's bytes in use over time."""
    values = state.shm_history.values()
    if not any(values):
        return escape(shm_text(state.shm))
    plot = sparkline(values, color="#00838f", kind="shm",
                     title=f"shared memory in use, peak {fmt_bytes(int(max(values)))}")
    return f"{escape(shm_text(state.shm))} &nbsp;{plot}"


def _run_snapshot(run: RunState, now: float) -> RunSnapshot:
    workers = [w for _, w in sorted(run.workers.items())]
    fraction, label = run.progress()
    return RunSnapshot(
        run_id=run.run_id,
        title=f"<b>{escape(run_title(run, now))}</b> &nbsp; {escape(counts_text(run))}",
        progress=fraction, progress_label=escape(label),
        table=_table_html(workers, now),
        failures=tuple((_failure_title(w), _traceback_html(w)) for w in workers if w.exception is not None),
        outputs=tuple((w.index, _output_html(w)) for w in workers if w.output or w.status),
        finished=run.finished, failed=run.finished and failed(run),
        timeline=timeline_html(run, now),
    )


def _table_html(workers: List[WorkerState], now: float) -> str:
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{name}</th>" for name in (*WORKER_COLUMNS, PLOT_COLUMN))
    rss_range = _rss_range(workers)
    rows = []
    for worker in workers:
        cells = [escape(cell) for cell in worker_cells(worker, now)]
        cells[2] = f"<span style='color:{STATE_COLORS.get(worker.state, '#000')}'>{cells[2]}</span>"
        cells.append(_plots(worker, *rss_range))
        rows.append("<tr>" + "".join(f"<td style='padding:0 8px'>{c}</td>" for c in cells) + "</tr>")
    return f"<table style='font-family:monospace'><tr>{head}</tr>{''.join(rows)}</table>"


def _rss_range(workers: List[WorkerState]) -> "tuple[float, float]":
    """One RSS scale for a run's workers: from a little under the smallest sample to the
    largest, so that growth shows (from 0, a few MiB on a 40 MiB process would not)."""
    values = [v for w in workers for v in w.rss_history.values()]
    if not values:
        return 0.0, 0.0
    low, high = min(values), max(values)
    return high, max(0.0, low - max(high - low, 0.1 * high) * 0.25)


def _plots(worker: WorkerState, rss_top: float, rss_bottom: float) -> str:
    """CPU (0 to 100 %, more for threads) and RSS (on the run's scale) over the run."""
    cpu, rss = worker.cpu_history.values(), worker.rss_history.values()
    cpu_tip = f"worker {worker.index} cpu, peak {fmt_cpu(max(cpu, default=None))}" if cpu else "no cpu samples yet"
    rss_tip = f"worker {worker.index} rss, peak {fmt_bytes(int(max(rss)))}" if rss else "no rss samples yet"
    return (sparkline(cpu, top=100.0, color="#1565c0", title=cpu_tip, kind="cpu") + " "
            + sparkline(rss, top=rss_top, bottom=rss_bottom, color="#6a1b9a", title=rss_tip, kind="rss"))


def timeline_html(run: RunState, now: float) -> str:
    """A Pool run's tasks per worker over time, a legend, and the note on its chunks."""
    if not run.spans or run.start_time is None:
        return ""
    end = run.end_time if run.end_time is not None else now
    end = max([end, *(s.spans[-1].end for s in run.spans.values() if s.spans)])
    workers = sorted(set(run.workers) | set(run.spans))
    note = pool_note(run.spans, run.nprocs or len(workers), run.start_time, end)
    tasks = sum(s.tasks for s in run.spans.values())
    head = f"<div style='font-size:90%'>tasks per worker over time ({tasks} done): {legend()}</div>"
    hint = f"<div class='nbmp-note' style='color:#ef6c00'>&#9888; {escape(note)}</div>" if note else ""
    return head + timeline(run.spans, workers, run.start_time, end) + hint


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
    if worker.status is not None:  # a progress bar being redrawn: shown as the last line, not an error
        lines.append(f"<span class='nbmp-status' style='background:#eef3f8'>{escape(worker.status.line)}</span>")
    return "<pre style='margin:0;white-space:pre-wrap'>" + "\n".join(lines) + "</pre>"


# -- the static snapshot: the same values as one self-contained HTML fragment -------------

SNAPSHOT_NOTE = "nbmp dashboard, as the run ended (a static copy kept in the notebook's output)"


def static_html(snap: Snapshot, note: str = SNAPSHOT_NOTE) -> str:
    """The dashboard as plain HTML with its plots as SVG images: no widget, no script. It
    carries the widget tree's ``nbmp-*`` classes; sections the widget folds are ``<details>``."""
    runs = "".join(_static_run(run) for run in snap.runs)
    return as_images(f"<div class='nbmp-dashboard nbmp-snapshot' style='font-size:13px'>{runs}"
                     f"<div class='nbmp-shm'>{snap.shm}</div>"
                     f"<div style='color:#888;font-size:85%'>{escape(note)}</div></div>")


def _static_run(run: RunSnapshot) -> str:
    bar = ""
    if run.progress is not None:
        color = "#1565c0" if not run.finished else ("#c62828" if run.failed else "#2e7d32")
        bar = (f"<div style='display:flex;align-items:center;gap:8px'><div style='width:300px;height:10px;"
               f"background:#eee'><div style='width:{run.progress * 100:.1f}%;height:10px;background:{color}'>"
               f"</div></div>{run.progress_label}</div>")
    failures = "".join(f"<details><summary>{escape(title)}</summary>{html}</details>" for title, html in run.failures)
    outputs = "".join(f"<details><summary>worker {i} output</summary>{html}</details>" for i, html in run.outputs)
    return (f"<div class='nbmp-run' style='margin-bottom:6px'><div class='nbmp-title'>{run.title}</div>{bar}"
            f"<div class='nbmp-workers'>{run.table}</div>"
            + (f"<div class='nbmp-timeline'>{run.timeline}</div>" if run.timeline else "")
            + (f"<div class='nbmp-failures'>{failures}</div>" if failures else "")
            + (f"<div class='nbmp-outputs'>{outputs}</div>" if outputs else "") + "</div>")


def html_document(fragment: str, title: str = "nbmp dashboard") -> str:
    """A standalone page around ``fragment`` (what ``Dashboard.save_html`` writes)."""
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{escape(title)}</title></head>"
            f"<body style='font-family:sans-serif'>\n{fragment}\n</body></html>\n")
