"""Which cluster a call runs on: ``cluster=`` (a ``distributed.Client`` or a scheduler
address), else the default set by ``nbmp.set_cluster``; and the one place that imports
Dask, so that ``import nbmp`` never does.
"""

from __future__ import annotations

import importlib
import socket
from typing import Any, Dict, List, Tuple

__all__ = ["require", "set_cluster", "get_cluster", "wanted", "client_for", "worker_hosts", "is_local_host", "close_owned_clients"]

_default: Any = None
_owned: Dict[str, Any] = {}  # address -> the Client nbmp opened for it (reused by later calls)
CONNECT_TIMEOUT = "10s"
PROBE_TIMEOUT = 10.0  # seconds


def require() -> Any:
    """The ``distributed`` module, or an ImportError that names the extra to install."""
    try:
        return importlib.import_module("distributed")
    except ImportError as exc:
        raise ImportError("cluster= needs Dask distributed, which is not installed: pip install 'nbmp[dask]'") from exc


def set_cluster(cluster: Any) -> None:
    """Make ``cluster`` (a ``distributed.Client``, a scheduler address, or None to go back
    to this machine) where ``spawn``, ``Pool``, ``parallel_map`` and ``%%nbmp`` run when
    they are given no ``cluster=``.

    Example::

        >>> nbmp.set_cluster("tcp://scheduler:8786")   # once, at the top of the notebook
        >>> nbmp.spawn(lambda rank: rank, nprocs=4)    # runs on the cluster
        >>> nbmp.set_cluster(None)                      # back to this machine
    """
    global _default
    if cluster is not None:
        _check_kind(cluster, "nbmp.set_cluster")
    _default = cluster


def get_cluster() -> Any:
    """The default cluster set by ``nbmp.set_cluster`` (None: this machine)."""
    return _default


def wanted(cluster: Any) -> bool:
    """Whether a call given ``cluster=`` runs on a cluster (its own or the default; False: here)."""
    return cluster is not False and (cluster is not None or _default is not None)


def _check_kind(cluster: Any, name: str) -> None:
    if not isinstance(cluster, str) and not callable(getattr(cluster, "submit", None)):
        raise TypeError(f"{name}: cluster must be a distributed.Client or a scheduler address such as "
                        f"'tcp://scheduler:8786', not {type(cluster).__name__} {cluster!r}; "
                        f"e.g. cluster=distributed.Client(LocalCluster())")


def client_for(cluster: Any, name: str = "cluster") -> Any:
    """The ``distributed.Client`` for ``cluster`` (or the default), connecting to an address
    once; a scheduler that cannot be reached is an OSError that names the address."""
    cluster = _default if cluster is None else cluster
    _check_kind(cluster, name)
    if not isinstance(cluster, str):
        if getattr(cluster, "status", "running") in ("closed", "closing"):
            raise ValueError(f"{name}={cluster!r} is closed; pass a running distributed.Client")
        return cluster
    client = _owned.get(cluster)
    if client is not None and client.status == "running":
        return client
    distributed = require()
    try:
        _probe(cluster)
        client = distributed.Client(cluster, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise OSError(f"{name}={cluster!r}: no Dask scheduler answered there ({type(exc).__name__}: {exc}); "
                      f"check the address (it is printed by `dask scheduler` and shown as "
                      f"client.scheduler.address), or pass a distributed.Client") from None
    _owned[cluster] = client
    return client


def _probe(address: str) -> None:
    """Fail at once, without Dask, where nothing listens at a TCP address: a Client that fails
    to connect leaves Dask's event-loop thread running in this process for good."""
    from distributed.comm.addressing import parse_address, parse_host_port
    scheme, location = parse_address(address)
    if scheme == "tcp":
        with socket.create_connection(parse_host_port(location), timeout=PROBE_TIMEOUT):
            pass


def close_owned_clients() -> None:
    """Close the clients nbmp opened for addresses (``%unload_ext nbmp``, tests)."""
    while _owned:
        _owned.popitem()[1].close()


def worker_hosts(client: Any) -> List[Tuple[str, str]]:
    """``(host, address)`` of every worker, sorted so that one host's workers are adjacent. Asked
    of the scheduler: ``scheduler_info`` returns a cache that the client's own refresh empties of workers."""
    return sorted((require().comm.get_address_host(addr), str(addr)) for addr in client.nthreads())


_LOCAL = {"127.0.0.1", "localhost", "::1"}


def is_local_host(host: str) -> bool:
    """Whether a worker on ``host`` shares this machine (and so its /dev/shm)."""
    if host in _LOCAL:
        return True
    try:
        return host in {socket.gethostname(), socket.getfqdn(), *socket.gethostbyname_ex(socket.gethostname())[2]}
    except OSError:
        return False
