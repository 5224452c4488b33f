"""``multiprocessing.forkserver``, mirrored: the standard forkserver (nbmp's forkserver children are
started by it, with nbmp preloaded).

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from multiprocessing.forkserver import *  # noqa: F401,F403  (its names, for type checkers)

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.forkserver")
