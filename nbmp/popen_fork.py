"""``multiprocessing.popen_fork``, mirrored: the standard ``Popen`` for fork (nbmp's own is
``nbmp._backend.popen_fork``).

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from multiprocessing.popen_fork import *  # noqa: F401,F403  (its names, for type checkers)

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.popen_fork")
