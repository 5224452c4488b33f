"""The platform-specific pieces of running workers: parent-death signals, pipes, threads'
names and C stdio, each a no-op where the platform lacks it (the rest of nbmp never calls ``prctl``).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import select
import socket
import stat
import struct
import termios
import fcntl
import signal
import sys
import tempfile
import threading
import time
from typing import Any, List, Optional, Tuple

__all__ = [
    "prepare", "alive", "die_with_parent", "signal_descendants", "load_libc", "HAVE_MEMFD", "anonymous_file", "NOSIGNAL", "widen_pipe",
    "set_thread_name", "get_thread_name", "flush_c_stdio", "WakeUp", "INTERRUPT_SLICE", "wait_slice", "room", "ready", "read_nowait",
]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

# Workers get SIGTERM when their parent dies: it ends them at once unless they chose
# to handle it (SIGINT is ignored in workers, see interrupts.for_worker).
_DEATH = int(signal.SIGTERM)  # a plain int: no enum code in a fresh fork

_libc: Optional[Any] = None  # Any: a ctypes.CDLL, whose functions ctypes types as Any; False once loading failed


def load_libc() -> Optional[Any]:
    """The running program's C library (ctypes), or None where there is none."""
    global _libc
    if _libc is None and os.name == "posix":
        import ctypes  # lazily: ``import nbmp`` stays cheap
        try:
            _libc = ctypes.CDLL(None, use_errno=True)  # the running program's symbols, libc's included
        except OSError:
            _libc = False
    return _libc or None


_prepared = False


def prepare() -> None:
    """In the parent, before forking workers: load libc and look up ``prctl`` and ``fflush`` once, for
    the children to inherit."""
    global _prepared
    if _prepared or not sys.platform.startswith("linux"):
        return
    _prepared = True
    libc = load_libc()
    if libc is not None:
        for name in ("prctl", "fflush"):  # ctypes keeps a function made at its first lookup
            getattr(libc, name, None)


def die_with_parent(parent_pid: int, direct: bool) -> None:
    """End this worker (SIGTERM) when ``parent_pid``, the process that started it, dies.

    ``direct`` (our OS parent's main thread forked us) uses Linux's parent-death signal, which
    follows the forking *thread* (prctl(2)); a child started from another thread or by a fork
    server gets a thread that watches the starter through a pidfd instead.
    """
    if not sys.platform.startswith("linux"):
        return
    if not direct:
        _watch(parent_pid)
        return
    libc = _libc or load_libc()  # loaded by prepare() in the parent: no call in a fresh fork
    if libc is None or libc.prctl(_PR_SET_PDEATHSIG, _DEATH, 0, 0, 0) != 0:
        return
    # The parent may have died before prctl ran; then no signal would ever come.
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), _DEATH)


def _watch(pid: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        os.kill(os.getpid(), _DEATH)
        return
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3): poll instead
        pidfd = None
    if pidfd is not None and pidfd < 3:  # a starter without fds 0-2: a worker's output redirection takes them
        pidfd = fcntl.fcntl(old := pidfd, fcntl.F_DUPFD_CLOEXEC, 3)
        os.close(old)
    try:
        threading.Thread(target=_wait_for_exit, args=(pid, pidfd), name="nbmp-parent-watch", daemon=True).start()
    except RuntimeError:  # no thread to spare (a limit on processes): run on unwatched, as a standard worker
        if pidfd is not None:
            os.close(pidfd)


def _wait_for_exit(pid: int, pidfd: Optional[int]) -> None:
    if pidfd is not None:
        (watcher := select.poll()).register(pidfd)  # not select(): its fd tables, on the C stack, overflow a small thread stack
        watcher.poll()
    else:
        while _exists(pid):
            time.sleep(1.0)
    os.kill(os.getpid(), _DEATH)


def resident_bytes(pid: "int | str" = "self") -> Optional[int]:
    """The resident memory of process ``pid`` (default: this one) in bytes, from /proc; None where unreadable."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and, where /proc tells, is neither a zombie
    (dead, waiting to be reaped) nor being reaped (``X``, dead)."""
    if not _exists(pid):
        return False
    fields = _stat(pid)
    return fields[0] not in (b"Z", b"X") if fields else _exists(pid)  # no /proc here, or reaped since


def signal_descendants(pid: int, signum: int) -> None:
    """Send ``signum`` to the descendants of ``pid`` in its process group (from /proc), before ``pid``
    itself is stopped: once it is gone, its orphans can no longer be told apart."""
    group, todo = None, [pid]
    while todo:
        for child in _children(todo.pop()):
            group = group or _group(pid)  # read once there is a child: most workers have none
            if group is not None and _group(child) == group:
                todo.append(child)
                with contextlib.suppress(OSError):  # gone since
                    os.kill(child, signum)


def _children(pid: int) -> List[int]:
    """``pid``'s children: each of its threads' ``children`` file where the kernel has them, which
    reads only this subtree; else every process's parent, from a scan of /proc."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone, or no /proc here
        return []
    found: List[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
        except FileNotFoundError:
            if not os.path.isdir(f"/proc/{pid}/task/{task}"):  # a thread that ended since
                continue
            return [int(name) for name in os.listdir("/proc") if name.isdigit() and _parent(int(name)) == pid]
        except OSError:
            continue
    return found


def _stat(pid: int) -> List[bytes]:
    """The fields of /proc/``pid``/stat after the command name: state, parent, process group, ...; [] for a process gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _parent(pid: int) -> Optional[int]:
    return int(fields[1]) if (fields := _stat(pid)) else None


def _group(pid: int) -> Optional[int]:
    return int(fields[2]) if (fields := _stat(pid)) else None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


INTERRUPT_SLICE = 0.25
"""Seconds the caller's thread waits at most in one go for a call that may take long (a
run's join, a Pool's result): the kernel may give a process's SIGINT to any thread that
does not block it, and Python raises it in the main thread only at its next bytecode, which
an untimed lock wait never reaches. Waiting in slices, the interrupt is raised within one."""


def wait_slice(wait: Any, timeout: float) -> Any:
    """``wait(timeout)`` of a stdlib Event, Condition or queue, whose SIGINT landing as the Condition re-takes
    its lock (``_acquire_restore``) becomes ``RuntimeError: release unlocked lock``: the interrupt is raised."""
    try:
        return wait(timeout)
    except RuntimeError as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise exc.__context__ from None
        raise


def _memfd_works() -> bool:
    """Whether anonymous files can be made here (``memfd_create``: Linux's; a sandbox may refuse it, EPERM)."""
    try:
        os.close(os.memfd_create("nbmp-probe", os.MFD_CLOEXEC))
    except (AttributeError, OSError):
        return False
    return sys.platform.startswith("linux")


HAVE_MEMFD = _memfd_works()  # else: files in a directory (a Pool's slots, shared memory's "file_system")
# A send to a peer that has gone gets EPIPE, never a SIGPIPE that ends a program that restored its default.
NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


def anonymous_file(name: str) -> int:
    """A file without a name (``memfd_create``), else, where that is refused (a sandbox, maybe set up
    since the import: from then on every caller is sent here), one unlinked at once in /dev/shm or /tmp."""
    global HAVE_MEMFD
    if HAVE_MEMFD:
        try:
            return os.memfd_create(name, os.MFD_CLOEXEC)
        except PermissionError:  # refused (out of descriptors or memory is no refusal: raised)
            HAVE_MEMFD = False
    fd, path = tempfile.mkstemp(prefix=f"{name}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.unlink(path)
    return fd


PIPE_CAPACITY = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size: what an unprivileged process may ask


def widen_pipe(fd: int, capacity: int = PIPE_CAPACITY) -> int:
    """Let the pipe behind ``fd`` hold ``capacity`` bytes (Linux: ``F_SETPIPE_SZ``), so a Pool's sender
    and workers need not wait for their readers; returns its capacity now (0 where unknown). Where
    refused (``pipe-max-size``, ``pipe-user-pages-soft``) the pipe keeps its size."""
    if not hasattr(fcntl, "F_SETPIPE_SZ") or not isinstance(fd, int):  # not Linux; a stand-in's (a mock's) fileno
        return 0
    try:
        return int(fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, capacity))
    except OSError:
        try:
            return int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
        except OSError:
            return 0


def room(fd: int) -> Optional[Tuple[int, int]]:
    """At least how many bytes a write to the pipe or stream socket behind ``fd`` takes now without
    waiting, and how many it would take empty; None where unknown. Example::

        >>> r, w = os.pipe()
        >>> room(w)[0] == room(w)[1] >= 4096
        True
    """
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):  # its capacity less what is unread, a page per end spare
            capacity = int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)) - 2 * mmap.PAGESIZE
            return capacity - _count(fd, termios.FIONREAD), capacity
        sock = socket.socket(fileno=fd)
        try:  # a socket's bytes in flight count twice against its send buffer, with their bookkeeping
            capacity = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2
        finally:
            sock.detach()
        return capacity - _count(fd, termios.TIOCOUTQ), capacity
    except (AttributeError, OSError):  # not Linux, or neither a pipe nor a socket
        return None


def _count(fd: int, request: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0])


def ready(fd: int, timeout: Optional[float], events: int = select.POLLIN) -> bool:
    """Whether ``fd`` is ready for ``events`` (default: data or EOF) within ``timeout`` seconds (None:
    wait), interruptible within ``INTERRUPT_SLICE``; ``poll`` itself, cheaper than ``Connection.poll``."""
    poller = select.poll()
    poller.register(fd, events)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = INTERRUPT_SLICE if deadline is None else min(INTERRUPT_SLICE, deadline - time.monotonic())
        if poller.poll(max(0, math.ceil(left * 1000))):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def read_nowait(fd: int, size: int) -> Optional[bytes]:
    """Up to ``size`` bytes the pipe behind ``fd`` holds now; ``b""`` at its end; None if empty.

    For a pipe other processes read too, where ``poll`` then a read may block, and ``O_NONBLOCK``
    on ``fd`` would reach the other readers: Linux reads through an open of its own
    (``/proc/self/fd``), elsewhere ``select`` just before the read."""
    try:
        twin = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # no /proc
        return os.read(fd, size) if select.select([fd], [], [], 0)[0] else None
    try:
        return os.read(twin, size)
    except BlockingIOError:
        return None
    finally:
        os.close(twin)


class WakeUp:
    """A self-pipe: :meth:`set` from any thread makes :meth:`fileno` readable to wake a waiting thread;
    :meth:`clear` empties it. Setting never blocks and is a no-op after :meth:`close` (closed under a
    lock, so a write never lands on a reused descriptor number)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._lock = threading.Lock()

    def fileno(self) -> int:
        return self._r

    def descriptors(self) -> Tuple[int, int]:
        """Both ends of the pipe (a child forked while it is open closes them)."""
        return self._r, self._w

    def set(self) -> None:
        with self._lock:
            if self._w >= 0:
                with contextlib.suppress(BlockingIOError):  # full: set already
                    os.write(self._w, b"!")

    def clear(self) -> None:
        """Empty the pipe (from the thread that waits on it)."""
        with contextlib.suppress(OSError):  # empty (BlockingIOError), or closed by then
            while os.read(self._r, 512):
                pass

    def close(self) -> None:
        with self._lock:
            if self._w >= 0:
                os.close(self._r)
                os.close(self._w)
                self._r = self._w = -1


_PR_SET_NAME, _PR_GET_NAME = 15, 16  # from <linux/prctl.h>


def set_thread_name(name: str) -> None:
    """Name the calling thread for the OS (``top -H``, ``ps -L``; Linux keeps 15 bytes), as
    ``torch.multiprocessing._set_thread_name`` does. A no-op where there is no ``prctl``."""
    libc = load_libc() if sys.platform.startswith("linux") else None
    if libc is not None:
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def get_thread_name() -> str:
    """The calling thread's OS name (see :func:`set_thread_name`); "" where unknown."""
    libc = load_libc() if sys.platform.startswith("linux") else None
    if libc is None:
        return ""
    import ctypes
    buf = ctypes.create_string_buffer(16)
    libc.prctl(_PR_GET_NAME, buf, 0, 0, 0)
    return buf.value.decode(errors="replace")


def flush_c_stdio() -> None:
    """Flush C's stdio buffers (``printf`` from C extensions): workers leave through ``os._exit``, which skips it."""
    libc = _libc or load_libc()
    if libc is not None:
        libc.fflush(None)
