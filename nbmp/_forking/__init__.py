"""Fork safety: the layer every nbmp fork and every nbmp child goes through.

Its modules are listed in docs/design.md ("Layers"); above ``_base`` only, called by the backend's
``popen_fork`` and ``process``.
"""

from . import handlers, launch, registry, threads
from .handlers import ForkHandler, ForkSafetyWarning, Worker
from .launch import Launch
from .registry import (ForkHandle, ForkLock, after_fork_in_child, after_fork_in_parent, before_fork, child_started,
                       hazards, prepare_fork_server, register_fork_handler, seed, set_worker_threads,
                       stamp, start_child, user_handlers, worker_threads_setting)
from .threads import ThreadInfo, native_threads, python_threads, user_threads

__all__ = ["handlers", "launch", "registry", "threads",
           "ForkHandler", "ForkSafetyWarning", "Worker", "Launch",
           "ForkHandle", "ForkLock", "register_fork_handler", "seed", "set_worker_threads", "worker_threads_setting",
           "user_handlers", "hazards", "stamp", "before_fork", "after_fork_in_parent", "after_fork_in_child",
           "child_started", "start_child", "prepare_fork_server",
           "ThreadInfo", "python_threads", "native_threads", "user_threads"]
