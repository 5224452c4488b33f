"""torch: intra-op threads set in the child before any parallel op, and the default
generator reseeded (under spawn every worker would start from torch's fixed seed).

Across a round of forks the parent lends its own intra-op count: it sets the workers'
count just before its first fork and takes its own back after the last (``set_num_threads``
starts no thread), so that each forked worker inherits it and sets nothing (setting it in
a fresh fork writes, and so copies, libtorch's pages in every worker).
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

from ._base import ForkHandler, Worker
from .thread_pools import gnu_openmp_loaded, openmp_threads


class Torch(ForkHandler):
    """torch's intra-op thread count and default generator, per worker."""

    modules = ("torch",)
    cuda_built = False  # found in the parent before its fork; a forked child inherits it
    lent: Optional[int] = None  # the count the parent set for the round's workers (a forked child inherits it)
    _own = 0  # the parent's count, given back after the round

    def __init__(self, coming_threads: Callable[[], int] = lambda: 1) -> None:
        self.coming_threads = coming_threads  # the budget of the child about to be forked

    def before(self) -> None:
        torch = sys.modules["torch"]
        self.cuda_built = torch.backends.cuda.is_built()
        # The round's workers share one budget (see the registry's before_fork); GNU OpenMP
        # allows a forked worker one thread (see thread_pools.openmp_threads).
        count = 1 if gnu_openmp_loaded() else self.coming_threads()
        self._own, self.lent = torch.get_num_threads(), None
        if count != self._own:
            torch.set_num_threads(count)
        self.lent = count

    def after_in_parent(self) -> None:
        if self.lent is not None and self.lent != self._own:
            sys.modules["torch"].set_num_threads(self._own)
        self.lent = None

    def in_child(self, worker: Worker) -> None:
        torch = sys.modules["torch"]
        threads = openmp_threads(worker)
        if not (worker.forked and self.lent == threads):
            # With GNU OpenMP, a forked child's first parallel op hangs unless this comes first.
            torch.set_num_threads(threads)
        # torch.manual_seed also probes every accelerator backend: milliseconds per worker.
        torch.default_generator.manual_seed(worker.seed)
        if self.cuda_built if worker.forked else torch.backends.cuda.is_built():
            torch.cuda.manual_seed_all(worker.seed)  # CUDA generators are seeded lazily, at first CUDA use
