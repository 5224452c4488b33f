"""Ctrl-C in a terminal signals the whole foreground process group: the parent stops
the workers and raises KeyboardInterrupt once; no worker prints a traceback."""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

import nbmp
from conftest import START_METHODS, TIMEOUT

SCRIPT = """
import os, sys, time, nbmp
def sleeper(i):
    print("ready", os.getpid(), flush=True)
    time.sleep(120)
if __name__ == "__main__":
    try:
        nbmp.spawn(sleeper, nprocs=4, start_method={method!r})
    except KeyboardInterrupt:
        print("parent interrupted; children:", len(nbmp.active_children()), flush=True)
        raise
"""


def _start(source):
    # A session of its own: the test sends SIGINT to that process group, as a terminal does.
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "PYTHONPATH": os.getcwd()})


SLOW_SUPERVISOR_START = """
import time, nbmp._spawn.supervisor
_start = nbmp._spawn.supervisor.Supervisor.start
def _slow_start(self):  # the workers are ready before the run is: Ctrl-C lands in between
    _start(self)
    time.sleep(1.5)
nbmp._spawn.supervisor.Supervisor.start = _slow_start
"""


def _interrupt_after_the_workers_are_ready(source):
    proc = _start(source)
    pids = []
    try:
        while len(pids) < 4:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            pids.append(int(line.split()[-1]))
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode != 0
    assert "parent interrupted; children: 0" in out, (out, err)
    assert err.count("Traceback") == 1 and err.rstrip().endswith("KeyboardInterrupt")
    assert re.findall(r"^\[\d\] .*$", err, re.M) == []  # no line relayed from a worker
    assert [pid for pid in pids if psutil.pid_exists(pid)] == []


@pytest.mark.parametrize("method", START_METHODS)
def test_ctrl_c_on_the_process_group(method):
    _interrupt_after_the_workers_are_ready(SCRIPT.format(method=method))


def test_ctrl_c_while_the_run_starts():
    _interrupt_after_the_workers_are_ready(SLOW_SUPERVISOR_START + SCRIPT.format(method="fork"))


def test_interrupt_while_joining_a_context_stops_workers():
    def sleeper(i):
        time.sleep(TIMEOUT * 4)

    context = nbmp.spawn(sleeper, nprocs=2, join=False)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)  # a KeyboardInterrupt in join
    try:
        with pytest.raises(KeyboardInterrupt):
            context.join()
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert all(p.exitcode == -signal.SIGTERM for p in context.processes)
    assert context.results is None


def _open_fds():
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open fds through /proc")
def test_interrupt_while_the_supervisor_starts_stops_the_run_through_it(monkeypatch):
    # The race CI once hit: SIGINT landed in Supervisor.start after its thread was
    # running, and cleaning up closed the pipes that thread was reading (EBADF).
    from nbmp._spawn import supervisor as _supervisor

    start = _supervisor.Supervisor.start

    def start_then_interrupt(self):
        start(self)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the interrupt is due here, with the supervisor already running

    def sleeper(i):
        time.sleep(TIMEOUT * 4)

    monkeypatch.setattr(_supervisor.Supervisor, "start", start_then_interrupt)
    fds = _open_fds()
    with pytest.raises(KeyboardInterrupt):
        nbmp.spawn(sleeper, nprocs=2, output="prefix")
    assert nbmp.active_children() == []
    assert [t.name for t in threading.enumerate() if t.name.startswith("nbmp-spawn-")] == []
    gc.collect()  # the processes' sentinels close with them
    assert _open_fds() == fds  # every pipe closed once, by the supervisor
