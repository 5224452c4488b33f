"""The janitor's protocol, spoken directly: a janitor of its own, for a stand-in root process,
with connections that play the processes of its tree (nbmp/_sharing/_janitor.py lists the
messages)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator, List

import psutil
import pytest

from helpers import wait_until
from nbmp._sharing import _janitor

pytestmark = pytest.mark.timeout(120)


def _janitors(key: str) -> List[psutil.Process]:
    root = key.split("-", 1)[0]
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if _janitor.__file__ in cmdline and cmdline[-1] == root:
            found.append(proc)
    return found


def _start(key: str) -> None:
    subprocess.run([sys.executable, "-I", "-S", _janitor.__file__, key.split("-", 1)[0]], input=f"{key}\n".encode(),
                   check=True, timeout=60)


@pytest.fixture
def stand_in_root() -> Iterator[int]:
    """A stand-in root process (sleeping); its pid. Killed at the end: its janitors must go with it."""
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        yield root.pid
    finally:
        root.kill()
        root.wait()
        wait_until(lambda: not _janitors(f"{root.pid}-"), "the janitor exits with its root")


@pytest.fixture
def janitor(stand_in_root: int) -> str:
    """A janitor serving a stand-in root; its tree key."""
    key = f"{stand_in_root}-{secrets.token_hex(16)}"
    _start(key)
    return key


def _connect(key: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(_janitor.address(key))
    conn.settimeout(10)
    return conn


def _ask(conn: socket.socket, message: bytes) -> str:
    conn.sendall(message)
    return _reply(conn)


def _reply(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(256)
        except TimeoutError:
            raise AssertionError(f"no reply from the janitor in 10 s (read so far: {data!r})") from None
        assert chunk, "the janitor closed the connection"
        data += chunk
    return data.decode().strip()


def test_a_claim_that_reads_another_processs_messages_does_not_stall_the_janitor(janitor):
    # Two processes send a claim while the janitor is busy (stopped here): it sees both ready at
    # once, and the first claim, which first reads what the others sent, reads the second. The
    # janitor must not then wait on that second connection for more (it once did, until that
    # process sent again: every other process's request stalled, a Pool's claim for 60 s).
    a, b = _connect(janitor), _connect(janitor)
    with a, b:
        for conn in (a, b):
            assert _ask(conn, b"stat\n") == "0 0 0"  # accepted, and served
        (proc,) = _janitors(janitor)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            a.sendall(b"claim - s1\n")
            b.sendall(b"claim - s2\n")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert (_reply(a), _reply(b)) == ("- s1", "- s2")  # nothing pooled: none lent, both "gone"
        assert _ask(a, b"stat\n") == "0 0 0"
        assert _ask(b, b"stat\n") == "0 0 0"


def test_a_file_announced_as_the_root_dies_is_still_unlinked(janitor, tmp_path):
    # The tree's processes die with their root, so the root's death and a process's last
    # messages reach the janitor at once (here: while it is stopped). It once saw the death
    # first and exited without reading them, and a file announced then stayed in /dev/shm.
    path = tmp_path / "nbmp-announced"
    root = psutil.Process(int(janitor.split("-", 1)[0]))
    with _connect(janitor) as conn:
        assert _ask(conn, b"stat\n") == "0 0 0"
        (proc,) = _janitors(janitor)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: proc.status() == psutil.STATUS_STOPPED, "the janitor has stopped")
            conn.sendall(f"plan {path}\n".encode())
            path.write_bytes(b"")
            root.kill()
            wait_until(lambda: root.status() == psutil.STATUS_ZOMBIE, "the root has died")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
    wait_until(lambda: not path.exists(), "the announced file is unlinked")
    wait_until(lambda: not _janitors(janitor), "the janitor exits")


@pytest.mark.timeout(60)
def test_a_second_interrupt_gives_up_on_a_reply_the_janitor_does_not_send(janitor, monkeypatch, python_sigint):
    # A stopped janitor: the first Ctrl-C waits for its reply (a reply half read would be taken
    # for the next request's), the second gives up on it within a second; the reply is owed.
    from nbmp._sharing import _client

    monkeypatch.setattr(_client, "REPLY_TIMEOUT", 5)  # on a request that never gives way: fails, not hangs
    try:
        assert _client.request(janitor, "stat\n") == ("0 0 0", [])
        (proc,) = _janitors(janitor)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            sent = []

            def interrupt():
                sent.append(time.monotonic())
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

            timers = [threading.Timer(t, interrupt) for t in (0.2, 0.5)]
            for timer in timers:
                timer.start()
            with pytest.raises(KeyboardInterrupt):
                _client.request(janitor, "claim - s1\n")
            assert len(sent) == 2 and time.monotonic() - sent[1] < 1.0
            for timer in timers:
                timer.join()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert _client.request(janitor, "stat\n") == ("0 0 0", [])  # not the claim's "- s1"
    finally:
        conn = _client._conns.pop(janitor, None)
        if conn is not None:
            _client._owed.discard(conn)


def test_a_reply_given_up_on_is_never_read_as_the_next_ones(janitor, monkeypatch):
    # A request that times out leaves its reply to come later: the next request must read
    # past it, not take it for its own answer (a claim answered with another's segment).
    from nbmp._sharing import _client

    try:
        assert _client.request(janitor, "stat\n") == ("0 0 0", [])
        (proc,) = _janitors(janitor)
        monkeypatch.setattr(_client, "REPLY_TIMEOUT", 0.5)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(TimeoutError, match="did not answer 'claim' within 0.5 s") as info:
                _client.request(janitor, "claim - s1\n")
            assert "report it at https://" in str(info.value)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert _client.request(janitor, "stat\n") == ("0 0 0", [])  # not the claim's "- s1"
        assert _client.request(janitor, "pooled\n") == ("", [])
    finally:
        conn = _client._conns.pop(janitor, None)
        if conn is not None:
            _client._owed.discard(conn)
            conn.close()
