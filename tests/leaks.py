"""What a test may leave behind, and only what *this* process tree made: child processes
and /dev/shm entries. Other processes on the machine (other test runs, other
multiprocessing jobs) create and remove their own entries meanwhile; none of theirs is
ever counted. Shared by the suite's autouse guard (tests/conftest.py, which adds nbmp's
own threads and janitor segments) and the browser test (browser_tests/), which imports
it by path; so it needs only psutil, not nbmp.

Ownership of a /dev/shm entry is read from its name: nbmp's file_system segments are
``nbmp-<pid>-...`` after the process that made them, and the standard library's named
semaphores are ``sem.<semprefix>-...``; ``name_own_semaphores`` gives this process a
semprefix of its own, so that its semaphores can be told from anyone else's.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import signal
import time
from typing import Callable, Dict, Iterable, Optional, Set

import psutil

Probe = Callable[[], Set[str]]

SEMPREFIX = f"/mp-test{os.getpid()}"
_SEGMENT = re.compile(r"nbmp-(\d+)-")


def name_own_semaphores() -> None:
    """Name this process's standard-library semaphores ``sem.mp-test<pid>-...`` (the
    standard module reads ``semprefix`` from the current process's config each time)."""
    multiprocessing.current_process()._config["semprefix"] = SEMPREFIX  # type: ignore[attr-defined]


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


def shm_entries(owners: Optional[Iterable[int]] = None) -> Set[str]:
    """The entries of /dev/shm made by ``owners`` (default: this process and its live
    descendants): nbmp segments named after one of them, and semaphores with this
    process's semprefix. Everything else there belongs to someone else."""
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return set()
    pids = {os.getpid(), *child_pids()} if owners is None else set(owners)
    ours = set()
    for name in names:
        segment = _SEGMENT.match(name)
        if (segment and int(segment.group(1)) in pids) or name.startswith("sem." + SEMPREFIX[1:] + "-"):
            ours.add(name)
    return ours


def _child_processes() -> Set[str]:
    return {str(pid) for pid in child_pids()}


PROBES: Dict[str, Probe] = {"child processes": _child_processes, "/dev/shm entries": shm_entries}


def snapshot(probes: Dict[str, Probe]) -> Dict[str, Set[str]]:
    """What each probe sees now."""
    return {what: probe() for what, probe in probes.items()}


def left_behind(before: Dict[str, Set[str]], probes: Dict[str, Probe],
                timeout: float = 10) -> Dict[str, Set[str]]:
    """What is new since ``before``, once what is still ending has had ``timeout``
    seconds to go (only what is found waits: a clean test costs one look). Child
    processes still alive then are killed."""
    deadline = time.monotonic() + timeout
    while True:
        multiprocessing.active_children()  # reap finished stdlib/nbmp children
        gc.collect()
        new = {what: probe() - before.get(what, set()) for what, probe in probes.items()}
        new = {what: found for what, found in new.items() if found}
        if not new or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in new.get("child processes", ()):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return new


def describe(leaks: Dict[str, Set[str]]) -> str:
    """One line per kind of leftover, each thing named."""
    return "; ".join(f"{what}: {', '.join(sorted(found))}" for what, found in leaks.items())
