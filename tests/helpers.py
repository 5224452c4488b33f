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
