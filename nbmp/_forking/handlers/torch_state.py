"""torch: intra-op threads set in the child before any parallel op, and the default
generator reseeded (under spawn every worker would start from torch's fixed seed).
"""

from __future__ import annotations

import sys
from typing import Optional

from ._base import ForkHandler, Worker
from .thread_pools import openmp_threads


class Torch(ForkHandler):
    """torch's intra-op thread count and default generator, per worker."""

    modules = ("torch",)
    cuda_built: Optional[bool] = None  # found in the parent once, before its first fork; a forked child inherits it

    def before(self) -> None:
        if self.cuda_built is None:
            self.cuda_built = sys.modules["torch"].backends.cuda.is_built()

    def in_child(self, worker: Worker) -> None:
        torch = sys.modules["torch"]
        # With GNU OpenMP, a forked child's first parallel op hangs unless this comes first.
        torch.set_num_threads(openmp_threads(worker))
        # torch.manual_seed also probes every accelerator backend: milliseconds per worker.
        torch.default_generator.manual_seed(worker.seed)
        if self.cuda_built if worker.forked else torch.backends.cuda.is_built():
            torch.cuda.manual_seed_all(worker.seed)  # CUDA generators are seeded lazily, at first CUDA use
