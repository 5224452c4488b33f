"""Workers' progress bars in a real JupyterLab, in a real browser: while they run, the cell
shows one line holding every worker's bar, redrawn in place (not a pile of redraws); when
they end, each bar's last state as a whole line, and the workers' other lines as printed."""

from __future__ import annotations

import json
import re

import pytest

from notebook import NotebookPage, notebook_json, wait_until

BARS = (
    "import sys, time, nbmp\n"
    "def bar(i):\n"
    "    for k in range(21):\n"
    "        sys.stderr.write(f\"\\r{5 * k:3d}%|{'#' * k}{' ' * (20 - k)}|\")\n"
    "        sys.stderr.flush()\n"
    "        time.sleep(0.25)\n"
    "    sys.stderr.write('\\n')\n"
    "    print('done', i)\n"
    "    return i\n"
    "nbmp.spawn(bar, nprocs=2, dashboard=False)"
)
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'


@pytest.mark.timeout(180)
def test_progress_bars_redraw_in_place_in_jupyterlab(notebook: NotebookPage) -> None:
    path = notebook.lab.root_dir / "notebooks" / "bars.ipynb"
    path.write_text(json.dumps(notebook_json([BARS])))
    notebook.open("notebooks/bars.ipynb")
    notebook.run_all_cells()
    cell = notebook.code_cell("def bar")
    stderr = cell.locator(STDERR)

    def shown() -> str:
        return "\n".join(stderr.all_inner_texts())

    def mid_run(text: str) -> bool:
        return bool(re.search(r"\[0\] +([2-8]\d)%", text)) and "[1] " in text

    text = wait_until(shown, mid_run, "both bars past 20 % in the cell", 60)
    assert notebook.is_running(cell), "the bars ended before the look: the run is too short to watch"
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].count("[0]") == 1 and lines[0].count("[1]") == 1, \
        f"not one line redrawn in place: {text!r}"

    notebook.wait_until_all_ran()
    final = [line.rstrip() for line in shown().splitlines() if line.strip()]
    assert sorted(final) == [f"[{i}] 100%|{'#' * 20}|" for i in range(2)], final
    stdout = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]')
    assert sorted("\n".join(stdout.all_inner_texts()).split()) == sorted("[0] done 0 [1] done 1".split())
    assert "[0, 1]" in cell.locator(".jp-OutputArea-executeResult").inner_text()
