"""Workers' stdout and stderr: captured at the file-descriptor level in the worker,
cut into whole lines in the parent, printed by a sink.

Why file descriptors: a worker's ``print`` goes through Python's ``sys.stdout``,
but C extensions and ``os.write(1, ...)`` write to fd 1 directly, and in a forked
ipykernel child ``sys.stdout`` forwards fragments over ZeroMQ that interleave with
other workers' (the broken lines this module exists to prevent). So each worker's
fd 1 and 2 become pipes; the parent reads them, and only whole lines leave it.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

from .._backend.popen_fork import MadeForChildren
from .._base import Event, WorkerOutput

__all__ = ["OUTPUT_MODES", "check_output_mode", "LineSplitter", "StreamPrinter", "prepare_writers", "redirect_std_fds"]

OUTPUT_MODES = {
    "prefix": "relay whole lines, each prefixed with the worker index: '[0] hello' (default)",
    "raw": "relay whole lines as the workers wrote them",
    "none": "capture the output but print nothing (sinks still get WorkerOutput events)",
    "inherit": "leave the workers' stdout and stderr alone (the standard library's behaviour)",
}

# A line longer than this is passed on in pieces, so a worker that never writes a
# newline cannot make the parent buffer without bound.
MAX_LINE = 1 << 16


def check_output_mode(output: Any) -> str:
    if output not in OUTPUT_MODES:
        modes = "\n".join(f"  output={name!r}: {what}" for name, what in OUTPUT_MODES.items())
        raise ValueError(f"unknown output mode {output!r}; use one of:\n{modes}")
    return str(output)


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------


class LineSplitter:
    """Turns the chunks read from one worker stream into whole lines."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        for line in lines:
            self._emit(_decode(line))
        while len(self._pending) >= MAX_LINE:
            head, self._pending = self._pending[:MAX_LINE], self._pending[MAX_LINE:]
            self._emit(_decode(head))

    def close(self) -> None:
        """The stream ended: a final line without its newline is still a line."""
        if self._pending:
            self._emit(_decode(self._pending))
            self._pending = b""


def _decode(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")


class StreamPrinter:
    """The sink that prints :class:`WorkerOutput` lines, one whole line per write.

    ``stdout``/``stderr`` are the streams current when ``spawn`` was called: in
    ipykernel that is the cell's stream, so the lines land in the calling cell.
    """

    def __init__(self, prefix: bool, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> None:
        self.prefix = prefix
        self.streams: Dict[str, Optional[TextIO]] = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._written: Dict[str, TextIO] = {}  # the streams written since the last flush

    def handle(self, event: Event) -> None:
        if isinstance(event, WorkerOutput):
            stream = self.streams[event.stream]
            if stream is not None:
                stream.write(f"[{event.index}] {event.line}\n" if self.prefix else event.line + "\n")
                self._written[event.stream] = stream

    def flush(self) -> None:
        """Flush the streams written since the last flush (in a kernel, each flush of a cell's
        stream waits for ipykernel's IOPub thread: a run with no output waits for none)."""
        while self._written:
            _, stream = self._written.popitem()
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed stream must not break the run
                pass


# --------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------


def _line_writer(fd: int) -> TextIO:
    return io.open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)


# The workers' writers on fds 1 and 2, made in the parent before it forks them: a forked
# worker takes them as they are. Two writers made in a fresh fork cost it ~30 copy-on-write
# faults more than taking these (the codec lookup, the encoder, three objects each).
_writers: MadeForChildren[Tuple[TextIO, TextIO]] = MadeForChildren(lambda: (_line_writer(1), _line_writer(2)))


def prepare_writers() -> None:
    """In the parent, before forking workers that relay their output: make the writers
    they will take (once per process; the parent never writes through them)."""
    _writers.prepare()


def redirect_std_fds(stdout_fd: int, stderr_fd: int) -> None:
    """In a worker: make fds 1 and 2 the given pipes and ``sys.stdout``/``stderr``
    line-buffered writers on them (a spawned child's would be block-buffered)."""
    previous: List[Any] = [sys.stdout, sys.stderr]
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    sys.stdout, sys.stderr = _writers.take() or (_line_writer(1), _line_writer(2))
    for old, new in zip(previous, (sys.stdout, sys.stderr)):
        _reroute(old, new)


def _reroute(old: Any, new: TextIO) -> None:
    # Objects created before the fork may still hold the old stream (a logging
    # handler made in the kernel holds ipykernel's OutStream, which forwards over
    # ZeroMQ, not through fd 1 or 2). Point such a stream's writes at the pipe,
    # in this worker only.
    try:
        if old is None or old.fileno() in (1, 2):
            return
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    try:
        old.write, old.flush = new.write, new.flush
    except (AttributeError, TypeError):
        pass
