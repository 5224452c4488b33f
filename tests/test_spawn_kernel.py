"""nbmp.spawn as a notebook user sees it, in a real ipykernel: workers' lines arrive
whole in the calling cell, and the interrupt button stops the workers cleanly."""

from __future__ import annotations

import inspect
import time

import psutil
import pytest

from conftest import START_METHODS, TIMEOUT
from helpers import as_jupyterlab_shows
from test_spawn_output import _chatty, _check_whole_lines

pytestmark = pytest.mark.kernel

# The same chatty worker as the terminal tests, defined in a cell.
CHATTY = "import os, nbmp\n" + inspect.getsource(_chatty)


@pytest.mark.parametrize("method", START_METHODS)
def test_chatty_workers_lines_arrive_whole_in_the_calling_cell(kernel, method):
    kernel.run(CHATTY).raise_for_error()
    cell = kernel.run(f"nbmp.spawn(_chatty, args=(30,), nprocs=4, start_method={method!r})")
    cell.raise_for_error()
    assert cell.result == "[0, 1, 2, 3]"
    _check_whole_lines(cell.stdout, 4, 30)  # kernel.run keeps only this cell's messages
    assert cell.stderr == ""


def test_lambda_and_exception_in_a_cell(kernel):
    cell = kernel.run("import nbmp\nnbmp.spawn(lambda i: i * i, nprocs=4)")
    cell.raise_for_error()
    assert cell.result == "[0, 1, 4, 9]"
    cell = kernel.run("def boom(i):\n    raise KeyError(f'missing {i}')\nnbmp.spawn(boom, nprocs=2, start_method='spawn')")
    assert cell.error["ename"] == "ProcessRaisedException"
    shown = "\n".join(cell.error["traceback"])
    assert "-- Process" in shown and "KeyError: 'missing" in shown
    assert "raise KeyError(f'missing {i}')" in shown  # the cell's source line, from a spawned worker


SLEEPERS = '''
import os, time, nbmp
def sleeper(i):
    print("ready", os.getpid(), flush=True)
    time.sleep(120)
nbmp.spawn(sleeper, nprocs=4, start_method={method!r})
'''


def _run_and_interrupt(kernel, code, ready):
    """Send ``code``, interrupt once ``ready`` workers said so; return (stdout, stderr, error)."""
    msg_id = kernel.client.execute(code)
    stdout, stderr, error, interrupted = "", "", None, False
    deadline = time.monotonic() + TIMEOUT * 2
    while time.monotonic() < deadline:
        msg = kernel.client.get_iopub_msg(timeout=TIMEOUT)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                stdout += content["text"]
            else:
                stderr += content["text"]
            if not interrupted and stdout.count("ready") >= ready:
                kernel.manager.interrupt_kernel()
                interrupted = True
        elif kind == "error":
            error = content
        elif kind == "status" and content["execution_state"] == "idle":
            break
    kernel.client.get_shell_msg(timeout=TIMEOUT)
    return stdout, stderr, error


@pytest.mark.parametrize("method", START_METHODS)
def test_interrupt_button_stops_workers_and_kernel_stays_usable(kernel, method):
    stdout, stderr, error = _run_and_interrupt(kernel, SLEEPERS.format(method=method), ready=4)
    assert error is not None and error["ename"] == "KeyboardInterrupt"
    assert "KeyboardInterrupt" not in stderr and "Traceback" not in stderr  # no worker printed one
    pids = [int(line.split()[-1]) for line in stdout.splitlines() if "ready" in line]
    assert len(pids) == 4
    assert [pid for pid in pids if psutil.pid_exists(pid)] == []  # stopped before the interrupt surfaced
    cell = kernel.run("nbmp.spawn(lambda i: i + 1, nprocs=2)")
    cell.raise_for_error()
    assert cell.result == "[1, 2]"


def test_late_lines_of_a_non_joined_run_land_in_their_own_cell(kernel):
    kernel.run("import time, nbmp").raise_for_error()
    first = kernel.client.execute(
        "ctx = nbmp.spawn(lambda i: (time.sleep(1.5), print('late', i)), nprocs=2, join=False)")
    time.sleep(0.5)
    second = kernel.client.execute("time.sleep(2.5); print('second cell')")
    where = {}
    deadline = time.monotonic() + TIMEOUT
    while len(where) < 3 and time.monotonic() < deadline:
        msg = kernel.client.get_iopub_msg(timeout=TIMEOUT)
        if msg["msg_type"] == "stream":
            for line in msg["content"]["text"].splitlines():
                where[line] = msg["parent_header"].get("msg_id")
    for _ in range(2):
        kernel.client.get_shell_msg(timeout=TIMEOUT)
    assert where == {"[0] late 0": first, "[1] late 1": first, "second cell": second}
    kernel.run("ctx.join()").raise_for_error()


def test_logging_configured_in_the_kernel_is_relayed_whole(kernel):
    # basicConfig's handler holds ipykernel's OutStream, which in a forked child would
    # forward over ZeroMQ instead of through the worker's fd 2.
    code = ("import logging, nbmp\nlogging.basicConfig(force=True)\n"
            "nbmp.spawn(lambda i: logging.warning('worker %d says hi', i), nprocs=4)")
    cell = kernel.run(code)
    cell.raise_for_error()
    assert sorted(cell.stderr.splitlines()) == [f"[{i}] WARNING:root:worker {i} says hi" for i in range(4)]


BARS = r"""
import sys, time, nbmp
def bar(i):
    for k in range(6):
        sys.stderr.write(f"\r{20 * k:3d}%|{'#' * k}{' ' * (5 - k)}|")
        sys.stderr.flush()
        time.sleep(0.3)
    sys.stderr.write("\n")
    print("done", i)
    return i
nbmp.spawn(bar, nprocs=2, dashboard=False)
"""


def test_progress_bars_redraw_in_place_in_the_calling_cell(kernel):
    cell = kernel.run(BARS)
    cell.raise_for_error()
    assert cell.result == "[0, 1]"
    messages = [m["content"]["text"] for m in cell.messages
                if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    # While they ran: one line holding both bars, redrawn several times
    redraws = [t for t in messages if "[0] " in t and "[1] " in t and "\n" not in t]
    assert len(redraws) >= 3, messages
    # What the cell shows at the end: each bar's last state, whole, nothing left of the redraws
    assert sorted(as_jupyterlab_shows(cell.stderr)) == ["[0] 100%|#####|", "[1] 100%|#####|"]
    assert sorted(cell.stdout.splitlines()) == ["[0] done 0", "[1] done 1"]

