"""nbmp on a Dask cluster: ``spawn``, ``Pool``, ``parallel_map`` and ``%%nbmp`` given
``cluster=`` (a ``distributed.Client`` or a scheduler address) or a default cluster
(``nbmp.set_cluster``).

``connect`` (which cluster; imports Dask, and only when a cluster is used), ``placement``
(ranks to workers), ``payload`` (``fn`` and ``args``: handles on this host, once per other
host), ``rank`` (what runs on a worker for one rank), ``inbox`` (the client's queue of the
run's Dask events), ``spawn`` (the run and its watch thread), ``pool`` and ``tasks`` (the
Pool API on the cluster, and its worker side), ``plugin`` (fork-safety settings on Pool
workers). ``rank``, ``tasks`` and ``plugin`` run on the workers. Dask is imported by
``connect`` for an address, by ``plugin`` (with ``pool``, on the first Pool on a cluster) and
by ``rank`` inside its task: never at ``import nbmp``.

The layer above ``_spawn`` and ``_pool``: a rank on a worker *is* a one-process
``nbmp.spawn`` there, and the printer, argument checks and errors are theirs. They call
down into nothing here: this façade registers the backend with them (``install``), as
``_pool`` registers ``Pool`` with the contexts, and they dispatch a call to it only when a
cluster is given.
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
