"""SIGINT in nbmp: one model for Ctrl-C and the notebook's interrupt button.

* **Steps.** A function decorated with :func:`step` must finish once begun (a message read
  whole, a reference taken together with the note that gives it back). In the main thread,
  a first SIGINT during a step is recorded and raised when the outermost step returns; a
  second one is raised at once, and the step's own ``except`` closes what it must. Other
  threads never get a KeyboardInterrupt: there a step is a plain call.
* **The handler.** The outermost step swaps the process's SIGINT handler for a recorder
  and puts back exactly what it found: the Python handler, and the OS disposition beside it
  (a handler a JVM, R or a C extension set, which ``signal.getsignal`` does not show).
  Nesting is a flag, never read from the handler installed, and the undo runs in the
  wrapper's own ``finally``, where Python checks for signals only inside the calls it makes:
  a handler of the program's that raises at any bytecode (a SIGALRM timeout) cannot leave
  the recorder behind. Rejected: a context manager, whose ``__exit__`` is a new frame that
  such an exception can cut before its first line; a recorder installed for good with a
  flag it consults (trio's KI protection), the handler ``signal.getsignal`` would show
  between calls.
* **Workers** ignore SIGINT through a Python handler, which ``exec`` resets (:func:`for_worker`).
"""

from __future__ import annotations

import functools
import os
import _signal  # type: ignore[import-not-found]  # the C module under signal.py: its calls skip the enum wrapping
import signal
import threading
import _thread
import time
from types import FrameType
from typing import Any, Callable, Optional, TypeVar, cast

from . import posix as _posix

__all__ = ["step", "held", "pending", "escape", "resend", "blocked", "for_worker", "allow"]

_SIGINT = int(signal.SIGINT)
F = TypeVar("F", bound=Callable[..., Any])

# The state of the main thread's steps (only the main thread runs signal handlers).
_main = threading.main_thread().ident  # a fork child's is the thread that forked (see _forget)
_active = False            # a step runs
_installed = False         # the recorder is (or may be) the SIGINT handler
_previous: Any = None      # the Python handler it replaced
_pending = 0               # interrupts recorded since
_disposition: Any = False  # the OS disposition found: a struct sigaction (None: no libc; False: not looked up)
_sigaction: Any = None
_handler: Any = None       # its handler field
_own: Any = None           # the OS handler Python installs for a Python handler (learnt at the first swap)
_foreign = False           # the disposition found is not what putting the Python handler back gives


def step(fn: F) -> F:
    """``fn`` as a step: an interrupt of the main thread meanwhile is raised when it returns
    (a second one at once).

    Example::

        @step
        def send_whole(conn, data):
            conn.send_bytes(data)   # whole, or not at all
    """
    return _stepping(fn, later=False)


def held(fn: F) -> F:
    """``fn`` as a step of a finalizer, where Python prints and drops an exception: an
    interrupt meanwhile is sent to the main thread again a few milliseconds after it, from a
    helper thread, so that it is raised in the program's code once the finalizer has returned."""
    return _stepping(fn, later=True)


def _stepping(fn: F, later: bool) -> F:
    def stepped(*args: Any, **kwargs: Any) -> Any:
        global _active, _installed, _pending
        if _active or _thread.get_ident() != _main:
            return fn(*args, **kwargs)
        try:
            _active = True
            _install()
            return fn(*args, **kwargs)
        finally:  # only C calls from here on: no new frame that an exception could cut first
            _active = False
            try:
                if _installed:
                    try:
                        _signal.signal(_SIGINT, _previous)
                    except BaseException:  # a pending handler of the program's ran first and raised
                        _signal.signal(_SIGINT, _previous)
                        raise
                    finally:
                        if _foreign:
                            _sigaction(_SIGINT, _disposition, None)
                        _installed = False
            finally:
                if _pending:
                    _pending = 0
                    if later:
                        resend()
                    else:
                        _signal.raise_signal(_SIGINT)
    return cast(F, functools.wraps(fn)(stepped))


def _record(signum: int, frame: Optional[FrameType]) -> None:
    """The SIGINT handler while a step runs."""
    global _pending
    _pending += 1
    if _pending > 1:
        escape()


def pending() -> bool:
    """Whether an interrupt waits for the end of the step that runs."""
    return _pending > 0


def escape() -> None:
    """Raise the interrupt that waits now, through the program's own handler, as a second one
    does: for a step that cannot finish (a message nobody reads); it closes what it must."""
    global _pending
    _pending = 0
    _release()
    _signal.raise_signal(_SIGINT)


def _install() -> None:
    global _installed, _previous, _foreign, _own
    if _installed:  # left by a step whose undo two exceptions in a row cut: what it saved stays
        return
    previous = _signal.getsignal(_SIGINT)
    # None: set from C before Python started, which Python cannot put back; ignored: nothing to hold.
    if previous is None or previous is _ignore or previous is _signal.SIG_IGN:
        return
    if _disposition is False:
        _look_up_sigaction()
    if _disposition is not None:
        _sigaction(_SIGINT, None, _disposition)
        _foreign = _own is None or _handler.value != (None if previous is _signal.SIG_DFL else _own)
    _previous = previous
    _installed = True  # before the swap: an exception at its return still finds it undone
    _signal.signal(_SIGINT, _record)
    if _own is None and _disposition is not None:
        _own = _os_handler()


def _release() -> None:
    """Put back the handler and the disposition the outermost step found."""
    global _installed
    if _installed:
        _signal.signal(_SIGINT, _previous)
        if _foreign:
            _sigaction(_SIGINT, _disposition, None)
        _installed = False


def _look_up_sigaction() -> None:
    global _disposition, _sigaction, _handler
    libc = _posix.load_libc()
    if libc is None:
        _disposition = None
        return
    _sigaction = libc.sigaction
    _disposition, _handler = _struct_sigaction()


def _struct_sigaction() -> Any:
    import ctypes  # lazily, as posix's: ``import nbmp`` stays cheap
    buffer = ctypes.create_string_buffer(256)  # more than any libc's struct sigaction
    return buffer, ctypes.c_void_p.from_buffer(buffer)  # its first field: the handler, in every libc


def _os_handler() -> Any:
    buffer, handler = _struct_sigaction()
    _sigaction(_SIGINT, None, buffer)
    return handler.value


def resend() -> None:
    """Send SIGINT to the main thread again a few milliseconds from now, from a helper thread:
    for an interrupt caught where it cannot be raised (a finalizer), so that it is raised in
    the program's code once the finalizer has returned."""
    try:
        threading.Thread(target=_resend_sigint, args=(threading.main_thread().ident,),
                         name="nbmp-interrupt", daemon=True).start()
    except RuntimeError:  # the interpreter is shutting down: nobody is left to interrupt
        pass


def _resend_sigint(thread_id: int) -> None:
    time.sleep(0.005)  # let the finalizer that held it return first
    signal.pthread_kill(thread_id, signal.SIGINT)


def _forget() -> None:
    """In a child forked during a step (from any thread): the step is the parent's."""
    global _active, _pending, _main
    _active, _pending, _main = False, 0, _thread.get_ident()
    _release()


def _ignore(signum: int, frame: Optional[FrameType]) -> None:
    """A worker's SIGINT handler: the parent stops its workers itself."""


def for_worker() -> None:
    """In a worker: ignore SIGINT, then unblock it (a pending one is dropped).

    The notebook's interrupt button and a terminal's Ctrl-C signal the whole process group;
    the parent stops the workers itself, so a worker must not die with a KeyboardInterrupt
    traceback of its own. A Python handler, not SIG_IGN, so that programs the worker
    ``exec``\\ s get the default disposition and end with the interrupt. Through ``_signal``:
    the wrapper's enum conversions touch pages a fresh fork shares with its parent (each
    first write a copy-on-write fault).
    """
    try:
        _signal.signal(_SIGINT, _ignore)
    except ValueError:  # not the main thread: nothing to change
        return
    _signal.siginterrupt(_SIGINT, False)  # system calls go on, as under SIG_IGN (C code need not expect EINTR)
    allow()


class blocked:
    """Block SIGINT in the calling thread while workers are started.

    A child inherits its creator's signal mask (across fork and exec), so a SIGINT
    sent to the process group while a worker starts up stays pending in the worker
    until it has set its own handler, instead of printing a KeyboardInterrupt
    traceback from the middle of its bootstrap. The parent's own interrupt is only
    delayed: it is delivered on leaving the block. A class calling ``_signal``, not a
    generator calling ``signal`` (whose enum conversions touch many objects): it runs
    between two forks of a round, where each page written is copied once per child.
    """

    __slots__ = ("previous",)

    def __enter__(self) -> None:
        self.previous = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_SIGINT,)) if _HAS_SIGMASK else None

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, self.previous)


_HAS_SIGMASK = hasattr(_signal, "pthread_sigmask")


def allow() -> None:
    """Unblock SIGINT in this thread (a child that inherited a blocked mask it should not keep)."""
    if _HAS_SIGMASK:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, (_SIGINT,))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
