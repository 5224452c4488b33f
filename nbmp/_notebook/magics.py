"""IPython magics: ``%load_ext nbmp``, the ``%%nbmp`` cell magic and ``%nbmp`` commands.

Only this module imports IPython, and only when the extension is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, TypeVar

from IPython.core.magic import Magics, magics_class

if TYPE_CHECKING:  # the signatures used here (IPython annotates these loosely or not at all)
    import argparse

    from IPython.core.interactiveshell import InteractiveShell

    _F = TypeVar("_F", bound=Callable[..., Any])

    def cell_magic(func: _F) -> _F: ...
    def line_magic(name: str) -> Callable[[_F], _F]: ...
    def magic_arguments(name: Optional[str] = None) -> Callable[[_F], _F]: ...
    def argument(*args: Any, **kwargs: Any) -> Callable[[_F], _F]: ...  # Any: argparse's add_argument
    def parse_argstring(magic_func: Callable[..., Any], argstring: str, *, partial: bool = False) -> argparse.Namespace: ...
else:
    from IPython.core.magic import cell_magic, line_magic
    from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .._base.exceptions import raised_at_caller
from .cellprogram import CellProgram

__all__ = ["NbmpMagics", "load", "unload"]


@magics_class
class NbmpMagics(Magics):
    """``%%nbmp -n N [-m METHOD] [-o NAME] [--cluster ADDRESS]`` and ``%nbmp status|kill|shm|doctor``."""

    shell: InteractiveShell  # IPython types it Optional; magics only run from a shell, which sets it

    @magic_arguments()
    @argument("-n", "--nprocs", type=int, default=None, help="number of workers (default: the number of cores)")
    @argument("-m", "--start-method", default=None, help="fork (default), spawn or forkserver")
    @argument("-o", "--out", default=None, help="also store the list of per-rank values in this variable")
    @argument("-c", "--cluster", default=None,
              help="a Dask scheduler address: one rank per worker there (default: nbmp.set_cluster's, else here)")
    @cell_magic
    @raised_at_caller
    def nbmp(self, line: str, cell: str) -> List[Any]:
        """Run the cell in N workers with ``rank`` and ``world_size`` defined.

        Returns the value of the cell's last expression in each worker, ordered by rank::

            %%nbmp -n 3
            rank * 10          # -> [0, 10, 20]
        """
        from .. import _cluster, _spawn
        from .._backend import context as _context
        from .._base import checks as _checks
        args = parse_argstring(self.nbmp, line)
        remote = _cluster.wanted(args.cluster)  # on a cluster: its worker count, and globals shipped as under spawn
        nprocs = args.nprocs if args.nprocs is not None else \
            _cluster.worker_count(args.cluster) if remote else _context.default_context.cpu_count()
        _checks.positive_int(nprocs, "%%nbmp -n", "%%nbmp -n 4")
        method = "spawn" if remote else _context.default_context.get_context(args.start_method).get_start_method()
        source = self.shell.transform_cell(cell)
        filename = self.shell.compile.cache(source, self.shell.execution_count, raw_code=cell)
        program = CellProgram(source, filename, self.shell.user_ns, method)
        results: List[Any] = _spawn.spawn(program, args=(nprocs,), nprocs=nprocs, start_method=method, cluster=args.cluster)
        if args.out:
            self.shell.user_ns[args.out] = results
        return results

    @line_magic("nbmp")
    def nbmp_line(self, line: str) -> Any:
        """``%nbmp status`` | ``kill`` | ``shm`` | ``doctor``: look at or stop nbmp's work."""
        command, _, rest = line.strip().partition(" ")
        action = _COMMANDS.get(command)
        if action is None:
            raise ValueError(f"unknown %nbmp command {command!r}; use one of {sorted(_COMMANDS)}")
        return action()


def _kill() -> str:
    from .._spawn import stop_all
    stopped = stop_all()
    return f"stopped {len(stopped)} nbmp worker process(es)" + (f": pids {stopped}" if stopped else "")


def _status() -> None:
    from ..widgets import Dashboard
    Dashboard().display()


def _shm() -> Any:
    from .._sharing import shm_usage
    return shm_usage()


def _doctor() -> Any:
    from .._backend import doctor
    return doctor()


_COMMANDS: Dict[str, Callable[[], Any]] = {"status": _status, "kill": _kill, "shm": _shm, "doctor": _doctor}


def load(ipython: InteractiveShell) -> None:
    ipython.register_magics(NbmpMagics)


def unload(ipython: InteractiveShell) -> None:
    from .._cluster import close_owned_clients
    from .._spawn import stop_all
    stop_all()
    close_owned_clients()
    magics = ipython.magics_manager.magics
    for kind in ("cell", "line"):
        magics[kind].pop("nbmp", None)
