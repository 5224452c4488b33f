"""Starting a child as a fresh interpreter: the standard ``popen_spawn_posix.Popen``, reaped
with ``wait4`` so the record of the worker's end has its peak memory (``PeakMemory``)."""

from __future__ import annotations

from multiprocessing import popen_spawn_posix

from .popen_fork import PeakMemory

__all__ = ["Popen"]


class Popen(PeakMemory, popen_spawn_posix.Popen):
    pass
