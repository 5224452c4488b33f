"""A notebook cell compiled to run in workers: the engine of the ``%%nbmp`` cell magic.

Under fork the worker inherits the notebook's namespace; under spawn and forkserver the globals
the cell names are shipped by value, checked before any process starts.
"""

from __future__ import annotations

import ast
import types
from typing import Any, Dict, Iterator, Optional, cast

from .._backend import pickling as _pickling

__all__ = ["CellProgram"]

# Names IPython puts in every namespace that a worker never needs.
_SHELL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "_ih", "_oh", "_dh", "_", "__", "___"})


class CellProgram:
    """``program(rank, world_size)`` runs the cell's code and returns its last expression's value."""

    def __init__(self, source: str, filename: str, user_ns: Dict[str, Any], start_method: str) -> None:
        tree = ast.parse(source, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        self.filename = filename
        self.body = compile(tree, filename, "exec")
        self.last = compile(ast.Expression(cast(ast.Expr, last).value), filename, "eval") if last else None
        # Under fork the namespace is inherited, not pickled: hold the notebook's own dict.
        self.namespace = user_ns if start_method == "fork" else _shipped_globals(self._codes(), user_ns)

    def _codes(self) -> Iterator[types.CodeType]:
        stack = [self.body] + ([self.last] if self.last else [])
        while stack:
            code = stack.pop()
            yield code
            stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))

    def __call__(self, rank: int, world_size: int) -> Any:
        namespace = self.namespace
        namespace["rank"], namespace["world_size"] = rank, world_size
        exec(self.body, namespace)
        return eval(self.last, namespace) if self.last is not None else None


def _shipped_globals(codes: Iterator[types.CodeType], user_ns: Dict[str, Any]) -> Dict[str, Any]:
    names = {name for code in codes for name in code.co_names} - _SHELL_NAMES
    shipped = {name: user_ns[name] for name in sorted(names) if name in user_ns}
    # Fail here, naming the variable, rather than in the middle of starting workers.
    _pickling.check_picklable(shipped, {f"notebook variable {name!r}": value for name, value in shipped.items()},
                              "ship it to spawned %%nbmp workers")
    return shipped
