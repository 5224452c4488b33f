"""Workers' stdout and stderr: captured at the file-descriptor level in the worker,
cut into whole lines in the parent, printed by a sink.

Why file descriptors: a worker's ``print`` goes through Python's ``sys.stdout``,
but C extensions and ``os.write(1, ...)`` write to fd 1 directly, and in a forked
ipykernel child ``sys.stdout`` forwards fragments over ZeroMQ that interleave with
other workers' (the broken lines this module exists to prevent). So each worker's
fd 1 and 2 become pipes; the parent reads them, and only whole lines leave it.
"""

from __future__ import annotations

import contextlib
import codecs
import io
import os
import sys
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

from .._base import Event, RunFinished, WorkerOutput
from .._base.util import LiveText

__all__ = ["OUTPUT_MODES", "check_output_mode", "LineSplitter", "render", "StreamPrinter", "redirect_std_fds", "STATUS_INTERVAL"]

OUTPUT_MODES = {
    "prefix": "relay whole lines, each prefixed with the worker index: '[0] hello' (default)",
    "raw": "relay whole lines as the workers wrote them",
    "none": "capture the output but print nothing (sinks still get WorkerOutput events)",
    "inherit": "leave the workers' stdout and stderr alone (the standard library's behaviour)",
}

# A line longer than this (in characters) is passed on in pieces, so a worker that never
# writes a newline cannot make the parent buffer without bound.
MAX_LINE = 1 << 16

# Seconds between two passings-on of a run's status lines (progress bars redrawn with
# carriage returns): the latest state of each, at most this often.
STATUS_INTERVAL = 0.1


def check_output_mode(output: Any) -> str:
    if output not in OUTPUT_MODES:
        modes = "\n".join(f"  output={name!r}: {what}" for name, what in OUTPUT_MODES.items())
        raise ValueError(f"unknown output mode {output!r}; use one of:\n{modes}")
    return str(output)


# -- Parent side -------------------------------------------------------------------------------


class LineSplitter:
    """Turns the chunks read from one worker stream into whole lines, and keeps the line
    being redrawn with carriage returns (a progress bar) as the stream's *status*.

    ``emit(line)`` gets each whole line at once, as a terminal shows it (see :func:`render`).
    The status is only taken, by :meth:`take_status`, at the pace the caller chooses: a bar
    redrawn thousands of times a second is passed on a few times a second, its latest state.
    """

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # the line begun and not ended, compacted (see _compact)
        self._shown = ""  # the status last taken ("": none)
        self.status_waiting = False  # the status may have changed since last taken

    def feed(self, chunk: bytes) -> None:
        data = self._pending + self._decoder.decode(chunk)
        *lines, self._pending = data.split("\n")
        if lines:
            self._shown = ""  # a whole line ends the status, wherever sinks show it
        for line in lines:
            self._emit(render(line))
        if "\r" in self._pending:
            self._pending = _compact(self._pending)
            self.status_waiting = True
        while len(self._pending) >= MAX_LINE:
            head, self._pending = self._pending[:MAX_LINE], self._pending[MAX_LINE:]
            self._emit(render(head))

    def take_status(self) -> Optional[str]:
        """The status if it changed since last taken (``""``: it was cleared), else None.
        Only a line redrawn with carriage returns has one: a line written in parts
        (``print(..., end="")``) waits for its newline."""
        if not self.status_waiting:
            return None
        self.status_waiting = False
        status = render(self._pending) if "\r" in self._pending else ""
        if status == self._shown:
            return None
        self._shown = status
        return status

    def close(self) -> None:
        """The stream ended: a final line without its newline is still a line, unless it
        is a status that was cleared (a bar that erased itself)."""
        pending = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        line = render(pending)  # "" for nothing, and for a bar that erased itself
        if line:
            self._shown = ""
            self._emit(line)
        self.status_waiting = bool(self._shown)  # erased: take_status clears it


def render(text: str) -> str:
    """What a terminal shows for ``text``, a line without its newline: each carriage
    return goes back to the line's start and what follows overwrites it; trailing blanks
    of such a line (an erased bar's) are dropped. A line without one is left as it is.
    """
    return _overlay(text)[0].rstrip() if "\r" in text else text


def _compact(text: str) -> str:
    """``text`` (with carriage returns) shortened to what a terminal holds: the line as
    shown, then the cursor where the last segment left it, so that more text overwrites
    from there (a carriage return stays in it: the line is still a status). A bar redrawn
    for hours without a newline stays within twice one line's length."""
    shown, cursor = _overlay(text)
    return shown + "\r" + cursor


def _overlay(text: str) -> Tuple[str, str]:
    """``(the line shown, the text from its start to the cursor)`` for ``text``."""
    shown = ""
    segments = text.split("\r")
    for segment in segments:
        shown = segment + shown[len(segment):]
    return shown, segments[-1]


class StreamPrinter:
    """The sink that prints :class:`WorkerOutput` lines, one whole line per write, and the
    workers' status lines (progress bars) where someone watches stderr.

    ``stdout``/``stderr`` are the streams current when ``spawn`` was called: in
    ipykernel that is the cell's stream, so the lines land in the calling cell.
    Statuses are drawn on stderr, below the lines: on a terminal one row per worker,
    redrawn in place; in a notebook one line, all workers' side by side, redrawn with a
    carriage return; in a file or pipe not at all (their whole lines still come).
    """

    def __init__(self, prefix: bool, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> None:
        self.prefix = prefix
        self.streams: Dict[str, Optional[TextIO]] = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._written: Dict[str, TextIO] = {}  # the streams written since the last flush
        self._statuses: Dict[Tuple[int, str], str] = {}  # (worker, stream) -> its status, in order of appearance
        # Redrawn at each flush: the supervisor passes statuses on at its own pace.
        self._board = LiveText(self.streams["stderr"], {"terminal": 0.0, "notebook": 0.0}, rows=True)

    def handle(self, event: Event) -> None:
        if isinstance(event, WorkerOutput):
            key = (event.index, event.stream)
            if event.status and event.line:
                self._statuses[key] = event.line
                return
            self._statuses.pop(key, None)
            stream = self.streams[event.stream]
            if stream is not None and not event.status:
                self._board.clear()  # flushed: it leaves before a line goes to the other stream
                stream.write(self._label(event.index, event.line) + "\n")
                self._written[event.stream] = stream
        elif isinstance(event, RunFinished):
            self._statuses.clear()
            self._board.clear()

    def _label(self, index: int, text: str) -> str:
        return f"[{index}] {text}" if self.prefix else text

    def flush(self) -> None:
        """Flush the streams written since the last flush (in a kernel, each flush of a cell's
        stream waits for ipykernel's IOPub thread: a run with no output waits for none),
        then redraw the statuses if they changed."""
        while self._written:
            _, stream = self._written.popitem()
            with contextlib.suppress(OSError, ValueError):  # a closed stream must not break the run
                stream.flush()
        self._board.draw([self._label(index, text) for (index, _), text in self._statuses.items()])


# -- Worker side -------------------------------------------------------------------------------


def _line_writer(fd: int) -> TextIO:
    return io.open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)


def redirect_std_fds(stdout_fd: int, stderr_fd: int) -> None:
    """In a worker: make fds 1 and 2 the given pipes and ``sys.stdout``/``stderr``
    line-buffered UTF-8 writers on them (a spawned child's would be block-buffered)."""
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    sys.stdout, sys.stderr = _writer_on(sys.stdout, 1), _writer_on(sys.stderr, 2)


def _writer_on(old: Any, fd: int) -> TextIO:
    """The stream on ``fd`` from now on: the inherited one where it writes UTF-8 to ``fd`` already
    (new ones cost a forked worker page copies), else a new one. The writes of an old one on
    neither fd 1 nor 2 go to the new one, in this worker only: objects made before the fork may
    hold it (a logging handler made in the kernel holds ipykernel's OutStream, which forwards
    over ZeroMQ, not through fd 1 or 2)."""
    try:
        on = old.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        on = None
    if type(old) is io.TextIOWrapper and old.encoding == "utf-8" and on == fd:
        old.reconfigure(line_buffering=True)
        return old
    new = _line_writer(fd)
    if old is not None and on not in (1, 2):
        with contextlib.suppress(AttributeError, TypeError):
            old.write, old.flush = new.write, new.flush
    return new
