"""What the two browser tests share (tests/test_explorers_browser.py, tests/test_site_browser.py):
Debian's Chromium, driven by Playwright without Playwright's own browser download (it comes from
a CDN that CI cannot reach). Where a piece is missing a test is skipped, except in CI
(``CI=true``), where it fails: ``.ci/run`` installs Chromium, and the test extra the rest."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium's own connections (updates, sync, field trials) would only meet a closed network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def missing(what: str) -> None:
    """Skip (fail in CI) because ``what`` is not there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: CI must run the browser tests (.ci/run installs what they need)")
    pytest.skip(f"{what}: the browser tests need it (pip install -e '.[test]'; apt-get install "
                "chromium)")


def playwright_entry(*packages: str):
    """Playwright's ``sync_playwright``, once ``packages``, Playwright and Chromium are there."""
    for name in packages:
        if importlib.util.find_spec(name) is None:
            missing(f"the Python package {name} is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the Python package playwright is not installed")
    if CHROMIUM is None:
        missing("Debian's chromium is not installed")
    return sync_playwright
