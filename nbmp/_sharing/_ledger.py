"""Accounting: what nbmp's shared memory holds now, for users and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from . import _client, _segments, _space, _strategies

__all__ = ["ShmUsage", "shm_usage", "live_segments", "pooled_segments"]


@dataclass(frozen=True)
class ShmUsage:
    """A snapshot of nbmp's shared memory.

    ``segments``/``bytes`` count every live segment of this process tree (mapped
    anywhere or in an unread message), as the tree's janitor knows them;
    ``local_segments``/``local_bytes`` those mapped by this process;
    ``in_flight`` the handles sent and not yet received; ``shm_total``/``shm_free``
    the size and free space of the tmpfs that file_system segments use (``/dev/shm``).

    Example::

        >>> u = nbmp.shm_usage()
        >>> f"{u.segments} segments, {u.bytes / 2**20:.0f} MiB; {u.shm_free / 2**30:.1f} GiB free"
        '0 segments, 0 MiB; 23.5 GiB free'
    """

    segments: int
    bytes: int
    local_segments: int
    local_bytes: int
    in_flight: int
    strategy: str
    directory: str
    shm_total: int
    shm_free: int


def shm_usage() -> ShmUsage:
    """Return what nbmp's shared memory holds now (:class:`ShmUsage`).

    Example::

        >>> a = nbmp.zeros(1 << 20, dtype="uint8")
        >>> u = nbmp.shm_usage(); (u.segments, u.bytes)
        (1, 1048576)
    """
    mapped = _segments.live()
    local = (len(mapped), sum(m.size for m in mapped))
    root = _client.tree_root()
    tree: tuple[int, ...] = local + (0,)
    if _client.connected(root):
        reply, _ = _client.request(root, "stat\n")
        tree = tuple(int(x) for x in reply.split())
    where = _strategies.directory()
    total, free = _space.space(where)
    return ShmUsage(tree[0], tree[1], local[0], local[1], tree[2], _strategies.get_sharing_strategy(), where, total, free)


def live_segments() -> Dict[str, int]:
    """Every live segment of this process tree, by name, with its size in bytes, as the
    tree's janitor knows them (memfd segments too, which have no name in ``/dev/shm``).
    Empty when no process of the tree has shared memory: no janitor is started to ask."""
    root = _client.tree_root()
    if not _client.running(root):
        return {}
    reply, _ = _client.request(root, "list\n")
    return {seg: int(size) for seg, size in (item.rsplit(":", 1) for item in reply.split())}


def pooled_segments() -> Dict[str, int]:
    """The free segments kept in this tree's pools for reuse (not counted as live), by name,
    with their sizes; empty when no janitor runs."""
    root = _client.tree_root()
    if not _client.running(root):
        return {}
    reply, _ = _client.request(root, "pooled\n")
    return {seg: int(size) for seg, size in (item.rsplit(":", 1) for item in reply.split())}
