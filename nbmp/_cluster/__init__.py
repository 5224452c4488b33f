"""nbmp on a Dask cluster: ``spawn``, ``Pool``, ``parallel_map`` and ``%%nbmp`` given
``cluster=`` (a ``distributed.Client`` or a scheduler address) or a default cluster
(``nbmp.set_cluster``).

The modules are listed in docs/design.md; ``rank``, ``tasks`` and ``plugin`` run on the workers,
and Dask is imported only when a cluster is used, never at ``import nbmp``. The layer above
``_spawn`` and ``_pool`` (a rank is a one-process ``nbmp.spawn`` on its worker): this façade
registers the backend with them (``install``), and they dispatch to it only when a cluster is given.
"""

from __future__ import annotations

from typing import Any

from .._backend import register_plugin
from .connect import client_for, close_owned_clients, get_cluster, set_cluster, wanted, worker_hosts
from .spawn import ClusterContext, spawn_on_cluster

__all__ = ["set_cluster", "get_cluster", "wanted", "worker_count", "ClusterContext", "spawn_on_cluster",
           "ClusterBackend", "install", "close_owned_clients"]


def worker_count(cluster: Any) -> int:
    """How many worker processes ``cluster`` (or the default cluster) has now."""
    return len(worker_hosts(client_for(cluster)))


class ClusterBackend:
    """What ``_spawn`` and ``_pool`` call when a cluster is wanted (registered by :func:`install`)."""

    @staticmethod
    def wanted(cluster: Any) -> bool:
        return wanted(cluster)

    @staticmethod
    def spawn(*args: Any, **kwargs: Any) -> Any:
        return spawn_on_cluster(*args, **kwargs)

    @staticmethod
    def pool(*args: Any, **kwargs: Any) -> Any:
        from .pool import ClusterPool
        return ClusterPool(*args, **kwargs)

    @staticmethod
    def parallel_map(*args: Any, **kwargs: Any) -> Any:
        from .pool import parallel_map_on_cluster
        return parallel_map_on_cluster(*args, **kwargs)


def install() -> None:
    """Make ``cluster=`` work in ``nbmp.spawn``, ``nbmp.Pool`` and ``nbmp.parallel_map`` (done on
    import: ``import nbmp`` registers a stand-in that imports this package when a cluster is named)."""
    register_plugin("cluster", ClusterBackend())


install()
