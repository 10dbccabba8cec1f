"""Waiting on a condition instead of sleeping a fixed time: the one polling loop of the tests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Calls `predicate` until it returns something truthy, and returns that.

    Raises AssertionError naming `what` and the last value seen when `timeout` seconds pass:
    a wait that runs out is a test failure that says what never happened.
    """
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}"
            )
        time.sleep(interval)


def wait_node_ready(
    proc: subprocess.Popen[bytes],
    ready_url: str,
    log: Callable[[], str],
    timeout: float = 180.0,
    verify: bool | str = True,
) -> None:
    """Until a node process answers 200 on `ready_url` (its /readyz): the one readiness loop
    of the tests' node helpers. RuntimeError with `log()` when the process exits first or
    `timeout` passes (180 s by default: a loaded 2-core machine is slow).

    Each check may take 5 s: at a load average of 40-50 a node took over a second to
    answer, and every check of a whole minute timed out (CI, test_kcat.py)."""
    import requests  # the unit tests that use wait_until need no HTTP client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"node exited with {proc.returncode}:\n{log()}")
        try:
            if requests.get(ready_url, timeout=5, verify=verify).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"node not ready after {timeout:.0f}s:\n{log()}")
