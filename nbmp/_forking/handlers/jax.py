"""JAX: once its backends are initialised the process runs JAX's own threads, and a
forked child that uses JAX can deadlock. nbmp cannot reset it; it warns once."""

from __future__ import annotations

import sys
from typing import Optional

from ._base import ForkHandler


def jax_initialized() -> bool:
    return bool(getattr(sys.modules.get("jax._src.xla_bridge"), "_backends", None))


class Jax(ForkHandler):
    """A warning, with the fix, when JAX was initialised in the parent."""

    modules = ("jax",)

    def hazard(self) -> Optional[str]:
        if not jax_initialized():
            return None
        return ("JAX is initialised in this process; JAX runs its own threads and is not fork-safe, so a "
                "forked worker that uses JAX can deadlock. Use start_method='spawn' for JAX work in workers "
                "(nbmp.spawn(fn, nprocs=n, start_method='spawn') or nbmp.get_context('spawn')), or import "
                "JAX only inside the workers.")
