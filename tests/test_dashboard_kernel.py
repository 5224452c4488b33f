"""What a notebook user sees of the dashboard, over the Jupyter protocol in a real kernel:
the widget opens, is updated several times while the cell is blocked on real workers,
shows the worker's exception, keeps its final state, and leaves no thread behind."""

import json

import pytest

pytestmark = pytest.mark.kernel

# A small stand-in for spawn's event feeding (spawn itself emits these events): real
# nbmp workers for about two seconds; worker 1 raises and reports its traceback.
DRIVER = '''
import os, time, traceback, threading
import nbmp
from nbmp._base import events as ev

def work(i, q):
    try:
        t = time.monotonic()
        while time.monotonic() - t < 2.0:
            pass
        if i == 1:
            raise ValueError("worker one is broken")
        print(f"worker {i} done")
    except BaseException as e:
        q.put((i, type(e).__name__, str(e), traceback.format_exc()))
        raise SystemExit(1)

def drive(sink, nprocs=3, run_id=1):
    q = nbmp.SimpleQueue()
    sink.handle(ev.RunStarted(run_id=run_id, target="work", start_method=nbmp.get_start_method(), nprocs=nprocs))
    procs = [nbmp.Process(target=work, args=(i, q)) for i in range(nprocs)]
    for i, p in enumerate(procs):
        p.start()
        sink.handle(ev.WorkerStarted(run_id=run_id, index=i, pid=p.pid))
    for i, p in enumerate(procs):
        p.join(60)
        sink.handle(ev.WorkerOutput(run_id=run_id, index=i, stream="stdout", line=f"worker {i} exiting"))
        if p.exitcode != 0:
            index, typ, msg, tb = q.get()
            sink.handle(ev.WorkerRaised(run_id=run_id, index=index, exc_type=typ, message=msg, traceback=tb))
        sink.handle(ev.WorkerExited(run_id=run_id, index=i, exitcode=p.exitcode))
    sink.handle(ev.RunFinished(run_id=run_id, ok=all(p.exitcode == 0 for p in procs)))
    q.close()
'''


def widget_states(cell):
    """Model names by comm id, and (message type, model name, state) of every comm_open
    and comm_msg, in order."""
    opened = {m["content"]["comm_id"]: m["content"]["data"]["state"].get("_model_name")
              for m in cell.messages if m["msg_type"] == "comm_open"}
    states = [(m["msg_type"], opened.get(m["content"]["comm_id"]), m["content"]["data"].get("state", {}))
              for m in cell.messages if m["msg_type"] in ("comm_open", "comm_msg")]
    return opened, states


def test_dashboard_is_live_while_the_cell_blocks_and_keeps_its_final_state(kernel):
    kernel.run(DRIVER).raise_for_error()
    cell = kernel.run("d = nbmp.Dashboard()\nd.display()\ndrive(d)\nprint(d.frontend)")
    cell.raise_for_error()
    assert cell.stdout.strip().endswith("widget")
    opened, states = widget_states(cell)
    assert "VBoxModel" in opened.values() and "ButtonModel" in opened.values()
    updates = [(name, s) for kind, name, s in states if kind == "comm_msg"]
    assert any("application/vnd.jupyter.widget-view+json" in m["content"].get("data", {})
               for m in cell.messages if m["msg_type"] == "display_data")
    # Sent by the dashboard's thread while the cell was blocked in join(): the table
    # showed running workers, with CPU and memory sampled from the parent.
    live_tables = [s["value"] for name, s in updates if name == "HTMLModel" and "running" in s.get("value", "")
                   and "<table" in s["value"]]
    assert len(live_tables) >= 3, f"only {len(live_tables)} live updates"
    assert any("MiB" in table for table in live_tables)
    texts = json.dumps([s for _, _, s in states])
    assert "worker 1" in texts and "ValueError: worker one is broken" in texts
    assert "raise ValueError" in texts  # the traceback itself, in the failures accordion
    final = [m for m in cell.messages if m["msg_type"] == "update_display_data"][-1]["content"]["data"]["text/plain"]
    assert "2 done, 1 failed" in final and "worker 1 raised ValueError: worker one is broken" in final

    after = kernel.run("import threading\n"
                       "print(sorted(t.name for t in threading.enumerate() if 'nbmp' in t.name))\n"
                       "print(nbmp.active_children())\n"
                       "print(d.state.runs[1].counts())")
    after.raise_for_error()
    assert after.stdout.splitlines() == ["[]", "[]",
                                         "{'starting': 0, 'running': 0, 'done': 2, 'failed': 1, 'killed': 0}"]
    # The final state stays: nothing was closed or cleared after the run.
    assert not any(m["content"]["data"].get("method") == "close" for m in cell.messages
                   if m["msg_type"] == "comm_msg")


def test_automatic_run_dashboard_in_a_kernel_is_a_widget(kernel):
    kernel.run(DRIVER).raise_for_error()
    cell = kernel.run("sink = nbmp.widgets.make_dashboard(None, stop=lambda: None)\n"
                      "drive(sink, nprocs=2, run_id=2)\n"
                      "print(type(sink.dashboard._view).__name__)")
    cell.raise_for_error()
    assert cell.stdout.strip().endswith("WidgetView")
    opened, states = widget_states(cell)
    assert "FloatProgressModel" in opened.values()
    assert any(name == "FloatProgressModel" and s.get("value") == 1.0 for _, name, s in states)


def test_text_dashboard_in_a_kernel_prints_the_summary(kernel):
    kernel.run(DRIVER).raise_for_error()
    cell = kernel.run("for w in list(nbmp.widgets._dashboard._watchers):\n    w.close()  # earlier tests' dashboards\n"
                      "nbmp.set_dashboard('text')\n"
                      "drive(nbmp.widgets.make_dashboard(None), nprocs=2, run_id=3)\n"
                      "nbmp.set_dashboard(None)")
    cell.raise_for_error()
    assert not any(m["msg_type"] == "comm_open" for m in cell.messages)
    assert "nbmp work [" in cell.stderr and "worker 1 raised ValueError: worker one is broken" in cell.stderr


STOPPABLE = '''
stopped = []
procs = [nbmp.Process(target=time.sleep, args=(60,)) for _ in range(2)]
def stop():
    stopped.append(threading.current_thread().name)
    for p in procs:
        p.terminate()
sink = nbmp.widgets.make_dashboard("widget", stop=stop)
sink.handle(ev.RunStarted(run_id=9, target="sleeper", start_method="fork", nprocs=2))
for i, p in enumerate(procs):
    p.start()
    sink.handle(ev.WorkerStarted(run_id=9, index=i, pid=p.pid))
for i, p in enumerate(procs):
    p.join(60)  # the cell is blocked here until Stop is clicked
    sink.handle(ev.WorkerExited(run_id=9, index=i, exitcode=p.exitcode, killed_by_us=bool(stopped)))
sink.handle(ev.RunFinished(run_id=9, ok=False))
print(stopped, [p.exitcode for p in procs], sink.dashboard.state.runs[9].counts()["killed"])
'''


def test_stop_button_works_while_the_cell_is_blocked(kernel):
    import time

    kernel.run(DRIVER).raise_for_error()
    client = kernel.client
    msg_id = client.execute(STOPPABLE)
    button, texts, deadline = None, [], time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] == "comm_open" and content["data"]["state"].get("_model_name") == "ButtonModel":
            button = content["comm_id"]
        elif msg["msg_type"] == "comm_msg" and button and "running" in json.dumps(content):
            # The workers run and the cell is blocked in join(): click Stop as a front end would.
            client.shell_channel.send(client.session.msg(
                "comm_msg", {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}}))
            button = None
        elif msg["msg_type"] == "stream":
            texts.append(content["text"])
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    out = "".join(texts)
    assert "[-15, -15] 2" in out, out
    assert "subshell" in out  # handled in the subshell while the main thread was blocked
    names = kernel.run("print(sorted(t.name for t in threading.enumerate()))").stdout
    assert "subshell" not in names and "nbmp" not in names


def test_a_pool_maps_dashboard_ends_as_a_static_snapshot_with_its_timeline(kernel):
    cell = kernel.run("import nbmp, time\n"
                      "with nbmp.Pool(2) as pool:\n"
                      "    out = pool.map(time.sleep, [0.05] * 12, chunksize=2, progress=True)\n"
                      "print(len(out))")
    cell.raise_for_error()
    shown = [m for m in cell.messages if m["msg_type"] == "display_data"]
    assert "application/vnd.jupyter.widget-view+json" in shown[0]["content"]["data"]
    final = [m for m in cell.messages if m["msg_type"] == "update_display_data"][-1]["content"]
    assert final["transient"]["display_id"] == shown[0]["content"]["transient"]["display_id"]
    assert set(final["data"]) == {"text/html", "text/plain"}  # no widget: nothing says "model not found"
    html = final["data"]["text/html"]
    assert "nbmp-snapshot" in html and "map(sleep) [fork, 2 workers]" in html
    assert "nbmp-timeline-plot" in html and "(12 done)" in html and html.count("nbmp-spark-cpu") == 2


def test_the_snapshot_is_what_a_saved_notebook_keeps(tmp_path):
    """Executed by nbclient (which applies display updates as a front end does) and saved."""
    import nbformat
    from nbclient import NotebookClient

    from kernel import ROOT
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import nbmp, time\n"
        "def work(i):\n"
        "    time.sleep(1.0)\n"
        "    return i\n"
        "nbmp.spawn(work, nprocs=2, dashboard='widget')")])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
    nbformat.write(nb, str(tmp_path / "saved.ipynb"))
    saved = nbformat.read(str(tmp_path / "saved.ipynb"), as_version=4)
    outputs = saved.cells[0].outputs
    displays = [out for out in outputs if out.output_type == "display_data"]
    assert len(displays) == 1 and "application/vnd.jupyter.widget-view+json" not in displays[0].data
    html = displays[0].data["text/html"]
    assert "nbmp-snapshot" in html and "2 done" in html and "nbmp-spark-rss" in html
    assert "work [fork, 2 workers]" in displays[0].data["text/plain"]
    assert any(out.output_type == "execute_result" and "[0, 1]" in out.data["text/plain"] for out in outputs)
