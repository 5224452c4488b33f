"""``multiprocessing.resource_sharer``, mirrored: the standard resource sharer (torch's shared
tensors hand their descriptors over through it).

The standard module itself (see ``nbmp._base.util.stand_for``).
"""

from multiprocessing.resource_sharer import *  # noqa: F401,F403  (its names, for type checkers)

from ._base.util import stand_for as _stand_for

_stand_for(__name__, "multiprocessing.resource_sharer")
