"""Where a cluster run's ranks go: one rank per Dask worker process, one host filled before the next."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List

from . import connect

__all__ = ["ranks_to_workers", "ranks_per_host"]


def ranks_to_workers(client: Any, nprocs: int) -> List[str]:
    """The worker address of each rank, filling one host before the next (ranks that talk
    most, neighbours, share a host); a ValueError before anything is submitted when the
    cluster has fewer workers than ``nprocs``."""
    workers = connect.worker_hosts(client)
    if nprocs > len(workers):
        raise ValueError(f"nprocs={nprocs} is more than the {len(workers)} worker process(es) of the Dask cluster at "
                         f"{client.scheduler.address} (one rank runs per worker process); pass nprocs="
                         f"{max(1, len(workers))} or fewer, or add workers (cluster.scale({nprocs}), or start "
                         f"more `dask worker` processes)")
    return [address for _, address in workers[:nprocs]]


def ranks_per_host(client: Any, addresses: List[str]) -> Dict[str, int]:
    """``{address: how many of the run's ranks share its host}``."""
    host_of = {address: host for host, address in connect.worker_hosts(client)}
    counts = Counter(host_of[a] for a in addresses)
    return {a: counts[host_of[a]] for a in addresses}
