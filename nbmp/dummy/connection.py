"""``multiprocessing.dummy.connection``, mirrored: the standard thread-backed one."""

from multiprocessing.dummy.connection import Client, Connection, Listener, Pipe  # noqa: F401  (the mirror of the standard module)

__all__ = ["Client", "Listener", "Pipe"]


# nbmp defines nothing here: this module stands for the standard module itself, so that
# what a program reads, sets or patches on it (``mock.patch("nbmp.dummy.connection.<name>")``, a
# private name) is the standard module's. Importing it gives the standard module.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

# By name, not ``import multiprocessing.dummy.connection``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_standard = _importlib.import_module("multiprocessing.dummy.connection")
_sys.modules[__name__] = _standard
