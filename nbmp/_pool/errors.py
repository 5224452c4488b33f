"""What a Pool raises in the caller when a task fails or a worker dies.

:class:`WorkerLostError`'s message is built from the worker's end (``nbmp._base.WorkerExited``);
a task's exception crosses by ``nbmp._backend.remote``, a ``RemoteTaskError`` where it would not
unpickle (rather than killing the Pool's result thread).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
from typing import Any, Optional

from .._backend import main_module as _main_module
from .._backend.remote import CapturedException
from .._base import WorkerExited
from .._base.ends import exit_signal
from .._base.exceptions import NbmpError

__all__ = ["WorkerLostError", "lost_error", "wrap_task_exception"]


class WorkerLostError(NbmpError, multiprocessing.ProcessError):
    """A Pool worker died while it held a task; the task's call raises this.

    Attributes: ``index`` (the worker's slot in the Pool, 0-based), ``pid``,
    ``exitcode`` (negative: killed by that signal), ``signal_name`` (e.g.
    ``"SIGKILL"``, or None), ``rss`` (the worker's resident memory in bytes when
    last sampled, or None) and ``task`` (which call and item it was running).

    Example::

        >>> import os, signal
        >>> with nbmp.Pool(2) as pool:
        ...     try:
        ...         pool.map(lambda x: os.kill(os.getpid(), signal.SIGKILL), [1])
        ...     except nbmp.WorkerLostError as e:
        ...         print(e.signal_name)
        SIGKILL
    """

    def __init__(self, message: str, *, index: Optional[int] = None, pid: Optional[int] = None,
                 exitcode: Optional[int] = None, rss: Optional[int] = None, task: Optional[str] = None) -> None:
        super().__init__(message)
        self.index, self.pid, self.exitcode, self.rss, self.task = index, pid, exitcode, rss, task

    @property
    def signal_name(self) -> Optional[str]:
        return exit_signal(self.exitcode)

    def __str__(self) -> str:
        return str(self.args[0])


def lost_error(end: WorkerExited, doing: str, aftermath: str) -> WorkerLostError:
    """The error for the call that lost a task; ``doing`` says what the worker was doing."""
    name = end.signal_name or f"Exit code {end.exitcode}"
    message = f"Pool worker {end.index} (pid {end.pid}) {end.how} {doing}. {name}: {end.cause}. {aftermath}"
    return WorkerLostError(message, index=end.index, pid=end.pid, exitcode=end.exitcode, rss=end.rss, task=doing)


# Frames of the Pool's own machinery say nothing about the user's error.
_MACHINERY = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py"), multiprocessing.pool.__file__,
              _main_module.__file__)  # Initializer, around the initializer


def wrap_task_exception(exc: BaseException, index: Optional[int], pid: int) -> Any:
    """Wrap ``exc`` (raised by a task in worker ``index``) to cross to the parent as itself,
    with the worker's traceback chained."""
    return CapturedException(exc, skip=_MACHINERY, header=f"Pool worker {index} (pid {pid}) raised:\n")
