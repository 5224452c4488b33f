"""``multiprocessing.process``, mirrored: the standard process bookkeeping.

nbmp's process classes subclass the standard ``BaseProcess``, so ``current_process``,
``active_children`` and ``parent_process`` are the standard functions and see nbmp's
children and the standard module's alike.

Example::

    >>> from nbmp.process import current_process
    >>> current_process().name
    'MainProcess'
"""

from multiprocessing.process import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    AuthenticationString, BaseProcess, active_children, current_process, parent_process,
)

__all__ = ["BaseProcess", "current_process", "active_children", "parent_process"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
import multiprocessing.process as _standard  # noqa: E402

from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(_standard, __name__)
