"""What runs inside each ``nbmp.spawn`` worker: ``fn(i, *args)``, and the one
message that tells the parent how it ended.

The worker sends one message on its result pipe, pickled by nbmp's pickler (so shared arrays cross as
handles and lambdas travel): ``("ok", value)`` or ``("raised", captured)``, where ``captured`` is the exception
on nbmp's one remote-traceback path (``nbmp._backend.remote``: a ``Remote`` record in the parent). Before it,
``b"wait"`` when the value holds parts the parent fetches from this process, which then waits for the parent's
receipt on a pipe of its own. A worker that sends nothing was killed or called ``sys.exit``; its exit code tells the rest.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, Optional, Tuple

from .._backend import pickling as _pickling, posix as _posix
from .._backend.remote import CapturedException
from .output import redirect_std_fds

__all__ = ["Job", "run"]


@dataclass
class Job:
    """Everything one worker needs; it crosses to spawn/forkserver children by pickling
    (the pipe ends as connections, which travel as file descriptors)."""

    fn: Callable[..., Any]
    args: Tuple[Any, ...]
    index: int
    result: Connection
    receipt: Connection
    stdout: Optional[Connection]  # None: output="inherit"
    stderr: Optional[Connection]
    inherited: Tuple[int, ...] = ()  # fork: the parent's ends of the run's pipes, the other workers' ends; closed first
    main_objects: Any = None  # fork: the __main__ functions and classes it has (a MainObjects): its value and error name them by reference


def run(job: Job) -> None:
    """The worker's target: set up, run ``fn``, report, and leave."""
    # SIGINT ignored and the parent-death signal set: done first, in the process's bootstrap (nbmp/_backend/process.py).
    for fd in job.inherited:
        os.close(fd)
    if job.stdout is not None and job.stderr is not None:
        # A parent started with fds 0-2 closed made its first pipes there, which the redirection overwrites.
        for name in ("result", "receipt", "stdout", "stderr"):
            if (end := getattr(job, name)).fileno() < 3:
                setattr(job, name, Connection(fcntl.fcntl(end.fileno(), fcntl.F_DUPFD_CLOEXEC, 3), end.readable, end.writable))
                end.close()
        for fd in (1, 2):  # and whatever else is there stays open above 2: the end whose closing tells the parent we ended
            try:
                fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            except OSError:  # closed: nothing to keep
                pass
        redirect_std_fds(job.stdout.fileno(), job.stderr.fileno())
        job.stdout.close()
        job.stderr.close()
    try:
        failed, message = _call(job)
    finally:
        _flush_all()
    if waits := not failed and receipt_needed():  # said first: the parent writes a receipt only to a worker that reads it
        job.result.send_bytes(b"wait")
    job.result.send_bytes(message)
    if waits:  # torch's tensors pass their fds through a socket this process serves while the parent unpickles
        with contextlib.suppress(EOFError, OSError):
            job.receipt.recv_bytes()
    job.result.close()
    if failed:
        sys.exit(1)  # torch's exit code for a worker that raised


def receipt_needed() -> bool:
    """Whether the value just sent holds file descriptors that the parent will fetch from this process
    (``multiprocessing.resource_sharer``, which torch's tensors and connections sent outside a process
    start use). Waiting costs a round trip: plain values do not wait."""
    sharer = sys.modules.get("multiprocessing.resource_sharer")
    return bool(sharer is not None and getattr(getattr(sharer, "_resource_sharer", None), "_cache", None))


def _call(job: Job) -> Tuple[bool, bytes]:
    try:
        value = job.fn(job.index, *job.args)
        if _pickling.plain(value):  # nothing to explain, nothing of __main__ in it
            return False, _pickling.dumps_plain_value(("ok", value))
        with _pickling.sending_to(job.main_objects):
            return False, _pickling.dumps_explained(("ok", value), {"the return value": value},
                                                    f"send the return value of process {job.index} to the parent")
    except SystemExit:
        raise
    except BaseException as exc:  # KeyboardInterrupt too: a raised fn is a raised fn
        with _pickling.sending_to(job.main_objects):
            return True, _describe(exc)


def _describe(exc: BaseException) -> bytes:
    # The traceback starts at fn's own frame: this module's frames are nbmp's.
    return _pickling.dumps(("raised", CapturedException(exc, skip=(__file__,), as_exception=False)))


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    _posix.flush_c_stdio()
