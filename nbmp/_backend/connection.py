"""Connections that send with nbmp's pickler.

Differs from ``multiprocessing.connection.Connection`` in ``send``: the object is
pickled by :mod:`nbmp._backend.pickling` (cloudpickle + nbmp's reducers), and one that
carries shared memory goes out whole or not at all (:func:`send_whole`); and in
``recv``, which loads with plain pickle, but whole: an interrupt waits for the end of
the load (shared-memory tickets half taken would stay held, see ``loads_whole``).
"""

from __future__ import annotations

import os
import select
import struct
import time
from multiprocessing import connection, reduction
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from . import interrupts as _interrupts, pickling as _pickling, posix as _posix

__all__ = ["Connection", "Pipe", "Listener", "Client", "send_whole"]


class Connection(connection.Connection):
    """A :class:`multiprocessing.connection.Connection` whose ``send`` uses cloudpickle."""

    if TYPE_CHECKING:  # the stdlib's private methods that send_whole, recv and managing use (typeshed omits them)
        def _send_bytes(self, buf: bytes) -> None: ...
        def _recv_bytes(self, maxsize: Any = None) -> Any: ...
        def _send(self, buf: bytes) -> None: ...

    def send(self, obj: Any) -> None:
        """Send ``obj``, pickled by nbmp, to the other end.

        An object that carries shared-memory tickets (a shared array) goes out whole (see
        :func:`send_whole`), or, interrupted before, gives its tickets back: nobody will load
        a message never sent."""
        _check(self, self.writable, "read-only")
        sent: List[bool] = []
        with _pickling.collecting_single_use() as handed_out:
            try:
                data = _pickling.dumps_explained(obj, {"the object sent": obj}, "send it to another process")
                if not handed_out:
                    self.send_bytes(data)
                    return
                send_whole(self, data, sent)
            except BaseException:
                if not sent:  # nobody will load a message that never went out whole
                    for release in handed_out:
                        release()
                raise

    def _sent(self) -> None:
        """Called in the step that wrote a whole message (a manager's connection notes its reply owed)."""

    def recv(self) -> Any:
        """Receive an object sent by the other end (waiting for one is interruptible); once a
        message begins to arrive, it is read and loaded whole, and an interrupt meanwhile is
        raised after: a message half read would leave the rest to be read as the next one,
        and one read but not loaded would keep the shared arrays it carries until the
        program ends. A second interrupt while the message is read closes the connection."""
        _check(self, self.readable, "write-only")
        _posix.ready(self.fileno(), None)
        return _receive(self)


def _check(conn: Connection, able: bool, otherwise: str) -> None:
    """The standard connection's checks before a send or a receive, with its errors."""
    if conn.closed:
        raise OSError("handle is closed")
    if not able:
        raise OSError(f"connection is {otherwise}")


def send_whole(conn: Connection, data: bytes, sent: List[bool]) -> None:
    """Send ``data``, a pickle carrying shared-memory tickets, so that its reader never sees half of it;
    ``sent`` gets True once it is out (else the caller gives the tickets back). After an interrupt a
    big message gets ``CUT_AFTER`` seconds more (a second one: none), then the connection is closed
    (docs/reliability.md)."""
    size = len(data)
    header = struct.pack("!i", size) if size <= 0x7fffffff else struct.pack("!iQ", -1, size)
    fd, need = conn.fileno(), len(header) + size
    if need <= select.PIPE_BUF:  # one write, whole once the pipe has a page free
        _posix.ready(fd, None, select.POLLOUT)
        _write_whole(conn, header, data, sent, True)
        return
    free, capacity = _posix.room(fd) or (0, 0)
    while free < need <= capacity:  # it will fit once the reader makes room
        time.sleep(0.01)  # (a pipe polls writable with one page free)
        free, capacity = _posix.room(fd) or (0, 0)
    _write_whole(conn, header, data, sent, free >= need)


CUT_AFTER = 0.5


@_interrupts.step
def _write_whole(conn: Connection, header: bytes, data: bytes, sent: List[bool], fits: bool) -> None:
    if fits:
        conn._send(header + data)
        conn._sent()
        sent.append(True)
        return
    fd = conn.fileno()
    started, deadline = False, None
    try:
        for part in (header, data):
            view = memoryview(part).cast("B")
            while view:
                if _posix.ready(fd, 0.05, select.POLLOUT):  # each write fits: none blocks
                    view = view[os.write(fd, view[:max((_posix.room(fd) or (0, 0))[0], select.PIPE_BUF)]):]
                    started = True
                if _interrupts.pending():
                    deadline = deadline or time.monotonic() + CUT_AFTER
                    if time.monotonic() > deadline:  # nobody takes the rest: the interrupt goes through
                        _interrupts.escape()
    except BaseException:
        if started:
            conn.close()
        raise
    conn._sent()
    sent.append(True)


@_interrupts.step
def _receive(conn: Connection) -> Any:
    try:
        view = conn._recv_bytes().getbuffer()
    except KeyboardInterrupt:  # a second interrupt in the middle: the rest would be read as the next message
        conn.close()
        raise
    try:
        return _pickling.loads_whole(view)
    finally:
        # Now: a traceback's frames keeping the view would make the BytesIO's finalizer raise BufferError.
        view.release()


def Pipe(duplex: bool = True) -> Tuple[Connection, Connection]:
    """Return a pair of connected :class:`Connection` objects, like ``multiprocessing.Pipe``.

    Example::

        >>> a, b = nbmp.Pipe()
        >>> a.send(lambda x: x + 1); b.recv()(1)
        2
    """
    return tuple(_upgrade(end) for end in connection.Pipe(duplex))  # type: ignore[return-value]  # tuple() of a generator is tuple[Connection, ...]; here, two


class Listener(connection.Listener):
    """``multiprocessing.connection.Listener`` whose accepted connections send with cloudpickle."""

    def accept(self) -> Connection:
        """Accept a connection: an nbmp :class:`Connection`."""
        return _upgrade(super().accept())


def Client(address: Any, family: Optional[str] = None, authkey: Optional[bytes] = None) -> Connection:
    """``multiprocessing.connection.Client``, returning an nbmp :class:`Connection`."""
    return _upgrade(connection.Client(address, family, authkey))


def _upgrade(end: connection.Connection) -> Connection:
    # Connection adds no state to the stdlib class, so retyping the stdlib's object is exact and keeps its handle (no dup, no second pipe).
    end.__class__ = Connection
    return end  # type: ignore[return-value]  # retyped by the __class__ assignment above


def _reduce_connection(conn: Connection) -> Tuple[Any, ...]:
    _, args = connection.reduce_connection(conn)  # type: ignore[attr-defined]  # typeshed omits this runtime name
    return _rebuild_connection, args


def _rebuild_connection(df: Any, readable: bool, writable: bool) -> Connection:
    return Connection(df.detach(), readable, writable)


# Registering nbmp's own type with the stdlib's ForkingPickler changes nothing for
# stdlib objects; it lets an nbmp Connection travel through any channel.
reduction.register(Connection, _reduce_connection)
