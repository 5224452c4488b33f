"""Notebook cell sources for workers' tracebacks.

IPython compiles each cell under a made-up filename and keeps its source only in the
kernel's ``linecache``. A forked worker inherits that cache; a spawned one does not, so
its tracebacks would show no source. nbmp ships the cells' linecache entries with every
process it starts by pickling (small: the text of the cells run so far), and the parent
labels frames of those files as IPython does: ``Cell In[5], line 3``.
"""

from __future__ import annotations

import linecache
import re
import sys
from typing import Any, Callable, Dict, Optional, cast

__all__ = ["cell_sources", "install_cell_sources", "label_cells"]

# Cells sent with a process, at most: a notebook's cells are small, a runaway is not.
_MAX_BYTES = 4 << 20
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _filename_map() -> Dict[str, int]:
    if "IPython" not in sys.modules:  # never import IPython to find out
        return {}
    shell = sys.modules["IPython"].get_ipython()
    return dict(getattr(getattr(shell, "compile", None), "_filename_map", None) or {})


def cell_sources() -> Dict[str, Any]:
    """The linecache entries of the notebook cells run so far, newest kept first."""
    entries: Dict[str, Any] = {}
    total = 0
    for name in sorted(_filename_map(), key=cast(Callable[[str], int], _filename_map().get), reverse=True):  # names come from the map
        entry = linecache.cache.get(name)
        if entry is None or len(entry) != 4:
            continue
        total += entry[0]
        if total > _MAX_BYTES:
            break
        entries[name] = entry
    return entries


def install_cell_sources(entries: Optional[Dict[str, Any]]) -> None:
    """Make ``entries`` (from :func:`cell_sources`) visible to this process's tracebacks."""
    for name, entry in (entries or {}).items():
        linecache.cache.setdefault(name, entry)


def label_cells(text: str) -> str:
    """Rewrite ``File "/tmp/ipykernel_1/2.py", line 3`` as ``Cell In[5], line 3`` in a traceback."""
    names = _filename_map()
    if not names:
        return text

    def label(match: "re.Match[str]") -> str:
        count = names.get(match["file"])
        return match[0] if count is None else f"Cell In[{count}], line {match['line']}"

    return _FRAME.sub(label, text)
