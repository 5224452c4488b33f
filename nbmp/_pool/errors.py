"""What a Pool raises in the caller when a task fails or a worker dies.

Two jobs, both about making a worker's failure readable in the parent:

* :class:`WorkerLostError`: a worker died while it held a task (SIGKILL, a
  segfault, ``os._exit``, the out-of-memory killer). The message names the
  worker, its exit code or signal and the likely cause.
* Remote tracebacks: an exception raised by a task crosses to the parent with
  its original type and the worker's traceback as ``__cause__`` (the stdlib's
  ``multiprocessing.pool.RemoteTraceback``, so code that checks for it keeps
  working). Unlike the stdlib, the traceback text is assembled *in the parent*
  from the worker's frames, so lines of notebook cells -- which a spawned
  worker's ``linecache`` never saw -- are shown; and an exception that would
  not unpickle in the parent becomes a :class:`RemoteTaskError` instead of
  killing the Pool's result thread.
"""

from __future__ import annotations

import linecache
import multiprocessing
import os
import pickle
import traceback
from dataclasses import dataclass
from multiprocessing.pool import RemoteTraceback  # type: ignore[attr-defined]  # typeshed omits this runtime name
from typing import Any, List, Optional, Tuple

from .._backend import pickling as _pickling
from .._base.util import format_bytes, signal_name

__all__ = ["WorkerLostError", "RemoteTaskError", "Death", "wrap_task_exception"]


class WorkerLostError(multiprocessing.ProcessError):
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
        return _signal_name(self.exitcode)

    def __str__(self) -> str:
        return str(self.args[0])


class RemoteTaskError(Exception):
    """A task raised an exception that could not be rebuilt in the parent.

    Raised instead of the original (whose type or arguments did not survive
    pickling); ``exc_type`` is its qualified type name and the message is its
    ``str()``. The worker's traceback is chained as ``__cause__``.

    Example::

        >>> try:
        ...     raise nbmp.RemoteTaskError("mymodule.OddError: boom", exc_type="mymodule.OddError")
        ... except nbmp.RemoteTaskError as e:
        ...     print(e.exc_type)
        mymodule.OddError
    """

    def __init__(self, message: str, *, exc_type: str = "") -> None:
        super().__init__(message)
        self.exc_type = exc_type


# --------------------------------------------------------------------------
# A dead worker: the facts, and the message built from them
# --------------------------------------------------------------------------

_CAUSES = {
    "SIGKILL": "often the out-of-memory killer (see `dmesg` or `journalctl -k`)",
    "SIGSEGV": "a segmentation fault in native code (a C extension, ctypes, or a library that is "
               "not fork-safe: try start_method='spawn')",
    "SIGBUS": "a bus error, often /dev/shm or a memory-mapped file running out of space",
    "SIGABRT": "abort() in native code (a failed C-level assertion, a double free)",
    "SIGFPE": "an arithmetic fault in native code",
    "SIGILL": "an illegal instruction (native code built for another CPU)",
    "SIGTERM": "terminated by another process (a job scheduler, `kill`)",
}


@dataclass(frozen=True)
class Death:
    """What the parent observed about a worker that died holding a task."""

    index: int
    pid: int
    exitcode: int
    rss: Optional[int]

    def error(self, doing: str, aftermath: str) -> WorkerLostError:
        """The error for the call that lost a task; ``doing`` says what the worker was doing."""
        sig = _signal_name(self.exitcode)
        how = f"was killed by {sig}" if sig else f"exited with code {self.exitcode}"
        cause = _CAUSES.get(sig or "", "native code or signal") if sig else (
            f"the task ended the process (os._exit({self.exitcode}), sys.exit() or exit() in native code)")
        rss = f"; the worker's RSS was {format_bytes(self.rss)} when last sampled" if self.rss else ""
        message = (f"Pool worker {self.index} (pid {self.pid}) {how} {doing}. "
                   f"{sig or f'Exit code {self.exitcode}'}: {cause}{rss}. {aftermath}")
        return WorkerLostError(message, index=self.index, pid=self.pid, exitcode=self.exitcode,
                               rss=self.rss, task=doing)


def _signal_name(exitcode: Optional[int]) -> Optional[str]:
    return None if exitcode is None or exitcode >= 0 else signal_name(-exitcode)


# --------------------------------------------------------------------------
# Exceptions raised by tasks (worker side, then parent side)
# --------------------------------------------------------------------------

Frame = Tuple[str, int, str, str]

# Frames of the Pool's own machinery say nothing about the user's error.
_MACHINERY = (os.path.join("nbmp", "_pool", "worker.py"), os.path.join("multiprocessing", "pool.py"))


class _TaskException:
    """Worker side: the exception plus its frames, reduced to rebuild in the parent."""

    def __init__(self, exc: BaseException, header: str) -> None:
        self.exc = _survivor(exc)
        self.header = header
        self.frames: List[Frame] = [(f.filename, f.lineno or 0, f.name, f.line or "")
                                    for f in traceback.extract_tb(exc.__traceback__)
                                    if not f.filename.endswith(_MACHINERY)]
        self.tail = "".join(traceback.format_exception_only(type(exc), exc))
        self.chain = _format_chain(exc)

    def __reduce__(self) -> Tuple[Any, ...]:
        return _rebuild_task_exception, (self.exc, self.header, self.frames, self.tail, self.chain)


def wrap_task_exception(exc: BaseException, index: Optional[int], pid: int) -> _TaskException:
    """Wrap ``exc`` (raised by a task in worker ``index``) to cross to the parent."""
    return _TaskException(exc, f"Pool worker {index} (pid {pid}) raised:\n")


def _survivor(exc: BaseException) -> BaseException:
    """``exc`` itself if it survives a round trip through pickling, else a RemoteTaskError."""
    try:
        pickle.loads(_pickling.dumps(exc))
        return exc
    except Exception:
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return RemoteTaskError(f"{name}: {exc} (the exception could not be pickled back to the parent)",
                               exc_type=name)


def _format_chain(exc: BaseException) -> str:
    inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if inner is None:
        return ""
    link = ("The above exception was the direct cause of the following exception:"
            if exc.__cause__ is not None else
            "During handling of the above exception, another exception occurred:")
    return "".join(traceback.format_exception(type(inner), inner, inner.__traceback__)) + f"\n{link}\n\n"


def _rebuild_task_exception(exc: BaseException, header: str, frames: List[Frame], tail: str,
                            chain: str) -> BaseException:
    """Parent side: chain the worker's traceback, with source lines looked up here too."""
    lines = [chain, header, "Traceback (most recent call last):\n"]
    for filename, lineno, name, line in frames:
        lines.append(f'  File "{filename}", line {lineno}, in {name}\n')
        line = line or linecache.getline(filename, lineno).strip()
        if line:
            lines.append(f"    {line}\n")
    lines.append(tail)
    exc.__cause__ = RemoteTraceback('\n"""\n' + "".join(lines) + '"""')
    return exc
