"""The Dashboard sink, its front-end choice, the widget tree (in-process, no kernel) and
the parent-side sampler against real worker processes."""

import io
import sys
import threading
import time

import pytest

import nbmp
from conftest import TIMEOUT
from nbmp._base import events as ev
from nbmp.widgets import _choice, check_dashboard, make_dashboard, resolve_frontend, set_dashboard


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def dashboard_threads():
    return [t for t in threading.enumerate() if t.name.startswith("nbmp")]


def wait_for(condition, what):
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def in_kernel(monkeypatch):
    """Pretend to run in a Jupyter kernel, so that the automatic choice is the widget."""
    pytest.importorskip("ipywidgets")
    monkeypatch.setattr(_choice, "_in_kernel", lambda: True)
    monkeypatch.setattr("nbmp.widgets._dashboard.live_widget_updates", lambda: True)  # as ipykernel 6.29 and 7.x
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a) or _Handle())
    monkeypatch.setattr(_Handle, "updates", [])
    return shown


class _Handle:
    updates: list = []  # every display update of the test, (bundle, keywords)

    def update(self, *args, **kwargs):
        _Handle.updates.append((args[0], kwargs))


@pytest.fixture(autouse=True)
def default_choice(monkeypatch):
    monkeypatch.delenv(_choice.ENV_VAR, raising=False)
    yield
    set_dashboard(None)


def run_events(run_id, nprocs=2, fail=None):
    events = [ev.RunStarted(run_id=run_id, target="job", start_method="fork", nprocs=nprocs)]
    events += [ev.WorkerStarted(run_id=run_id, index=i, pid=1000 + i) for i in range(nprocs)]
    if fail is not None:
        events.append(ev.WorkerRaised(run_id=run_id, index=fail, exc_type="ValueError", message=f"bad {fail}",
                                      traceback=f"Traceback (most recent call last):\nValueError: bad {fail}"))
    events += [ev.WorkerExited(run_id=run_id, index=i, exitcode=1 if i == fail else 0) for i in range(nprocs)]
    return events + [ev.RunFinished(run_id=run_id, ok=fail is None)]


# -- choosing the front end -------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [(None, None), (True, "on"), (False, "off"), ("auto", "auto"),
                                             ("widget", "widget"), ("text", "text"), ("off", "off")])
def test_dashboard_values(value, expected):
    assert check_dashboard(value) == expected


def test_bad_dashboard_values_say_what_is_accepted():
    with pytest.raises(ValueError, match=r"dashboard='widgets' is not a dashboard choice: use True, False, None"):
        check_dashboard("widgets")
    with pytest.raises(TypeError, match=r"dashboard must be True, False, None, .* not int 1"):
        check_dashboard(1)
    with pytest.raises(ValueError, match="set_dashboard"):
        set_dashboard("nope")


def test_automatic_choice_is_text_outside_a_kernel_and_widget_inside(monkeypatch):
    monkeypatch.setattr(sys, "stderr", TTY())
    assert resolve_frontend(None) == "text"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert resolve_frontend(None) == "off"  # piped or logged: no status lines
    assert resolve_frontend("text") == "text"
    monkeypatch.setattr(_choice, "_in_kernel", lambda: True)
    assert resolve_frontend(None) == "widget" and resolve_frontend(True) == "widget"
    assert resolve_frontend("text") == "text" and resolve_frontend(False) == "off"


def test_global_choice_and_environment_variable(monkeypatch):
    monkeypatch.setenv("NBMP_DASHBOARD", "off")
    assert resolve_frontend(None) == "off"
    assert resolve_frontend("text") == "text"  # the call's own choice wins
    set_dashboard("text")
    assert resolve_frontend(None) == "text"  # set_dashboard beats the environment
    set_dashboard(None)
    monkeypatch.setenv("NBMP_DASHBOARD", "0")
    assert resolve_frontend(None) == "off"
    monkeypatch.setenv("NBMP_DASHBOARD", "sometimes")
    with pytest.raises(ValueError, match="NBMP_DASHBOARD='sometimes'"):
        resolve_frontend(None)


def _choice_in_child(q):
    q.put(resolve_frontend(None))


def test_nested_runs_in_a_worker_show_no_dashboard(monkeypatch):
    monkeypatch.setattr(_choice, "_in_kernel", lambda: True)  # inherited by the forked child
    ctx = nbmp.get_context("fork")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=_choice_in_child, args=(q,))
    p.start()
    assert q.get() == "off"
    p.join(TIMEOUT)


# -- the sink ----------------------------------------------------------------------------

def test_text_dashboard_prints_a_summary_per_run_and_leaves_no_thread():
    out = TTY()
    d = nbmp.Dashboard("text", stream=out, interval=0.01)
    events = run_events(1, fail=1)
    for event in events[:3]:
        d.handle(event)
    assert [t.name for t in dashboard_threads()] == ["nbmp-dashboard"]
    for event in events[3:]:
        d.handle(event)
    assert dashboard_threads() == []
    text = out.getvalue()
    assert "nbmp job [fork, 2 workers]" in text and "worker 1 raised ValueError: bad 1" in text
    assert "Traceback" in d.summary()
    d.close()


def test_a_hand_made_dashboard_watches_every_run():
    d = nbmp.Dashboard("text", stream=io.StringIO())
    try:
        sink = make_dashboard(False)
        assert sink.dashboard is None
        for event in run_events(11) + run_events(12, fail=0):
            sink.handle(event)
        assert sorted(d.state.runs) == [11, 12]
        assert d.state.runs[12].workers[0].state == "failed"
    finally:
        d.close()
    sink.handle(ev.RunStarted(run_id=13, target="later", start_method="fork", nprocs=1))
    assert 13 not in d.state.runs  # closed: no longer watching


def test_a_broken_dashboard_does_not_break_the_run():
    class Broken:
        def handle(self, event):
            raise RuntimeError("display failed")

    class Recorder:
        def __init__(self):
            self.events = []

        def handle(self, event):
            self.events.append(event)

    broken, healthy = Broken(), Recorder()
    sink = make_dashboard(False)
    _dashboard_watchers().add(broken)
    _dashboard_watchers().add(healthy)
    events = [ev.RunStarted(run_id=5, target="f", start_method="fork", nprocs=1),
              ev.RunFinished(run_id=5, ok=True)]
    try:
        with pytest.warns(RuntimeWarning, match=r"Broken.*failed on RunStarted.*display failed") as caught:
            for event in events:
                sink.handle(event)  # raises nothing: the run goes on
    finally:
        _dashboard_watchers().discard(broken)
        _dashboard_watchers().discard(healthy)
    assert healthy.events == events  # the other dashboards still saw every event
    assert len([w for w in caught if "Broken" in str(w.message)]) == 1  # reported once, not per event


def _dashboard_watchers():
    from nbmp.widgets import _dashboard
    return _dashboard._watchers


def _burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _sleep_forever():
    time.sleep(1000)


def test_sampler_measures_cpu_and_rss_of_real_workers(ctx):
    d = nbmp.Dashboard("text", stream=TTY(), interval=0.02)
    procs = [ctx.Process(target=_sleep_forever) for _ in range(2)]
    try:
        d.handle(ev.RunStarted(run_id=21, target="burn", start_method=ctx.get_start_method(), nprocs=2))
        for i, p in enumerate(procs):
            p.start()
            d.handle(ev.WorkerStarted(run_id=21, index=i, pid=p.pid))
        workers = d.state.runs[21].workers.values()
        wait_for(lambda: all(w.rss for w in workers), "RSS samples")
        assert all(w.cpu_percent is not None for w in workers)
        assert all(w.rss > 1 << 20 for w in workers)  # a Python interpreter is more than a MiB
    finally:
        for i, p in enumerate(procs):
            p.terminate()
            p.join(TIMEOUT)
            d.handle(ev.WorkerExited(run_id=21, index=i, exitcode=p.exitcode, killed_by_us=True))
        d.handle(ev.RunFinished(run_id=21, ok=False))
        d.close()
    assert [w.state for w in workers] == ["killed", "killed"]
    assert dashboard_threads() == []


def test_events_reaching_a_forked_copy_are_ignored():
    d = nbmp.Dashboard("text", stream=io.StringIO())
    d._pid = -1  # what a forked child sees: the dashboard belongs to another process
    d.handle(ev.RunStarted(run_id=1, target="f", start_method="fork", nprocs=1))
    assert d.state.runs == {} and dashboard_threads() == []
    d.close()


# -- the widget tree ---------------------------------------------------------------------

def widget_dashboard(stop=None):
    d = nbmp.Dashboard("widget", stop=stop, interval=0.01, watch=False)
    assert d.frontend == "widget"
    return d


def test_widget_tree_carries_css_hooks(in_kernel):
    """browser_tests/ and users' styles find the dashboard by these classes."""
    d = widget_dashboard()
    d.display()
    for event in run_events(30, nprocs=1):
        d.handle(event)
    run = d._view._runs[30]
    parts = {"dashboard": d.widget, "shm": d._view._shm, "run": run.box, "title": run.title, "stop": run.stop_button,
             "workers": run.table, "failures": run.failures, "outputs": run.outputs}
    for part, widget in parts.items():
        assert f"nbmp-{part}" in widget._dom_classes, part


def test_widget_tree_is_built_once_and_updated_by_traits(in_kernel):
    d = widget_dashboard()
    d.display()
    assert in_kernel, "display() showed nothing"
    assert d.widget is d._view.root
    events = run_events(31, nprocs=3, fail=2)
    for event in events[:4]:  # run and workers started
        d.handle(event)
    run_widgets = d._view._runs[31]
    title, table = run_widgets.title, run_widgets.table
    d.handle(ev.WorkerOutput(run_id=31, index=0, stream="stdout", line="hello <b>"))
    d._tick()
    assert "3 running" in title.value and "job [fork, 3 workers]" in title.value
    assert table.value.count("<tr>") == 4 and "1002" in table.value
    assert run_widgets.failures.layout.display == "none"
    assert run_widgets.outputs.titles == ("worker 0 output",)
    assert "hello &lt;b&gt;" in run_widgets.outputs.children[0].value
    for event in events[4:]:
        d.handle(event)
    assert d._view._runs[31] is run_widgets and run_widgets.title is title and run_widgets.table is table
    assert "failed" in title.value and "2 done, 1 failed" in title.value
    assert run_widgets.failures.layout.display == ""
    assert run_widgets.failures.titles == ("worker 2 (pid 1002): ValueError: bad 2",)
    assert "Traceback (most recent call last)" in run_widgets.failures.children[0].value
    assert run_widgets.progress.value == 1.0 and run_widgets.progress.bar_style == "danger"
    assert "shared memory" in d._view._shm.value
    assert dashboard_threads() == []


def test_an_interrupted_run_ends_with_a_red_bar_though_no_worker_raised(in_kernel):
    d = widget_dashboard()
    d.display()
    events = run_events(34, nprocs=2)[:-3]  # started; then the interrupt's stop, which no worker raised
    events += [ev.WorkerExited(run_id=34, index=i, exitcode=-15, killed_by_us=True, stopped="interrupt") for i in range(2)]
    for event in events + [ev.RunFinished(run_id=34, ok=False)]:
        d.handle(event)
    assert d._view._runs[34].progress.bar_style == "danger"
    bundle, _ = _Handle.updates[-1]  # the snapshot a saved notebook keeps
    assert "failed" in bundle["text/plain"] and "background:#c62828" in bundle["text/html"]
    d.close()


def test_the_widget_gives_way_to_a_static_snapshot_when_no_run_is_live(in_kernel):
    """What a notebook saved without widget state keeps: html with no widget mimetype."""
    d = widget_dashboard()
    d.display()
    assert "application/vnd.jupyter.widget-view+json" in in_kernel[0][0]
    assert "does not display" in in_kernel[0][0]["text/plain"]  # what a front end without widgets shows
    for event in run_events(32, nprocs=2, fail=1):
        d.handle(event)
    bundle, keywords = _Handle.updates[-1]
    assert set(bundle) == {"text/html", "text/plain"} and keywords == {"raw": True}
    assert "nbmp-snapshot" in bundle["text/html"] and "nbmp-spark" in bundle["text/html"]
    assert "bad 1" in bundle["text/html"] and "1 done, 1 failed" in bundle["text/plain"]
    d.handle(ev.RunStarted(run_id=33, target="job", start_method="fork", nprocs=1))  # a hand-made one's next run
    assert "application/vnd.jupyter.widget-view+json" in _Handle.updates[-1][0]
    d.close()


def test_a_kernel_without_live_widget_updates_shows_a_notice_then_the_snapshot(in_kernel, monkeypatch):
    monkeypatch.setattr("nbmp.widgets._dashboard.live_widget_updates", lambda: False)
    sink = make_dashboard("widget")
    assert set(in_kernel[0][0]) == {"text/html", "text/plain"} and "appears here when the run ends" in \
        in_kernel[0][0]["text/plain"]
    for event in run_events(34, nprocs=2):
        sink.handle(event)
    assert not sink.dashboard._ticker.running
    assert "nbmp-snapshot" in _Handle.updates[-1][0]["text/html"]
    assert len(_Handle.updates) == 1
    sink.close()


def test_a_stop_button_that_cannot_act_during_the_cell_says_so(in_kernel):
    """Before ipykernel 7.4 (no subshell here either) a click waits for the cell: a note says so."""
    sink = make_dashboard("widget", stop=lambda: None)
    sink.handle(ev.RunStarted(run_id=35, target="job", start_method="fork", nprocs=1))
    run = sink.dashboard._view._runs[35]
    assert run.stop_note.layout.display == "" and "interrupt the kernel" in run.stop_note.value
    assert "nbmp-stop-note" in run.stop_note._dom_classes
    sink.handle(ev.RunFinished(run_id=35, ok=True))
    assert run.stop_note.layout.display == "none"
    sink.close()


def test_failures_are_appended_so_an_opened_traceback_stays_open(in_kernel):
    d = widget_dashboard()
    d.handle(ev.RunStarted(run_id=41, target="job", start_method="fork", nprocs=2))
    d.handle(ev.WorkerRaised(run_id=41, index=0, exc_type="KeyError", message="'a'", traceback="tb a"))
    d._tick()
    accordion = d._view._runs[41].failures
    first = accordion.children[0]
    accordion.selected_index = 0  # the user opened it
    d.handle(ev.WorkerRaised(run_id=41, index=1, exc_type="KeyError", message="'b'", traceback="tb b"))
    d._tick()
    assert accordion.children[0] is first and len(accordion.children) == 2
    assert accordion.selected_index == 0
    d.close()


def test_stop_button_calls_the_runs_stop_callback(in_kernel):
    stopped = []
    sink = make_dashboard("widget", stop=lambda: stopped.append(True))
    sink.handle(ev.RunStarted(run_id=51, target="job", start_method="fork", nprocs=1))
    button = sink.dashboard._view._runs[51].stop_button
    assert button.layout.display == "" and not button.disabled
    button.click()
    assert stopped == [True] and button.disabled
    sink.handle(ev.RunFinished(run_id=51, ok=False))
    assert button.layout.display == "none"
    assert dashboard_threads() == []


def test_hand_made_widget_dashboard_gets_each_runs_stop_button(in_kernel):
    d = nbmp.Dashboard("widget")
    stopped = []
    try:
        sink = make_dashboard(False, stop=lambda: stopped.append(1))
        sink.handle(ev.RunStarted(run_id=61, target="job", start_method="fork", nprocs=1))
        d._view._runs[61].stop_button.click()
        assert stopped == [1]
        sink.handle(ev.RunFinished(run_id=61, ok=False))
    finally:
        d.close()


def test_forgotten_runs_leave_the_widget_tree(in_kernel):
    d = widget_dashboard()
    d.state.max_finished_runs = 1
    for rid in (71, 72, 73):
        for event in run_events(rid, nprocs=1):
            d.handle(event)
    assert list(d._view._runs) == [73]
    assert len(d._view._runs_box.children) == 1


def test_widget_request_without_ipywidgets_names_the_extra(monkeypatch):
    monkeypatch.setattr(_choice, "_widgets_importable", lambda: False)
    with pytest.raises(ImportError, match=r"pip install 'nbmp\[notebook\]'"):
        resolve_frontend("widget")
    monkeypatch.setattr(sys, "stderr", TTY())
    assert resolve_frontend(None) == "text"


def test_only_the_view_imports_ipywidgets_and_import_nbmp_stays_light():
    import pathlib

    from helpers import run_main

    widgets_dir = pathlib.Path(nbmp.__file__).parent
    importers = sorted(p.name for p in widgets_dir.rglob("*.py") if "import ipywidgets" in p.read_text())
    assert importers == ["_ipywidgets.py"]
    loaded = run_main("import sys, nbmp\n"
                      "print(sorted(m for m in ('ipywidgets', 'psutil', 'IPython', 'nbmp.widgets._ipywidgets')"
                      " if m in sys.modules))")
    assert loaded.strip() == "[]"


def test_text_dashboard_has_no_widget():
    d = nbmp.Dashboard("text", stream=io.StringIO())
    assert d.widget is None and "text" in repr(d)
    d.close()
