"""``multiprocessing.forkserver``, mirrored: the standard forkserver (nbmp's forkserver
children are started by it, with nbmp preloaded).

nbmp defines nothing here: this module stands for the standard module itself, so that what
a program reads, sets or patches on it is the standard module's.

Example::

    >>> from nbmp.forkserver import set_forkserver_preload
"""

import importlib as _importlib
import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers: the standard names
    from multiprocessing.forkserver import *  # noqa: F401,F403

# By name, not ``import multiprocessing.forkserver``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_sys.modules[__name__] = _importlib.import_module("multiprocessing.forkserver")
