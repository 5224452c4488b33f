"""The text view: a status line rewritten in place while runs go (only on a terminal),
and a summary table when each run ends (everywhere: scripts, plain IPython, logs)."""

from __future__ import annotations

import shutil
from typing import Optional, TextIO, Tuple

from .._base.util import LiveText
from ._state import DashboardState
from ._text import status_line, summary_table

__all__ = ["TextView"]

Rendered = Tuple[str, Optional[str]]  # (status line, summary of a run that just ended)


class TextView:
    """Writes to ``stream`` (default: the current ``sys.stderr``, like tqdm, so that a
    script's stdout stays its data)."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        # Redrawn at the dashboard's pace; without a terminal an in-place line would leave a trail of \r in logs: summary only.
        self.line = LiveText(stream, {"terminal": 0.0})
        self.live = self.line.pace is not None

    def show(self) -> None:
        pass  # the line appears with the first update

    def close(self) -> None:
        pass

    def render(self, state: DashboardState, now: float, finished_run: Optional[int] = None) -> Rendered:
        width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
        summary = None if finished_run is None else summary_table(state, now, run_ids=(finished_run,))
        return (status_line(state, now, width) if self.live and state.live else ""), summary

    def update(self, rendered: Rendered) -> None:
        line, summary = rendered
        if summary is not None:
            self.line.clear()
            self.line.stream.write(summary)
            self.line.stream.flush()
        self.line.draw([line] if line else [])
