"""``multiprocessing.popen_spawn_win32``, mirrored: the standard ``Popen`` for spawn on Windows (it
imports on Windows only, as the standard one).

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.popen_spawn_win32")
