"""The platform-specific pieces of running workers: parent-death signals, pipes, threads'
names and C stdio, each a no-op where the platform lacks it.

Kept apart so that the rest of nbmp never calls ``prctl`` directly, and so that one
module says what happens on Linux, other POSIX systems and Windows.
"""

from __future__ import annotations

import math
import mmap
import os
import select
import socket
import stat
import struct
import termios
import fcntl
import _signal  # type: ignore[import-not-found]  # the C module under signal.py: typeshed has no stub
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple, cast

_SIGTERM = int(signal.SIGTERM)

__all__ = [
    "prepare", "alive", "die_with_parent", "signal_descendants", "load_libc", "default_termination", "widen_pipe",
    "set_thread_name", "get_thread_name", "flush_c_stdio", "WakeUp", "INTERRUPT_SLICE", "room", "ready", "read_nowait",
]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

# Workers get SIGTERM when their parent dies: it ends them at once unless they chose
# to handle it (SIGINT is ignored in workers, see interrupts.for_worker).
DEATH_SIGNAL = getattr(signal, "SIGTERM", None)
_DEATH = -1 if DEATH_SIGNAL is None else int(DEATH_SIGNAL)  # a plain int: no enum code in a fresh fork

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
    """In the parent, before forking workers: load libc and look up the functions every
    worker calls (``prctl``, ``fflush``) once, so that forked children inherit them
    instead of each loading libc and making the function objects again."""
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

    ``direct``: ``parent_pid`` is our OS parent (fork, spawn) and its main thread forked
    us, so Linux's parent-death signal does it. That signal follows the *thread* that
    forked, not the process (prctl(2)): a child started from another thread (a Pool's
    replacement workers come from its worker-handler thread) would be killed when that
    thread ends, the parent alive. Such a child, and one started under forkserver (whose
    OS parent is the fork server, which outlives the run), get a thread that watches the
    starter through a pidfd instead.
    """
    if DEATH_SIGNAL is None or not sys.platform.startswith("linux"):
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
        os.kill(os.getpid(), cast(int, DEATH_SIGNAL))  # not None: die_with_parent checked it
        return
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3): poll instead
        pidfd = None
    threading.Thread(target=_wait_for_exit, args=(pid, pidfd), name="nbmp-parent-watch", daemon=True).start()


def _wait_for_exit(pid: int, pidfd: Optional[int]) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])
    else:
        while _exists(pid):
            time.sleep(1.0)
    os.kill(os.getpid(), cast(int, DEATH_SIGNAL))  # not None: die_with_parent checked it


def resident_bytes(pid: "int | str" = "self") -> Optional[int]:
    """The resident memory of process ``pid`` (default: this one) in bytes, from /proc; None
    where it cannot be read (gone, not Linux).
    """
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
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:  # no /proc here, or the process was reaped since _exists
        return _exists(pid)
    except IndexError:
        return True


def signal_descendants(pid: int, signum: int) -> None:
    """Send ``signum`` to the processes that process ``pid`` started, and theirs, in its process
    group (one started in a session of its own, ``start_new_session=True``, is left alone with
    its own), before ``pid`` itself is stopped: once it is gone, its orphans are the init
    process's and can no longer be told apart. Read from /proc: nothing where there is none."""
    children, groups = _process_tree(pid)
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if groups[child] == groups.get(pid):
                todo.append(child)
                try:
                    os.kill(child, signum)
                except OSError:  # gone since
                    pass


_tree: Tuple[float, Dict[int, List[int]], Dict[int, int]] = (0.0, {}, {})


def _process_tree(pid: int) -> Tuple[Dict[int, List[int]], Dict[int, int]]:
    """Every process's children and process group, read again unless read in the last 0.1 s
    with ``pid`` in it (a Pool's end stops each of its workers in turn)."""
    global _tree
    if time.monotonic() - _tree[0] >= 0.1 or pid not in _tree[2]:
        children: Dict[int, List[int]] = {}
        groups: Dict[int, int] = {}
        for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid, groups[int(name)] = (int(field) for field in f.read().rsplit(b")", 1)[1].split()[1:3])
            except (OSError, ValueError):  # not a process, or gone since
                continue
            children.setdefault(ppid, []).append(int(name))
        _tree = (time.monotonic(), children, groups)
    return _tree[1], _tree[2]


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


def default_termination() -> None:
    """SIGTERM back to its default (the process dies): a handler inherited from the parent
    (a kernel's) must not keep a worker alive through ``terminate()``. Through ``_signal``,
    as :func:`interrupts.for_worker`."""
    _signal.signal(_SIGTERM, _signal.SIG_DFL)


PIPE_CAPACITY = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size: what an unprivileged process may ask


def widen_pipe(fd: int, capacity: int = PIPE_CAPACITY) -> int:
    """Let the pipe behind ``fd`` hold ``capacity`` bytes (Linux: ``F_SETPIPE_SZ``), not
    the default 64 KiB; returns its capacity now (0 where it cannot be known).

    A Pool's task pipe that holds a whole map's chunks lets the thread that sends them
    finish at once, and its result pipe lets a worker go on to its next chunk without
    waiting for the parent to read: on 2 cores, fewer threads then take turns. Refused
    (beyond ``pipe-max-size``, or once this user's pipes pass ``pipe-user-pages-soft``):
    the pipe keeps its size."""
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
    """How many bytes a write to the pipe or stream socket behind ``fd`` takes now without
    waiting, at least, and how many it would take empty; None where that cannot be known.

    Example::

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
    """Whether ``fd`` is ready for ``events`` (default: has data, or EOF) within ``timeout``
    seconds (None: wait); interruptible, within ``INTERRUPT_SLICE`` whichever thread the
    interrupt was given to.

    ``poll`` calls: ``Connection.poll`` builds a selector per call, at a few µs.
    """
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
    """Up to ``size`` bytes that the pipe behind ``fd`` holds now; ``b""`` at its end (no writer
    left); None if it is empty, without waiting.

    For a pipe that other processes read too (a Pool's task pipe): ``poll`` then a plain read
    blocks forever once another reader took the bytes in between, and making ``fd`` itself
    non-blocking would make it so for them too (the flag belongs to the open file they
    share). Linux: the read goes through a non-blocking open of its own (``/proc/self/fd``);
    elsewhere, ``select`` just before a plain read."""
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
    """A self-pipe: :meth:`set` from any thread makes :meth:`fileno` readable, so that a
    thread waiting in ``select``/``poll``/``connection.wait`` on it (beside the descriptors it
    watches) wakes up; :meth:`clear` empties it again. Setting is never blocked (a full pipe
    is already set) and is a no-op once :meth:`close` ran, which may come from another
    thread at any moment (closed under a lock: a write never lands on a reused number).
    """

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
                try:
                    os.write(self._w, b"!")
                except BlockingIOError:  # full: set already
                    pass

    def clear(self) -> None:
        """Empty the pipe (from the thread that waits on it)."""
        try:
            while os.read(self._r, 512):
                pass
        except OSError:  # empty (BlockingIOError), or closed by then
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
    """Flush C's stdio buffers (``printf`` from C extensions).

    Workers leave through ``os._exit``, which skips libc's own flush at exit.
    """
    libc = _libc or load_libc()
    if libc is not None:
        libc.fflush(None)
