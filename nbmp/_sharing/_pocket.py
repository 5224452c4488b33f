"""Tickets this process received for segments it already maps: kept, not handed back at once.

A receiver that already maps the segment needs no hold: it keeps the ticket for its next send
of that segment, saving two janitor messages per hop. A pocketed ticket is written in this
process's *board*, a memory file the janitor reads when the connection closes (SIGKILL included);
tickets go back when the segment is unmapped or the board is full. A forked child's pocket starts empty.
"""

from __future__ import annotations

import mmap
import os
import threading
from typing import Dict, List, Optional, Tuple

from .._backend.posix import HAVE_MEMFD, anonymous_file
from . import _client

__all__ = ["keep", "reuse", "give_back", "SLOT", "SLOTS"]

SLOT = 40       # one byte "in use" (1) or free (0), then the ticket's name, NUL-padded
SLOTS = 1024    # 40 KiB per process; a full board is emptied in one message


class _Board:
    """One janitor's board in this process: the slots, and which segment each ticket is for."""

    def __init__(self, root: str) -> None:
        fd = anonymous_file("nbmp-board")
        try:
            os.ftruncate(fd, SLOT * SLOTS)
            self.mm = mmap.mmap(fd, SLOT * SLOTS)
            _client.send(root, "board\n", [fd])
        finally:
            os.close(fd)
        self.root = root
        self.free = list(range(SLOTS - 1, -1, -1))
        self.by_seg: Dict[str, List[Tuple[str, int]]] = {}

    def put(self, seg: str, ticket: str) -> bool:
        if not self.free:
            return False
        slot = self.free.pop()
        at = slot * SLOT
        name = ticket.encode()[:SLOT - 1]
        self.mm[at + 1:at + 1 + len(name)] = name
        self.mm[at + 1 + len(name)] = 0
        self.mm[at] = 1  # written last: a slot is whole before the janitor may trust it
        self.by_seg.setdefault(seg, []).append((ticket, slot))
        return True

    def take(self, seg: str) -> Optional[str]:
        kept = self.by_seg.get(seg)
        if not kept:
            return None
        ticket, slot = kept.pop()
        if not kept:
            del self.by_seg[seg]
        self.mm[slot * SLOT] = 0  # cleared before the ticket travels again
        self.free.append(slot)
        return ticket

    def take_all(self, seg: Optional[str] = None) -> List[str]:
        taken = []
        for s in (list(self.by_seg) if seg is None else [seg]):
            while (ticket := self.take(s)) is not None:
                taken.append(ticket)
        return taken


# Reentrant: a finalizer (give_back) may run while this thread is inside keep().
_lock = threading.RLock()
_boards: Dict[str, _Board] = {}


def _forget_in_child() -> None:
    global _boards, _lock
    # The boards and their tickets are the parent's; its lock may be held by a thread not here.
    _boards, _lock = {}, threading.RLock()


os.register_at_fork(after_in_child=_forget_in_child)


def _board(root: str, create: bool) -> Optional[_Board]:
    board = _boards.get(root)
    if board is None and create and HAVE_MEMFD:
        board = _boards[root] = _Board(root)
    return board


def keep(root: str, seg: str, ticket: str) -> None:
    """Pocket ``ticket`` (for ``seg``, which this process maps); a full board is emptied first."""
    with _lock:
        board = _board(root, create=True)
        if board is None:  # no memory files here: hand it back at once
            _client.send(root, f"drop {ticket}\n")
            return
        full = not board.put(seg, ticket)
        emptied = board.take_all() if full else []
        if full:
            board.put(seg, ticket)
    if emptied:
        _client.send(root, "".join(f"drop {t}\n" for t in emptied))


def reuse(root: str, seg: str) -> Optional[str]:
    """A pocketed ticket for ``seg`` to send again (no message), if this process has one."""
    board = _board(root, create=False)
    if board is None:
        return None
    with _lock:
        return board.take(seg)


def give_back(root: str, seg: str) -> str:
    """The messages that hand back every ticket pocketed for ``seg`` (this process unmaps it)."""
    board = _board(root, create=False)
    if board is None:
        return ""
    with _lock:
        tickets = board.take_all(seg)
    return "".join(f"drop {t}\n" for t in tickets)
