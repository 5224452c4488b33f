"""The Pool's result pipe, read frame by frame, so that a frame its writer never finished is noticed.

The stdlib's ``Connection`` blocks for the rest of a frame that a killed worker left short, and
would read what follows as its rest. Here the watcher keeps the result lock taken and hands the
death's notice over (:meth:`FrameReader.hand_over`); at the next empty pipe, at a frame's start the
notice is returned as the next message, inside one :class:`StreamCut` is raised (docs/pool.md), and
the lock is given back. Reads wait in ``poll`` (pipe and wake-up pipe) and take small messages many
at a time.
"""

from __future__ import annotations

import os
import select
import struct
import threading
import weakref
from typing import Any, Callable, Optional

from .._backend import pickling as _pickling, posix as _posix
from .._backend.posix import WakeUp

__all__ = ["FrameReader", "StreamCut"]

_LENGTH = struct.Struct("!i")  # the stdlib's frame header; -1: a 64-bit length follows
_LONG_LENGTH = struct.Struct("!Q")
_CHUNK = 1 << 16  # bytes read at once for small messages
_SMALL = 1 << 12  # a message up to this size is read through the buffer


class StreamCut(Exception):
    """A frame that can never end: its writer died in the middle of it."""

    def __init__(self, notice: Any) -> None:
        super().__init__("a worker died in the middle of writing a result")
        self.notice = notice  # the death's


class _Settled(Exception):
    """Raised inside :meth:`FrameReader.recv` to return a handed-over notice as its message."""

    def __init__(self, notice: Any) -> None:
        super().__init__()
        self.notice = notice


class FrameReader:
    """Reads the frames of one connection (the Pool's result queue); see the module's docstring."""

    def __init__(self, conn: Any, release: Callable[[], None]) -> None:
        self.conn = conn  # keeps its descriptor open
        self._poll_pipe = conn.poll
        self._fd = conn.fileno()
        self._release = release  # gives back the result lock the watcher kept for a death
        self._pending: Optional[Any] = None
        self._gone = False  # see writers_gone
        self.cut = False  # a frame was cut: what follows has no framing, and is only drained (as bytes)
        self._buf = bytearray()  # read, not yet taken: from _pos on
        self._reading = threading.Lock()
        self._pos = 0
        self._wakeup = WakeUp()
        weakref.finalize(self, self._wakeup.close)
        self._readable = select.poll()
        self._readable.register(self._fd, select.POLLIN)
        self._waiting = select.poll()
        self._waiting.register(self._fd, select.POLLIN)
        self._waiting.register(self._wakeup, select.POLLIN)

    def poll(self, timeout: Optional[float] = 0.0) -> bool:
        """Whether a message can be read: bytes buffered here, or in the pipe (``Connection.poll``)."""
        return len(self._buf) > self._pos or self._poll_pipe(timeout)

    def discard(self) -> None:
        """Throw away what is buffered and queued, as bytes (after a short frame nothing reads as messages)."""
        with self._reading:
            self._buf, self._pos = bytearray(), 0
            while _posix.read_nowait(self._fd, 1 << 20):  # a cut stream's drain may read too: never block
                pass

    def hand_over(self, notice: Any) -> None:
        """A worker died holding the result lock, writing (the lock stays taken): settle its
        ``notice`` once the pipe is empty (called by the watcher thread)."""
        self._pending = notice
        self._wakeup.set()  # a reader waiting in _wait looks at _pending again

    def writers_gone(self) -> None:
        """Every worker is dead (the Pool was terminated): once the pipe is empty, ``recv``
        raises EOFError, inside a frame or not (a frame a killed worker left short never ends)."""
        self._gone = True
        self._wakeup.set()

    def recv(self) -> Any:
        """The next message, or a handed-over notice; raises :class:`StreamCut` (see the module).
        One thread at a time (after the result thread, a closed or terminated Pool's pipe may
        be read on by two)."""
        with self._reading:
            if self.cut:  # never read a cut stream again: its framing asks for gigabytes
                raise StreamCut(None)
            try:
                size, = _LENGTH.unpack(self._take(4, inside=False))
                if size == -1:
                    size, = _LONG_LENGTH.unpack(self._take(8, inside=True))
                data = self._take(size, inside=True)
            except _Settled as settled:
                return settled.notice
        return _pickling.loads_whole(data)

    def _take(self, n: int, inside: bool) -> bytearray:
        """The next ``n`` bytes of the stream: small reads buffered, the rest of a bigger message read
        straight into its own buffer (buffered, it would be copied once per piece)."""
        if n <= _SMALL:
            while len(self._buf) - self._pos < n:
                self._fill(inside or len(self._buf) > self._pos)
        if len(self._buf) - self._pos >= n:
            buf, pos = self._buf, self._pos
            end = pos + n
            if end < len(buf):
                self._pos = end
                return buf[pos:end]
            if pos:
                data = buf[pos:]
                buf.clear()
            else:  # the whole buffer: hand it over
                data, self._buf = buf, bytearray()
            self._pos = 0
            return data
        data = bytearray(n)
        view = memoryview(data)
        got = len(self._buf) - self._pos
        view[:got] = self._buf[self._pos:]
        self._buf.clear()
        self._pos = 0
        while got < n:
            self._wait(True)
            k = os.readv(self._fd, [view[got:]])
            if k == 0:
                raise OSError("got end of file during message")
            got += k
        view.release()
        return data

    def _fill(self, inside: bool) -> None:
        """Read what is queued (at most _CHUNK bytes) onto the buffer, waiting for some first."""
        self._wait(inside)
        chunk = os.read(self._fd, _CHUNK)
        if not chunk:
            if inside:
                raise OSError("got end of file during message")
            raise EOFError
        if self._pos:  # keep the buffer small: drop what was taken
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += chunk

    def _wait(self, inside: bool) -> None:
        """Return once there is something to read; first settle a handed-over death if the
        pipe is empty (nobody writes meanwhile: the watcher holds the lock)."""
        while True:
            notice = self._pending
            if self._gone and notice is None and not self._readable.poll(0):
                raise EOFError  # the stdlib's result thread ends on it
            if notice is not None and not self._readable.poll(0):
                self._pending = None
                self._release()
                if inside:
                    self.cut = True
                    raise StreamCut(notice)
                raise _Settled(notice)
            for fd, _ in self._waiting.poll():
                if fd == self._fd:
                    return
                self._wakeup.clear()
