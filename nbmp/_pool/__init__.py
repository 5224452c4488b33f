"""nbmp's Pool: the standard Pool with cloudpickle, that never hangs on a dead worker.

Its modules are listed in docs/design.md ("Layers"); a peer of ``_spawn``, neither imports the other.
"""

from .._base.exceptions import RemoteTaskError
from .errors import WorkerLostError
from .executor import ProcessPoolExecutor
from .pool import Pool, parallel_map
from .serial import ForkShared, SerialExecutor

__all__ = ["Pool", "parallel_map", "RemoteTaskError", "WorkerLostError", "SerialExecutor", "ForkShared", "ProcessPoolExecutor"]
