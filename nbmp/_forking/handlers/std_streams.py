"""Output the parent had printed but not yet written: a forked child starts without it.

A line the parent printed just before the fork would otherwise appear twice: the child flushes
its copy of the buffers into ``/dev/null``.
"""

from __future__ import annotations

import io
import os
import sys

from ._base import ForkHandler, Worker


class StdStreams(ForkHandler):
    """In a forked child: the inherited, unwritten output of ``sys.stdout`` and ``sys.stderr`` is dropped."""

    def in_child(self, worker: Worker) -> None:
        if worker.forked or worker.from_fork_server:
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, io.TextIOWrapper):  # a kernel's streams are not: they know their process
                    _drop_unwritten(stream)


def _drop_unwritten(stream: io.TextIOWrapper) -> None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # closed, or not backed by a descriptor
        return
    saved, null = os.dup(fd), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)  # a fresh fork has no other thread that could write to it meanwhile
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(null)
