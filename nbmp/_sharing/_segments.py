"""Segments: making shared-memory segments, and sending and receiving them as handles.

A segment travels as a :class:`Handle` naming a *ticket*: one reference, registered with the
tree's janitor before the message leaves and turned into the receiver's hold when it maps the
segment (docs/sharing.md). A receiver that already maps it pockets the ticket (``_pocket``); freed
segments are reused (``_pool``); the segments a process maps are in ``_registry``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import secrets
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

from .._backend import interrupts as _interrupts, pickling as _pickling, posix as _posix
from . import _client, _pocket, _pool, _space, _strategies
from ._registry import Buffer, Mapped, find, live, map_fd, mapped_here, register

__all__ = ["Handle", "Mapped", "create", "create_moved", "ticket_for", "forget_ticket", "attach", "find", "live"]


class Handle(NamedTuple):
    """What crosses the process boundary for one segment."""

    root: str        # the tree key of the janitor that holds the references (a secret)
    seg: str
    ticket: str
    size: int
    path: str        # "-" for a file_descriptor segment


_pid = os.getpid()
_token = secrets.token_hex(3)
_counter = itertools.count()


def _secret() -> str:
    """A new ticket: a bearer secret of 128 random bits, unrelated to any segment's name."""
    return secrets.token_hex(16)


def _new_name() -> str:
    global _pid, _token, _counter
    if _pid != os.getpid():  # forked: a fresh namespace, so names never collide with the parent's
        _pid, _token, _counter = os.getpid(), secrets.token_hex(3), itertools.count()
    return f"{_pid}-{next(_counter)}-{_token}"


# -- Making segments -------------------------------------------------------------------------------


def _open_new(root: str, size: int) -> Tuple[int, str, str]:
    """A new, empty segment file: (fd, segment id, path or '-')."""
    strategy, where = _strategies.get_sharing_strategy(), _strategies.directory()
    _space.check_fits(size, strategy, where)
    seg = _new_name()
    if strategy == "file_descriptor":
        return _posix.anonymous_file(f"nbmp-{seg}"), seg, "-"
    path = os.path.join(where, f"nbmp-{seg}")
    # Announced first: killed between creating the file and the janitor's "new", its maker
    # would leave the file behind; announced, the janitor unlinks it when the maker goes.
    _client.send(root, f"plan {path}\n")
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), seg, path


def _discard(fd: int, path: str) -> None:
    os.close(fd)
    if path != "-":
        os.unlink(path)


def create(nbytes: int, opened: Optional[Callable[[int, int], None]] = None, zero: bool = True) -> Buffer:
    """A segment of ``nbytes`` (zero-filled unless ``zero`` is False), mapped and held by this process, a
    freed one reused if it fits. ``opened(fd, size)`` is called while a new one's file is open (torch
    maps it a second time); such a one is never reused."""
    size = max(nbytes, 1)
    root = _client.tree_root()
    poolable = opened is None and _pool.poolable(size)
    reused = _reuse(root, size) if poolable else None
    if reused is not None:
        entry, mm = reused
        if zero:
            ctypes.memset(entry.start, 0, entry.size)
        return mm
    fd, seg, path = _open_new(root, size)
    try:
        _space.reserve(fd, size, path if path != "-" else "a memory file")
        mm = map_fd(fd, size)
        if opened is not None:
            opened(fd, size)
        verb = f"newp {seg} {size} {path} {_idle()}" if poolable else f"new {seg} {size} {path}"
        _hold(root, verb, fd, (seg, size, path), mm, poolable)
    except BaseException:
        _discard(fd, path)
        raise
    os.close(fd)
    return mm


@_interrupts.step
def _reuse(root: str, size: int) -> Optional[Tuple[_pool.Entry, Buffer]]:
    """A freed segment of this process's that fits, claimed from the pool and registered, or neither."""
    entry = _pool.claim(root, size, "-")
    if entry is None:
        return None
    mm = entry.buffer()
    register(root, entry.seg, entry.size, "-", mm, poolable=True)
    return entry, mm


@_interrupts.step
def _hold(root: str, verb: str, fd: int, segment: Tuple[str, int, str], mm: Buffer, poolable: bool) -> None:
    """The janitor's count of our hold on a new segment and the finalizer that gives it back: both or neither."""
    seg, size, path = segment
    _client.send(root, verb + "\n", [fd] if path == "-" else ())
    register(root, seg, size, path, mm, poolable=poolable)


def _idle() -> float:
    return _strategies.get_sharing_pool()[1]


_WRITE_CHUNK = 1 << 30


def write_all(fd: int, size: int, flat: Any) -> None:
    """Write the contiguous bytes ``flat`` to the new segment ``fd``: one ``write``, cheaper than faulting
    in a fresh mapping page by page."""
    view, done = memoryview(flat), 0
    while done < view.nbytes:
        done += os.write(fd, view[done:done + _WRITE_CHUNK])
    if size > view.nbytes:
        os.ftruncate(fd, size)


def copy_into(buf: Buffer, flat: Any) -> None:
    """Copy the contiguous bytes ``flat`` to the start of a reused segment's mapping."""
    src = memoryview(flat).cast("B")
    memoryview(buf).cast("B")[:src.nbytes] = src


def create_moved(nbytes: int, fill: Callable[[int, int], None], fill_mapped: Callable[[Buffer], None]) -> Handle:
    """A segment filled by ``fill(fd, size)`` (a new one) or ``fill_mapped(buffer)`` (a freed one of
    this process's, reused), held only by the ticket returned."""
    size = max(nbytes, 1)
    if _pickling.probing():  # a check's pickle, never loaded: no copy, no reference
        return Handle("", "", "", size, "-")
    root = _client.tree_root()
    _client.reach(root)  # a sandbox that refuses sockets: known before the copy
    if _pool.poolable(size):
        handle = _refill_claimed(root, size, fill_mapped)
        if handle is not None:
            return handle
    fd, seg, path = _open_new(root, size)
    unannounced = [fd]
    try:
        fill(fd, size)
        ticket = _announce_filled(root, unannounced, seg, size, path)
    except BaseException:
        for fd in unannounced:
            _discard(fd, path)
        raise
    return Handle(root, seg, ticket, size, path)


@_interrupts.step
def _refill_claimed(root: str, size: int, fill_mapped: Callable[[Buffer], None]) -> Optional[Handle]:
    """A freed segment of this process's claimed, filled and noted for release (see note_single_use),
    or none claimed: an interrupt waits for the copy (a fraction of a second a GiB)."""
    ticket = _secret()
    entry = _pool.claim(root, size, ticket)
    return None if entry is None else _refill(root, entry, ticket, fill_mapped)


@_interrupts.step
def _announce_filled(root: str, unannounced: List[int], seg: str, size: int, path: str) -> str:
    """The ticket of a new, filled segment (its file ``unannounced[0]``): noted, the janitor told,
    the mapping pooled, all or none; the file is closed either way, taken off ``unannounced``."""
    fd, entry = unannounced[0], None
    try:
        unannounced.clear()
        ticket = _new_ticket(root)
        if path == "-" and _pool.poolable(size):  # kept mapped here (faulted in), to be reused once freed
            entry = _pool.Entry(root, seg, size, ctypes.addressof(map_fd(fd, size, populate=True)), True)
        verb = f"ntp {seg} {ticket} {size} {path} {_idle()}" if entry is not None else f"nt {seg} {ticket} {size} {path}"
        _client.send(root, verb + "\n", [fd] if path == "-" else ())
    except BaseException:
        _discard(fd, path)
        if entry is not None:
            _pool.give_up(entry, tell=False)
        raise
    os.close(fd)
    if entry is not None and not _pool.adopt(entry):
        _pool.give_up(entry)
    return ticket


def _refill(root: str, entry: _pool.Entry, ticket: str, fill_mapped: Callable[[Buffer], None]) -> Handle:
    try:
        fill_mapped(entry.buffer())
    except BaseException:
        forget_ticket(root, ticket)
        _pool.adopt(entry)
        raise
    _pickling.note_single_use(functools.partial(forget_ticket, root, ticket))
    _pool.adopt(entry)
    return Handle(root, entry.seg, ticket, entry.size, "-")


# -- Sending and receiving -------------------------------------------------------------------------


def _new_ticket(root: str) -> str:
    ticket = _secret()
    # One reference: the pickle carrying it is loaded once, or given back if it never is.
    _pickling.note_single_use(functools.partial(forget_ticket, root, ticket))
    return ticket


def forget_ticket(root: str, ticket: str) -> None:
    """Give back the reference ``ticket`` carries, if no process has taken it (its message
    was dropped unread); a ticket already taken is left alone."""
    with contextlib.suppress(OSError):  # the janitor is gone (root exited): nothing is held any more
        _client.send(root, f"forget {ticket}\n")


def ticket_for(mapped: Mapped) -> Handle:
    """A handle for a segment this process maps: one more reference, carried by a ticket
    (one this process pocketed when it received the segment, if it has one: no message)."""
    ticket = "" if _pickling.probing() else _take_ticket(mapped)  # probing: a check's pickle, never loaded: no reference
    return Handle(mapped.root, mapped.seg, ticket, mapped.size, mapped.path)


@_interrupts.step
def _take_ticket(mapped: Mapped) -> str:
    """The reference taken and its release noted: both or neither (a stranded reference keeps the
    segment until the root exits)."""
    ticket = _pocket.reuse(mapped.root, mapped.seg)
    if ticket is None:
        ticket = _secret()
        _client.send(mapped.root, f"tkt {mapped.seg} {ticket}\n")
    # One reference: the pickle carrying it is loaded once, or given back if it never is.
    _pickling.note_single_use(functools.partial(forget_ticket, mapped.root, ticket))
    return ticket


@_interrupts.step
def attach(handle: Handle) -> Buffer:
    """Map the segment ``handle`` names (its ticket becomes this process's hold), whole or not at all:
    a hold without the finalizer that gives it back would keep the segment."""
    mm = mapped_here(handle.seg)
    if mm is not None:  # already mapped here: the ticket is kept for this process's next send
        if handle.ticket:
            _pocket.keep(handle.root, handle.seg, handle.ticket)
        return mm
    fd = _open_received(handle)
    try:
        mm = map_fd(fd, handle.size)
    finally:
        os.close(fd)
    register(handle.root, handle.seg, handle.size, handle.path, mm)
    return mm


def _open_received(handle: Handle) -> int:
    if handle.path != "-":
        try:
            fd = os.open(handle.path, os.O_RDWR)
        except FileNotFoundError:
            raise RuntimeError(_gone(handle)) from None
        _client.send(handle.root, f"own {handle.ticket}\n")
        return fd
    reply, fds = _client.request(handle.root, f"take {handle.ticket}\n")
    if not reply.startswith("ok") or not fds:
        raise RuntimeError(_gone(handle))
    for extra in fds[1:]:
        os.close(extra)
    return fds[0]


def _gone(handle: Handle) -> str:
    return (f"shared-memory segment nbmp-{handle.seg} was already freed when it arrived: the process that "
            f"sent it did not hold it (e.g. a forked child re-sending an array its parent had let go of). "
            f"Fix: keep the array alive in the process that made it until the receivers have it.")
