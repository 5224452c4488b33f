"""Output the parent had printed but not yet written: a forked child starts without it.

A line the parent printed just before the fork would otherwise appear twice: the child flushes
its copy of the buffers into ``/dev/null``.
"""

from __future__ import annotations

import io
import os
import sys

from ..threads import alone
from ._base import ForkHandler, Worker


class StdStreams(ForkHandler):
    """In a forked child: the inherited, unwritten output of ``sys.stdout`` and ``sys.stderr`` is dropped."""

    flushed = False  # the parent's streams were empty at its fork: its children have nothing to drop

    def before(self) -> None:
        # Flushed after the users' before handlers, by the only thread: nothing is written until the fork.
        self.flushed = alone() and all(_flush(s) for s in (sys.stdout, sys.stderr) if isinstance(s, io.TextIOWrapper))

    def in_child(self, worker: Worker) -> None:
        if worker.forked and not self.flushed or worker.from_fork_server:
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, io.TextIOWrapper):  # a kernel's streams are not: they know their process
                    _drop_unwritten(stream)


def _flush(stream: io.TextIOWrapper) -> bool:
    try:
        stream.flush()
    except (OSError, ValueError):
        return False
    return True


def _drop_unwritten(stream: io.TextIOWrapper) -> None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # closed, or not backed by a descriptor
        return
    saved, null = os.dup(fd), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)  # a fresh fork has no other thread that could write to it meanwhile
        _flush(stream)
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(null)
