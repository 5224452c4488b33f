"""``multiprocessing.resource_tracker``, mirrored: the standard resource tracker (nbmp's named
semaphores and segments are registered with it).

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from multiprocessing.resource_tracker import *  # noqa: F401,F403  (its names, for type checkers)

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.resource_tracker")
