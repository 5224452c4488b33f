"""``nbmp.doctor()``: what would make forking this process hazardous, right now.

Nothing here imports a framework: torch, JAX and ipykernel are looked up in
``sys.modules``; threadpoolctl (the ``nbmp[fork-safety]`` extra) is imported when
installed, to list the BLAS/OpenMP runtimes already loaded.
"""

from __future__ import annotations

import platform
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .._base.util import format_bytes as _size, space
from .._forking import registry as _forking, threads as _fork_threads
from .._forking.handlers.cuda import cuda_initialized
from .._forking.handlers.jax import jax_initialized
from .._forking.handlers.thread_pools import controller, stopped_at_fork
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
    free_threaded: bool = False       # a free-threaded build (3.13t+), whatever its GIL does now
    gil_enabled: bool = True          # False: threads run Python code in parallel, nothing serialises them
    extra: Dict[str, Any] = field(default_factory=dict)
    threadpoolctl: bool = True        # False: not installed, so pools already loaded are not capped in workers

    def __str__(self) -> str:
        lines = ["nbmp doctor: " + (f"{len(self.hazards)} hazard(s) before a fork" if self.hazards else "no hazards before a fork")]
        lines += [f"  ! {h}" for h in self.hazards]
        build = f" free-threaded, GIL {'enabled' if self.gil_enabled else 'disabled'}" if self.free_threaded else ""
        lines.append(f"start method {self.start_method}; Python {self.python}{build}; kernel {self.os_kernel}; "
                     f"ipykernel {self.ipykernel or '-'}")
        budget = self.worker_threads or "cores // workers"
        lines.append(f"cores {self.cores}; worker threads {budget}; /dev/shm {_size(self.shm_free)} free of {_size(self.shm_total)}")
        lines.append(f"CUDA initialised: {_state(self.cuda_initialized, 'torch')}; "
                     f"JAX initialised: {_state(self.jax_initialized, 'jax')}")
        lines.append(f"threads ({len(self.threads)} Python, {len(self.native_threads)} native):")
        lines += [f"  {t.name} [{t.kind}{'' if t.daemon else ', non-daemon'}]" for t in self.threads]
        names = sorted({t.name for t in self.native_threads})
        lines += [f"  native: {', '.join(names)}"] if names else []
        if not self.threadpoolctl:
            lines.append("thread pools: unknown, threadpoolctl is not installed: BLAS/OpenMP pools already loaded "
                         "(numpy's, scipy's, torch's) keep their full thread count in every worker, so workers x "
                         "threads can oversubscribe the cores (workers cap only the pools they load themselves, "
                         "through OMP_NUM_THREADS and the like); pip install 'nbmp[fork-safety]' to cap them")
        else:
            lines.append("thread pools:" if self.threadpools else "thread pools: none loaded")
        kept = "; forked workers keep it unless nbmp.set_worker_threads(n) caps it (docs/fork_safety.md)"
        lines += [f"  {p.get('internal_api')} ({p.get('prefix')}): {p.get('num_threads')} threads"
                  + (kept if stopped_at_fork(p) and p.get("num_threads", 1) > 1 and not self.worker_threads else "")
                  for p in self.threadpools]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _state(flag: Optional[bool], module: str) -> str:
    return f"({module} not imported)" if flag is None else str(flag)


def _threadpools() -> Optional[List[Dict[str, Any]]]:
    """The loaded BLAS/OpenMP pools; None where threadpoolctl is not installed."""
    pools = controller()
    return None if pools is None else [dict(info) for info in pools.info()]


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
    ipykernel, pools = sys.modules.get("ipykernel"), _threadpools()
    return ForkReport(
        hazards=_forking.hazards(), threads=_fork_threads.python_threads(),
        native_threads=_fork_threads.native_threads(), threadpools=pools or [], threadpoolctl=pools is not None,
        cuda_initialized=cuda_initialized() if "torch" in sys.modules else None,
        jax_initialized=jax_initialized() if "jax" in sys.modules else None,
        shm_total=total, shm_free=free, start_method=default_context.get_start_method(),
        worker_threads=_forking.worker_threads_setting(), cores=_forking._cores(),
        python=platform.python_version(), os_kernel=f"{platform.system()} {platform.release()}",
        ipykernel=getattr(ipykernel, "__version__", None),
        # A free-threaded build can turn its GIL back on (PYTHON_GIL=1, an extension that needs it).
        free_threaded=bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        gil_enabled=getattr(sys, "_is_gil_enabled", lambda: True)())
