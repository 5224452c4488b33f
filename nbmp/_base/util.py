"""Small helpers every layer uses, in one place.

Like ``multiprocessing.util``: nothing here knows about workers, runs or pools.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import signal
import sys
import time
import types
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, TextIO, Tuple

ISSUES = "https://github.com/nbmp-dev/nbmp/issues"  # where an error that is nbmp's own bug asks to be reported

__all__ = ["ISSUES", "space", "format_bytes", "signal_name", "display_kind", "LiveText", "fixup_module_metadata", "falls_back_to", "stand_for", "name_of",
           "tree", "join_tree"]


# This process's tree: its root's pid and a secret of 128 random bits, which names the tree's
# shared-memory janitor. A forked child inherits it; nbmp's other children are handed it in
# their Launch (join_tree); a process that is neither is the root of a tree of its own.
_tree = f"{os.getpid()}-{secrets.token_hex(16)}"


def tree() -> str:
    """This process's tree key, ``"<root pid>-<secret>"`` (the secret is never printed)."""
    return _tree


def join_tree(key: str) -> None:
    """Make ``key`` (the tree of the process that started this one) this process's tree."""
    global _tree
    _tree = key


def space(directory: str) -> Tuple[int, int]:
    """(total, free) bytes of the filesystem holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def format_bytes(n: Optional[float]) -> str:
    """A size in binary units: ``12 B``, ``1.5 KiB``, ``3.1 GiB``, up to TiB; ``-`` for None."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def name_of(fn: Any) -> str:
    """How a run names its function: ``train``, ``Model.step``, or the callable's type."""
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__)


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9, ``SIGRTMIN+1`` for a real-time signal, ``signal N`` for a number no
    signal has (``-Process.exitcode`` of a process killed by a signal)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
        return f"SIGRTMIN+{signum - low}" if low <= signum <= high else f"signal {signum}"


def display_kind(stream: Any) -> Optional[str]:
    """Who watches ``stream``: ``"terminal"`` (a tty: a line can be redrawn in place, and
    lines above it with ANSI cursor moves), ``"notebook"`` (a Jupyter kernel's stream: a
    carriage return redraws the last line, nothing more), or None (a file, a pipe, a log).
    """
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no isatty, or closed
        if stream.isatty():
            return "terminal"
    return "notebook" if type(stream).__module__.startswith("ipykernel") else None


class LiveText:
    """Text redrawn in place on ``stream`` (None: the current ``sys.stderr``), as tqdm draws
    its bar, at most every ``paces[kind]`` seconds for the stream's :func:`display_kind`.
    A kind without a pace (a log, a pipe) gets only what is drawn ``final``, as one line.

    The text is one line, rewritten after a carriage return, the cursor left at its end (a
    line written by another lands after it, not over it). With ``rows=True``, on a terminal,
    it is one row per item below the output, redrawn with cursor moves, the cursor left on
    the line below: for a writer that prints all else on the stream itself after
    :meth:`clear` (the moves would erase another's line).
    """

    def __init__(self, stream: Optional[TextIO], paces: Dict[str, float], rows: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        kind = display_kind(self.stream)
        self.pace = paces.get(kind or "")
        self.rows = rows and kind == "terminal"
        self.clock = clock
        self.shown: List[str] = []  # what is on screen
        self._drawn_at = -1e9
        self._erase = ""  # what takes it off the screen

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def draw(self, texts: Sequence[str], final: bool = False) -> None:
        """Show ``texts`` (side by side on one line, or a row each) instead of what is shown,
        if the pace allows it now; ``final``: in any case, and on every display kind."""
        texts, now = list(texts), self.clock()
        if texts == self.shown or not final and (self.pace is None or now - self._drawn_at < self.pace):
            return
        if self.rows:
            fitted = self._fit(texts)
            self._write(self._erase + "".join(row + "\n" for row in fitted))
            self._erase = f"\r\x1b[{len(fitted)}A\x1b[J" if fitted else ""
        else:
            line = "   ".join(texts)
            pad = " " * (len(self._erase) - 2 - len(line))  # blanks over the rest of a longer line shown
            self._write(("" if self.pace is None else "\r") + line + pad + ("\r" + line if pad else ""))
            self._erase = f"\r{' ' * len(line)}\r" if line else ""
        self.shown, self._drawn_at = texts, now

    def clear(self) -> None:
        """Take what is shown off the screen (it is drawn again at the next :meth:`draw`)."""
        self._write(self._erase)
        self.shown, self._erase = [], ""

    def close(self) -> None:
        """Leave what is shown as the final line."""
        self._write("\n" if self.shown and not self.rows else "")
        self.shown, self._erase = [], ""

    def _fit(self, rows: List[str]) -> List[str]:
        """Rows cut to the terminal's width (a wrapped row would throw off the cursor moves
        that redraw them) and as many as its height allows (rows scrolled off the top
        could not be redrawn)."""
        try:
            size = os.get_terminal_size(self.stream.fileno())
            width, height = size.columns or 80, size.lines or 24  # 0: a terminal that does not say
        except (AttributeError, OSError, ValueError):
            width, height = 80, 24
        room = max(2, height - 2)
        if len(rows) > room:
            rows = rows[:room - 1] + [f"... and {len(rows) - room + 1} more"]
        return [row[:max(1, width - 1)] for row in rows]

    def _write(self, text: str) -> None:
        if text:
            with contextlib.suppress(OSError, ValueError):  # a closed stream must not break the run
                self.stream.write(text)
                self.stream.flush()


def fixup_module_metadata(module_name: str, namespace: Dict[str, Any], names: Iterable[str]) -> None:
    """Make each class and function among ``names`` that a private submodule defines report
    ``module_name`` and its exported name, as trio's ``fixup_module_metadata`` does (pickle finds it
    there too). ``__name__`` is left alone (``nbmp.Process`` names processes ``Process-N``), and
    bound methods keep theirs, as the standard module's do."""
    for name in names:
        obj = namespace[name]
        if isinstance(obj, (type, types.FunctionType)) and obj.__module__.startswith(module_name + "."):
            obj.__module__ = module_name
            obj.__qualname__ = name


def falls_back_to(namespace: Dict[str, Any], standard_name: str) -> Callable[[str], Any]:
    """A mirror module's ``__getattr__`` (PEP 562): a name it does not define is read from the standard
    module at each access. That module is imported by name (a program may have put nbmp in the
    package's place) and kept in ``namespace`` as ``_standard``, where nbmp's pickler finds it."""
    standard = namespace["_standard"] = importlib.import_module(standard_name)
    mirror_name = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if not (name.startswith("__") and name.endswith("__")):  # a module's own dunders are its own
            with contextlib.suppress(AttributeError):  # one lookup: a lazy attribute is made once
                return getattr(standard, name)
        raise AttributeError(f"module {mirror_name!r} has no attribute {name!r} (nor has {standard_name!r})")
    return __getattr__


def stand_for(mirror_name: str, standard_name: str) -> None:
    """Make the mirror module ``mirror_name``, being imported, the standard module itself (for a mirror
    where nbmp defines nothing), so what a program patches on it is the standard module's; imported
    by name, as in :func:`falls_back_to`."""
    sys.modules[mirror_name] = importlib.import_module(standard_name)
