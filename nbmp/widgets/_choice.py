"""Which front end a dashboard uses: the ``dashboard=`` keyword's values, the global
default (``nbmp.set_dashboard`` or the ``NBMP_DASHBOARD`` environment variable), and the
automatic choice (a widget in a Jupyter kernel with ipywidgets, text elsewhere)."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
from typing import Optional, Union

from .._base.util import display_kind

__all__ = ["Choice", "ENV_VAR", "check_dashboard", "set_dashboard", "resolve_frontend", "live_widget_updates"]

Choice = Union[bool, str, None]
ENV_VAR = "NBMP_DASHBOARD"
NAMES = ("auto", "widget", "text", "off")
_VALID = "True, False, None, 'auto', 'widget', 'text' or 'off'"
_ENV_WORDS = {"1": "on", "true": "on", "yes": "on", "on": "on", "0": "off", "false": "off", "no": "off"}

_global_choice: Optional[str] = None  # set by set_dashboard; None: the environment decides


def check_dashboard(choice: Choice, name: str = "dashboard") -> Optional[str]:
    """Validate a ``dashboard=`` value; return it normalised ("auto", "on", "widget",
    "text", "off"), or None for "use the global default"."""
    if choice is None:
        return None
    if choice is True or choice is False:
        return "on" if choice else "off"

    def written(value: str) -> str:  # as the user writes it: a keyword, or set_dashboard's argument
        return f"nbmp.set_dashboard({value})" if name == "set_dashboard" else f"{name}={value}"
    if isinstance(choice, str):
        if choice in NAMES:
            return choice
        raise ValueError(f"{written(repr(choice))} is not a dashboard choice: use {_VALID} "
                         f"(e.g. {written(repr('text'))} for a plain-text status, {written('False')} for none)")
    raise TypeError(f"{'nbmp.set_dashboard' if name == 'set_dashboard' else name} must be {_VALID}, "
                    f"not {type(choice).__name__} {choice!r}")


def set_dashboard(choice: Choice) -> None:
    """Set the dashboard used by every run that does not pass ``dashboard=`` itself.

    ``None`` goes back to the ``NBMP_DASHBOARD`` environment variable, else automatic.

    Example::

        >>> import nbmp
        >>> nbmp.set_dashboard("text")   # a status line and summary table, even in a notebook
        >>> nbmp.set_dashboard(False)    # no dashboard at all
        >>> nbmp.set_dashboard(None)     # back to the default (automatic)
    """
    global _global_choice
    _global_choice = check_dashboard(choice, "set_dashboard")


def _global_default() -> str:
    if _global_choice is not None:
        return _global_choice
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if not raw:
        return "auto"
    word = _ENV_WORDS.get(raw, raw)
    if word not in (*NAMES, "on"):
        raise ValueError(f"the environment variable {ENV_VAR}={raw!r} is not a dashboard choice: "
                         f"use one of auto, widget, text, off (or 1/0), or unset it")
    return word


def resolve_frontend(choice: Choice) -> str:
    """The front end a run gets: "widget", "text" or "off"."""
    wanted = check_dashboard(choice) or _global_default()
    if wanted in ("off", "text"):
        return wanted
    if wanted == "auto" and _in_worker():
        return "off"  # a nested run inside a worker: its parent's dashboard is the one to watch
    if wanted == "widget" and not _widgets_importable():
        raise ImportError("dashboard='widget' needs ipywidgets: pip install 'nbmp[notebook]' (or pass dashboard='text')")
    if _in_kernel() and _widgets_importable() and not _in_worker():
        return "widget"
    if wanted == "auto" and display_kind(sys.stderr) != "terminal":
        return "off"  # piped or logged output (CI, cron): no status lines mixed into it
    return "text"


def _in_kernel() -> bool:
    """Running in a Jupyter kernel's own process (not a worker forked from it)."""
    ipython = sys.modules.get("IPython")  # never import IPython just to ask
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _in_worker() -> bool:
    return multiprocessing.parent_process() is not None


def _widgets_importable() -> bool:
    return "ipywidgets" in sys.modules or importlib.util.find_spec("ipywidgets") is not None


def live_widget_updates() -> bool:
    """Whether widget updates sent from the dashboard's thread reach the front end while the cell blocks:
    ipykernel's IOPub ``BackgroundSocket`` and ``get_parent`` (6.29, 7.x; not an in-process kernel)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    kernel = getattr(shell, "kernel", None)
    iostream = sys.modules.get("ipykernel.iostream")
    background = getattr(iostream, "BackgroundSocket", None)
    return (background is not None and isinstance(getattr(kernel, "iopub_socket", None), background)
            and callable(getattr(kernel, "get_parent", None)))
