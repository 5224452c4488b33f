"""A worker's error as a notebook shows it, in a real ipykernel: the first block is the
worker's (its frame, the cell's line that raised, the error), nbmp's frames appear nowhere,
and nbmp's own errors show the user's line and the message."""

from __future__ import annotations

import os
import re
import sys

import pytest

import nbmp
from conftest import START_METHODS

# Python 3.10 re-raises the frames it caught: IPython hides nbmp's but for the last.
pytestmark = [pytest.mark.kernel, pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.11+")]

NBMP_DIR = os.path.dirname(os.path.abspath(nbmp.__file__))

FAILS = "import nbmp\ndef fails(i):\n    if i == 1:\n        raise ValueError('boom')\n    return i"

CALLS = {
    "spawn": "nbmp.spawn(fails, nprocs=2, start_method={method!r})",
    "Pool": "with nbmp.get_context({method!r}).Pool(2) as pool:\n    pool.map(fails, [0, 1])",
    "executor": ("with nbmp.ProcessPoolExecutor(2, mp_context=nbmp.get_context({method!r})) as ex:\n"
                 "    ex.submit(fails, 1).result()"),
    "%%nbmp": "%%nbmp -n 2 -m {method}\nif rank == 1:\n    raise ValueError('boom')",
}


def _blocks(error):
    """The shown traceback, colours stripped, cut into one text per exception of the chain."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    return re.split(r"The above exception was the direct cause of the following exception:", text)


def _no_nbmp_frames(shown):
    for path in (NBMP_DIR, NBMP_DIR.replace(os.path.expanduser("~"), "~", 1)):
        assert path not in shown, shown
    assert "skipping hidden" not in shown, shown  # not hidden: not there at all


@pytest.mark.parametrize("method", START_METHODS)
@pytest.mark.parametrize("call", list(CALLS))
def test_a_workers_error_leads_with_the_workers_frames(kernel, call, method):
    if call == "spawn" and sys.version_info >= (3, 14):
        pytest.skip("on 3.14+ IPython shows the stub frames that stand for the worker's without their source lines")
    kernel.run("%load_ext nbmp").raise_for_error()
    kernel.run(FAILS).raise_for_error()
    cell = kernel.run(CALLS[call].format(method=method), timeout=120)
    assert cell.error is not None
    blocks = _blocks(cell.error)
    first, shown = blocks[0], "".join(blocks)
    line = "line 2" if call == "%%nbmp" else "line 4"
    assert line in first and "raise ValueError('boom')" in first, first  # the worker's frame and the cell's line
    assert first.rstrip().rstrip('"').rstrip().endswith("ValueError: boom"), first  # the Pool's in quotes
    _no_nbmp_frames(shown)
    assert shown.rstrip().splitlines()[-1] == "ValueError: boom", shown


@pytest.mark.parametrize("code, ename, message", [
    ("nbmp.spawn(lambda i: os._exit(3), nprocs=1)", "ProcessExitedException", "process 0 terminated with exit code 3"),
    ("with nbmp.Pool(1) as pool:\n    pool.map(lambda i: os.kill(os.getpid(), signal.SIGKILL), [1])",
     "WorkerLostError", "SIGKILL"),
])
def test_nbmps_own_errors_show_the_users_line_not_nbmps_source(kernel, code, ename, message):
    kernel.run("import os, signal, nbmp").raise_for_error()
    cell = kernel.run(code, timeout=120)
    assert cell.error is not None and cell.error["ename"] == ename
    shown = "".join(_blocks(cell.error))
    assert code.splitlines()[-1].strip() in shown and message in shown, shown
    _no_nbmp_frames(shown)
