"""``multiprocessing.popen_forkserver``, mirrored: the standard ``Popen`` for forkserver.

nbmp defines nothing here: this module stands for the standard module itself, so that what
a program reads, sets or patches on it is the standard module's.

Example::

    >>> from nbmp.popen_forkserver import Popen
"""

import importlib as _importlib
import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers: the standard names
    from multiprocessing.popen_forkserver import *  # noqa: F401,F403

# By name, not ``import multiprocessing.popen_forkserver``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_sys.modules[__name__] = _importlib.import_module("multiprocessing.popen_forkserver")
