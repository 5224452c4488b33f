"""The dashboard's one background thread, and the CPU/RSS probe it runs.

CPU and memory are measured from the parent, so a stuck worker is seen too; psutil is optional
(without it they stay unknown). The thread also drives the throttled redraws, only while a run is live.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, ContextManager, Dict, Hashable, Optional, Tuple, TypeVar

__all__ = ["Ticker", "ProcessProbe"]

Sample = Tuple[Optional[float], Optional[int]]  # (CPU percent of one core, RSS bytes)
_Key = TypeVar("_Key", bound=Hashable)


class ProcessProbe:
    """CPU percent and RSS of processes by pid, remembering each ``psutil.Process`` so
    that ``cpu_percent`` measures the interval since the previous sample."""

    def __init__(self) -> None:
        try:
            import psutil
        except ImportError:  # the notebook extra brings psutil; without it, no CPU/RSS
            psutil = None
        self._psutil: Any = psutil  # Any: the psutil module or None (optional, untyped)
        self._procs: Dict[int, Any] = {}  # Any: psutil.Process (untyped)

    def measure(self, pids: Dict[_Key, int]) -> Dict[_Key, Sample]:
        if self._psutil is None:
            return {}
        for pid in set(self._procs) - set(pids.values()):  # forget exited workers (and reused pids)
            del self._procs[pid]
        return {key: self._sample(pid) for key, pid in pids.items()}

    def _sample(self, pid: int) -> Sample:
        psutil = self._psutil
        try:
            proc = self._procs.get(pid)
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
            with proc.oneshot():
                return proc.cpu_percent(None), proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._procs.pop(pid, None)
            return None, None


class Ticker:
    """Calls ``tick`` every ``interval`` seconds in one daemon thread until ``stop`` (which joins it), each
    tick inside a ``ForkLock`` so a child never inherits the thread's locks mid-tick."""

    def __init__(self, tick: Callable[[], None], interval: float = 0.25, name: str = "nbmp-dashboard") -> None:
        self._tick = tick
        self._safe_point = _fork_lock(name)
        self.interval, self.name = interval, name
        self.cpu_seconds = 0.0  # CPU time the thread used over all its runs (for the benchmark)
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        with self._lock:
            if self.running:
                return
            self._stopping = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(self._stopping,), name=self.name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            self._stopping.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self, stopping: threading.Event) -> None:
        started = time.thread_time()
        try:
            while not stopping.wait(self.interval):
                with contextlib.suppress(Exception):  # a display problem must never end the sampling or the run
                    with self._safe_point:  # nbmp forks only between ticks
                        self._tick()
        finally:
            self.cpu_seconds += time.thread_time() - started


def _fork_lock(name: str) -> ContextManager[Any]:
    """The lock nbmp holds across its forks (``nbmp._forking.ForkLock``), else nothing."""
    try:
        from .._forking import ForkLock
    except ImportError:  # fork safety not part of this build
        return contextlib.nullcontext()
    return ForkLock(name)
