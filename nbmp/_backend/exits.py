"""Workers that say how they end before the kernel has finished ending them.

A forked child's exit is mostly the kernel tearing down the page tables its fork copied
(most of a bare child's life in a parent with torch imported), and a parent that waits on the child's exit (a pidfd, a sentinel
pipe, ``waitpid``) waits for all of it: the kernel closes a dying process's descriptors
and wakes its parent only after its memory is gone. A worker forked with an
:class:`ExitChannel` instead, once its process object's life is over, closes every
descriptor it holds but the channel's, writes one record -- its token, its exit code, its
peak resident memory -- and exits: by the time the parent reads the record the
worker has released everything but its memory, and its exit code is the one it is about to
exit with. The parent marks the worker's ``Popen`` ``ended`` (:func:`mark`): its ``poll()``
then gives that code, and it is reaped later, while the kernel frees its memory. A worker
with much memory of its own (``PRIVATE_LIMIT``: pages it grew by or wrote, which its exit
gives back to the machine) says nothing and is waited for as before: when the call
returns, that memory is free again.

A worker with little memory of its own (``PARK_PRIVATE_LIMIT``) then waits, before
``os._exit``, until the run has ended (:meth:`ExitChannel.close`, which its caller calls once
it has the run's outcome) or ``PARK_LIMIT`` seconds have passed, and exits as a batch process
(``posix.run_as_batch``: woken, it takes a free CPU and preempts no one). Its teardown would
otherwise take a CPU from the workers still running, from the parent's supervision and from
the caller's next steps. What a waiting
worker holds meanwhile is its page tables and a few pages.

Who reads the records: ``nbmp.spawn`` with ``join=True``, whose caller gets values and never
the process objects (see ``nbmp._spawn.supervisor``): the run ends on its workers' word, and
the last worker's teardown no longer delays the return. A Pool's idle workers announce only
when told to, at a terminate with nothing in flight (:func:`farewell`, ``nbmp._pool.farewell``).
Workers let go are remembered (:func:`leaving`) until the next round of forks, which waits
for their teardowns first (:func:`wait_for_leavers`).

Example::

    >>> channel = ExitChannel()
    >>> channel.attach(process)          # before its fork: process.exit_channel is set
    >>> channel.forked()                 # after the round of forks: the parent's write end closed
    >>> channel.read()                   # once channel.fileno() is readable
    [Ending(token=1, code=0, peak_rss=52428800)]
    >>> mark(process, _[0])              # process.exitcode is 0 from now on; reap it later
    >>> channel.close()                  # the run has ended: the waiting workers exit now
"""

from __future__ import annotations

import itertools
import os
import resource
import signal
import struct
import time
import weakref
from typing import Any, List, NamedTuple, Optional, Tuple

from . import posix

__all__ = ["ExitChannel", "Ending", "announce", "channel_of", "farewell", "leaving", "mark", "wait_for_leavers"]

# The worker's token, exit code, peak RSS in KiB: one write, far below PIPE_BUF (atomic).
_RECORD = struct.Struct("=iiq")

# A worker that has made more memory of its own than this (KiB: pages it grew by, pages it
# faulted in, copies of its parent's pages it wrote) does not announce its end: the caller then
# waits until the kernel has given that memory back, as it would without a channel. Teardown of
# the page tables a fork copied, which is what the announcement saves waiting for, frees nothing.
PRIVATE_LIMIT = 64 << 10

# A worker that announced its end waits for the run's end (``ExitChannel.close``) at most this
# long (seconds) before its exit, and only with at most this much memory of its own (KiB): a
# worker whose run goes on longer, or that holds more, exits at once after its record.
PARK_LIMIT = 0.1
PARK_PRIVATE_LIMIT = 16 << 10

_PAGE_KIB = resource.getpagesize() // 1024

# Above this many possible descriptors, the child lists /proc/self/fd instead of asking the kernel
# to close a range (os.closerange falls back to one close() per number where close_range(2) is missing).
_RANGE_LIMIT = 1 << 16


class Ending(NamedTuple):
    """What a worker said just before ``os._exit``: its token, exit code, peak RSS in bytes."""

    token: int
    code: int
    peak_rss: int


def _close(fds: List[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:  # closed already (a fork's child that closes all, the listing's own)
            pass


class ExitChannel:
    """One pipe on which the workers attached to it write one :class:`Ending` each.

    Tokens, not pids, name the workers: a record left unread in the pipe cannot be taken
    for a later worker that got the same pid. The write end does not block: a full pipe
    (records nobody read) loses a record, and its worker is then seen ending by its exit.

    A second pipe releases the workers that wait after their record: :meth:`close` writes
    one byte on it, which every waiting worker sees (none reads it)."""

    def __init__(self) -> None:
        # The parent's resident KiB, which its workers start with (unknown: only their faults count).
        self._base = (posix.resident_bytes() or 1 << 50) // 1024
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._held, self._release = os.pipe()  # the workers wait on _held until _release is written
        self._tokens = itertools.count(1)
        self._fds = [self._read, self._write, self._held, self._release]
        self._closer = weakref.finalize(self, _release_and_close, self._release, self._fds)

    def fileno(self) -> int:
        """The read end, to watch in a selector (a worker forked meanwhile should close it)."""
        return self._read

    def parent_ends(self) -> Tuple[int, int]:
        """The descriptors only the parent uses (the records' read end, the release's write
        end): a worker forked meanwhile closes its copies."""
        return self._read, self._release

    def attach(self, process: Any) -> None:
        """Have ``process`` (an nbmp process object, not started) announce its end here."""
        process.exit_channel = self.ends()

    def ends(self) -> Tuple[int, int, int, int]:
        """A new worker's (write end, token, resident KiB at its fork, waiting end): what
        :func:`announce` and :func:`farewell` take. For a worker that announces only when
        told to (see ``nbmp._pool.farewell``): the parent keeps these ends open for the
        workers it forks later, and does not call :meth:`forked`."""
        return self._write, next(self._tokens), self._base, self._held

    def forked(self) -> None:
        """After the last fork: the parent's copies of the write end and of the waiting end
        closed (the children have theirs)."""
        for fd in (self._write, self._held):
            if fd in self._fds:
                self._fds.remove(fd)
                os.close(fd)

    def read(self) -> List[Ending]:
        """Up to 256 records written since the last read (a selector says when more wait)."""
        if self._read not in self._fds:  # closed: its number may be another descriptor's by now
            return []
        try:
            data = os.read(self._read, _RECORD.size * 256)
        except OSError:  # nothing came (BlockingIOError)
            return []
        return [Ending(token, code, kib * 1024) for token, code, kib in _RECORD.iter_unpack(data)]

    def close(self) -> None:
        """The run has ended: the workers waiting after their record exit now; every
        descriptor left is closed. Idempotent, from any thread."""
        self._closer()


def _release_and_close(release: int, fds: List[int]) -> None:
    try:
        os.write(release, b"\0")  # one byte, which every waiting worker sees; the pipe is empty: no block
    except OSError:
        pass
    _close(fds)


def channel_of(process_obj: Any) -> Optional[Tuple[int, int, int, int]]:
    """The (write end, token, resident KiB at its fork, waiting end) ``process_obj`` announces
    its end with, or None."""
    return getattr(process_obj, "exit_channel", None)


def mark(process: Any, ending: Ending) -> None:
    """``process`` said how it ends: its ``Popen`` (nbmp's, see ``popen_fork.PeakMemory``)
    gives that exit code from now on, until it is reaped."""
    process._popen.ended = ending


def announce(channel: Tuple[int, int, int, int], code: int) -> None:
    """In the worker, its last step before ``os._exit(code)``: unless it has much memory of its
    own, close every other descriptor, write its record, and (with little memory of its own)
    wait for the run's end, at most ``PARK_LIMIT`` seconds. Errors are swallowed: the parent
    then sees the exit itself, as without a channel."""
    _announce(channel, code & 0xFF)  # the status waitpid will give


def _announce(channel: Tuple[int, int, int, int], code: int) -> None:
    """:func:`announce`, with ``code`` the one to record (negative: a death by that signal)."""
    fd, token, base, held = channel
    try:
        mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        own = max(0, mine.ru_maxrss - base) + mine.ru_minflt * _PAGE_KIB
        if own > PRIVATE_LIMIT:
            return  # worth waiting for: its exit gives memory back
        _close_all_but(fd, held)
        waits = own <= PARK_PRIVATE_LIMIT
        if waits:  # before the record: once released, this worker's exit pushes no one off a CPU
            posix.run_as_batch()
        usage = max(mine.ru_maxrss, theirs.ru_maxrss)  # as wait4 would tell
        os.write(fd, _RECORD.pack(token, code, usage))
        if waits:
            posix.ready(held, PARK_LIMIT)
    except BaseException:
        pass


def farewell(channel: Tuple[int, int, int, int], signum: int = signal.SIGTERM) -> None:
    """In a worker told to go (from a signal handler): announce an end by ``signum`` (and wait,
    as :func:`announce` does), then die of it, as a ``terminate()`` would have killed it."""
    try:
        _announce(channel, -signum)
    finally:
        posix.die_of(signum)


# Workers let go whose teardowns may still run: (the parent's pid, their pids).
_leaving: Tuple[int, List[int]] = (0, [])

# How long a round of forks waits at most for the teardowns of the workers let go before it.
LEAVERS_LIMIT = 0.05


def leaving(pids: List[int]) -> None:
    """Workers that were let go (this process's children): their teardowns run from now on,
    and the next round of forks waits for them (:func:`wait_for_leavers`)."""
    global _leaving
    owner, pending = _leaving
    if owner != os.getpid():
        _leaving = owner, pending = os.getpid(), []
    pending.extend(pids)


def wait_for_leavers(limit: Optional[float] = None) -> None:
    """Before a round of forks: until the workers let go before it are gone, at most ``limit``
    seconds (default ``LEAVERS_LIMIT``). A parent's fork and the teardown of one of its children
    take the same locks (those of the memory areas they share), so the two at once each wait
    for the other. The workers are forgotten after one wait."""
    global _leaving
    owner, pending = _leaving
    if owner != os.getpid() or not pending:
        return
    _leaving = owner, []
    deadline = time.monotonic() + (LEAVERS_LIMIT if limit is None else limit)
    for pid in pending:
        try:
            while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.0002)
        except OSError:  # reaped already
            pass


def _close_all_but(*kept: int) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if 0 < limit <= _RANGE_LIMIT:
        low = 0
        for fd in sorted(kept):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, limit)
        return
    _close([int(name) for name in os.listdir("/proc/self/fd") if int(name) not in kept])
