"""``multiprocessing.util``, mirrored: the very same functions and registries.

``register_after_fork``, ``Finalize`` and the loggers keep module-level state that
nbmp's processes share with the standard module's (an nbmp fork child runs the
standard after-fork callbacks), so these are the standard objects, not copies.
"""

from multiprocessing.util import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    DEBUG, INFO, SUBDEBUG, SUBWARNING, Finalize, ForkAwareLocal, ForkAwareThreadLock, close_all_fds_except,
    close_fds, debug, get_logger, get_temp_dir, info, is_abstract_socket_namespace, is_exiting,
    log_to_stderr, register_after_fork, spawnv_passfds, sub_debug, sub_warning,
)

__all__ = ["sub_debug", "debug", "info", "sub_warning", "get_logger", "log_to_stderr", "get_temp_dir",
           "register_after_fork", "is_exiting", "Finalize", "ForkAwareThreadLock", "ForkAwareLocal",
           "close_all_fds_except", "SUBDEBUG", "SUBWARNING"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from ._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.util")
