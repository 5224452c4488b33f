"""One interrupt model: Ctrl-C and the interrupt button work whatever else the program does
with signals (handlers that raise, dispositions set from C), every blocking step of the main
thread gives way within a second, and the programs a worker starts end with the run."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
import time

import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main, wait_until
from nbmp._sharing._ledger import live_segments

np = pytest.importorskip("numpy")


def test_a_signal_handler_that_raises_never_leaves_nbmps_handler_behind():
    # A SIGALRM timeout that raised at the edge of nbmp's hold left its recorder installed, and
    # every later hold took itself for a nested one: after about a dozen alarms Ctrl-C was dead
    # for the rest of the process.
    out = run_main("""
        import os, signal, _signal, nbmp

        class Alarm(Exception):
            pass

        armed = False
        def on_alarm(signum, frame):
            if armed:  # anywhere inside the calls, never in the loop's own bookkeeping
                raise Alarm

        def mine(signum, frame):
            raise KeyboardInterrupt("the program's own")

        signal.signal(signal.SIGINT, mine)
        signal.signal(signal.SIGALRM, on_alarm)
        here, there = nbmp.Pipe()
        q = nbmp.SimpleQueue()
        shared = nbmp.zeros(1 << 16, dtype="uint8")
        alarms = others = stuck = 0
        signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
        for i in range(2000):
            try:
                armed = True
                here.send(i); there.recv()
                q.put(shared if i % 10 == 0 else i); q.get()
                armed = False
            except Alarm:
                armed = False
                alarms += 1
            except BaseException:  # the alarm cut a message in two, as with the standard module
                armed = False
                others += 1
                here, there = nbmp.Pipe()
                q = nbmp.SimpleQueue()
            stuck += _signal.getsignal(signal.SIGINT) is not mine
        signal.setitimer(signal.ITIMER_REAL, 0)
        print("alarms", alarms > 100, "stuck", stuck, "handler", signal.getsignal(signal.SIGINT) is mine)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):
                pass
            print("Ctrl-C lost")
        except KeyboardInterrupt as e:
            print("Ctrl-C raised", e)
    """)
    assert out.splitlines() == ["alarms True stuck 0 handler True", "Ctrl-C raised the program's own"], out


@pytest.mark.timeout(120)
def test_a_handler_that_uses_nbmp_while_a_start_puts_the_programs_handlers_back_ends_well():
    # A start holds the program's handlers; one put back can run at once, before the others are,
    # and use nbmp itself (a timer that reports through a Pipe, a finalizer the collector runs):
    # the start then failed with "dictionary changed size during iteration".
    out = run_main("""
        import signal, nbmp

        here, there = nbmp.Pipe()
        busy, reports = False, 0
        def report(signum, frame):
            global busy, reports
            if not busy:
                busy = True
                here.send(reports); reports = there.recv() + 1
                busy = False

        signal.signal(signal.SIGALRM, report)
        for later in range(signal.SIGRTMIN, signal.SIGRTMAX + 1):  # put back after SIGALRM's
            signal.signal(later, lambda signum, frame: None)
        signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
        values = [nbmp.spawn(lambda rank: rank, nprocs=1) for _ in range(100)]
        signal.setitimer(signal.ITIMER_REAL, 0)
        print(values == [[0]] * 100, reports > 100, signal.getsignal(signal.SIGALRM) is report)
    """)
    assert out.split() == ["True", "True", "True"], out


def test_a_sigint_disposition_set_from_c_is_kept():
    # A JVM, R or a C extension sets its disposition behind Python's back (signal.getsignal still
    # shows Python's handler); nbmp's first receive put Python's back, and Ctrl-C raised.
    out = run_main("""
        import ctypes, os, signal, time, nbmp

        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)

        def disposition():
            buf = ctypes.create_string_buffer(256)
            libc.sigaction(signal.SIGINT, None, buf)
            return ctypes.c_void_p.from_buffer(buf).value or 0

        def exercise():
            here, there = nbmp.Pipe()
            here.send(nbmp.zeros(1 << 16)); there.recv()
            q = nbmp.SimpleQueue()
            q.put(1); q.get()

        handler = ctypes.cast(libc.getpid, ctypes.c_void_p).value  # a harmless C function as handler
        for name, set_from_c in (("ignored", 1), ("a C handler", handler)):
            libc.signal(signal.SIGINT, set_from_c)
            exercise()
            print(name, "kept", disposition() == set_from_c)
        libc.signal(signal.SIGINT, 1)
        exercise()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        print("Ctrl-C ignored")
    """)
    assert out.splitlines() == ["ignored kept True", "a C handler kept True", "Ctrl-C ignored"], out


def _channel(kind):
    """(send, the reader's receive, the writing connection) of a fresh channel of ``kind``."""
    if kind == "SimpleQueue":
        q = nbmp.SimpleQueue()
        return q.put, q.get, q._writer
    reader, writer = nbmp.Pipe(duplex=False) if kind == "one-way Pipe" else nbmp.Pipe()[::-1]
    return writer.send, reader.recv, writer


class _interrupt_in(threading.Timer):
    """SIGINT to the main thread (the interrupt button) ``seconds`` from now; ``sent``: when."""

    def __init__(self, seconds):
        super().__init__(seconds, self._send)
        self.sent = float("inf")
        self.start()

    def _send(self):
        self.sent = time.monotonic()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["Pipe", "one-way Pipe", "SimpleQueue"])
def test_a_send_of_shared_memory_that_nobody_reads_gives_way_to_an_interrupt(kind, python_sigint):
    # A batch whose images are shared and whose captions are plain, bigger than the pipe holds:
    # the send blocked, and the interrupt waited for a reader that never came.
    before = live_segments()
    send, receive, writer = _channel(kind)
    images = nbmp.zeros(1 << 16, dtype="uint8")
    timer = _interrupt_in(0.2)
    # On a send that never gives way, a reader comes after 5 s: the test fails, it does not hang.
    rescue = threading.Timer(5, receive)
    rescue.start()
    with pytest.raises(KeyboardInterrupt):
        send({"images": images, "captions": b"x" * (4 << 20)})
    assert time.monotonic() - timer.sent < 1.0
    rescue.cancel()
    timer.join()
    del images
    assert live_segments() == before, "the interrupted send still holds its array"
    assert writer.closed, "a message cut in two must close its connection"
    with pytest.raises((EOFError, OSError)):  # the reader sees the end, never half a message
        receive()
    rescue.join()


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ"), reason="Linux's pipe size")
@pytest.mark.parametrize("kind", ["one-way Pipe", "SimpleQueue"])
def test_a_send_waiting_for_room_is_interrupted_before_it_writes(kind, python_sigint):
    # A message that fits the pipe, but not beside the one nobody has read yet: it waits for room
    # without writing a byte, so the interrupt leaves the channel usable and gives the array back.
    send, receive, writer = _channel(kind)
    images = nbmp.zeros(1 << 16, dtype="uint8")
    room = fcntl.fcntl(writer.fileno(), fcntl.F_GETPIPE_SZ)
    send(b"x" * (room // 2))
    held = live_segments()
    timer = _interrupt_in(0.2)
    rescue = threading.Timer(5, receive)
    rescue.start()
    with pytest.raises(KeyboardInterrupt):
        send({"images": images, "captions": b"x" * (room // 2)})
    assert time.monotonic() - timer.sent < 0.5
    rescue.cancel()
    rescue.join()
    timer.join()
    assert live_segments() == held, "the interrupted send still holds its array"
    assert not writer.closed
    assert len(receive()) == room // 2
    send({"images": images})
    assert receive()["images"].nbytes == 1 << 16
    del images


@pytest.mark.timeout(60)
def test_a_second_interrupt_escapes_a_receive_stuck_in_the_middle_of_a_message(python_sigint):
    # A sender that stopped half-way: the first interrupt waits for the rest, the second gives up
    # on it and closes the connection (its next message would be read from the middle of this one).
    here, there = nbmp.Pipe(duplex=False)
    os.write(there.fileno(), (1000).to_bytes(4, "big") + b"x" * 10)
    first, second = _interrupt_in(0.2), _interrupt_in(0.5)
    rescue = threading.Timer(5, os.write, (there.fileno(), b"x" * 990))  # the test fails, it does not hang
    rescue.start()
    with pytest.raises(KeyboardInterrupt):
        here.recv()
    assert time.monotonic() - second.sent < 1.0
    rescue.cancel()
    rescue.join()
    first.join()
    second.join()
    assert here.closed
    there.close()


def _sigint_ignored_by_a_program_started_here(_index=0):
    status = subprocess.run(["sh", "-c", "grep SigIgn /proc/$$/status"], capture_output=True, text=True).stdout
    return bool(int(status.split()[1], 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_programs_a_worker_starts_get_the_default_sigint_disposition(start_method):
    # Workers ignored SIGINT with SIG_IGN, which exec keeps: an ffmpeg a worker ran ignored Ctrl-C
    # and the interrupt button. A standard Process's programs do not.
    assert nbmp.spawn(_sigint_ignored_by_a_program_started_here, start_method=start_method) == [False]
    with nbmp.get_context(start_method).Pool(1) as pool:
        assert pool.apply(_sigint_ignored_by_a_program_started_here) is False


def _start_program_and_wait(_index, path, own_session):
    program = subprocess.Popen(["sleep", "60"], start_new_session=own_session)
    with open(path + ".tmp", "w") as f:
        f.write(str(program.pid))
    os.rename(path + ".tmp", path)
    time.sleep(60)


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _program_of(path):
    wait_until(lambda: os.path.exists(path), what="the worker started its program", timeout=TIMEOUT)
    with open(path) as f:
        return int(f.read())


@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
@pytest.mark.parametrize("stopped", ["spawn interrupted", "Pool terminated"])
def test_programs_a_worker_started_end_with_a_stopped_run(stopped, tmp_path, python_sigint):
    # They outlived the run (seen alive seconds after it), for spawn and the Pool alike; a program
    # started in a session of its own is the documented way to keep one running.
    programs = []
    try:
        for own_session in (False, True):
            path = str(tmp_path / f"program-{own_session}")
            if stopped == "Pool terminated":
                pool = nbmp.Pool(1)
                pool.apply_async(_start_program_and_wait, (0, path, own_session))
                programs.append(_program_of(path))
                pool.terminate()
                pool.join()
            else:
                waiter = threading.Thread(target=lambda: (_program_of(path), signal.pthread_kill(
                    threading.main_thread().ident, signal.SIGINT)))
                waiter.start()
                with pytest.raises(KeyboardInterrupt):
                    nbmp.spawn(_start_program_and_wait, args=(path, own_session), start_method="spawn")
                waiter.join()
                programs.append(_program_of(path))
        stopped_program, own_session_program = programs
        wait_until(lambda: not _running(stopped_program), what="the worker's program ended", timeout=5)
        assert _running(own_session_program), "a program in a session of its own is left alone"
    finally:
        for pid in programs:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
