"""How a worker process ended, in words: the one place spawn's errors, the Pool's errors
and the dashboard learn what an exit code means and what probably caused it.

The facts are ``WorkerExited``'s (``events``); these functions make the phrases every message uses.
"""

from __future__ import annotations

from typing import Optional

from .util import format_bytes, signal_name

__all__ = ["STOP_REASONS", "exit_signal", "how_it_ended", "likely_cause"]

# Why nbmp itself ended a worker (``WorkerExited.stopped``); "" means it ended on its own.
STOP_REASONS = {
    "failure": "stopped by nbmp because another worker of the run failed",
    "stop": "stopped by the dashboard's Stop button",
    "interrupt": "stopped by nbmp after an interrupt (KeyboardInterrupt in the caller)",
    "close": "stopped by nbmp when the run or Pool was terminated",
}

_SIGNAL_CAUSES = {
    "SIGKILL": "often the out-of-memory killer (see `dmesg` or `journalctl -k`), or `kill -9`",
    "SIGSEGV": "a segmentation fault in native code (a C extension, ctypes, or a library that is "
               "not fork-safe: try start_method='spawn')",
    "SIGBUS": "a bus error, often /dev/shm or a memory-mapped file running out of space",
    "SIGABRT": "abort() in native code (a failed C-level assertion, a double free)",
    "SIGFPE": "an arithmetic fault in native code",
    "SIGILL": "an illegal instruction (native code built for another CPU)",
    "SIGTERM": "terminated by another process (a job scheduler, `kill`)",
    "SIGINT": "an interrupt sent to the worker itself (nbmp's workers ignore the notebook's interrupt)",
    "SIGHUP": "its terminal or session went away",
}


def exit_signal(exitcode: Optional[int]) -> Optional[str]:
    """The signal's name for a negative exit code (``-9`` -> ``"SIGKILL"``), else None."""
    return None if exitcode is None or exitcode >= 0 else signal_name(-exitcode)


def how_it_ended(exitcode: int) -> str:
    """``"was killed by SIGKILL"`` or ``"exited with code 3"``."""
    sig = exit_signal(exitcode)
    return f"was killed by {sig}" if sig else f"exited with code {exitcode}"


def likely_cause(exitcode: int, stopped: str = "", rss: Optional[int] = None) -> Optional[str]:
    """What probably ended a worker, as a sentence fragment; None for a clean exit (code 0)."""
    if stopped:
        cause = STOP_REASONS.get(stopped, f"stopped by nbmp ({stopped})")
    elif exitcode == 0:
        return None
    elif exitcode > 0:
        cause = (f"the worker ended its process (sys.exit({exitcode}), os._exit({exitcode}) or exit() in "
                 f"native code)" if exitcode != 1 else "the worker raised, or called sys.exit(1)")
    else:
        cause = _SIGNAL_CAUSES.get(exit_signal(exitcode) or "", "a signal from native code or another process")
    return cause + (f"; its resident memory was {format_bytes(rss)}" if rss else "")
