"""The suite's own leftover guard (conftest.no_leaks): it names what a test of this
process tree left behind, and never counts what other processes make meanwhile."""

from __future__ import annotations

import os
import threading
import time

import pytest

import nbmp
from conftest import GUARD
from leaks import SEMPREFIX, left_behind, snapshot


def test_other_processes_entries_are_not_ours():
    foreign = ["nbmp-1-0-0123abcd", "sem.mp-4242-x1y2z3", "psm_deadbeef", f"nbmp-{os.getpid()}0-0-x"]
    before = snapshot(GUARD)
    started = time.monotonic()
    try:
        for name in foreign:
            with open(os.path.join("/dev/shm", name), "wb") as f:
                f.write(b"someone else's")
        assert left_behind(before, GUARD, timeout=5) == {}
    finally:
        for name in foreign:
            os.unlink(os.path.join("/dev/shm", name))
    assert time.monotonic() - started < 4  # a foreign entry is not waited for


def test_a_semaphore_of_ours_is_named():
    name = f"sem.{SEMPREFIX[1:]}-leak"
    before = snapshot(GUARD)
    with open(os.path.join("/dev/shm", name), "wb"):
        pass
    try:
        assert left_behind(before, GUARD, timeout=0.2) == {"/dev/shm entries": {name}}
    finally:
        os.unlink(os.path.join("/dev/shm", name))


def test_a_live_segment_is_named_until_it_is_freed(strategy):
    before = snapshot(GUARD)
    kept = nbmp.zeros(1000, dtype="uint8")
    leaks = left_behind(before, GUARD, timeout=0.2)
    segments = leaks.pop("shared-memory segments")
    assert len(segments) == 1 and next(iter(segments)).endswith("(1000 bytes)")
    if strategy == "file_system":  # a named file too, after this process
        entry, = leaks.pop("/dev/shm entries")
        assert entry.startswith(f"nbmp-{os.getpid()}-")
    assert leaks == {}
    del kept
    assert left_behind(before, GUARD) == {}


def test_a_thread_of_nbmp_is_named():
    stop = threading.Event()
    before = snapshot(GUARD)
    thread = threading.Thread(target=stop.wait, name="nbmp-left-running", daemon=True)
    thread.start()
    try:
        leaks = left_behind(before, GUARD, timeout=0.2)
    finally:
        stop.set()
        thread.join()
    assert leaks == {"nbmp threads": {f"nbmp-left-running ({thread.ident})"}}


def test_a_child_process_is_named_and_killed():
    before = snapshot(GUARD)
    child = nbmp.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    leaks = left_behind(before, GUARD, timeout=0.2)
    child.join(10)
    assert leaks == {"child processes": {str(child.pid)}}
    assert child.exitcode == -9
