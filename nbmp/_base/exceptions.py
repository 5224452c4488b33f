"""nbmp's root error, and the errors ``nbmp.spawn`` raises when a worker fails, named and shaped
as ``torch.multiprocessing``'s. Every nbmp error class derives from :class:`NbmpError` and keeps
the standard base a caller may catch; the spawn errors pickle by ``__reduce__`` (extra constructor
arguments do not round-trip through ``BaseException``'s pickling).
"""

from __future__ import annotations

import functools
import os
import types
from multiprocessing.pool import RemoteTraceback  # type: ignore[attr-defined]  # typeshed omits this runtime name
from typing import Any, Callable, List, Optional, Tuple, TypeVar, cast

from .events import WorkerExited

__all__ = ["NbmpError", "RemoteTaskError", "ProcessException", "ProcessRaisedException", "UncallableTargetError",
           "ProcessExitedException", "ProcessStoppedException",
           "raised_message", "exited_error", "stopped_error", "in_nbmp", "raised_at_caller"]

_F = TypeVar("_F", bound=Callable[..., Any])
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class NbmpError(Exception):
    """The root of every error class nbmp defines: ``except nbmp.NbmpError`` catches a failed
    worker of ``spawn`` or of a Pool, a full ``/dev/shm``, an object nbmp could not pickle.

    Example::

        >>> try:
        ...     nbmp.spawn(lambda i: os._exit(3), nprocs=1)
        ... except nbmp.NbmpError as e:
        ...     print(type(e).__name__)
        ProcessExitedException
    """


class RemoteTaskError(NbmpError):
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

    def __init__(self, message: str, exc_type: str = "") -> None:
        super().__init__(message)
        self.exc_type = exc_type

    def __reduce__(self) -> Tuple[Any, ...]:
        return type(self), (self.args[0], self.exc_type)


class ProcessException(NbmpError):
    """A worker of ``nbmp.spawn`` failed; ``error_index`` is its index, ``error_pid`` its pid.

    Example::

        >>> try:
        ...     nbmp.spawn(lambda i: 1 / i, nprocs=2)
        ... except nbmp.ProcessException as e:
        ...     print(e.error_index)
        0
    """

    def __init__(self, msg: str, error_index: int, error_pid: int) -> None:
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.error_pid = error_pid

    @property
    def pid(self) -> int:
        """The failed worker's pid (same as ``error_pid``)."""
        return self.error_pid

    def __reduce__(self) -> Tuple[Any, ...]:
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """A worker's function raised; the message holds the worker's traceback.

    ``__cause__`` is the worker's exception itself where it could be unpickled in
    the parent, so its type can be tested.

    Example::

        >>> try:
        ...     nbmp.spawn(lambda i: int("x"), nprocs=1)
        ... except nbmp.ProcessRaisedException as e:
        ...     print(type(e.__cause__).__name__)
        ValueError
    """


class UncallableTargetError(TypeError, ProcessRaisedException):
    """``spawn``'s ``fn`` cannot be called as ``fn(i, *args)``: raised before any worker starts.

    A ``TypeError`` (what the mistake is), and a :class:`ProcessRaisedException` with
    ``error_index`` 0 and ``error_pid`` 0 (no worker was started): ``torch.multiprocessing``
    reports the same mistake as that, from its first worker, so code and tests written
    for either keep working.

    Example::

        >>> try:
        ...     nbmp.spawn(lambda: None, nprocs=2)
        ... except TypeError as e:
        ...     print(isinstance(e, nbmp.ProcessRaisedException))
        True
    """

    def __init__(self, msg: str, error_index: int = 0, error_pid: int = 0) -> None:
        ProcessRaisedException.__init__(self, msg, error_index, error_pid)


class ProcessExitedException(ProcessException):
    """A worker exited with a non-zero code or was killed by a signal.

    ``exit_code`` is as ``Process.exitcode`` (negative: killed by signal
    ``-exit_code``, whose name is ``signal_name``).

    Example::

        >>> try:
        ...     nbmp.spawn(lambda i: os._exit(3), nprocs=1)
        ... except nbmp.ProcessExitedException as e:
        ...     print(e.exit_code)
        3
    """

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int,
                 signal_name: Optional[str] = None) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self) -> Tuple[Any, ...]:
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code, self.signal_name)


class ProcessStoppedException(ProcessException):
    """The run was stopped by the dashboard's Stop button before every worker finished.

    ``results`` holds each worker's return value by index, ``None`` for those that were
    stopped; ``finished`` lists the indices that did finish. ``error_index`` and
    ``error_pid`` name the first stopped worker.

    Example::

        >>> try:
        ...     nbmp.spawn(train, nprocs=2)          # Stop clicked while worker 1 runs
        ... except nbmp.ProcessStoppedException as e:
        ...     print(e.finished, e.results)
        [0] ['done', None]
    """

    def __init__(self, msg: str, error_index: int, error_pid: int, results: Optional[List[Any]] = None,
                 finished: Optional[List[int]] = None) -> None:
        super().__init__(msg, error_index, error_pid)
        self.results = list(results or [])
        self.finished = list(finished or [])

    def __reduce__(self) -> Tuple[Any, ...]:
        return type(self), (self.msg, self.error_index, self.error_pid, self.results, self.finished)


def stopped_error(results: List[Any], finished: List[int], pids: List[int]) -> ProcessStoppedException:
    """The error that ends a run stopped by the user: it says so and carries what finished."""
    stopped = [i for i in range(len(results)) if i not in finished]
    first = stopped[0] if stopped else -1
    msg = (f"the run was stopped (the dashboard's Stop button): worker(s) {stopped} were stopped before "
           f"finishing, {len(finished)} of {len(results)} finished. The finished workers' return values are "
           f"in this error's .results (None for the stopped ones) and their indices in .finished; "
           f"run the call again for a complete result")
    return ProcessStoppedException(msg, first, pids[first] if stopped else 0, results, finished)


def raised_message(index: int, child_traceback: str) -> str:
    """torch's message for a worker that raised: a header, then the child's traceback."""
    return f"\n\n-- Process {index:d} terminated with the following error:\n{child_traceback.rstrip()}"


def exited_error(end: WorkerExited) -> ProcessExitedException:
    """The error for a worker that exited with a non-zero code or was killed by a signal:
    torch's first line, then the likely cause (``WorkerExited.cause``)."""
    sig = end.signal_name
    first = (f"process {end.index:d} terminated with signal {sig}" if sig else
             f"process {end.index:d} terminated with exit code {end.exitcode:d}" if end.exitcode else
             f"process {end.index:d} ended without sending its value, and its exit status is lost: this program reaps "
             f"child processes itself (SIGCHLD ignored, or a handler that waits for them)")
    cause = f"\nLikely cause: {end.cause}." if end.cause else ""
    return ProcessExitedException(first + cause, end.index, end.pid, end.exitcode, sig)


def in_nbmp(filename: str) -> bool:
    """Whether ``filename`` is one of nbmp's own source files."""
    return filename.startswith(_PACKAGE)


def raised_at_caller(fn: _F) -> _F:
    """``fn``, a public entry point whose :class:`NbmpError` or rebuilt worker exception shows the caller's
    line and the worker's frames, none of nbmp's; other errors (nbmp's bugs) keep every frame."""

    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841  # IPython hides it; Python 3.10 keeps it (see below)
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            if isinstance(error, NbmpError) or isinstance(error.__cause__, RemoteTraceback):
                # From Python 3.11 a bare raise goes on with this traceback and adds no frame of
                # this function; 3.10 re-raises the traceback it caught.
                error.__traceback__ = _without_nbmp(error.__traceback__)
            raise

    return cast(_F, entry)


def _without_nbmp(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    kept: List[types.TracebackType] = []
    while tb is not None:
        if not in_nbmp(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for tb in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    return rebuilt
