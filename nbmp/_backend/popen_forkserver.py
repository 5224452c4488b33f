"""Starting a child from the fork server: the standard ``popen_forkserver.Popen``, whose exit
status is read once, whichever threads ask.

The status is one message on the sentinel: with the standard ``poll``, of two threads polling at
once, the one that reads the end of the pipe stores 255 as the exit code.
"""

from __future__ import annotations

import os
import threading
from multiprocessing import connection, popen_forkserver
from typing import Optional

__all__ = ["Popen"]

_reading = threading.Lock()  # held only while a ready status is read: never while waiting


class Popen(popen_forkserver.Popen):
    def poll(self, flag: int = os.WNOHANG) -> Optional[int]:
        if self.returncode is None:
            if not connection.wait([self.sentinel], 0 if flag == os.WNOHANG else None):
                return None
            with _reading:
                if self.returncode is None:  # not read meanwhile by another thread
                    try:
                        self.returncode = popen_forkserver.forkserver.read_signed(self.sentinel)  # type: ignore[attr-defined]  # stdlib private
                    except (OSError, EOFError):  # the server itself died
                        self.returncode = 255
        return self.returncode
