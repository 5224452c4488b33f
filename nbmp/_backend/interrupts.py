"""SIGINT in nbmp: one model for Ctrl-C and the notebook's interrupt button.

Steps and handlers as docs/reliability.md ("The interrupt model") describes them; in other
threads a step is a plain call. Nesting is a flag, never read from the handler installed, and the
undo runs in the wrapper's own ``finally``, where a program's handler that raises at any bytecode
(a SIGALRM timeout) cannot leave the recorder behind. Rejected: a context manager (its ``__exit__``
is a new frame such an exception can cut before its first line) and a recorder installed for good
(trio's KI protection: ``signal.getsignal`` would show it between calls).
"""

from __future__ import annotations

import contextlib
import functools
import os
import _signal  # type: ignore[import-not-found]  # the C module under signal.py: its calls skip the enum wrapping
import signal
import threading
import _thread
import time
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, TypeVar, cast

from . import posix as _posix

__all__ = ["step", "shielded", "held", "program_handler", "pending", "escape", "resend", "blocked", "for_worker", "default_termination", "allow"]

_SIGINT, _SIGTERM = int(signal.SIGINT), int(signal.SIGTERM)
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
_OTHERS = tuple(int(s) for s in signal.valid_signals() if s not in (signal.SIGINT, signal.SIGKILL, signal.SIGSTOP))
_held: Dict[int, Any] = {}  # in a shielded step: the other signals' Python handlers it replaced
_arrived: List[int] = []    # and those signals that came meanwhile


def step(fn: F) -> F:
    """``fn`` as a step: an interrupt of the main thread meanwhile is raised when it returns
    (a second one at once).

    Example::

        @step
        def send_whole(conn, data):
            conn.send_bytes(data)   # whole, or not at all
    """
    return _stepping(fn, later=False)


def shielded(fn: F) -> F:
    """A step holding every signal with a Python handler: for starting processes, never to wait (a timeout would not fire)."""
    return _stepping(fn, later=False, others=True)


def held(fn: F) -> F:
    """``fn`` as a step of a finalizer, where Python prints and drops an exception: an interrupt
    meanwhile is sent again (:func:`resend`) to be raised once the finalizer has returned."""
    return _stepping(fn, later=True)


def _stepping(fn: F, later: bool, others: bool = False) -> F:
    def stepped(*args: Any, **kwargs: Any) -> Any:
        global _active, _installed, _pending
        if _active or _thread.get_ident() != _main:
            return fn(*args, **kwargs)
        try:
            _active = True
            _install()
            if others:
                _hold_others()
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
                try:
                    if _held or _arrived:
                        _release_others()
                finally:  # a pending interrupt is raised even when a program's handler raised just before
                    if _pending:
                        _pending = 0
                        if later:
                            resend()
                        else:
                            _signal.raise_signal(_SIGINT)
    return cast(F, functools.wraps(fn)(stepped))


def _hold_others() -> None:
    for signum in _OTHERS:
        if callable(handler := _signal.getsignal(signum)) and handler is not _record_other:
            _held[signum] = handler  # before the swap: an exception at its return still finds it undone
            _signal.signal(signum, _record_other)


def _record_other(signum: int, frame: Optional[FrameType]) -> None:
    _arrived.append(signum)


def program_handler(signum: int) -> Any:
    """The program's Python handler for ``signum``: the one a shielded step holds, while it does."""
    return _held.get(signum, found) if (found := _signal.getsignal(signum)) is _record_other else found


def _release_others() -> None:
    """Put back the handlers (a C loop: a handler a ``signal()`` call runs raises only there), then resend what came."""
    held = _held.copy()  # a program's handler that signal() runs may take a step of its own, which empties _held
    try:
        list(map(_signal.signal, held.keys(), held.values()))
    except BaseException:
        list(map(_signal.signal, held.keys(), held.values()))
        raise
    finally:
        _held.clear()
        arrived = _arrived[:]
        del _arrived[:]  # first: no call between, where a handler could raise
        list(map(functools.partial(_signal.pthread_kill, _thread.get_ident()), arrived))


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
    with contextlib.suppress(RuntimeError):  # the interpreter is shutting down: nobody is left to interrupt
        threading.Thread(target=_resend_sigint, args=(threading.main_thread().ident,), name="nbmp-interrupt", daemon=True).start()


def _resend_sigint(thread_id: int) -> None:
    time.sleep(0.005)  # let the finalizer that held it return first
    signal.pthread_kill(thread_id, signal.SIGINT)


def _forget() -> None:
    """In a child forked during a step (from any thread): the step is the parent's."""
    global _active, _pending, _main
    _active, _pending, _main = False, 0, _thread.get_ident()
    _release()
    if _held or _arrived:  # forked during a shielded step
        _arrived.clear()
        _release_others()


def _ignore(signum: int, frame: Optional[FrameType]) -> None:
    """A worker's SIGINT handler: the parent stops its workers itself."""


def for_worker(first_step: bool = True) -> None:
    """In a worker: ignore SIGINT by a Python handler (a program it ``exec``\\ s gets the default); unblock it (a pending
    one is dropped) and SIGTERM (``sigwait`` users block it: a stop waited for the task); drop the parent's wake-up fd
    (its event loop heard the worker's signals); at a ``first_step``, reset SIGTERM's inherited handler or SIG_IGN
    (coverage's, set later, stays). ``_signal``: ``signal``'s enums write shared pages."""
    try:
        _signal.set_wakeup_fd(-1)
        if first_step:
            _signal.signal(_SIGTERM, _signal.SIG_DFL)
        _signal.signal(_SIGINT, _ignore)
    except ValueError:  # not the main thread: nothing to change
        return
    _signal.siginterrupt(_SIGINT, False)  # system calls go on, as under SIG_IGN (C code need not expect EINTR)
    allow(_SIGTERM)


def default_termination(*inherited: Any) -> None:
    """SIGTERM to its default while its handler is the one ``inherited`` from the parent, in a standard context's worker."""
    if inherited and _signal.getsignal(_SIGTERM) is inherited[0]:
        _signal.signal(_SIGTERM, _signal.SIG_DFL)


class blocked:
    """Block SIGINT in the calling thread while workers are started: a child inherits the mask, so a
    group-wide SIGINT stays pending until it has its own handler (the parent's is only delayed). A
    class calling ``_signal``, not a generator calling ``signal``: each page written between two
    forks of a round is copied once per child."""

    __slots__ = ("previous",)

    def __enter__(self) -> None:
        self.previous = _signal.pthread_sigmask(_signal.SIG_BLOCK, (_SIGINT,)) if _HAS_SIGMASK else None

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, self.previous)


_HAS_SIGMASK = hasattr(_signal, "pthread_sigmask")


def allow(*also: int) -> None:
    """Unblock SIGINT (and ``also``) in this thread (a child that inherited a blocked mask it should not keep)."""
    if _HAS_SIGMASK:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, (_SIGINT, *also))


os.register_at_fork(after_in_child=_forget)
