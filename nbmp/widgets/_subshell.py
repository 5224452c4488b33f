"""Letting the Stop button work while its cell is blocked (ipykernel 7.4+ only).

A click is a shell message, which the main thread handles only between cells. For the length of a
run nbmp opens a kernel subshell (JEP 91) and points the Stop button's comm at it (ipykernel 7.4
routes a comm's messages to the subshell it last spoke from). These ipykernel internals are probed
first; where one is missing, the click is handled when the cell finishes.
"""

from __future__ import annotations

import contextlib
import concurrent.futures
import sys
import threading
from typing import Any, Optional

__all__ = ["ClickRoute"]

_WAIT = 5.0  # seconds to wait for the kernel's shell-channel thread


class ClickRoute:
    """A kernel subshell that handles one widget's messages while the cell is busy."""

    def __init__(self, manager: Any, subshell_id: str) -> None:  # Any: ipykernel's subshell manager (untyped)
        self._manager = manager
        self.subshell_id = subshell_id

    @classmethod
    def open(cls, widget: Any) -> Optional["ClickRoute"]:
        """Route ``widget``'s incoming messages to a new subshell; None where unsupported."""
        manager = _subshell_manager()
        comm = getattr(widget, "comm", None)
        if manager is None or comm is None or not hasattr(comm, "_reply_subshell_for"):
            return None
        try:
            subshell_id = _on_shell_channel(manager, manager._create_subshell)
        except Exception:
            return None
        comm._reply_subshell_id = subshell_id
        return cls(manager, subshell_id)

    def close(self) -> None:
        """Delete the subshell (its thread ends); idempotent."""
        subshell_id, self.subshell_id = self.subshell_id, ""
        if not subshell_id:
            return
        # From inside the subshell (a Stop click that ended the run) the deletion, which joins this very thread, must not be waited for.
        wait = not threading.current_thread().name.endswith(subshell_id)
        with contextlib.suppress(Exception):  # already gone with the kernel
            _on_shell_channel(self._manager, lambda: self._manager._delete_subshell(subshell_id), wait)


def _subshell_manager() -> Optional[Any]:  # Any: ipykernel's subshell manager (untyped)
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel = getattr(shell, "kernel", None)
    if not getattr(kernel, "_supports_kernel_subshells", False):
        return None
    manager = getattr(getattr(kernel, "shell_channel_thread", None), "manager", None)
    needed = ("_create_subshell", "_delete_subshell", "_shell_channel_io_loop")
    return manager if all(hasattr(manager, name) for name in needed) else None


def _on_shell_channel(manager: Any, fn: Any, wait: bool = True) -> Any:
    """Run ``fn`` on the kernel's shell-channel thread (the subshell manager's home)."""
    done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()

    def call() -> None:
        try:
            done.set_result(fn())
        except BaseException as err:  # hand it to the waiting thread
            done.set_exception(err)

    manager._shell_channel_io_loop.add_callback(call)
    return done.result(_WAIT) if wait else None
