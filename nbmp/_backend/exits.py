"""Workers that say how they end before the kernel has finished ending them.

A forked child's exit is mostly the kernel tearing down the page tables its fork copied
(~3.8 ms of a ~4.8 ms life for a bare child of a parent with torch imported, see
docs/benchmarks.md), and a parent that waits on the child's exit (a pidfd, a sentinel
pipe, ``waitpid``) waits for all of it: the kernel closes a dying process's descriptors
and wakes its parent only after its memory is gone. A worker forked with an
:class:`ExitChannel` instead, once its process object's life is over, closes every
descriptor it holds but the channel's, writes one record -- its token, its exit code, its
peak resident memory -- and calls ``os._exit``: by the time the parent reads the record the
worker has released everything but its memory, and its exit code is the one it is about to
exit with. The parent marks the worker's ``Popen`` ``ended`` (:func:`mark`): its ``poll()``
then gives that code, and it is reaped later, while the kernel frees its memory. A worker
with much memory of its own (``PRIVATE_LIMIT``: pages it grew by or wrote, which its exit
gives back to the machine) says nothing and is waited for as before: when the call
returns, that memory is free again.

Who reads the records: ``nbmp.spawn`` with ``join=True``, whose caller gets values and never
the process objects (see ``nbmp._spawn.supervisor``): the run ends on its workers' word, and
the last worker's teardown no longer delays the return. (A Pool's terminate gains nothing
from it on two cores: its four workers' teardowns take both cores before the parent could
read their word; docs/benchmarks.md, "Stop 49".)

Example::

    >>> channel = ExitChannel()
    >>> channel.attach(process)          # before its fork: process.exit_channel is set
    >>> channel.forked()                 # after the round of forks: the parent's write end closed
    >>> channel.read()                   # once channel.fileno() is readable
    [Ending(token=1, code=0, peak_rss=52428800)]
    >>> mark(process, _[0])              # process.exitcode is 0 from now on; reap it later
"""

from __future__ import annotations

import itertools
import os
import resource
import struct
import weakref
from typing import Any, List, NamedTuple, Optional, Tuple

from . import posix

__all__ = ["ExitChannel", "Ending", "announce", "channel_of", "mark"]

# The worker's token, exit code, peak RSS in KiB: one write, far below PIPE_BUF (atomic).
_RECORD = struct.Struct("=iiq")

# A worker that has made more memory of its own than this (KiB: pages it grew by, pages it
# faulted in, copies of its parent's pages it wrote) does not announce its end: the caller then
# waits until the kernel has given that memory back, as it would without a channel. Teardown of
# the page tables a fork copied, which is what the announcement saves waiting for, frees nothing.
PRIVATE_LIMIT = 64 << 10

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
    (records nobody read) loses a record, and its worker is then seen ending by its exit."""

    def __init__(self) -> None:
        # The parent's resident KiB, which its workers start with (unknown: only their faults count).
        self._base = (posix.resident_bytes() or 1 << 50) // 1024
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._tokens = itertools.count(1)
        self._fds = [self._read, self._write]
        self._closer = weakref.finalize(self, _close, self._fds)

    def fileno(self) -> int:
        """The read end, to watch in a selector (a worker forked meanwhile should close it)."""
        return self._read

    def attach(self, process: Any) -> None:
        """Have ``process`` (an nbmp process object, not started) announce its end here."""
        process.exit_channel = (self._write, next(self._tokens), self._base)

    def forked(self) -> None:
        """After the last fork: the parent's copy of the write end closed (the children have theirs)."""
        if self._write in self._fds:
            self._fds.remove(self._write)
            os.close(self._write)

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
        self._closer()


def channel_of(process_obj: Any) -> Optional[Tuple[int, int, int]]:
    """The (write end, token, resident KiB at its fork) ``process_obj`` announces its end with, or None."""
    return getattr(process_obj, "exit_channel", None)


def mark(process: Any, ending: Ending) -> None:
    """``process`` said how it ends: its ``Popen`` (nbmp's, see ``popen_fork.PeakMemory``)
    gives that exit code from now on, until it is reaped."""
    process._popen.ended = ending


def announce(channel: Tuple[int, int, int], code: int) -> None:
    """In the worker, its last step before ``os._exit(code)``: unless it has much memory of its
    own, close every other descriptor, then write its record. Errors are swallowed: the parent
    then sees the exit itself, as without a channel."""
    fd, token, base = channel
    try:
        mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        if max(0, mine.ru_maxrss - base) + mine.ru_minflt * _PAGE_KIB > PRIVATE_LIMIT:
            return  # worth waiting for: its exit gives memory back
        _close_all_but(fd)
        usage = max(mine.ru_maxrss, theirs.ru_maxrss)  # as wait4 would tell
        os.write(fd, _RECORD.pack(token, code & 0xFF, usage))  # & 0xFF: the status waitpid will give
    except BaseException:
        pass


def _close_all_but(fd: int) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if 0 < limit <= _RANGE_LIMIT:
        os.closerange(0, fd)
        os.closerange(fd + 1, limit)
        return
    _close([int(name) for name in os.listdir("/proc/self/fd") if int(name) != fd])

