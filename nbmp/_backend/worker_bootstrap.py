"""A forked worker's bootstrap: the standard ``BaseProcess._bootstrap``'s protocol, each
step done only where it has something to do.

Every page a fresh fork writes is a copy-on-write fault (~2.4 µs on the machines
docs/benchmarks.md names); the standard bootstrap and launch cost a worker ~170 of them
before and after its target, most for steps that find nothing to do there (an empty
finalizer registry cleared, the threads of a process that has one joined, a pipe pair per
child for a sentinel that a pidfd gives). nbmp's workers -- ``spawn``'s and a Pool's, which nbmp starts itself, by fork --
run this instead. The outcome is the standard bootstrap's: ``current_process()`` and
``parent_process()`` are the worker's, its own children are counted from 1, the
standard after-fork hooks and finalizers run, an exit code of 0, 1 or the
``SystemExit``'s, the traceback of an uncaught exception on stderr, threads joined and
std streams flushed before the exit.

Example (what ``nbmp._backend.popen_fork`` does in the child)::

    >>> code = bootstrap(process_obj, parent_sentinel)
    >>> os._exit(code)
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from multiprocessing import context, process, util
from typing import Any, Optional

__all__ = ["bootstrap", "parent_sentinel"]


def parent_sentinel(parent_pid: int) -> int:
    """In the worker: a descriptor that becomes readable when ``parent_pid`` ends (a pidfd;
    the standard launch makes a pipe pair per child for it instead)."""
    return os.pidfd_open(parent_pid)


def bootstrap(proc: Any, sentinel: Optional[int]) -> int:
    """Run the forked process object ``proc`` (a ``multiprocessing.process.BaseProcess``)
    and return its exit code, as the standard ``_bootstrap`` would."""
    try:
        if proc._start_method is not None:
            context._force_start_method(proc._start_method)
        process._process_counter = itertools.count(1)  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        process._children = set()  # type: ignore[attr-defined]  # as above
        previous = process._current_process  # type: ignore[attr-defined]  # as above
        process._current_process = proc  # type: ignore[attr-defined]  # as above
        process._parent_process = process._ParentProcess(proc._parent_name, proc._parent_pid, sentinel)  # type: ignore[attr-defined]  # as above
        if threading._HAVE_THREAD_NATIVE_ID:  # type: ignore[attr-defined]  # as above
            threading.main_thread()._set_native_id()  # type: ignore[attr-defined]  # as above
        try:
            proc._after_fork()  # the standard after-fork hooks (see _after_fork below)
        finally:
            del previous  # its finalizers, if any, after those hooks: the standard order
        try:
            proc.run()
            code = 0
        finally:
            util._exit_function()  # type: ignore[attr-defined]  # stdlib private: finalizers, children
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        code = 1
        import traceback
        sys.stderr.write(f"Process {proc.name}:\n")
        traceback.print_exc()
    finally:
        if threading.active_count() > 1:  # only the main thread: nothing to join, no hook to call
            threading._shutdown()  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        util._flush_std_streams()  # type: ignore[attr-defined]  # as above
    return code


def after_fork() -> None:
    """``BaseProcess._after_fork``'s work, skipping an empty registry."""
    if util._finalizer_registry:  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        util._finalizer_registry.clear()  # type: ignore[attr-defined]  # the parent's finalizers are not ours
    if util._afterfork_registry:  # type: ignore[attr-defined]  # as above
        util._run_after_forkers()  # type: ignore[attr-defined]  # as above


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    sys.stderr.write(str(e.code) + "\n")
    return 1
