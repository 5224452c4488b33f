"""Sharing settings of this process: the strategy (torch's names), its directory, the size threshold.

``file_descriptor`` (default on Linux): an anonymous ``memfd_create`` file, handed to receivers
by the janitor; ``file_system``: a named file ``nbmp-<pid>-<n>-<token>`` in a tmpfs directory
(docs/sharing.md). Settings are per process, like torch's; a receiver opens a segment the way
its sender's strategy made it.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from .._backend.posix import HAVE_MEMFD
from .._base.checks import check_int

__all__ = ["get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy",
           "get_sharing_threshold", "set_sharing_threshold", "get_sharing_pool", "set_sharing_pool", "directory"]

STRATEGIES = ("file_descriptor", "file_system")

# Arrays and tensors of at least this many bytes are moved into shared memory when
# sent; smaller ones are pickled (a segment costs a few syscalls and a mapping).
DEFAULT_THRESHOLD = 1 << 20

_strategy = "file_descriptor" if HAVE_MEMFD else "file_system"
_directory = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
_threshold = DEFAULT_THRESHOLD


def _default_pool_bytes() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 << 30
    return min(4 << 30, total // 8)


# Freed segments kept for reuse (see _pool.py): at most this many bytes per process, each given back after this many seconds unused.
DEFAULT_POOL_IDLE = 10.0
_pool_bytes = _default_pool_bytes()
_pool_idle = DEFAULT_POOL_IDLE


def get_all_sharing_strategies() -> List[str]:
    """Return the sharing strategies this platform supports.

    Example::

        >>> nbmp.get_all_sharing_strategies()
        ['file_descriptor', 'file_system']
    """
    return list(STRATEGIES) if HAVE_MEMFD else ["file_system"]


def get_sharing_strategy() -> str:
    """Return this process's sharing strategy.

    Example::

        >>> nbmp.get_sharing_strategy()
        'file_descriptor'
    """
    return _strategy


def set_sharing_strategy(name: str, directory: Optional[str] = None) -> None:
    """Choose how new segments are made: ``"file_descriptor"`` or ``"file_system"``.

    ``directory`` (file_system only) is the tmpfs where named segments go, for
    example a bigger one than ``/dev/shm``.

    Example::

        >>> nbmp.set_sharing_strategy("file_system", directory="/dev/shm")
    """
    global _strategy, _directory
    valid = get_all_sharing_strategies()
    if not isinstance(name, str):
        raise TypeError(f"the sharing strategy must be a str, not {type(name).__name__} {name!r}; "
                        f"use one of {valid} (e.g. nbmp.set_sharing_strategy({valid[0]!r}))")
    if name not in valid:
        raise ValueError(f"unknown sharing strategy {name!r}; use one of {valid} (e.g. nbmp.set_sharing_strategy({valid[0]!r}))")
    if directory is not None:
        _check_directory(name, directory)
        _directory = directory
    _strategy = name


def _check_directory(name: str, directory: object) -> None:
    example = "nbmp.set_sharing_strategy('file_system', directory='/dev/shm')"
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path (str), not {type(directory).__name__} {directory!r}; e.g. {example}")
    if name != "file_system":
        raise ValueError(f"directory={directory!r} applies to the 'file_system' strategy only, not {name!r}; e.g. {example}")
    if not os.path.exists(directory):
        raise ValueError(f"directory {directory!r} does not exist; give an existing tmpfs directory, e.g. {example}")
    if not os.path.isdir(directory):
        raise ValueError(f"directory {directory!r} is a file, not a directory; give the directory segments should go in, e.g. {example}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"directory {directory!r} is not writable by this process; give a tmpfs directory "
                         f"you can write to, e.g. {example}")


def directory() -> str:
    """The directory where file_system segments are made (and whose free space is checked)."""
    return _directory


def get_sharing_threshold() -> int:
    """Return the size in bytes from which an unshared array or tensor travels through shared memory.

    Example::

        >>> nbmp.get_sharing_threshold()
        1048576
    """
    return _threshold


def set_sharing_threshold(nbytes: int) -> None:
    """Send unshared arrays and tensors of at least ``nbytes`` through shared memory (one copy).

    Smaller ones are pickled. ``0`` moves every array; a huge value turns moving off.

    Example::

        >>> nbmp.set_sharing_threshold(4 << 20)   # 4 MiB and more go by shared memory
    """
    global _threshold
    _threshold = check_int(nbytes, "the sharing threshold (bytes)", f"nbmp.set_sharing_threshold({DEFAULT_THRESHOLD})",
                           minimum=0)  # type: ignore[assignment]


def get_sharing_pool() -> Tuple[int, float]:
    """Return ``(max_bytes, idle_seconds)``: how much freed shared memory this process keeps for
    reuse, and how long an unused piece of it is kept.

    Example::

        >>> max_bytes, idle = nbmp.get_sharing_pool()
    """
    return _pool_bytes, _pool_idle


def set_sharing_pool(max_bytes: Optional[int] = None, idle: Optional[float] = None) -> None:
    """Keep up to ``max_bytes`` of freed segments (file_descriptor strategy) for reuse by the next
    :func:`share` or send of an ordinary array, each for at most ``idle`` seconds unused.

    Reusing a freed segment, whose pages are already in place, makes moving a big array
    cost about one ``memcpy``. ``0`` turns the pool off and frees what it holds now.
    Defaults: the smaller of 4 GiB and an eighth of the machine's memory; 10 seconds.

    Example::

        >>> nbmp.set_sharing_pool(max_bytes=8 << 30, idle=60)
    """
    global _pool_bytes, _pool_idle
    if max_bytes is not None:
        _pool_bytes = check_int(max_bytes, "max_bytes", "nbmp.set_sharing_pool(max_bytes=4 << 30)", minimum=0)  # type: ignore[assignment]
    if idle is not None:
        if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle > 0:
            raise ValueError(f"idle must be a positive number of seconds, not {idle!r}; e.g. nbmp.set_sharing_pool(idle=10)")
        _pool_idle = float(idle)
