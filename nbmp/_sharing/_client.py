"""Talking to the janitor of this process tree: finding it, starting it, sending it messages.

Every process that shares memory keeps one Unix-socket connection to the janitor
of its tree's root (see ``_janitor.py`` for the messages). Most messages are
one-way, so a transfer costs no round trip on the sender's side; a forked child
never reuses its parent's connection, since the janitor learns a process's death
from its connection closing.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple, cast

from .._backend import posix as _posix
from .._base.util import ISSUES
from . import _janitor

__all__ = ["tree_root", "send", "request"]

REPLY_TIMEOUT = 60.0

# Reentrant: a weakref finalizer (which sends "rel") may run during a request.
_lock = threading.RLock()
_conns: Dict[int, socket.socket] = {}
_conns_pid = os.getpid()
_owed: Set[socket.socket] = set()  # connections whose last reply a request gave up waiting for
_root: Optional[int] = None


def tree_root() -> int:
    """The pid whose janitor this process uses: its own tree's top, as far as it knows.

    A forked child inherits its parent's answer; a spawned or forkserver child
    uses its parent's janitor, so that what it returns outlives it.
    """
    global _root
    if _root is None:
        parent = multiprocessing.parent_process()
        if parent is None or parent.pid is None:
            # Not cached: a spawned child importing its parent's __main__ runs before
            # multiprocessing knows its parent; its later arrays should use the parent's janitor.
            return os.getpid()
        _root = parent.pid
    return _root


def _forget_connections() -> None:
    global _conns, _conns_pid, _lock, _owed
    # The lock may have been held by a thread of the parent that does not exist here.
    _lock = threading.RLock()
    for conn in _conns.values():
        conn.close()  # our copy of the parent's socket; the parent keeps its own
    _conns, _conns_pid, _owed = {}, os.getpid(), set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_connections)

# Connections are never closed at exit (atexit): a Queue's feeder thread still pickles,
# and so sends tickets, while the interpreter exits; the process's end closes them.


class _Connection(socket.socket):
    """A connection to a janitor. It lives as long as its process, so the interpreter's
    teardown finding it open is no leak: no ResourceWarning then (under ``-W always``)."""

    def __del__(self) -> None:
        pass


def _connection(root: int) -> socket.socket:
    if _conns_pid != os.getpid():
        _forget_connections()
    conn = _conns.get(root)
    if conn is None:
        conn = _conns[root] = _connect(root)
    return conn


def _connect(root: int) -> socket.socket:
    started = False
    for attempt in range(200):
        conn = _Connection(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(_janitor.address(root))
            return conn
        except OSError:
            conn.close()
        if not started:
            _start_janitor(root)
            started = True
        else:
            time.sleep(0.01)
    raise RuntimeError(f"nbmp could not reach its shared-memory janitor for process {root}")


def _start_janitor(root: int) -> None:
    # -I -S: stdlib only, no site, no user code; the script detaches itself, so this waits
    # only for the moment its socket is bound.
    subprocess.run([sys.executable, "-I", "-S", _janitor.__file__, str(root)], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, timeout=60)


def send(root: int, message: str, fds: Sequence[int] = ()) -> None:
    """Send a one-way message (with file descriptors attached) to ``root``'s janitor."""
    data = message.encode()
    with _lock:
        conn = _connection(root)
        if fds:
            socket.send_fds(conn, [data], list(fds))
        else:
            conn.sendall(data)


def request(root: int, message: str) -> Tuple[str, List[int]]:
    """Send ``message`` and wait for the janitor's one-line reply (and any fds with it).

    An interrupt is held until the reply is read: one raised in between would leave the
    reply in the socket, to be read as the answer to the next request. A reply that does
    not come in time is owed: the next request reads it first and throws it away."""
    with _lock, _posix.interrupts_deferred():
        conn = _connection(root)
        if conn in _owed:  # at most one: no request is sent before the last one's reply is read
            _, stale = _reply(conn, root, message)
            _close_all(stale)
        conn.sendall(message.encode())
        _owed.add(conn)
        data, fds = _reply(conn, root, message)
        _owed.discard(conn)
    return data.decode().strip(), fds


def _reply(conn: socket.socket, root: int, message: str) -> Tuple[bytes, List[int]]:
    conn.settimeout(REPLY_TIMEOUT)
    data, fds = b"", cast(List[int], [])
    try:
        while not data.endswith(b"\n"):
            chunk, new_fds, _, _ = socket.recv_fds(conn, 256, 4)
            if not chunk:
                raise ConnectionError("nbmp's shared-memory janitor went away (its root process exited)")
            data, fds = data + chunk, fds + new_fds
    except TimeoutError:
        _close_all(fds)
        raise TimeoutError(f"nbmp's shared-memory janitor (of process {root}) did not answer "
                           f"{message.split(' ')[0].strip()!r} within {REPLY_TIMEOUT:g} s. It serves every "
                           f"process of this tree one message at a time: a machine swapping hard, or a "
                           f"stopped janitor, makes it this slow; if neither, please report it at {ISSUES}.") from None
    finally:
        conn.settimeout(None)
    return data, fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def connected(root: int) -> bool:
    """Whether this process already talks to ``root``'s janitor (no janitor is started)."""
    return _conns_pid == os.getpid() and root in _conns


def running(root: int) -> bool:
    """Whether ``root``'s janitor runs (it may serve other processes of the tree only);
    connects to it if so, never starts one."""
    with _lock:
        if connected(root):
            return True
        if _conns_pid != os.getpid():
            _forget_connections()
        conn = _Connection(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(_janitor.address(root))
        except OSError:
            conn.close()
            return False
        _conns[root] = conn
        return True
