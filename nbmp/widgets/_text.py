"""The dashboard state as plain text: pure functions, no I/O, no clock of their own.

``status_line`` is the one line a terminal rewrites in place (``\\r``) while a run goes;
``summary_table`` is what a script or plain IPython prints when it ends. Both take
``now`` from ``state.clock`` unless given, so tests render fixed states exactly.
"""

from __future__ import annotations

from typing import Collection, List, Optional, Sequence

from .._base.util import format_bytes, signal_name
from ._history import pool_note
from ._state import DashboardState, RunState, ShmState, WorkerState

__all__ = ["status_line", "summary_table", "fmt_bytes", "fmt_duration", "fmt_cpu", "fmt_exit",
           "counts_text", "run_title", "shm_text", "worker_cells", "WORKER_COLUMNS"]

WORKER_COLUMNS = ("worker", "pid", "state", "elapsed", "cpu", "rss", "tasks", "exit")


# -- values ---------------------------------------------------------------------------

fmt_bytes = format_bytes


def fmt_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def fmt_cpu(percent: Optional[float]) -> str:
    return "-" if percent is None else f"{percent:.0f}%"


def fmt_exit(code: Optional[int]) -> str:
    """An exit code as ``Popen.returncode`` gives it: negative numbers are signals."""
    return "-" if code is None else signal_name(-code) if code < 0 else str(code)


def fmt_tasks(worker: WorkerState) -> str:
    return f"{worker.done}/{worker.total}" if worker.total else str(worker.done) if worker.done else "-"


# -- pieces shared with the widget view ------------------------------------------------

def counts_text(run: RunState) -> str:
    """``"3 running, 1 failed"``: the non-zero counts by state, in display order."""
    return ", ".join(f"{n} {name}" for name, n in run.counts().items() if n) or "no workers yet"


def run_title(run: RunState, now: float) -> str:
    """``"work [fork, 4 workers] 2.1s"`` plus how it ended, once it has."""
    n = run.nprocs if run.nprocs is not None else len(run.workers)
    title = f"{run.target} [{run.start_method}, {n} worker{'s' if n != 1 else ''}] {fmt_duration(run.elapsed(now))}"
    if run.finished:
        title += " - failed" if failed(run) else " - finished"
    return title


def failed(run: RunState) -> bool:
    """Whether a finished run failed: it said so (an interrupt, a Stop), or a worker failed."""
    return run.ok is False or any(w.state == "failed" for w in run.workers.values())


def shm_text(shm: ShmState) -> str:
    parts = []
    if shm.segments is not None:
        parts.append(f"{shm.segments} segment{'s' if shm.segments != 1 else ''}, {fmt_bytes(shm.bytes)} in use")
    if shm.dev_size is not None:
        parts.append(f"/dev/shm {fmt_bytes(shm.dev_size)}, {fmt_bytes(shm.dev_free)} free")
    return "shared memory: " + ("; ".join(parts) if parts else "unknown")


def worker_cells(worker: WorkerState, now: float) -> List[str]:
    """One row of the worker table, in ``WORKER_COLUMNS`` order (an ended worker's cpu: its mean while it ran)."""
    pid = "-" if worker.pid is None else f"{worker.pid}@{worker.host}" if worker.host else str(worker.pid)
    return [str(worker.index), pid, worker.state,
            fmt_duration(worker.elapsed(now)), fmt_cpu(worker.cpu_percent if worker.live else worker.cpu_history.mean()), fmt_bytes(worker.rss),
            fmt_tasks(worker), fmt_exit(worker.exitcode)]


# -- the two renderings ---------------------------------------------------------------

def status_line(state: DashboardState, now: Optional[float] = None, width: int = 120) -> str:
    """One line about the newest live run (or the newest run), at most ``width`` characters."""
    if not state.runs:
        return ""
    now = state.now() if now is None else now
    live = [run for run in state.runs.values() if not run.finished]
    run = (live or list(state.runs.values()))[-1]
    parts = [f"nbmp {run_title(run, now)}", counts_text(run)]
    fraction, label = run.progress()
    if fraction is not None:
        parts.append(f"{fraction:.0%} ({label})")
    if run.cpu_percent() is not None or run.rss() is not None:
        parts.append(f"cpu {fmt_cpu(run.cpu_percent())} rss {fmt_bytes(run.rss())}")
    if len(live) > 1:
        parts.append(f"+{len(live) - 1} more live run{'s' if len(live) > 2 else ''}")
    line = " | ".join(parts)
    return line if len(line) <= width else line[:max(0, width - 3)] + "..."


def summary_table(state: DashboardState, now: Optional[float] = None, tracebacks: bool = False,
                  run_ids: Optional[Collection[int]] = None) -> str:
    """Every run (or those of ``run_ids``) as a header and a worker table, then failures
    and shared memory.

    Tracebacks are left out by default: where the text view is used, the run's own
    exception already carries them.
    """
    now = state.now() if now is None else now
    blocks = [_run_block(run, now, tracebacks) for run in state.runs.values() if run_ids is None or run.run_id in run_ids]
    blocks.append(shm_text(state.shm))
    return "\n\n".join(blocks) + "\n"


def _run_block(run: RunState, now: float, tracebacks: bool) -> str:
    lines = [f"nbmp {run_title(run, now)} ({counts_text(run)})"]
    rows = [worker_cells(w, now) for _, w in sorted(run.workers.items())]
    lines += ["  " + line for line in _table(WORKER_COLUMNS, rows)]
    if run.spans and run.start_time is not None:
        end = run.end_time if run.end_time is not None else now
        note = pool_note(run.spans, run.nprocs or len(run.workers), run.start_time, end)
        lines += [f"  note: {note}"] if note else []
    for _, worker in sorted(run.workers.items()):
        if worker.exception is None:
            continue
        exc = worker.exception
        lines.append(f"  worker {worker.index} raised {exc.exc_type}: {exc.message}")
        if tracebacks and exc.traceback:
            lines += ["    " + line for line in exc.traceback.rstrip("\n").splitlines()]
    return "\n".join(lines)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
