"""Workers' stdout/stderr reach the parent whole-line, prefixed, never mixed, under
every start method: Python-level prints, fd-level writes and C's printf."""

from __future__ import annotations

import os
import re
import sys
import threading

import pytest

import nbmp

LINES = 40


def _chatty(i, lines):
    # Long lines, written in several pieces, from print and from the fd: the
    # pieces of four workers race in the parent's pipes.
    body = f"worker {i} " + "x" * (500 + 97 * i)
    for k in range(lines):
        if k % 2:
            print(f"{body} line {k}")
        else:
            for piece in (f"{body[:100]}", f"{body[100:]} ", f"line {k}\n"):
                os.write(1, piece.encode())
    return i


def _check_whole_lines(text, nprocs, lines, prefix=True):
    seen = {i: [] for i in range(nprocs)}
    pattern = re.compile(r"^\[(\d)\] worker (\d) x+ line (\d+)$" if prefix else r"^()worker (\d) x+ line (\d+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        assert match, f"a line that is not whole or mixes workers: {line[:160]!r}"
        index, worker, k = match.groups()
        assert not prefix or index == worker
        body = "x" * (500 + 97 * int(worker))
        assert line.endswith(f"worker {worker} {body} line {k}")
        seen[int(worker)].append(int(k))
    assert seen == {i: list(range(lines)) for i in range(nprocs)}  # all there, in order per worker


def test_four_chatty_workers_lines_arrive_whole(start_method, capsys):
    assert nbmp.spawn(_chatty, args=(LINES,), nprocs=4, start_method=start_method) == [0, 1, 2, 3]
    out, err = capsys.readouterr()
    _check_whole_lines(out, 4, LINES)
    assert err == ""


def test_raw_output_has_no_prefix(start_method, capsys):
    nbmp.spawn(_chatty, args=(5,), nprocs=2, start_method=start_method, output="raw")
    _check_whole_lines(capsys.readouterr().out, 2, 5, prefix=False)


def _both_streams(i):
    print(f"out {i}")
    print(f"err {i}", file=sys.stderr)
    os.write(2, f"fd err {i}\n".encode())


def test_stderr_goes_to_stderr(start_method, capsys):
    nbmp.spawn(_both_streams, nprocs=2, start_method=start_method)
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == ["[0] out 0", "[1] out 1"]
    assert sorted(err.splitlines()) == ["[0] err 0", "[0] fd err 0", "[1] err 1", "[1] fd err 1"]


def test_final_partial_line_is_flushed(start_method, capsys):
    def tail(i):
        print(f"whole {i}")
        print(f"no newline {i}", end="")
        sys.stderr.write(f"err tail {i}")

    nbmp.spawn(tail, nprocs=2, start_method=start_method)
    out, err = capsys.readouterr()
    assert out.count("\n") == 4
    assert sorted(out.splitlines()) == sorted(["[0] whole 0", "[0] no newline 0", "[1] whole 1", "[1] no newline 1"])
    assert sorted(err.splitlines()) == ["[0] err tail 0", "[1] err tail 1"]


def test_partial_fd_write_before_exit_is_flushed(start_method, capsys):
    nbmp.spawn(lambda i: os.write(1, f"raw tail {i}".encode()), nprocs=2, start_method=start_method)
    assert sorted(capsys.readouterr().out.splitlines()) == ["[0] raw tail 0", "[1] raw tail 1"]


def test_c_printf_is_relayed(start_method, capsys):
    def from_c(i):
        import ctypes
        ctypes.CDLL(None).printf(b"printf from C %d\n", ctypes.c_int(i))

    nbmp.spawn(from_c, nprocs=2, start_method=start_method)
    assert sorted(capsys.readouterr().out.splitlines()) == ["[0] printf from C 0", "[1] printf from C 1"]


def test_output_of_a_failing_worker_comes_before_the_error(start_method, capsys):
    def fail(i):
        print("about to fail")
        raise RuntimeError("failed")

    with pytest.raises(nbmp.ProcessRaisedException):
        nbmp.spawn(fail, nprocs=1, start_method=start_method)
    assert capsys.readouterr().out == "[0] about to fail\n"


def test_none_prints_nothing_but_sinks_get_lines(start_method, capsys):
    lines = []

    class Sink:
        def handle(self, event):
            if type(event).__name__ == "WorkerOutput":
                lines.append((event.index, event.stream, event.line))

    nbmp.spawn(_both_streams, nprocs=2, start_method=start_method, output="none", sinks=[Sink()])
    assert capsys.readouterr() == ("", "")
    assert sorted(lines) == [(0, "stderr", "err 0"), (0, "stderr", "fd err 0"), (0, "stdout", "out 0"),
                             (1, "stderr", "err 1"), (1, "stderr", "fd err 1"), (1, "stdout", "out 1")]


def test_inherit_leaves_the_fds_alone(capfd):
    nbmp.spawn(lambda i: os.write(1, b"straight through\n"), nprocs=1, start_method="fork", output="inherit")
    assert capfd.readouterr().out == "straight through\n"


def test_lines_without_newline_are_cut_at_the_limit(capsys):
    from nbmp._spawn.output import MAX_LINE
    nbmp.spawn(lambda i: os.write(1, b"y" * (MAX_LINE + 10)), nprocs=1)
    lines = capsys.readouterr().out.splitlines()
    assert [len(line) for line in lines] == [len("[0] ") + MAX_LINE, len("[0] ") + 10]


class _CountingStream:
    """A stream that records what is written and how often it is flushed (in a kernel each
    flush of a cell's stream is a round trip to ipykernel's IOPub thread)."""

    def __init__(self):
        self.text, self.flushes = "", 0

    def write(self, s):
        self.text += s
        return len(s)

    def flush(self):  # the caller's own flush before forking (as the standard library's) is not counted
        if threading.current_thread() is not threading.main_thread():
            self.flushes += 1


def test_streams_are_flushed_only_after_lines_were_written(monkeypatch):
    out, err = _CountingStream(), _CountingStream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert nbmp.spawn(abs, nprocs=2, start_method="fork") == [0, 1]
    assert (out.flushes, err.flushes) == (0, 0)
    nbmp.spawn(lambda i: print(f"hello {i}"), nprocs=2, start_method="fork")
    assert sorted(out.text.splitlines()) == ["[0] hello 0", "[1] hello 1"]
    assert out.flushes >= 1 and err.flushes == 0
