"""``multiprocessing.popen_fork``, mirrored: the standard ``Popen`` for fork (nbmp's own lives in ``nbmp._backend``).

nbmp defines nothing here: this module stands for the standard module itself, so that what
a program reads, sets or patches on it is the standard module's.

Example::

    >>> from nbmp.popen_fork import Popen
"""

import importlib as _importlib
import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers: the standard names
    from multiprocessing.popen_fork import *  # noqa: F401,F403

# By name, not ``import multiprocessing.popen_fork``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_sys.modules[__name__] = _importlib.import_module("multiprocessing.popen_fork")
