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


# nbmp defines nothing here: this module stands for the standard module itself, so that
# what a program reads, sets or patches on it (``mock.patch("nbmp.process.<name>")``, a
# private name) is the standard module's. Importing it gives the standard module.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

# By name, not ``import multiprocessing.process``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_standard = _importlib.import_module("multiprocessing.process")
_sys.modules[__name__] = _standard
