"""Talking to the janitor of this process tree: finding it, starting it, sending it messages.

One Unix-socket connection per process, found by the tree's key (``nbmp._base.util.tree``),
whose peer's user is checked before anything is sent. Most messages are one-way (no round trip
per transfer); a forked child never reuses its parent's connection, since the janitor learns a
process's death from its connection closing.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple, cast

from .._backend import interrupts as _interrupts, posix as _posix
from .._base import util as _util
from .._base.util import ISSUES
from . import _janitor

__all__ = ["tree_root", "send", "request"]

REPLY_TIMEOUT = 60.0

# Reentrant: a weakref finalizer (which sends "rel") may run during a request.
_lock = threading.RLock()
_conns: Dict[str, socket.socket] = {}
_conns_pid = os.getpid()
_owed: Set[socket.socket] = set()  # connections whose last reply a request gave up waiting for


def tree_root() -> str:
    """The key of the tree whose janitor this process uses (a child's is its starter's, so what it returns outlives it)."""
    return _util.tree()


def _forget_connections() -> None:
    global _conns, _conns_pid, _lock, _owed
    # The lock may have been held by a thread of the parent that does not exist here.
    _lock = threading.RLock()
    for conn in _conns.values():
        conn.close()  # our copy of the parent's socket; the parent keeps its own
    _conns, _conns_pid, _owed = {}, os.getpid(), set()


os.register_at_fork(after_in_child=_forget_connections)

# Connections are never closed at exit (atexit): a Queue's feeder thread still pickles,
# and so sends tickets, while the interpreter exits; the process's end closes them.


class _Connection(socket.socket):
    """A connection to a janitor. It lives as long as its process, so the interpreter's
    teardown finding it open is no leak: no ResourceWarning then (under ``-W always``)."""

    def __del__(self) -> None:
        pass


def _connection(root: str) -> socket.socket:
    if _conns_pid != os.getpid():
        _forget_connections()
    conn = _conns.get(root)
    if conn is None:
        conn = _conns[root] = _connect(root)
    return conn


def _connect(root: str) -> socket.socket:
    for attempt in range(200):
        conn = _open(root)
        if conn is not None:
            return conn
        if attempt == 0:
            _start_janitor(root)
        else:
            time.sleep(0.01)
    raise RuntimeError(f"nbmp could not reach its shared-memory janitor for process {_pid(root)}")


class NoSocket(PermissionError):
    """This process may not open a Unix socket (a sandbox's policy): it has no janitor."""


def reach(root: str) -> None:
    """Connect to ``root``'s janitor if not yet connected: :class:`NoSocket` before anything is made."""
    with _lock:
        _connection(root)


def _open(root: str) -> Optional[socket.socket]:
    """A connection to ``root``'s janitor, its user checked; None if none listens."""
    try:
        conn = _Connection(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as refused:
        if refused.errno not in (errno.EPERM, errno.EACCES, errno.EAFNOSUPPORT):  # seccomp; systemd's RestrictAddressFamilies
            raise
        raise NoSocket(f"nbmp: this process may not open a Unix socket ({refused.strerror}; a sandbox's policy?), which "
                       f"shared arrays need to reach their janitor: nbmp.zeros, nbmp.empty and torch's shared tensors "
                       f"are not available here. Plain numpy arrays sent to workers go by value.") from refused
    try:
        conn.connect(_janitor.address(root))
        uid = _janitor.peer_uid(conn)
    except OSError:
        conn.close()
        return None
    if uid != os.geteuid():
        conn.close()
        raise PermissionError(
            f"nbmp: the address of the shared-memory janitor of process {_pid(root)} is held by a process of "
            f"another user (uid {uid}); nothing was sent to it. Another user of this machine may be trying to "
            f"reach your shared memory: stop that process, or share arrays through a new kernel.")
    return conn


def _pid(root: str) -> str:
    return root.split("-", 1)[0]  # never the secret: it goes into messages users read


def _start_janitor(root: str) -> None:
    # -I -S: stdlib only, no site, no user code; the script detaches itself, so this waits
    # only for the moment its socket is bound. The key goes on stdin: a command line is public.
    subprocess.run([sys.executable, "-I", "-S", _janitor.__file__, _pid(root)], input=f"{root}\n".encode(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, timeout=60)


def send(root: str, message: str, fds: Sequence[int] = ()) -> None:
    """Send a one-way message (with file descriptors attached) to ``root``'s janitor."""
    data = message.encode()
    with _lock:
        conn = _connection(root)
        if fds:
            socket.send_fds(conn, [data], list(fds), _posix.NOSIGNAL)
        else:
            conn.sendall(data, _posix.NOSIGNAL)


@_interrupts.step
def request(root: str, message: str) -> Tuple[str, List[int]]:
    """Send ``message`` and wait for the janitor's one-line reply (and any fds), with an interrupt held
    until it is read; a reply not come in time is owed, and the next request drops it first."""
    with _lock:
        conn = _connection(root)
        if conn in _owed:  # at most one: no request is sent before the last one's reply is read
            _, stale = _reply(conn, root, message)
            _close_all(stale)
        conn.sendall(message.encode(), _posix.NOSIGNAL)
        _owed.add(conn)
        data, fds = _reply(conn, root, message)
        _owed.discard(conn)
    return data.decode().strip(), fds


def _reply(conn: socket.socket, root: str, message: str) -> Tuple[bytes, List[int]]:
    # Waited for in slices: a second interrupt, given to another thread, still reaches this one.
    conn.settimeout(_posix.INTERRUPT_SLICE)
    deadline = time.monotonic() + REPLY_TIMEOUT
    data, fds = b"", cast(List[int], [])
    try:
        while not data.endswith(b"\n"):
            try:
                chunk, new_fds, _, _ = socket.recv_fds(conn, 256, 4)
            except TimeoutError:
                if time.monotonic() < deadline:
                    continue
                raise
            if not chunk:
                raise ConnectionError("nbmp's shared-memory janitor went away (its root process exited)")
            data, fds = data + chunk, fds + new_fds
    except BaseException as given_up:
        _close_all(fds)
        if not isinstance(given_up, TimeoutError):
            raise
        raise TimeoutError(f"nbmp's shared-memory janitor (of process {_pid(root)}) did not answer "
                           f"{message.split(' ')[0].strip()!r} within {REPLY_TIMEOUT:g} s. It serves every "
                           f"process of this tree one message at a time: a machine swapping hard, or a "
                           f"stopped janitor, makes it this slow; if neither, please report it at {ISSUES}.") from None
    finally:
        conn.settimeout(None)
    return data, fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def connected(root: str) -> bool:
    """Whether this process already talks to ``root``'s janitor (no janitor is started)."""
    return _conns_pid == os.getpid() and root in _conns


def running(root: str) -> bool:
    """Whether ``root``'s janitor runs (it may serve other processes of the tree only);
    connects to it if so, never starts one."""
    with _lock:
        if connected(root):
            return True
        if _conns_pid != os.getpid():
            _forget_connections()
        conn = _open(root)
        if conn is None:
            return False
        _conns[root] = conn
        return True
