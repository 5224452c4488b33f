"""The runnable examples of the docs pages (``docs/**/*.md``) run, each in a fresh
interpreter, and print what the page says they print.

The convention, in a page: an HTML comment ``<!-- run -->`` on the line before a
```` ```python ```` fence marks the block as runnable; a ```` ```text ```` block right
after it (blank lines between allowed) is its expected stdout, compared line by line
with trailing spaces dropped. A block that imports torch is skipped where torch is
not installed.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from typing import List, NamedTuple, Optional

import pytest

from helpers import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
# Pages that must have at least one runnable example.
MIGRATION_PAGES = {"docs/migrating/multiprocessing.md", "docs/migrating/torch.md", "docs/migrating/mindspore.md",
                   "docs/migrating/torch_xla.md"}

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


def _lines(text: str) -> List[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def test_every_migration_page_has_a_runnable_example():
    assert MIGRATION_PAGES <= {e.page for e in ALL}
    assert all(e.expected is not None for e in ALL), "every runnable example shows its output"


@pytest.mark.parametrize("example", ALL, ids=[f"{e.page[len('docs/'):]}:{e.line}" for e in ALL])
def test_example_runs_and_prints_what_the_page_says(example):
    if re.search(r"^\s*import torch\b", example.code, re.MULTILINE) and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    out = run_main(example.code)
    assert _lines(out) == _lines(example.expected or ""), f"{example.page}:{example.line} printed:\n{out}"
