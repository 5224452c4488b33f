"""IPython's extension hooks for ``%load_ext nbmp`` and ``%unload_ext nbmp``.

IPython looks them up on the ``nbmp`` package, which imports them from here; defined here,
not there, they are not names of nbmp's own (``nbmp.__all__`` holds the standard package's
names and nbmp's API, as CPython's test of ``multiprocessing.__all__`` checks). IPython
itself is imported only when a hook runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: "InteractiveShell") -> None:
    """``%load_ext nbmp``: register the ``%%nbmp`` and ``%nbmp`` magics (cheap: nothing starts).

    Example::

        %load_ext nbmp
        %%nbmp -n 4
        rank * rank            # -> [0, 1, 4, 9]
    """
    from .magics import load
    load(ipython)


def unload_ipython_extension(ipython: "InteractiveShell") -> None:
    """``%unload_ext nbmp``: stop every nbmp worker still running and remove the magics.

    Example::

        %unload_ext nbmp
    """
    from .magics import unload
    unload(ipython)
