"""Progress of a Pool map: ``TaskProgress`` events, and a text bar that renders them.

A blocking map (``Pool.map``, ``Pool.starmap``, ``nbmp.parallel_map``) emits
``RunStarted``, ``TaskProgress`` (at most ten a second) and ``RunFinished`` to a
sink chosen by its ``progress=`` keyword (see :func:`resolve`). Events are
emitted from the calling thread, so in a notebook the output lands in the cell
that runs the map, even for a Pool created in an earlier cell.

The text bar is tqdm-like: redrawn in place with ``\\r`` on a terminal, at most
once a second in a Jupyter kernel, and only as one final line elsewhere (logs,
pipes), so saved notebooks and CI logs stay short. Shown by default only where
someone watches (a terminal, a notebook): a program whose stderr goes to a log
or a pipe prints what it printed with the standard Pool, nothing more.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO

from .._base import Event, EventSink, RunFinished, RunStarted, TaskProgress
from .._base.util import LiveText, display_kind

__all__ = ["TextBar", "resolve", "sink_factory", "AUTO_DELAY"]

# With progress=None (the default), a bar appears only for maps still running after this.
AUTO_DELAY = 2.0

# Set by a front end (the notebook dashboard) to show progress its own way; called once
# per map with the delay before anything should appear, it returns the sink to use.
sink_factory: Optional[Callable[[float], EventSink]] = None

_WIDTH = 24


class TextBar:
    """A sink drawing ``TaskProgress`` events as a one-line bar on ``stream`` (stderr)."""

    timeline = False  # draws no per-chunk timeline: the map makes no ``TaskRan`` events for it

    def __init__(self, stream: Optional[TextIO] = None, delay: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.line = LiveText(stream, {"terminal": 0.1, "notebook": 1.0}, clock=clock)  # elsewhere: the final line
        self.start, self.delay, self.label = clock(), delay, ""

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.label = event.target
        elif isinstance(event, TaskProgress):
            elapsed = self.line.clock() - self.start
            final = event.total is not None and event.done >= event.total
            if elapsed >= self.delay or final and self.line.shown:
                self.line.draw([render(self.label, event, elapsed)], final)
        elif isinstance(event, RunFinished):
            self.line.close()


def render(label: str, event: TaskProgress, elapsed: float) -> str:
    """``map(f): 45%|#####      | 450/1000 [00:03<00:04, 150.2 it/s]``."""
    rate = event.done / elapsed if elapsed > 0 else 0.0
    if not event.total:
        return f"{label}: {event.done} [{_clock(elapsed)}, {rate:.1f} it/s]"
    frac = min(event.done / event.total, 1.0)
    filled = int(frac * _WIDTH)
    eta = (event.total - event.done) / rate if rate > 0 else 0.0
    return (f"{label}: {frac:4.0%}|{'#' * filled}{' ' * (_WIDTH - filled)}| {event.done}/{event.total} "
            f"[{_clock(elapsed)}<{_clock(eta)}, {rate:.1f} it/s]")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


def check(progress: Any) -> Any:
    """Validate a ``progress=`` value without making its sink (nothing is shown or started)."""
    if progress is None or progress is True or progress is False or callable(getattr(progress, "handle", None)):
        return progress
    raise TypeError(f"progress must be True, False, None (show a bar for long maps) or an object with a "
                    f"handle(event) method, not {type(progress).__name__} {progress!r}; e.g. progress=True")


def resolve(progress: Any) -> Optional[EventSink]:
    """The sink for a map's ``progress=`` keyword.

    ``False``: none. ``True``: a bar from the start (in a notebook, the live
    dashboard widget). ``None`` (default): a text bar that appears only if the map
    is still running after :data:`AUTO_DELAY` seconds, and only on a terminal or in
    a notebook (stderr redirected to a file or a pipe: none). Any object with a
    ``handle(event)`` method: that object, which gets every event.
    """
    if progress is False:
        return None
    if progress is True and sink_factory is None:
        from ..widgets import make_dashboard, resolve_frontend
        if resolve_frontend(None) == "widget":
            return make_dashboard(None)
    if progress is None or progress is True:
        delay = AUTO_DELAY if progress is None else 0.0
        if sink_factory is not None:
            return sink_factory(delay)
        if progress is None and display_kind(sys.stderr) is None:
            return None  # nobody watches this stderr (a log, a pipe): print nothing unasked
        return TextBar(delay=delay)
    return check(progress)  # type: ignore[no-any-return]  # check() passed it: an object with handle(event)
