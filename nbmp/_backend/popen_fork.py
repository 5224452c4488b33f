"""Starting a child by ``os.fork()``, with nbmp's fork handlers around the fork.

``_launch`` runs nbmp's ``before`` and ``after_in_parent`` handlers around the stdlib's fork (once
per :func:`fork_round`), and the child marks the fork for ``child_started``. CPython 3.12+'s
generic multi-threaded fork DeprecationWarning is hidden for these forks: nbmp quiesced its own
threads and warns by name about the real hazards (docs/fork_safety.md).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
import warnings
from multiprocessing import popen_fork, util
from multiprocessing.connection import wait
from typing import Any, Iterator, Optional

from .. import _forking

__all__ = ["Popen", "PeakMemory", "peak_rss", "status_lost", "fork_round"]


# 3.12+ warns in the parent after forking a multi-threaded process (os.fork's own check).
_WARNS_ABOUT_THREADS = sys.version_info >= (3, 12)


class _ChildEntry:
    """Stands for the process object inside the stdlib's ``_launch``: only the child calls it."""

    def __init__(self, process_obj: Any, hidden: Optional[warnings.catch_warnings]) -> None:
        self._process_obj, self._hidden = process_obj, hidden

    def _bootstrap(self, parent_sentinel: Optional[int] = None) -> int:
        if self._hidden is not None:
            self._hidden.__exit__(None, None, None)  # the child's warning filters are the parent's again
        _forking.after_fork_in_child()  # for the process object's _bootstrap: nbmp forked it
        return self._process_obj._bootstrap(parent_sentinel=parent_sentinel)  # type: ignore[no-any-return]  # process_obj: Any, a BaseProcess


class _Round(threading.local):
    """This thread's open :func:`fork_round`, and whether its ``before`` handlers have run, each kept as
    the pid it holds in (0: none), so a child finds none open without writing a page."""

    open_in = quiesced_in = 0
    hide_warning = _WARNS_ABOUT_THREADS  # whether the filters would show 3.12+'s fork warning: asked once a round

    @property
    def open(self) -> bool:
        return self.open_in == os.getpid()

    @property
    def quiesced(self) -> bool:
        return self.quiesced_in == os.getpid()


_round = _Round()


@contextlib.contextmanager
def fork_round() -> Iterator[None]:
    """Start several processes by fork with nbmp's fork handlers run once around them all (``before`` at
    the first fork, ``after_in_parent`` on leaving), not re-run and re-faulted per fork. Keep the
    block to the starts themselves: nbmp's threads and logging wait for it to end."""
    if _round.open:  # nested: the outer round runs the handlers
        yield
        return
    _round.open_in = os.getpid()
    try:
        yield
    finally:
        quiesced = _round.quiesced
        _round.open_in = _round.quiesced_in = 0
        if quiesced:
            _forking.after_fork_in_parent()


class PeakMemory:
    """Reaps the child with ``wait4``, which also tells its peak resident memory: ``peak_rss``
    (bytes, None until reaped) goes into the record of the worker's end (a likely
    out-of-memory kill says how big the worker grew). Mixed into nbmp's Popen classes."""

    pid: int
    sentinel: int
    returncode: Optional[int] = None
    peak_rss: Optional[int] = None
    status_lost = False  # reaped by the program itself: its exit status is unknown
    _lost_since = 0.0  # when wait4 first found it reaped by someone else

    def poll(self, flag: int = os.WNOHANG) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status, usage = os.wait4(self.pid, flag)
            except OSError:  # not our child (yet), or reaped already
                # Two threads joining one process (an executor's and its caller's) both wait in wait4; the one
                # that lost sees its code once the other has set it. Reaped by the program itself (SIGCHLD
                # ignored, a reaper of its own), its status is lost: once it has ended, 0, as subprocess says.
                lost = self._lost_since = self._lost_since or time.monotonic()
                while flag == 0 and self.returncode is None and time.monotonic() < lost + 0.1:
                    time.sleep(0.001)
                if self.returncode is None and time.monotonic() >= lost + 0.1 and wait([self.sentinel], 0):
                    self.returncode, self.status_lost = 0, True
                return self.returncode
            if pid == self.pid:
                self.peak_rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # KiB on Linux
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def peak_rss(process: Any) -> Optional[int]:
    """A reaped process's peak resident memory in bytes, where one of nbmp's Popen classes
    reaped it (fork, spawn); None otherwise (not reaped yet, forkserver, a standard process)."""
    return getattr(getattr(process, "_popen", None), "peak_rss", None)


def status_lost(process: Any) -> bool:
    """Whether the program reaped ``process`` itself, taking its exit status (see ``PeakMemory.poll``)."""
    return bool(getattr(getattr(process, "_popen", None), "status_lost", False))


class Popen(PeakMemory, popen_fork.Popen):
    def __init__(self, process_obj: Any) -> None:
        # As the standard Popen's, but a round flushes sys.stdout and sys.stderr once, before
        # its first fork (in a kernel each flush waits for ipykernel's IOPub thread).
        if not _round.quiesced:
            for stream in (sys.stdout, sys.stderr):  # as the standard Popen: a missing or closed one is no error
                with contextlib.suppress(AttributeError, ValueError):
                    stream.flush()
        self.returncode = None
        self.finalizer = None
        self._launch(process_obj)

    def _launch(self, process_obj: Any) -> None:
        in_round = _round.open
        if not _round.quiesced:
            _forking.before_fork(getattr(process_obj, "launch", None))
            _round.quiesced_in = os.getpid() if in_round else 0
            _round.hide_warning = _WARNS_ABOUT_THREADS and not _fork_warning_ignored()
        launch = super()._launch  # type: ignore[misc]  # stdlib private: typeshed omits it
        _collect_if_due()
        try:
            if not _round.hide_warning:
                launch(_ChildEntry(process_obj, None))  # the child never returns from here
                return
            hidden = warnings.catch_warnings()
            with hidden:
                warnings.filterwarnings("ignore", r"This process \(pid=\d+\) is multi-threaded", DeprecationWarning)
                launch(_ChildEntry(process_obj, hidden))
        except OSError as failed:
            if getattr(self, "pid", None) is None:  # the fork itself failed (EAGAIN at the process limit)
                _close_launch_pipes(failed)
                if isinstance(failed, BlockingIOError):
                    raise BlockingIOError(failed.errno, "the system refused a new process: a limit on processes (ulimit -u, a "
                                          "container's pids limit) counts this user's processes and threads; stop some, "
                                          "raise it, or start fewer workers (docs/reliability.md)") from failed
            raise
        finally:
            if not in_round:
                _forking.after_fork_in_parent()


def _collect_if_due(room: int = 100) -> None:
    """Bring on here, not in the child before its freeze, a collection due within ``room`` allocations (docs/fork_safety.md),
    by allocating: the collector picks the generations as ever (``gc.collect(0)`` would pre-empt all in a loop of forks)."""
    threshold, filler = gc.get_threshold()[0], [[0]]
    while gc.isenabled() and 0 < threshold - room <= gc.get_count()[0] and len(filler) < 2 * threshold:
        filler.append([0])


def _fork_warning_ignored() -> bool:
    """Whether the filters ignore 3.12+'s fork warning anyway (the default ones do), so hiding it, which changes them for every thread, is not needed."""
    for action, message, category, module, _ in warnings.filters:
        if issubclass(DeprecationWarning, category) and _matches(message, _FORK_WARNING) and _matches(module, popen_fork.__name__):
            return bool(action == "ignore")
    return False  # no filter says: the default action shows it


def _matches(pattern: Any, text: str) -> bool:
    """A filter's field as the warnings module matches it: None any, a str exactly, a regex from the start."""
    return pattern is None or (pattern == text if isinstance(pattern, str) else bool(pattern.match(text)))


_FORK_WARNING = "This process (pid=1) is multi-threaded, use of fork() may lead to deadlocks in the child."


def _close_launch_pipes(failed: OSError) -> None:
    """Close the pipes the standard launch made before its fork failed, which it leaves open:
    a Pool or run that fails to start must leave nothing behind."""
    tb = failed.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is popen_fork.Popen._launch.__code__:  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
            made = tb.tb_frame.f_locals
            util.close_fds(*(made[name] for name in ("parent_r", "child_w", "child_r", "parent_w") if name in made))  # type: ignore[attr-defined]  # as above
        tb = tb.tb_next
