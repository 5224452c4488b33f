"""What nbmp's managers are made of, beside the standard ones (``nbmp.managers`` puts it together).

The serializer ``"nbmp"`` (nbmp's connections: cloudpickle, shared arrays as handles), kept in
step through interrupts (:class:`_ProxyConnection`, :class:`Server`); a server started as a worker
(``context.workers_context``), so it ignores SIGINT and dies with its starter, even a SIGKILLed
one; and :class:`StartsFromNbmp`, the mixin that makes both the default.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from multiprocessing import connection as _stdconnection, managers, process
from typing import Any, Optional, Tuple

from .._base import checks as _checks
from . import connection, context, interrupts, posix

__all__ = ["SERIALIZER", "Server", "SharedMemoryServer", "StartsFromNbmp"]


class _Serializer(str):
    """The name of nbmp's serializer in the standard module's table (``listener_client``); pickled with
    a proxy, it is a reference to this module, so a process rebuilding the proxy imports nbmp first."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        return _nbmp_serializer, ()


class _ProxyConnection(connection.Connection):
    """A connection to a manager's server whose requests and replies stay in step through an interrupt
    (the standard one's next call would read the reply given up on as its own). A reply that began
    is read whole; one given up on is read and dropped before the next request, or, when it has not
    come (a blocked ``Queue.get``), the connection is replaced and whatever that call returns is dropped.
    """

    _reconnect_to: Tuple[Any, Optional[bytes]]  # the manager's address and authkey (set by _proxy_client)
    _owed = False  # a request was sent whose reply is not read yet

    def send(self, obj: Any) -> None:
        """Send a request, once a reply owed to an earlier one is settled: written whole and marked as
        owing its reply, an interrupt meanwhile raised after."""
        if self._owed:
            self._settle()
        super().send(obj)

    def _send_bytes(self, buf: Any) -> None:
        # Under a send of a request that carries no shared array (one that does: send_whole).
        if self._owed:
            self._settle()
        posix.ready(self.fileno(), None, select.POLLOUT)
        self._send_owing(buf)

    @interrupts.step
    def _send_owing(self, buf: Any) -> None:
        super()._send_bytes(buf)
        self._sent()

    def _sent(self) -> None:
        self._owed = True

    def _recv_bytes(self, maxsize: Any = None) -> Any:
        # Under every receive (read whole, with interrupts deferred: see Connection.recv).
        buf = super()._recv_bytes(maxsize)
        self._owed = False
        return buf

    def close(self) -> None:
        """Close the connection, first reading and dropping a reply given up on that comes in time, so
        its shared arrays are released."""
        if self._owed and not self.closed:
            self._drop_reply()
        super().close()

    @interrupts.held  # not raised: this runs in a proxy's finalizer, where Python would print an interrupt and drop it
    def _drop_reply(self) -> None:
        with contextlib.suppress(OSError, EOFError):  # the server has gone: its reply with it
            self._settle(reconnect=False)

    def _settle(self, reconnect: bool = True) -> None:
        if posix.ready(self.fileno(), _SETTLE_WAIT):  # the reply came: dropped, with what it holds
            with contextlib.suppress(Exception):  # what the call given up on answered is nobody's concern now
                self.recv()
            return
        if not reconnect:
            return
        address, authkey = self._reconnect_to
        fresh = _stdconnection.Client(address, authkey=authkey)
        try:
            name = process.current_process().name
            if threading.current_thread() is not threading.main_thread():
                name += "|" + threading.current_thread().name
            managers.dispatch(fresh, None, "accept_connection", (name,))  # type: ignore[attr-defined]  # stdlib
        except BaseException:
            fresh.close()
            raise
        # The fresh connection's socket becomes this one's (the proxy keeps this object).
        old, self._handle, fresh._handle = self._handle, fresh._handle, None  # type: ignore[has-type,attr-defined]
        os.close(old)  # the server's thread for it ends when the call given up on returns
        self._owed = False


# How long a request's next call waits for the reply that the last one gave up on.
_SETTLE_WAIT = 0.5


def _proxy_client(address: Any, family: Optional[str] = None, authkey: Optional[bytes] = None) -> _ProxyConnection:
    conn = connection.Client(address, family, authkey)
    conn.__class__ = _ProxyConnection  # adds no state of its own beyond the one below: the same object
    conn._reconnect_to = (address, authkey)  # type: ignore[attr-defined]  # set just above
    return conn  # type: ignore[return-value]  # retyped by the __class__ assignment above


class _Replying:
    """How many of a server's threads are sending a reply, so that its exit waits for them: a reply
    pickled but not yet written holds a shared array's ticket."""

    def __init__(self) -> None:
        self._done = threading.Condition()
        self._sending = 0

    def __enter__(self) -> None:
        with self._done:
            self._sending += 1

    def __exit__(self, *exc: Any) -> None:
        with self._done:
            self._sending -= 1
            self._done.notify_all()

    def wait(self, timeout: float) -> None:
        with self._done:
            self._done.wait_for(lambda: not self._sending, timeout)


_replying = _Replying()


class _ServerConnection(connection.Connection):
    """A connection of a manager's server, whose replies its exit waits for."""

    def send(self, obj: Any) -> None:
        """Send a reply; the server's exit waits until it is written."""
        with _replying:
            super().send(obj)


class _ServerListener(connection.Listener):
    """A manager's server's listener: its connections are :class:`_ServerConnection`."""

    def accept(self) -> _ServerConnection:
        """Accept a connection from a proxy or a manager."""
        conn = super().accept()
        conn.__class__ = _ServerConnection  # no state of its own: the same object
        return conn  # type: ignore[return-value]  # retyped by the __class__ assignment above


class _EndsAfterItsReplies:
    """A manager's server whose exit waits (a moment at most) for the replies being sent."""

    def serve_forever(self) -> None:
        """Serve until told to shut down (the standard loop), then let the replies go out."""
        try:
            super().serve_forever()  # type: ignore[misc]  # a mixin: next in the MRO is a server
        finally:  # the standard loop ends in sys.exit(0): this runs on the way out
            _replying.wait(_REPLY_GRACE)


_REPLY_GRACE = 1.0  # seconds: the manager's shutdown waits 1 s (its shutdown_timeout) before SIGTERM


class Server(_EndsAfterItsReplies, managers.Server):
    """``multiprocessing.managers.Server`` whose exit waits for the replies being sent."""


class SharedMemoryServer(_EndsAfterItsReplies, managers.SharedMemoryServer):
    """``multiprocessing.managers.SharedMemoryServer`` whose exit waits for the replies being sent."""


SERIALIZER = _Serializer("nbmp")
_table: Any = managers.listener_client  # type: ignore[attr-defined]  # typeshed omits this runtime name
_table[SERIALIZER] = (_ServerListener, _proxy_client)


def _nbmp_serializer() -> _Serializer:
    return SERIALIZER


class StartsFromNbmp:
    """What nbmp's managers add to the standard ones (a mixin placed before them): the
    serializer ``"nbmp"`` by default, a server started as a worker from nbmp's context,
    and no server left behind by an interrupted start or shutdown."""

    def __init__(self, address: Any = None, authkey: Optional[bytes] = None,
                 serializer: str = SERIALIZER, ctx: Any = None, **kwargs: Any) -> None:
        _checks.manager(type(self).__name__, address, authkey, serializer, _table)
        super().__init__(address, authkey, serializer,  # type: ignore[call-arg]  # a mixin: next in the MRO is a manager, not object
                         ctx=context.workers_context(ctx), **kwargs)

    def start(self, initializer: Any = None, initargs: Any = ()) -> None:
        """Start the server process (the standard ``start``). An interrupt (or any error)
        before the server has said where it listens stops the server this call started:
        the standard one would run on, unreachable, and the program's exit would wait for
        it forever."""
        before = getattr(self, "_process", None)
        try:
            super().start(initializer, initargs)  # type: ignore[misc]  # a mixin: next in the MRO is a manager
        except BaseException:
            started = getattr(self, "_process", None)
            if started is not None and started is not before:
                _stop(started)
            raise

    @staticmethod
    @interrupts.step
    def _finalize_manager(*args: Any, **kwargs: Any) -> None:
        # What ``shutdown()`` runs, once: an interrupt is deferred until the server has ended, or nothing would be left to stop it.
        managers.BaseManager._finalize_manager(*args, **kwargs)  # type: ignore[attr-defined]  # stdlib private


@interrupts.step
def _stop(process: Any) -> None:
    if process.pid is None:  # never started
        return
    process.terminate()  # SIGTERM: the server ignores SIGINT
    process.join(5)
    if process.exitcode is None:
        process.kill()
        process.join()
