"""The janitor: one small process per process tree that owns nbmp's segments' lifetime.

Run as a script (``python -I -S _janitor.py ROOT_PID``, the tree's key on its standard input),
stdlib only, so that it starts in milliseconds and never imports the user's code. The key
is ``<root pid>-<secret>`` (``nbmp._base.util.tree``); the janitor binds the address made
from it (exactly one janitor per tree: a second one finds the name taken and exits),
detaches, and then serves line messages, from processes of its own user only: the protocol and
the rules for tickets and for freeing are in docs/design.md (the janitor's protocol).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import mmap
import os
import resource
import selectors
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

MAX_FDS_PER_RECV = 64
SLOT = 40  # a board's slot: 1 byte "in use", then a ticket's name (as in _pocket.py)
LAST_WORDS = 3.0  # seconds the tree's processes have, after their root died, to go before all is freed


# Linux: an abstract socket, which leaves no file behind; its name, though public once bound,
# cannot be taken first, since it holds the tree's secret. Elsewhere: a socket file in a
# directory only this user can enter.
ABSTRACT = sys.platform.startswith("linux")


def address(key: str) -> str:
    """Where the janitor of the tree ``key`` listens."""
    return f"\0nbmp-janitor-{key}" if ABSTRACT else os.path.join(private_directory(), f"j{key[:28]}")  # short: <= 104 bytes on macOS


def private_directory() -> str:
    """``<temporary directory>/nbmp-<uid>``, made ``0700``; PermissionError if it exists and
    another user could write to it or own it."""
    path = os.path.join(tempfile.gettempdir(), f"nbmp-{os.geteuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"nbmp: {path} must be a directory of this user's that no one else can enter "
                              f"(it is not: another user may have made it). Remove it, or point TMPDIR elsewhere.")
    return path


def peer_uid(conn: socket.socket) -> int:
    """The effective uid of the process at the other end of the Unix socket ``conn``."""
    if hasattr(socket, "SO_PEERCRED"):
        ucred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
        return int(struct.unpack("iII", ucred)[1])
    libc = ctypes.CDLL(None, use_errno=True)  # the BSDs and macOS
    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    if libc.getpeereid(conn.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
        raise OSError(ctypes.get_errno(), "getpeereid")
    return uid.value


_PUNCH_HOLE = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _punch(fd: int, size: int) -> None:
    """Free a memory file's pages although its maker still maps it (its pool's mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    libc.fallocate(fd, _PUNCH_HOLE, 0, size)


class Segment:
    __slots__ = ("refs", "size", "fd", "path", "owner", "idle", "since")

    def __init__(self, size: int, fd: Optional[int], path: Optional[str]) -> None:
        self.refs, self.size, self.fd, self.path = 1, size, fd, path
        self.owner: Optional[socket.socket] = None  # whose pool it returns to
        self.idle, self.since = 0.0, 0.0

    def free(self) -> None:
        if self.fd is not None:
            if self.owner is not None:
                _punch(self.fd, self.size)
            os.close(self.fd)
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


class Janitor:
    def __init__(self) -> None:
        self.segments: Dict[str, Segment] = {}
        self.tickets: Dict[str, Optional[str]] = {}  # ticket -> segment (None: its segment was gone)
        self.holds: Dict[socket.socket, Dict[str, int]] = {}
        self.parked: Dict[str, List[Tuple[Optional[socket.socket], str]]] = {}
        self.buffers: Dict[socket.socket, bytes] = {}
        self.fds: Dict[socket.socket, List[int]] = {}
        self.boards: Dict[socket.socket, mmap.mmap] = {}
        self.pooled: Dict[str, Segment] = {}  # free, kept for their owner to claim
        self.planned: Dict[socket.socket, Dict[str, None]] = {}  # files announced, not yet "new"
        self.drain: Callable[[socket.socket], None] = lambda conn: None  # read what the others sent already

    # -- references -------------------------------------------------------
    def unref(self, seg: str, n: int = 1) -> None:
        s = self.segments.get(seg)
        if s is not None:
            s.refs -= n
            if s.refs <= 0:
                del self.segments[seg]
                if s.owner in self.holds:
                    s.since = time.monotonic()
                    self.pooled[seg] = s
                else:
                    s.free()

    def claim(self, conn: socket.socket, ticket: str, segs: List[str]) -> None:
        self.drain(conn)  # a release sent before this claim (by a receiver) counts
        gone = [seg for seg in segs if seg not in self.pooled and seg not in self.segments]
        seg = next((seg for seg in segs if seg in self.pooled and self.pooled[seg].owner is conn), "-")
        if seg != "-":
            s = self.segments[seg] = self.pooled.pop(seg)
            s.refs = 1
            if ticket == "-":
                self.holds[conn][seg] = self.holds[conn].get(seg, 0) + 1
            else:
                self.add_ticket(ticket, seg)
        conn.sendall((" ".join([seg, *gone]) + "\n").encode())

    def unpool(self, seg: str) -> None:
        if seg in self.pooled:
            self.pooled.pop(seg).free()
        elif seg in self.segments:
            self.segments[seg].owner = None

    def expire(self) -> Optional[float]:
        """Free the pooled segments unused for their IDLE seconds; seconds until the next is due."""
        now, due = time.monotonic(), []
        for seg, s in list(self.pooled.items()):
            if now - s.since >= s.idle:
                self.pooled.pop(seg).free()
            else:
                due.append(s.since + s.idle - now)
        return min(due) if due else None

    def add_ticket(self, ticket: str, seg: Optional[str]) -> None:
        self.tickets[ticket] = seg
        for conn, verb in self.parked.pop(ticket, []):
            if conn is None:  # a drop from a board whose process is gone
                self.drop_pocketed(ticket)
            elif conn in self.holds:
                with contextlib.suppress(OSError):  # that receiver is gone; its connection closes on its own
                    self.resolve(conn, verb, ticket)

    def resolve(self, conn: socket.socket, verb: str, ticket: str) -> None:
        if ticket not in self.tickets:
            self.parked.setdefault(ticket, []).append((conn, verb))
            return
        seg = self.tickets.pop(ticket)
        s = self.segments.get(seg) if seg is not None else None
        if s is None or seg is None:  # (seg is None only when s is: for the type checker)
            if verb == "take":
                conn.sendall(b"err gone\n")
            return
        if verb == "drop":
            self.unref(seg)
            return
        held = self.holds[conn]
        held[seg] = held.get(seg, 0) + 1
        if verb == "take":
            fds = [s.fd] if s.fd is not None else []
            socket.send_fds(conn, [f"ok {seg}\n".encode()], fds)

    def refuse_parked(self) -> None:
        """Called once everything sent before the parked requests has been read: no process
        sent their tickets, so a "take" is answered "err", the others are dropped."""
        for waiting in self.parked.values():
            for conn, verb in waiting:
                if verb == "take" and conn in self.holds:
                    with contextlib.suppress(OSError):  # that receiver is gone; its connection closes on its own
                        conn.sendall(b"err unknown\n")
        self.parked.clear()

    def drop_pocketed(self, ticket: str) -> None:
        if ticket not in self.tickets:  # its "tkt" is not read yet: drop it when it is
            self.parked.setdefault(ticket, []).append((None, "drop"))
            return
        seg = self.tickets.pop(ticket)
        if seg is not None:
            self.unref(seg)

    def pocketed(self, board: mmap.mmap) -> List[str]:
        return [board[at + 1:at + SLOT].rstrip(b"\0").decode() for at in range(0, len(board), SLOT) if board[at] == 1]

    # -- messages ---------------------------------------------------------
    def handle(self, conn: socket.socket, line: str) -> None:
        verb, *args = line.split(" ")
        if verb in ("new", "nt", "newp", "ntp"):
            by_sender = verb in ("new", "newp")
            seg, size, path = (args[0], int(args[1]), args[2]) if by_sender else (args[0], int(args[2]), args[3])
            fd = self.fds[conn].pop(0) if path == "-" else None
            self.planned[conn].pop(path, None)
            s = self.segments[seg] = Segment(size, fd, None if path == "-" else path)
            if verb.endswith("p"):
                s.owner, s.idle = conn, float(args[-1])
            if by_sender:
                self.holds[conn][seg] = self.holds[conn].get(seg, 0) + 1
            else:
                self.add_ticket(args[1], seg)
        elif verb == "plan":
            self.planned[conn][" ".join(args)] = None  # a path may hold spaces
        elif verb == "claim":
            self.claim(conn, args[0], args[1:])
        elif verb == "unpool":
            self.unpool(args[0])
        elif verb == "taint":
            if args[0] in self.segments:
                self.segments[args[0]].owner = None
        elif verb == "pooled":
            conn.sendall((" ".join(f"{seg}:{s.size}" for seg, s in self.pooled.items()) + "\n").encode())
        elif verb == "tkt":
            known = args[0] if args[0] in self.segments else None
            if known is not None:
                self.segments[known].refs += 1
            self.add_ticket(args[1], known)
        elif verb in ("take", "own", "drop"):
            self.resolve(conn, verb, args[0])
        elif verb == "forget":  # unlike drop, never parked: a ticket not here was taken already
            forgotten = self.tickets.pop(args[0], None)
            if forgotten is not None:
                self.unref(forgotten)
        elif verb == "rel":
            held = self.holds[conn]
            if held.get(args[0], 0) > 0:
                held[args[0]] -= 1
                self.unref(args[0])
        elif verb == "board":
            fd = self.fds[conn].pop(0)
            try:
                self.boards[conn] = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
        elif verb == "stat":
            total = sum(s.size for s in self.segments.values())
            pocketed = sum(len(self.pocketed(b)) for b in self.boards.values())
            conn.sendall(f"{len(self.segments)} {total} {max(len(self.tickets) - pocketed, 0)}\n".encode())
        elif verb == "list":
            conn.sendall((" ".join(f"{seg}:{s.size}" for seg, s in self.segments.items()) + "\n").encode())

    def receive(self, conn: socket.socket) -> bool:
        try:
            # Never blocks: a claim's drain may have read what select() reported ready.
            data, fds = _ready_now(conn)
        except BlockingIOError:
            return True
        except OSError:
            data, fds = b"", []
        if not data:
            return False
        self.fds[conn].extend(fds)
        buf = self.buffers[conn] + data
        *lines, self.buffers[conn] = buf.split(b"\n")
        for line in lines:
            try:
                self.handle(conn, line.decode())
            except OSError:
                return False  # its process is gone
            except Exception:
                continue  # a malformed message must never take the janitor down
        return True

    def close(self, conn: socket.socket) -> None:
        board = self.boards.pop(conn, None)
        if board is not None:
            for ticket in self.pocketed(board):
                self.drop_pocketed(ticket)
            board.close()
        for seg, n in self.holds.pop(conn).items():
            self.unref(seg, n)
        for seg in [seg for seg, s in self.pooled.items() if s.owner is conn]:
            self.pooled.pop(seg).free()
        for s in self.segments.values():
            if s.owner is conn:
                s.owner = None
        for fd in self.fds.pop(conn):
            os.close(fd)
        _unlink_all(self.planned.pop(conn))  # its maker died between creating and announcing them
        del self.buffers[conn]
        conn.close()

    def free_all(self) -> None:
        for s in [*self.segments.values(), *self.pooled.values()]:
            s.free()
        self.segments.clear()
        self.pooled.clear()
        for planned in self.planned.values():
            _unlink_all(planned)
        self.planned.clear()


def _ready_now(conn: socket.socket) -> Tuple[bytes, List[int]]:
    """What ``conn`` has for us now, and the descriptors sent with it; BlockingIOError if nothing.
    Not ``socket.recv_fds(..., MSG_DONTWAIT)``, which drops its flags (CPython 3.10 to 3.13): a blocking
    read of a connection a claim's drain emptied would stall every other process's request."""
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_LEN(MAX_FDS_PER_RECV * fds.itemsize), socket.MSG_DONTWAIT)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _unlink_all(paths: Dict[str, None]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):  # never created, or already discarded by its maker
            os.unlink(path)


def _watch(root: int) -> Optional[int]:
    try:
        return os.pidfd_open(root)
    except (AttributeError, OSError):
        return None  # no pidfd: poll instead


def _alive(root: int) -> bool:
    try:
        os.kill(root, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def serve(listener: socket.socket, root: int) -> None:
    janitor = Janitor()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "listen")
    pidfd = _watch(root)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ, "root")
    root_gone = False

    def serve_ready(timeout: Optional[float], skip: Optional[socket.socket] = None) -> int:
        """Serve what is ready within ``timeout``: how many were ready (noting the root's death)."""
        nonlocal root_gone
        events = [(key, mask) for key, mask in sel.select(timeout) if key.fileobj is not skip]
        if any(key.data == "root" for key, _ in events) or (pidfd is None and not _alive(root)):
            root_gone = True
        for key, _ in events:
            if key.data == "listen":
                try:
                    conn, _ = listener.accept()  # non-blocking: a claim's drain may have accepted it
                except BlockingIOError:
                    continue
                if not _same_user(conn):
                    conn.close()
                    continue
                conn.setblocking(True)
                janitor.holds[conn], janitor.buffers[conn], janitor.fds[conn], janitor.planned[conn] = {}, b"", [], {}
                sel.register(conn, selectors.EVENT_READ, "conn")
            elif key.fileobj in janitor.holds and not janitor.receive(key.fileobj):
                sel.unregister(key.fileobj)
                janitor.close(key.fileobj)
        return len(events)

    janitor.drain = lambda conn: None if serve_ready(0, conn) else None
    while not root_gone:
        due = janitor.expire()
        waits = [t for t in (due, None if pidfd is not None else 1.0) if t is not None]
        ready = serve_ready(min(waits) if waits else None)
        while ready and janitor.parked:  # read all that was sent before a parked request
            ready = serve_ready(0)
        janitor.refuse_parked()
    # The tree's processes get SIGTERM with their root; until their connections close, they may
    # have announced files ("plan") the janitor has not read yet, which would stay behind.
    if pidfd is not None:
        sel.unregister(pidfd)
    deadline, ready = time.monotonic() + LAST_WORDS, 1
    while (ready or janitor.holds) and time.monotonic() < deadline:
        ready = serve_ready(min(0.05, max(deadline - time.monotonic(), 0)))
    janitor.free_all()


def _same_user(conn: socket.socket) -> bool:
    try:
        return peer_uid(conn) == os.geteuid()
    except OSError:
        return False


def _bind(listener: socket.socket, where: str) -> None:
    """Bind ``where``; a socket file left by a janitor that was killed is replaced."""
    try:
        listener.bind(where)
    except OSError:
        if where.startswith("\0"):
            raise
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(where)
        except ConnectionRefusedError:  # nobody listens: stale (the directory is this user's alone)
            os.unlink(where)
            listener.bind(where)
            return
        finally:
            probe.close()
        raise


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches the whole group
    key = sys.stdin.readline().strip()  # not an argument: a command line is visible to every user
    root = int(key.split("-", 1)[0])  # also the argument, which names whom a janitor serves in ps
    if not _alive(root):
        return 0  # a process of a tree whose root is gone: nothing it makes could be freed
    where = address(key)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _bind(listener, where)
    except OSError:
        return 0  # another janitor already serves this tree
    listener.listen(512)
    listener.setblocking(False)
    if os.fork():
        os._exit(0)  # detach: the starter waits for this intermediate process only
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one fd per live segment is ours to hold
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    try:
        serve(listener, root)
    finally:
        if not where.startswith("\0"):
            os.unlink(where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
