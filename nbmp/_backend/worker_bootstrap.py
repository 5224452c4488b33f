"""A forked worker's whole life: the standard ``BaseProcess._bootstrap``'s protocol, each
step done only where it has something to do, with what the parent made for it.

Every page a fresh fork writes is a copy-on-write fault, and each Python function it runs
for the first time, each object it makes, writes a few. The standard bootstrap and launch
cost a worker such faults before and after its target, most for steps that find nothing to do there (an
empty finalizer registry cleared, the threads of a process that has one joined, a pipe
pair per child for a sentinel that a pidfd gives) or that make again in every child what
the parent could make once (its ``parent_process()`` record, the sorted list of after-fork
hooks). nbmp's workers -- ``spawn``'s and a Pool's, which nbmp starts itself, by fork --
run :func:`run_forked` instead, one function from the fork to the exit code. The outcome
is the standard bootstrap's: stdin reads from /dev/null, ``current_process()`` and
``parent_process()`` are the worker's, its own children are counted from 1, the standard
after-fork hooks and finalizers run, an exit code of 0, 1 or the ``SystemExit``'s, the
traceback of an uncaught exception on stderr, threads joined and std streams flushed
before the exit.

Example (what ``nbmp._backend.popen_fork`` does)::

    >>> prepare()                       # in the parent, before its round of forks
    >>> code = run_forked(process_obj, None, stdin)   # in each forked worker
    >>> os._exit(code)
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import weakref
from multiprocessing import context, process, util
from typing import Any, Callable, List, NamedTuple, Optional, TextIO, Tuple

__all__ = ["prepare", "run_forked", "after_fork"]


class _ForChildren(NamedTuple):
    """What a parent makes once for the workers of a round of forks (kept until its next round:
    after the forks, each object it drops is a page written, copied once per child)."""

    pid: int  # the parent's
    parent: Any  # a multiprocessing.process._ParentProcess: this process as its children see it
    # The standard after-fork hooks, in order, each with a weak reference to its object (as the
    # registry holds it: nothing is kept alive for the children's sake); None: not listed (the
    # children run the standard _run_after_forkers).
    after_forkers: Optional[List[Tuple[Callable[[Any], object], "weakref.ref[Any]"]]]


_made: Optional[_ForChildren] = None
_self_pidfd: Optional[Tuple[int, int]] = None  # (pid, a pidfd of that process), kept open for its children


def _own_pidfd() -> Optional[int]:
    """A pidfd of this process, which its children inherit as their parent sentinel (readable
    once this process has ended). One per process, open for its life; None without pidfds."""
    global _self_pidfd
    pid = os.getpid()
    if _self_pidfd is None or _self_pidfd[0] != pid:
        try:
            _self_pidfd = (pid, os.pidfd_open(pid))
        except (AttributeError, OSError):
            return None
    return _self_pidfd[1]


def prepare() -> None:
    """In the parent, just before a round of forks: this process's ``parent_process()``
    record for its workers, and the standard after-fork hooks, sorted (what each child's
    ``_run_after_forkers`` would otherwise list and sort through a weak dictionary)."""
    global _made
    sentinel = _own_pidfd()
    hooks: Optional[List[Tuple[Callable[[Any], object], "weakref.ref[Any]"]]]
    try:
        hooks = [(key[2], weakref.ref(obj)) for key, obj in sorted(util._afterfork_registry.items())]  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
    except RuntimeError:  # another thread registered one meanwhile ("changed size during iteration")
        hooks = None
    parent = None if sentinel is None else \
        process._ParentProcess(process.current_process().name, os.getpid(), sentinel)  # type: ignore[attr-defined]  # as above
    _made = _ForChildren(os.getpid(), parent, hooks)


def run_forked(proc: Any, hidden: Any, stdin: Optional[TextIO]) -> int:
    """The life of the forked worker ``proc`` (an nbmp process object whose ``launch`` says
    it is a worker) from the fork to its exit code, as the standard ``_bootstrap`` gives it.

    ``hidden``: the parent's ``warnings.catch_warnings`` that hid the interpreter's fork
    warning, left here (None if none); ``stdin``: a /dev/null reader the parent opened, or None."""
    if hidden is not None:
        hidden.__exit__(None, None, None)  # the child's warning filters are the parent's again
    made = _made if _made is not None and _made.pid == proc._parent_pid else None
    if sys.stdin is not None:  # as the standard bootstrap: the inherited one closed, /dev/null in its place
        if stdin is None:
            util._close_stdin()  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        else:
            try:
                sys.stdin.close()
            except (OSError, ValueError):
                pass
            sys.stdin = stdin
    proc._start_worker(forked=True)  # SIGINT ignored, death with the parent, nbmp's fork-safety resets
    try:
        if proc._start_method is not None:
            context._force_start_method(proc._start_method)
        process._process_counter = itertools.count(1)  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        process._children = set()  # type: ignore[attr-defined]  # as above
        previous = process._current_process  # type: ignore[attr-defined]  # as above
        process._current_process = proc  # type: ignore[attr-defined]  # as above
        parent = made.parent if made is not None else None
        if parent is None or parent._name != proc._parent_name:
            parent = process._ParentProcess(proc._parent_name, proc._parent_pid, os.pidfd_open(proc._parent_pid))  # type: ignore[attr-defined]  # as above
        process._parent_process = parent  # type: ignore[attr-defined]  # as above
        if threading._HAVE_THREAD_NATIVE_ID:  # type: ignore[attr-defined]  # as above
            threading.main_thread()._set_native_id()  # type: ignore[attr-defined]  # as above
        try:
            proc._after_fork()  # the standard after-fork hooks (see after_fork below)
        finally:
            del previous  # its finalizers, if any, after those hooks: the standard order
        try:
            proc.run()
            code = 0
        finally:
            # The standard exit function's work: finalizers, and the children it made.
            if util._finalizer_registry or process._children or util._logger is not None:  # type: ignore[attr-defined]  # as above
                util._exit_function()  # type: ignore[attr-defined]  # as above
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
    """``BaseProcess._after_fork``'s work in a child nbmp forked, skipping an empty registry;
    the after-fork hooks are those its parent listed just before the fork (:func:`prepare`)."""
    if util._finalizer_registry:  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
        util._finalizer_registry.clear()  # type: ignore[attr-defined]  # the parent's finalizers are not ours
    made = _made
    if made is None or made.after_forkers is None or made.pid != os.getppid():
        if util._afterfork_registry:  # type: ignore[attr-defined]  # as above
            util._run_after_forkers()  # type: ignore[attr-defined]  # as above
        return
    for hook, ref in made.after_forkers:
        obj = ref()
        if obj is None:  # gone since the parent listed it: the registry has dropped it too
            continue
        try:
            hook(obj)
        except Exception as e:  # as the standard _run_after_forkers
            util.info("after forker raised exception %s", e)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    sys.stderr.write(str(e.code) + "\n")
    return 1
