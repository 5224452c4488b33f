"""The stdlib mirror: nbmp's contexts, processes and channels, subclassed from
``multiprocessing`` (like loky's ``loky/backend/``), plus nbmp's pickler.

Its modules are listed in docs/design.md ("Layers"); it imports ``_base`` and ``_forking`` only.
"""

from . import cells, pickling, posix, process
from .context import default_context, plugin, register_factory, register_plugin
from .fork_report import ForkReport, doctor
from .pickling import PicklingError

__all__ = ["cells", "pickling", "posix", "process", "default_context", "register_factory", "register_plugin", "plugin",
           "ForkReport", "doctor", "PicklingError"]
