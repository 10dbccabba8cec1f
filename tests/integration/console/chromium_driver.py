"""The browser of the console's tests: Debian's Chromium, headless with a fresh profile,
driven by Selenium through Debian's chromium-driver (scripts/setup-system.sh installs both).
Shared by tests/integration/console/test_browser.py (a local cluster) and
tests/e2e/test_13_console.py (the console pod on kind, through a port-forward)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (scripts/setup-system.sh)",
)

__all__ = ["By", "WebDriverWait", "chromium", "needs_chromium", "wait_for"]


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Chromium with its profile in `profile` (empty: no cookies from before),
    quit on exit."""
    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, css: str, timeout: float = 30) -> Any:
    """The first element matching `css`, once the page shows one."""
    return WebDriverWait(driver, timeout).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, css))
    )
