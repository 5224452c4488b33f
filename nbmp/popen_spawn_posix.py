"""``multiprocessing.popen_spawn_posix``, mirrored: the standard ``Popen`` for spawn on POSIX.

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from multiprocessing.popen_spawn_posix import *  # noqa: F401,F403  (its names, for type checkers)

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.popen_spawn_posix")
