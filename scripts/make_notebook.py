"""Write a notebook from a plain Python file whose cells are separated by ``# %%`` lines
(``# %% [markdown]`` cells hold Markdown in ``#`` comments). A first line
``# requires: torch`` records optional packages the notebook needs (its test skips
without them). The ``.py`` sources in ``notebooks/`` are the ones to edit;
``make notebooks`` regenerates the ``.ipynb``."""

from __future__ import annotations

import sys

import nbformat


def convert(py_path: str) -> None:
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
    nbformat.write(nb, py_path[:-3] + ".ipynb")


if __name__ == "__main__":
    for path in sys.argv[1:]:
        convert(path)
