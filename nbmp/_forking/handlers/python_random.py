"""``random``: fork copies the global generator (CPython reseeds it from the OS, not
reproducibly), spawn seeds it from the OS; nbmp seeds it from the worker's seed."""

from __future__ import annotations

import random

from ._base import ForkHandler, Worker


class PythonRandom(ForkHandler):
    """The stdlib's global ``random`` generator, seeded per worker."""

    def in_child(self, worker: Worker) -> None:
        random.seed(worker.seed)
