"""A settled Pool's idle workers told to go at its terminate, instead of killed and waited for.

``terminate()`` kills its workers and waits for each to be gone: with nothing in flight
(``Watch.settled``, the common ``with Pool(4) as p: p.map(...)``) that wait is most of its
time, the kernel tearing down the page tables each worker's fork copied. A forked worker made by nbmp
carries the ends of its Pool's :class:`~nbmp._backend.exits.ExitChannel`; at a settled
terminate the parent sends each idle one ``posix.LET_GO``, whose handler announces an end
by SIGTERM, waits (``exits.announce``) and dies of SIGTERM: its exit code is the one a
terminate gives. The parent marks each announced worker ended (its ``exitcode`` is -15 from
then on, so the stdlib's terminate neither kills nor joins it), lets them all go once
the terminate is done, and reaps them from a thread while the kernel tears them down.

A worker that does not answer within ``ANSWER_LIMIT`` seconds (busy in a C call, the
signal blocked, descheduled for long), or that has much memory of its own (its exit gives
memory back, ``exits.PRIVATE_LIMIT``), is killed and waited for as before. ``close()`` and
``join()``, and a worker's end at ``maxtasksperchild``, are the stdlib's: only a told
worker announces.

Example (what ``Pool`` does)::

    >>> farewell = Farewell()
    >>> ends = farewell.ends()                   # a worker's last argument, before its fork
    >>> process.farewell_token = ends[1]
    >>> farewell.tell(idle_processes)            # at a settled terminate
    >>> farewell.hear()                          # once the worker thread has ended
    >>> ...                                      # the stdlib's terminate: the marked ones are done
    >>> farewell.release()                       # they exit now, reaped by a thread
"""

from __future__ import annotations

import os
import time
import weakref
from multiprocessing.connection import wait
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .._backend import daemons as _daemons, exits as _exits, posix as _posix

__all__ = ["Farewell", "TOLD", "ANSWER_LIMIT"]

# The result queues of Pools whose terminate told their idle workers to go -> their Farewell
# (the stdlib's _terminate_pool, a classmethod, gets the queues, not the Pool).
TOLD: "weakref.WeakKeyDictionary[Any, Farewell]" = weakref.WeakKeyDictionary()

ANSWER_LIMIT = 0.5  # seconds a told worker has to announce its end before it is killed as before


class Farewell:
    """One Pool's exit channel, made at its first worker, through which its idle workers are
    told to go at a settled terminate (once: a Pool terminates once)."""

    def __init__(self) -> None:
        self._channel: Optional[_exits.ExitChannel] = None
        self._told: Dict[int, Any] = {}  # token -> a worker told to go, until its word or the limit
        self._marked: List[Any] = []  # the workers that gave it, until they are let go

    def ends(self) -> Tuple[int, int, int, int]:
        """The channel's ends for a worker not yet forked, which its loop is given; the
        worker's process object keeps the token (``ends[1]``) as ``farewell_token``."""
        if self._channel is None:
            self._channel = _exits.ExitChannel()
        return self._channel.ends()

    def tell(self, processes: Iterable[Any]) -> None:
        """Tell each of ``processes`` (idle workers of a Pool being terminated, nbmp's forked
        ones) to go: each announces its end, then waits for :meth:`release`."""
        if self._channel is None or _posix.LET_GO is None:
            return
        for process in processes:
            token, popen = getattr(process, "farewell_token", None), getattr(process, "_popen", None)
            if token is None or popen is None or popen.returncode is not None or popen.ended is not None:
                continue
            try:
                os.kill(process.pid, _posix.LET_GO)
            except OSError:  # gone meanwhile: the terminate sees it
                continue
            self._told[token] = process

    def hear(self) -> None:
        """Wait for the told workers' word (``ANSWER_LIMIT`` seconds at most) and mark those
        that announced ended: the stdlib's terminate neither kills nor joins them. The others
        are left to it (killed and waited for, or seen dead). Call it once nothing can
        replace a worker any more (the Pool's worker thread has ended)."""
        told, channel = self._told, self._channel
        deadline = time.monotonic() + ANSWER_LIMIT
        while told and channel is not None:
            for ending in channel.read():
                process = told.pop(ending.token, None)
                if process is not None:
                    _exits.mark(process, ending)
                    self._marked.append(process)
            left = deadline - time.monotonic()
            if not told or left <= 0:
                break
            try:
                ready = wait([channel.fileno(), *(p.sentinel for p in told.values())], timeout=left)
            except (OSError, ValueError):  # a sentinel closed meanwhile: the terminate sees to the rest
                break
            for token, process in list(told.items()):
                if process.sentinel in ready:  # died without a word (much memory of its own): as before
                    del told[token]
        told.clear()

    def release(self) -> None:
        """The Pool has ended: the channel is closed, so the told workers exit now (each would
        at most ``exits.PARK_LIMIT`` after its word), and a thread reaps the marked ones.
        Idempotent; also for a Pool that told no one (its descriptors closed)."""
        marked, self._marked = self._marked, []
        reaper = None
        if marked:  # started first: once the workers are let go, a new thread waits for a CPU (ms)
            try:
                reaper = _daemons.start(_reap, marked, name="nbmp-pool-reap")
            except RuntimeError:  # no new thread (the interpreter is exiting): reaped here
                pass
            _exits.leaving([p.pid for p in marked])
        if self._channel is not None:
            self._channel.close()
        if marked and reaper is None:
            _reap(marked)


def _reap(processes: List[Any]) -> None:
    for process in processes:
        popen = process._popen
        if popen is not None:  # None: the process object was closed, and reaped, meanwhile
            popen.reap()
