"""Starting a child by ``os.fork()``, with nbmp's fork handlers around the fork.

What differs from ``multiprocessing.popen_fork.Popen``: ``_launch`` runs nbmp's
``before`` handlers just before the stdlib's launch forks and ``after_in_parent``
right after it (once for all the forks of a :func:`fork_round`: a spawn's or a Pool's
workers); in the child, a thin entry marks the fork for
``nbmp._forking.registry.child_started`` before the process object's ``_bootstrap``. Only
nbmp's forks run them (no ``os.register_at_fork``). CPython 3.12+'s generic
"multi-threaded, use of fork() may lead to deadlocks" DeprecationWarning is hidden
for these forks: nbmp has quiesced its own threads and warns once, by name, about
the threads that are a real hazard (see docs/fork_safety.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from multiprocessing import popen_fork, util
from typing import Any, Callable, Generic, Iterator, List, Optional, Sequence, TextIO, Tuple, TypeVar

from .. import _forking
from . import exits, worker_bootstrap

__all__ = ["Popen", "PeakMemory", "peak_rss", "fork_round", "fork_workers", "FORKS_WORKERS", "MadeForChildren", "take_stdin"]

T = TypeVar("T")


# 3.12+ warns in the parent after forking a multi-threaded process (os.fork's own check).
_WARNS_ABOUT_THREADS = sys.version_info >= (3, 12)


def _has_pidfds() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):  # Python < 3.9, not Linux, or Linux < 5.3
        return False
    return True


# nbmp's workers are forked by ``Popen._fork_worker`` and ``fork_workers`` where the OS has pidfds.
FORKS_WORKERS = _has_pidfds()


class _ChildEntry:
    """Stands for the process object inside the stdlib's ``_launch``: only the child calls it."""

    def __init__(self, process_obj: Any, hidden: Optional[warnings.catch_warnings]) -> None:
        self._process_obj, self._hidden = process_obj, hidden

    def _bootstrap(self, parent_sentinel: Optional[int] = None) -> int:
        if self._hidden is not None:
            self._hidden.__exit__(None, None, None)  # the child's warning filters are the parent's again
        _set_stdin_aside()  # the process object's _after_fork takes the reader
        _forking.after_fork_in_child()  # for the process object's _bootstrap: nbmp forked it
        return self._process_obj._bootstrap(parent_sentinel=parent_sentinel)  # type: ignore[no-any-return]  # process_obj: Any, a BaseProcess

    def bootstrap_worker(self) -> int:
        """The child of ``Popen._fork_worker`` and ``fork_workers``: ``worker_bootstrap.run_forked``."""
        return worker_bootstrap.run_forked(self._process_obj, self._hidden, _null_stdin.take())


class MadeForChildren(Generic[T]):
    """An object the parent makes once (per process) for the children it forks, and each
    forked child takes: what a fresh fork would otherwise make again (each object it makes
    there touches pages it shares with its parent, each a copy-on-write fault).

    ``make`` may raise ``OSError``/``ValueError`` (a descriptor it needs is closed): then
    nothing is made, and a child makes its own.

    Example::

        >>> writers = MadeForChildren(lambda: open(1, "w", closefd=False))
        >>> writers.prepare()   # in the parent, before its forks
        >>> writers.take()      # in a forked child: the parent's object, once; else None
    """

    __slots__ = ("_make", "_made")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made: Optional[Tuple[int, T]] = None  # (the pid that made it, it)

    def prepare(self) -> None:
        if self._made is not None and self._made[0] == os.getpid():
            return
        try:
            self._made = (os.getpid(), self._make())
        except (OSError, ValueError):
            self._made = None

    def take(self) -> Optional[T]:
        """The object a parent made, in the child it forked (None elsewhere, and after the first
        take: this process's own children get what it makes)."""
        made, self._made = self._made, None
        return None if made is None or made[0] == os.getpid() else made[1]


def _devnull_reader() -> TextIO:
    # As the stdlib's: the descriptor stays open for the process's life (closefd=False: no
    # ResourceWarning when the reader is collected at exit).
    return open(os.open(os.devnull, os.O_RDONLY), encoding="utf-8", closefd=False)


# The child's stdin. The stdlib's bootstrap closes the inherited one and opens /dev/null in
# its place (a text reader made in a fresh fork writes pages it shares with its parent). Made once
# in the parent, a forked child takes it instead: its entry closes the inherited stdin and
# leaves None, which the stdlib's bootstrap then skips, and the process object's
# ``_after_fork`` (called right after that) puts this reader in.
_null_stdin: MadeForChildren[TextIO] = MadeForChildren(_devnull_reader)
_taken_stdin: Optional[TextIO] = None


def _set_stdin_aside() -> None:
    global _taken_stdin
    reader = _null_stdin.take()
    if reader is None or sys.stdin is None:
        return
    try:
        sys.stdin.close()
    except (OSError, ValueError):
        pass
    sys.stdin, _taken_stdin = None, reader


def take_stdin() -> None:
    """In a forked child, from its process object's ``_after_fork``: the parent's /dev/null
    reader becomes ``sys.stdin`` (what the stdlib's bootstrap would have opened)."""
    global _taken_stdin
    if _taken_stdin is not None and sys.stdin is None:
        sys.stdin, _taken_stdin = _taken_stdin, None


class _Round(threading.local):
    """This thread's open :func:`fork_round`: whether one is open, and whether its
    ``before`` handlers have run (at its first fork).

    Each is kept as the pid of the process it holds in (0: none), so that a child forked
    inside a round finds none open without writing anything (each page a fresh fork
    writes is a copy-on-write fault)."""

    open_in = 0
    quiesced_in = 0

    @property
    def open(self) -> bool:
        return self.open_in == os.getpid()

    @property
    def quiesced(self) -> bool:
        return self.quiesced_in == os.getpid()


_round = _Round()


@contextlib.contextmanager
def fork_round() -> Iterator[None]:
    """Start several processes by fork with nbmp's fork handlers run once around them all.

    Inside the block, the first fork of this thread runs the ``before`` handlers and
    the others find everything still quiesced; ``after_in_parent`` runs once, on leaving.
    Each fork after the first would otherwise re-run the handlers and re-fault, page by
    page, all they touch (the previous child shares those pages). Keep the block to the
    starts themselves: nbmp's threads and logging wait for it to end.

    Example::

        >>> with fork_round():
        ...     for p in processes:
        ...         p.start()
    """
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
    out-of-memory kill says how big the worker grew). Mixed into nbmp's Popen classes.

    A child that announced its end (``ended``, see ``nbmp._backend.exits``) has closed
    everything and is being torn down by the kernel: ``poll()`` gives its announced exit
    code until it is reaped (a blocking ``poll(0)``, ``reap()``, or a ``WNOHANG`` poll once
    it is gone)."""

    pid: int
    returncode: Optional[int] = None
    peak_rss: Optional[int] = None
    ended: Optional[exits.Ending] = None

    def poll(self, flag: int = os.WNOHANG) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status, usage = os.wait4(self.pid, flag)
            except OSError:  # not our child (yet), or reaped already: as the standard poll
                return None if self.ended is None else self.ended.code
            if pid == self.pid:
                self._reaped(status, usage)
            elif self.ended is not None:
                return self.ended.code
        return self.returncode

    def reap(self) -> Optional[int]:
        """Block until this child, which announced its end, is reaped; its exit code (its word)."""
        assert self.ended is not None, "reap() is for a child that announced its end (exits.mark)"
        if self.returncode is None:
            try:
                pid, status, usage = os.wait4(self.pid, 0)
            except ChildProcessError:  # reaped by another thread's poll, or a waitpid(-1): its word stands
                self.returncode = self.ended.code
            else:
                self._reaped(status, usage)
        return self.returncode

    def _reaped(self, status: int, usage: Any) -> None:
        self.peak_rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # KiB on Linux
        # A child killed between its word and its exit (a signal from outside) had done all
        # it was to do: the code it announced stands, as its caller was already told it.
        self.returncode = os.waitstatus_to_exitcode(status) if self.ended is None else self.ended.code


def peak_rss(process: Any) -> Optional[int]:
    """A reaped process's peak resident memory in bytes, where one of nbmp's Popen classes
    reaped it (fork, spawn), or as it announced it (``exits``); None otherwise (not reaped
    yet, forkserver, a standard process)."""
    popen = getattr(process, "_popen", None)
    peak = getattr(popen, "peak_rss", None)
    ended = getattr(popen, "ended", None)
    return peak if peak is not None or ended is None else ended.peak_rss


class Popen(PeakMemory, popen_fork.Popen):
    def __init__(self, process_obj: Any) -> None:
        # As the standard Popen's, but a round flushes sys.stdout and sys.stderr once, before
        # its first fork (in a kernel each flush waits for ipykernel's IOPub thread).
        if not _round.quiesced:
            util._flush_std_streams()  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        self.returncode = None
        self.finalizer = None
        self._launch(process_obj)

    def _launch(self, process_obj: Any) -> None:
        in_round = _quiesce(process_obj)
        launch = self._fork_worker if FORKS_WORKERS and getattr(process_obj, "launch", None) and \
            process_obj.launch.worker else super()._launch  # type: ignore[misc]  # stdlib private: typeshed omits it
        try:
            if not _WARNS_ABOUT_THREADS:
                launch(_ChildEntry(process_obj, None))  # the child never returns from here
                return
            hidden = warnings.catch_warnings()
            with hidden:
                warnings.filterwarnings("ignore", r"This process \(pid=\d+\) is multi-threaded", DeprecationWarning)
                launch(_ChildEntry(process_obj, hidden))
        finally:
            if not in_round:
                _forking.after_fork_in_parent()

    def _fork_worker(self, entry: _ChildEntry) -> None:
        """An nbmp worker's fork (spawn's, a Pool's): the child runs nbmp's own bootstrap
        (``worker_bootstrap``) and the sentinel is a pidfd, one descriptor made after the fork
        where the standard launch makes two pipes before it and closes two after."""
        self._forked(_fork_child(entry))

    def _forked(self, pid: int) -> None:
        """In the parent, after the fork of child ``pid``: its sentinel."""
        self.returncode, self.finalizer, self.pid = None, None, pid
        try:
            self.sentinel = os.pidfd_open(pid)
        except OSError:  # out of descriptors: the child is stopped, its start fails
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        self.finalizer = util.Finalize(self, util.close_fds, (self.sentinel,))  # type: ignore[attr-defined]  # stdlib private: typeshed omits it


def _quiesce(process_obj: Any) -> bool:
    """Before a fork: the ``before`` handlers, unless this thread's round already ran them.
    Returns whether a :func:`fork_round` is open (then it runs ``after_in_parent`` on leaving)."""
    in_round = _round.open
    if not _round.quiesced:
        _null_stdin.prepare()
        _forking.before_fork(getattr(process_obj, "launch", None))
        worker_bootstrap.prepare()
        _round.quiesced_in = os.getpid() if in_round else 0
    return in_round


def _fork_child(entry: _ChildEntry) -> int:
    pid = os.fork()
    if pid == 0:
        code, worker = 1, os.getpid()
        try:
            code = entry.bootstrap_worker()
        finally:
            channel = exits.channel_of(entry._process_obj)
            if channel is not None and os.getpid() == worker:  # not a child the worker forked that came back here
                exits.announce(channel, code)
            os._exit(code)
    return pid


def fork_workers(processes: Sequence[Any], started: List[Popen]) -> None:
    """Fork one nbmp worker per process object, back to back, appending each one's ``Popen``
    to ``started`` (also those forked before a failure, which is raised).

    Between two forks the parent does nothing but fork: each page it writes there is copied
    once per child already forked, and ``Process.start`` one by one wrote ~90 of them
    (``nbmp._backend.process.start_workers`` does its bookkeeping after the round). Needs
    pidfds (``FORKS_WORKERS``); call it inside a :func:`fork_round`.

    Example::

        >>> with fork_round():
        ...     fork_workers(processes, popens)
    """
    if not processes:
        return
    exits.wait_for_leavers()
    if not _round.quiesced:
        util._flush_std_streams()  # type: ignore[attr-defined]  # stdlib private: typeshed omits it. Popen.__init__'s flush
    in_round = _quiesce(processes[0])
    hidden: Optional[warnings.catch_warnings] = None
    try:
        if _WARNS_ABOUT_THREADS:
            hidden = warnings.catch_warnings()
            hidden.__enter__()
            warnings.filterwarnings("ignore", r"This process \(pid=\d+\) is multi-threaded", DeprecationWarning)
        entries = [_ChildEntry(process_obj, hidden) for process_obj in processes]
        pids = [0] * len(entries)
        try:
            for k, entry in enumerate(entries):
                pids[k] = _fork_child(entry)
        finally:
            failed: Optional[OSError] = None
            for pid in pids:
                if pid:
                    popen = Popen.__new__(Popen)
                    try:
                        popen._forked(pid)  # stops its child if it fails
                    except OSError as exc:
                        failed = failed or exc
                        continue
                    started.append(popen)
            if failed is not None:
                raise failed
    finally:
        if hidden is not None:
            hidden.__exit__(None, None, None)
        if not in_round:
            _forking.after_fork_in_parent()
