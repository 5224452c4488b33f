"""Every notebook in notebooks/ runs top to bottom in a real kernel with no error output,
and its .ipynb is in step with its .py source."""

import glob
from pathlib import Path
import os
import sys
from typing import List, Tuple

import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import make_notebook  # noqa: E402
from helpers import as_jupyterlab_shows  # noqa: E402
import run_notebook  # noqa: E402

NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))

pytestmark = pytest.mark.kernel


def shown(cell: nbformat.NotebookNode) -> Tuple[List[str], List[str], int]:
    """What a reader sees of a code cell that does not change from run to run: its printed lines
    (sorted: workers' relayed lines come in any order), its results, how many displays it made."""
    outputs = cell.get("outputs", [])
    printed = "".join(out.text for out in outputs if out.output_type == "stream" and out.name == "stdout")
    printed = printed.replace("; its resident memory was # MiB", "")  # not there when no sample came first
    results = [out.data.get("text/plain", "") for out in outputs if out.output_type == "execute_result"]
    return sorted(printed.splitlines()), results, sum(out.output_type == "display_data" for out in outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
@pytest.mark.timeout(300)
def test_notebook_runs_without_errors_and_is_saved_with_what_it_shows(path):
    stored = nbformat.read(path, as_version=4)
    for module in stored.metadata.get("nbmp", {}).get("requires", []):
        pytest.importorskip(module, reason=f"{os.path.basename(path)} needs {module}")
    fresh = make_notebook.executed(nbformat.read(path, as_version=4))  # raises on an error output
    assert any(text.strip() for text in run_notebook.cell_texts(fresh)), "the notebook showed nothing"
    for number, (saved, now) in enumerate(zip(stored.cells, fresh.cells)):
        if saved.cell_type == "code" and not any("is not installed: skipping this cell" in line
                                                 for line in shown(now)[0]):  # saved where it is installed
            assert shown(saved) == shown(now), f"{path}, cell {number}: saved outputs are stale: run `make notebooks`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_matches_its_source(path, tmp_path):
    source = path[:-6] + ".py"
    copy = tmp_path / os.path.basename(source)
    copy.write_text(Path(source).read_text())
    make_notebook.convert(str(copy))
    expected = [c.source for c in nbformat.read(str(copy)[:-3] + ".ipynb", as_version=4).cells]
    assert [c.source for c in nbformat.read(path, as_version=4).cells] == expected, \
        f"{path} is stale: run `make notebooks`"


def test_quickstart_shows_its_results():
    nb = run_notebook.execute(os.path.join(ROOT, "notebooks", "quickstart.ipynb"))
    text = "".join(run_notebook.cell_texts(nb))
    assert "[0, 1, 4, 9, 16, 25, 36, 49]" in text
    assert "2 results from spawned workers" in text
    assert "101 exit code 0" in text
    assert "[2] step 5/5" in text and "'worker 2: 5 steps'" in text  # the dashboard cell
    bars = [out.text for cell in nb.cells if "def bar" in cell.source for out in cell.outputs
            if out.output_type == "stream" and out.name == "stderr"]
    assert sorted(as_jupyterlab_shows("".join(bars))) == [f"[{i}] 100%|##########|" for i in range(2)]  # the bars' cell
