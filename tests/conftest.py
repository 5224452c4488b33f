"""Fixtures every test gets: a per-start-method parameter, and a guard that fails a
test which leaves behind what it made: child processes, nbmp threads, shared-memory
segments (as the janitor knows them, memfd ones included), /dev/shm entries or fork
handlers. What other processes on the machine do meanwhile is never counted."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from typing import Iterator, Set

import multiprocessing
import pytest
from multiprocessing import util

import nbmp
from leaks import PROBES, child_pids, describe, left_behind, name_own_semaphores, snapshot  # noqa: F401
from nbmp._sharing._ledger import live_segments

name_own_semaphores()  # the suite's semaphores are sem.mp-test<pid>-*: told apart from anyone else's

# The suite's own temporary directory, removed when it ends: what a process a test kills cannot
# remove (a fork server's, manager's or worker's socket in its pymp-* directory) goes with it.
TMP = tempfile.mkdtemp(prefix="nbmpt-")
os.environ["TMPDIR"] = tempfile.tempdir = TMP
# After the standard module's own clean-up at exit (priority -100), which removes this process's.
util.Finalize(None, shutil.rmtree, (TMP,), {"ignore_errors": True}, exitpriority=-200)


def nbmp_threads() -> Set[str]:
    """nbmp's own threads alive in this process (they are all named ``nbmp-...``)."""
    return {f"{t.name} ({t.ident})" for t in threading.enumerate() if t.name.startswith("nbmp")}


def janitor_segments() -> Set[str]:
    """Live segments of this process tree, as its janitor knows them (no janitor started)."""
    return {f"{seg} ({size} bytes)" for seg, size in live_segments().items()}


GUARD = {**PROBES, "nbmp threads": nbmp_threads, "shared-memory segments": janitor_segments}

# One timeout for every join and get in the suite (seconds).
TIMEOUT = 30

START_METHODS = nbmp.get_all_start_methods()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves processes, threads, segments, /dev/shm entries or fork
    handlers of its own behind; each leftover is named."""
    before = snapshot(GUARD)
    handlers_before = nbmp._forking.user_handlers()
    yield
    handlers_left = [h for h in nbmp._forking.user_handlers() if h not in handlers_before]
    for handler in handlers_left:
        nbmp._forking.registry._user_handlers.remove(handler)
    leaks = left_behind(before, GUARD)
    assert not leaks, f"test left behind {describe(leaks)}"
    assert not handlers_left, f"test left fork handlers registered (call .remove() on the handle): {handlers_left}"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytest's own temporary directories in the suite's too, at a path shorter than pytest's
    default: tests put sockets in ``tmp_path``, and a socket's path has at most 107 bytes."""
    if config.option.basetemp is None:
        config.option.basetemp = os.path.join(TMP, "p")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The suite runs as from a terminal, whatever it was started with: a shell starts a
    background job (``make test &``, ``nohup``) with SIGINT ignored, Python then installs no
    handler, and an ignored signal stays ignored in the scripts a test starts; the interrupts
    that tests send to themselves or to such a script never arrived (they waited for their timeout)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the test, whatever an earlier test left; put back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(params=START_METHODS)
def start_method(request: pytest.FixtureRequest) -> str:
    """Each behaviour test runs once per start method."""
    return request.param


@pytest.fixture(params=nbmp.get_all_sharing_strategies())
def strategy(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run once per sharing strategy, restoring the one in force after."""
    before = nbmp.get_sharing_strategy()
    nbmp.set_sharing_strategy(request.param)
    yield request.param
    nbmp.set_sharing_strategy(before)


@pytest.fixture
def ctx(start_method: str) -> multiprocessing.context.BaseContext:
    return nbmp.get_context(start_method)


@pytest.fixture(scope="module")
def kernel():
    """One real ipykernel per test module."""
    from kernel import Kernel
    k = Kernel()
    try:
        yield k
    finally:
        k.shutdown()
