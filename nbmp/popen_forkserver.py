"""``multiprocessing.popen_forkserver``, mirrored: the standard ``Popen`` for forkserver.

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from multiprocessing.popen_forkserver import *  # noqa: F401,F403  (its names, for type checkers)

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.popen_forkserver")
