"""``multiprocessing.resource_sharer``, mirrored: the standard resource sharer (torch's
shared tensors hand their descriptors over through it).

nbmp defines nothing here: this module stands for the standard module itself, so that what
a program reads, sets or patches on it is the standard module's.

Example::

    >>> from nbmp.resource_sharer import DupFd
"""

import importlib as _importlib
import sys as _sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers: the standard names
    from multiprocessing.resource_sharer import *  # noqa: F401,F403

# By name, not ``import multiprocessing.resource_sharer``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_sys.modules[__name__] = _importlib.import_module("multiprocessing.resource_sharer")
