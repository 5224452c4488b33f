"""Only the user's own processes reach nbmp's shared memory and the channels that serve it
(docs/security.md): every listener refuses a process of another user, a process that takes the
janitor's address first gets nothing, tickets are long random secrets, and two process trees
never share a janitor. Playing another user needs root: a forked child drops to ``nobody``."""

from __future__ import annotations

import os
import pickle
import pickletools
import pwd
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import warnings
from typing import Callable, Iterator

import psutil
import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main
from nbmp._sharing import _client, _janitor
from test_janitor import _ask, _connect, _janitors, _start, janitor, stand_in_root  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")
NOBODY = pwd.getpwnam("nobody")


def as_nobody(action: Callable[[], str]) -> str:
    """Run ``action`` in a forked child that has dropped to the user ``nobody``; what it returns,
    or what it raised."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: a fork of a threaded process
        pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY.pw_gid)
            os.setuid(NOBODY.pw_uid)
            result = action()
        except BaseException as e:
            result = f"raised {type(e).__name__}: {e}"
        os.write(w, result.encode())
        os._exit(0)
    os.close(w)
    with open(r, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    return out


def _try_to_use(address: str, message: bytes) -> Callable[[], str]:
    def action() -> str:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(10)
        conn.connect(address)
        try:
            conn.sendall(message)
            data, fds, _, _ = socket.recv_fds(conn, 256, 4)
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        return "closed" if (data, fds) == (b"", []) else f"read {data!r} with {len(fds)} descriptors"
    return action


# --------------------------------------------------------------------------
# The janitor
# --------------------------------------------------------------------------


@needs_root
def test_a_process_of_another_user_is_refused_by_the_janitor_even_knowing_its_address(janitor):
    conn = _connect(janitor)
    with conn:
        assert _ask(conn, b"stat\n") == "0 0 0"
        fd = os.memfd_create("victim")
        try:
            socket.send_fds(conn, [b"nt s1 " + b"t" * 32 + b" 8 -\n"], [fd])
        finally:
            os.close(fd)
        assert _ask(conn, b"list\n") == "s1:8"
        for request in (b"list\n", b"stat\n", b"take " + b"t" * 32 + b"\n"):
            assert as_nobody(_try_to_use(_janitor.address(janitor), request)) == "closed"
        assert _ask(conn, b"take " + b"t" * 32 + b"\n") == "ok s1"  # still there for its own user


@needs_root
def test_a_squatter_that_takes_the_janitors_address_first_gets_nothing_and_the_user_a_clear_error():
    # A process of another user binds this tree's address before its janitor starts: the first
    # array fails with an error that says so, and the squatter read nothing, no descriptor.
    out = run_main(f"""
        import os, socket
        import nbmp
        from nbmp._base import util
        from nbmp._sharing import _janitor
        ready, report = os.pipe(), os.pipe()
        if os.fork() == 0:
            os.setgroups([]); os.setgid({NOBODY.pw_gid}); os.setuid({NOBODY.pw_uid})
            squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            squat.bind(_janitor.address(util.tree()))
            squat.listen(8)
            os.write(ready[1], b"x")
            squat.settimeout(20)
            got, fds = b"", []
            for attempt in range(2):  # one for each strategy
                try:
                    conn, _ = squat.accept()
                    conn.settimeout(2)
                    while True:
                        data, new, _, _ = socket.recv_fds(conn, 4096, 16)
                        if not data:
                            break
                        got, fds = got + data, fds + new
                except OSError:
                    pass
            os.write(report[1], f"squatter read {{len(got)}} bytes, {{len(fds)}} descriptors".encode())
            os._exit(0)
        os.read(ready[0], 1)
        for strategy in ("file_descriptor", "file_system"):
            nbmp.set_sharing_strategy(strategy)
            try:
                nbmp.zeros(100)
            except PermissionError as e:
                print("PermissionError:", e)
        os.wait()
        print(os.read(report[0], 200).decode())
    """)
    errors = [line for line in out.splitlines() if line.startswith("PermissionError")]
    assert len(errors) == 2, out
    assert f"held by a process of another user (uid {NOBODY.pw_uid}); nothing was sent" in errors[0], out
    assert "squatter read 0 bytes, 0 descriptors" in out


def test_two_trees_with_the_same_root_pid_never_share_a_janitor(stand_in_root):
    # Two containers whose roots are both PID 1 and that share a network namespace.
    first, second = (f"{stand_in_root}-{secrets.token_hex(16)}" for _ in range(2))
    _start(first)
    _start(second)
    assert len(_janitors(first)) == 2
    a, b = _connect(first), _connect(second)
    with a, b:
        fd = os.memfd_create("tree")
        try:
            socket.send_fds(a, [b"new s1 8 -\n"], [fd])
        finally:
            os.close(fd)
        assert _ask(a, b"list\n") == "s1:8"
        assert _ask(b, b"list\n") == ""


def test_a_take_of_a_ticket_nobody_sent_is_refused_not_parked(janitor):
    with _connect(janitor) as conn:
        started = time.monotonic()
        assert _ask(conn, f"take {secrets.token_hex(16)}\n".encode()) == "err unknown"
        assert time.monotonic() - started < 5
        assert _ask(conn, b"stat\n") == "0 0 0"


def test_a_take_read_before_the_senders_ticket_is_still_answered(janitor):
    # The sender registers its ticket before its message leaves, but on its own connection: the
    # janitor may read the receiver's take first. It reads what was sent before refusing.
    ticket = secrets.token_hex(16).encode()
    sender, receiver = _connect(janitor), _connect(janitor)
    with sender, receiver:
        assert _ask(sender, b"stat\n") == _ask(receiver, b"stat\n") == "0 0 0"
        (proc,) = _janitors(janitor)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            fd = os.memfd_create("sent")
            os.ftruncate(fd, 8)
            try:
                receiver.sendall(b"take " + ticket + b"\n")
                socket.send_fds(sender, [b"nt s1 " + ticket + b" 8 -\n"], [fd])
            finally:
                os.close(fd)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        data, fds, _, _ = socket.recv_fds(receiver, 256, 4)
        for received in fds:
            os.close(received)
        assert (data, len(fds)) == (b"ok s1\n", 1)


def _tickets(data: bytes) -> list:
    return [arg for op, arg, _ in pickletools.genops(data)
            if isinstance(arg, str) and re.fullmatch(r"[0-9a-f]{32}", arg)]


def test_tickets_are_128_random_bits_from_secrets_unrelated_to_segment_names(monkeypatch):
    seen = set()
    for _ in range(20):
        data = nbmp.reduction.ForkingPickler.dumps(nbmp.zeros(1 << 16, dtype="uint8"))
        pickle.loads(data)  # taken first: the reference goes back to this process's hold
        (ticket,) = _tickets(bytes(data))
        seen.add(ticket)
    assert len(seen) == 20
    # With the CSPRNG of the os pinned the ticket is its bytes alone: nothing of the pid or name.
    monkeypatch.setattr(secrets, "token_bytes", lambda n: b"\x5a" * n)
    data = nbmp.reduction.ForkingPickler.dumps(nbmp.zeros(1 << 16, dtype="uint8"))
    monkeypatch.undo()
    pickle.loads(data)
    assert _tickets(bytes(data)) == ["5a" * 16]


def test_the_trees_secret_appears_in_no_error_and_no_command_line():
    key = _client.tree_root()
    secret = key.split("-", 1)[1]
    assert len(secret) == 32
    nbmp.zeros(10)  # the tree's janitor runs
    for proc in _janitors(key):
        assert secret not in " ".join(proc.cmdline())
    launch_repr = repr(nbmp._forking.Launch(tree=key))
    assert secret not in launch_repr


# --------------------------------------------------------------------------
# Off Linux: a socket file in a directory of the user's own
# --------------------------------------------------------------------------


@pytest.fixture
def file_sockets(tmp_path, monkeypatch) -> Iterator[str]:
    """The janitor's socket is a file in ``<tmp>/nbmp-<uid>`` (as off Linux); the temporary
    directory to use."""
    monkeypatch.setattr(_janitor, "ABSTRACT", False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    yield str(tmp_path)


def _start_file_janitor(key: str) -> None:
    program = (f"import sys; sys.path.insert(0, {os.path.dirname(_janitor.__file__)!r}); import _janitor; "
               f"_janitor.ABSTRACT = False; sys.exit(_janitor.main())")
    subprocess.run([sys.executable, "-I", "-S", "-c", program, key.split("-", 1)[0]], input=f"{key}\n".encode(),
                   check=True, timeout=60)


def test_off_linux_the_socket_lives_in_a_private_directory_and_a_stale_one_is_replaced(file_sockets, stand_in_root):
    key = f"{stand_in_root}-{secrets.token_hex(16)}"
    where = _janitor.address(key)
    directory = os.path.dirname(where)
    assert directory == os.path.join(file_sockets, f"nbmp-{os.geteuid()}")
    assert os.stat(directory).st_mode & 0o777 == 0o700
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(where)  # a janitor killed before it could remove its file
    stale.close()
    _start_file_janitor(key)
    with _connect(key) as conn:
        assert _ask(conn, b"stat\n") == "0 0 0"
    if os.geteuid() == 0:
        assert as_nobody(_try_to_use(where, b"stat\n")).startswith("raised PermissionError")


def test_off_linux_a_directory_another_user_could_enter_is_refused(file_sockets):
    directory = os.path.join(file_sockets, f"nbmp-{os.geteuid()}")
    os.mkdir(directory, 0o777)
    os.chmod(directory, 0o777)
    with pytest.raises(PermissionError, match="no one else can enter.*Remove it, or point TMPDIR elsewhere"):
        _janitor.address(f"1-{secrets.token_hex(16)}")


# --------------------------------------------------------------------------
# The other listeners nbmp starts
# --------------------------------------------------------------------------


def _unix_listeners(pid: int) -> list:
    return [c.laddr for c in psutil.Process(pid).net_connections(kind="unix") if c.laddr]


@needs_root
def test_the_fork_server_refuses_a_process_of_another_user():
    ctx = nbmp.get_context("forkserver")
    p = ctx.Process(target=lambda: None)
    p.start()
    p.join(TIMEOUT)
    servers = [child for child in psutil.Process().children()
               if "multiprocessing.forkserver" in " ".join(child.cmdline())]
    (server,) = servers
    (address,) = _unix_listeners(server.pid)
    out = as_nobody(_try_to_use(address, b"\0" * 8))
    assert out.startswith("raised PermissionError"), out


@needs_root
def test_a_manager_refuses_a_process_of_another_user():
    with nbmp.Manager() as manager:
        address = manager.address
        assert isinstance(address, str)
        out = as_nobody(_try_to_use(address, b"\0" * 8))
    assert out.startswith("raised PermissionError"), out
