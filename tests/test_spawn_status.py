"""Progress bars in workers: a line a worker redraws with carriage returns reaches the
parent as a *status* while it runs (sinks get it at most ten times a second, drawn in
place where someone watches: a terminal, a notebook) and as one whole line, as a terminal
shows it, when its newline comes."""

from __future__ import annotations

import io
import re
import sys
import time

import pytest

import nbmp
from helpers import as_jupyterlab_shows
from nbmp._base import RunFinished, WorkerOutput
from nbmp._spawn.output import MAX_LINE, STATUS_INTERVAL, LineSplitter, StreamPrinter, render

# ---------------------------------------------------------------------------
# The splitter: whole lines at once, the line being redrawn as a status


def test_render_shows_what_a_terminal_shows():
    assert render("plain line  ") == "plain line  "  # no carriage return: as written
    assert render("loading\r 50%\r100%") == "100%ing"  # each return overwrites from the start
    assert render("windows line\r") == "windows line"
    assert render(" 90%|#########|\r" + " " * 15 + "\r") == ""  # a bar that erased itself


def test_whole_lines_pass_at_once_and_the_bar_is_a_status():
    lines = []
    splitter = LineSplitter(lines.append)
    splitter.feed(b"before\n\r  0%|")
    assert lines == ["before"]
    assert splitter.status_waiting and splitter.take_status() == "  0%|"
    assert not splitter.status_waiting and splitter.take_status() is None  # unchanged: nothing to pass
    splitter.feed(b"\r 50%|#####")
    assert splitter.take_status() == " 50%|#####"
    splitter.feed(b"\r100%|##########|\nafter\n")
    assert lines == ["before", "100%|##########|", "after"]
    assert splitter.take_status() is None  # the whole line ended the status


def test_a_line_written_in_parts_waits_for_its_newline():
    lines = []
    splitter = LineSplitter(lines.append)
    splitter.feed(b"loading...")
    assert splitter.take_status() is None and lines == []
    splitter.feed(b" done\n")
    assert lines == ["loading... done"]


def test_print_with_end_cr_is_a_status_and_its_last_state_a_line():
    lines = []
    splitter = LineSplitter(lines.append)
    for step in range(1, 4):
        splitter.feed(f"step {step}/3\r".encode())  # print(f"step {step}/3", end="\r")
        assert splitter.take_status() == f"step {step}/3"
    splitter.close()
    assert lines == ["step 3/3"]


def test_a_bar_redrawn_for_long_stays_one_line_long():
    lines = []
    splitter = LineSplitter(lines.append)
    for i in range(100_000):
        splitter.feed(f"\r{i:6d}/100000".encode())
    assert lines == []  # never cut into MAX_LINE pieces: the parent keeps one line's worth
    assert splitter.take_status() == " 99999/100000"
    assert MAX_LINE > 1000


def test_a_bar_that_erases_itself_leaves_no_line():
    lines = []
    splitter = LineSplitter(lines.append)
    splitter.feed(b"\r 50%|###|")
    assert splitter.take_status() == " 50%|###|"
    splitter.feed(b"\r" + b" " * 10 + b"\r")  # tqdm(leave=False) at its end
    assert splitter.take_status() == ""  # cleared
    splitter.close()
    assert lines == []


def test_more_text_overwrites_from_the_cursor():
    lines = []
    splitter = LineSplitter(lines.append)
    splitter.feed(b"abcdef\rXY")
    splitter.feed(b"Z\n")
    assert lines == ["XYZdef"]


def test_a_character_split_between_reads_stays_whole():
    lines = []
    splitter = LineSplitter(lines.append)
    for byte in "\r 50% █▌\n".encode():
        splitter.feed(bytes([byte]))
    assert lines == [" 50% █▌"]


# ---------------------------------------------------------------------------
# The printer: statuses below the lines, on a terminal and in a notebook


class _Terminal(io.StringIO):
    """A terminal that keeps what it shows: carriage return, newline, cursor up (ESC[nA)
    and clear to the end of the screen (ESC[J)."""

    def isatty(self):
        return True

    def fileno(self):
        raise io.UnsupportedOperation("no descriptor: the printer assumes 80 columns")

    def screen(self):
        rows, row, col, text, i = [""], 0, 0, self.getvalue(), 0
        while i < len(text):
            escape = re.match(r"\x1b\[(\d*)([AJ])", text[i:])
            if escape:
                if escape.group(2) == "A":
                    row = max(0, row - int(escape.group(1) or 1))
                else:
                    rows[row] = rows[row][:col]
                    del rows[row + 1:]
                i += escape.end()
                continue
            char = text[i]
            if char == "\r":
                col = 0
            elif char == "\n":
                row, col = row + 1, 0
                if row == len(rows):
                    rows.append("")
            else:
                line = rows[row].ljust(col)
                rows[row], col = line[:col] + char + line[col + 1:], col + 1
            i += 1
        return [r.rstrip() for r in rows if r.strip()]


class _Cell(io.StringIO):
    """A notebook cell's stream (see ``as_jupyterlab_shows``)."""

    def screen(self):
        return as_jupyterlab_shows(self.getvalue())


_Cell.__module__ = "ipykernel.iostream"  # what the printer looks at to know a notebook's stream


def _out(index, line, stream="stderr", status=False):
    return WorkerOutput(run_id=1, index=index, stream=stream, line=line, status=status)


def _show(printer, *events):
    for event in events:
        printer.handle(event)
    printer.flush()


@pytest.mark.parametrize("kind", [_Terminal, _Cell])
def test_statuses_are_drawn_below_the_lines_and_give_way_to_them(kind):
    screen = kind()
    printer = StreamPrinter(prefix=True, stdout=screen, stderr=screen)
    _show(printer, _out(0, "start", "stdout"), _out(0, " 10%|#", status=True), _out(1, " 20%|##", status=True))
    if kind is _Terminal:
        assert screen.screen() == ["[0] start", "[0]  10%|#", "[1]  20%|##"]
    else:  # one line: a notebook cannot redraw the lines above its last
        assert screen.screen() == ["[0] start", "[0]  10%|#   [1]  20%|##"]
    _show(printer, _out(1, "hello", "stdout"), _out(0, " 60%|######", status=True))
    assert screen.screen()[:2] == ["[0] start", "[1] hello"]
    assert any("[0]  60%|######" in row for row in screen.screen()[2:])
    _show(printer, _out(0, "100%|##########"), _out(1, "", status=True))  # 0's bar ends; 1's erased itself
    _show(printer, RunFinished(run_id=1, ok=True))
    assert screen.screen() == ["[0] start", "[1] hello", "[0] 100%|##########"]


def test_a_terminal_shows_no_more_rows_than_it_can_redraw():
    screen = _Terminal()  # no size known: 80 x 24
    printer = StreamPrinter(prefix=True, stdout=screen, stderr=screen)
    _show(printer, *[_out(i, f"{i}%", status=True) for i in range(30)])
    _show(printer, _out(3, "33%", status=True))
    assert screen.screen() == [f"[{i}] {33 if i == 3 else i}%" for i in range(21)] + ["... and 9 more"]


def test_a_terminals_rows_and_the_text_dashboards_line_never_share_a_row():
    screen = _Terminal()
    printer = StreamPrinter(prefix=True, stdout=screen, stderr=screen)
    _show(printer, _out(0, " 10%|#", status=True), _out(1, " 20%|##", status=True))
    screen.write("\rnbmp bar [fork, 2 workers] 0.3s | 2 running")  # the text dashboard's update (widgets._terminal)
    assert screen.screen() == ["[0]  10%|#", "[1]  20%|##", "nbmp bar [fork, 2 workers] 0.3s | 2 running"]
    _show(printer, _out(0, " 30%|###", status=True), _out(1, "hello", "stdout"))
    assert screen.screen() == ["[1] hello", "[0]  30%|###", "[1]  20%|##"]  # its line: back at its next update


def test_nobody_watching_gets_only_the_whole_lines():
    out, err = io.StringIO(), io.StringIO()  # a file, a pipe, a CI log
    printer = StreamPrinter(prefix=True, stdout=out, stderr=err)
    _show(printer, _out(0, " 10%|#", status=True), _out(0, "100%|##########"), RunFinished(run_id=1, ok=True))
    assert (out.getvalue(), err.getvalue()) == ("", "[0] 100%|##########\n")


def test_a_terminal_row_is_cut_to_its_width():
    screen = _Terminal()
    printer = StreamPrinter(prefix=True, stdout=screen, stderr=screen)
    _show(printer, _out(0, "x" * 200, status=True))
    assert screen.screen() == ["[0] " + "x" * 75]  # 80 columns, less one: a wrapped row would break the redraw


# ---------------------------------------------------------------------------
# End to end: workers redrawing bars


class _Sink:
    def __init__(self):
        self.events = []

    def handle(self, event):
        if isinstance(event, WorkerOutput):
            self.events.append(event)


def _bar(i, steps, pause):
    for k in range(steps + 1):
        sys.stderr.write(f"\r{100 * k // steps:3d}%|{'#' * k}{' ' * (steps - k)}|")
        sys.stderr.flush()
        time.sleep(pause)
    sys.stderr.write("\n")
    print(f"done {i}")
    return i


@pytest.mark.timeout(60)
def test_sinks_see_the_bars_while_they_run_then_their_last_state(start_method, capsys):
    sink = _Sink()
    assert nbmp.spawn(_bar, args=(5, 0.25), nprocs=2, start_method=start_method, sinks=[sink]) == [0, 1]
    for index in (0, 1):
        mine = [e for e in sink.events if e.index == index]
        statuses = [e.line for e in mine if e.status]
        assert len(statuses) >= 3 and statuses[-1].startswith("100%")  # seen while it ran, not just at the end
        assert statuses == sorted(statuses, key=lambda s: int(s.split("%")[0]))  # in order
        last = [(e.stream, e.line, e.status) for e in mine if not e.status]
        assert last == [("stderr", "100%|#####|", False), ("stdout", f"done {index}", False)]
        assert mine.index(next(e for e in mine if not e.status)) > mine.index(next(e for e in mine if e.status))
    # capsys's streams are no terminal: the printer shows only the whole lines
    assert sorted(capsys.readouterr().err.splitlines()) == ["[0] 100%|#####|", "[1] 100%|#####|"]


def _fast_bar(i, seconds):
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        sys.stderr.write(f"\r{count:9d}")
        count += 1
    sys.stderr.write("\n")
    return count


@pytest.mark.timeout(60)
def test_a_bar_redrawn_thousands_of_times_is_passed_on_at_most_ten_times_a_second():
    sink = _Sink()
    counts = nbmp.spawn(_fast_bar, args=(0.6,), nprocs=2, start_method="fork", sinks=[sink], output="none")
    statuses = [e for e in sink.events if e.status]
    batches = []  # a batch passes every changed status at once, one per worker at most
    for event in statuses:
        if batches and event.time - batches[-1][0].time < STATUS_INTERVAL / 2:
            batches[-1].append(event)
        else:
            batches.append([event])
    assert len(batches) >= 2, "the bars ran long enough to be seen while they ran"
    assert all(len({e.index for e in batch}) == len(batch) for batch in batches)
    starts = [batch[0].time for batch in batches]
    assert all(b - a >= STATUS_INTERVAL * 0.9 for a, b in zip(starts, starts[1:]))
    assert len(statuses) < sum(counts) / 100  # thousands of redraws, a few statuses
    lines = [(e.index, e.line) for e in sink.events if not e.status]
    assert sorted(lines) == [(i, f"{count - 1:9d}") for i, count in enumerate(counts)]
