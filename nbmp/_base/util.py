"""Small helpers every layer uses, in one place.

Like ``multiprocessing.util``: nothing here knows about workers, runs or pools.
"""

from __future__ import annotations

import os
from typing import Tuple

__all__ = ["space"]


def space(directory: str) -> Tuple[int, int]:
    """(total, free) bytes of the filesystem holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
