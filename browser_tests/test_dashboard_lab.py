"""The quickstart's live dashboard in a real JupyterLab, in a real browser: it renders,
shows one row per worker, changes while the workers run, and keeps its final state."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Locator

from notebook import DashboardView, NotebookPage, wait_until

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "img" / "dashboard-jupyterlab.png"  # shown in docs/dashboard.md
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
    before = board.text()
    board.open_output(0)
    wait_until(board.visible_output, lambda text: "step 1/5" in text, "worker 0's output in its open section", 30)

    # Let them run a step or two (each step is 0.5 s), then look again, still mid-run.
    wait_until(lambda: cell.locator(".jp-OutputArea-output").all_text_contents(),
               lambda outputs: any("step 2/5" in text for text in outputs), "a worker's 'step 2/5' line", 30)
    after = board.text()
    assert notebook.is_running(cell), "the cell ended before the second look: the run is too short to watch"
    assert after != before, f"the dashboard did not change while its workers ran:\n{after}"
    _screenshot_for_the_docs(notebook, cell)

    notebook.wait_until_all_ran()
    done = board.wait_for_states(["done"] * NPROCS)
    assert all(row["exit"] == "0" for row in done), done
    assert f"{NPROCS} done" in board.title()
    assert "worker 2: 5 steps" in cell.text_content()
    final = board.text()
    notebook.page.wait_for_timeout(1000)  # nothing may redraw it once the run is over
    assert board.text() == final and board.rows() == done


def _server_descendants(notebook: NotebookPage) -> set:
    assert notebook.lab.process is not None
    return {p.pid for p in psutil.Process(notebook.lab.process.pid).children(recursive=True)}


def _screenshot_for_the_docs(notebook: NotebookPage, cell: Locator) -> None:
    cell.evaluate("el => el.previousElementSibling.scrollIntoView({block: 'start'})")  # from its heading
    notebook.page.screenshot(path=str(SCREENSHOT))
