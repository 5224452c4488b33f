"""nbmp's fork-safety settings on the Dask workers that run a ``Pool(..., cluster=)``'s tasks: a
worker plugin (joining and restarted workers too) that seeds and caps threads as
``_forking.child_started`` does. A ``spawn`` rank needs none: nbmp starts its process (``rank._AsRank``).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from distributed.diagnostics.plugin import WorkerPlugin

from .._forking import registry as _registry

__all__ = ["register", "ForkSafetyPlugin"]

NAME = "nbmp-fork-safety"


def _worker_index(worker: Any) -> int:
    name = getattr(worker, "name", None)
    if isinstance(name, int):
        return name
    return int(str(name)) if str(name).isdigit() else abs(hash(worker.address)) % (1 << 31)


class ForkSafetyPlugin(WorkerPlugin):  # type: ignore[misc, unused-ignore]  # Any where distributed is absent
    """``setup(worker)`` applies the client's settings (see the module docstring)."""

    idempotent = False  # new settings (nbmp.seed again) replace the old on every worker

    def __init__(self, settings: Dict[str, Any], per_host: int) -> None:
        self.settings, self.per_host, self.name = settings, per_host, NAME

    def setup(self, worker: Any) -> None:
        settings = dict(self.settings)
        if settings.get("threads") is None:
            settings["threads"] = max(1, (os.cpu_count() or 1) // max(1, self.per_host))
        _registry.settle_worker(_worker_index(worker), self.per_host, settings)


_registered: Dict[int, Optional[Dict[str, Any]]] = {}


def register(client: Any, workers_per_host: int) -> None:
    """Register the plugin with ``client``'s cluster once per change of settings."""
    settings = _registry.fork_settings()
    if _registered.get(id(client)) == settings:
        return
    client.register_plugin(ForkSafetyPlugin(settings, workers_per_host), name=NAME)
    _registered[id(client)] = settings
