"""Starting a child as a fresh interpreter: the standard ``popen_spawn_posix.Popen``, reaped
with ``wait4`` so the record of the worker's end has its peak memory (``PeakMemory``), and
launched so that a parent killed while it starts the child leaves no traceback behind.

The standard launch starts the child, then writes it its payload (the preparation data and
the pickled process object) through a pipe; a payload larger than the pipe holds is written
while the child reads it, after the child's interpreter has started (tens of ms). A parent
killed in that window leaves the child a payload cut short, and the child's
``spawn_main`` dies on it with an ``EOFError`` traceback on the inherited stderr (in a
notebook, the terminal of the Jupyter server). Here the payload goes into the pipe *before*
the child starts where it fits (the pipe widened up to ``posix.PIPE_CAPACITY``, 1 MiB), and
the child's entry, wrapped around the standard ``spawn_main``, exits quietly when its
payload ended early because its parent has died. A parent still alive gets the standard
traceback (a payload cut short by a live parent is a bug worth seeing).
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from multiprocessing import popen_spawn_posix
from typing import Any, List

from . import posix as _posix
from .popen_fork import PeakMemory

__all__ = ["Popen", "command_line"]

# The standard launch's own modules, taken from it: a program may have put nbmp in the standard
# package's place, where ``multiprocessing.spawn`` is nbmp's function and ``reduction`` its mirror.
spawn, reduction, util = popen_spawn_posix.spawn, popen_spawn_posix.reduction, popen_spawn_posix.util  # type: ignore[attr-defined]  # module globals typeshed omits
set_spawning_popen = popen_spawn_posix.set_spawning_popen  # type: ignore[attr-defined]  # as above

# The child's program: the standard spawn_main, and a quiet exit when the payload ended early
# because the parent (pid ``parent``) is gone (a pidfd readable within a second: it has
# exited; none can be opened: it has been reaped already).
_ENTRY = """\
import os, sys
from multiprocessing.spawn import spawn_main
try:
    spawn_main({arguments})
except (EOFError, __import__("pickle").UnpicklingError):
    import select
    try:
        gone = bool(select.select([os.pidfd_open({parent})], [], [], 1.0)[0])
    except (AttributeError, OSError):
        gone = not hasattr(os, "pidfd_open")
    if not gone:
        raise
    sys.exit(1)
"""


def command_line(parent: int, **arguments: Any) -> List[str]:
    """The child's command line: the standard one's interpreter and flags, nbmp's entry
    (the standard one for a frozen program, whose executable is its own entry).

    Example::

        >>> command_line(os.getpid(), tracker_fd=5, pipe_handle=7)[-1]
        '--multiprocessing-fork'
    """
    if getattr(sys, "frozen", False):
        return list(spawn.get_command_line(**arguments))
    program = _ENTRY.format(arguments=", ".join(f"{key}={value!r}" for key, value in arguments.items()),
                            parent=int(parent))
    flags = util._args_from_interpreter_flags()
    return [spawn.get_executable(), *flags, "-c", program, "--multiprocessing-fork"]


class Popen(PeakMemory, popen_spawn_posix.Popen):
    _fds: List[int]  # the standard Popen's: the descriptors the child inherits

    def _launch(self, process_obj: Any) -> None:
        tracker_fd = _resource_tracker().getfd()
        self._fds.append(tracker_fd)
        payload = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(spawn.get_preparation_data(process_obj._name), payload)
            reduction.dump(process_obj, payload)
        finally:
            set_spawning_popen(None)
        data = payload.getbuffer()
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()  # the sentinel: readable once the child has ended
            child_r, parent_w = os.pipe()  # the payload
            # Asked for no less than a pipe's default (64 KiB), so a small payload changes nothing.
            capacity = _posix.widen_pipe(parent_w, min(max(len(data), 1 << 16), _posix.PIPE_CAPACITY))
            if len(data) <= capacity:
                _write_all(parent_w, data)
                os.close(parent_w)  # the pipe is freed once the child has read it
                parent_w = None
            self._fds.extend([child_r, child_w])
            self.pid = util.spawnv_passfds(os.fsencode(spawn.get_executable()),
                                           command_line(os.getpid(), tracker_fd=tracker_fd, pipe_handle=child_r),
                                           self._fds)
            self.sentinel = parent_r
            if parent_w is not None:
                _write_all(parent_w, data)
        finally:
            self.finalizer = util.Finalize(self, util.close_fds,
                                           [fd for fd in (parent_r, parent_w) if fd is not None])
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def _resource_tracker() -> Any:
    # As the standard launch imports it (at its first spawn), relative to its own package.
    return importlib.import_module(popen_spawn_posix.__package__ + ".resource_tracker")


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]
