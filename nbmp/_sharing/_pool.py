"""Freed segments kept for reuse: a fresh array moves at the cost of one ``memcpy``.

A process keeps its mappings of segments it made (file_descriptor strategy, at least the sharing
threshold), and the next share or send of a fitting array copies into one instead of faulting in a
new one. The janitor decides when a pooled segment is free (no reference left, no fork while it
was mapped) and the owner claims it with one request; see docs/sharing.md for the bounds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from typing import Dict, List, Optional

from . import _client, _strategies

__all__ = ["Entry", "poolable", "claim", "adopt", "give_up", "trim", "pooled_bytes"]

_MADV_POPULATE_WRITE = 23  # Linux 5.14+: fault in a whole mapping with one call


class Entry:
    """This process's mapping of a segment it may reuse."""

    __slots__ = ("root", "seg", "size", "start", "faulted")

    def __init__(self, root: str, seg: str, size: int, start: int, faulted: bool) -> None:
        self.root, self.seg, self.size, self.start, self.faulted = root, seg, size, start, faulted

    def buffer(self) -> "ctypes.Array[ctypes.c_char]":
        return (ctypes.c_char * self.size).from_address(self.start)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

# Reentrant: a finalizer (a mapping given back to the pool) may run while this thread is inside.
_lock = threading.RLock()
_entries: Dict[str, Entry] = {}  # oldest first


def _forget_in_child() -> None:
    global _entries, _lock
    # The parent's pool is the parent's (the janitor would refuse a claim from here anyway).
    _entries, _lock = {}, threading.RLock()


os.register_at_fork(after_in_child=_forget_in_child)


def poolable(size: int) -> bool:
    """Whether a new segment of ``size`` bytes made now may later return to the pool."""
    return (_strategies.get_sharing_strategy() == "file_descriptor"
            and max(_strategies.get_sharing_threshold(), 1) <= size <= _strategies.get_sharing_pool()[0])


def pooled_bytes() -> int:
    return sum(e.size for e in list(_entries.values()))


def claim(root: str, nbytes: int, ticket: str) -> Optional[Entry]:
    """A pooled segment of at least ``nbytes`` (and at most a quarter more) that no process uses,
    now referenced by ``ticket`` (``"-"``: held by this process), mapped here and faulted in;
    ``None`` if there is none. The entry leaves the pool until :func:`adopt` takes it back."""
    with _lock:
        fits = [e for e in list(_entries.values()) if e.root == root and nbytes <= e.size <= nbytes + nbytes // 4]
    if not fits:
        return None
    reply, _ = _client.request(root, f"claim {ticket} {' '.join(e.seg for e in fits)}\n")
    verdict, *gone = reply.split(" ")
    for seg in gone:  # freed by the janitor while unused (idle): its pages are gone already
        give_up(_entries.get(seg), tell=False)
    if verdict == "-":
        return None
    with _lock:
        entry = _entries.pop(verdict, None)
    if entry is None:  # cannot happen: only this process claims its own segments
        raise RuntimeError(f"nbmp: the janitor lent segment {verdict}, which this process does not pool")
    if not entry.faulted:
        _libc.madvise(entry.start, entry.size, _MADV_POPULATE_WRITE)  # best effort: old kernels fault per page
        entry.faulted = True
    return entry


def adopt(entry: Entry) -> bool:
    """Keep ``entry`` (a mapping of a segment this process made) in the pool; False if it does not
    fit (then the caller unmaps it, and tells the janitor with :func:`give_up`)."""
    if entry.size > _strategies.get_sharing_pool()[0]:
        return False
    with _lock:
        _entries.pop(entry.seg, None)
        _entries[entry.seg] = entry
    trim()
    return True


def trim() -> None:
    """Give back the oldest entries until the pool holds at most its ``max_bytes``."""
    limit = _strategies.get_sharing_pool()[0]
    evicted: List[Entry] = []
    with _lock:
        total = sum(e.size for e in _entries.values())
        for seg in list(_entries):
            if total <= limit:
                break
            entry = _entries.pop(seg)
            total -= entry.size
            evicted.append(entry)
    for entry in evicted:
        give_up(entry)


def give_up(entry: Optional[Entry], tell: bool = True) -> None:
    """Unmap ``entry`` and (``tell``) ask the janitor to free its segment instead of pooling it."""
    if entry is None:
        return
    with _lock:
        if _entries.get(entry.seg) is entry:
            del _entries[entry.seg]
    _libc.munmap(entry.start, entry.size)
    if tell:
        with contextlib.suppress(OSError):  # the janitor is gone: so is the segment
            _client.send(entry.root, f"unpool {entry.seg}\n")
