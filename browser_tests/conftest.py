"""Fixtures of the browser test (``make browser-test``): a JupyterLab server over a
temp copy of notebooks/, Chromium through Playwright, and the suite's leftover guard
(tests/leaks.py): no process started here and no /dev/shm entry may outlive the test.
On a failure the server's log, the page's DOM and a screenshot are kept and named."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import sync_playwright

from browser import launch
from lab import LabServer
from notebook import NotebookPage

ROOT = Path(__file__).resolve().parent.parent
DIAGNOSTICS = ROOT / "build" / "browser-test"  # where a failed run leaves its evidence

sys.path.insert(0, str(ROOT / "tests"))
from leaks import PROBES, describe, left_behind, name_own_semaphores, snapshot  # noqa: E402

name_own_semaphores()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    if outcome.get_result().failed:
        item.stash[FAILED] = True  # read by the fixtures' teardown, which runs after this


FAILED = pytest.StashKey[bool]()


def failed(request: pytest.FixtureRequest) -> bool:
    return request.node.stash.get(FAILED, False)


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """Set up first, torn down last: sees the server, kernel, workers and browser gone."""
    before = snapshot(PROBES)
    yield
    leaks = left_behind(before, PROBES)
    assert not leaks, f"the browser test left behind (processes now killed) {describe(leaks)}"


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LabServer]:
    """JupyterLab over a copy of notebooks/: running cells there never rewrites the repo's
    notebooks (JupyterLab saves outputs back)."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "notebooks", root / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    server = LabServer(root, tmp_path / "jupyter")
    try:
        server.start()
        yield server
    finally:
        if failed(request):
            DIAGNOSTICS.mkdir(parents=True, exist_ok=True)
            shutil.copy(server.log_path, DIAGNOSTICS / "server.log")
            print(f"--- jupyter lab's log (also in {DIAGNOSTICS / 'server.log'}):\n{server.log()}")
        survivors = server.stop()
    assert not survivors, f"processes of the lab server outlived it (now killed): {survivors}"


@pytest.fixture
def notebook(lab: LabServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NotebookPage]:
    with sync_playwright() as playwright:
        context = launch(playwright, tmp_path / "chromium-profile")
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(30_000)
            notebook = NotebookPage(page, lab)
            yield notebook
            if failed(request):
                paths = notebook.save_diagnostics(DIAGNOSTICS)
                print("--- the page when the test failed: " + ", ".join(map(str, paths)))
        finally:
            context.close()
