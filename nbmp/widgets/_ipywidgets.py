"""The ipywidgets view: the only module of nbmp that imports ipywidgets.

A run's widget tree is built once and then only has traits assigned; a traceback Accordion's
children are only appended, so a section the user opened stays open (docs/dashboard.md).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional, TypeVar

try:
    import ipywidgets as w
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("nbmp's widget dashboard needs ipywidgets: pip install 'nbmp[notebook]' (or use dashboard='text')") from err

from ._html import RunSnapshot, Snapshot, snapshot, static_html
from ._state import DashboardState
from ._subshell import ClickRoute

__all__ = ["WidgetView"]

StopLookup = Callable[[int], Optional[Callable[[], None]]]

_HIDDEN, _SHOWN = "none", ""

_W = TypeVar("_W", bound=w.DOMWidget)


def _hook(widget: _W, part: str) -> _W:
    """Give ``widget`` the CSS class ``nbmp-<part>``: a stable name in the page's DOM for
    users' styles and for the browser test (browser_tests/), which finds the dashboard
    by these classes rather than by ipywidgets' own layout, which may change."""
    widget.add_class(f"nbmp-{part}")
    return widget


# Beside the Stop button where the kernel cannot handle its click while the cell blocks (before ipykernel 7.4).
STOP_LATE = ("<span style='color:#888;font-size:85%'>this kernel handles Stop when the cell ends; "
             "interrupt the kernel (&#9632;) to stop the run now</span>")
# What a front end that renders no widgets shows while a run goes (the text/plain beside the widget).
NO_WIDGETS = ("nbmp dashboard: a live ipywidgets view, which this front end does not display; the run's "
              "summary replaces this line when it ends (nbmp.set_dashboard('text') shows a live text status)")
# Shown instead of the widget where the kernel cannot update a widget while the cell runs.
NOT_LIVE = ("nbmp dashboard: this kernel cannot update a widget while the cell runs, so the dashboard "
            "appears here when the run ends (interrupt the kernel to stop the run)")


class _RunWidgets:
    """The widgets of one run."""

    def __init__(self, stop: Optional[Callable[[], None]]) -> None:
        self.title = _hook(w.HTML(), "title")
        self.stop_button = _hook(w.Button(description="Stop", button_style="danger", icon="stop",
                                          tooltip="terminate this run's workers",
                                          layout=w.Layout(width="90px", display=_SHOWN if stop else _HIDDEN)), "stop")
        self.progress = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="300px"))
        self.progress_label = w.HTML()
        self.table = _hook(w.HTML(), "workers")
        self.timeline = _hook(w.HTML(layout=w.Layout(display=_HIDDEN)), "timeline")
        self.failures = _hook(w.Accordion(layout=w.Layout(display=_HIDDEN)), "failures")
        self.outputs = _hook(w.Accordion(layout=w.Layout(display=_HIDDEN)), "outputs")
        self._output_html: Dict[int, w.HTML] = {}
        self._stop = stop
        self.stop_button.on_click(self._on_stop)
        # Without this a click waits for the blocked cell to end (see _subshell.py).
        self._route = ClickRoute.open(self.stop_button) if stop is not None else None
        late = stop is not None and self._route is None  # say so, rather than show a button that seems dead
        self.stop_note = _hook(w.HTML(STOP_LATE if late else "", layout=w.Layout(display=_SHOWN if late else _HIDDEN)), "stop-note")
        self.box = _hook(w.VBox([w.HBox([self.title, self.stop_button, self.stop_note]), w.HBox([self.progress, self.progress_label]),
                                 self.table, self.timeline, self.failures, self.outputs]), "run")

    def _on_stop(self, _button: w.Button) -> None:
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping"
        if self._stop is not None:
            self._stop()

    def update(self, snap: RunSnapshot) -> None:
        self.title.value = snap.title
        self.progress.layout.display = _HIDDEN if snap.progress is None else _SHOWN
        self.progress.value = snap.progress or 0.0
        self.progress.bar_style = "" if not snap.finished else ("danger" if snap.failed else "success")
        self.progress_label.value = snap.progress_label
        self.table.value = snap.table
        if snap.timeline:
            self.timeline.value = snap.timeline
            self.timeline.layout.display = _SHOWN
        self._update_failures(snap)
        self._update_outputs(snap)
        if snap.finished:
            self.stop_button.disabled = True
            self.stop_button.layout.display = self.stop_note.layout.display = _HIDDEN
            self.close_route()

    def close_route(self) -> None:
        if self._route is not None:
            self._route.close()
            self._route = None

    def _update_failures(self, snap: RunSnapshot) -> None:
        known = len(self.failures.children)
        if len(snap.failures) <= known:
            return
        new = [w.HTML(value=html) for _, html in snap.failures[known:]]
        self.failures.children = (*self.failures.children, *new)
        self.failures.titles = tuple(title for title, _ in snap.failures)
        self.failures.layout.display = _SHOWN

    def _update_outputs(self, snap: RunSnapshot) -> None:
        added = False
        for index, html in snap.outputs:
            widget = self._output_html.get(index)
            if widget is None:
                widget = self._output_html[index] = w.HTML()
                added = True
            widget.value = html
        if added:
            order = sorted(self._output_html)
            self.outputs.children = tuple(self._output_html[i] for i in order)
            self.outputs.titles = tuple(f"worker {i} output" for i in order)
            self.outputs.layout.display = _SHOWN


class WidgetView:
    """Every run a dashboard watches, one section each, and a shared-memory line; once no run is live the
    output becomes the static snapshot (what a saved notebook, nbconvert and GitHub show), and a
    hand-made dashboard's next run brings the widget back. ``live=False``: a notice until the snapshot."""

    def __init__(self, stop_for: StopLookup, live: bool = True) -> None:
        self.live = live  # redraws while the run goes (else only at the run's start and end)
        self._static = True  # the display shows the notice or a snapshot, not the widget
        self._stop_for = stop_for
        self._runs: Dict[int, _RunWidgets] = {}
        self._runs_box = w.VBox()
        self._shm = _hook(w.HTML(), "shm")
        self.root = _hook(w.VBox([self._runs_box, self._shm]), "dashboard")
        self._display: Optional[Any] = None  # the DisplayHandle once shown
        self._summary: Optional[str] = None  # the text/plain it shows now
        self._lock = threading.Lock()  # the ticker and a final render may update at once

    def show(self) -> None:
        from IPython.display import display
        self._display = display(self._bundle(), raw=True, display_id=True)
        self._static = not self.live

    def _bundle(self) -> Dict[str, object]:
        if not self.live:
            return {"text/html": f"<div class='nbmp-notice'>{NOT_LIVE}</div>", "text/plain": NOT_LIVE}
        view = {"version_major": 2, "version_minor": 0, "model_id": self.root.model_id}
        return {"application/vnd.jupyter.widget-view+json": view, "text/plain": NO_WIDGETS}

    def update(self, snap: Snapshot) -> None:
        with self._lock:
            for run in snap.runs:
                widgets = self._runs.get(run.run_id)
                if widgets is None:
                    widgets = self._runs[run.run_id] = _RunWidgets(self._stop_for(run.run_id))
                widgets.update(run)
            self._drop_forgotten({run.run_id for run in snap.runs})
            self._shm.value = snap.shm
            if self._display is None:
                return
            if snap.summary is not None and snap.summary != self._summary:
                # No widget mimetype: a front end without the widget's state (a saved notebook
                # reopened, nbconvert, GitHub) would show "model not found" instead of the html.
                self._display.update({"text/html": static_html(snap), "text/plain": snap.summary}, raw=True)
                self._summary, self._static = snap.summary, True
            elif snap.summary is None and self._static and self.live:  # a new run: the live widget again
                self._display.update(self._bundle(), raw=True)
                self._summary, self._static = None, False

    def close(self) -> None:
        """Give back what the live run needed (the Stop button's subshell); widgets stay."""
        with self._lock:
            for widgets in self._runs.values():
                widgets.close_route()

    @staticmethod
    def render(state: DashboardState, now: float, finished_run: Optional[int] = None) -> Snapshot:
        return snapshot(state, now)

    def _drop_forgotten(self, current: set[int]) -> None:
        for run_id in set(self._runs) - current:
            widgets = self._runs.pop(run_id)
            widgets.close_route()
            _close_tree(widgets.box)
        boxes = tuple(self._runs[rid].box for rid in self._runs)
        if boxes != self._runs_box.children:
            self._runs_box.children = boxes


def _close_tree(widget: w.Widget) -> None:
    """Close a widget and its descendants (their comms too)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()
