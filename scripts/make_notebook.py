"""Write a notebook from a plain Python file whose cells are separated by ``# %%`` lines
(``# %% [markdown]`` cells hold Markdown in ``#`` comments), executed in a real kernel with
its outputs kept. A first line ``# requires: torch`` records optional packages the notebook
needs (it is then written without outputs where they are missing, and its test skips). The
``.py`` sources in ``notebooks/`` are the ones to edit; ``make notebooks`` regenerates the
``.ipynb``; ``--no-execute`` writes the cells only.

What changes from run to run (pids, times, memory sizes, addresses) is masked in the kept
outputs, so a regenerated notebook differs only where its source or nbmp's output did.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from typing import Any, List

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VOLATILE = [
    (re.compile(r"\b\d+(?:\.\d+)?(?: ?)(B|KiB|MiB|GiB|TiB)\b"), r"# \1"),
    (re.compile(r"(?<![\w.])\d+\.\d+ ?s\b"), "#s"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)? ?(µs|ms)\b"), r"# \1"),
    (re.compile(r"0x[0-9a-f]{6,}"), "0x#"),
    (re.compile(r"(tcp://[\w.]+:)\d+"), r"\1#"),
]
# pids as nbmp prints them: "pid 123", "process 123", a dashboard row's second column, "123@host"
_PID_TEXT = [re.compile(r"\b(?:pid|process)(?:[ =]|: )?(\d+)"), re.compile(r"^ {2}\d+ +(\d+)[ @]", re.MULTILINE),
             re.compile(r"\b(\d+)@[\w.-]+")]


def convert(py_path: str, execute: bool = True) -> None:
    cells, kind, lines, requires = [], "code", [], []

    def flush() -> None:
        text = "\n".join(lines).strip("\n")
        if text:
            if kind == "markdown":
                text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in text.splitlines())
                cells.append(nbformat.v4.new_markdown_cell(text))
            else:
                cells.append(nbformat.v4.new_code_cell(text))

    with open(py_path) as f:
        source = f.read()
    for line in source.splitlines():
        if line.startswith("# requires:") and not cells and not lines:
            requires = line.split(":", 1)[1].split()
        elif line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        else:
            lines.append(line)
    flush()
    for number, cell in enumerate(cells):
        cell.id = f"cell-{number:02d}"  # stable ids: regenerating changes nothing that did not change
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}, "nbmp": {"requires": requires}})
    if execute and all(importlib.util.find_spec(module) for module in requires):
        nb = executed(nb)
    nbformat.write(nb, py_path[:-3] + ".ipynb")


def executed(nb: Any) -> Any:
    """``nb`` run top to bottom in a real kernel, its outputs masked; raises on an error output."""
    from nbclient import NotebookClient
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
    errors = [out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"]
    if errors:
        raise RuntimeError(f"error output: {errors[0].ename}: {errors[0].evalue}")
    nb.metadata.pop("widgets", None)  # live widget state: the static snapshot after each run is what a reader sees
    nb.metadata.pop("language_info", None)
    for cell in nb.cells:
        outputs = cell.get("outputs", [])  # a cell's output may come in several pieces: its pids are the cell's
        pids = {pid for out in outputs for text in texts(out) for pattern in _PID_TEXT for pid in pattern.findall(text)}
        for out in outputs:
            if "text" in out:
                out.text = mask(out.text, pids)
            for key in [k for k in out.get("data", {}) if k.startswith("text/")]:
                out.data[key] = mask(out.data[key], pids)
    return nb


def texts(out: Any) -> List[str]:
    return [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k == "text/plain"]


def mask(text: str, pids: "set[str]") -> str:
    """``text`` with what differs from run to run replaced by ``#``."""
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    for pid in pids:
        text = re.sub(rf"(?<![\w.]){pid}(?![\w.])", "#", text)
    return text


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if a != "--no-execute"]
    for path in paths:
        convert(path, execute="--no-execute" not in sys.argv)
        print("wrote", path[:-3] + ".ipynb")
