"""The docs name only files that exist: relative Markdown links, and repository paths
written as code (`nbmp/_events.py`, `notebooks/quickstart.py`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE_PATH = re.compile(r"`((?:nbmp|tests|docs|notebooks|scripts|benchmarks|browser_tests|\.ci)/[\w./-]+)`")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page):
    text = page.read_text()
    missing = [link for link in LINK.findall(text)
               if "://" not in link and not link.startswith("mailto:") and not (page.parent / link).exists()]
    missing += [path for path in CODE_PATH.findall(text) if not (ROOT / path.rstrip("/")).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"
