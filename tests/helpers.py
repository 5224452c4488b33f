"""Helpers shared by tests: running code as ``__main__`` in a fresh interpreter, waiting for a
condition, reading a notebook's stream output as JupyterLab shows it."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import textwrap
import time
import warnings
from typing import Callable, Iterator

TIMEOUT = 60


def run_main(source: str, timeout: float = TIMEOUT) -> str:
    """Run ``source`` as the ``__main__`` script of a fresh interpreter; return its stdout.

    Functions defined there live in ``__main__``, like a notebook cell's: the case
    where plain pickling fails under spawn and forkserver. Fails on a non-zero exit.
    """
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as timed_out:  # show what it printed before it was killed
        raise AssertionError(f"no exit after {timeout} s\nstdout:\n{_text(timed_out.stdout)}\n"
                             f"stderr:\n{_text(timed_out.stderr)}") from None
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def _text(output: "str | bytes | None") -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    """Wait (collecting garbage) until ``condition()`` is true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        gc.collect()
        time.sleep(0.02)


def as_jupyterlab_shows(text: str) -> "list[str]":
    """The non-blank lines a notebook stream output holding ``text`` shows in JupyterLab 4:
    a carriage return sends the cursor back to the line's start, text overwrites from the
    cursor, a newline is appended at the end."""
    shown, cursor = "", 0
    for char in text:
        if char == "\r":
            while cursor > 0 and shown[cursor - 1] != "\n":
                cursor -= 1
        elif char == "\n":
            shown += "\n"
            cursor = len(shown)
        else:
            shown = shown[:cursor] + char + shown[cursor + 1:]
            cursor += 1
    return [line.rstrip() for line in shown.split("\n") if line.strip()]


@contextlib.contextmanager
def forking_beside_the_watchdog() -> Iterator[None]:
    """Around a fork the test makes itself (``os.fork``, the standard module's fork): from 3.15
    the interpreter warns that the process is multi-threaded when faulthandler's watchdog thread
    runs (pytest's ``faulthandler_timeout`` starts it for every test), a thread that holds nothing
    a child could need; up to 3.14 it did not count that thread. nbmp's own forks stay unwrapped."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"This process \(pid=\d+\) is multi-threaded", DeprecationWarning)
        yield


# System call numbers of the calls a sandbox's policy names (x86_64, aarch64).
_SYSCALLS = {
    "x86_64": {"memfd_create": 319, "sched_setscheduler": 144, "sched_setattr": 314, "sched_setaffinity": 203,
               "setpriority": 141, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "ioprio_set": 251, "fallocate": 285,
               "socket": 41, "socketpair": 53, "clone": 56},
    "aarch64": {"memfd_create": 279, "sched_setscheduler": 119, "sched_setattr": 274, "sched_setaffinity": 122,
                "setpriority": 140, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "ioprio_set": 30, "fallocate": 47,
                "socket": 198, "socketpair": 199, "clone": 220},
}


def sandboxed(source: str, refused: "list[str]", kill: bool, error: int = 1) -> str:
    """``source`` preceded by a seccomp filter, installed through ctypes as a sandbox (a hardened
    systemd unit's ``SystemCallFilter``) would: the ``refused`` calls fail with ``error`` (EPERM), or,
    with ``kill``, end the process that makes them (SIGSYS). The filter holds in every child too."""
    import platform
    numbers = [_SYSCALLS[platform.machine()][name] for name in refused]
    prelude = f"""
        import ctypes
        def _sandbox():
            class Filter(ctypes.Structure):
                _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]
            class Program(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
            action = {0x80000000 if kill else 0x00050000 | error}  # SECCOMP_RET_KILL_PROCESS, or SECCOMP_RET_ERRNO | error
            steps = [Filter(0x20, 0, 0, 0)]  # load the system call's number
            for number in {numbers!r}:
                steps += [Filter(0x15, 0, 1, number), Filter(0x06, 0, 0, action)]  # equal: refuse
            steps.append(Filter(0x06, 0, 0, 0x7FFF0000))  # SECCOMP_RET_ALLOW
            program = Program(len(steps), (Filter * len(steps))(*steps))
            libc = ctypes.CDLL(None, use_errno=True)
            assert libc.prctl(38, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS"
            assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0, "PR_SET_SECCOMP"
        _sandbox()
    """
    return textwrap.dedent(prelude) + textwrap.dedent(source)
