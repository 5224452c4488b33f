"""``nbmp.Dashboard``: the event sink that keeps a ``DashboardState`` and drives a view.

Events are folded into the state from whatever thread delivers them; the view is redrawn at a
run's start and end, and otherwise by the one ``Ticker`` thread, which also samples CPU and RSS
and runs only while a watched run is live, so nothing of the dashboard outlives a run.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Set

from .._base import events as ev
from ._choice import Choice, check_dashboard, live_widget_updates, resolve_frontend
from ._html import html_document, snapshot, static_html
from ._sampler import ProcessProbe, Ticker
from ._state import DashboardState, read_shm
from ._terminal import TextView
from ._text import summary_table

__all__ = ["Dashboard", "make_dashboard"]

StopCallback = Callable[[], None]

# Hand-made dashboards see every run; the runs' stop callbacks, so their Stop buttons work.
_watchers: "weakref.WeakSet[Dashboard]" = weakref.WeakSet()
_stops: Dict[int, StopCallback] = {}


class Dashboard:
    """A live view of nbmp workers: a widget in a notebook, text elsewhere.

    ``spawn`` and the Pool make one per run (``dashboard=`` keyword); one made by hand
    watches every nbmp run of this process from then on, until ``close()``.
    ``frontend`` is ``None``/``"auto"``/``True`` (pick), ``"widget"`` or ``"text"``.

    Example::

        >>> import nbmp
        >>> d = nbmp.Dashboard("text")
        >>> d.display()                  # in a notebook: shows the widget here
        >>> print(d.summary())           # the same state as a table
        shared memory: ...
        >>> d.close()
    """

    def __init__(self, frontend: Choice = None, *, stop: Optional[StopCallback] = None, interval: float = 0.25,
                 clock: Callable[[], float] = time.time, max_lines: int = 20, stream: Any = None,
                 watch: bool = True) -> None:
        if check_dashboard(frontend, "frontend") == "off":
            raise ValueError(f"Dashboard(frontend={frontend!r}) would show nothing: use None, 'widget' or 'text'")
        resolved = resolve_frontend(frontend)  # None follows nbmp.set_dashboard / NBMP_DASHBOARD
        self.frontend = resolved if resolved != "off" else resolve_frontend(True)  # made by hand: show it
        self.state = DashboardState(clock=clock, max_lines=max_lines)
        self._view: Any = self._make_view(stream)
        self._stop = stop
        self._lock = threading.Lock()  # guards self.state; never held across a redraw or a join
        self._ticker = Ticker(self._tick, interval)
        self._probe: Optional[ProcessProbe] = None
        self._reported: Set[int] = set()  # runs whose end was drawn
        self._pid = os.getpid()  # a forked child inherits this object; it must not draw from there
        if watch:
            _watchers.add(self)

    def _make_view(self, stream: Any) -> Any:
        if self.frontend == "widget":
            from ._ipywidgets import WidgetView
            return WidgetView(self._stop_for, live=live_widget_updates())
        return TextView(stream)

    def _stop_for(self, run_id: int) -> Optional[StopCallback]:
        return self._stop or _stops.get(run_id)

    # -- the sink ----------------------------------------------------------------------

    def handle(self, event: ev.Event) -> None:
        """Fold one event in; draw at once if a run started or ended."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self.state.apply(event)
            ended = self._newly_finished()
            live, due = self.state.live, self.state.sampling_due
        if not live:
            self._ticker.stop()  # joins the thread: done without the lock, which a tick takes
        elif due and self._view.live:
            # Not before the run's workers are all started: forking while a thread runs is
            # what Python 3.12+ warns about, and a script has no other threads.
            self._ticker.start()
        if isinstance(event, (ev.RunStarted, ev.RunFinished)) and not ended:
            self._redraw(None)
        for run_id in ended:
            self._redraw(run_id)

    def _newly_finished(self) -> List[int]:
        ended = [rid for rid, run in self.state.runs.items() if run.finished and rid not in self._reported]
        self._reported = (self._reported & set(self.state.runs)) | set(ended)
        return ended

    def _redraw(self, finished_run: Optional[int]) -> None:
        with self._lock:
            if finished_run is not None or self.state.shm.dev_size is None:
                self.state.shm = read_shm()
            rendered = self._view.render(self.state, self.state.now(), finished_run)
        self._view.update(rendered)

    def _tick(self) -> None:
        with self._lock:
            pids = self.state.live_pids()
        if self._probe is None:
            self._probe = ProcessProbe()
        samples, shm = self._probe.measure(pids), read_shm()  # slow calls, outside the lock
        with self._lock:
            self.state.record_samples(samples, shm)
            rendered = self._view.render(self.state, self.state.now())
        self._view.update(rendered)

    # -- for users ---------------------------------------------------------------------

    def display(self) -> None:
        """Show the dashboard here (a widget in a notebook; text appears as runs go)."""
        self._view.show()

    def _ipython_display_(self) -> None:
        self.display()

    @property
    def widget(self) -> Any:
        """The root ipywidgets box (None for the text front end), e.g. to place it in a layout."""
        return getattr(self._view, "root", None)

    def summary(self) -> str:
        """The state as a plain-text table, tracebacks included."""
        with self._lock:
            return summary_table(self.state, tracebacks=True)

    def html(self) -> str:
        """The dashboard as it is now, as static HTML (plots as inline SVG, no script)."""
        with self._lock:
            snap = snapshot(self.state, self.state.now())
        return static_html(snap, "nbmp dashboard, saved with Dashboard.save_html")

    def save_html(self, path: "str | os.PathLike[str]") -> str:
        """Write the dashboard as a standalone HTML page to ``path`` (a post-mortem of
        its runs: tables, plots, timelines, tracebacks, output); returns the path.

        Example::

            >>> d = nbmp.Dashboard("text")
            >>> nbmp.spawn(work, nprocs=4)
            >>> d.save_html("run.html")
            'run.html'
        """
        with open(path, "w", encoding="utf-8") as f:
            f.write(html_document(self.html()))
        return os.fspath(path)

    def close(self) -> None:
        """Stop watching: end the background thread and draw the final state."""
        _watchers.discard(self)
        self._ticker.stop()
        if os.getpid() == self._pid:
            if self.state.runs:
                self._redraw(None)
            self._view.close()

    @property
    def thread_cpu_seconds(self) -> float:
        """CPU time the dashboard's background thread has used (what it costs the parent)."""
        return self._ticker.cpu_seconds

    def __repr__(self) -> str:
        return f"<nbmp.Dashboard {self.frontend}: {len(self.state.runs)} run(s)>"


class _RunSink:
    """What ``make_dashboard`` returns: feeds the run's own dashboard (if any) and every
    hand-made one, and publishes the run's stop callback for their Stop buttons."""

    def __init__(self, dashboard: Optional[Dashboard], stop: Optional[StopCallback]) -> None:
        self.dashboard = dashboard
        self._stop = stop
        self._failed: Set[int] = set()  # sinks whose failure was reported (once each)

    def handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted) and self._stop is not None:
            _stops[event.run_id] = self._stop
        sinks = [self.dashboard] if self.dashboard is not None else []
        sinks += [d for d in list(_watchers) if d is not self.dashboard]
        for sink in sinks:
            ev.deliver(sink, event, self._failed)
        if isinstance(event, ev.RunFinished):
            _stops.pop(event.run_id, None)

    def close(self) -> None:
        """End the run's dashboard thread (``RunFinished`` does it too)."""
        if self.dashboard is not None:
            self.dashboard.close()


def make_dashboard(choice: Choice = None, *, stop: Optional[StopCallback] = None) -> _RunSink:
    """The sink a run hands its events to (``spawn(..., sinks=[make_dashboard(dashboard, stop=...)])``).

    ``choice`` is the run's ``dashboard=`` value (validated here: call this before any
    process starts); ``stop`` is called by the widget's Stop button. A widget is shown in
    the current cell at once. Emit ``RunFinished`` (or call ``close()``) when the run
    ends, also when it fails, so that the dashboard's thread ends.
    """
    frontend = resolve_frontend(choice)
    dashboard = None if frontend == "off" else Dashboard(frontend, stop=stop, watch=False)
    if dashboard is not None:
        dashboard.display()
    return _RunSink(dashboard, stop)
