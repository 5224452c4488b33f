"""What a cluster run sends its ranks: ``fn``, ``args`` and the notebook's cell sources.

On the client's host, nbmp's pickler: shared arrays cross as handles, one pickle per rank (a
ticket is single-use), a large unshared ndarray shared once first. On another host, plain
cloudpickle, once per host: inline when small, else scattered to one of its workers.
"""

from __future__ import annotations

import sys
from itertools import groupby
from typing import Any, Dict, List, Tuple

from .._backend import cells as _cells, pickling as _pickling
from .._sharing import get_sharing_threshold, is_shared, share
from . import connect

__all__ = ["payloads", "SCATTER_ABOVE"]

SCATTER_ABOVE = 1 << 20  # bytes: below this, a payload inline with each task costs less than a scatter


def payloads(client: Any, fn: Any, args: Tuple[Any, ...], workers: List[Tuple[str, str]]) -> Dict[str, Any]:
    """``{worker address: payload bytes, or a future holding them}`` for the run's ranks' ``(host, address)``."""
    host_of = {address: host for host, address in workers}
    local = [a for a in host_of if connect.is_local_host(host_of[a])]
    remote = [a for a in host_of if a not in local]
    cells = _cells.cell_sources()
    placed: Dict[str, Any] = {}
    if local:
        shared = tuple(_shared_if_big(arg) for arg in args)
        placed.update({address: _pickling.dumps((fn, shared, cells)) for address in local})
    if remote:
        data = _pickling.dumps_plain((fn, args, cells))
        for _, group in groupby(sorted(remote, key=host_of.__getitem__), key=host_of.__getitem__):
            placed.update(_once_per_host(client, data, list(group)))
    return placed


def _shared_if_big(arg: Any) -> Any:
    numpy = sys.modules.get("numpy")
    if numpy is None or type(arg) is not numpy.ndarray or is_shared(arg) or arg.dtype.hasobject:
        return arg
    return share(arg) if arg.nbytes >= get_sharing_threshold() else arg


def _once_per_host(client: Any, data: bytes, workers: List[str]) -> Dict[str, Any]:
    if len(data) < SCATTER_ABOVE:
        return dict.fromkeys(workers, data)
    [future] = client.scatter([data], workers=workers[:1], hash=False)
    return dict.fromkeys(workers, future)
