"""Where a cluster run's ranks go: one rank per Dask worker process, one host filled before the next."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Tuple

from . import connect

__all__ = ["ranks_to_workers", "ranks_per_host"]


def ranks_to_workers(client: Any, nprocs: int) -> List[Tuple[str, str]]:
    """The ``(host, address)`` of each rank's worker, in rank order, filling one host before the
    next (ranks that talk most, neighbours, share a host); a ValueError before anything is
    submitted when the cluster has fewer workers than ``nprocs``. A run uses this one look at the
    cluster throughout, since a worker restarted meanwhile comes back under a new address."""
    workers = connect.worker_hosts(client)
    if nprocs > len(workers):
        raise ValueError(f"nprocs={nprocs} is more than the {len(workers)} worker process(es) of the Dask cluster at "
                         f"{client.scheduler.address} (one rank runs per worker process); pass nprocs="
                         f"{max(1, len(workers))} or fewer, or add workers (cluster.scale({nprocs}), or start "
                         f"more `dask worker` processes)")
    return workers[:nprocs]


def ranks_per_host(workers: List[Tuple[str, str]]) -> Dict[str, int]:
    """For each ``(host, address)`` of ``workers``: ``{address: how many of them share its host}``."""
    counts = Counter(host for host, _ in workers)
    return {address: counts[host] for host, address in workers}
