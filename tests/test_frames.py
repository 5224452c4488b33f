"""The Pool's result reader (nbmp._pool.frames): frames of every size read right, and a frame
whose writer died is told apart from a stream that merely has nothing queued."""

from __future__ import annotations

import struct
import threading
import time
from typing import Any, List

import pytest

import nbmp
from nbmp._pool.frames import _CHUNK, _SMALL, FrameReader, StreamCut


@pytest.fixture
def pipe():
    here, there = nbmp.Pipe(duplex=False)
    yield here, there
    here.close()
    if not there.closed:
        there.close()


def _reader(conn: Any, released: List[int]) -> FrameReader:
    return FrameReader(conn, lambda: released.append(1))


def test_messages_of_every_size_come_through_whole_and_in_order(pipe):
    here, there = pipe
    # Buffered and direct reads, a message partly buffered behind a small one, in pieces.
    sizes = [0, 1, 3, 4, 100, _SMALL - 1, _SMALL, _SMALL + 1, 10_000, 3, 37_000, _CHUNK - 40, _CHUNK, _CHUNK + 1,
             3 * _CHUNK + 7, 5 << 20, 2, 0]
    sent = [(i, b"%d" % i * size) for i, size in enumerate(sizes)]
    writer = threading.Thread(target=lambda: [there.send(m) for m in sent * 3])
    writer.start()
    reader = _reader(here, [])
    got = [reader.recv() for _ in range(len(sent) * 3)]
    writer.join()
    assert got == sent * 3


def test_the_end_of_the_stream_between_frames_and_inside_one(pipe):
    here, there = pipe
    there.send("last")
    there._send(struct.pack("!i", 100) + b"short")
    there.close()
    reader = _reader(here, [])
    assert reader.recv() == "last"
    with pytest.raises(OSError, match="end of file during message"):
        reader.recv()

    a, b = nbmp.Pipe(duplex=False)
    b.close()
    with pytest.raises(EOFError):
        _reader(a, []).recv()
    a.close()


def test_a_death_handed_over_at_a_frame_s_start_comes_after_the_queued_messages(pipe):
    here, there = pipe
    released: List[int] = []
    reader = _reader(here, released)
    there.send("before")
    there.send(b"x" * 1000)
    reader.hand_over("the notice")
    assert reader.recv() == "before"
    assert released == []  # messages still queued: the death is not settled yet
    assert reader.recv() == b"x" * 1000
    assert reader.recv() == "the notice"
    assert released == [1]
    there.send("after")  # the stream goes on
    assert reader.recv() == "after"


def test_a_death_handed_over_inside_a_frame_raises_stream_cut(pipe):
    here, there = pipe
    released: List[int] = []
    reader = _reader(here, released)
    there.send("before")
    there._send(struct.pack("!i", 1 << 20) + b"cut off")  # what a writer killed mid-frame leaves
    got: List[Any] = []

    def read() -> None:
        try:
            while True:
                got.append(reader.recv())
        except StreamCut as cut:
            got.append(cut)
    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    reading.join(0.2)
    assert reading.is_alive() and got == ["before"]  # waiting for the rest of the frame
    reader.hand_over("the notice")  # the writer was found dead: nothing more will come
    reading.join(10)
    assert not reading.is_alive(), "the reader still waits for a frame nobody will finish"
    assert isinstance(got[-1], StreamCut) and got[-1].notice == "the notice"
    assert released == [1]


def test_a_reader_waiting_idle_settles_a_death_handed_over_at_once(pipe):
    here, _ = pipe
    released: List[int] = []
    reader = _reader(here, released)
    got: List[Any] = []
    reading = threading.Thread(target=lambda: got.append(reader.recv()), daemon=True)
    reading.start()
    reading.join(0.2)
    assert reading.is_alive()
    reader.hand_over("the notice")
    reading.join(10)
    assert got == ["the notice"] and released == [1]


@pytest.mark.parametrize("queued", [b"", struct.pack("!i", 1 << 20) + b"cut off"], ids=["idle", "inside a frame"])
def test_a_reader_told_every_writer_is_gone_ends_with_eoferror(pipe, queued):
    # A terminated Pool's workers are dead: a frame one left short never ends, and the result
    # thread, which the terminate joins, must stop waiting for it.
    here, there = pipe
    reader = _reader(here, [])
    if queued:
        there._send(queued)
    got: List[Any] = []

    def read() -> None:
        try:
            reader.recv()
        except EOFError as end:
            got.append(end)
    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    reading.join(0.2)
    assert reading.is_alive()
    reader.writers_gone()
    reading.join(10)
    assert not reading.is_alive() and len(got) == 1


def test_poll_counts_the_messages_already_read_off_the_pipe(pipe):
    # One read takes every small message queued: the stdlib's result thread, which asks poll()
    # before each of its last reads, must not leave those behind (their shared memory with them).
    here, there = pipe
    reader = _reader(here, [])
    for i in range(3):
        there.send(i)
    assert reader.recv() == 0
    assert not here.poll() and reader.poll()  # the pipe is empty: the rest is buffered
    assert [reader.recv(), reader.recv()] == [1, 2]
    assert not reader.poll()
