"""NumPy's global (legacy) generator: fork copies it, so every worker would draw the
same "random" numbers; nbmp seeds it per worker. ``default_rng()`` needs nothing.

Keyed on ``numpy.random``, not ``numpy``: NumPy 2 imports its random module lazily,
and touching it in every worker would import it there. A worker
whose parent never used it seeds it the moment it imports it.
"""

from __future__ import annotations

import sys

from ._base import ForkHandler, Worker


class NumpyRandom(ForkHandler):
    """``numpy.random``'s global generator, seeded per worker."""

    modules = ("numpy.random",)

    def in_child(self, worker: Worker) -> None:
        sys.modules["numpy.random"].seed(worker.seed % 2**32)  # the legacy seed is 32-bit
