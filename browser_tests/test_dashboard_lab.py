"""The quickstart's live dashboard in a real JupyterLab, in a real browser: it renders,
shows one row per worker, changes while the workers run (table and plots), and ends as
a static snapshot that the saved notebook keeps. A Pool's timeline and a failing run in
a notebook of the test's own."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Locator

from notebook import DashboardView, NotebookPage, notebook_json, wait_until

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "img" / "dashboard-jupyterlab.png"  # shown in docs/dashboard.md
POOL_SCREENSHOT = ROOT / "docs" / "img" / "dashboard-pool-timeline.png"  # likewise
NPROCS = 3  # the quickstart's dashboard cell: spawn(train, args=(5,), nprocs=3, dashboard=True)


@pytest.mark.timeout(180)  # covers set-up and teardown: lab start (<= 60 s), the run, shutdown
def test_quickstart_dashboard_is_live_in_jupyterlab(notebook: NotebookPage) -> None:
    notebook.open("notebooks/quickstart.ipynb")
    notebook.hide_left_sidebar()
    notebook.run_all_cells()
    cell = notebook.code_cell(containing="dashboard=True")
    board = DashboardView(cell)

    running = board.wait_for_states(["running"] * NPROCS)
    assert [row["worker"] for row in running] == [str(i) for i in range(NPROCS)]
    assert {int(row["pid"]) for row in running} <= _server_descendants(notebook), \
        f"the dashboard's pids are not processes under the lab server (its kernel's workers): {running}"
    before, points_before = board.text(), board.plot_points("rss")
    assert len(points_before) == NPROCS and len(board.plot_points("cpu")) == NPROCS
    board.open_output(0)
    wait_until(board.visible_output, lambda text: "step 1/5" in text, "worker 0's output in its open section", 30)

    # Let them run a step or two (each step is 0.5 s), then look again, still mid-run.
    wait_until(lambda: cell.locator(".jp-OutputArea-output").all_text_contents(),
               lambda outputs: any("step 2/5" in text for text in outputs), "a worker's 'step 2/5' line", 30)
    after = board.text()
    assert notebook.is_running(cell), "the cell ended before the second look: the run is too short to watch"
    assert after != before, f"the dashboard did not change while its workers ran:\n{after}"
    points_after = board.plot_points("rss")
    assert sum(points_after) > sum(points_before), f"the plots did not grow: {points_before} -> {points_after}"
    _screenshot_for_the_docs(notebook, cell)

    notebook.wait_until_all_ran()
    wait_until(board.is_snapshot, bool, "the static snapshot in place of the widget", 30)
    done = board.wait_for_states(["done"] * NPROCS)
    assert all(row["exit"] == "0" for row in done), done
    assert f"{NPROCS} done" in board.title()
    assert "worker 2: 5 steps" in cell.text_content()
    assert all(n >= 2 for n in board.plot_points("rss")), board.plot_points("rss")
    final = board.text()
    notebook.page.wait_for_timeout(1000)  # nothing may redraw it once the run is over
    assert board.text() == final and board.rows() == done

    notebook.save()
    saved = notebook.lab.root_dir / "notebooks" / "quickstart.ipynb"
    html = wait_until(lambda: _saved_html(saved, "dashboard=True"), lambda h: "nbmp-snapshot" in h,
                      "the snapshot's text/html in the saved notebook", 30)
    assert "train [fork, 3 workers]" in html and "nbmp-spark-rss" in html and "step 5/5" in html


# A notebook of the test's own: a Pool whose chunks leave a worker idle, then a failing spawn.
POOL_CELLS = [
    "import nbmp\n"
    "def work(x):\n"
    "    n = 0\n"
    "    for k in range(1_500_000):\n"
    "        n += k % 7\n"
    "    return x",
    "with nbmp.Pool(4) as pool:\n"
    "    squares = pool.map(work, range(12), chunksize=5, progress=True)",
    "def check(i):\n"
    "    if i == 1:\n"
    "        raise ValueError(f'worker {i} found a bad value')\n"
    "    return i\n"
    "nbmp.spawn(check, nprocs=2, dashboard=True)",
]


@pytest.mark.timeout(180)
def test_pool_timeline_and_a_failed_run_in_jupyterlab(notebook: NotebookPage) -> None:
    path = notebook.lab.root_dir / "notebooks" / "timeline.ipynb"
    path.write_text(json.dumps(notebook_json(POOL_CELLS)))
    notebook.open("notebooks/timeline.ipynb")
    notebook.hide_left_sidebar()
    notebook.run_all_cells()
    pool_cell, failing_cell = notebook.code_cell("pool.map"), notebook.code_cell("def check")
    pool_board, failed_board = DashboardView(pool_cell), DashboardView(failing_cell)

    outputs = failing_cell.locator(".jp-OutputArea-output")
    error = wait_until(outputs.all_text_contents, lambda texts: any("ProcessRaisedException" in t for t in texts),
                       "the failing cell's error", 120)
    wait_until(pool_board.is_snapshot, bool, "the Pool's snapshot", 30)
    timeline = pool_board.root.locator(".nbmp-timeline")
    assert timeline.locator("img.nbmp-timeline-plot").count() == 1
    assert "1 of 4 workers got no task" in timeline.inner_text()
    assert "(12 done)" in timeline.inner_text()
    pool_cell.evaluate("el => el.scrollIntoView({block: 'start'})")
    pool_cell.screenshot(path=str(POOL_SCREENSHOT))

    assert any("ProcessRaisedException" in text and "in check" in text and "worker 1 found a bad value" in text
               for text in error), error  # the worker's own frame is in the error the user sees
    wait_until(failed_board.is_snapshot, bool, "the failed run's snapshot", 30)
    assert "ValueError: worker 1 found a bad value" in failed_board.text()


def _saved_html(path: Path, containing: str) -> str:
    """The text/html outputs, as saved, of the code cell whose source contains ``containing``."""
    cells = [c for c in json.loads(path.read_text())["cells"] if containing in "".join(c["source"])]
    return "".join("".join(out.get("data", {}).get("text/html", "")) for c in cells for out in c.get("outputs", []))


def _server_descendants(notebook: NotebookPage) -> set:
    assert notebook.lab.process is not None
    return {p.pid for p in psutil.Process(notebook.lab.process.pid).children(recursive=True)}


def _screenshot_for_the_docs(notebook: NotebookPage, cell: Locator) -> None:
    cell.evaluate("el => el.previousElementSibling.scrollIntoView({block: 'start'})")  # from its heading
    notebook.page.screenshot(path=str(SCREENSHOT))
