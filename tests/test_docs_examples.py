"""The runnable examples of the README and the docs pages (``docs/**/*.md``) run, each in a
fresh interpreter, and print what the page says they print.

The convention, in a page: an HTML comment ``<!-- run -->`` on the line before a
```` ```python ```` fence marks the block as runnable; a ```` ```text ```` block right
after it (blank lines between allowed) is its expected output, compared line by line
with trailing spaces dropped: what it prints, then, as a notebook cell shows it, the repr
of a last line that is an expression (unless None). ``<!-- sketch -->`` marks a block that
is not run (it needs a kernel, a cluster, a GPU, or shows a fragment); every ``python``
block carries one of the two. A block that imports torch is skipped where torch is not
installed.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import re
import subprocess
import sys
from typing import List, NamedTuple, Optional

import pytest

from helpers import TIMEOUT, run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = ["README.md"] + sorted(os.path.relpath(path, ROOT)
                               for path in glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
# Pages that must have at least one runnable example.
MIGRATION_PAGES = {"docs/migrating/multiprocessing.md", "docs/migrating/torch.md", "docs/migrating/mindspore.md",
                   "docs/migrating/torch_xla.md"}

_FENCE = re.compile(r"^(?P<mark>.*)\n```python\n", re.MULTILINE)
_BLOCK = re.compile(r"<!-- run -->\n```python\n(?P<code>.*?)\n```\n(?:\s*\n)*(?:```text\n(?P<out>.*?)\n```)?",
                    re.DOTALL)


class Example(NamedTuple):
    page: str
    line: int
    code: str
    expected: Optional[str]


def examples(page: str) -> List[Example]:
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    return [Example(page, text.count("\n", 0, m.start()) + 1, m["code"], m["out"]) for m in _BLOCK.finditer(text)]


ALL = [example for page in PAGES for example in examples(page)]


def as_cell(code: str) -> str:
    """``code`` with its last line, if an expression, shown as a notebook cell shows it."""
    body = ast.parse(code).body
    if not body or not isinstance(body[-1], ast.Expr):
        return code
    lines = code.splitlines()
    start, end = body[-1].lineno - 1, body[-1].end_lineno or body[-1].lineno
    shown = "\n".join(lines[start:end])
    return "\n".join(lines[:start] + [f"_shown = ({shown})", "if _shown is not None: print(repr(_shown))"]
                     + lines[end:])


def _lines(text: str) -> List[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def _matches(printed: List[str], expected: List[str]) -> bool:
    """Line by line; ``...`` in an expected line stands for any text (a pid, a size)."""
    return len(printed) == len(expected) and all(
        re.fullmatch(".*".join(map(re.escape, want.split("..."))), got) for got, want in zip(printed, expected))


def test_every_python_block_is_run_or_marked_as_a_sketch():
    unmarked = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        unmarked += [f"{page}:{text.count(chr(10), 0, m.start()) + 2}" for m in _FENCE.finditer(text)
                     if m["mark"].strip() not in ("<!-- run -->", "<!-- sketch -->")]
    assert not unmarked, "python blocks marked neither <!-- run --> nor <!-- sketch -->: " + ", ".join(unmarked)


def test_every_migration_page_has_a_runnable_example():
    assert MIGRATION_PAGES <= {e.page for e in ALL}
    assert all(e.expected is not None for e in ALL), "every runnable example shows its output"


@pytest.mark.parametrize("example", ALL, ids=[f"{e.page.removeprefix('docs/')}:{e.line}" for e in ALL])
def test_example_runs_and_prints_what_the_page_says(example, tmp_path):
    if re.search(r"^\s*(?:import|from) [^\n]*\btorch\b", example.code, re.MULTILINE) and \
            importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    if "if __name__ ==" in example.code:
        # A script, run from its file as a reader would: a fork server (3.14's default start
        # method) imports the script's functions from it.
        script = tmp_path / "example.py"
        script.write_text(example.code)
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT,
                              env={**os.environ, "PYTHONPATH": ROOT})
        assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        out = proc.stdout
    else:  # a notebook cell
        out = run_main(as_cell(example.code))
    assert _matches(_lines(out), _lines(example.expected or "")), f"{example.page}:{example.line} printed:\n{out}"
