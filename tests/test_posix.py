"""nbmp._backend.posix: the platform helpers other layers build on."""

from __future__ import annotations

import os
import select
import threading
from typing import Iterator

import pytest

from nbmp._backend.posix import WakeUp

pytestmark = pytest.mark.timeout(30)


def _readable(wake: WakeUp) -> bool:
    return bool(select.select([wake], [], [], 0)[0])


@pytest.fixture
def wake() -> Iterator[WakeUp]:
    made = WakeUp()
    yield made
    made.close()


def test_wakeup_set_makes_it_readable_until_cleared(wake: WakeUp) -> None:
    assert not _readable(wake)
    wake.set()
    wake.set()
    assert _readable(wake)
    wake.clear()
    assert not _readable(wake)


def test_wakeup_set_never_blocks_on_a_full_pipe(wake: WakeUp) -> None:
    # A pipe holds 64 KiB by default: far more sets than that must return at once.
    for _ in range(200_000):
        wake.set()
    wake.clear()
    assert not _readable(wake)


def test_wakeup_wakes_a_thread_waiting_in_select(wake: WakeUp) -> None:
    woken = threading.Event()

    def waiter() -> None:
        select.select([wake], [], [], 20)
        woken.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        assert not woken.wait(0.1)
        wake.set()
        assert woken.wait(10)
    finally:
        wake.set()
        thread.join(10)


def test_wakeup_closed_is_a_no_op_to_set_and_gives_its_descriptors_back() -> None:
    wake = WakeUp()
    fd = wake.fileno()
    pipe = os.fstat(fd).st_ino
    wake.close()
    wake.close()
    wake.set()  # no write lands on the closed number (which another file may reuse)
    wake.clear()
    try:
        reused = os.fstat(fd).st_ino  # another thread of this process may have the number now
    except OSError:
        reused = None
    assert reused != pipe


def test_read_nowait_reads_what_a_pipe_holds_and_never_waits_on_an_empty_one() -> None:
    from nbmp._backend.posix import read_nowait

    r, w = os.pipe()
    try:
        assert read_nowait(r, 100) is None  # empty: no wait
        os.write(w, b"task")
        assert read_nowait(r, 100) == b"task"
        assert os.get_blocking(r)  # the descriptor others share stays as it was
        os.close(w)
        w = -1
        assert read_nowait(r, 100) == b""  # every writer gone
    finally:
        os.close(r)
        if w != -1:
            os.close(w)
