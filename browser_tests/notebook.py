"""A notebook open in JupyterLab, as the test reads and drives it through the page: by
JupyterLab's stable CSS classes (``jp-*``) and nbmp's dashboard hooks (``nbmp-*``, set
in nbmp/widgets/_ipywidgets.py), never by layout."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, TypeVar

from playwright.sync_api import Locator, Page

from lab import LabServer

T = TypeVar("T")

LOAD_TIMEOUT = 60  # seconds for JupyterLab's page and its kernel to come up
RUN_TIMEOUT = 60  # seconds for the notebook's cells to finish

# The open notebook's kernel is connected and idle. (The toolbar's indicator says "idle"
# before any kernel exists; running cells then opens a "Select Kernel" dialog.)
_KERNEL_READY_JS = """() => {
  const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
  return !!kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
}"""

# One dict per worker row, keyed by the table's own column names (worker, pid, state...).
_ROWS_JS = """board => {
  const table = board.querySelector('.nbmp-workers table');
  if (!table) return [];
  const names = Array.from(table.querySelectorAll('th')).map(th => th.textContent.trim());
  return Array.from(table.querySelectorAll('tr')).filter(tr => tr.querySelector('td')).map(tr =>
    Object.fromEntries(Array.from(tr.querySelectorAll('td')).map((td, i) => [names[i], td.textContent.trim()])));
}"""


def wait_until(probe: Callable[[], T], ok: Callable[[T], bool], what: str, timeout: float) -> T:
    """Poll ``probe`` until ``ok`` accepts its value, and return that value; fail naming
    ``what`` and showing the last value if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last seen: {value!r}")
        time.sleep(0.1)


class NotebookPage:
    def __init__(self, page: Page, lab: LabServer) -> None:
        self.page, self.lab = page, lab
        self.console_errors: List[str] = []
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))

    def open(self, path: str) -> None:
        """Open the notebook at ``path`` (relative to the server's root) and wait for its kernel."""
        self.page.goto(self.lab.url(f"/lab/tree/{path}"), timeout=LOAD_TIMEOUT * 1000)
        self.page.locator(".jp-NotebookPanel .jp-CodeCell").first.wait_for(timeout=LOAD_TIMEOUT * 1000)
        self.page.wait_for_function(_KERNEL_READY_JS, timeout=LOAD_TIMEOUT * 1000)

    def hide_left_sidebar(self) -> None:
        """More room for the notebook (and the screenshot) than the file browser leaves."""
        self.page.evaluate("() => { window.jupyterapp.shell.collapseLeft(); }")

    def save(self) -> None:
        """Save the notebook, as Ctrl+S would (outputs included)."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")

    def run_all_cells(self) -> None:
        # The lab runs with expose_app_in_browser: a command id is steadier than menu labels.
        # Not awaited: the command's promise settles only when every cell has run.
        self.page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    def code_cell(self, containing: str) -> Locator:
        """The one code cell whose source contains ``containing``."""
        cell = self.page.locator(".jp-NotebookPanel .jp-CodeCell").filter(
            has=self.page.locator(".jp-InputArea-editor", has_text=containing))
        cell.wait_for(timeout=LOAD_TIMEOUT * 1000)
        return cell

    def prompts(self) -> List[str]:
        """Every code cell's execution prompt: "[ ]:", "[*]:" while queued or running, "[7]:"."""
        return [text.strip() for text in self.page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt")
                .all_text_contents()]

    @staticmethod
    def is_running(cell: Locator) -> bool:
        return "*" in cell.locator(".jp-InputPrompt").text_content()

    def wait_until_all_ran(self) -> None:
        """Every code cell has a number and the kernel is idle."""
        wait_until(self.prompts, lambda prompts: bool(prompts) and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts),
                   "every cell to have run", RUN_TIMEOUT)
        wait_until(self.lab.kernel_states, lambda states: states == ["idle"], "the kernel to be idle", RUN_TIMEOUT)

    def save_diagnostics(self, folder: Path) -> List[Path]:
        """The page's DOM, a screenshot and the browser console's errors, for a failed run."""
        folder.mkdir(parents=True, exist_ok=True)
        dom, shot, console = folder / "page.html", folder / "page.png", folder / "console-errors.txt"
        dom.write_text(self.page.content())
        self.page.screenshot(path=str(shot))
        console.write_text("\n".join(self.console_errors))
        return [dom, shot, console]


class DashboardView:
    """nbmp's dashboard widget as rendered in a cell's output."""

    def __init__(self, cell: Locator) -> None:
        self.root = cell.locator(".nbmp-dashboard")

    def rows(self) -> List[Dict[str, str]]:
        if self.root.count() != 1:
            return []
        return self.root.evaluate(_ROWS_JS)

    def text(self) -> str:
        return self.root.text_content() or ""

    def title(self) -> str:
        return self.root.locator(".nbmp-title").text_content() or ""

    def open_output(self, index: int) -> None:
        """Click a worker's output section open, as a user would."""
        self.root.locator(".nbmp-outputs").get_by_text(f"worker {index} output", exact=True).click()

    def visible_output(self) -> str:
        """The text of the output sections that are open (innerText skips hidden ones)."""
        return self.root.locator(".nbmp-outputs").inner_text()

    def plot_points(self, kind: str) -> List[int]:
        """How many samples each worker's ``kind`` plot ("cpu" or "rss") draws, in row order."""
        if self.root.count() != 1:
            return []
        return [int(n) for n in self.root.locator(f".nbmp-workers .nbmp-spark-{kind}").evaluate_all(
            "els => els.map(el => el.getAttribute('data-points'))")]

    def is_snapshot(self) -> bool:
        """The static copy (html, no widget) has replaced the live widget."""
        return self.root.count() == 1 and "nbmp-snapshot" in (self.root.get_attribute("class") or "")

    def wait_for_states(self, states: List[str], timeout: float = RUN_TIMEOUT) -> List[Dict[str, str]]:
        """Wait until the rows' states are ``states``, in worker order; return the rows."""
        return wait_until(self.rows, lambda rows: [row["state"] for row in rows] == states,
                          f"dashboard rows in states {states}", timeout)


def notebook_json(cells: List[str]) -> Dict[str, Any]:
    """An nbformat 4 notebook of code cells with these sources, for the Python 3 kernel."""
    return {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                       "source": source} for source in cells],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}
