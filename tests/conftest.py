"""Fixtures every test gets: a per-start-method parameter, and a guard that fails a
test which leaves child processes, /dev/shm entries or fork handlers behind."""

from __future__ import annotations

import gc
import os
import time
from typing import Iterator, Set

import multiprocessing
import psutil
import pytest

import nbmp

# One timeout for every join and get in the suite (seconds).
TIMEOUT = 30

START_METHODS = nbmp.get_all_start_methods()


def child_pids() -> Set[int]:
    """Live descendants of this process (a kernel's workers too), minus the stdlib's
    long-lived helpers (resource tracker, forkserver)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE or _is_helper(child.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        pids.add(child.pid)
    return pids


def _is_helper(cmdline: list) -> bool:
    text = " ".join(cmdline)
    return "multiprocessing.resource_tracker" in text or "multiprocessing.forkserver" in text


def shm_entries() -> Set[str]:
    """Entries of /dev/shm, minus those another process tree holds open or mapped (other
    test runs may share this machine; an entry someone else holds is theirs, not a leak)."""
    try:
        names = set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()
    return names - _held_outside_our_tree(names) if names else names


def _held_outside_our_tree(names: Set[str]) -> Set[str]:
    ours = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
    held = set()
    for pid in psutil.pids():
        if pid in ours:
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                maps = f.read()
            fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        for name in names:
            path = "/dev/shm/" + name
            if path in maps or path in fds:
                held.add(name)
    return held


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves processes, shared-memory entries or fork handlers behind."""
    children_before, shm_before = child_pids(), shm_entries()
    handlers_before = nbmp._forking.user_handlers()
    yield
    handlers_left = [h for h in nbmp._forking.user_handlers() if h not in handlers_before]
    for handler in handlers_left:
        nbmp._forking._user_handlers.remove(handler)
    deadline = time.monotonic() + 10
    while True:
        multiprocessing.active_children()  # reap finished stdlib/nbmp children
        gc.collect()
        leaked = child_pids() - children_before
        new_shm = shm_entries() - shm_before
        if (not leaked and not new_shm) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in leaked:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    assert not leaked, f"test left child processes running: {sorted(leaked)}"
    assert not new_shm, f"test left entries in /dev/shm: {sorted(new_shm)}"
    assert not handlers_left, f"test left fork handlers registered (call .remove() on the handle): {handlers_left}"


@pytest.fixture(params=START_METHODS)
def start_method(request: pytest.FixtureRequest) -> str:
    """Each behaviour test runs once per start method."""
    return request.param


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
