"""The errors ``nbmp.spawn`` raises when a worker fails, named and shaped as
``torch.multiprocessing``'s so that code catching those keeps working after
``import nbmp as mp``.

All three pickle by ``__reduce__`` (exceptions with extra constructor arguments do
not round-trip through the default ``BaseException`` pickling).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from .util import signal_name

__all__ = ["ProcessException", "ProcessRaisedException", "ProcessExitedException",
           "raised_message", "exited_error"]


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
