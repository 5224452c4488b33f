"""``nbmp.spawn``: torch-style runs of ``fn(i, *args)`` in ``nprocs`` processes.

``run`` (``spawn``, ``start_processes``, ``ProcessContext``), ``args`` (checks before
any process starts), ``worker`` (what runs in each process), ``supervisor`` (the
parent's thread that relays output, collects results and stops the others on a
failure), ``output`` (whole-line relay of workers' stdout and stderr), ``stop``
(stop every nbmp worker). A peer of ``_pool``; neither imports the other.
"""

from .run import ENV_VAR_PARALLEL_START, ProcessContext, SpawnContext, spawn, start_processes
from .stop import stop_all

__all__ = ["spawn", "start_processes", "ProcessContext", "SpawnContext", "ENV_VAR_PARALLEL_START", "stop_all"]
