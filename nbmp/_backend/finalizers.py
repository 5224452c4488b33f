"""Cleanup that runs when an object dies, and that an interrupt cannot skip.

A KeyboardInterrupt in a weakref callback is printed and dropped by Python, and one in its first
steps, before ``interrupts.held`` applies, would skip the cleanup. Such an interrupt reaches
``sys.unraisablehook``: nbmp's hook (installed at the first registration, passing everything else
on) runs every cleanup whose object is dead, once each, and sends the interrupt to the main thread
again. Like ``finalize(...).atexit = False``, nothing runs once the interpreter exits.
"""

from __future__ import annotations

import atexit
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Tuple

from . import interrupts as _interrupts

__all__ = ["on_death"]

_Entry = Tuple["weakref.ref[Any]", Callable[..., None], Tuple[Any, ...]]
_entries: Dict[int, _Entry] = {}
_exiting: List[bool] = [False]
_hook_lock = threading.Lock()
_previous_hook: List[Callable[[Any], Any]] = []


def on_death(obj: Any, func: Callable[..., None], *args: Any) -> None:
    """Call ``func(*args)`` once ``obj`` is garbage, with interrupts held while it runs.

    Example::

        on_death(buffer, release_segment, name)
    """
    if not _previous_hook:
        _install_hook()
    ref = weakref.ref(obj, _died)
    _entries[id(ref)] = (ref, func, args)


def _died(ref: "weakref.ref[Any]", _exiting: List[bool] = _exiting) -> None:
    # Bound as a default: module globals may already be None while the interpreter exits.
    if _exiting[0]:
        return
    _run(id(ref))


@_interrupts.held
def _run(key: int) -> None:
    entry = _entries.pop(key, None)  # atomic: a sweep in another thread cannot run it twice
    if entry is not None:
        entry[1](*entry[2])


@_interrupts.held
def _sweep() -> None:
    """Run the cleanups of the objects that died without theirs (an interrupt skipped it)."""
    for key, (ref, _, _) in list(_entries.items()):
        if ref() is None:
            _run(key)


def _unraisable(unraisable: Any) -> None:
    if _from_died(unraisable) and issubclass(unraisable.exc_type, KeyboardInterrupt) and not _exiting[0]:
        _sweep()
        _interrupts.resend()
        return
    _previous_hook[0](unraisable)


def _from_died(unraisable: Any) -> bool:
    # Up to 3.13 a weakref callback's error names the callback as its object; from 3.14 the
    # object is None and the callback is named in the message ("... weakref callback <function ...>").
    return unraisable.object is _died or (unraisable.object is None and repr(_died) in (unraisable.err_msg or ""))


def _install_hook() -> None:
    with _hook_lock:
        if not _previous_hook:
            _previous_hook.append(sys.unraisablehook)
            sys.unraisablehook = _unraisable


@atexit.register
def _at_exit() -> None:
    _exiting[0] = True
