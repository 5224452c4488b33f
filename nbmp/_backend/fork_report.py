"""``nbmp.doctor()``: what would make forking this process hazardous, right now.

Nothing here imports a framework: torch, JAX and ipykernel are looked up in
``sys.modules``; threadpoolctl (the ``nbmp[fork-safety]`` extra) is imported when
installed, to list the BLAS/OpenMP runtimes already loaded.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .._base.util import format_bytes as _size, space
from .._forking import registry as _forking, threads as _fork_threads
from .._forking.handlers.cuda import cuda_initialized
from .._forking.handlers.jax import jax_initialized
from .context import default_context

__all__ = ["ForkReport", "doctor"]


@dataclass
class ForkReport:
    """The hazards of forking now, and the facts behind them (see ``nbmp.doctor``).

    Example::

        >>> report = nbmp.doctor()
        >>> [t.name for t in report.threads if t.kind == "user"], report.shm_free
        ([], 25273389056)
    """

    hazards: List[str]
    threads: List[_fork_threads.ThreadInfo]
    native_threads: List[_fork_threads.ThreadInfo]
    threadpools: List[Dict[str, Any]]
    cuda_initialized: Optional[bool]  # None: torch not imported
    jax_initialized: Optional[bool]   # None: jax not imported
    shm_total: Optional[int]          # bytes of /dev/shm; None where there is none
    shm_free: Optional[int]
    start_method: str
    worker_threads: Optional[int]     # the explicit budget, None = cores // workers
    cores: int
    python: str
    os_kernel: str
    ipykernel: Optional[str]          # None: not running in (or without) ipykernel
    extra: Dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = ["nbmp doctor: " + (f"{len(self.hazards)} hazard(s) before a fork" if self.hazards
                                    else "no hazards before a fork")]
        lines += [f"  ! {h}" for h in self.hazards]
        lines.append(f"start method {self.start_method}; Python {self.python}; kernel {self.os_kernel}; "
                     f"ipykernel {self.ipykernel or '-'}")
        budget = self.worker_threads or "cores // workers"
        lines.append(f"cores {self.cores}; worker threads {budget}; /dev/shm {_size(self.shm_free)} free of "
                     f"{_size(self.shm_total)}")
        lines.append(f"CUDA initialised: {_state(self.cuda_initialized, 'torch')}; "
                     f"JAX initialised: {_state(self.jax_initialized, 'jax')}")
        lines.append(f"threads ({len(self.threads)} Python, {len(self.native_threads)} native):")
        lines += [f"  {t.name} [{t.kind}{'' if t.daemon else ', non-daemon'}]" for t in self.threads]
        names = sorted({t.name for t in self.native_threads})
        lines += [f"  native: {', '.join(names)}"] if names else []
        lines.append("thread pools:" if self.threadpools else "thread pools: none loaded" if _has_threadpoolctl() else
                     "thread pools: not seen without threadpoolctl (pip install 'nbmp[fork-safety]'); workers cap "
                     "only the pools they load themselves, through OMP_NUM_THREADS and the like")
        lines += [f"  {p.get('internal_api')} ({p.get('prefix')}): {p.get('num_threads')} threads"
                  for p in self.threadpools]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _state(flag: Optional[bool], module: str) -> str:
    return f"({module} not imported)" if flag is None else str(flag)


def _has_threadpoolctl() -> bool:
    return importlib.util.find_spec("threadpoolctl") is not None


def _threadpools() -> List[Dict[str, Any]]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [dict(info) for info in threadpool_info()]


def _shm() -> tuple[Optional[int], Optional[int]]:
    try:
        return space("/dev/shm")
    except OSError:
        return None, None


def doctor() -> ForkReport:
    """Report what would make forking this process hazardous now: live threads by name and
    kind, CUDA/JAX state, BLAS/OpenMP runtimes and their thread counts, /dev/shm size and
    free space, the start method, Python, OS kernel and ipykernel versions.

    Example::

        >>> report = nbmp.doctor()
        >>> report.hazards      # [] when forking now is safe
        []
        >>> print(report)       # the readable version
    """
    total, free = _shm()
    ipykernel = sys.modules.get("ipykernel")
    return ForkReport(
        hazards=_forking.hazards(), threads=_fork_threads.python_threads(),
        native_threads=_fork_threads.native_threads(), threadpools=_threadpools(),
        cuda_initialized=cuda_initialized() if "torch" in sys.modules else None,
        jax_initialized=jax_initialized() if "jax" in sys.modules else None,
        shm_total=total, shm_free=free, start_method=default_context.get_start_method(),
        worker_threads=_forking.worker_threads_setting(), cores=_forking._cores(),
        python=platform.python_version(), os_kernel=f"{platform.system()} {platform.release()}",
        ipykernel=getattr(ipykernel, "__version__", None))
