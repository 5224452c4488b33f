"""The segments this process maps, by address: mapping, finding, and letting go of them.

Each process keeps a registry of the segments it maps, so that any array or
tensor whose data lies in one (a view, a slice, a transpose) is found and sent as
a handle. A mapping's life is its buffer object's (arrays and tensors keep the
buffer alive); when the buffer dies, the mapping is unmapped -- or, for a
segment this process made and may reuse, given to the pool -- and the janitor
is told that this process lets go.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import mmap
import os
import threading
import weakref
from typing import Dict, List, Optional

from .._backend import finalizers as _finalizers
from . import _client, _pocket, _pool

__all__ = ["Buffer", "Mapped", "map_fd", "register", "find", "live"]

Buffer = ctypes.Array[ctypes.c_char]  # a c_char array over the mapping; arrays and tensors keep it alive


class Mapped:
    """A segment mapped in this process; the buffer object's life is the mapping's."""

    __slots__ = ("seg", "root", "size", "path", "start", "mm", "poolable", "forks", "__weakref__")

    def __init__(self, root: str, seg: str, size: int, path: str, buf: Buffer, poolable: bool) -> None:
        self.seg, self.root, self.size, self.path = seg, root, size, path
        self.mm: "weakref.ref[Buffer]" = weakref.ref(buf)
        self.start = ctypes.addressof(buf)
        self.poolable = poolable  # made by this process, to return to its pool when let go
        self.forks = _forks      # a fork since it was mapped: a child may still use the memory


# mmap through libc rather than the mmap module: an mmap.mmap object keeps a duplicate
# of its file descriptor open for its whole life (before Python 3.13's trackfd=False),
# and thousands of arrays in flight would exhaust the process's descriptors.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def map_fd(fd: int, size: int, populate: bool = False) -> Buffer:
    """Map ``size`` bytes of ``fd``; ``populate``: with every page faulted in now (one call,
    far cheaper than faulting them one by one later)."""
    flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
    address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
    if address in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"cannot map a shared-memory segment of {size} bytes: {os.strerror(err)}")
    return (ctypes.c_char * size).from_address(address)


# Reentrant: a finalizer (unregister) may run while this thread is inside find().
_lock = threading.RLock()
_forks = 0


def _new_lock_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # the parent's may have been held by a thread that is not here


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_new_lock_in_child, after_in_parent=_count_fork)

_by_seg: Dict[str, Mapped] = {}
_starts: List[int] = []
_at_start: Dict[int, Mapped] = {}


def register(root: str, seg: str, size: int, path: str, buf: Buffer, poolable: bool = False) -> None:
    mapped = Mapped(root, seg, size, path, buf, poolable)
    with _lock:
        _by_seg[mapped.seg] = mapped
        bisect.insort(_starts, mapped.start)
        _at_start[mapped.start] = mapped
    # Run with interrupts held; not at exit: arrays may still be in use while the interpreter shuts down.
    _finalizers.on_death(buf, _forget, mapped, os.getpid())


def mapped_here(seg: str) -> Optional[Buffer]:
    """The live buffer over ``seg`` if this process maps it."""
    known = _by_seg.get(seg)
    return known.mm() if known is not None else None


def _forget(mapped: Mapped, holder: int) -> None:
    with _lock:
        if _at_start.get(mapped.start) is mapped:
            del _at_start[mapped.start]
            _starts.pop(bisect.bisect_left(_starts, mapped.start))
        if _by_seg.get(mapped.seg) is mapped:
            del _by_seg[mapped.seg]
    # Unmapped only once out of the registry, so a new mapping at the same address is not
    # mistaken for this one; the buffer is dead, so nothing can reach the memory any more.
    # A forked child inherits the mapping, not the hold; tickets it pocketed are its own.
    ours = holder == os.getpid()
    forked = mapped.forks != _forks
    pooled = ours and mapped.poolable and not forked and _pool.adopt(_pool.Entry(mapped.root, mapped.seg, mapped.size, mapped.start, True))
    if not pooled:
        _libc.munmap(mapped.start, mapped.size)
    message = ""
    if ours:
        message += f"taint {mapped.seg}\n" if forked else ""
        message += f"unpool {mapped.seg}\n" if mapped.poolable and not pooled else ""
        message += f"rel {mapped.seg}\n"
    message += _pocket.give_back(mapped.root, mapped.seg)
    if message:
        with contextlib.suppress(OSError):  # the janitor is gone (root exited): nothing left to release
            _client.send(mapped.root, message)


def find(address: int) -> Optional[Mapped]:
    """The segment mapped in this process that contains ``address``, if any."""
    with _lock:
        i = bisect.bisect_right(_starts, address) - 1
        mapped = _at_start.get(_starts[i]) if i >= 0 else None
    return None if mapped is None or address >= mapped.start + mapped.size or mapped.mm() is None else mapped


def live() -> List[Mapped]:
    """The segments mapped by this process now."""
    return [m for m in _by_seg.values() if m.mm() is not None]
