"""Starting a child as a fresh interpreter: the standard ``popen_spawn_posix.Popen``, reaped
with ``wait4`` so the record of the worker's end has its peak memory (``PeakMemory``), and
started by an entry that ends quietly when its parent was killed while it started it.

A parent killed while it writes the payload leaves the standard ``spawn_main`` an ``EOFError``
traceback on the inherited stderr (the Jupyter server's terminal); a payload cut short by a live
parent still gets the standard traceback (a bug worth seeing)."""

from __future__ import annotations

import importlib
import io
import os
import sys
from multiprocessing import popen_spawn_posix
from typing import Any, List

from .popen_fork import PeakMemory

__all__ = ["Popen", "command_line"]

# The standard launch's own modules, taken from it: a program may have put nbmp in the standard
# package's place, where ``multiprocessing.spawn`` is nbmp's function and ``reduction`` its mirror.
spawn, reduction, util = popen_spawn_posix.spawn, popen_spawn_posix.reduction, popen_spawn_posix.util  # type: ignore[attr-defined]  # module globals typeshed omits
set_spawning_popen = popen_spawn_posix.set_spawning_popen  # type: ignore[attr-defined]  # as above
# The one it imports at its first launch, relative to its own package.
resource_tracker = importlib.import_module(popen_spawn_posix.__package__ + ".resource_tracker")

# The child's program: the standard spawn_main, and a quiet exit when the payload ended early
# because the parent (pid ``parent``) is gone (its pidfd readable within a second: it has
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
    except AttributeError:  # no pidfds (not Linux): gone once this process has another parent
        gone = os.getppid() != {parent}
    except OSError:  # no such process: it has ended and been reaped
        gone = True
    if not gone:
        raise
    sys.exit(1)
"""


def command_line(parent: int, **arguments: Any) -> List[str]:
    """The child's command line: the standard one's interpreter and flags, nbmp's entry
    (the standard one for a frozen program, whose executable is its own entry).
    """
    if getattr(sys, "frozen", False):
        return list(spawn.get_command_line(**arguments))
    program = _ENTRY.format(arguments=", ".join(f"{key}={value!r}" for key, value in arguments.items()), parent=int(parent))
    return [spawn.get_executable(), *util._args_from_interpreter_flags(), "-c", program, "--multiprocessing-fork"]


class Popen(PeakMemory, popen_spawn_posix.Popen):
    _fds: List[int]  # the standard Popen's: the descriptors the child inherits

    def _launch(self, process_obj: Any) -> None:
        tracker_fd = resource_tracker.getfd()
        self._fds.append(tracker_fd)
        payload = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(spawn.get_preparation_data(process_obj._name), payload)
            reduction.dump(process_obj, payload)
        finally:
            set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()  # the sentinel: readable once the child has ended
            # The payload. Its write end stays open for the child's life: the child's
            # ``parent_process()`` watches the read end for its parent's end.
            child_r, parent_w = os.pipe()
            self._fds.extend([child_r, child_w])
            self.pid = util.spawnv_passfds(os.fsencode(spawn.get_executable()),
                                           command_line(os.getpid(), tracker_fd=tracker_fd, pipe_handle=child_r),
                                           self._fds)
            self.sentinel = parent_r
            _write_payload(parent_w, payload.getbuffer())
        finally:
            self.finalizer = util.Finalize(self, util.close_fds, [fd for fd in (parent_r, parent_w) if fd is not None])
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def _write_payload(fd: int, data: memoryview) -> None:
    with open(fd, "wb", closefd=False) as pipe:
        pipe.write(data)
