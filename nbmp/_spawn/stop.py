"""Stopping every nbmp worker this process started (``%nbmp kill``, ``%unload_ext nbmp``)."""

from __future__ import annotations

from multiprocessing import process
from typing import List

__all__ = ["stop_all"]

GRACE = 2.0  # seconds between SIGTERM and SIGKILL


def stop_all(grace: float = GRACE) -> List[int]:
    """Terminate, then kill after ``grace`` seconds, every live child nbmp started; return their pids."""
    from .._backend.process import _NbmpProcess
    workers = [p for p in process.active_children() if isinstance(p, _NbmpProcess)]
    for p in workers:
        p.terminate()
    for p in workers:
        p.join(grace)
        if p.is_alive():
            p.kill()
            p.join()
    return [p.pid for p in workers if p.pid is not None]
