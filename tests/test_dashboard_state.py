"""The dashboard's state model and text renderer, from fixed event streams and an injected
clock: no processes, no threads, no sleeps."""

import io

import pytest

from nbmp._base import events as ev
from nbmp.widgets import DashboardState, status_line, summary_table
from nbmp.widgets._state import ShmState, read_shm
from nbmp.widgets._terminal import TextView
from nbmp.widgets._text import fmt_bytes, fmt_duration, fmt_exit


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def feed(state, *events):
    for event in events:
        state.apply(event)
    return state


def started_run(clock, nprocs=3):
    state = DashboardState(clock=clock, max_lines=3)
    feed(state, ev.RunStarted(run_id=7, target="train", start_method="fork", nprocs=nprocs, time=1000.0),
         *[ev.WorkerStarted(run_id=7, index=i, pid=100 + i, time=1000.5) for i in range(nprocs)])
    return state


def test_run_started_announces_every_worker_as_starting():
    state = feed(DashboardState(clock=Clock()),
                 ev.RunStarted(run_id=1, target="f", start_method="spawn", nprocs=2, time=1000.0))
    run = state.runs[1]
    assert (run.target, run.start_method, run.nprocs) == ("f", "spawn", 2)
    assert [w.state for w in run.workers.values()] == ["starting", "starting"]
    assert run.counts() == {"starting": 2, "running": 0, "done": 0, "failed": 0, "killed": 0}
    assert state.live and not run.finished


def test_lifecycle_states_and_times():
    clock = Clock(1003.0)
    state = started_run(clock)
    feed(state,
         ev.WorkerRaised(run_id=7, index=1, exc_type="ValueError", message="boom", traceback="Traceback\nValueError: boom",
                         time=1001.0),
         ev.WorkerExited(run_id=7, index=1, exitcode=1, time=1001.5),
         ev.WorkerExited(run_id=7, index=0, exitcode=0, time=1002.0),
         ev.WorkerExited(run_id=7, index=2, exitcode=-15, killed_by_us=True, time=1002.5))
    workers = state.runs[7].workers
    assert [workers[i].state for i in range(3)] == ["done", "failed", "killed"]
    assert workers[1].exception.exc_type == "ValueError" and workers[1].exception.message == "boom"
    assert workers[0].elapsed(clock()) == pytest.approx(1.5)
    assert workers[1].exitcode == 1 and workers[2].exitcode == -15
    assert state.runs[7].finished and not state.live  # every worker exited, even before RunFinished
    assert state.runs[7].elapsed(clock()) == pytest.approx(2.5)


def test_a_signal_we_did_not_send_is_a_failure():
    state = feed(started_run(Clock()), ev.WorkerExited(run_id=7, index=0, exitcode=-9, time=1001.0))
    assert state.runs[7].workers[0].state == "failed"


def test_output_keeps_the_last_lines_only():
    state = started_run(Clock())
    feed(state, *[ev.WorkerOutput(run_id=7, index=0, stream="stdout", line=f"line {i}") for i in range(5)],
         ev.WorkerOutput(run_id=7, index=0, stream="stderr", line="warn"))
    output = state.runs[7].workers[0].output
    assert [o.line for o in output] == ["line 3", "line 4", "warn"]
    assert output[-1].stream == "stderr"


def test_a_status_line_is_replaced_cleared_and_ended_by_its_whole_line():
    from nbmp.widgets._html import snapshot
    state = started_run(Clock())

    def status(index, line):
        return ev.WorkerOutput(run_id=7, index=index, stream="stderr", line=line, status=True)

    feed(state, status(0, " 10%|#"), status(0, " 50%|#####"), status(1, " 30%|###"))
    workers = state.runs[7].workers
    assert workers[0].status.line == " 50%|#####" and not workers[0].output  # replaced, not appended
    outputs = dict(snapshot(state, 1001.0).runs[0].outputs)
    assert "nbmp-status" in outputs[0] and " 50%|#####" in outputs[0]  # shown while nothing else was printed
    feed(state, ev.WorkerOutput(run_id=7, index=0, stream="stderr", line="100%|##########"), status(1, ""))
    assert workers[0].status is None and [o.line for o in workers[0].output] == ["100%|##########"]
    assert workers[1].status is None and not workers[1].output  # erased by the worker: nothing left


def test_progress_prefers_task_counts_then_worker_steps_then_exits():
    state = started_run(Clock(), nprocs=2)
    run = state.runs[7]
    assert run.progress() == (0.0, "0/2 workers finished")
    feed(state, ev.TaskProgress(run_id=7, index=0, done=1, total=4), ev.TaskProgress(run_id=7, index=1, done=3, total=4))
    assert run.progress() == (0.5, "4/8 steps")
    feed(state, ev.TaskProgress(run_id=7, index=None, done=30, total=40))
    assert run.progress() == (0.75, "30/40 tasks")


def test_run_finished_closes_workers_it_was_not_told_about():
    state = feed(started_run(Clock()), ev.RunFinished(run_id=7, ok=False, time=1002.0))
    assert {w.state for w in state.runs[7].workers.values()} == {"killed"}
    assert state.runs[7].ok is False and not state.live


def test_events_of_an_unannounced_run_are_kept():
    state = feed(DashboardState(clock=Clock()), ev.WorkerStarted(run_id=3, index=1, pid=42, time=1000.0))
    assert state.runs[3].workers[1].pid == 42 and state.runs[3].target == "?"


def test_samples_go_to_live_workers_only():
    state = feed(started_run(Clock()), ev.WorkerExited(run_id=7, index=2, exitcode=0, time=1001.0))
    assert state.live_pids() == {(7, 0): 100, (7, 1): 101}
    state.record_samples({(7, 0): (99.0, 2048), (7, 2): (50.0, 1)}, ShmState(2, 4096, 1 << 30, 1 << 29))
    workers = state.runs[7].workers
    assert (workers[0].cpu_percent, workers[0].rss) == (99.0, 2048)
    assert workers[2].cpu_percent is None
    assert state.runs[7].cpu_percent() == 99.0 and state.shm.segments == 2


def test_an_ended_workers_cpu_is_its_mean_while_it_ran():
    state = started_run(Clock(), nprocs=2)
    for cpu in (100.0, 50.0):
        state.record_samples({(7, 0): (cpu, 2048), (7, 1): (10.0, 2048)})
    feed(state, *[ev.WorkerExited(run_id=7, index=i, exitcode=0, time=1002.0) for i in range(2)],
         ev.RunFinished(run_id=7, ok=True, time=1002.0))
    rows = summary_table(state).splitlines()[2:4]  # what a saved notebook keeps of each worker
    assert [row.split()[4] for row in rows] == ["75%", "10%"]


def test_old_finished_runs_are_forgotten():
    state = DashboardState(clock=Clock(), max_finished_runs=2)
    for rid in range(1, 6):
        feed(state, ev.RunStarted(run_id=rid, target="f", start_method="fork", nprocs=1),
             ev.RunFinished(run_id=rid, ok=True))
    assert list(state.runs) == [4, 5]


def test_version_counts_changes():
    state = DashboardState(clock=Clock())
    feed(state, ev.RunStarted(run_id=1, target="f", start_method="fork", nprocs=1), ev.Event())
    assert state.version == 1  # an unknown event type changes nothing


def test_status_line_of_a_live_run():
    clock = Clock(1002.25)
    state = started_run(clock)
    feed(state, ev.WorkerExited(run_id=7, index=0, exitcode=0, time=1002.0))
    state.record_samples({(7, 1): (100.0, 10 << 20), (7, 2): (50.0, 20 << 20)})
    assert status_line(state) == ("nbmp train [fork, 3 workers] 2.2s | 2 running, 1 done | "
                                  "33% (1/3 workers finished) | cpu 150% rss 30.0 MiB")
    assert status_line(state, width=20) == "nbmp train [fork,..."
    assert status_line(DashboardState(clock=clock)) == ""


def test_summary_table_of_a_failed_run():
    clock = Clock(1010.0)
    state = started_run(clock, nprocs=2)
    feed(state,
         ev.WorkerRaised(run_id=7, index=1, exc_type="KeyError", message="'x'",
                         traceback="Traceback (most recent call last):\n  File \"<cell>\", line 2\nKeyError: 'x'",
                         time=1001.0),
         ev.WorkerExited(run_id=7, index=1, exitcode=1, time=1001.0),
         ev.WorkerExited(run_id=7, index=0, exitcode=0, time=1003.0),
         ev.RunFinished(run_id=7, ok=False, time=1003.0))
    state.shm = ShmState(segments=1, bytes=1 << 20, dev_size=1 << 30, dev_free=1 << 29)
    expected = """\
nbmp train [fork, 2 workers] 3.0s - failed (1 done, 1 failed)
  worker  pid  state   elapsed  cpu  rss  tasks  exit
  0       100  done    2.5s     -    -    -      0
  1       101  failed  0.5s     -    -    -      1
  worker 1 raised KeyError: 'x'

shared memory: 1 segment, 1.0 MiB in use; /dev/shm 1.0 GiB, 512.0 MiB free
"""
    assert summary_table(state) == expected
    assert "  File \"<cell>\", line 2" in summary_table(state, tracebacks=True)


def test_formatting_helpers():
    assert [fmt_bytes(n) for n in (None, 12, 1536, 5 << 30)] == ["-", "12 B", "1.5 KiB", "5.0 GiB"]
    assert [fmt_duration(s) for s in (None, 0.04, 75, 7300)] == ["-", "0.0s", "1m15s", "2h01m"]
    assert [fmt_exit(c) for c in (None, 0, 3, -9)] == ["-", "0", "3", "SIGKILL"]


def test_shm_reading_degrades_without_a_ledger(monkeypatch):
    from nbmp.widgets import _state
    whole = read_shm()
    assert whole.segments is not None and whole.bytes is not None  # the ledger is read
    assert whole.dev_size is not None and whole.dev_size >= whole.dev_free >= 0

    def janitor_gone():
        raise ConnectionRefusedError("the janitor is gone")

    monkeypatch.setattr(_state, "shm_usage", janitor_gone)
    shm = read_shm()
    assert (shm.segments, shm.bytes) == (None, None)  # not known: not shown as zero
    assert shm.dev_size == whole.dev_size and shm.dev_free is not None  # the rest still read
    assert read_shm("/no/such/dir").dev_size is None


def test_text_view_rewrites_one_line_then_prints_the_summary():
    clock = Clock(1001.0)
    state = started_run(clock, nprocs=1)
    out = Terminal()
    view = TextView(out)
    view.update(view.render(state, clock()))
    view.update(view.render(state, clock()))  # unchanged: nothing written
    first = out.getvalue()
    assert first.startswith("\rnbmp train [fork, 1 worker] 1.0s | 1 running") and first.count("\r") == 1
    feed(state, ev.WorkerExited(run_id=7, index=0, exitcode=0, time=1001.0))
    view.update(view.render(state, clock(), finished_run=7))
    rest = out.getvalue()[len(first):]
    assert rest.startswith("\r" + " " * (len(first) - 1) + "\r")  # the status line is wiped first
    assert "nbmp train [fork, 1 worker] 1.0s - finished (1 done)" in rest


def test_text_view_without_a_terminal_prints_only_summaries():
    clock = Clock(1001.0)
    state = started_run(clock, nprocs=1)
    out = io.StringIO()
    view = TextView(out)
    assert not view.live
    view.update(view.render(state, clock()))
    assert out.getvalue() == ""


def test_sampling_waits_until_every_worker_is_started():
    state = feed(DashboardState(clock=Clock()), ev.RunStarted(run_id=1, target="f", start_method="fork", nprocs=2),
                 ev.WorkerStarted(run_id=1, index=0, pid=10))
    assert state.live and not state.sampling_due  # worker 1 is still to be forked
    feed(state, ev.WorkerStarted(run_id=1, index=1, pid=11))
    assert state.sampling_due


def test_sampling_starts_once_workers_report_even_without_start_events():
    state = feed(DashboardState(clock=Clock()), ev.RunStarted(run_id=1, target="f", start_method="fork", nprocs=2),
                 ev.WorkerOutput(run_id=1, index=0, stream="stdout", line="hi"))
    assert state.sampling_due


def test_a_map_reporting_progress_only_is_sampled_too():
    state = feed(DashboardState(clock=Clock()), ev.RunStarted(run_id=1, target="f", start_method="fork", nprocs=2),
                 ev.TaskProgress(run_id=1, index=None, done=1, total=10))
    assert state.sampling_due
