"""The errors ``nbmp.spawn`` raises when a worker fails, named and shaped as
``torch.multiprocessing``'s so that code catching those keeps working after
``import nbmp as mp``.

All three pickle by ``__reduce__`` (exceptions with extra constructor arguments do
not round-trip through the default ``BaseException`` pickling).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .util import signal_name

__all__ = ["ProcessException", "ProcessRaisedException", "ProcessExitedException", "ProcessStoppedException",
           "raised_message", "exited_error", "stopped_error"]


class ProcessException(Exception):
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


def exited_error(index: int, pid: int, exitcode: int) -> ProcessExitedException:
    """The error for a worker that exited with ``exitcode`` (negative: a signal)."""
    if exitcode >= 0:
        return ProcessExitedException(f"process {index:d} terminated with exit code {exitcode:d}",
                                      index, pid, exitcode)
    name = signal_name(-exitcode)
    return ProcessExitedException(f"process {index:d} terminated with signal {name}", index, pid, exitcode, name)
