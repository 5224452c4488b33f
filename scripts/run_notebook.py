"""Execute notebooks headless through a real kernel; fail on any error output.

Usage: python scripts/run_notebook.py NOTEBOOK [NOTEBOOK ...] [--print]

``--print`` prints what each cell printed or returned (``make demo``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def execute(path: str, timeout: int = 300) -> nbformat.NotebookNode:
    """Run every cell of the notebook at ``path``; raise if any cell shows an error."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": ROOT}}).execute()
    errors = [out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"]
    if errors:
        raise RuntimeError(f"{path}: error output: {errors[0].ename}: {errors[0].evalue}")
    return nb


def cell_texts(nb: nbformat.NotebookNode) -> List[str]:
    """The plain text each code cell showed (streams and results), in order."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", "") + "\n")
        texts.append("".join(parts))
    return texts


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--print", action="store_true", help="print each cell's output")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = execute(path)
        if args.print:
            print(f"=== {path}")
            for i, (cell, text) in enumerate(zip([c for c in nb.cells if c.cell_type == "code"], cell_texts(nb)), 1):
                print(f"--- [{i}] {cell.source.splitlines()[0] if cell.source else ''}")
                print(text, end="")
        else:
            print(f"ok {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
