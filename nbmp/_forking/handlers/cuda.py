"""CUDA (through torch): a forked child cannot use a CUDA context its parent created.
nbmp resets a forked worker's default torch device to CPU, as mindspore resets its
backend, and warns once in the parent with the fix: the spawn start method."""

from __future__ import annotations

import sys
from typing import Optional

from ._base import ForkHandler, Worker


def cuda_initialized() -> bool:
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


class Cuda(ForkHandler):
    """torch's default device in workers forked from a CUDA-initialised parent."""

    modules = ("torch",)
    parent_initialized = False  # recorded just before the fork; the child inherits it

    def hazard(self) -> Optional[str]:
        if not cuda_initialized():
            return None
        return ("CUDA is initialised in this process: a forked worker cannot use CUDA (torch raises "
                "'Cannot re-initialize CUDA in forked subprocess'), so nbmp resets each forked worker's "
                "default torch device to CPU. For GPU work in workers use start_method='spawn', e.g. "
                "nbmp.spawn(fn, nprocs=n, start_method='spawn') or nbmp.get_context('spawn').")

    def before(self) -> None:
        self.parent_initialized = cuda_initialized()

    def in_child(self, worker: Worker) -> None:
        if worker.forked and self.parent_initialized:
            sys.modules["torch"].set_default_device(None)  # CPU, with no device mode left on every torch call
