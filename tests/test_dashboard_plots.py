"""The dashboard's plots, Pool timeline, chunk-size note and static snapshot, built from
fixed states (an injected clock, made-up samples and task spans): no processes, no sleeps."""

import base64
import io
import pickle
import re

import pytest

import nbmp
from nbmp._base import events as ev
from nbmp._pool.pool import _task_ran
from nbmp._pool.worker import Timed
from nbmp.widgets import DashboardState
from nbmp.widgets._history import Series, TaskSpan, WorkerSpans, pool_note
from nbmp.widgets._html import html_document, snapshot, static_html
from nbmp.widgets._svg import as_images, sparkline, timeline


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def pool_run(clock, nprocs=2, spans=(), finished=True):
    """A Pool map's events: run, workers, chunk spans ``(worker, start, end, outcome, count)``."""
    state = DashboardState(clock=clock)
    state.apply(ev.RunStarted(run_id=3, target="map(f)", start_method="fork", nprocs=nprocs, time=1000.0))
    for i in range(nprocs):
        state.apply(ev.WorkerStarted(run_id=3, index=i, pid=200 + i, time=1000.0))
    for worker, start, end, outcome, count in spans:
        state.apply(ev.TaskRan(run_id=3, index=worker, start=start, end=end, outcome=outcome, count=count, time=end))
    if finished:
        state.apply(ev.RunFinished(run_id=3, ok=True, time=1002.0))
    return state


# -- series and sparklines -----------------------------------------------------------------

def test_a_series_thins_itself_evenly_and_keeps_spanning_the_run():
    series = Series(capacity=8)
    for t in range(100):
        series.add(float(t), float(t))
    series.add(100.0, None)  # an unknown sample is skipped
    assert len(series.points) < 8
    assert series.points[0] == (0.0, 0.0) and series.points[-1][0] >= 90
    gaps = {b[0] - a[0] for a, b in zip(series.points, series.points[1:])}
    assert len(gaps) == 1, series.points  # evenly spaced in time


def test_sparkline_is_deterministic_svg_scaled_from_zero_to_top():
    svg = sparkline([0.0, 50.0, 100.0], width=11, height=12, top=100.0, color="#123456", title="cpu <b>", kind="cpu")
    assert svg.startswith("<svg xmlns='http://www.w3.org/2000/svg' class='nbmp-spark nbmp-spark-cpu' width='11' "
                          "height='12'")
    assert "data-points='3'" in svg and "<title>cpu &lt;b&gt;</title>" in svg
    assert "points='0.0,11.0 5.0,6.0 10.0,1.0'" in svg  # 0 at the bottom, top at the top
    assert svg == sparkline([0.0, 50.0, 100.0], width=11, height=12, top=100.0, color="#123456", title="cpu <b>",
                            kind="cpu")
    # a value above top raises the scale (a multithreaded worker above 100 %)
    assert "points='0.0,11.0 10.0,1.0'" in sparkline([0.0, 200.0], width=11, height=12, top=100.0)


def test_sparkline_of_nothing_or_one_sample_keeps_its_size():
    empty = sparkline([], width=20, height=10)
    assert "data-points='0'" in empty and "polyline" not in empty and "width='20' height='10'" in empty
    assert "points='0.0,5.0 19.0,5.0'" in sparkline([5.0], width=20, height=10, top=10.0)  # a flat line


# -- the Pool timeline ------------------------------------------------------------------------

def test_timeline_draws_a_bar_per_chunk_coloured_by_outcome():
    spans = {0: WorkerSpans(), 1: WorkerSpans()}
    spans[0].add(TaskSpan(1000.0, 1000.5, "ok", 4))
    spans[0].add(TaskSpan(1000.5, 1001.0, "raised", 4))
    spans[1].add(TaskSpan(1000.0, 1000.0, "lost", 4))  # a loss's start is not reported
    svg = timeline(spans, [0, 1, 2], 1000.0, 1001.0, width=132)
    assert svg.count("<rect ") == 3 + 3  # a background per row, a bar per span
    assert "fill='#43a047'><title>4 tasks, ok, 0.500s</title>" in svg
    assert "fill='#e53935'" in svg and "fill='#8e24aa'" in svg
    assert "<rect x='28.0' y='0' width='50.0'" in svg and "<rect x='78.0' y='0' width='50.0'" in svg
    assert ">w2</text>" in svg and ">1.00s</text>" in svg and "data-spans='3'" in svg


def test_spans_fold_into_the_run_and_count_as_the_workers_tasks():
    state = pool_run(Clock(), spans=[(0, 1000.0, 1000.4, "ok", 5), (1, 1000.0, 1000.5, "ok", 5),
                                     (0, 1000.4, 1000.9, "raised", 5), (1, 1000.9, 1000.9, "lost", 2)])
    run = state.runs[3]
    assert [w.done for w in run.workers.values()] == [10, 7]
    assert run.spans[1].spans[-1] == TaskSpan(1000.5, 1000.9, "lost", 2)  # starts where the worker's last ended
    assert run.spans[0].busy == pytest.approx(0.9) and run.spans[0].tasks == 10


def test_many_spans_merge_pairwise_and_keep_exact_totals():
    spans = WorkerSpans(capacity=10)
    for k in range(101):
        spans.add(TaskSpan(k * 0.01, k * 0.01 + 0.005, "raised" if k == 50 else "ok"))
    assert len(spans.spans) <= 10 and spans.tasks == 101 and spans.chunks == 101
    assert spans.busy == pytest.approx(101 * 0.005)
    assert [s.outcome for s in spans.spans].count("raised") == 1  # never merged into an "ok" bar
    assert sum(s.count for s in spans.spans) == 101


# -- the note on chunks ------------------------------------------------------------------------

def spans_of(*per_worker):
    out = {}
    for index, chunks in enumerate(per_worker):
        out[index] = WorkerSpans()
        for start, end, count in chunks:
            out[index].add(TaskSpan(start, end, "ok", count))
    return out


def test_note_on_tasks_too_small_for_processes():
    tiny = [(1000 + k * 0.001, 1000 + k * 0.001 + 0.0002, 1) for k in range(50)]
    note = pool_note(spans_of(tiny, tiny), nprocs=2, start=1000.0, end=1000.06)
    assert note.startswith("tasks are small: 200 µs per chunk of 1") and "chunksize=13" in note


def test_note_on_a_map_too_small_for_processes_whatever_its_chunks():
    chunks = [(1000 + k * 0.001, 1000 + k * 0.001 + 0.0002, 100) for k in range(4)]
    note = pool_note(spans_of(chunks, chunks), nprocs=2, start=1000.0, end=1000.01)
    assert note.endswith("the whole map is too little work for processes: run it in-process"), note


def test_note_on_workers_left_without_a_task():
    note = pool_note(spans_of([(1000.0, 1001.0, 100)]), nprocs=4, start=1000.0, end=1001.0)
    assert note.startswith("3 of 4 workers got no task: 1 chunk of 100 for 4 workers") and "chunksize=25" in note


def test_note_on_an_unbalanced_end():
    note = pool_note(spans_of([(1000.0, 1001.0, 10), (1001.0, 1004.0, 10)], [(1000.0, 1001.0, 10)]),
                     nprocs=2, start=1000.0, end=1004.0)
    assert note.startswith("workers were idle 38% of the run, waiting on the last of 3 chunks of 10")


def test_no_note_for_well_cut_work():
    even = [(1000.0 + k, 1001.0 + k, 10) for k in range(4)]
    assert pool_note(spans_of(even, even), nprocs=2, start=1000.0, end=1004.0) == ""
    assert pool_note({}, nprocs=2, start=1000.0, end=1004.0) == ""


# -- the snapshot ----------------------------------------------------------------------------

def sampled_pool_state():
    clock = Clock(1000.0)
    state = pool_run(clock, spans=[(0, 1000.0, 1000.0001, "ok", 1)] * 0, finished=False)
    for k in range(4):
        clock.now += 0.25
        state.record_samples({(3, 0): (100.0, (k + 1) * 2 ** 20), (3, 1): (50.0, 2 ** 20)},
                             nbmp.widgets.ShmState(1, (k + 1) * 4096, 2 ** 30, 2 ** 29))
    for k in range(8):
        state.apply(ev.TaskRan(run_id=3, index=k % 2, start=1000.0 + k * 0.1, end=1000.09 + k * 0.1,
                               outcome="raised" if k == 5 else "ok", count=4, time=1001.0))
    state.apply(ev.WorkerOutput(run_id=3, index=1, stream="stderr", line="warn <x>", time=1001.0))
    state.apply(ev.WorkerRaised(run_id=3, index=1, exc_type="ValueError", message="bad", traceback="Traceback\nValueError: bad",
                                time=1001.5))
    state.apply(ev.RunFinished(run_id=3, ok=False, time=1002.0))
    return state


def test_samples_become_per_worker_and_shared_memory_plots():
    state = sampled_pool_state()
    worker = state.runs[3].workers[0]
    assert worker.cpu_history.values() == [100.0] * 4 and worker.rss_history.values()[-1] == 4 * 2 ** 20
    assert state.shm_history.values() == [4096.0, 8192.0, 12288.0, 16384.0]
    snap = snapshot(state, 1002.0)
    assert snap.runs[0].table.count("class='nbmp-spark nbmp-spark-cpu'") == 2
    assert "cpu · rss over time" in snap.runs[0].table and "peak 4.0 MiB" in snap.runs[0].table
    assert "nbmp-spark-shm" in snap.shm and "peak 16.0 KiB" in snap.shm


def test_static_snapshot_is_self_contained_html_with_plots_timeline_and_tracebacks():
    snap = snapshot(sampled_pool_state(), 1002.0)
    html = static_html(snap)
    assert html == static_html(snapshot(sampled_pool_state(), 1002.0))  # deterministic
    assert html.startswith("<div class='nbmp-dashboard nbmp-snapshot'")
    for part in ("nbmp-run", "nbmp-title", "nbmp-workers", "nbmp-timeline", "nbmp-failures", "nbmp-outputs", "nbmp-shm",
                 "nbmp-spark-cpu", "nbmp-spark-rss", "nbmp-spark-shm", "nbmp-timeline-plot"):
        assert f"class='{part}" in html or f"nbmp-spark {part}" in html, part
    assert "<script" not in html and "widget" not in html
    assert "<details><summary>worker 1 (pid 201): ValueError: bad</summary>" in html
    assert "warn &lt;x&gt;" in html and "32 tasks" not in html and "(32 done)" in html
    assert "<svg" not in html and html.count("<img class='nbmp-spark") == 5  # 2 per worker, shared memory
    pictures = [base64.b64decode(src).decode() for src in re.findall(r"data:image/svg\+xml;base64,([^']*)'", html)]
    assert any("<title>4 tasks, raised, 0.090s</title>" in svg for svg in pictures)
    assert "title='worker 0 cpu, peak 100%'" in html and "data-points='4'" in html
    page = html_document(html)
    assert page.startswith("<!DOCTYPE html>") and html in page


def test_svg_becomes_an_image_that_sanitizers_keep():
    svg = sparkline([1.0, 2.0], kind="rss", title="peak <2>")
    img = as_images(f"<td>{svg}</td>")
    assert img.startswith("<td><img class='nbmp-spark nbmp-spark-rss' data-points='2' title='peak &lt;2&gt;'")
    src = re.search(r"base64,([^']*)'", img).group(1)
    assert base64.b64decode(src).decode() == svg


def test_save_html_writes_a_post_mortem(tmp_path):
    d = nbmp.Dashboard("text", stream=io.StringIO(), watch=False)
    for event in [ev.RunStarted(run_id=5, target="job", start_method="fork", nprocs=1),
                  ev.WorkerStarted(run_id=5, index=0, pid=123),
                  ev.WorkerRaised(run_id=5, index=0, exc_type="KeyError", message="'k'", traceback="tb KeyError"),
                  ev.WorkerExited(run_id=5, index=0, exitcode=1), ev.RunFinished(run_id=5, ok=False)]:
        d.handle(event)
    path = d.save_html(tmp_path / "run.html")
    page = (tmp_path / "run.html").read_text()
    assert path == str(tmp_path / "run.html")
    assert "job [fork, 1 worker]" in page and "tb KeyError" in page and "saved with Dashboard.save_html" in page
    d.close()


# -- what the Pool reports ----------------------------------------------------------------------

def test_a_timed_result_unpacks_and_pickles_as_the_stdlibs_pair():
    timed = pickle.loads(pickle.dumps(Timed(True, [1, 2], 3, 10.0, 10.5)))
    success, value = timed
    assert (success, value, timed.worker, timed.start, timed.end) == (True, [1, 2], 3, 10.0, 10.5)
    assert len(pickle.dumps(timed)) - len(pickle.dumps((True, [1, 2]))) < 100


def test_chunk_records_become_task_ran_events():
    ok = _task_ran(9, 2, Timed(True, [0] * 4, 1, 10.0, 10.5), 11.0, chunksize=4, total=10)
    assert (ok.run_id, ok.index, ok.start, ok.end, ok.outcome, ok.count) == (9, 1, 10.0, 10.5, "ok", 2)
    assert _task_ran(9, 0, Timed(False, ValueError(), 0, 10.0, 10.1), 11.0, 4, 10).outcome == "raised"
    lost = _task_ran(9, 1, (False, nbmp.WorkerLostError("gone", index=1)), 12.0, 4, 10)
    assert (lost.index, lost.start, lost.end, lost.outcome, lost.count) == (1, 12.0, 12.0, "lost", 4)
    assert _task_ran(9, 1, (False, ValueError()), 12.0, 4, 10) is None  # unknown worker: not drawn


class Recorder:
    def __init__(self):
        self.events = []

    def handle(self, event):
        self.events.append(event)


def test_a_pool_map_reports_every_chunk_with_its_worker_and_outcome():
    rec = Recorder()
    with nbmp.Pool(2) as pool:
        assert pool.map(abs, range(-10, 0), chunksize=3, progress=rec) == list(range(10, 0, -1))
        pids = {p.pid for p in pool._pool}
    ran = [e for e in rec.events if isinstance(e, ev.TaskRan)]
    assert sorted(e.count for e in ran) == [1, 3, 3, 3] and {e.outcome for e in ran} == {"ok"}
    assert all(e.start <= e.end and e.index in (0, 1) for e in ran)
    assert {e.pid for e in rec.events if isinstance(e, ev.WorkerStarted)} == pids
    kinds = [type(e).__name__ for e in rec.events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished" and kinds.index("TaskRan") < kinds.index("RunFinished")


def test_the_text_summary_carries_the_note_too():
    state = pool_run(Clock(), nprocs=4, spans=[(0, 1000.0, 1001.0, "ok", 100)])
    assert "\n  note: 3 of 4 workers got no task: 1 chunk of 100 for 4 workers" in nbmp.widgets.summary_table(state)
