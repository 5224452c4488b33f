"""Checking that a segment fits before making it: a clear error now instead of a SIGBUS later.

A tmpfs file is sparse: mapping it succeeds whatever its size, and the process
dies of SIGBUS when it touches a page the filesystem cannot supply (docker gives
containers a 64 MB ``/dev/shm``). nbmp checks the free space first, then reserves
the pages (``posix_fallocate``) when it makes an array, so that running out is an
error at the allocation, which names the size, the room left and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
from .._base.exceptions import NbmpError
from .._base.util import format_bytes as _size, space

__all__ = ["SharedMemoryFullError", "space", "check_fits", "reserve"]


class SharedMemoryFullError(MemoryError, NbmpError):  # MemoryError first: its __new__ is the one to call
    """A shared-memory allocation would not fit; the message says what to do.

    Example::

        >>> try:
        ...     nbmp.zeros(1 << 50, dtype="uint8")
        ... except nbmp.SharedMemoryFullError as e:
        ...     print(str(e)[:40])
        cannot put 1024.0 TiB in shared memory
    """


def _mem_available() -> int:
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def check_fits(nbytes: int, strategy: str, directory: str) -> None:
    """Raise :class:`SharedMemoryFullError` if ``nbytes`` cannot be had under ``strategy``."""
    if strategy == "file_system":
        free = space(directory)[1]
        if nbytes > free:
            raise SharedMemoryFullError(
                f"cannot put {_size(nbytes)} in shared memory: {directory} has {_size(free)} free. "
                f"Fix: give it more room (docker: --shm-size=8g), free shared arrays you no longer need, "
                f"or use nbmp.set_sharing_strategy('file_descriptor') (memory files, not bounded by {directory})"
                f" or nbmp.set_sharing_strategy('file_system', directory=<a bigger tmpfs>).")
    elif nbytes > _mem_available():
        raise SharedMemoryFullError(
            f"cannot put {_size(nbytes)} in shared memory: only {_size(_mem_available())} of memory is "
            f"available. Fix: free arrays you no longer need, or use smaller arrays.")


def reserve(fd: int, nbytes: int, where: str) -> None:
    """Allocate the pages of a new segment now, so that a full tmpfs fails here, not by SIGBUS."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
        return
    except (AttributeError, OSError) as exc:  # AttributeError: no fallocate (macOS)
        if isinstance(exc, OSError) and exc.errno not in (errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EOPNOTSUPP):
            raise SharedMemoryFullError(
                f"cannot put {_size(nbytes)} in shared memory ({where}): {exc.strerror}. Fix: docker --shm-size, "
                f"or another strategy/directory with nbmp.set_sharing_strategy().") from exc
    os.ftruncate(fd, nbytes)  # fallocate missing, unsupported or refused (a sandbox): the check above is all we have
