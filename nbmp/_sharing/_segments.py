"""Segments: making, mapping and sending shared-memory segments, and finding the one under an address.

A segment travels as a :class:`Handle` naming a *ticket*: one reference to the
segment, registered with the tree's janitor by the sender before the message
leaves, and turned into the receiver's own hold when it maps the segment. So the
memory lives while any process maps it or any message carrying it is unread --
whatever order the processes exit in -- and is freed by the janitor when the
last reference goes, or when the tree's root process dies.

Each process keeps a registry of the segments it maps, by address, so that any
array or tensor whose data lies in one (a view, a slice, a transpose) is found
and sent as a handle.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import itertools
import mmap
import os
import secrets
import threading
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .._backend import pickling as _pickling
from . import _client, _pocket, _space, _strategies

__all__ = ["Handle", "Mapped", "create", "create_moved", "ticket_for", "forget_ticket", "attach", "find", "live"]


class Handle(NamedTuple):
    """What crosses the process boundary for one segment."""

    root: int        # whose janitor holds the references
    seg: str
    ticket: str
    size: int
    path: str        # "-" for a file_descriptor segment


Buffer = ctypes.Array[ctypes.c_char]  # a c_char array over the mapping; arrays and tensors keep it alive


class Mapped:
    """A segment mapped in this process; the buffer object's life is the mapping's."""

    __slots__ = ("seg", "root", "size", "path", "start", "mm", "__weakref__")

    def __init__(self, handle: Handle, buf: Buffer) -> None:
        self.seg, self.root, self.size, self.path = handle.seg, handle.root, handle.size, handle.path
        self.mm: "weakref.ref[Buffer]" = weakref.ref(buf)
        self.start = ctypes.addressof(buf)


# mmap through libc rather than the mmap module: an mmap.mmap object keeps a duplicate
# of its file descriptor open for its whole life (before Python 3.13's trackfd=False),
# and thousands of arrays in flight would exhaust the process's descriptors.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map(fd: int, size: int) -> Buffer:
    address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"cannot map a shared-memory segment of {size} bytes: {os.strerror(err)}")
    return (ctypes.c_char * size).from_address(address)


# Reentrant: a finalizer (unregister) may run while this thread is inside find().
_lock = threading.RLock()


def _new_lock_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # the parent's may have been held by a thread that is not here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)

_by_seg: Dict[str, Mapped] = {}
_starts: List[int] = []
_at_start: Dict[int, Mapped] = {}
_pid = os.getpid()
_token = secrets.token_hex(3)
_counter = itertools.count()


def _new_name() -> str:
    global _pid, _token, _counter
    if _pid != os.getpid():  # forked: a fresh namespace, so names never collide with the parent's
        _pid, _token, _counter = os.getpid(), secrets.token_hex(3), itertools.count()
    return f"{_pid}-{next(_counter)}-{_token}"


# --------------------------------------------------------------------------
# Making segments
# --------------------------------------------------------------------------


def _open_new(size: int) -> Tuple[int, str, str]:
    """A new, empty segment file: (fd, segment id, path or '-')."""
    strategy, where = _strategies.get_sharing_strategy(), _strategies.directory()
    _space.check_fits(size, strategy, where)
    seg = _new_name()
    if strategy == "file_descriptor":
        return os.memfd_create(f"nbmp-{seg}", os.MFD_CLOEXEC), seg, "-"
    path = os.path.join(where, f"nbmp-{seg}")
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), seg, path


def _discard(fd: int, path: str) -> None:
    os.close(fd)
    if path != "-":
        os.unlink(path)


def create(nbytes: int, opened: Optional[Callable[[int, int], None]] = None) -> Buffer:
    """A new zero-filled segment of ``nbytes``, mapped and held by this process.

    ``opened(fd, size)``, if given, is called while the segment's file is open (to map it
    a second time, by another library: torch's shared storages)."""
    size = max(nbytes, 1)
    fd, seg, path = _open_new(size)
    try:
        _space.reserve(fd, size, path if path != "-" else "a memory file")
        mm = _map(fd, size)
        if opened is not None:
            opened(fd, size)
        root = _client.tree_root()
        _client.send(root, f"new {seg} {size} {path}\n", [fd] if path == "-" else ())
    except BaseException:
        _discard(fd, path)
        raise
    os.close(fd)
    _register(Handle(root, seg, "", size, path), mm)
    return mm


_WRITE_CHUNK = 1 << 30


def write_all(fd: int, size: int, flat: Any) -> None:
    """Write the contiguous bytes ``flat`` (a uint8 buffer) to the new segment ``fd`` of ``size``.

    One ``write`` into the memory file is the one copy of a move (cheaper than faulting
    in a fresh mapping page by page).
    """
    view, done = memoryview(flat), 0
    while done < view.nbytes:
        done += os.write(fd, view[done:done + _WRITE_CHUNK])
    if size > view.nbytes:
        os.ftruncate(fd, size)


def create_moved(nbytes: int, fill: Callable[[int, int], None]) -> Handle:
    """A new segment filled by ``fill(fd, size)`` and held only by the ticket returned."""
    size = max(nbytes, 1)
    if _pickling.probing():  # a check's pickle, never loaded: no copy, no reference
        return Handle(0, "", "", size, "-")
    fd, seg, path = _open_new(size)
    try:
        fill(fd, size)
        root = _client.tree_root()
        ticket = _new_ticket(root)
        _client.send(root, f"nt {seg} {ticket} {size} {path}\n", [fd] if path == "-" else ())
    except BaseException:
        _discard(fd, path)
        raise
    os.close(fd)
    return Handle(root, seg, ticket, size, path)


# --------------------------------------------------------------------------
# Sending and receiving
# --------------------------------------------------------------------------


def _new_ticket(root: int) -> str:
    ticket = _new_name()
    # One reference: the pickle carrying it is loaded once, or given back if it never is.
    _pickling.note_single_use(functools.partial(forget_ticket, root, ticket))
    return ticket


def forget_ticket(root: int, ticket: str) -> None:
    """Give back the reference ``ticket`` carries, if no process has taken it (its message
    was dropped unread); a ticket already taken is left alone."""
    try:
        _client.send(root, f"forget {ticket}\n")
    except OSError:
        pass  # the janitor is gone (root exited): nothing is held any more


def ticket_for(mapped: Mapped) -> Handle:
    """A handle for a segment this process maps: one more reference, carried by a ticket
    (one this process pocketed when it received the segment, if it has one: no message)."""
    if _pickling.probing():  # a check's pickle, never loaded: no reference
        return Handle(mapped.root, mapped.seg, "", mapped.size, mapped.path)
    ticket = _pocket.reuse(mapped.root, mapped.seg)
    if ticket is None:
        ticket = _new_name()
        _client.send(mapped.root, f"tkt {mapped.seg} {ticket}\n")
    # One reference: the pickle carrying it is loaded once, or given back if it never is.
    _pickling.note_single_use(functools.partial(forget_ticket, mapped.root, ticket))
    return Handle(mapped.root, mapped.seg, ticket, mapped.size, mapped.path)


def attach(handle: Handle) -> Buffer:
    """Map the segment ``handle`` names (its ticket becomes this process's hold)."""
    known = _by_seg.get(handle.seg)
    mm = known.mm() if known is not None else None
    if mm is not None:  # already mapped here: the ticket is kept for this process's next send
        if handle.ticket:
            _pocket.keep(handle.root, handle.seg, handle.ticket)
        return mm
    fd = _open_received(handle)
    try:
        mm = _map(fd, handle.size)
    finally:
        os.close(fd)
    _register(handle, mm)
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


# --------------------------------------------------------------------------
# The registry of mapped segments
# --------------------------------------------------------------------------


def _register(handle: Handle, buf: Buffer) -> None:
    mapped = Mapped(handle, buf)
    with _lock:
        _by_seg[mapped.seg] = mapped
        bisect.insort(_starts, mapped.start)
        _at_start[mapped.start] = mapped
    # Not at exit: arrays may still be in use while the interpreter shuts down.
    weakref.finalize(buf, _unregister, mapped, os.getpid()).atexit = False


def _unregister(mapped: Mapped, holder: int) -> None:
    with _lock:
        if _at_start.get(mapped.start) is mapped:
            del _at_start[mapped.start]
            _starts.pop(bisect.bisect_left(_starts, mapped.start))
        if _by_seg.get(mapped.seg) is mapped:
            del _by_seg[mapped.seg]
    # Unmapped only once out of the registry, so a new mapping at the same address is not
    # mistaken for this one; the buffer is dead, so nothing can reach the memory any more.
    _libc.munmap(mapped.start, mapped.size)
    # A forked child inherits the mapping, not the hold; tickets it pocketed are its own.
    message = (f"rel {mapped.seg}\n" if holder == os.getpid() else "") + _pocket.give_back(mapped.root, mapped.seg)
    if message:
        try:
            _client.send(mapped.root, message)
        except OSError:
            pass  # the janitor is gone (root exited): nothing left to release


def find(address: int) -> Optional[Mapped]:
    """The segment mapped in this process that contains ``address``, if any."""
    with _lock:
        i = bisect.bisect_right(_starts, address) - 1
        mapped = _at_start.get(_starts[i]) if i >= 0 else None
    if mapped is None or address >= mapped.start + mapped.size or mapped.mm() is None:
        return None
    return mapped


def live() -> List[Mapped]:
    """The segments mapped by this process now."""
    return [m for m in _by_seg.values() if m.mm() is not None]
