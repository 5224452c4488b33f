"""The shape of a fork handler: a tiny base class, one short subclass per framework.

Hooks ``before``, ``after_in_parent`` and ``in_child`` (every start method, given the child's
:class:`Worker`), applied only while the framework is in ``sys.modules``; ``hazard`` names a danger of
forking now (warned once, listed by ``nbmp.doctor()``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

__all__ = ["ForkHandler", "ForkSafetyWarning", "Worker"]


class ForkSafetyWarning(RuntimeWarning):
    """A hazard of forking this process now, and how to avoid it.

    Example::

        >>> import warnings
        >>> warnings.simplefilter("error", nbmp.ForkSafetyWarning)  # make hazards fatal
    """


@dataclass(frozen=True)
class Worker:
    """What a child knows about itself when its handlers run."""

    index: int          # 0-based rank in its run
    nprocs: int         # size of its run (0 when unknown)
    seed: int           # this worker's seed, derived from (base seed, index)
    threads: int        # its thread budget for BLAS/OpenMP/torch pools
    explicit_threads: bool  # the budget came from set_worker_threads / NBMP_WORKER_THREADS
    forked: bool        # forked directly by nbmp (its parent ran the before handlers)
    # forked by a fork server (start_method="forkserver"): it shares the server's pages, as a
    # worker nbmp forked shares its parent's, but no before handler ran for it
    from_fork_server: bool = False


class ForkHandler:
    """Base class: override the points that matter for one framework."""

    modules: ClassVar[Tuple[str, ...]] = ()  # applies while any of these is imported; () = always

    def applies(self) -> bool:
        return not self.modules or any(name in sys.modules for name in self.modules)

    def hazard(self) -> Optional[str]:
        return None

    def before(self) -> None:
        pass

    def after_in_parent(self) -> None:
        pass

    def in_child(self, worker: Worker) -> None:
        pass

    def in_fork_server(self) -> None:
        """In a fork server, once, after its preloads and before its first fork: what every
        worker it forks would otherwise make again (they inherit it, ``worker.from_fork_server``)."""

    def __repr__(self) -> str:
        return f"<fork handler {type(self).__name__}>"
