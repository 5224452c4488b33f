"""Debian's Chromium driven by Playwright. Never ``playwright install``: that downloads a
browser build of Playwright's own, which this project's machines cannot reach;
``make browser-test`` installs /usr/bin/chromium with apt-get instead."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import BrowserContext, Playwright

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 900}

# The network is closed: without the background-networking flags Chromium keeps trying
# Google's services, each refused attempt slowing the page down. As root Chromium
# refuses to start without --no-sandbox.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def launch(playwright: Playwright, profile: Path) -> BrowserContext:
    """A headless Chromium with a fresh profile (``profile``, an empty folder).

    Playwright takes the profile folder itself (it refuses ``--user-data-dir`` among
    the arguments), hence a persistent context: one browser, one context.
    """
    if not os.access(CHROMIUM, os.X_OK):
        raise FileNotFoundError(f"{CHROMIUM} is missing: run `make browser-test`, which installs Debian's "
                                f"chromium (or `apt-get install chromium` as root)")
    return playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, chromium_sandbox=False, args=FLAGS,
        viewport=VIEWPORT)
