"""The stdlib mirror: nbmp's contexts, processes and channels, subclassed from
``multiprocessing`` (like loky's ``loky/backend/``), plus nbmp's pickler.

``context`` (fork first; hands out nbmp's objects), ``process`` (process classes that
cross by cloudpickle), ``popen_fork`` (fork with nbmp's fork handlers around it),
``connection`` and ``queues`` (channels that pickle with nbmp's pickler),
``pickling`` (cloudpickle plus a reducer table), ``cells`` (notebook cell sources for
workers' tracebacks), ``posix`` (parent-death signals, SIGINT, C stdio) and
``fork_report`` (``nbmp.doctor``). Imports ``_base`` and ``_forking`` only.
"""

from . import cells, pickling, posix, process
from .context import default_context, plugin, register_factory, register_plugin
from .fork_report import ForkReport, doctor
from .pickling import PicklingError

__all__ = ["cells", "pickling", "posix", "process", "default_context", "register_factory", "register_plugin", "plugin",
           "ForkReport", "doctor", "PicklingError"]
