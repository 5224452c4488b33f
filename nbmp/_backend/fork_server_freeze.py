"""Imported last by the fork server, after the modules it preloads: their objects move to the
garbage collector's permanent generation (``gc.freeze()``), once, in the server.

A worker forked from the server shares the pages of those objects (nbmp's, numpy's, torch's:
hundreds of thousands of them). Unfrozen, the worker's first full collection examines each
one, writing into its header: a copy of every page holding one, and ~90 ms of its start with
numpy and torch preloaded, wherever in the start that collection falls (importing the
``__main__`` module comes before nbmp's own first step there). Frozen in the server before
any fork, no worker ever examines them; what a worker makes itself is collected as usual. The
server's own collections skip them too (it never drops a module). CPython's documentation of
``gc.freeze`` advises exactly this for a process that forks.

Only ``nbmp._backend.forkserver.preload_frameworks`` names this module (as the last of the
server's preload list); importing it anywhere else would freeze that process's objects.
"""

from __future__ import annotations

import gc
import sys

# A free-threaded build (3.13t) freezes by marking every object: the very writes this avoids.
if "t" not in getattr(sys, "abiflags", ""):
    gc.freeze()
