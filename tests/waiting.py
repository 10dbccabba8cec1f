"""Waiting on a condition instead of sleeping a fixed time: the one polling loop of the tests."""

from __future__ import annotations

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
