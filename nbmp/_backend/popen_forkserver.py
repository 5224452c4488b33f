"""Starting a child from the fork server: the standard ``popen_forkserver.Popen``, whose exit
status is read once, whichever threads ask.

The server writes a child's exit status as one message on the child's sentinel. The standard
``poll`` reads it in whichever thread calls it; two at once (a Pool's ``join`` and a thread
checking its workers) each see the sentinel ready, one reads the status and the other the end
of the pipe, and stores 255 as the exit code: a worker that exited 0, or was killed, looked as
if it had exited with 255.
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
