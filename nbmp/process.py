"""``multiprocessing.process``, mirrored: the standard process bookkeeping.

nbmp's process classes subclass the standard ``BaseProcess``, so ``current_process``,
``active_children`` and ``parent_process`` are the standard functions and see nbmp's
children and the standard module's alike.
"""

from multiprocessing.process import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    AuthenticationString, BaseProcess, active_children, current_process, parent_process,
)

__all__ = ["BaseProcess", "current_process", "active_children", "parent_process"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from ._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.process")
