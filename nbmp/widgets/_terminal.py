"""The text view: a status line rewritten in place while runs go (only on a terminal),
and a summary table when each run ends (everywhere: scripts, plain IPython, logs)."""

from __future__ import annotations

import shutil
import sys
from typing import Optional, TextIO, Tuple

from .._base.util import display_kind
from ._state import DashboardState
from ._text import status_line, summary_table

__all__ = ["TextView"]

Rendered = Tuple[str, Optional[str]]  # (status line, summary of a run that just ended)


class TextView:
    """Writes to ``stream`` (default: the current ``sys.stderr``, like tqdm, so that a
    script's stdout stays its data)."""

    def __init__(self, stream: Optional[TextIO] = None, inplace: Optional[bool] = None) -> None:
        self._stream = stream
        # Without a terminal an in-place line would leave a trail of \r in logs: summary only.
        self.live = display_kind(self.stream) == "terminal" if inplace is None else inplace
        self._shown = ""

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

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
        out = self.stream
        if summary is not None:
            self._clear(out)
            out.write(summary)
        if line != self._shown and (line or self._shown):
            padding = " " * max(0, len(self._shown) - len(line))
            out.write("\r" + line + padding + ("\r" + line if padding else ""))
            self._shown = line
        out.flush()

    def _clear(self, out: TextIO) -> None:
        if self._shown:
            out.write("\r" + " " * len(self._shown) + "\r")
            self._shown = ""
