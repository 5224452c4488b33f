"""What a test may leave behind: child processes and /dev/shm entries. Shared by the
suite's autouse guard (tests/conftest.py) and the browser test (browser_tests/), which
imports it by path; so it needs only psutil, not nbmp."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from typing import Set, Tuple

import psutil


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


def left_behind(children_before: Set[int], shm_before: Set[str],
                timeout: float = 10) -> Tuple[Set[int], Set[str]]:
    """The processes and /dev/shm entries that are new since the snapshot, once those
    still exiting have had ``timeout`` seconds to go; the processes are then killed."""
    deadline = time.monotonic() + timeout
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
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return leaked, new_shm
